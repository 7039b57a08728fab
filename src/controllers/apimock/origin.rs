//! Where an APIMock's definition comes from: the spec itself, a key of a ConfigMap
//! (a related object the customize hook asks for), or a git or HTTP source read through
//! the source engine, never waiting on the network.

use std::sync::Arc;
use std::time::Duration;

use super::bundle::{self, Bundle};
use super::definition::Invalid;
use super::spec::{ApiMockSpec, ConfigMapKeyRef, DefinitionFrom};
use crate::controllers::common::bounds;
use crate::controllers::common::conditions::{ConditionType, Decided};
use crate::controllers::common::polling;
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reading::Reads;
use crate::controllers::common::reason::Reason;
use crate::controllers::common::source_spec::{self, HttpSource};
use crate::protocol::ObjectMap;
use crate::source::derived::DerivedKey;
use crate::source::{Content, Location, Revision, Snapshot, SourceRequest, redact_url};

/// The spec's answer to "where is the definition?".
pub enum Origin<'s> {
    Inline(&'s str),
    ConfigMap(&'s ConfigMapKeyRef),
    Fetched {
        /// Boxed: credentials with their URL binding make it the largest variant by far.
        request: Box<SourceRequest>,
        root: Option<&'s str>,
        interval: u64,
    },
}

/// The definition a call has to work with: borrowed from the request, or a bundle read
/// from a source.
#[derive(Clone)]
pub enum Candidate<'r> {
    Text(&'r str),
    Bundle(Arc<Bundle>),
}

/// What the origin gave this call.
pub struct Reading<'r> {
    /// The `Fetched` condition; none for a definition written in the spec.
    pub fetched: Option<Decided>,
    /// The `Verified` condition of a git definition with `verify`.
    pub verified: Option<Decided>,
    /// The definition to validate and serve, or why what was read cannot be one.
    pub candidate: Option<Result<Candidate<'r>, Invalid>>,
    pub revision: Option<Revision>,
    /// When the source made that revision (git only).
    pub made_at: Option<i64>,
    /// The engine fetched this revision after it heard what the parent runs
    /// ([`SourceState::after_running`](crate::source::SourceState::after_running)).
    pub after_running: bool,
    /// The poll period of a fetched definition; 0 for one that is not polled. (Sooner
    /// while a fetch runs: the server adds that from the call's reads.)
    pub poll_seconds: u64,
}

impl Reading<'_> {
    fn fetched(fetched: Decided) -> Self {
        Reading {
            fetched: Some(fetched),
            verified: None,
            candidate: None,
            revision: None,
            made_at: None,
            after_running: true,
            poll_seconds: 0,
        }
    }
}

/// Reads `spec.definition` / `spec.definitionFrom` (exactly one), with the credentials
/// of a source's Secret.
///
/// # Errors
/// Both or neither are set, `definitionFrom` names no source or several, the ConfigMap
/// named is the mock's own, or the Secret is missing or unusable.
pub fn origin<'s>(
    spec: &'s ApiMockSpec,
    related: &ObjectMap,
    namespace: &str,
    name: &str,
) -> Result<Origin<'s>, Problem> {
    let Some(from) = &spec.definition_from else {
        if spec.definition.is_empty() {
            return Err(Problem::new(
                Reason::InvalidSpec,
                "set spec.definition (the document) or spec.definitionFrom (where to read it)"
                    .to_owned(),
            ));
        }
        return Ok(Origin::Inline(&spec.definition));
    };
    if !spec.definition.is_empty() {
        return Err(Problem::new(
            Reason::AmbiguousDefinition,
            "set only one of spec.definition and spec.definitionFrom".to_owned(),
        ));
    }
    let DefinitionFrom {
        git,
        http,
        config_map_key_ref,
        ..
    } = from;
    let (location, secret, root) = match (git, http, config_map_key_ref) {
        (Some(git), None, None) => {
            let root = git.root.as_deref();
            bounds::check_optional("spec.definitionFrom.git.root", root, bounds::PATH_BYTES)?;
            (
                git.location("spec.definitionFrom.git")?,
                git.secrets(VERIFY_FIELD),
                root,
            )
        }
        (None, Some(http), None) => (
            http.location("spec.definitionFrom.http")?,
            http.secrets(),
            None,
        ),
        (None, None, Some(key_ref)) => return config_map_origin(key_ref, name),
        _ => {
            return Err(Problem::new(
                Reason::AmbiguousSource,
                "spec.definitionFrom: set exactly one of git, http and configMapKeyRef".to_owned(),
            ));
        }
    };
    let request = source_spec::request(location, secret, related, namespace)?;
    Ok(Origin::Fetched {
        request: Box::new(request),
        root,
        interval: from.interval_seconds(),
    })
}

/// A definition in another ConfigMap of the namespace (never the mock's own).
fn config_map_origin<'s>(key_ref: &'s ConfigMapKeyRef, name: &str) -> Result<Origin<'s>, Problem> {
    let field = "spec.definitionFrom.configMapKeyRef";
    if key_ref.name == name {
        return Err(Problem::new(
            Reason::InvalidSpec,
            format!(
                "{field}.name: {name:?} is the mock's own ConfigMap; name the ConfigMap that holds the document"
            ),
        ));
    }
    bounds::check(&format!("{field}.name"), &key_ref.name, bounds::NAME_BYTES)?;
    bounds::check(&format!("{field}.key"), &key_ref.key, bounds::NAME_BYTES)?;
    Ok(Origin::ConfigMap(key_ref))
}

/// Where an APIMock's git definition asks for signatures.
const VERIFY_FIELD: &str = "spec.definitionFrom.git.verify";

/// The Secrets named by `spec.definitionFrom`, for the customize hook.
pub fn secret_names(spec: &ApiMockSpec) -> Vec<String> {
    let Some(from) = spec.definition_from.as_ref() else {
        return Vec::new();
    };
    from.git
        .as_ref()
        .map(|git| git.secrets(VERIFY_FIELD))
        .or_else(|| from.http.as_ref().map(HttpSource::secrets))
        .map(|secrets| secrets.names())
        .unwrap_or_default()
}

/// How status names the origin; URLs without credentials.
pub fn describe(origin: &Origin<'_>) -> Option<String> {
    match origin {
        Origin::Inline(_) => None,
        Origin::ConfigMap(key_ref) => {
            Some(format!("ConfigMap {}, key {}", key_ref.name, key_ref.key))
        }
        Origin::Fetched { request, .. } => Some(match &request.location {
            Location::Git {
                url,
                reference,
                semver,
                path,
                ..
            } => format!(
                "git {} {}:/{}",
                redact_url(url),
                semver.as_deref().map_or_else(
                    || reference.as_deref().unwrap_or("HEAD").to_owned(),
                    |range| format!("semver {range:?}")
                ),
                path.trim_start_matches('/')
            ),
            Location::Http { url } => redact_url(url),
        }),
    }
}

/// A snapshot turned into a definition, or why it cannot be one.
pub type Read = Result<Arc<Bundle>, Invalid>;

fn read_weight(read: &Read) -> u64 {
    read.as_ref().map_or(0, |bundle| bundle.bytes()) as u64
}

/// What `origin` holds for this call. Never waits: a source not fetched yet is pending,
/// and the engine fetches it in the background once the call has answered. `running` is
/// the revision the observed ConfigMap holds: a server without its own copy yet (it
/// restarted) says what runs rather than "pending".
pub(super) fn read<'r>(
    origin: &Origin<'r>,
    related: &'r ObjectMap,
    namespace: &str,
    running: Option<&Revision>,
    reads: &mut Reads<'_>,
) -> Reading<'r> {
    match origin {
        Origin::Inline(text) => Reading {
            fetched: None,
            verified: None,
            candidate: Some(Ok(Candidate::Text(text))),
            revision: None,
            made_at: None,
            after_running: true,
            poll_seconds: 0,
        },
        Origin::ConfigMap(key_ref) => read_config_map(key_ref, related, namespace),
        Origin::Fetched {
            request,
            root,
            interval,
        } => {
            let state = reads.lookup(request, Duration::from_secs(*interval), running);
            let fetched = polling::fetched_condition(&state, "definition", running);
            let verified = polling::verified_condition(request, &state, running);
            let candidate = state.snapshot.as_deref().map(|snapshot| {
                let read = bundle_of(snapshot, *root);
                match read.as_ref() {
                    Ok(bundle) => Ok(Candidate::Bundle(bundle.clone())),
                    Err(invalid) => Err(invalid.clone()),
                }
            });
            Reading {
                fetched: Some(fetched),
                verified,
                revision: state.snapshot.as_ref().map(|s| s.revision.clone()),
                made_at: state.snapshot.as_ref().and_then(|s| s.made_at),
                after_running: state.after_running,
                candidate,
                poll_seconds: *interval,
            }
        }
    }
}

/// The snapshot's definition, remembered with the snapshot by root: a warm sync neither
/// copies nor re-parses the files, and the copy counts in the snapshot budget.
fn bundle_of(snapshot: &Snapshot, root: Option<&str>) -> Arc<Read> {
    // Strings always encode; were one not to, the read is only not remembered.
    let Ok(inputs) = crate::hash::digest_of(&root) else {
        return Arc::new(bundle_from(snapshot, root).map(Arc::new));
    };
    let key = DerivedKey {
        step: "definition read",
        inputs,
    };
    if let Some(kept) = snapshot.derived.get(&key) {
        return kept;
    }
    let read = bundle_from(snapshot, root).map(Arc::new);
    snapshot.derived.keep(key, read, read_weight)
}

/// A fetched file, or the root document of a fetched directory and what it reaches.
fn bundle_from(snapshot: &Snapshot, root: Option<&str>) -> Result<Bundle, Invalid> {
    if snapshot.single_file {
        if root.is_some() {
            return Err(Invalid::new(
                Reason::InvalidSpec,
                "definitionFrom.git.root is set but definitionFrom.git.path names a file; drop root, or point path at the directory holding the root document",
            ));
        }
        let Some((name, content)) = snapshot.files.iter().next() else {
            return Err(Invalid::new(
                Reason::InvalidDocument,
                "the source holds no file",
            ));
        };
        let Content::Text(text) = content else {
            return Err(Invalid::new(
                Reason::InvalidDocument,
                format!("{name} is not UTF-8 text"),
            ));
        };
        return Ok(Bundle::single(
            super::definition::sniff_format(text).file_name(),
            text,
        ));
    }
    let root = bundle::choose_root(&snapshot.files, root)?;
    let (bundle, _) = bundle::gather(&snapshot.files, root)?;
    if bundle.is_single() {
        // A root that refers to no other file is served exactly like a single file.
        let text = bundle.root_text();
        return Ok(Bundle::single(
            super::definition::sniff_format(text).file_name(),
            text,
        ));
    }
    Ok(bundle)
}

fn read_config_map<'r>(
    key_ref: &ConfigMapKeyRef,
    related: &'r ObjectMap,
    namespace: &str,
) -> Reading<'r> {
    let ConfigMapKeyRef { name, key } = key_ref;
    let Some(config_map) = related.find("ConfigMap", "v1", Some(namespace), name) else {
        return Reading::fetched(Decided::new(
            ConditionType::Fetched,
            false,
            Reason::ConfigMapNotFound,
            format!(
                "ConfigMap {name:?} does not exist in namespace {namespace:?} (or the apimock controller is registered without its customize hook)"
            ),
        ));
    };
    let text = config_map
        .get("data")
        .and_then(|data| data.get(key.as_str()))
        .and_then(serde_json::Value::as_str);
    let Some(text) = text else {
        let binary = config_map
            .get("binaryData")
            .and_then(|data| data.get(key.as_str()))
            .is_some();
        let message = if binary {
            format!(
                "ConfigMap {name:?} holds {key:?} in binaryData; the definition must be text in data"
            )
        } else {
            format!("ConfigMap {name:?} has no key {key:?} in data")
        };
        return Reading::fetched(Decided::new(
            ConditionType::Fetched,
            false,
            Reason::KeyNotFound,
            message,
        ));
    };
    Reading {
        fetched: Some(Decided::new(
            ConditionType::Fetched,
            true,
            Reason::Fetched,
            format!("read key {key:?} of ConfigMap {name:?}"),
        )),
        verified: None,
        candidate: Some(Ok(Candidate::Text(text))),
        revision: None,
        made_at: None,
        after_running: true,
        poll_seconds: 0,
    }
}
