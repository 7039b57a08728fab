//! A Metacontroller emulator: reads the registrations in `manifests/controllers/`, keeps
//! an in-memory cluster, calls the hooks over real HTTP the way Metacontroller does
//! (request shape, v1/v2 keys, `finalizing`, `related` from customize rules) and applies
//! the answers with Metacontroller's rules (protocol reference §§3–5).
//!
//! It fails loudly — an `Err(Violation)` — on everything the real one would reject or
//! loop on: unregistered child types, `ownerReferences` or `status` on a child, unknown
//! top-level fields under strict decoding, a non-200 answer, a status that never settles,
//! and answers that differ for identical requests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value, json};

pub type Violation = String;

/// Plural resource → kind, for the resources our registrations and tests use.
fn kind_of(resource: &str) -> Result<&'static str, Violation> {
    Ok(match resource {
        "configmaps" => "ConfigMap",
        "secrets" => "Secret",
        "services" => "Service",
        "pods" => "Pod",
        "deployments" => "Deployment",
        "statefulsets" => "StatefulSet",
        "ingresses" => "Ingress",
        "apimocks" => "APIMock",
        "monitoredservices" => "MonitoredService",
        "things" => "Thing",
        other => return Err(format!("emulator does not know resource {other:?}")),
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookName {
    Sync,
    Finalize,
    Customize,
}

impl HookName {
    fn key(self) -> &'static str {
        match self {
            HookName::Sync => "sync",
            HookName::Finalize => "finalize",
            HookName::Customize => "customize",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Hook {
    pub path: String,
    pub version: String,
    pub strict: bool,
}

#[derive(Debug, Clone)]
pub struct ChildRule {
    pub api_version: String,
    pub kind: String,
    pub strategy: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControllerType {
    Composite,
    Decorator,
}

/// One CompositeController or DecoratorController.
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub type_: ControllerType,
    pub raw: Value,
    /// Composite: the parent; decorator: the target types.
    pub parents: Vec<(String, String, Value)>,
    pub children: Vec<ChildRule>,
    pub hooks: BTreeMap<HookName, Hook>,
    pub generate_selector: bool,
}

impl Registration {
    pub fn parse(raw: Value) -> Result<Registration, Violation> {
        let kind = raw.get("kind").and_then(Value::as_str).unwrap_or_default();
        let type_ = match kind {
            "CompositeController" => ControllerType::Composite,
            "DecoratorController" => ControllerType::Decorator,
            other => return Err(format!("not a controller registration: kind {other:?}")),
        };
        let name = str_at(&raw, "/metadata/name")?.to_owned();
        let spec = raw.get("spec").ok_or("registration has no spec")?;
        let rule = |value: &Value| -> Result<(String, String, Value), Violation> {
            let api_version = str_at(value, "/apiVersion")?.to_owned();
            let kind = kind_of(str_at(value, "/resource")?)?.to_owned();
            Ok((api_version, kind, value.clone()))
        };
        let parents = match type_ {
            ControllerType::Composite => vec![rule(
                spec.get("parentResource").ok_or("no parentResource")?,
            )?],
            ControllerType::Decorator => spec
                .get("resources")
                .and_then(Value::as_array)
                .ok_or("decorator without resources")?
                .iter()
                .map(rule)
                .collect::<Result<_, _>>()?,
        };
        let child_key = if type_ == ControllerType::Composite {
            "childResources"
        } else {
            "attachments"
        };
        let children = spec
            .get(child_key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let (api_version, kind, raw) = rule(c)?;
                let strategy = raw
                    .pointer("/updateStrategy/method")
                    .and_then(Value::as_str)
                    .unwrap_or("OnDelete")
                    .to_owned();
                Ok(ChildRule {
                    api_version,
                    kind,
                    strategy,
                })
            })
            .collect::<Result<_, Violation>>()?;
        let mut hooks = BTreeMap::new();
        for hook in [HookName::Sync, HookName::Finalize, HookName::Customize] {
            let Some(config) = spec.pointer(&format!("/hooks/{}", hook.key())) else {
                continue;
            };
            let version = config
                .get("version")
                .and_then(Value::as_str)
                .unwrap_or("v1")
                .to_owned();
            let webhook = config.get("webhook").ok_or("hook without webhook")?;
            let path = match webhook.get("url").and_then(Value::as_str) {
                Some(url) => url_path(url)?,
                None => webhook
                    .get("path")
                    .and_then(Value::as_str)
                    .ok_or("webhook needs url, or service and path")?
                    .to_owned(),
            };
            let mode = webhook
                .get("responseUnMarshallMode")
                .and_then(Value::as_str);
            let strict = match mode {
                Some("strict") => true,
                Some("loose") => false,
                _ => version == "v2",
            };
            hooks.insert(
                hook,
                Hook {
                    path,
                    version,
                    strict,
                },
            );
        }
        Ok(Registration {
            name,
            type_,
            generate_selector: spec
                .get("generateSelector")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            raw,
            parents,
            children,
            hooks,
        })
    }

    fn child_rule(&self, api_version: &str, kind: &str) -> Option<&ChildRule> {
        self.children
            .iter()
            .find(|c| c.api_version == api_version && c.kind == kind)
    }

    fn finalizer(&self) -> String {
        match self.type_ {
            ControllerType::Composite => {
                format!("metacontroller.io/compositecontroller-{}", self.name)
            }
            ControllerType::Decorator => {
                format!("metacontroller.io/decoratorcontroller-{}", self.name)
            }
        }
    }
}

fn url_path(url: &str) -> Result<String, Violation> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("bad hook url {url}"))?;
    Ok(rest
        .find('/')
        .map_or_else(|| "/".to_owned(), |i| rest[i..].to_owned()))
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> Result<&'a str, Violation> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing {pointer}"))
}

pub fn load_registrations(dir: &Path) -> Result<Vec<Registration>, Violation> {
    let mut found = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    entries.sort();
    for path in entries {
        for document in super::read_yaml_documents(&path) {
            found.push(Registration::parse(document)?);
        }
    }
    Ok(found)
}

/// (apiVersion, kind, namespace, name)
pub type Key = (String, String, String, String);

pub fn key_of(object: &Value) -> Key {
    let field = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        field("/apiVersion"),
        field("/kind"),
        field("/metadata/namespace"),
        field("/metadata/name"),
    )
}

/// Everything that happened in one round, for assertions and messages.
#[derive(Debug, Default, Clone)]
pub struct RoundReport {
    pub created: Vec<Key>,
    pub updated: Vec<Key>,
    pub deleted: Vec<Key>,
    pub status_changed: Vec<Key>,
    pub resync_after: Vec<(Key, f64)>,
}

impl RoundReport {
    pub fn changed(&self) -> bool {
        !(self.created.is_empty()
            && self.updated.is_empty()
            && self.deleted.is_empty()
            && self.status_changed.is_empty())
    }
}

pub struct Emulator {
    pub base_url: String,
    pub client: reqwest::Client,
    pub registrations: Vec<Registration>,
    pub objects: BTreeMap<Key, Value>,
    /// What each child was last applied as, for the 3-way merge.
    last_applied: BTreeMap<Key, Value>,
    next_uid: u64,
    next_version: u64,
    /// Every hook call made: (controller, hook, parent name, HTTP status).
    pub calls: Vec<(String, &'static str, String, u16)>,
    /// Metacontroller's customize cache: answers by (parent UID, generation), kept for
    /// `CUSTOMIZE_CACHE_TTL` of simulated time.
    customize_cache: BTreeMap<(String, String, i64), (Value, std::time::Duration)>,
    /// Simulated time since the emulator started (advanced by `advance`).
    pub clock: std::time::Duration,
    /// Base URLs of several server replicas, called round-robin (empty: `base_url`):
    /// each parent's sync (customize and the calls that check the answer is stable)
    /// goes to one replica, the next sync to the next one.
    pub replicas: Vec<String>,
    next_replica: usize,
    current_replica: Option<String>,
    /// Metacontroller's `--apply-strategy`: client-side (the default, which records each
    /// child's last applied state in an annotation) or server-side apply (no annotation).
    pub server_side_apply: bool,
}

/// Where client-side apply records what it applied (pkg/dynamic/apply).
pub const LAST_APPLIED: &str = "metacontroller.k8s.io/last-applied-configuration";

/// How long Metacontroller keeps a customize answer (pkg/controller/common/customize:
/// a 20-minute cache keyed by parent UID and generation).
pub const CUSTOMIZE_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(20 * 60);

impl Emulator {
    pub fn new(base_url: &str, registrations: Vec<Registration>) -> Emulator {
        Emulator {
            base_url: base_url.trim_end_matches('/').to_owned(),
            client: reqwest::Client::new(),
            registrations,
            objects: BTreeMap::new(),
            last_applied: BTreeMap::new(),
            next_uid: 1,
            next_version: 1,
            calls: Vec::new(),
            customize_cache: BTreeMap::new(),
            clock: std::time::Duration::ZERO,
            server_side_apply: false,
            replicas: Vec::new(),
            next_replica: 0,
            current_replica: None,
        }
    }

    /// Client-side apply keeps the applied object in an annotation on the live one;
    /// server-side apply keeps nothing the hook can see.
    fn annotate_applied(&mut self, key: &Key, applied: &Value) {
        if self.server_side_apply {
            return;
        }
        let text = serde_json::to_string(applied).expect("JSON");
        if let Some(object) = self.objects.get_mut(key)
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.entry("annotations").or_insert_with(|| json!({}))[LAST_APPLIED] = json!(text);
        }
    }

    /// Moves simulated time forward (customize answers expire with it).
    pub fn advance(&mut self, by: std::time::Duration) {
        self.clock += by;
    }

    /// Emulator over the repository's own registrations.
    pub fn for_repository(base_url: &str) -> Emulator {
        let registrations = load_registrations(&super::repo_dir().join("manifests/controllers"))
            .expect("manifests/controllers holds valid registrations");
        Emulator::new(base_url, registrations)
    }

    fn bump_version(&mut self) -> String {
        self.next_version += 1;
        self.next_version.to_string()
    }

    /// Creates or edits an object as a user would (`kubectl apply`): spec changes bump
    /// `metadata.generation`; status and server fields are kept.
    pub fn apply(&mut self, mut object: Value) -> Key {
        if object.pointer("/metadata/namespace").is_none()
            && let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("namespace".to_owned(), json!("default"));
        }
        let key = key_of(&object);
        let version = self.bump_version();
        match self.objects.get(&key).cloned() {
            Some(existing) => {
                let generation = existing
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(1);
                let spec_changed = existing.get("spec") != object.get("spec")
                    || existing.get("data") != object.get("data");
                let meta = object
                    .get_mut("metadata")
                    .and_then(Value::as_object_mut)
                    .expect("metadata");
                for field in [
                    "uid",
                    "creationTimestamp",
                    "finalizers",
                    "ownerReferences",
                    "deletionTimestamp",
                ] {
                    if let Some(v) = existing.pointer(&format!("/metadata/{field}")) {
                        meta.insert(field.to_owned(), v.clone());
                    }
                }
                meta.insert(
                    "generation".to_owned(),
                    json!(if spec_changed {
                        generation + 1
                    } else {
                        generation
                    }),
                );
                meta.insert("resourceVersion".to_owned(), json!(version));
                if let Some(status) = existing.get("status") {
                    object
                        .as_object_mut()
                        .expect("object")
                        .insert("status".to_owned(), status.clone());
                }
            }
            None => {
                let uid = format!("uid-{:04}", self.next_uid);
                self.next_uid += 1;
                let meta = object
                    .get_mut("metadata")
                    .and_then(Value::as_object_mut)
                    .expect("metadata");
                meta.insert("uid".to_owned(), json!(uid));
                meta.insert("generation".to_owned(), json!(1));
                meta.insert("resourceVersion".to_owned(), json!(version));
                meta.insert(
                    "creationTimestamp".to_owned(),
                    json!("2026-01-01T00:00:00Z"),
                );
            }
        }
        self.objects.insert(key.clone(), object);
        key
    }

    pub fn get(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<&Value> {
        self.objects.get(&(
            api_version.to_owned(),
            kind.to_owned(),
            namespace.to_owned(),
            name.to_owned(),
        ))
    }

    /// `kubectl delete`: objects with finalizers get a deletionTimestamp, others go (with
    /// their owned objects, as the garbage collector would).
    pub fn delete(&mut self, key: &Key) {
        let Some(object) = self.objects.get_mut(key) else {
            return;
        };
        let has_finalizers = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        } else {
            self.remove_with_dependents(key);
        }
    }

    fn remove_with_dependents(&mut self, key: &Key) {
        let Some(object) = self.objects.remove(key) else {
            return;
        };
        self.last_applied.remove(key);
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, o)| owner_uid(o).as_deref() == Some(uid.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        for dependent in dependents {
            self.remove_with_dependents(&dependent);
        }
    }

    /// Runs rounds (every controller, every parent, then one tick of fake workload
    /// progress) until nothing changes. A round limit reached means a hot loop.
    pub async fn converge(&mut self, max_rounds: usize) -> Result<usize, Violation> {
        let mut last = RoundReport::default();
        for round in 1..=max_rounds {
            let report = self.round().await?;
            let ticked = self.tick_workloads();
            if !report.changed() && !ticked {
                return Ok(round);
            }
            last = report;
        }
        Err(format!(
            "no convergence after {max_rounds} rounds (hot loop?): last round created {:?}, updated {:?}, deleted {:?}, status changed on {:?}",
            last.created, last.updated, last.deleted, last.status_changed
        ))
    }

    /// One pass over every parent of every registration.
    pub async fn round(&mut self) -> Result<RoundReport, Violation> {
        let mut report = RoundReport::default();
        for registration in self.registrations.clone() {
            let parents: Vec<Key> = self
                .objects
                .iter()
                .filter(|(_, object)| self.selects(&registration, object))
                .map(|(key, _)| key.clone())
                .collect();
            for parent in parents {
                self.reconcile(&registration, &parent, &mut report).await?;
            }
        }
        Ok(report)
    }

    fn selects(&self, registration: &Registration, object: &Value) -> bool {
        let (api_version, kind, ..) = key_of(object);
        let finalizer = registration.finalizer();
        let carries_finalizer = object
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer.as_str())));
        registration.parents.iter().any(|(v, k, rule)| {
            *v == api_version && *k == kind && (carries_finalizer || matches_rule(rule, object))
        })
    }

    async fn reconcile(
        &mut self,
        registration: &Registration,
        parent_key: &Key,
        report: &mut RoundReport,
    ) -> Result<(), Violation> {
        let Some(mut parent) = self.objects.get(parent_key).cloned() else {
            return Ok(());
        };
        let finalizer = registration.finalizer();
        let deleting = parent.pointer("/metadata/deletionTimestamp").is_some();
        let opted_out = registration.type_ == ControllerType::Decorator
            && !registration
                .parents
                .iter()
                .any(|(_, _, rule)| matches_rule(rule, &parent));
        let has_finalize = registration.hooks.contains_key(&HookName::Finalize);
        if has_finalize && !deleting && !opted_out && !has_finalizer(&parent, &finalizer) {
            add_finalizer(&mut parent, &finalizer);
            self.objects.insert(parent_key.clone(), parent.clone());
        }
        let finalizing = has_finalize && (deleting || opted_out);
        let hook_name = if finalizing {
            HookName::Finalize
        } else {
            HookName::Sync
        };
        let Some(hook) = registration.hooks.get(&hook_name).cloned() else {
            return Err(format!(
                "{}: no {} hook registered",
                registration.name,
                hook_name.key()
            ));
        };
        if !self.replicas.is_empty() {
            self.current_replica =
                Some(self.replicas[self.next_replica % self.replicas.len()].clone());
            self.next_replica += 1;
        }
        let related = self.related(registration, &parent).await?;
        let owned = self.owned_by(registration, &parent);
        let observed = self.object_map(registration, &parent, &owned, &hook.version);
        let (root_field, observed_field) = match registration.type_ {
            ControllerType::Composite => ("parent", "children"),
            ControllerType::Decorator => ("object", "attachments"),
        };
        let request = json!({
            "controller": registration.raw,
            root_field: parent,
            observed_field: observed,
            "related": related,
            "finalizing": finalizing,
        });
        let parent_name = key_of(&parent).3;
        // Metacontroller may call again with the same state at any time; the answer must
        // be byte-identical, apart from transition times stamped in this very answer.
        // State outside the request (a background fetch landing) may move once between
        // two calls, so a difference is confirmed with a third call before it counts.
        let (first_text, first) = self
            .call(registration, &hook, hook_name, &request, &parent_name)
            .await?;
        let (again_text, again) = self
            .call(registration, &hook, hook_name, &request, &parent_name)
            .await?;
        let response = if same_answer(&parent, (&first_text, &first), (&again_text, &again)) {
            again
        } else {
            let (third_text, third) = self
                .call(registration, &hook, hook_name, &request, &parent_name)
                .await?;
            if !same_answer(&parent, (&again_text, &again), (&third_text, &third)) {
                return Err(format!(
                    "{}/{}: two identical requests got different answers:\n{}\n{}",
                    registration.name,
                    hook_name.key(),
                    again,
                    third
                ));
            }
            third
        };
        self.check_response(registration, &hook, &response)?;
        let desired_field = match registration.type_ {
            ControllerType::Composite => "children",
            ControllerType::Decorator => "attachments",
        };
        let desired: Vec<Value> = response
            .get(desired_field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for child in &desired {
            self.check_child(registration, &parent, child)?;
        }
        self.manage_children(registration, &parent, owned, desired, report)?;
        match registration.type_ {
            ControllerType::Composite => self.write_composite_status(parent_key, &response, report),
            ControllerType::Decorator => self.write_decorator_result(parent_key, &response, report),
        }
        if let Some(seconds) = response
            .get("resyncAfterSeconds")
            .and_then(Value::as_f64)
            .filter(|s| *s > 0.0)
        {
            report.resync_after.push((parent_key.clone(), seconds));
        }
        // Metacontroller removes its finalizer whenever an answer says `finalized: true`,
        // from the sync hook as well as from finalize (composite/controller.go).
        if response.get("finalized").and_then(Value::as_bool) == Some(true) {
            if let Some(object) = self.objects.get_mut(parent_key) {
                remove_finalizer(object, &finalizer);
                report.updated.push(parent_key.clone());
            }
            let gone = self.objects.get(parent_key).is_some_and(|o| {
                o.pointer("/metadata/deletionTimestamp").is_some()
                    && o.pointer("/metadata/finalizers")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty)
            });
            if gone {
                self.remove_with_dependents(parent_key);
                report.deleted.push(parent_key.clone());
            }
        }
        Ok(())
    }

    async fn call(
        &mut self,
        registration: &Registration,
        hook: &Hook,
        name: HookName,
        request: &Value,
        parent: &str,
    ) -> Result<(String, Value), Violation> {
        let base = self
            .current_replica
            .clone()
            .unwrap_or_else(|| self.base_url.clone());
        let url = format!("{base}{}", hook.path);
        let reply = self
            .client
            .post(&url)
            .json(request)
            .send()
            .await
            .map_err(|e| format!("http error calling {url}: {e}"))?;
        let status = reply.status().as_u16();
        self.calls.push((
            registration.name.clone(),
            name.key(),
            parent.to_owned(),
            status,
        ));
        let body = reply
            .text()
            .await
            .map_err(|e| format!("cannot read answer of {url}: {e}"))?;
        if status != 200 {
            return Err(format!("unsupported status code: {status} body: {body}"));
        }
        let value = serde_json::from_str(&body).map_err(|e| {
            format!("{url} answered 200 with a body that is not JSON ({e}): {body:.200}")
        })?;
        Ok((body, value))
    }

    async fn related(
        &mut self,
        registration: &Registration,
        parent: &Value,
    ) -> Result<Value, Violation> {
        let Some(hook) = registration.hooks.get(&HookName::Customize).cloned() else {
            return Ok(json!({}));
        };
        // Metacontroller asks customize once per (parent UID, generation) and reuses the
        // answer for 20 minutes: label and annotation edits do not bump the generation.
        let cache_key = (
            registration.name.clone(),
            parent
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            parent
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or_default(),
        );
        let cached = self
            .customize_cache
            .get(&cache_key)
            .filter(|(_, at)| self.clock.saturating_sub(*at) < CUSTOMIZE_CACHE_TTL)
            .map(|(answer, _)| answer.clone());
        let response = match cached {
            Some(answer) => answer,
            None => {
                let request = json!({"controller": registration.raw, "parent": parent});
                let (_, response) = self
                    .call(
                        registration,
                        &hook,
                        HookName::Customize,
                        &request,
                        &key_of(parent).3,
                    )
                    .await?;
                self.customize_cache
                    .insert(cache_key, (response.clone(), self.clock));
                response
            }
        };
        let allowed: BTreeSet<&str> = ["relatedResources"].into();
        if let Some(object) = response.as_object() {
            for field in object.keys() {
                if hook.strict && !allowed.contains(field.as_str()) {
                    return Err(format!(
                        "customize answer has unknown field {field:?} (strict decoding)"
                    ));
                }
            }
        }
        let mut groups = Map::new();
        let parent_namespace = key_of(parent).2;
        let v1_namespaced = hook.version != "v2" && !parent_namespace.is_empty();
        for rule in response
            .get("relatedResources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let api_version = str_at(rule, "/apiVersion")?.to_owned();
            let kind = kind_of(str_at(rule, "/resource")?)?;
            let type_key = format!("{kind}.{api_version}");
            let namespace = rule
                .get("namespace")
                .and_then(Value::as_str)
                .filter(|ns| !ns.is_empty());
            let names: Option<Vec<&str>> = rule
                .get("names")
                .and_then(Value::as_array)
                .map(|n| n.iter().filter_map(Value::as_str).collect())
                .filter(|n: &Vec<&str>| !n.is_empty());
            let label_selector = rule.get("labelSelector").filter(|s| !s.is_null());
            let namespace_selector = rule.get("namespaceSelector").filter(|s| !s.is_null());
            // Metacontroller's selection rules (customize/manager.go, v4.17):
            if names.is_some() && (label_selector.is_some() || namespace_selector.is_some()) {
                return Err(format!(
                    "related rule cannot have both names and labelSelector/namespaceSelector specified: {rule}"
                ));
            }
            if namespace.is_some() && namespace_selector.is_some() {
                return Err(format!(
                    "related rule cannot have both namespace and namespaceSelector specified: {rule}"
                ));
            }
            if namespace_selector.is_some() {
                return Err("namespaceSelector rules are not emulated".to_owned());
            }
            if v1_namespaced && namespace.is_some_and(|ns| ns != parent_namespace) {
                return Err(format!(
                    "requested related object namespace {namespace:?} differs from parent object namespace {parent_namespace}"
                ));
            }
            // Which namespace is listed: a label-selector rule without a namespace lists
            // the parent's namespace for v1 hooks and every namespace for v2; a rule with
            // a namespace lists that one; a names rule without one lists every namespace,
            // whatever the hook version.
            let listed: Option<&str> =
                match (namespace, label_selector.is_some() || names.is_none()) {
                    (Some(ns), _) => Some(ns),
                    (None, true) if v1_namespaced && names.is_none() => {
                        Some(parent_namespace.as_str())
                    }
                    (None, _) => None,
                };
            let group = groups.entry(type_key).or_insert_with(|| json!({}));
            for (key, object) in &self.objects {
                if key.0 != api_version || key.1 != kind {
                    continue;
                }
                if listed.is_some_and(|ns| ns != key.2) {
                    continue;
                }
                if names.as_ref().is_some_and(|n| !n.contains(&key.3.as_str())) {
                    continue;
                }
                if let Some(selector) = label_selector
                    && !labels_match(selector, object)
                {
                    continue;
                }
                let map_key = if hook.version == "v2"
                    || parent_namespace.is_empty()
                    || key.2 != parent_namespace
                {
                    format!("{}/{}", key.2, key.3)
                } else {
                    key.3.clone()
                };
                group[map_key] = object.clone();
            }
        }
        Ok(Value::Object(groups))
    }

    fn owned_by(&self, registration: &Registration, parent: &Value) -> Vec<Key> {
        let uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.objects
            .iter()
            .filter(|(key, object)| {
                owner_uid(object).as_deref() == Some(uid)
                    && registration.child_rule(&key.0, &key.1).is_some()
                    && (registration.type_ == ControllerType::Composite
                        || object
                            .pointer(
                                "/metadata/annotations/metacontroller.k8s.io~1decorator-controller",
                            )
                            .and_then(Value::as_str)
                            == Some(registration.name.as_str()))
            })
            .map(|(key, _)| key.clone())
            .collect()
    }

    fn object_map(
        &self,
        registration: &Registration,
        parent: &Value,
        owned: &[Key],
        version: &str,
    ) -> Value {
        let mut groups = Map::new();
        for rule in &registration.children {
            groups.insert(format!("{}.{}", rule.kind, rule.api_version), json!({}));
        }
        let parent_namespace = key_of(parent).2;
        for key in owned {
            let object = &self.objects[key];
            let map_key = if version == "v2" || parent_namespace.is_empty() {
                format!("{}/{}", key.2, key.3)
            } else {
                key.3.clone()
            };
            groups[&format!("{}.{}", key.1, key.0)][map_key] = object.clone();
        }
        Value::Object(groups)
    }

    fn check_response(
        &self,
        registration: &Registration,
        hook: &Hook,
        response: &Value,
    ) -> Result<(), Violation> {
        let Some(object) = response.as_object() else {
            return Err("answer is not a JSON object".to_owned());
        };
        let allowed: &[&str] = match registration.type_ {
            ControllerType::Composite => &["status", "children", "resyncAfterSeconds", "finalized"],
            ControllerType::Decorator => &[
                "labels",
                "annotations",
                "status",
                "attachments",
                "resyncAfterSeconds",
                "finalized",
            ],
        };
        for field in object.keys() {
            if hook.strict && !allowed.contains(&field.as_str()) {
                return Err(format!(
                    "strict decoding failed: unknown field {field:?} in the answer"
                ));
            }
        }
        if let Some(status) = object.get("status")
            && !(status.is_object() || status.is_null())
        {
            return Err("status must be an object or null".to_owned());
        }
        if registration.type_ == ControllerType::Composite
            && !object.get("status").is_some_and(Value::is_object)
        {
            return Err(
                "composite answer without an object status (would wipe the parent's status)"
                    .to_owned(),
            );
        }
        for field in ["labels", "annotations"] {
            if let Some(map) = object.get(field).and_then(Value::as_object)
                && map.values().any(|v| !(v.is_string() || v.is_null()))
            {
                return Err(format!("{field} values must be strings or null"));
            }
        }
        Ok(())
    }

    fn check_child(
        &self,
        registration: &Registration,
        parent: &Value,
        child: &Value,
    ) -> Result<(), Violation> {
        let kind = child
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if kind.is_empty() {
            return Err("Object 'Kind' is missing".to_owned());
        }
        let api_version = child
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let name = child
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            return Err(format!("{kind} without metadata.name"));
        }
        if registration.child_rule(api_version, kind).is_none() {
            return Err(format!(
                "{kind}.{api_version} {name} is not a registered child type of {}",
                registration.name
            ));
        }
        if child.pointer("/metadata/ownerReferences").is_some() {
            return Err(format!(
                "{kind} {name} sets metadata.ownerReferences (Metacontroller owns them)"
            ));
        }
        if child.get("status").is_some() {
            return Err(format!(
                "{kind} {name} sets status (a parent cannot set child status)"
            ));
        }
        for field in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            if child.pointer(&format!("/metadata/{field}")).is_some() {
                return Err(format!(
                    "{kind} {name} sets server-populated metadata.{field}"
                ));
            }
        }
        let namespace = child.pointer("/metadata/namespace").and_then(Value::as_str);
        let parent_namespace = key_of(parent).2;
        if registration.type_ == ControllerType::Composite
            && namespace.is_some_and(|ns| ns != parent_namespace)
        {
            return Err(format!(
                "{kind} {name} is in namespace {namespace:?}, not the parent's"
            ));
        }
        if registration.type_ == ControllerType::Composite
            && !registration.generate_selector
            && let Some(selector) = parent.pointer("/spec/selector")
            && !labels_match(selector, child)
        {
            return Err(format!(
                "labels on desired child {kind} {name} don't match parent selector"
            ));
        }
        Ok(())
    }

    fn manage_children(
        &mut self,
        registration: &Registration,
        parent: &Value,
        owned: Vec<Key>,
        desired: Vec<Value>,
        report: &mut RoundReport,
    ) -> Result<(), Violation> {
        let parent_namespace = key_of(parent).2;
        let mut desired_by_key = BTreeMap::new();
        for mut child in desired {
            if child.pointer("/metadata/namespace").is_none() {
                child["metadata"]["namespace"] = json!(parent_namespace);
            }
            desired_by_key.insert(key_of(&child), child);
        }
        for key in owned {
            if !desired_by_key.contains_key(&key) {
                let terminating = self
                    .objects
                    .get(&key)
                    .is_some_and(|o| o.pointer("/metadata/deletionTimestamp").is_some());
                if !terminating {
                    self.remove_with_dependents(&key);
                    report.deleted.push(key);
                }
            }
        }
        for (key, child) in desired_by_key {
            let strategy = registration
                .child_rule(&key.0, &key.1)
                .map(|r| r.strategy.clone())
                .unwrap_or_default();
            match self.objects.get(&key).cloned() {
                None => {
                    let created = self.create_child(registration, parent, child.clone());
                    self.annotate_applied(&created, &child);
                    self.last_applied.insert(key.clone(), child);
                    report.created.push(created);
                }
                Some(live) => {
                    if owner_uid(&live)
                        != parent
                            .pointer("/metadata/uid")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    {
                        return Err(format!(
                            "{} {} exists but belongs to someone else",
                            key.1, key.3
                        ));
                    }
                    let previous = self.last_applied.get(&key).cloned().unwrap_or(Value::Null);
                    let merged = three_way(&live, &previous, &child);
                    if merged == live {
                        continue;
                    }
                    match strategy.as_str() {
                        "OnDelete" => {}
                        "Recreate" | "RollingRecreate" => {
                            self.remove_with_dependents(&key);
                            report.deleted.push(key);
                        }
                        _ => {
                            let updated = self.update_child(&key, &live, merged);
                            self.objects.insert(key.clone(), updated);
                            self.annotate_applied(&key, &child);
                            self.last_applied.insert(key.clone(), child);
                            report.updated.push(key);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn create_child(
        &mut self,
        registration: &Registration,
        parent: &Value,
        mut child: Value,
    ) -> Key {
        let parent_uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let reference = json!([{
            "apiVersion": parent["apiVersion"], "kind": parent["kind"],
            "name": parent["metadata"]["name"], "uid": parent_uid,
            "controller": true, "blockOwnerDeletion": true,
        }]);
        let uid = format!("uid-{:04}", self.next_uid);
        self.next_uid += 1;
        let version = self.bump_version();
        let meta = child["metadata"].as_object_mut().expect("child metadata");
        meta.insert("ownerReferences".to_owned(), reference);
        meta.insert("uid".to_owned(), json!(uid));
        meta.insert("generation".to_owned(), json!(1));
        meta.insert("resourceVersion".to_owned(), json!(version));
        meta.insert(
            "creationTimestamp".to_owned(),
            json!("2026-01-01T00:00:00Z"),
        );
        if registration.generate_selector {
            meta.entry("labels").or_insert_with(|| json!({}))["controller-uid"] = json!(parent_uid);
        }
        if registration.type_ == ControllerType::Decorator {
            meta.entry("annotations").or_insert_with(|| json!({}))["metacontroller.k8s.io/decorator-controller"] =
                json!(registration.name);
        }
        apply_server_defaults(&mut child);
        let key = key_of(&child);
        self.objects.insert(key.clone(), child);
        key
    }

    fn update_child(&mut self, _key: &Key, live: &Value, mut merged: Value) -> Value {
        apply_server_defaults(&mut merged);
        let version = self.bump_version();
        let generation = live
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let spec_changed = live.get("spec") != merged.get("spec");
        merged["metadata"]["resourceVersion"] = json!(version);
        merged["metadata"]["generation"] = json!(if spec_changed {
            generation + 1
        } else {
            generation
        });
        merged
    }

    fn write_composite_status(
        &mut self,
        parent_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        let Some(parent) = self.objects.get_mut(parent_key) else {
            return;
        };
        let generation = parent
            .pointer("/metadata/generation")
            .cloned()
            .unwrap_or(json!(1));
        let mut status = response.get("status").cloned().unwrap_or(json!({}));
        if let Some(map) = status.as_object_mut() {
            map.insert("observedGeneration".to_owned(), generation);
        }
        if parent.get("status") != Some(&status) {
            parent["status"] = status;
            self.next_version += 1;
            parent["metadata"]["resourceVersion"] = json!(self.next_version.to_string());
            report.status_changed.push(parent_key.clone());
        }
    }

    fn write_decorator_result(
        &mut self,
        target_key: &Key,
        response: &Value,
        report: &mut RoundReport,
    ) {
        let Some(target) = self.objects.get_mut(target_key) else {
            return;
        };
        let before = target.clone();
        for field in ["labels", "annotations"] {
            for (key, value) in response
                .get(field)
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let map = target["metadata"]
                    .as_object_mut()
                    .expect("metadata")
                    .entry(field)
                    .or_insert_with(|| json!({}));
                match value {
                    Value::Null => {
                        map.as_object_mut().expect("map").remove(key);
                    }
                    other => {
                        map[key] = other.clone();
                    }
                }
            }
        }
        if let Some(status) = response.get("status").filter(|s| s.is_object()) {
            target["status"] = status.clone();
        }
        if *target != before {
            report.status_changed.push(target_key.clone());
        }
    }

    /// Fake kube-controller-manager: a Deployment first reports its new generation with no
    /// ready pods, then on the next tick all replicas ready. Returns whether anything moved.
    pub fn tick_workloads(&mut self) -> bool {
        let mut moved = false;
        for (key, object) in self.objects.iter_mut() {
            if key.1 != "Deployment" && key.1 != "StatefulSet" {
                continue;
            }
            let generation = object
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let replicas = object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let observed = object
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64);
            let ready = object
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if observed != Some(generation) {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": 0, "availableReplicas": 0,
                    "conditions": [{"type": "Available", "status": if replicas == 0 { "True" } else { "False" }, "reason": "MinimumReplicasUnavailable"}]
                });
                moved = true;
            } else if ready != replicas {
                object["status"] = json!({
                    "observedGeneration": generation, "replicas": replicas, "updatedReplicas": replicas,
                    "readyReplicas": replicas, "availableReplicas": replicas,
                    "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]
                });
                moved = true;
            }
        }
        moved
    }
}

fn owner_uid(object: &Value) -> Option<String> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|x| x.as_str() == Some(finalizer)))
}

fn add_finalizer(object: &mut Value, finalizer: &str) {
    let meta = object["metadata"].as_object_mut().expect("metadata");
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if let Some(items) = list.as_array_mut() {
        items.push(json!(finalizer));
    }
}

fn remove_finalizer(object: &mut Value, finalizer: &str) {
    if let Some(items) = object
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        items.retain(|x| x.as_str() != Some(finalizer));
    }
}

/// A rule's labelSelector and annotationSelector (decorators) both match.
fn matches_rule(rule: &Value, object: &Value) -> bool {
    let labels_ok = rule
        .get("labelSelector")
        .is_none_or(|s| labels_match(s, object));
    let annotations_ok = rule.get("annotationSelector").is_none_or(|selector| {
        let annotations = object
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or(json!({}));
        let exact = selector
            .get("matchAnnotations")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .all(|(k, v)| annotations.get(k) == Some(v));
        exact && expressions_match(selector.get("matchExpressions"), &annotations)
    });
    labels_ok && annotations_ok
}

pub fn labels_match(selector: &Value, object: &Value) -> bool {
    let labels = object
        .pointer("/metadata/labels")
        .cloned()
        .unwrap_or(json!({}));
    let exact = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    exact && expressions_match(selector.get("matchExpressions"), &labels)
}

fn expressions_match(expressions: Option<&Value>, map: &Value) -> bool {
    expressions
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&Value> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().collect())
                .unwrap_or_default();
            let present = map.get(key);
            match e.get("operator").and_then(Value::as_str) {
                Some("Exists") => present.is_some(),
                Some("DoesNotExist") => present.is_none(),
                Some("In") => present.is_some_and(|v| values.contains(&v)),
                Some("NotIn") => present.is_none_or(|v| !values.contains(&v)),
                _ => false,
            }
        })
}

/// live − (fields we applied before and no longer want) + what we want now.
/// Metacontroller's client-side apply (pkg/dynamic/apply): the change from `previous`
/// (last applied) to `desired`, applied onto `live`. Objects merge key by key (fields
/// dropped since last time are removed); arrays of objects that share a conventional
/// key (containerPort, port, mountPath, name, uid, ip, path, in that order) merge item
/// by item as "list maps"; other arrays and scalars take the desired value.
pub fn three_way(live: &Value, previous: &Value, desired: &Value) -> Value {
    match (live, desired) {
        (Value::Object(live_map), Value::Object(desired_map)) => {
            Value::Object(merge_maps(live_map, previous.as_object(), desired_map))
        }
        (Value::Array(live_items), Value::Array(desired_items)) => {
            let previous_items: &[Value] = previous.as_array().map_or(&[], Vec::as_slice);
            match list_map_key(&[live_items, previous_items, desired_items]) {
                Some(key) => merge_list_map(key, live_items, previous_items, desired_items),
                None => desired.clone(),
            }
        }
        _ => desired.clone(),
    }
}

fn merge_maps(
    live: &Map<String, Value>,
    previous: Option<&Map<String, Value>>,
    desired: &Map<String, Value>,
) -> Map<String, Value> {
    let mut out = live.clone();
    for key in previous.into_iter().flat_map(|p| p.keys()) {
        if !desired.contains_key(key) {
            out.remove(key);
        }
    }
    for (key, want) in desired {
        let before = previous.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
        let merged = match out.get(key) {
            Some(have) => three_way(have, before, want),
            None => want.clone(),
        };
        out.insert(key.clone(), merged);
    }
    out
}

const LIST_MAP_KEYS: [&str; 7] = [
    "containerPort",
    "port",
    "mountPath",
    "name",
    "uid",
    "ip",
    "path",
];

/// The conventional key every item of every list has, if all items are objects.
fn list_map_key(lists: &[&[Value]]) -> Option<&'static str> {
    let mut common: Option<BTreeSet<String>> = None;
    for item in lists.iter().flat_map(|l| l.iter()) {
        let object = item.as_object()?;
        let keys: BTreeSet<String> = object.keys().cloned().collect();
        common = Some(match common {
            None => keys,
            Some(c) => c.intersection(&keys).cloned().collect(),
        });
    }
    let common = common?;
    LIST_MAP_KEYS.into_iter().find(|k| common.contains(*k))
}

fn merge_list_map(key: &str, live: &[Value], previous: &[Value], desired: &[Value]) -> Value {
    let id = |item: &Value| match &item[key] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let as_map = |items: &[Value]| -> Map<String, Value> {
        items.iter().map(|i| (id(i), i.clone())).collect()
    };
    let merged = merge_maps(&as_map(live), Some(&as_map(previous)), &as_map(desired));
    // Keep live order, then append what desired adds.
    let mut out = Vec::new();
    let mut added = BTreeSet::new();
    for item in live.iter().chain(desired) {
        let k = id(item);
        if let Some(value) = merged.get(&k)
            && added.insert(k)
        {
            out.push(value.clone());
        }
    }
    Value::Array(out)
}

/// What the API server fills in when an object is written, for the kinds the hooks
/// emit: a hook that fought these defaults would rewrite its children every round.
fn apply_server_defaults(object: &mut Value) {
    fn default(object: &mut Value, pointer: &str, value: Value) {
        let (parent, field) = pointer.rsplit_once('/').expect("pointer with a field");
        if let Some(Value::Object(map)) = object.pointer_mut(parent) {
            map.entry(field.to_owned()).or_insert(value);
        }
    }
    fn containers(pod_spec: &mut Value) {
        for list in ["containers", "initContainers"] {
            for container in pod_spec
                .get_mut(list)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let latest = container["image"]
                    .as_str()
                    .is_some_and(|i| i.ends_with(":latest") || !i.contains(':'));
                default(
                    container,
                    "/terminationMessagePath",
                    json!("/dev/termination-log"),
                );
                default(container, "/terminationMessagePolicy", json!("File"));
                default(
                    container,
                    "/imagePullPolicy",
                    json!(if latest { "Always" } else { "IfNotPresent" }),
                );
                for port in container
                    .get_mut("ports")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    default(port, "/protocol", json!("TCP"));
                }
            }
        }
        default(pod_spec, "/restartPolicy", json!("Always"));
        default(pod_spec, "/terminationGracePeriodSeconds", json!(30));
        default(pod_spec, "/dnsPolicy", json!("ClusterFirst"));
        default(pod_spec, "/securityContext", json!({}));
        default(pod_spec, "/schedulerName", json!("default-scheduler"));
    }
    match object["kind"].as_str() {
        Some("Deployment") => {
            default(object, "/spec/replicas", json!(1));
            default(object, "/spec/revisionHistoryLimit", json!(10));
            default(object, "/spec/progressDeadlineSeconds", json!(600));
            default(
                object,
                "/spec/strategy",
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}}),
            );
            if let Some(pod_spec) = object.pointer_mut("/spec/template/spec") {
                containers(pod_spec);
            }
        }
        Some("Service") => {
            default(object, "/spec/type", json!("ClusterIP"));
            default(object, "/spec/sessionAffinity", json!("None"));
            default(object, "/spec/clusterIP", json!("10.96.0.10"));
            default(object, "/spec/clusterIPs", json!(["10.96.0.10"]));
            default(object, "/spec/ipFamilies", json!(["IPv4"]));
            default(object, "/spec/ipFamilyPolicy", json!("SingleStack"));
            default(object, "/spec/internalTrafficPolicy", json!("Cluster"));
            for port in object
                .pointer_mut("/spec/ports")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                default(port, "/protocol", json!("TCP"));
                if port.get("targetPort").is_none()
                    && let Some(number) = port.get("port").cloned()
                {
                    port["targetPort"] = number;
                }
            }
        }
        _ => {}
    }
}

fn same_answer(parent: &Value, a: (&str, &Value), b: (&str, &Value)) -> bool {
    let (a_normal, b_normal) = (normalize(a.1, parent), normalize(b.1, parent));
    let stamped = a_normal != *a.1 || b_normal != *b.1;
    if stamped {
        a_normal == b_normal
    } else {
        a.0 == b.0
    }
}

/// An answer with the transition times removed from conditions that appeared or flipped
/// relative to the observed parent — those may carry "now".
fn normalize(response: &Value, parent: &Value) -> Value {
    let mut response = response.clone();
    let before: Vec<(String, String)> = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    if let Some(conditions) = response
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for condition in conditions {
            let pair = (
                condition["type"].as_str().unwrap_or_default().to_owned(),
                condition["status"].as_str().unwrap_or_default().to_owned(),
            );
            if !before.contains(&pair)
                && let Some(map) = condition.as_object_mut()
            {
                map.remove("lastTransitionTime");
            }
        }
    }
    response
}

/// Runs rounds, letting background source fetches land between them, until `done`
/// holds; fails after 30 s naming `what` and showing the parents of `kind`.
pub async fn settle(
    emulator: &mut Emulator,
    fetcher: &metahooks::source::fetcher::Fetcher,
    kind: &str,
    what: &str,
    done: impl Fn(&Emulator) -> bool,
) {
    let started = std::time::Instant::now();
    loop {
        emulator
            .converge(20)
            .await
            .unwrap_or_else(|v| panic!("{what}: {v}"));
        fetcher.idle().await;
        emulator
            .converge(20)
            .await
            .unwrap_or_else(|v| panic!("{what}: {v}"));
        if done(emulator) {
            return;
        }
        let parents: Vec<&Value> = emulator
            .objects
            .values()
            .filter(|o| o["kind"] == kind)
            .collect();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "never settled: {what}\n{parents:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
