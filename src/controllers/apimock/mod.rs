//! APIMock: an OpenAPI document in a CR becomes a running mock server.
//!
//! `sync` validates the definition (memoised by hash), builds the children from the
//! definition it can serve — the spec's if valid, else the last good one still held in
//! the observed ConfigMap — and reports status from the observed Deployment. `finalize`
//! asks for no children and completes once they are gone, whatever the spec holds.

pub mod bundle;
pub mod children;
mod decide;
pub mod definition;
mod exposure;
mod held;
mod origin;
pub mod spec;
mod status;
mod validate;
pub mod verdict;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use self::children::{DEFINITION_HASH_ANNOTATION, Plan};
use self::decide::{Decision, definition_status};
use self::definition::AnalysisMemo;
use self::origin::Origin;
use self::status::{Facts, SourceFacts};
use crate::controllers::common::conditions::{ConditionType, Decided, format_time};
use crate::controllers::common::effort::{self, Effort, Stop};
use crate::controllers::common::keep::{observed_children, observed_status};
use crate::controllers::common::memo::{Memo, key_of};
use crate::controllers::common::names::check_dns1035_label;
use crate::controllers::common::policy::ExposurePolicy;
use crate::controllers::common::polling;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::refresh;
use crate::controllers::common::rollout::Rollout;
use crate::controllers::{CompositeHooks, Context, ControllerSettings};
use crate::error::HookError;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, RelatedResourceRule,
    object_name, object_namespace,
};

/// Stoplight Prism 5, pinned to the version the end-to-end test runs.
pub const DEFAULT_MOCK_IMAGE: &str = "stoplight/prism:5.14.2";
/// Swagger UI, served next to the mock with `spec.docs.enabled`.
pub const DEFAULT_DOCS_IMAGE: &str = "swaggerapi/swagger-ui:v5.17.14";

/// The APIMock controller, with its memos.
pub struct ApiMockHooks {
    mock_image: String,
    docs_image: String,
    /// What the operator lets a CR expose.
    policy: ExposurePolicy,
    memo: AnalysisMemo,
    /// Built children by the hash of everything they depend on: most syncs repeat the
    /// last answer, and building four objects through typed structs costs more than
    /// parsing them.
    built: Memo<[u8; 32], Arc<Vec<Value>>>,
    /// Keys of children built once and not remembered (yet): see `children`.
    built_once: Memo<[u8; 32], ()>,
    /// Definitions read from source snapshots, by source, revision and root.
    read_memo: Memo<[u8; 32], origin::Read>,
}

/// Children sets the memo is sized for.
const BUILT_ENTRIES: u64 = 1024;
/// Bytes of definitions held in the children memo at most (each entry carries its
/// definition in the ConfigMap): a count alone would let 1024 near-1-MiB definitions
/// pin a gigabyte.
const BUILT_BYTES: u64 = 64 * 1024 * 1024;

/// An entry's weight: the definition its ConfigMap holds plus the other objects.
fn built_weight(_key: &[u8; 32], children: &Arc<Vec<Value>>) -> u64 {
    let definition: usize = children
        .iter()
        .filter_map(|child| child.get("data").and_then(Value::as_object))
        .flat_map(|data| data.values())
        .filter_map(Value::as_str)
        .map(str::len)
        .sum();
    (definition + 4096) as u64
}

impl ApiMockHooks {
    /// An APIMock controller using the images of `settings`.
    pub fn new(settings: &ControllerSettings) -> ApiMockHooks {
        ApiMockHooks {
            mock_image: settings.mock_image.clone(),
            docs_image: settings.docs_image.clone(),
            policy: settings.policy.clone(),
            memo: AnalysisMemo::with_heavy_slots(settings.heavy_validations),
            built: Memo::weighted(BUILT_ENTRIES, BUILT_BYTES, built_weight),
            built_once: Memo::entries(4 * BUILT_ENTRIES),
            read_memo: Memo::weighted(
                origin::READ_ENTRIES,
                origin::READ_BYTES,
                origin::read_weight,
            ),
        }
    }
}

impl ApiMockHooks {
    fn answer(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
        effort: Effort,
        asked: &mut refresh::Outcome,
    ) -> Result<CompositeResponse, Stop> {
        let parent = &request.parent;
        let name = object_name(parent).unwrap_or_default();
        let namespace = object_namespace(parent).unwrap_or("default");
        let call = Call {
            request,
            name,
            now: format_time(ctx.now),
            rollout: Rollout::observe(
                request.children.find("Deployment", "apps/v1", None, name),
                DEFINITION_HASH_ANNOTATION,
            ),
        };

        let spec = match self.checked_spec(parent, name, namespace) {
            Ok(spec) => spec,
            Err((validated, serving_observed)) => {
                return Ok(call.keep_running(validated, None, serving_observed)?);
            }
        };
        let origin = match origin::origin(&spec, &request.related, namespace, name) {
            Ok(origin) => origin,
            Err(Problem { reason, message }) => {
                let validated = Decided::new(ConditionType::Validated, false, reason, message);
                return Ok(call.keep_running(validated, None, true)?);
            }
        };
        if let Some(outcome) = ask_for_refresh(&origin, ctx, parent) {
            *asked = outcome;
        }
        let reading = self.read(&origin, &request.related, namespace, ctx);
        let decision = self.decide(&call, &reading, ctx, effort)?;
        let (fetched, resync_seconds) = refresh_if_behind(&origin, &decision, reading, ctx);
        let source = origin::describe(&origin)
            .zip(fetched)
            .map(|(description, fetched)| SourceFacts {
                awaiting: fetched.reason == Reason::FetchPending && decision.served.is_none(),
                fetched,
                description,
                revision: decision.served.as_ref().and_then(|s| s.revision.clone()),
            });
        let Some(served) = decision.served else {
            // Nothing valid to build from: whatever exists stays as it is.
            let response = call.keep_running(decision.validated, source, false)?;
            return Ok(response.with_resync_after(resync_seconds));
        };
        let response = self.serve(&call, &spec, &served, decision.validated, source, namespace)?;
        Ok(response.with_resync_after(resync_seconds))
    }

    /// The answer that serves `served`: its children and the status that describes them.
    fn serve(
        &self,
        call: &Call<'_>,
        spec: &spec::ApiMockSpec,
        served: &decide::ServedDefinition<'_>,
        validated: Decided,
        source: Option<SourceFacts>,
        namespace: &str,
    ) -> Result<CompositeResponse, Stop> {
        let name = call.name;
        let children = self.children(&Plan {
            name,
            spec,
            served: served.files(),
            sha256: &served.analysis.sha256,
            revision: served.revision.as_deref(),
            made_at: served.made_at,
            image: spec
                .image
                .as_deref()
                .filter(|i| !i.is_empty())
                .unwrap_or(&self.mock_image),
            docs_image: &self.docs_image,
        })?;
        let urls = Urls::of(name, namespace, spec);
        let facts = Facts {
            validated,
            serving: Some(&served.analysis.sha256),
            definition: definition_status(&served.analysis),
            rollout: call.rollout.clone(),
            url: Some(urls.cluster),
            external_url: urls.external,
            source,
            apply_limit: status::apply_limit(&children),
        };
        let parent = &call.request.parent;
        let mut response = CompositeResponse::typed(&status::compute(facts, parent, &call.now))?;
        response.children = Some(children);
        Ok(response)
    }

    /// The spec, when the name can name the children, the spec parses and the policy
    /// allows what it exposes; otherwise the Validated condition that says why not, and
    /// whether the observed Deployment still serves what it served.
    fn checked_spec(
        &self,
        parent: &Value,
        name: &str,
        namespace: &str,
    ) -> Result<spec::ApiMockSpec, (Decided, bool)> {
        let invalid =
            |reason, message| Decided::new(ConditionType::Validated, false, reason, message);
        if let Err(problem) = check_dns1035_label(name) {
            let message = format!("metadata.name cannot name the mock's Service: {problem}");
            return Err((invalid(Reason::InvalidName, message), false));
        }
        let spec = spec::parse_spec(parent)
            .map_err(|problem| (invalid(Reason::InvalidSpec, problem), true))?;
        if let Err(Problem { reason, message }) = exposure::check(&spec, &self.policy, namespace) {
            return Err((invalid(reason, message), true));
        }
        Ok(spec)
    }
}

/// For a fetched origin: asks the source engine to fetch now when the parent asks for
/// it ([`refresh::ask`]), before the lookup so the lookup sees the fetch pending.
fn ask_for_refresh(origin: &Origin<'_>, ctx: &Context, parent: &Value) -> Option<refresh::Outcome> {
    let Origin::Fetched {
        request, interval, ..
    } = origin
    else {
        return None;
    };
    Some(refresh::ask(
        ctx.sources.as_ref(),
        request,
        Duration::from_secs(*interval),
        parent,
        refresh::recorded(parent),
    ))
}

impl CompositeHooks for ApiMockHooks {
    fn parent_types(&self) -> &'static [crate::controllers::ParentType] {
        &[("apirator.io/v1alpha1", "APIMock")]
    }

    /// [`ApiMockHooks::answer`], with the handled "fetch now" value recorded.
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        effort::full_sync(&request.parent, |effort, asked| {
            self.answer(request, ctx, effort, asked)
        })
    }

    /// The sync answer from remembered analyses only: None when a definition has not
    /// been validated yet (validation is the one slow step of an APIMock sync).
    fn try_cached(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Option<Result<CompositeResponse, HookError>> {
        effort::cached_sync(&request.parent, |effort, asked| {
            self.answer(request, ctx, effort, asked)
        })
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        _ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        // Deliberately independent of the spec: a broken definition must never keep the
        // parent stuck in Terminating, as APIrator's finalizer could.
        let mut status = observed_status(&request.parent);
        status.insert("phase".to_owned(), json!("Terminating"));
        Ok(CompositeResponse::new(Value::Object(status), Vec::new())
            .with_finalized(request.children.is_empty()))
    }

    /// The ConfigMap of `definitionFrom.configMapKeyRef` and the Secret of a source's
    /// `secretRef`, each by name in the APIMock's namespace only.
    fn customize(&self, request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        let namespace = object_namespace(&request.parent).unwrap_or("default");
        let Ok(spec) = spec::parse_spec(&request.parent) else {
            return Ok(CustomizeResponse::default());
        };
        let named = |resource: &str, name: &str| RelatedResourceRule {
            api_version: "v1".to_owned(),
            resource: resource.to_owned(),
            names: Some(vec![name.to_owned()]),
            namespace: Some(namespace.to_owned()),
            ..RelatedResourceRule::default()
        };
        let mut rules = Vec::new();
        if let Some(key_ref) = spec
            .definition_from
            .as_ref()
            .and_then(|from| from.config_map_key_ref.as_ref())
        {
            rules.push(named("configmaps", &key_ref.name));
        }
        for secret in origin::secret_names(&spec) {
            rules.push(named("secrets", &secret));
        }
        Ok(CustomizeResponse {
            related_resources: rules,
        })
    }

    fn answers_only_from_request(&self) -> bool {
        true
    }
}

/// What one sync call knows before it decides anything.
struct Call<'r> {
    request: &'r CompositeRequest,
    name: &'r str,
    now: String,
    rollout: Rollout,
}

impl Call<'_> {
    /// An answer that leaves every observed child as it is, reporting `validated`.
    /// `serving_observed`: the observed Deployment still serves what it served.
    fn keep_running(
        &self,
        validated: Decided,
        source: Option<SourceFacts>,
        serving_observed: bool,
    ) -> Result<CompositeResponse, HookError> {
        let serving = self
            .rollout
            .served_hash
            .clone()
            .filter(|_| serving_observed);
        let facts = Facts {
            validated,
            serving: serving.as_deref(),
            definition: None,
            rollout: self.rollout.clone(),
            url: None,
            external_url: None,
            source,
            apply_limit: None,
        };
        let mut response =
            CompositeResponse::typed(&status::compute(facts, &self.request.parent, &self.now))?;
        response.children = Some(observed_children(&self.request.children));
        Ok(response)
    }
}

impl ApiMockHooks {
    /// `children::build`, memoised on everything it reads: the whole plan (the served
    /// text by its hash) and every spec field but the definition. The plan is taken
    /// apart without `..`, so a field added to it does not compile until it is keyed.
    fn children(&self, plan: &Plan<'_>) -> Result<Vec<Value>, HookError> {
        let Plan {
            name,
            spec,
            served,
            sha256,
            revision,
            made_at,
            image,
            docs_image,
        } = plan;
        let mut spec = serde_json::to_value(spec)
            .map_err(|e| HookError::Internal(format!("cannot key the children cache: {e}")))?;
        if let Some(fields) = spec.as_object_mut() {
            fields.remove("definition");
        }
        let inputs = (
            name,
            served.root_path(),
            sha256,
            revision,
            made_at,
            image,
            docs_image,
            spec,
        );
        let key = key_of(&inputs)
            .map_err(|e| HookError::Internal(format!("cannot key the children cache: {e}")))?;
        if let Some(hit) = self.built.get(&key) {
            return Ok(hit.as_ref().clone());
        }
        let built = children::build(plan)?;
        // Remembered the second time the same inputs are built, not the first: children
        // built once (each edit of a definition) would otherwise cost a deep copy now
        // and, when evicted, freeing trees long gone from the CPU's caches (perf, edited
        // 12 KiB definitions: 3.4 % of a call).
        if self.built_once.get(&key).is_some() {
            self.built.insert(key, Arc::new(built.clone()));
        } else {
            self.built_once.insert(key, ());
        }
        Ok(built)
    }
}

/// The `Fetched` condition and when to sync again. When another replica has already
/// read a newer copy of the same ref, what runs is kept and this server's copy is
/// refreshed now rather than at the next interval.
fn refresh_if_behind(
    origin: &Origin<'_>,
    decision: &Decision<'_>,
    reading: origin::Reading<'_>,
    ctx: &Context,
) -> (Option<Decided>, u64) {
    let (Origin::Fetched { request, .. }, Some(served), true) =
        (origin, &decision.served, decision.behind)
    else {
        return (reading.fetched, reading.resync_seconds);
    };
    let running = served.revision.as_deref().unwrap_or("unknown");
    let fetched = polling::refreshing(ctx.sources.as_ref(), request, running);
    (Some(fetched), polling::PENDING_RESYNC_SECONDS)
}

/// Where the mock answers: in the cluster, and through the Ingress when there is one.
struct Urls {
    cluster: String,
    external: Option<String>,
}

impl Urls {
    fn of(name: &str, namespace: &str, spec: &spec::ApiMockSpec) -> Urls {
        let external = spec.ingress.as_ref().map(|ingress| {
            let scheme = if ingress.tls.is_some() || ingress.cert_manager == Some(true) {
                "https"
            } else {
                "http"
            };
            format!("{scheme}://{}{}", ingress.hostname, ingress.path)
        });
        Urls {
            cluster: format!(
                "http://{name}.{namespace}.svc:{}",
                children::service_port(spec)
            ),
            external,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::controllers::{Context, ControllerSettings, Registry};
    use crate::protocol::Hook;

    fn request(definition: &str) -> Vec<u8> {
        serde_json::json!({
            "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
            "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                       "metadata": {"name": "pets", "namespace": "team", "generation": 1, "uid": "u"},
                       "spec": {"definition": definition}},
            "children": {}, "related": {}
        })
        .to_string()
        .into_bytes()
    }

    #[test]
    fn a_cached_attempt_stops_at_an_unseen_definition_and_answers_a_seen_one_identically() {
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        let body = request("openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths: {}\n");
        // Answers from two registries, so no answer can be another's memo hit.
        let fresh = Registry::standard(ControllerSettings::default());
        let full = fresh.call("apimock", Hook::Sync, &body, &ctx).result;
        let registry = Registry::standard(ControllerSettings::default());
        let Ok(prepared) = registry.prepare("apimock", Hook::Sync, &body) else {
            panic!("a well-formed request is prepared");
        };
        assert!(
            prepared.try_cached(&ctx).is_none(),
            "validating a new definition is slow work and must be left to where slow work may run"
        );
        // The call then runs from its parsed request, as a full call would.
        let finished = prepared.run(&ctx).result;
        let Some(cached) = prepared.try_cached(&ctx) else {
            panic!("a validated definition is answered from what is remembered");
        };
        assert!(cached.from_request_alone);
        let (Ok(full), Ok(finished), Ok(cached)) = (full, finished, cached.result) else {
            panic!("every call should answer");
        };
        assert_eq!(finished, full);
        assert_eq!(cached, full);
    }

    /// The children memo once left `made_at` out of its hand-written key, so a second
    /// plan differing only there got the first plan's ConfigMap.
    #[test]
    fn every_input_of_the_children_is_part_of_their_memo_key() {
        use super::children::{Plan, SOURCE_TIME_ANNOTATION, ServedFiles};
        use super::definition::Format;
        let hooks = super::ApiMockHooks::new(&ControllerSettings::default());
        let spec = super::spec::ApiMockSpec::default();
        let plan = |made_at: Option<i64>, replicas: Option<i32>| {
            let spec = super::spec::ApiMockSpec {
                replicas,
                ..spec.clone()
            };
            let children = hooks.children(&Plan {
                name: "pets",
                spec: &spec,
                served: ServedFiles::Text {
                    text: "openapi: 3.0.3\n",
                    format: Format::Yaml,
                },
                sha256: "abc",
                revision: Some("r1"),
                made_at,
                image: "mock:1",
                docs_image: "docs:1",
            });
            children.unwrap_or_else(|e| panic!("children: {e}"))
        };
        let source_time = |children: &[serde_json::Value]| {
            children
                .iter()
                .find(|c| c["kind"] == "ConfigMap")
                .map(|c| c["metadata"]["annotations"][SOURCE_TIME_ANNOTATION].clone())
        };
        // Built twice, so that the first plan's children are remembered and a key that
        // missed an input would hand them to the next plan.
        let first = plan(Some(1_700_000_000), None);
        assert_eq!(plan(Some(1_700_000_000), None), first);
        assert_eq!(hooks.built.len(), 1, "remembered on the second build");
        let later = plan(Some(1_800_000_000), None);
        assert_ne!(source_time(&first), source_time(&later));
        let scaled = plan(Some(1_700_000_000), Some(3));
        assert_ne!(first, scaled, "a spec field outside the hand-picked ones");
    }

    #[test]
    fn only_a_sync_is_tried_from_what_is_remembered() {
        let registry = Registry::standard(ControllerSettings::default());
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        let body = request("openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths: {}\n");
        let _ = registry.call("apimock", Hook::Sync, &body, &ctx);
        for hook in [Hook::Finalize, Hook::Customize] {
            let Ok(prepared) = registry.prepare("apimock", hook, &body) else {
                panic!("a well-formed request is prepared");
            };
            assert!(prepared.try_cached(&ctx).is_none(), "{hook}");
        }
        for controller in ["monitoredservice", "configsync"] {
            let Ok(prepared) = registry.prepare(controller, Hook::Customize, b"{\"parent\": {}}")
            else {
                panic!("a customize request is prepared");
            };
            assert!(prepared.try_cached(&ctx).is_none(), "{controller}");
        }
    }
}

#[cfg(test)]
mod sync_tests;
