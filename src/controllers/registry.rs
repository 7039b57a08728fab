//! The registry: controllers by URL name, and one call made from request bytes to
//! answer bytes (find the controller, parse the request, run the hook, serialise, hand
//! what the answer asks of the sources to the engine).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::common::reading::SourceUse;
use super::{Answer, CompositeHooks, Context, ControllerSettings, DecoratorHooks, Requeue};
use super::{ParentRef, ParentType, apimock, common, configsync, monitoredservice};
use crate::error::{BadRequest, Fault, HookError};
use crate::memo::steps::Steps;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, DecoratorRequest, DecoratorResponse,
    Hook, ObjectMap, TypeKey, object_name,
};
use crate::source::{NoSources, Sources};

#[derive(Clone)]
enum Entry {
    Composite(Arc<dyn CompositeHooks>),
    Decorator(Arc<dyn DecoratorHooks>),
}

/// The result of one dispatched call: the serialised response, or why there is none.
pub struct CallOutcome {
    /// The parent the call was about, for logs.
    pub parent: ParentRef,
    /// The serialised answer, or why there is none.
    pub result: Result<Vec<u8>, HookError>,
    /// The sources the answer read and what it saw of them: the same request may be
    /// answered with the same bytes for as long as the engine holds the same.
    pub sources: Vec<SourceUse>,
    /// What the answer changes among the children (None for a customize answer or none).
    pub changes: Option<Changes>,
}

/// What an answer changes among the children (or a decorator's attachments), told from
/// the names it asks for and the names it was sent: for the log line of a call that
/// changes what exists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Children asked for that do not exist yet.
    pub created: usize,
    /// Existing children the answer leaves out (Metacontroller deletes them).
    pub deleted: usize,
    /// A Deployment the answer rolls (its pod template's annotations change), if any.
    pub rolled: Option<Rolled>,
}

/// A rollout an answer starts: who asks for it, and the revision it rolls to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rolled {
    /// The parent's kind.
    pub kind: String,
    /// The Deployment's name.
    pub deployment: String,
    /// What the parent's status calls the revision rolled to (`status.revision`, or an
    /// APIMock's `status.definition.sha256`); empty when it names none.
    pub revision: String,
}

impl Changes {
    /// Whether nothing is created or deleted.
    pub fn is_empty(&self) -> bool {
        self.created == 0 && self.deleted == 0
    }

    /// With the rollout `desired` starts among `observed` Deployments, if it starts one.
    fn with_rollout(
        mut self,
        parent: &Value,
        observed: &ObjectMap,
        desired: &[Value],
        status: &Value,
    ) -> Changes {
        let template = |object: &Value| {
            object
                .pointer("/spec/template/metadata/annotations")
                .cloned()
        };
        let rolled = desired
            .iter()
            .filter(|object| object.get("kind").and_then(Value::as_str) == Some("Deployment"))
            .find(|wanted| {
                let name = object_name(wanted).unwrap_or_default();
                observed
                    .0
                    .iter()
                    .filter(|(key, _)| key.starts_with("Deployment."))
                    .flat_map(|(_, objects)| objects.values())
                    .find(|existing| object_name(existing) == Some(name))
                    .is_some_and(|existing| template(existing) != template(wanted))
            });
        self.rolled = rolled.map(|deployment| Rolled {
            kind: parent
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            deployment: object_name(deployment).unwrap_or_default().to_owned(),
            revision: status
                .get("revision")
                .or_else(|| status.pointer("/definition/sha256"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
        self
    }

    /// The changes from `observed` to `desired`, each object named by its kind, API
    /// version and name.
    fn between(observed: &ObjectMap, desired: Option<&[Value]>) -> Changes {
        let existing: BTreeSet<(String, String, &str)> = observed
            .0
            .iter()
            .filter_map(|(key, objects)| Some((TypeKey::parse(key)?, objects)))
            .flat_map(|(key, objects)| {
                objects.values().map(move |object| {
                    let name = object_name(object).unwrap_or_default();
                    (key.kind.clone(), key.api_version.clone(), name)
                })
            })
            .collect();
        let wanted: BTreeSet<(String, String, &str)> = desired
            .unwrap_or_default()
            .iter()
            .map(|object| {
                let field = |key| {
                    let text = object.get(key).and_then(Value::as_str).unwrap_or_default();
                    text.to_owned()
                };
                let name = object_name(object).unwrap_or_default();
                (field("kind"), field("apiVersion"), name)
            })
            .collect();
        Changes {
            created: wanted.difference(&existing).count(),
            deleted: existing.difference(&wanted).count(),
            rolled: None,
        }
    }
}

impl CallOutcome {
    fn refused(parent: ParentRef, error: HookError) -> CallOutcome {
        CallOutcome {
            parent,
            result: Err(error),
            sources: Vec::new(),
            changes: None,
        }
    }
}

/// Controllers by URL name (`/<name>/<hook>`), the source engine they share, and the
/// memo of expensive steps their calls share.
#[derive(Clone)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
    sources: Arc<dyn Sources>,
    steps: Arc<Steps>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            entries: BTreeMap::new(),
            sources: Arc::new(NoSources),
            steps: Arc::new(Steps::default()),
        }
    }
}

impl Registry {
    /// A registry with no controllers.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Every controller metahooks ships, under its URL name.
    pub fn standard(settings: ControllerSettings) -> Registry {
        Registry::new()
            .with_steps(Steps::new(
                settings.step_memo_bytes,
                settings.heavy_validations,
            ))
            .composite("apimock", apimock::ApiMockHooks::new(&settings))
            .composite(
                "monitoredservice",
                monitoredservice::MonitoredServiceHooks::new(&settings),
            )
            .decorator("configsync", configsync::ConfigSyncHooks)
    }

    /// The source engine controllers read through [`Context::sources`].
    pub fn with_sources(mut self, sources: Arc<dyn Sources>) -> Registry {
        self.sources = sources;
        self
    }

    /// The memo of expensive steps calls share.
    pub fn with_steps(mut self, steps: Steps) -> Registry {
        self.steps = Arc::new(steps);
        self
    }

    /// The memo of expensive steps calls share.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// The source engine controllers read through (push receivers trigger it too).
    pub fn sources(&self) -> Arc<dyn Sources> {
        self.sources.clone()
    }

    /// Hands what an answer asks of its sources to the engine (again, for an answer sent
    /// from memory: the parents still want their sources kept fresh).
    pub fn want(&self, used: &[SourceUse]) {
        for used in used {
            self.sources.want(&used.interest);
        }
    }

    /// Whether every source in `used` is held as it was seen, so that an answer built
    /// from them still holds.
    pub fn still_holds(&self, used: &[SourceUse]) -> bool {
        used.iter().all(|u| u.still_holds(self.sources.as_ref()))
    }

    /// The context of one call at `now`.
    pub fn context(&self, now: jiff::Timestamp) -> Context {
        Context {
            now,
            sources: self.sources.clone(),
            steps: self.steps.clone(),
            deadline: None,
        }
    }

    /// Adds a CompositeController's hooks under `name` (the first URL segment).
    pub fn composite(mut self, name: &str, hooks: impl CompositeHooks) -> Registry {
        self.entries
            .insert(name.to_owned(), Entry::Composite(Arc::new(hooks)));
        self
    }

    /// Adds a DecoratorController's hooks under `name`.
    pub fn decorator(mut self, name: &str, hooks: impl DecoratorHooks) -> Registry {
        self.entries
            .insert(name.to_owned(), Entry::Decorator(Arc::new(hooks)));
        self
    }

    /// Whether a controller is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// The error for a path that names no hook here, listing the hooks that exist.
    pub fn not_found(&self, path: String) -> HookError {
        let hooks: Vec<String> = self
            .names()
            .map(|name| format!("/{name}/{{sync,finalize,customize}}"))
            .collect();
        HookError::NotFound {
            path,
            hooks: hooks.join(", "),
        }
    }

    /// The registered controllers' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// The parent types `controller` answers for (empty: any, or no such controller).
    pub fn parent_types(&self, controller: &str) -> &'static [ParentType] {
        match self.entries.get(controller) {
            Some(Entry::Composite(c)) => c.parent_types(),
            Some(Entry::Decorator(d)) => d.parent_types(),
            None => &[],
        }
    }

    /// Parses `body` as the request type of that controller and hook, runs the hook,
    /// serialises its answer and hands what it asks of the sources to the engine.
    pub fn call(&self, controller: &str, hook: Hook, body: &[u8], ctx: &Context) -> CallOutcome {
        let outcome = self.answer(controller, hook, body, ctx);
        self.want(&outcome.sources);
        outcome
    }

    /// As [`Registry::call`], leaving what the answer asks of the sources to the caller
    /// ([`Registry::want`]): the server hands it over once it has remembered the answer.
    pub fn answer(&self, controller: &str, hook: Hook, body: &[u8], ctx: &Context) -> CallOutcome {
        match self.prepare(controller, hook, body) {
            Ok(prepared) => prepared.run(ctx),
            Err(refused) => *refused,
        }
    }

    /// Finds the controller and parses the request; an unknown controller or a body that
    /// is not a hook request is answered at once (`Err`).
    fn prepare(
        &self,
        controller: &str,
        hook: Hook,
        body: &[u8],
    ) -> Result<Prepared, Box<CallOutcome>> {
        let failed = |parent, error| Box::new(CallOutcome::refused(parent, error));
        let Some(entry) = self.entries.get(controller) else {
            return Err(failed(
                ParentRef::default(),
                self.not_found(format!("/{controller}/{hook}")),
            ));
        };
        let request = match (entry, hook) {
            (_, Hook::Customize) => {
                Parsed::Customize(parse_request(body).map_err(|e| failed(ParentRef::default(), e))?)
            }
            (Entry::Composite(_), _) => {
                Parsed::Composite(parse_request(body).map_err(|e| failed(ParentRef::default(), e))?)
            }
            (Entry::Decorator(_), _) => {
                Parsed::Decorator(parse_request(body).map_err(|e| failed(ParentRef::default(), e))?)
            }
        };
        let root = request.root();
        let parent = ParentRef::of(root);
        if !root.is_object() {
            return Err(failed(parent, HookError::BadRequest(BadRequest::NoParent)));
        }
        if let Entry::Composite(hooks) = entry
            && let expected = hooks.parent_types()
            && !expected.is_empty()
            && let Some(kind) = root.get("kind").and_then(serde_json::Value::as_str)
            && !expected.iter().any(|(_, known)| *known == kind)
        {
            let kinds: Vec<&str> = expected.iter().map(|(_, kind)| *kind).collect();
            return Err(failed(
                parent,
                HookError::BadRequest(BadRequest::WrongParentKind {
                    controller: controller.to_string(),
                    hook: hook.to_string(),
                    expected: kinds,
                    kind: kind.to_owned(),
                }),
            ));
        }
        Ok(Prepared {
            entry: entry.clone(),
            hook,
            request,
            parent,
        })
    }
}

/// A hook call with its request parsed, ready to run.
struct Prepared {
    entry: Entry,
    hook: Hook,
    request: Parsed,
    parent: ParentRef,
}

enum Parsed {
    Composite(CompositeRequest),
    Decorator(DecoratorRequest),
    Customize(CustomizeRequest),
}

impl Parsed {
    fn root(&self) -> &Value {
        match self {
            Parsed::Composite(r) => &r.parent,
            Parsed::Decorator(r) => &r.object,
            Parsed::Customize(r) => &r.parent,
        }
    }
}

impl Prepared {
    /// Runs the call and serialises its answer, with what it read of the sources (not
    /// yet handed to the engine: see [`Registry::want`]).
    fn run(&self, ctx: &Context) -> CallOutcome {
        let composite = |response: &CompositeResponse, r: &CompositeRequest| {
            let desired = response.children.as_deref();
            let changes = Changes::between(&r.children, desired).with_rollout(
                &r.parent,
                &r.children,
                desired.unwrap_or_default(),
                response.status.as_ref().unwrap_or(&Value::Null),
            );
            Some(changes)
        };
        let decorator = |response: &DecoratorResponse, r: &DecoratorRequest| {
            Some(Changes::between(
                &r.attachments,
                response.attachments.as_deref(),
            ))
        };
        let answered = match (&self.entry, self.hook, &self.request) {
            (Entry::Composite(c), _, Parsed::Customize(r)) => c
                .customize(r)
                .map(|response| Answered::of(&response, Vec::new(), None)),
            (Entry::Decorator(d), _, Parsed::Customize(r)) => d
                .customize(r)
                .map(|response| Answered::of(&response, Vec::new(), None)),
            (Entry::Composite(c), Hook::Finalize, Parsed::Composite(r)) => c
                .finalize(r, ctx)
                .map(|response| Answered::of(&response, Vec::new(), composite(&response, r))),
            (Entry::Composite(c), _, Parsed::Composite(r)) => c.sync(r, ctx).map(|answer| {
                let (response, sources) = wire(answer);
                let changes = composite(&response, r);
                Answered::of(&response, sources, changes)
            }),
            (Entry::Decorator(d), Hook::Finalize, Parsed::Decorator(r)) => d
                .finalize(r, ctx)
                .map(|response| Answered::of(&response, Vec::new(), decorator(&response, r))),
            (Entry::Decorator(d), _, Parsed::Decorator(r)) => d.sync(r, ctx).map(|answer| {
                let (response, sources) = wire(answer);
                let changes = decorator(&response, r);
                Answered::of(&response, sources, changes)
            }),
            _ => Err(HookError::Internal(Fault::WrongController)),
        };
        let Answered {
            bytes,
            sources,
            changes,
        } = answered.unwrap_or_else(|error| Answered {
            bytes: Err(error),
            sources: Vec::new(),
            changes: None,
        });
        let sources = if bytes.is_ok() { sources } else { Vec::new() };
        CallOutcome {
            parent: self.parent.clone(),
            result: bytes,
            sources,
            changes,
        }
    }
}

/// A sync's response as it goes on the wire: `resyncAfterSeconds` is the sooner of what
/// the controller asked and what the sources it read ask, written here and nowhere else.
fn wire<R: Resync>(answer: Answer<R>) -> (R, Vec<SourceUse>) {
    let Answer {
        mut response,
        requeue,
        sources,
    } = answer;
    let requeue = requeue.sooner(Requeue::for_sources(&sources));
    *response.resync_after_seconds() = requeue.seconds().map(Into::into);
    (response, sources)
}

/// A sync response's `resyncAfterSeconds`.
trait Resync {
    fn resync_after_seconds(&mut self) -> &mut Option<serde_json::Number>;
}

impl Resync for CompositeResponse {
    fn resync_after_seconds(&mut self) -> &mut Option<serde_json::Number> {
        &mut self.resync_after_seconds
    }
}

impl Resync for DecoratorResponse {
    fn resync_after_seconds(&mut self) -> &mut Option<serde_json::Number> {
        &mut self.resync_after_seconds
    }
}

/// A controller's answer, serialised.
struct Answered {
    bytes: Result<Vec<u8>, HookError>,
    sources: Vec<SourceUse>,
    changes: Option<Changes>,
}

impl Answered {
    fn of(
        response: &impl Serialize,
        sources: Vec<SourceUse>,
        changes: Option<Changes>,
    ) -> Answered {
        let bytes = serde_json::to_vec(response).map_err(Fault::serialise("the response"));
        Answered {
            bytes,
            sources,
            changes,
        }
    }
}

/// Reads a request body, naming the JSON path of the first problem.
///
/// Parsed without path tracking first: tracking allocates a string per map key, which
/// roughly doubles the cost of the large requests Metacontroller sends; only a body that
/// fails is parsed again to say where.
pub fn parse_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, HookError> {
    if let Ok(value) = serde_json::from_slice(body) {
        return Ok(value);
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let located: Result<T, _> = serde_path_to_error::deserialize(&mut deserializer);
    let (at, problem) = match located {
        Ok(_) => (None, deserializer.end().err().map(|e| e.to_string())),
        Err(error) => {
            let path = error.path().to_string();
            let inner = common::spec::in_plain_words(&error.into_inner().to_string());
            let at = (path != "." && !path.is_empty()).then_some(path);
            (at, Some(inner))
        }
    };
    Err(BadRequest::NotAHookRequest { at, problem }.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(hash: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"template": {"metadata": {"annotations": {"hash": hash}}}}})
    }

    #[test]
    fn an_answer_that_changes_a_deployments_pod_template_rolls_it() {
        let observed: ObjectMap = serde_json::from_value(json!({
            "Deployment.apps/v1": {"team-a/web": deployment("a")},
            "ConfigMap.v1": {}
        }))
        .unwrap();
        let parent = json!({"kind": "MonitoredService"});
        let status = json!({"revision": "main@sha1:0123"});
        let rolled = Changes::between(&observed, Some(&[deployment("b")]))
            .with_rollout(&parent, &observed, &[deployment("b")], &status)
            .rolled
            .unwrap();
        assert_eq!(
            (
                rolled.kind.as_str(),
                rolled.deployment.as_str(),
                rolled.revision.as_str()
            ),
            ("MonitoredService", "web", "main@sha1:0123")
        );
        let unchanged = Changes::between(&observed, Some(&[deployment("a")])).with_rollout(
            &parent,
            &observed,
            &[deployment("a")],
            &status,
        );
        assert_eq!(unchanged.rolled, None);
        // A Deployment made for the first time is created, not rolled.
        let fresh = ObjectMap::default();
        let created = Changes::between(&fresh, Some(&[deployment("a")])).with_rollout(
            &parent,
            &fresh,
            &[deployment("a")],
            &status,
        );
        assert_eq!((created.created, created.rolled), (1, None));
    }
}
