//! MonitoredService: a Deployment whose configuration comes from git or an HTTP file and
//! rolls when — and only when — that configuration changes.
//!
//! `sync` looks the source up in the engine (never waiting on the network), turns the
//! snapshot into ConfigMap content, and falls back to what the observed ConfigMap holds
//! whenever the fetch is pending or failed or the new content is invalid, so a bad poll
//! never wipes a running config. `customize` asks for the credentials Secret and the
//! service's Pods; `finalize` completes whatever the spec holds.

pub mod children;
mod decide;
pub mod spec;
mod status;

use self::decide::decide;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use self::children::{CONFIG_HASH_ANNOTATION, config_map_name};
use self::spec::{ConfigFormat, MonitoredServiceSpec};
use self::status::Facts;
use crate::controllers::common::bounds;
use crate::controllers::common::conditions::format_time;
use crate::controllers::common::config::Config;
use crate::controllers::common::config_schema::{self, ConfigSchemaSpec};
use crate::controllers::common::keep::{observed_children, observed_status};
use crate::controllers::common::names::{check_dns1035_label, check_dns1123_subdomain};
use crate::controllers::common::polling;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reading::Reads;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::refresh;
use crate::controllers::common::rollout::Rollout;
use crate::controllers::common::source_spec::{self, HttpSource};
use crate::controllers::common::source_sync::SourceCall;
use crate::controllers::common::taken::{self, ChildName};
use crate::controllers::{Answer, CompositeHooks, Context, Reply};
use crate::error::HookError;
use crate::protocol::{
    CompositeRequest, CompositeResponse, CustomizeRequest, CustomizeResponse, ObjectMap,
    RelatedResourceRule, object_name, object_namespace,
};
use crate::source::derived::DerivedKey;
use crate::source::{Location, Snapshot, SourceRequest};

/// The MonitoredService controller.
pub struct MonitoredServiceHooks {
    /// Refuse env taken from Secrets or pod fields (`--deny-secret-env`).
    deny_secret_env: bool,
}

impl Default for MonitoredServiceHooks {
    fn default() -> MonitoredServiceHooks {
        MonitoredServiceHooks::new(&crate::controllers::ControllerSettings::default())
    }
}

impl MonitoredServiceHooks {
    /// The controller with the server's settings.
    pub fn new(settings: &crate::controllers::ControllerSettings) -> MonitoredServiceHooks {
        MonitoredServiceHooks {
            deny_secret_env: settings.policy.deny_secret_env,
        }
    }
}

/// A snapshot turned into ConfigMap content, or why it cannot be.
type Converted = Result<Config, Problem>;

fn converted_weight(converted: &Converted) -> u64 {
    converted.as_ref().map_or(0, Config::content_bytes) as u64
}

/// The snapshot as ConfigMap content, converted once per snapshot and format (up to
/// 1 MiB of content: a warm sync reuses the conversion and its hash). Kept with the
/// snapshot, so it counts in the snapshot budget and goes with the snapshot.
fn convert(snapshot: &Snapshot, format: Option<ConfigFormat>) -> Result<Arc<Converted>, HookError> {
    let inputs = crate::hash::digest_of(&format).map_err(crate::error::Fault::serialise(
        "the key of a converted config",
    ))?;
    let key = DerivedKey {
        step: "conversion",
        inputs,
    };
    if let Some(kept) = snapshot.derived.get(&key) {
        return Ok(kept);
    }
    let converted = Config::from_snapshot(snapshot, format);
    Ok(snapshot.derived.keep(key, converted, converted_weight))
}

impl MonitoredServiceHooks {
    /// Observe (the running config, the rollout, the pods) → check the spec and names →
    /// look the source up (fetching now when the parent asks) → decide what to serve →
    /// build and report.
    fn answer(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
        reads: &mut Reads<'_>,
        asked: &mut refresh::Outcome,
    ) -> Result<Reply<CompositeResponse>, HookError> {
        let call = Call::observe(request, ctx);
        let spec = match self.checked_spec(&call) {
            Ok(spec) => spec,
            Err(facts) => return call.keep_running(*facts, 0),
        };
        let interval = spec.interval_seconds();
        let wanted = match source_request(&spec, &request.related, call.namespace) {
            Ok(Some(wanted)) => wanted,
            Ok(None) => {
                // No source at all: a plain Deployment (and Service), nothing to fetch.
                let children = children::build(call.name, &spec, None)?;
                return call.answer(Facts::no_source(call.pods()), children, 0);
            }
            Err(Problem { reason, message }) => {
                // A Secret or a path that cannot be used stops the fetch, not the spec.
                let fetch_problem = matches!(
                    reason,
                    Reason::Fetch(_) | Reason::SecretNotFound | Reason::SecretInvalid
                );
                let facts = if fetch_problem {
                    Facts::not_fetched(reason, message, call.running(), call.pods())
                } else {
                    Facts::invalid_spec(reason, message, call.running(), call.pods())
                };
                // With the config still in the observed ConfigMap the children are rebuilt
                // from it; without one (the service ran without a source), what runs stays.
                return match call.running() {
                    Some(running) => {
                        let children = children::build(call.name, &spec, Some(running))?;
                        call.answer(facts, children, interval)
                    }
                    None => call.keep_running(facts, interval),
                };
            }
        };

        answer_from_source(&call, &spec, &wanted, reads, asked)
    }

    /// The spec, when it parses, its env is allowed and the name can name the children;
    /// otherwise the facts that say why not.
    fn checked_spec<'c>(&self, call: &'c Call<'_>) -> Result<MonitoredServiceSpec, Box<Facts<'c>>> {
        let spec = spec::parse_spec(&call.request.parent).map_err(|problem| {
            Box::new(Facts::invalid_spec(
                Reason::InvalidSpec,
                problem.to_string(),
                call.running(),
                call.pods(),
            ))
        })?;
        let checked = bounds::check("spec.image", &spec.image, bounds::IMAGE_BYTES)
            .and_then(|()| spec.check_env(self.deny_secret_env));
        if let Err(Problem { reason, message }) = checked {
            return Err(Box::new(Facts::invalid_spec(
                reason,
                message,
                call.running(),
                call.pods(),
            )));
        }
        if let Err(invalid) = check_dns1035_label(call.name)
            .and_then(|()| check_dns1123_subdomain(&config_map_name(call.name)))
        {
            let message = format!("metadata.name cannot name the children: {invalid}");
            return Err(Box::new(Facts::invalid_spec(
                Reason::InvalidName,
                message,
                None,
                call.pods(),
            )));
        }
        Ok(spec)
    }
}

/// The schema a config must pass, as the spec gives it: inline, or a file read from the
/// same remote (and so, once both are read, the same commit). None while that file's
/// first read runs.
fn schema_of(
    schema: &ConfigSchemaSpec,
    wanted: &SourceRequest,
    reads: &mut Reads<'_>,
    interval: u64,
    running: Option<&crate::source::Revision>,
) -> Option<(Result<Value, Problem>, Option<crate::source::Revision>)> {
    match (&schema.inline, &schema.path, &wanted.location) {
        (Some(inline), None, _) => Some((Ok(inline.clone()), None)),
        (None, Some(path), Location::Git { .. }) => {
            let mut request = wanted.clone();
            let normalised = match crate::source::policy::check_repo_path(path) {
                Ok(normalised) => normalised,
                Err(refused) => {
                    let problem = Problem::new(
                        Reason::SchemaInvalid,
                        format!("spec.configSchema.path: {refused}"),
                    );
                    return Some((Err(problem), None));
                }
            };
            if let Location::Git { path, .. } = &mut request.location {
                *path = normalised.clone();
            }
            let state = reads.lookup(&request, Duration::from_secs(interval), running);
            if let Some(error) = &state.error {
                let problem = Problem::new(
                    Reason::SchemaInvalid,
                    format!(
                        "the schema spec.configSchema.path {normalised:?} cannot be read: {error}"
                    ),
                );
                return Some((Err(problem), None));
            }
            let snapshot = state.snapshot?;
            // Parsed once per revision of the schema file, kept with its snapshot.
            let key = DerivedKey {
                step: "schema file",
                inputs: [0; 32],
            };
            let parsed = match snapshot.derived.get::<Result<Value, Problem>>(&key) {
                Some(kept) => Result::clone(&kept),
                None => {
                    let parsed = parse_schema_file(&snapshot, &normalised);
                    Result::clone(
                        &snapshot
                            .derived
                            .keep(key, parsed, |_| config_schema::MAX_SCHEMA_BYTES as u64),
                    )
                }
            };
            Some((parsed, Some(snapshot.revision.clone())))
        }
        (None, Some(_), _) => Some((
            Err(Problem::new(
                Reason::InvalidSpec,
                "spec.configSchema.path names a file in the config's git repository; an HTTP source has none (use spec.configSchema.inline)",
            )),
            None,
        )),
        (Some(_), Some(_), _) => Some((
            Err(Problem::new(
                Reason::InvalidSpec,
                "set one of spec.configSchema.inline and spec.configSchema.path",
            )),
            None,
        )),
        (None, None, _) => Some((
            Err(Problem::new(
                Reason::InvalidSpec,
                "spec.configSchema names no schema: set inline or path",
            )),
            None,
        )),
    }
}

/// A schema file's snapshot as a schema: one text file, JSON or YAML.
fn parse_schema_file(snapshot: &Snapshot, path: &str) -> Result<Value, Problem> {
    let text = snapshot
        .files
        .values()
        .next()
        .and_then(|content| match content {
            crate::source::Content::Text(text) => Some(text.as_str()),
            crate::source::Content::Binary(_) => None,
        });
    match (snapshot.single_file, text) {
        (true, Some(text)) => {
            config_schema::parse_file(text, &format!("{path} at {}", snapshot.revision))
        }
        _ => Err(Problem::new(
            Reason::SchemaInvalid,
            format!("spec.configSchema.path {path:?} is not one text file"),
        )),
    }
}

/// The converted config as the schema lets it roll: unchanged when it passes, an error
/// (the running config stays) when it or the schema fails, None (nothing new yet) while
/// the schema file is not read or is of another commit than the config. The verdict is
/// kept with the config's snapshot, so a warm sync neither compiles nor evaluates.
fn gated(
    converted: Arc<Converted>,
    schema: Option<(Result<Value, Problem>, Option<crate::source::Revision>)>,
    snapshot: &Snapshot,
    format: Option<ConfigFormat>,
) -> Result<Option<Arc<Converted>>, HookError> {
    let Some((schema, schema_revision)) = schema else {
        return Ok(None);
    };
    if schema_revision
        .as_ref()
        .is_some_and(|revision| *revision != snapshot.revision)
    {
        return Ok(None);
    }
    let schema = match schema {
        Ok(schema) => schema,
        Err(problem) => return Ok(Some(Arc::new(Err(problem)))),
    };
    let inputs = crate::hash::digest_of(&(&schema, format, &schema_revision))
        .map_err(crate::error::Fault::serialise("the key of a schema check"))?;
    let key = DerivedKey {
        step: "schema check",
        inputs,
    };
    if let Some(kept) = snapshot.derived.get(&key) {
        return Ok(Some(kept));
    }
    let Ok(config) = converted.as_ref() else {
        return Ok(Some(converted));
    };
    let origin = schema_revision.map_or_else(
        || "spec.configSchema.inline".to_owned(),
        |revision| format!("spec.configSchema.path at {revision}"),
    );
    let verdict = config_schema::compile(&schema, &origin)
        .and_then(|checker| config_schema::check(&checker, config, &origin));
    let gated = match verdict {
        Ok(()) => Converted::clone(&converted),
        Err(problem) => Err(problem),
    };
    Ok(Some(snapshot.derived.keep(key, gated, converted_weight)))
}

/// The answer for a spec that names a source: look it up (fetching now when the parent
/// asks), decide what to serve, build and report.
fn answer_from_source(
    call: &Call<'_>,
    spec: &MonitoredServiceSpec,
    wanted: &SourceRequest,
    reads: &mut Reads<'_>,
    asked: &mut refresh::Outcome,
) -> Result<Reply<CompositeResponse>, HookError> {
    let request = call.request;
    let interval = spec.interval_seconds();
    *asked = refresh::ask(
        reads,
        wanted,
        Duration::from_secs(interval),
        &request.parent,
        refresh::recorded(&request.parent),
    );
    let state = reads.lookup(
        wanted,
        Duration::from_secs(interval),
        call.running().and_then(|c| c.revision.as_ref()),
    );
    let fresh = state
        .snapshot
        .as_deref()
        .map(|snapshot| convert(snapshot, spec.format))
        .transpose()?;
    let fresh = match (fresh, &spec.config_schema) {
        (Some(converted), Some(schema)) if converted.is_ok() => {
            let running = call.running().and_then(|c| c.revision.as_ref());
            let schema = schema_of(schema, wanted, reads, interval, running);
            match state.snapshot.as_deref() {
                Some(snapshot) => gated(converted, schema, snapshot, spec.format)?,
                None => Some(converted),
            }
        }
        (fresh, _) => fresh,
    };
    let decision = decide(
        fresh.as_deref(),
        call.running(),
        state.after_running,
        request.children.is_empty(),
    );
    let fetched = polling::fetched_condition(
        &state,
        "source",
        call.running().and_then(|c| c.revision.as_ref()),
    );
    let fetched = match (&decision.served, decision.behind) {
        (Some(served), true) => {
            polling::refreshing(reads, wanted, served.shown_revision(), fetched)
        }
        _ => fetched,
    };
    let verified = polling::verified_condition(
        wanted,
        &state,
        call.running().and_then(|c| c.revision.as_ref()),
    );
    let served = decision.served;
    let facts = Facts {
        fetched,
        verified,
        config_valid: decision.config_valid,
        config: served.as_ref(),
        pods: call.pods(),
    };
    match &served {
        None => call.keep_running(facts, interval),
        Some(served) => {
            let children = children::build(call.name, spec, Some(served))?;
            call.answer(facts, children, interval)
        }
    }
}

impl CompositeHooks for MonitoredServiceHooks {
    fn parent_types(&self) -> &'static [crate::controllers::ParentType] {
        // The production group, and config-monitor's, whose CRs adopt unchanged.
        &[
            ("metahooks.io/v1alpha1", "MonitoredService"),
            ("services.example.com/v1alpha1", "MonitoredService"),
        ]
    }

    /// [`MonitoredServiceHooks::answer`], with the handled "fetch now" value recorded.
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<Answer<CompositeResponse>, HookError> {
        let mut call = SourceCall::begin(ctx, &request.parent);
        let reply = self.answer(request, ctx, &mut call.reads, &mut call.asked)?;
        Ok(call.finish(reply))
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        _ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        let status = observed_status(&request.parent);
        Ok(CompositeResponse::new(Value::Object(status), Vec::new())
            .with_finalized(request.children.is_empty()))
    }

    fn customize(&self, request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        let name = object_name(&request.parent).unwrap_or_default();
        // Every rule names the parent's namespace: without one, Metacontroller lists
        // matching objects from every namespace.
        let namespace = object_namespace(&request.parent).unwrap_or("default");
        let mut rules = vec![RelatedResourceRule {
            api_version: "v1".to_owned(),
            resource: "pods".to_owned(),
            label_selector: Some(json!({"matchLabels": children::selector_labels(name)})),
            namespace: Some(namespace.to_owned()),
            ..RelatedResourceRule::default()
        }];
        // The objects holding its children's names, to tell a name another parent took.
        rules.extend(taken::rules(
            namespace,
            &[
                ChildName::new("ConfigMap", "v1", "configmaps", config_map_name(name)),
                ChildName::new("Deployment", "apps/v1", "deployments", name),
                ChildName::new("Service", "v1", "services", name),
            ],
        ));
        if let Ok(spec) = spec::parse_spec(&request.parent)
            && let secrets = secret_names(&spec)
            && !secrets.is_empty()
        {
            rules.push(RelatedResourceRule {
                api_version: "v1".to_owned(),
                resource: "secrets".to_owned(),
                names: Some(secrets),
                namespace: Some(namespace.to_owned()),
                ..RelatedResourceRule::default()
            });
        }
        Ok(CustomizeResponse {
            related_resources: rules,
        })
    }
}

/// What one sync call observes before it decides anything.
struct Call<'r> {
    request: &'r CompositeRequest,
    name: &'r str,
    namespace: &'r str,
    now: String,
    observed: Observed,
}

impl<'r> Call<'r> {
    fn observe(request: &'r CompositeRequest, ctx: &Context) -> Call<'r> {
        let name = object_name(&request.parent).unwrap_or_default();
        Call {
            request,
            name,
            namespace: object_namespace(&request.parent).unwrap_or("default"),
            now: format_time(ctx.now),
            observed: Observed::read(&request.children, name),
        }
    }

    /// The config the observed ConfigMap holds: what runs.
    fn running(&self) -> Option<&Config> {
        self.observed.config.as_ref()
    }

    fn pods(&self) -> Vec<String> {
        pod_names(&self.request.related, self.namespace)
    }

    /// An answer with `children`, asking again after `resync` seconds (0: never).
    fn answer(
        &self,
        facts: Facts<'_>,
        children: Vec<Value>,
        resync: u64,
    ) -> Result<Reply<CompositeResponse>, HookError> {
        let taken = taken::condition(
            &children,
            &self.request.children,
            &self.request.related,
            self.namespace,
            "MonitoredService",
        );
        let mut response = status::answer(
            facts,
            &self.observed.rollout,
            taken,
            &self.request.parent,
            &self.now,
        )?;
        response.children = Some(children);
        Ok(Reply::after_seconds(response, resync))
    }

    /// An answer that leaves every observed child as it is, asking again after `resync`
    /// seconds (0: never).
    fn keep_running(
        &self,
        facts: Facts<'_>,
        resync: u64,
    ) -> Result<Reply<CompositeResponse>, HookError> {
        self.answer(facts, observed_children(&self.request.children), resync)
    }
}

/// Where a MonitoredService's git source asks for signatures.
const VERIFY_FIELD: &str = "spec.source.git.verify";

fn secret_names(spec: &MonitoredServiceSpec) -> Vec<String> {
    let Some(source) = spec.source.as_ref() else {
        return Vec::new();
    };
    source
        .git
        .as_ref()
        .map(|git| git.secrets(VERIFY_FIELD))
        .or_else(|| source.http.as_ref().map(HttpSource::secrets))
        .map(|secrets| secrets.names())
        .unwrap_or_default()
}

/// The one source the spec names (None when it names none).
fn source_request(
    spec: &MonitoredServiceSpec,
    related: &ObjectMap,
    namespace: &str,
) -> Result<Option<SourceRequest>, Problem> {
    let source = spec.source.clone().unwrap_or_default();
    let git = source.git.as_ref();
    let http = source.http.as_ref();
    let legacy = spec.config_repo.as_ref().filter(|u| !u.is_empty());
    let named =
        usize::from(git.is_some()) + usize::from(http.is_some()) + usize::from(legacy.is_some());
    if named > 1 {
        return Err(Problem::new(
            Reason::AmbiguousSource,
            "set only one of spec.source.git, spec.source.http and spec.config_repo".to_owned(),
        ));
    }
    let secrets = git
        .map(|git| git.secrets(VERIFY_FIELD))
        .or_else(|| http.map(HttpSource::secrets))
        .unwrap_or_default();
    let location = if let Some(git) = git {
        if git.root.is_some() {
            return Err(Problem::new(
                Reason::InvalidSpec,
                "spec.source.git.root is for an APIMock's root document; a MonitoredService's config is every file under spec.source.git.path: drop root".to_owned(),
            ));
        }
        git.location("spec.source.git")?
    } else if let Some(http) = http {
        http.location("spec.source.http")?
    } else if let Some(url) = legacy {
        source_spec::http_location(url, "spec.config_repo")?
    } else {
        return Ok(None);
    };
    source_spec::request(location, secrets, related, namespace).map(Some)
}

/// What the cluster holds for this parent.
pub struct Observed {
    /// The config the observed ConfigMap holds.
    pub config: Option<Config>,
    /// The observed Deployment's rollout.
    pub rollout: Rollout,
}

impl Observed {
    fn read(children: &ObjectMap, name: &str) -> Observed {
        Observed {
            config: children
                .find("ConfigMap", "v1", None, &config_map_name(name))
                .map(Config::from_config_map),
            rollout: Rollout::observe(
                children.find("Deployment", "apps/v1", None, name),
                CONFIG_HASH_ANNOTATION,
            ),
        }
    }
}

/// The service's pods: related Pods in the parent's namespace only (Metacontroller may
/// list matching Pods of other namespaces too).
/// Pod names a status lists at most: config-monitor's `nodes` listed every one, and
/// 100k Pods made a 990 KB status (the count is in `status.podCount`).
pub const MAX_LISTED_PODS: usize = 100;

fn pod_names(related: &ObjectMap, namespace: &str) -> Vec<String> {
    let mut names: Vec<String> = related
        .of_type("Pod", "v1")
        .filter(|pod| object_namespace(pod) == Some(namespace))
        .filter_map(object_name)
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod replica_tests {
    use super::decide::newest_of;
    use super::*;
    use crate::controllers::common::config::ConfigContent;

    fn config(revision: &str, source_time: Option<i64>) -> Config {
        Config::new(ConfigContent {
            revision: Some(crate::source::Revision::new(revision)),
            source_time,
            ..ConfigContent::default()
        })
    }

    #[test]
    fn replicas_never_roll_back_and_never_trust_commit_dates() {
        let mine = config("main@sha1:w", Some(100));
        assert_eq!(newest_of(&mine, None, true), (mine.clone(), false));
        // What runs was heard of after this replica's copy was fetched: it may be newer
        // (another replica fetched later). Keep it, and refresh.
        let theirs = config("main@sha1:x", Some(50));
        assert_eq!(
            newest_of(&mine, Some(&theirs), false),
            (theirs.clone(), true)
        );
        // This replica's copy was fetched after it heard of what runs: it wins, even
        // against a commit dated a day ahead (a skewed clock, or anyone who can push).
        let future_dated = config("main@sha1:z", Some(100 + 86_400));
        assert_eq!(
            newest_of(&mine, Some(&future_dated), true),
            (mine.clone(), false)
        );
        // The spec moved to another ref (or pins a commit), or the source has no refs
        // (HTTP): the fresh copy wins.
        let pinned = config("0123abcd@sha1:v", Some(50));
        assert_eq!(
            newest_of(&pinned, Some(&theirs), false),
            (pinned.clone(), false)
        );
        let undated = config("sha256:abc", None);
        assert_eq!(
            newest_of(&undated, Some(&theirs), false),
            (undated.clone(), false)
        );
    }
}

#[cfg(test)]
mod sync_tests;
