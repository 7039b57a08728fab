//! CompositeController and DecoratorController registrations, read the way
//! Metacontroller reads them: parent and child resources, hook paths and versions, and
//! the response decoding mode (strict for v2 hooks unless `responseUnMarshallMode` says
//! otherwise, pkg/hooks/webhook.go).

use std::collections::BTreeMap;

use serde_json::Value;

mod kinds;
mod schema;
pub use kinds::Kinds;

/// A hook of a controller registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HookName {
    /// `spec.hooks.sync`.
    Sync,
    /// `spec.hooks.finalize`.
    Finalize,
    /// `spec.hooks.customize`.
    Customize,
}

impl HookName {
    /// The hook's key under `spec.hooks`.
    pub fn key(self) -> &'static str {
        match self {
            HookName::Sync => "sync",
            HookName::Finalize => "finalize",
            HookName::Customize => "customize",
        }
    }
}

/// Where a hook is called, in which version, decoded how.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The URL path the hook is called at.
    pub path: String,
    /// `v1` or `v2`.
    pub version: String,
    /// Whether unknown fields in an answer are refused.
    pub strict: bool,
    /// `webhook.timeout`: how long Metacontroller's HTTP client waits for an answer.
    pub timeout: std::time::Duration,
    /// `webhook.etag` when enabled: answers are remembered with their ETag and asked for
    /// again with `If-None-Match`; `Some(None)` keeps them without expiry.
    pub etag: Option<Option<std::time::Duration>>,
    /// `webhook.authorization` or `webhook.basicAuth`: where the credentials are.
    pub credentials: Option<Credentials>,
    /// The `Authorization` header the credentials make, once read from their Secret
    /// (see `Cluster`'s hook resolution); sent with every call.
    pub authorization: Option<String>,
    /// `webhook.caBundle` and `webhook.clientTLS`: where the CA certificates and the
    /// client certificate are.
    pub tls_sources: Option<TlsSources>,
    /// What they hold, once read (see `Cluster`'s hook resolution).
    pub tls: Option<crate::tls::HookTls>,
}

/// Where a webhook's TLS material is (`caBundle`, `clientTLS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSources {
    /// The CA bundle: inline PEM, or a key of a Secret or ConfigMap.
    pub ca: Option<CaSource>,
    /// The client certificate's Secret (namespace, name) and its certificate and key keys.
    pub client: Option<((String, String), String, String)>,
}

/// `webhook.caBundle`: exactly one of inline, secretRef, configMapRef.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// PEM written in the registration.
    Inline(String),
    /// A key of a Secret (namespace, name, key).
    Secret(String, String, String),
    /// A key of a ConfigMap (namespace, name, key).
    ConfigMap(String, String, String),
}

/// A non-empty string at `pointer` in `value`.
fn text(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .filter(|s| !s.is_empty())
}

/// The string at `pointer` (under `what`, in the registration at `at`), or the API
/// server's "Required value" for it.
fn required_at(at: &str, value: &Value, pointer: &str, what: &str) -> Result<String, String> {
    text(value, pointer)
        .ok_or_else(|| format!("{at}.{what}{}: Required value", pointer.replace('/', ".")))
}

/// `webhook.caBundle` and `webhook.clientTLS`, as Metacontroller's CRD has them (a
/// reference's key `ca.crt`, the client's `tls.crt` and `tls.key`, unless set).
fn tls_sources(webhook: &Value, at: &str) -> Result<Option<TlsSources>, String> {
    let required = |value: &Value, field: &str, what: &str| required_at(at, value, field, what);
    let ca = match webhook.get("caBundle").filter(|c| !c.is_null()) {
        None => None,
        Some(bundle) => {
            let reference = |field: &str| -> Result<Option<(String, String, String)>, String> {
                let Some(reference) = bundle.get(field).filter(|r| !r.is_null()) else {
                    return Ok(None);
                };
                let what = format!("caBundle.{field}");
                Ok(Some((
                    required(reference, "/namespace", &what)?,
                    required(reference, "/name", &what)?,
                    text(reference, "/key").unwrap_or_else(|| "ca.crt".to_owned()),
                )))
            };
            let inline = text(bundle, "/inline");
            let secret = reference("secretRef")?;
            let config_map = reference("configMapRef")?;
            match (inline, secret, config_map) {
                (Some(pem), None, None) => Some(CaSource::Inline(pem)),
                (None, Some((ns, name, key)), None) => Some(CaSource::Secret(ns, name, key)),
                (None, None, Some((ns, name, key))) => Some(CaSource::ConfigMap(ns, name, key)),
                _ => {
                    return Err(format!(
                        "{at}.caBundle: exactly one of inline, secretRef or configMapRef must be set"
                    ));
                }
            }
        }
    };
    let client = match webhook.get("clientTLS").filter(|c| !c.is_null()) {
        None => None,
        Some(client) => Some((
            (
                required(client, "/secretRef/namespace", "clientTLS")?,
                required(client, "/secretRef/name", "clientTLS")?,
            ),
            text(client, "/certKey").unwrap_or_else(|| "tls.crt".to_owned()),
            text(client, "/privateKeyKey").unwrap_or_else(|| "tls.key".to_owned()),
        )),
    };
    Ok((ca.is_some() || client.is_some()).then_some(TlsSources { ca, client }))
}

/// Where a webhook's credentials are (Metacontroller v4.16+, `pkg/hooks/auth.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// `authorization`: `<type> <value of key>` (type `Bearer` when unset).
    Authorization {
        /// The header's scheme.
        scheme: String,
        /// The Secret's namespace and name.
        secret: (String, String),
        /// The key holding the credential.
        key: String,
    },
    /// `basicAuth`: `Basic base64(username:password)` from two keys of one Secret.
    Basic {
        /// The Secret's namespace and name.
        secret: (String, String),
        /// The keys holding the username and the password.
        keys: (String, String),
    },
}

/// `webhook.authorization` / `webhook.basicAuth`, as Metacontroller's CRD has them.
fn credentials(webhook: &Value, at: &str) -> Result<Option<Credentials>, String> {
    let required = |value: &Value, field: &str, what: &str| required_at(at, value, field, what);
    let authorization = webhook.get("authorization").filter(|a| !a.is_null());
    let basic = webhook.get("basicAuth").filter(|b| !b.is_null());
    match (authorization, basic) {
        (Some(_), Some(_)) => Err(format!(
            "{at}: authorization and basicAuth are mutually exclusive"
        )),
        (Some(auth), None) => {
            let scheme = text(auth, "/type").unwrap_or_else(|| "Bearer".to_owned());
            if scheme.trim().eq_ignore_ascii_case("basic") {
                return Err(format!(
                    "{at}.authorization: authorization type {scheme:?} is not supported; use the basicAuth field instead"
                ));
            }
            Ok(Some(Credentials::Authorization {
                scheme: scheme.trim().to_owned(),
                secret: (
                    required(auth, "/secretRef/namespace", "authorization")?,
                    required(auth, "/secretRef/name", "authorization")?,
                ),
                key: required(auth, "/secretRef/key", "authorization")?,
            }))
        }
        (None, Some(basic)) => Ok(Some(Credentials::Basic {
            secret: (
                required(basic, "/secretRef/namespace", "basicAuth")?,
                required(basic, "/secretRef/name", "basicAuth")?,
            ),
            keys: (
                text(basic, "/usernameKey").unwrap_or_else(|| "username".to_owned()),
                text(basic, "/passwordKey").unwrap_or_else(|| "password".to_owned()),
            ),
        })),
        (None, None) => Ok(None),
    }
}

/// `webhook.etag` (`WebhookEtagConfig`): off unless `enabled: true`. Metacontroller's
/// `NewWebhookExecutor` (pkg/hooks/webhook.go) reads `cacheCleanupSeconds` through its
/// pointer whenever `cacheTimeoutSeconds` is set, so one without the other crashes it
/// when the controller starts. A timeout below one second keeps entries forever
/// (pkg/cache).
fn etag_config(webhook: &Value, at: &str) -> Result<Option<Option<std::time::Duration>>, String> {
    let Some(etag) = webhook.get("etag").filter(|e| !e.is_null()) else {
        return Ok(None);
    };
    if etag.get("enabled").and_then(Value::as_bool) != Some(true) {
        return Ok(None);
    }
    let timeout = etag.get("cacheTimeoutSeconds").filter(|t| !t.is_null());
    if timeout.is_some() && etag.get("cacheCleanupSeconds").is_none_or(Value::is_null) {
        return Err(format!(
            "{at}.etag: cacheTimeoutSeconds without cacheCleanupSeconds: Metacontroller v4.17 dereferences cacheCleanupSeconds whenever cacheTimeoutSeconds is set (NewWebhookExecutor) and crashes; set both"
        ));
    }
    Ok(Some(
        timeout
            .and_then(Value::as_u64)
            .filter(|seconds| *seconds >= 1)
            .map(std::time::Duration::from_secs),
    ))
}

/// Metacontroller's webhook timeout when none (or a non-positive one) is given
/// (`webhookTimeout`, pkg/hooks/webhook.go).
pub const DEFAULT_WEBHOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A Go duration as metav1.Duration reads it (`1h2m3.5s`, `500ms`, `10s`).
fn go_duration(text: &str) -> Result<std::time::Duration, String> {
    let mut rest = text.trim();
    let problem =
        || format!("webhook.timeout {text:?} is not a duration (write e.g. 10s or 500ms)");
    if rest.is_empty() {
        return Err(problem());
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(problem)?;
        let number: f64 = rest[..number_end].parse().map_err(|_| problem())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(problem()),
        };
        total += number * seconds;
        rest = &rest[unit_end..];
    }
    Ok(std::time::Duration::from_secs_f64(total))
}

/// A child (or attachment) type of a registration.
#[derive(Debug, Clone)]
pub struct ChildRule {
    /// The child's apiVersion.
    pub api_version: String,
    /// The child's kind.
    pub kind: String,
    /// `updateStrategy.method` (`OnDelete` when unset).
    pub strategy: String,
    /// `updateStrategy.statusChecks.conditions`: (type, status, reason) a child on the
    /// latest revision must show before a rolling update moves on.
    pub status_checks: Vec<(String, Option<String>, Option<String>)>,
}

impl ChildRule {
    /// `RollingRecreate` or `RollingInPlace`.
    pub fn is_rolling(&self) -> bool {
        matches!(self.strategy.as_str(), "RollingRecreate" | "RollingInPlace")
    }
}

/// Which kind of Metacontroller controller a registration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControllerType {
    /// A CompositeController: a parent and its children.
    Composite,
    /// A DecoratorController: targets and attachments.
    Decorator,
}

/// One CompositeController or DecoratorController.
#[derive(Debug, Clone)]
pub struct Registration {
    /// `metadata.name` of the registration.
    pub name: String,
    /// Composite or decorator.
    pub type_: ControllerType,
    /// The registration as given (sent to hooks as `controller`).
    pub raw: Value,
    /// Composite: the parent; decorator: the target types.
    pub parents: Vec<(String, String, Value)>,
    /// The child types it manages.
    pub children: Vec<ChildRule>,
    /// Its hooks.
    pub hooks: BTreeMap<HookName, Hook>,
    /// `spec.generateSelector`.
    pub generate_selector: bool,
    /// `spec.resyncPeriodSeconds`: how often every parent is synced with nothing changed.
    pub resync_period_seconds: Option<f64>,
    /// Fields Metacontroller acts on that the emulator does not (each named, with what
    /// the emulator does instead), for the report: never a silent fallback.
    pub not_modelled: Vec<String>,
}

/// Webhook fields the emulator honours.
const WEBHOOK_FIELDS: &[&str] = &[
    "url",
    "timeout",
    "path",
    "service",
    "responseUnMarshallMode",
    "etag",
    "authorization",
    "basicAuth",
    "caBundle",
    "clientTLS",
];

/// A hook's `version`, `v1` when unset. Metacontroller's CRD has `enum: [v1, v2]`: the
/// API server refuses anything else, so such a controller never exists.
fn hook_version(config: &Value, at: &str) -> Result<String, String> {
    let version = config
        .get("version")
        .and_then(Value::as_str)
        .unwrap_or("v1");
    if !matches!(version, "v1" | "v2") {
        return Err(format!(
            "{at}.version: Unsupported value: {version:?}: supported values: \"v1\", \"v2\""
        ));
    }
    Ok(version.to_owned())
}

impl Hook {
    /// One `spec.hooks.<hook>`: its path, version, and whether answers are decoded
    /// strictly (v2 unless `responseUnMarshallMode` says otherwise).
    fn parse(config: &Value, at: &str, endpoint_configs: &[Value]) -> Result<Hook, String> {
        for field in config.as_object().into_iter().flatten().map(|(k, _)| k) {
            if !matches!(field.as_str(), "version" | "webhook") {
                return Err(format!(
                    "{at}: unknown field {field:?} (version and webhook are)"
                ));
            }
        }
        if let Some(webhook) = config.get("webhook").and_then(Value::as_object) {
            for field in webhook.keys() {
                if !WEBHOOK_FIELDS.contains(&field.as_str()) {
                    return Err(format!("{at}.webhook: unknown field {field:?}"));
                }
            }
        }
        let version = hook_version(config, at)?;
        let webhook = config.get("webhook").ok_or("hook without webhook")?;
        let path = match webhook.get("url").and_then(Value::as_str) {
            Some(url) => url_path(url)?,
            None => webhook
                .get("path")
                .and_then(Value::as_str)
                .ok_or("webhook needs url, or service and path")?
                .to_owned(),
        };
        let strict = match webhook
            .get("responseUnMarshallMode")
            .and_then(Value::as_str)
        {
            Some("strict") => true,
            Some("loose") => false,
            _ => version == "v2",
        };
        let timeout = match webhook.get("timeout") {
            None | Some(Value::Null) => DEFAULT_WEBHOOK_TIMEOUT,
            Some(Value::String(text)) => Some(go_duration(text)?)
                .filter(|d| !d.is_zero())
                .unwrap_or(DEFAULT_WEBHOOK_TIMEOUT),
            Some(other) => return Err(format!("webhook.timeout {other} is not a duration string")),
        };
        let own_at = format!("{at}.webhook");
        let etag = etag_config(webhook, &own_at)?;
        // ResolveEndpointConfig (pkg/hooks/endpoint_config.go): settings on the webhook
        // are used in full; without any, the first endpointConfigs entry whose host
        // matches the webhook's URL.
        let own = ["caBundle", "clientTLS", "authorization", "basicAuth"]
            .iter()
            .any(|field| webhook.get(*field).is_some_and(|v| !v.is_null()));
        let (source, source_at) = match (own, effective_url(webhook)) {
            (false, Some(url)) => match matching_endpoint(&url, endpoint_configs) {
                Some((index, entry)) => (entry, format!("spec.endpointConfigs[{index}]")),
                None => (webhook, own_at),
            },
            _ => (webhook, own_at),
        };
        let credentials = credentials(source, &source_at)?;
        let tls_sources = tls_sources(source, &source_at)?;
        Ok(Hook {
            path,
            version,
            strict,
            timeout,
            etag,
            credentials,
            authorization: None,
            tls_sources,
            tls: None,
        })
    }
}

impl ChildRule {
    /// A child rule, with its update strategy and the status checks of a rolling one.
    fn read(raw: &Value, kinds: &Kinds, registration: &str) -> Result<ChildRule, String> {
        let strategy = raw
            .pointer("/updateStrategy/method")
            .and_then(Value::as_str)
            .unwrap_or("OnDelete")
            .to_owned();
        let role = Role::Child {
            strategy: !matches!(strategy.as_str(), "OnDelete" | ""),
        };
        let (api_version, kind) = resource_rule(raw, kinds, role, registration)?;
        let text = |value: &Value, field: &str| {
            value.get(field).and_then(Value::as_str).map(str::to_owned)
        };
        let status_checks = raw
            .pointer("/updateStrategy/statusChecks/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|check| {
                Some((
                    text(check, "type")?,
                    text(check, "status"),
                    text(check, "reason"),
                ))
            })
            .collect();
        Ok(ChildRule {
            api_version,
            kind,
            strategy,
            status_checks,
        })
    }
}

/// What a resource rule is in its registration: which of Metacontroller's start-up
/// steps looks it up in discovery, and so the words it fails with.
#[derive(Clone, Copy)]
enum Role {
    CompositeParent,
    DecoratorResource,
    /// A child or attachment; with an update strategy other than OnDelete it is looked
    /// up first by `makeUpdateStrategyMap`, else by the informer factory.
    Child {
        strategy: bool,
    },
}

/// A resource rule's (apiVersion, kind), resolved as discovery resolves it. A resource
/// the API server does not serve at that apiVersion stops the controller from starting
/// (`newParentController`, `newDecoratorController`): the error is the event
/// Metacontroller records on the registration.
fn resource_rule(
    value: &Value,
    kinds: &Kinds,
    role: Role,
    registration: &str,
) -> Result<(String, String), String> {
    let api_version = str_at(value, "/apiVersion")?.to_owned();
    let resource = str_at(value, "/resource")?;
    let Some(kind) = kinds.discover(&api_version, resource)? else {
        let cause = match role {
            Role::CompositeParent => {
                format!("discovery: can't find resource {resource} in apiVersion {api_version}")
            }
            Role::DecoratorResource => {
                format!("can't find resource {resource:?} in apiVersion {api_version:?}")
            }
            Role::Child { strategy: true } => {
                format!("can't find child resource {resource:?} in {api_version}")
            }
            Role::Child { strategy: false } => format!(
                "can't create informer for child resource: discovery: can't find resource {resource} in apiVersion {api_version}"
            ),
        };
        return Err(format!(
            "{registration} would not start; Metacontroller records the event \"Cannot create new controller: {cause}\"{}",
            kinds
                .served_versions(resource)
                .map(|served| format!(" (the API server serves {resource} at {served})"))
                .unwrap_or_default()
        ));
    };
    Ok((api_version, kind.to_owned()))
}

/// The hooks a registration's `spec.hooks` configures; the rolling-update hooks and
/// `endpointConfigs` are noted as not modelled, any other hook name refused.
fn read_hooks(
    spec: &Value,
    not_modelled: &mut Vec<String>,
) -> Result<BTreeMap<HookName, Hook>, String> {
    let endpoint_configs: &[Value] = spec
        .get("endpointConfigs")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    for (index, entry) in endpoint_configs.iter().enumerate() {
        if entry
            .get("host")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!(
                "spec.endpointConfigs[{index}].host: Required value"
            ));
        }
    }
    let mut hooks = BTreeMap::new();
    for hook in [HookName::Sync, HookName::Finalize, HookName::Customize] {
        if let Some(config) = spec.pointer(&format!("/hooks/{}", hook.key())) {
            let at = format!("hooks.{}", hook.key());
            hooks.insert(hook, Hook::parse(config, &at, endpoint_configs)?);
        }
    }
    for field in spec
        .get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        match field.as_str() {
            "sync" | "finalize" | "customize" => {}
            "preUpdateChild" | "postUpdateChild" => not_modelled.push(format!(
                "hooks.{field}: not modelled (the hook is never called)"
            )),
            other => return Err(format!("hooks: unknown hook {other:?}")),
        }
    }
    Ok(hooks)
}

impl Registration {
    /// Reads one registration; `kinds` turns its plural resource names into kinds.
    ///
    /// # Errors
    /// A sentence naming the missing or unknown field.
    pub fn parse(raw: Value, kinds: &Kinds) -> Result<Registration, String> {
        let kind = raw.get("kind").and_then(Value::as_str).unwrap_or_default();
        let type_ = match kind {
            "CompositeController" => ControllerType::Composite,
            "DecoratorController" => ControllerType::Decorator,
            other => return Err(format!("not a controller registration: kind {other:?}")),
        };
        let name = str_at(&raw, "/metadata/name")?.to_owned();
        let spec = raw.get("spec").ok_or("registration has no spec")?;
        let (resources_field, children_field) = match type_ {
            ControllerType::Composite => ("parentResource", "childResources"),
            ControllerType::Decorator => ("resources", "attachments"),
        };
        if let Some(problem) = schema::schema_refusal(spec, resources_field, children_field) {
            return Err(format!(
                "{kind}.metacontroller.k8s.io {name:?} is invalid: {problem} (the API server refuses it)"
            ));
        }
        let registration = format!("{kind} {name:?}");
        let parents = parent_rules(type_, spec, kinds, &registration)?;
        check_parent_selectors(type_, spec)?;
        let child_key = children_field;
        let mut not_modelled = Vec::new();
        let children = spec
            .get(child_key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| ChildRule::read(c, kinds, &registration))
            .collect::<Result<_, String>>()?;
        let hooks = read_hooks(spec, &mut not_modelled)?;
        Ok(Registration {
            name,
            type_,
            // Whole seconds, raised to at least one: Start (composite and decorator
            // controller.go) puts "a reasonable limit on it", so 0 is a resync a second,
            // not none.
            resync_period_seconds: spec
                .get("resyncPeriodSeconds")
                .and_then(Value::as_f64)
                .map(|seconds| seconds.trunc().max(1.0)),
            generate_selector: spec
                .get("generateSelector")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            raw,
            parents,
            children,
            hooks,
            not_modelled,
        })
    }

    /// Whether the parent rule that selects objects of `key`'s apiVersion and kind sets
    /// `ignoreStatusChanges: true`.
    pub(crate) fn ignores_status_changes(&self, key: &crate::Key) -> bool {
        self.parents.iter().any(|(api_version, kind, rule)| {
            *api_version == key.0
                && *kind == key.1
                && rule.get("ignoreStatusChanges").and_then(Value::as_bool) == Some(true)
        })
    }

    /// The rolling child rule for a group and kind (any version), if one is rolling.
    pub(crate) fn rolling_rule(&self, group: &str, kind: &str) -> Option<&ChildRule> {
        self.children.iter().find(|c| {
            c.is_rolling()
                && c.kind == kind
                && c.api_version.rsplit_once('/').map_or("", |(g, _)| g) == group
        })
    }

    /// `parentResource.revisionHistory.fieldPaths` (`spec` when unset): the parent's
    /// fields a ControllerRevision keeps.
    pub(crate) fn revision_fields(&self) -> Vec<String> {
        let paths: Vec<String> = self
            .raw
            .pointer("/spec/parentResource/revisionHistory/fieldPaths")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if paths.is_empty() {
            vec!["spec".to_owned()]
        } else {
            paths
        }
    }

    pub(crate) fn child_rule(&self, api_version: &str, kind: &str) -> Option<&ChildRule> {
        self.children
            .iter()
            .find(|c| c.api_version == api_version && c.kind == kind)
    }

    pub(crate) fn finalizer(&self) -> String {
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

/// The parent rules (a composite's `parentResource`, a decorator's `resources`), each
/// kept as written: its selectors decide which objects are parents.
fn parent_rules(
    type_: ControllerType,
    spec: &Value,
    kinds: &Kinds,
    registration: &str,
) -> Result<Vec<(String, String, Value)>, String> {
    let role = match type_ {
        ControllerType::Composite => Role::CompositeParent,
        ControllerType::Decorator => Role::DecoratorResource,
    };
    let rule = |value: &Value| {
        resource_rule(value, kinds, role, registration)
            .map(|(api_version, kind)| (api_version, kind, value.clone()))
    };
    match type_ {
        ControllerType::Composite => Ok(vec![rule(
            spec.get("parentResource").ok_or("no parentResource")?,
        )?]),
        ControllerType::Decorator => spec
            .get("resources")
            .and_then(Value::as_array)
            .ok_or("decorator without resources")?
            .iter()
            .map(rule)
            .collect(),
    }
}

/// The selectors Metacontroller compiles when it starts a controller
/// (`newParentController` in pkg/controller/composite, `newDecoratorSelector` in
/// pkg/controller/decorator): one that `LabelSelectorAsSelector` refuses means the
/// controller never starts.
fn check_parent_selectors(type_: ControllerType, spec: &Value) -> Result<(), String> {
    let rules: Vec<(String, &Value)> = match type_ {
        ControllerType::Composite => spec
            .get("parentResource")
            .map(|rule| ("parentResource".to_owned(), rule))
            .into_iter()
            .collect(),
        ControllerType::Decorator => spec
            .get("resources")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, rule)| (format!("resources[{i}]"), rule))
            .collect(),
    };
    for (at, rule) in rules {
        for (field, exact) in [
            ("labelSelector", "matchLabels"),
            ("annotationSelector", "matchAnnotations"),
        ] {
            if let Some(selector) = rule.get(field).filter(|s| !s.is_null())
                && let Some(problem) =
                    metahooks_apiserver::selector::conversion_problem(selector, exact)
            {
                return Err(format!(
                    "{at}.{field}: can't convert label selector: {problem} (Metacontroller does not start this controller)"
                ));
            }
        }
    }
    Ok(())
}

/// The URL Metacontroller calls (`webhookURL`, pkg/hooks/webhook.go): `url`, or
/// `<protocol>://<name>.<namespace>:<port><path>` for a Service (http and 80 unless set).
fn effective_url(webhook: &Value) -> Option<String> {
    if let Some(url) = webhook.get("url").and_then(Value::as_str) {
        return Some(url.to_owned());
    }
    let service = webhook.get("service")?;
    let name = service.get("name").and_then(Value::as_str)?;
    let namespace = service.get("namespace").and_then(Value::as_str)?;
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(80);
    let protocol = service
        .get("protocol")
        .and_then(Value::as_str)
        .unwrap_or("http");
    let path = webhook.get("path").and_then(Value::as_str)?;
    Some(format!("{protocol}://{name}.{namespace}:{port}{path}"))
}

/// `matchEndpointConfig`: the first entry whose host is the URL's host (with or without
/// the scheme's default port), case-insensitively.
fn matching_endpoint<'a>(url: &str, entries: &'a [Value]) -> Option<(usize, &'a Value)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => "443",
        "http" => "80",
        _ => "",
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(']') || authority.starts_with('[') => {
            (host, Some(port))
        }
        _ => (authority, None),
    };
    let canonical = format!("{host}:{}", port.unwrap_or(default_port));
    entries.iter().enumerate().find(|(_, entry)| {
        let wanted = entry
            .get("host")
            .and_then(Value::as_str)
            .unwrap_or_default();
        wanted.eq_ignore_ascii_case(authority)
            || wanted.eq_ignore_ascii_case(&canonical)
            || (port == Some(default_port) && wanted.eq_ignore_ascii_case(host))
    })
}

fn url_path(url: &str) -> Result<String, String> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| format!("bad hook url {url}"))?;
    Ok(rest
        .find('/')
        .map_or_else(|| "/".to_owned(), |i| rest[i..].to_owned()))
}

pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> Result<&'a str, String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("missing {pointer}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn kinds_come_from_builtins_crds_and_objects() {
        let mut kinds = Kinds::default();
        assert_eq!(kinds.kind_of("deployments").ok(), Some("Deployment"));
        assert!(
            kinds
                .kind_of("widgets")
                .is_err_and(|e| e.contains("widgets"))
        );
        kinds.learn(&json!({"kind": "CustomResourceDefinition",
            "spec": {"names": {"plural": "widgets", "kind": "Widget"}}}));
        assert_eq!(kinds.kind_of("widgets").ok(), Some("Widget"));
        for (kind, plural) in [
            ("Thing", "things"),
            ("Policy", "policies"),
            ("Gateway", "gateways"),
            ("Box", "boxes"),
            ("Batch", "batches"),
        ] {
            kinds.learn(&json!({"kind": kind}));
            assert_eq!(kinds.kind_of(plural).ok(), Some(kind), "{plural}");
        }
    }

    #[test]
    fn strict_decoding_follows_version_unless_the_mode_says_otherwise() {
        let kinds = Kinds::default();
        let registration = |sync: Value| {
            Registration::parse(
                json!({"kind": "CompositeController", "metadata": {"name": "c"},
                       "spec": {"parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                                "resyncPeriodSeconds": 30, "hooks": {"sync": sync}}}),
                &kinds,
            )
        };
        let strict = |sync: Value| {
            registration(sync)
                .ok()
                .and_then(|r| r.hooks.get(&HookName::Sync).map(|h| h.strict))
        };
        assert_eq!(
            strict(json!({"version": "v2", "webhook": {"url": "http://h/s"}})),
            Some(true)
        );
        assert_eq!(
            strict(json!({"webhook": {"url": "http://h/s"}})),
            Some(false)
        );
        assert_eq!(
            strict(
                json!({"version": "v2", "webhook": {"url": "http://h/s", "responseUnMarshallMode": "loose"}})
            ),
            Some(false)
        );
        let parsed = registration(json!({"webhook": {"url": "http://h:8080/c/sync"}}));
        assert_eq!(
            parsed.as_ref().ok().map(|r| r.resync_period_seconds),
            Some(Some(30.0))
        );
        assert_eq!(
            parsed
                .ok()
                .and_then(|r| r.hooks.get(&HookName::Sync).map(|h| h.path.clone())),
            Some("/c/sync".to_owned())
        );
        assert!(registration(json!({"version": "v2"})).is_err_and(|e| e.contains("webhook")));
    }

    #[test]
    fn a_resync_period_below_a_second_is_a_second_as_start_has_it() {
        let kinds = Kinds::default();
        let period = |seconds: Value| {
            Registration::parse(
                json!({"kind": "CompositeController", "metadata": {"name": "c"},
                       "spec": {"parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                                "resyncPeriodSeconds": seconds,
                                "hooks": {"sync": {"webhook": {"url": "http://h/s"}}}}}),
                &kinds,
            )
            .ok()
            .and_then(|r| r.resync_period_seconds)
        };
        assert_eq!(period(json!(0)), Some(1.0));
        assert_eq!(period(json!(-5)), Some(1.0));
        assert_eq!(period(json!(45)), Some(45.0));
        assert_eq!(period(Value::Null), None);
    }

    #[test]
    fn webhook_timeouts_read_as_go_durations_with_metacontrollers_default() {
        use std::time::Duration;
        assert_eq!(go_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(
            go_duration("10").is_err() && go_duration("ten s").is_err() && go_duration("").is_err()
        );
        let hook = |webhook: Value| Hook::parse(&json!({"webhook": webhook}), "hooks.sync", &[]);
        assert_eq!(
            hook(json!({"url": "http://h/s"})).map(|h| h.timeout),
            Ok(DEFAULT_WEBHOOK_TIMEOUT)
        );
        assert_eq!(
            hook(json!({"url": "http://h/s", "timeout": "0s"})).map(|h| h.timeout),
            Ok(DEFAULT_WEBHOOK_TIMEOUT),
            "a non-positive timeout is the default, as Metacontroller has it"
        );
        assert!(hook(json!({"url": "http://h/s", "timeout": 5})).is_err());
    }

    #[test]
    fn fields_not_modelled_are_named_and_unknown_ones_refused() {
        let mut kinds = Kinds::default();
        kinds.learn(&json!({"kind": "Thing"}));
        let parse = |hooks: Value, strategy: &str| {
            Registration::parse(
                json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "things"},
                       "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                                "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                                    "updateStrategy": {"method": strategy}}],
                                "hooks": hooks}}),
                &kinds,
            )
        };
        let registration = parse(
            json!({"sync": {"webhook": {"url": "https://h/s"}},
                   "postUpdateChild": {"webhook": {"url": "https://h/p"}}}),
            "RollingInPlace",
        )
        .unwrap();
        let notes = registration.not_modelled.join("\n");
        assert!(
            notes.contains("hooks.postUpdateChild: not modelled"),
            "{notes}"
        );
        // Rolling updates are modelled: no note.
        assert!(!notes.contains("RollingInPlace"), "{notes}");
        let typo = parse(
            json!({"sync": {"webhook": {"url": "https://h/s", "timout": "5s"}}}),
            "InPlace",
        );
        assert!(typo.is_err_and(|e| e.contains("\"timout\"")));
        let hook_typo = parse(
            json!({"snyc": {"webhook": {"url": "https://h/s"}}}),
            "InPlace",
        );
        assert!(hook_typo.is_err_and(|e| e.contains("snyc")));
        // Values outside Metacontroller's enums are refused by name.
        let version = parse(
            json!({"sync": {"version": "V2", "webhook": {"url": "https://h/s"}}}),
            "InPlace",
        );
        assert!(
            version.is_err_and(|e| e.contains("version: Unsupported value: \"V2\"")),
            "a version outside v1/v2"
        );
        let method = parse(
            json!({"sync": {"webhook": {"url": "https://h/s"}}}),
            "Inplace",
        );
        assert!(
            method.is_err_and(|e| e.contains("updateStrategy.method: Unsupported value: \"Inplace\"")),
            "a method outside the known ones"
        );
    }
}

#[cfg(test)]
mod endpoint_tests {
    use serde_json::json;

    use super::{effective_url, matching_endpoint};

    /// matchEndpointConfig's cases (pkg/hooks/endpoint_config_test.go names them).
    #[test]
    fn an_entry_matches_by_host_with_or_without_the_default_port() {
        let entries = |host: &str| vec![json!({"host": host})];
        let matches = |url: &str, host: &str| matching_endpoint(url, &entries(host)).is_some();
        assert!(matches("https://example.com/sync", "example.com"));
        assert!(matches("https://example.com/sync", "example.com:443"));
        assert!(matches("https://example.com:443/sync", "example.com"));
        assert!(matches("http://Example.COM/sync", "example.com:80"));
        assert!(matches("https://example.com:8443/sync", "example.com:8443"));
        assert!(!matches("https://example.com:8443/sync", "example.com"));
        assert!(!matches("https://example.com/sync", "example.com:80"));
        assert!(!matches("https://other.example/sync", "example.com"));
        let service = json!({"service": {"name": "hooks", "namespace": "team", "port": 8443,
                                         "protocol": "https"}, "path": "/sync"});
        assert_eq!(
            effective_url(&service).as_deref(),
            Some("https://hooks.team:8443/sync")
        );
        assert!(matches(
            &effective_url(&service).unwrap_or_default(),
            "hooks.team:8443"
        ));
    }
}
