//! configsync: a DecoratorController that keeps a ConfigMap in sync with a git path for
//! any Deployment or StatefulSet carrying `configsync.metahooks.io/git-url` — for
//! workloads users do not own (Helm charts) and so cannot give a new CR.
//!
//! Attachment: ConfigMap `<target>-configsync` with the files. The target gets
//! `configsync.metahooks.io/revision`, and `configsync.metahooks.io/error` while
//! something is wrong. The target's status is never touched. Fetching goes through the
//! same engine, limits and safety rules as MonitoredService; a failed fetch keeps the
//! last ConfigMap.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

use crate::controllers::common::config::{Config, ConfigFormat};
use crate::controllers::common::names::{self, check_dns1123_subdomain};
use crate::controllers::common::polling;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reading::Reads;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::refresh;
use crate::controllers::common::secrets;
use crate::controllers::common::source_spec::{GitFields, GitPick, git_location};
use crate::controllers::{Answer, Context, DecoratorHooks, Reply};
use crate::error::HookError;
use crate::protocol::{
    CustomizeRequest, CustomizeResponse, DecoratorRequest, DecoratorResponse, ObjectMap,
    RelatedResourceRule, object_name, object_namespace,
};
use crate::source::signature::VerifyMode;
use crate::source::{FetchError, SourceRequest};

/// Target annotation: the repository URL (required).
pub const GIT_URL: &str = "configsync.metahooks.io/git-url";
/// Target annotation: branch, tag or commit (default: the remote's HEAD).
pub const REF: &str = "configsync.metahooks.io/ref";
/// Target annotation: a semver range; the highest tag in it is synced (instead of `ref`).
pub const SEMVER: &str = "configsync.metahooks.io/semver";
/// Target annotation: a Secret with the keys trusted to sign what is synced (OpenPGP
/// keys under names ending in `.asc`, SSH keys under `allowed_signers`); it must carry
/// the credentials label too. Nothing unsigned is synced once it is set.
pub const VERIFY_SECRET: &str = "configsync.metahooks.io/verify-secret";
/// Target annotation: what must be signed, `HEAD` (default), `Tag` or `TagAndHEAD`.
pub const VERIFY_MODE: &str = "configsync.metahooks.io/verify-mode";
/// Target annotation: the directory or file to sync (default: the root).
pub const PATH: &str = "configsync.metahooks.io/path";
/// Target annotation: poll period in seconds (default 60, minimum 10).
pub const INTERVAL: &str = "configsync.metahooks.io/interval-seconds";
/// Target annotation: a Secret with credentials (it must carry the credentials label).
pub const SECRET: &str = "configsync.metahooks.io/secret";
/// Target annotation: a Secret with `ca.crt` and/or `tls.crt` + `tls.key` for an https
/// repository (it must carry the credentials label too).
pub const CERT_SECRET: &str = "configsync.metahooks.io/cert-secret";
/// Written on the target: the last value of `sources.metahooks.io/requested-at` handled
/// (the repository was fetched after it was set).
pub const HANDLED: &str = "configsync.metahooks.io/last-handled-requested-at";
/// Written on the target: the revision the attached ConfigMap holds.
pub const REVISION: &str = "configsync.metahooks.io/revision";
/// Written on the target: why the wanted revision is not attached (absent when it is).
pub const ERROR: &str = "configsync.metahooks.io/error";
/// Written on the target: what configsync changed from what the annotations ask (an
/// interval below the minimum raised to it); absent otherwise.
pub const WARNING: &str = "configsync.metahooks.io/warning";
/// Every annotation of configsync's prefix: the ones it reads and the ones it writes.
/// Another one in the prefix is a typo (`…/pth`) and is refused rather than ignored.
const KNOWN: [&str; 13] = [
    GIT_URL,
    REF,
    SEMVER,
    VERIFY_SECRET,
    VERIFY_MODE,
    PATH,
    INTERVAL,
    SECRET,
    CERT_SECRET,
    REVISION,
    ERROR,
    HANDLED,
    WARNING,
];
/// The prefix of configsync's annotations.
const PREFIX: &str = "configsync.metahooks.io/";
/// The label a Secret needs (value `"true"`) to be usable as configsync credentials.
pub const CREDENTIALS_LABEL: &str = "configsync.metahooks.io/credentials";

/// The attached ConfigMap's name.
pub fn attachment_name(target: &str) -> String {
    names::suffixed_name(target, "-configsync")
}

/// The configsync decorator.
pub struct ConfigSyncHooks;

impl DecoratorHooks for ConfigSyncHooks {
    fn parent_types(&self) -> &'static [crate::controllers::ParentType] {
        &[("apps/v1", "Deployment"), ("apps/v1", "StatefulSet")]
    }

    fn sync(
        &self,
        request: &DecoratorRequest,
        ctx: &Context,
    ) -> Result<Answer<DecoratorResponse>, HookError> {
        let mut reads = Reads::new(ctx.sources.as_ref()).for_parent(&request.object);
        let reply = self.answer(request, &mut reads)?;
        Ok(reply.with_sources(reads.finish()))
    }

    fn finalize(
        &self,
        request: &DecoratorRequest,
        _ctx: &Context,
    ) -> Result<DecoratorResponse, HookError> {
        Ok(DecoratorResponse {
            annotations: Some(BTreeMap::from([
                (REVISION.to_owned(), None),
                (ERROR.to_owned(), None),
                (HANDLED.to_owned(), None),
                (WARNING.to_owned(), None),
            ])),
            attachments: Some(Vec::new()),
            finalized: Some(request.attachments.is_empty()),
            ..DecoratorResponse::default()
        })
    }

    /// Asks for the credential Secrets of the target's namespace: those labelled
    /// [`CREDENTIALS_LABEL`]. Metacontroller caches this answer per (target, generation)
    /// for 20 minutes and annotation edits do not bump the generation, so the rule must
    /// not depend on the annotations: sync picks the Secret the annotation names from
    /// what this rule brings, and an edit takes effect at the next sync.
    fn customize(&self, request: &CustomizeRequest) -> Result<CustomizeResponse, HookError> {
        let namespace = object_namespace(&request.parent).unwrap_or("default");
        Ok(CustomizeResponse {
            related_resources: vec![RelatedResourceRule {
                api_version: "v1".to_owned(),
                resource: "secrets".to_owned(),
                label_selector: Some(serde_json::json!({
                    "matchLabels": {CREDENTIALS_LABEL: "true"}
                })),
                namespace: Some(namespace.to_owned()),
                ..RelatedResourceRule::default()
            }],
        })
    }
}

impl ConfigSyncHooks {
    /// Reads the annotations, looks the source up (fetching now when the target asks),
    /// and answers with the attachment and annotations.
    fn answer(
        &self,
        request: &DecoratorRequest,
        reads: &mut Reads<'_>,
    ) -> Result<Reply<DecoratorResponse>, HookError> {
        let target = &request.object;
        let name = object_name(target).unwrap_or_default();
        let annotations = Annotations::of(target);
        let observed = request
            .attachments
            .find("ConfigMap", "v1", None, &attachment_name(name))
            .map(Config::from_config_map);
        if let Err(invalid) = check_dns1123_subdomain(&attachment_name(name)) {
            let problem = coded(Reason::InvalidName, invalid);
            return answer(None, Some(problem), observed.as_ref(), name, 0);
        }
        let namespace = object_namespace(target).unwrap_or("default");
        let (wanted, interval) = match annotations.source(&request.related, namespace) {
            Ok(wanted) => wanted,
            Err((problem, resync)) => {
                return answer(
                    observed.clone(),
                    Some(problem),
                    observed.as_ref(),
                    name,
                    resync,
                );
            }
        };
        let handled_before = annotations.get(HANDLED);
        let asked = refresh::ask(
            reads,
            &wanted,
            Duration::from_secs(interval),
            target,
            handled_before,
        );
        let state = reads.lookup(
            &wanted,
            Duration::from_secs(interval),
            observed.as_ref().and_then(|c| c.revision.as_ref()),
        );
        let (served, problem) = served(&state, observed.as_ref());
        let mut reply = answer(served, problem, observed.as_ref(), name, interval)?;
        let response = &mut reply.response;
        if let Some(written) = response.annotations.as_mut() {
            written.insert(WARNING.to_owned(), annotations.raised_interval());
        }
        if asked.handled.as_deref() != handled_before
            && let Some(written) = response.annotations.as_mut()
        {
            written.insert(HANDLED.to_owned(), asked.handled);
        }
        Ok(reply)
    }
}

struct Annotations<'a>(Option<&'a serde_json::Map<String, Value>>);

impl<'a> Annotations<'a> {
    fn of(object: &'a Value) -> Annotations<'a> {
        Annotations(
            object
                .pointer("/metadata/annotations")
                .and_then(Value::as_object),
        )
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        self.0?.get(key)?.as_str().map(str::trim)
    }

    /// What to say when `interval-seconds` is below the minimum and was raised to it.
    fn raised_interval(&self) -> Option<String> {
        let asked: u64 = self.get(INTERVAL)?.parse().ok()?;
        let used = polling::interval_seconds(Some(asked));
        (used != asked).then(|| {
            format!("annotation {INTERVAL} is {asked}; the minimum is {used}, so the repository is polled every {used} s")
        })
    }

    /// What is wrong when an annotation with our prefix is not one we read (a typo
    /// would otherwise be ignored in silence).
    fn unknown(&self) -> Option<String> {
        let mut unknown: Vec<&str> = self
            .0
            .into_iter()
            .flat_map(|map| map.keys())
            .map(String::as_str)
            .filter(|key| key.starts_with(PREFIX) && !KNOWN.contains(key))
            .collect();
        if unknown.is_empty() {
            return None;
        }
        unknown.sort_unstable();
        let known: Vec<&str> = KNOWN[..6]
            .iter()
            .map(|key| key.trim_start_matches(PREFIX))
            .collect();
        Some(coded(
            Reason::InvalidSpec,
            format!(
                "annotation {} is not one configsync reads (it reads {PREFIX}{{{}}}); nothing is synced until it is fixed",
                unknown.join(", "),
                known.join(",")
            ),
        ))
    }

    /// The poll period the annotation asks for, raised to the minimum; a value that is
    /// not a number is a problem (looked at again after the default period).
    fn interval(&self) -> Result<u64, (String, u64)> {
        match self.get(INTERVAL).map(|v| v.parse::<u64>()) {
            None => Ok(polling::interval_seconds(None)),
            Some(Ok(seconds)) => Ok(polling::interval_seconds(Some(seconds))),
            Some(Err(_)) => {
                let problem = coded(
                    Reason::InvalidSpec,
                    format!("annotation {INTERVAL} must be a whole number of seconds"),
                );
                Err((problem, polling::DEFAULT_INTERVAL_SECONDS))
            }
        }
    }

    /// The source the annotations name and its poll period, or what is wrong with them
    /// and when to look again.
    fn source(
        &self,
        related: &ObjectMap,
        namespace: &str,
    ) -> Result<(SourceRequest, u64), (String, u64)> {
        if let Some(problem) = self.unknown() {
            return Err((problem, 0));
        }
        let Some(url) = self.get(GIT_URL).filter(|u| !u.is_empty()) else {
            let problem = match self.get(GIT_URL) {
                Some(_) => format!("annotation {GIT_URL} is empty"),
                None => format!("annotation {GIT_URL} is missing"),
            };
            let problem = coded(Reason::InvalidSpec, problem);
            return Err((problem, 0));
        };
        let interval = self.interval()?;
        let labelled = |Problem { reason, message }| {
            let message = if reason == Reason::SecretNotFound {
                format!("{message} with label {CREDENTIALS_LABEL}=true")
            } else {
                message
            };
            (coded(reason, message), interval)
        };
        let credentials = match self.get(SECRET) {
            Some(secret) => {
                Some(secrets::credentials(related, namespace, secret).map_err(labelled)?)
            }
            None => None,
        };
        let tls = match self.get(CERT_SECRET) {
            Some(secret) => {
                Some(secrets::tls_material(related, namespace, secret).map_err(labelled)?)
            }
            None => None,
        };
        let fields = GitFields {
            url: format!("annotation {GIT_URL}"),
            reference: format!("annotation {REF}"),
            semver: format!("annotation {SEMVER}"),
            path: format!("annotation {PATH}"),
        };
        let pick = GitPick {
            reference: self.get(REF),
            semver: self.get(SEMVER),
        };
        let mut location = git_location(url, pick, self.get(PATH), &fields)
            .map_err(|problem| (coded(problem.reason, problem.message), interval))?;
        if let Some(mode) = self.get(VERIFY_MODE)
            && self.get(VERIFY_SECRET).is_none()
        {
            let problem = format!(
                "annotation {VERIFY_MODE} is {mode:?} but {VERIFY_SECRET} is missing: name the Secret with the trusted keys"
            );
            return Err((coded(Reason::InvalidSpec, problem), interval));
        }
        if let Some(secret) = self.get(VERIFY_SECRET) {
            let asked = self.get(VERIFY_MODE).unwrap_or("HEAD");
            let Some(mode) = VerifyMode::parse(asked) else {
                let problem = format!(
                    "annotation {VERIFY_MODE} is {asked:?}; it is one of HEAD, Tag, TagAndHEAD"
                );
                return Err((coded(Reason::InvalidSpec, problem), interval));
            };
            let keys = secrets::trusted_keys(related, namespace, secret, mode).map_err(labelled)?;
            if let crate::source::Location::Git { verify, .. } = &mut location {
                *verify = Some(keys);
            }
        }
        Ok((
            SourceRequest {
                tls,
                location,
                namespace: namespace.to_owned(),
                credentials,
            },
            interval,
        ))
    }
}

/// What to keep in the ConfigMap, and what to say about it: the fetched files, unless
/// the fetch failed or they cannot be a ConfigMap (then what is there stays).
fn served(
    state: &crate::source::SourceState,
    observed: Option<&Config>,
) -> (Option<Config>, Option<String>) {
    let fresh = state
        .snapshot
        .as_deref()
        .map(|s| Config::from_snapshot(s, Some(ConfigFormat::Files)));
    match (fresh, &state.error) {
        (_, Some(error)) => (observed.cloned(), Some(fetch_problem(error, observed))),
        (Some(Ok(config)), None) => (Some(config), None),
        (Some(Err(problem)), None) => (
            observed.cloned(),
            Some(coded(problem.reason, problem.message)),
        ),
        (None, None) => (observed.cloned(), None),
    }
}

fn fetch_problem(error: &FetchError, running: Option<&Config>) -> String {
    let reason = Reason::Fetch(error.reason());
    match running {
        Some(config) => coded(
            reason,
            format!("{error} (still serving {})", config.shown_revision()),
        ),
        None => coded(reason, error),
    }
}

/// The error annotation's text: the reason first (the same CamelCase reason a
/// MonitoredService's or an APIMock's condition gives), so an alert can match it.
fn coded(reason: Reason, message: impl std::fmt::Display) -> String {
    format!("{}: {message}", reason.as_str())
}

/// The full answer: the attachment (served config, if any), the target annotations, no
/// status (a decorator leaves the target's status alone).
fn answer(
    served: Option<Config>,
    problem: Option<String>,
    observed: Option<&Config>,
    name: &str,
    resync: u64,
) -> Result<Reply<DecoratorResponse>, HookError> {
    let revision = served
        .as_ref()
        .or(observed)
        .and_then(|c| c.revision.as_ref().map(ToString::to_string));
    let annotations =
        BTreeMap::from([(REVISION.to_owned(), revision), (ERROR.to_owned(), problem)]);
    let attachments = served
        .map(|config| config_map(name, &config))
        .transpose()?
        .into_iter()
        .collect();
    let response = DecoratorResponse {
        annotations: Some(annotations),
        attachments: Some(attachments),
        ..DecoratorResponse::default()
    };
    Ok(Reply::after_seconds(response, resync))
}

fn config_map(target: &str, config: &Config) -> Result<Value, HookError> {
    let annotations = config.annotations();
    let object = ConfigMap {
        metadata: ObjectMeta {
            name: Some(attachment_name(target)),
            labels: Some(BTreeMap::from([
                (
                    "app.kubernetes.io/managed-by".to_owned(),
                    "metahooks".to_owned(),
                ),
                (
                    "configsync.metahooks.io/target".to_owned(),
                    names::label_value(target),
                ),
            ])),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        data: Some(config.data.clone()).filter(|d| !d.is_empty()),
        binary_data: config.binary_data(),
        ..ConfigMap::default()
    };
    serde_json::to_value(object).map_err(crate::error::Fault::serialise("the ConfigMap"))
}

#[cfg(test)]
mod sync_tests;
