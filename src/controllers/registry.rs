//! The registry: controllers by URL name, and one call made from request bytes to
//! answer bytes (find the controller, parse the request, run the hook, serialise).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{CompositeHooks, Context, ControllerSettings, DecoratorHooks, ParentRef, ParentType};
use super::{apimock, common, configsync, monitoredservice};
use crate::error::HookError;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, DecoratorRequest, DecoratorResponse,
    Hook, ObjectMap, TypeKey, object_name,
};
use crate::source::{NoSources, SourceRequest, SourceState, Sources};

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
    /// The answer depended on the request bytes alone (its controller says it answers
    /// from the request, and this call read no source), so the same request may be
    /// answered with the same bytes again.
    pub from_request_alone: bool,
    /// What the answer changes among the children (None for a customize answer or none).
    pub changes: Option<Changes>,
}

/// What an answer changes among the children (or a decorator's attachments), told from
/// the names it asks for and the names it was sent: for the log line of a call that
/// changes what exists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Children asked for that do not exist yet.
    pub created: usize,
    /// Existing children the answer leaves out (Metacontroller deletes them).
    pub deleted: usize,
}

impl Changes {
    /// Whether nothing is created or deleted.
    pub fn is_empty(&self) -> bool {
        self.created == 0 && self.deleted == 0
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
        }
    }
}

impl CallOutcome {
    fn refused(parent: ParentRef, error: HookError) -> CallOutcome {
        CallOutcome {
            parent,
            result: Err(error),
            from_request_alone: false,
            changes: None,
        }
    }
}

/// Controllers by URL name (`/<name>/<hook>`), and the source engine they share.
#[derive(Clone)]
pub struct Registry {
    entries: BTreeMap<String, Entry>,
    sources: Arc<dyn Sources>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            entries: BTreeMap::new(),
            sources: Arc::new(NoSources),
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

    /// The source engine controllers read through (push receivers trigger it too).
    pub fn sources(&self) -> Arc<dyn Sources> {
        self.sources.clone()
    }

    /// The context of one call at `now`.
    pub fn context(&self, now: jiff::Timestamp) -> Context {
        Context {
            now,
            sources: self.sources.clone(),
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

    /// Whether `controller`'s answers may depend on the request alone, so that a caller
    /// may remember them by the request's bytes (see [`CallOutcome::from_request_alone`]).
    pub fn may_answer_from_request_alone(&self, controller: &str) -> bool {
        matches!(self.entries.get(controller), Some(Entry::Composite(c)) if c.answers_only_from_request())
    }

    /// Parses `body` as the request type of that controller and hook, runs the hook and
    /// serialises its answer.
    pub fn call(&self, controller: &str, hook: Hook, body: &[u8], ctx: &Context) -> CallOutcome {
        match self.prepare(controller, hook, body) {
            Ok(prepared) => prepared.run(ctx),
            Err(answered) => answered,
        }
    }

    /// Finds the controller and parses the request, to be run with [`Prepared::run`] (or
    /// tried with [`Prepared::try_cached`]); an unknown controller or a body that is not
    /// a hook request is answered at once (`Err`).
    pub fn prepare(
        &self,
        controller: &str,
        hook: Hook,
        body: &[u8],
    ) -> Result<Prepared, CallOutcome> {
        let Some(entry) = self.entries.get(controller) else {
            return Err(CallOutcome::refused(
                ParentRef::default(),
                self.not_found(format!("/{controller}/{hook}")),
            ));
        };
        let failed = CallOutcome::refused;
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
            return Err(failed(
                parent,
                HookError::BadRequest(
                    "request has no parent object: this does not look like a Metacontroller hook call"
                        .to_owned(),
                ),
            ));
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
                HookError::BadRequest(format!(
                    "/{controller}/{hook} answers for {} parents, and this call is for a {kind}: the controller registration points at the wrong hook URL",
                    kinds.join(" or ")
                )),
            ));
        }
        let from_request = self.may_answer_from_request_alone(controller);
        Ok(Prepared {
            entry: entry.clone(),
            hook,
            request,
            from_request,
            parent,
        })
    }
}

/// A hook call with its request parsed, ready to run.
pub struct Prepared {
    entry: Entry,
    hook: Hook,
    request: Parsed,
    /// The controller may answer from the request alone.
    from_request: bool,
    parent: ParentRef,
}

/// A call that needs slow work (see [`Prepared::attempt`]).
#[derive(Debug, Clone, Copy)]
pub struct SlowWork {
    /// The work depends on the request alone, so its cost is bounded by the request's
    /// size: a controller that answers from the request alone (APIMock with an inline
    /// definition) whose attempt looked up no source. Work that reads a source (a
    /// snapshot to convert, a definition from git) is bounded by the source's limits.
    pub bounded_by_request: bool,
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
    /// Runs the call and serialises its answer, noting whether the answer depended on
    /// the request alone.
    pub fn run(&self, ctx: &Context) -> CallOutcome {
        let (mut outcome, read_a_source) = self.noting_sources(ctx, |ctx| self.dispatch(ctx));
        outcome.from_request_alone = self.from_request && outcome.result.is_ok() && !read_a_source;
        outcome
    }

    /// The answer if the controller can give it without slow work
    /// ([`CompositeHooks::try_cached`]); None when the call has to be
    /// [run](Prepared::run) where slow work is allowed.
    pub fn try_cached(&self, ctx: &Context) -> Option<CallOutcome> {
        self.attempt(ctx).ok()
    }

    /// Like [`Prepared::try_cached`], telling, when the call needs slow work, whether that
    /// work is bounded by the request's own bytes.
    ///
    /// # Errors
    /// [`SlowWork`] when the call has to be [run](Prepared::run) where slow work is allowed.
    pub fn attempt(&self, ctx: &Context) -> Result<CallOutcome, SlowWork> {
        let (Entry::Composite(c), Hook::Sync, Parsed::Composite(r)) =
            (&self.entry, self.hook, &self.request)
        else {
            return Err(SlowWork {
                bounded_by_request: false,
            });
        };
        let (tried, read_a_source) = self.noting_sources(ctx, |ctx| c.try_cached(r, ctx));
        let Some(tried) = tried else {
            return Err(SlowWork {
                bounded_by_request: self.from_request && !read_a_source,
            });
        };
        let changes = tried
            .as_ref()
            .ok()
            .map(|response| Changes::between(&r.children, response.children.as_deref()));
        let result = serialise(tried);
        Ok(CallOutcome {
            changes,
            from_request_alone: self.from_request && result.is_ok() && !read_a_source,
            parent: self.parent.clone(),
            result,
        })
    }

    /// Runs `call`, telling whether it read a source: an answer that did depends on more
    /// than the request (an APIMock with `definitionFrom.git`). Sources are watched only
    /// for a controller that may answer from the request alone (for the others it does
    /// not matter, and the answer counts as having read one).
    fn noting_sources<R>(&self, ctx: &Context, call: impl FnOnce(&Context) -> R) -> (R, bool) {
        if !self.from_request {
            return (call(ctx), true);
        }
        let noting = Arc::new(NotingSources {
            inner: ctx.sources.clone(),
            looked: AtomicBool::new(false),
        });
        let noted = Context {
            sources: noting.clone(),
            ..ctx.clone()
        };
        let answer = call(&noted);
        (answer, noting.looked.load(Ordering::Relaxed))
    }

    fn dispatch(&self, ctx: &Context) -> CallOutcome {
        let composite = |answer: Result<CompositeResponse, HookError>, r: &CompositeRequest| {
            let changes = answer
                .as_ref()
                .ok()
                .map(|response| Changes::between(&r.children, response.children.as_deref()));
            (serialise(answer), changes)
        };
        let decorator = |answer: Result<DecoratorResponse, HookError>, r: &DecoratorRequest| {
            let changes = answer
                .as_ref()
                .ok()
                .map(|response| Changes::between(&r.attachments, response.attachments.as_deref()));
            (serialise(answer), changes)
        };
        let (result, changes) = match (&self.entry, self.hook, &self.request) {
            (Entry::Composite(c), _, Parsed::Customize(r)) => (serialise(c.customize(r)), None),
            (Entry::Decorator(d), _, Parsed::Customize(r)) => (serialise(d.customize(r)), None),
            (Entry::Composite(c), Hook::Finalize, Parsed::Composite(r)) => {
                composite(c.finalize(r, ctx), r)
            }
            (Entry::Composite(c), _, Parsed::Composite(r)) => composite(c.sync(r, ctx), r),
            (Entry::Decorator(d), Hook::Finalize, Parsed::Decorator(r)) => {
                decorator(d.finalize(r, ctx), r)
            }
            (Entry::Decorator(d), _, Parsed::Decorator(r)) => decorator(d.sync(r, ctx), r),
            _ => (
                Err(HookError::Internal(
                    "a request was parsed for another kind of controller".to_owned(),
                )),
                None,
            ),
        };
        CallOutcome {
            parent: self.parent.clone(),
            result,
            from_request_alone: false,
            changes,
        }
    }
}

fn serialise<Resp: Serialize>(answer: Result<Resp, HookError>) -> Result<Vec<u8>, HookError> {
    answer.and_then(|response| {
        serde_json::to_vec(&response)
            .map_err(|e| HookError::Internal(format!("cannot serialise the response: {e}")))
    })
}

/// The context's sources, noting whether a call looked anything up.
struct NotingSources {
    inner: Arc<dyn Sources>,
    looked: AtomicBool,
}

impl Sources for NotingSources {
    fn lookup(&self, request: &SourceRequest, interval: Duration) -> SourceState {
        self.looked.store(true, Ordering::Relaxed);
        self.inner.lookup(request, interval)
    }

    fn lookup_holding(
        &self,
        request: &SourceRequest,
        interval: Duration,
        running: Option<&str>,
    ) -> SourceState {
        self.looked.store(true, Ordering::Relaxed);
        self.inner.lookup_holding(request, interval, running)
    }

    fn refresh(
        &self,
        request: &SourceRequest,
        interval: Duration,
        token: &str,
    ) -> crate::source::Refresh {
        self.looked.store(true, Ordering::Relaxed);
        self.inner.refresh(request, interval, token)
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
    let error = match located {
        Ok(_) => match deserializer.end() {
            Err(trailing) => format!("request body is not a hook request: {trailing}"),
            Ok(()) => "request body is not a hook request".to_owned(),
        },
        Err(error) => {
            let path = error.path().to_string();
            let inner = common::spec::in_plain_words(&error.into_inner().to_string());
            if path == "." || path.is_empty() {
                format!("request body is not a hook request: {inner}")
            } else {
                format!("request body is not a hook request: at {path}: {inner}")
            }
        }
    };
    Err(HookError::BadRequest(error))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::CompositeResponse;

    /// Answers with the parent's name, looking a source up when that name is "reads";
    /// says it answers from the request alone when `pure`.
    struct Test {
        pure: bool,
    }

    impl CompositeHooks for Test {
        fn sync(
            &self,
            request: &CompositeRequest,
            ctx: &Context,
        ) -> Result<CompositeResponse, HookError> {
            let name = &request.parent["metadata"]["name"];
            if name == "reads" {
                let source = SourceRequest {
                    location: crate::source::Location::Http {
                        url: "https://example.com/config.yaml".to_owned(),
                    },
                    namespace: "team".to_owned(),
                    credentials: None,
                    tls: None,
                };
                ctx.sources.lookup(&source, Duration::from_secs(60));
            }
            Ok(CompositeResponse::new(
                serde_json::json!({ "name": name }),
                Vec::new(),
            ))
        }

        fn finalize(
            &self,
            request: &CompositeRequest,
            ctx: &Context,
        ) -> Result<CompositeResponse, HookError> {
            self.sync(request, ctx)
        }

        fn answers_only_from_request(&self) -> bool {
            self.pure
        }
    }

    fn body(name: &str) -> Vec<u8> {
        serde_json::json!({"parent": {"metadata": {"name": name}}})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn an_answer_is_from_the_request_alone_only_for_a_pure_controller_that_read_no_source() {
        let ctx = Context::at(jiff::Timestamp::UNIX_EPOCH);
        for pure in [true, false] {
            let registry = Registry::new().composite("c", Test { pure });
            assert_eq!(registry.may_answer_from_request_alone("c"), pure);
            let outcome = registry.call("c", Hook::Sync, &body("a"), &ctx);
            assert!(outcome.result.is_ok());
            assert_eq!(outcome.from_request_alone, pure, "pure: {pure}");
        }
        let registry = Registry::new().composite("r", Test { pure: true });
        assert!(
            registry
                .call("r", Hook::Sync, &body("a"), &ctx)
                .from_request_alone
        );
        assert!(
            !registry
                .call("r", Hook::Sync, &body("reads"), &ctx)
                .from_request_alone,
            "an answer that read a source depends on more than the request"
        );
        let refused = registry.call("r", Hook::Sync, b"not json", &ctx);
        assert!(refused.result.is_err() && !refused.from_request_alone);
        assert!(!Registry::new().may_answer_from_request_alone("missing"));
    }
}
