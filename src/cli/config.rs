//! Second stage of configuration: checks flag values and reads the secret files they
//! name, producing settings that cannot be half-valid.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};

use crate::cli::{ControllerArgs, ServeArgs};
use crate::controllers::common::policy::ExposurePolicy;
use crate::controllers::{ControllerSettings, Registry};
use crate::receivers::ReceiverSettings;
use crate::server::{Auth, Limits, ServerSettings, TlsFiles};
use crate::source::fetcher::{Fetcher, FetcherSettings, SettingsBuilder};
use crate::source::policy::{Policy, SourceLimits};
use crate::source::worker::spawn::Isolation;

/// The server settings and controller registry `serve` runs with, checked.
///
/// # Errors
/// A flag value that cannot be used (an unreadable token file, a TLS key without a
/// certificate, an unusable cache directory), named.
pub fn serve_settings(args: &ServeArgs) -> anyhow::Result<(ServerSettings, Registry)> {
    serve_settings_with_receivers(args).map(|(settings, registry, _)| (settings, registry))
}

/// How hook callers authenticate, from the token or basic-auth files (none: no auth).
fn auth(args: &ServeArgs) -> anyhow::Result<Option<Auth>> {
    Ok(
        match (
            args.auth_token_file.as_slice(),
            &args.auth_basic_username_file,
            &args.auth_basic_password_file,
        ) {
            ([_, ..], _, _) => {
                let mut tokens = Vec::new();
                for file in &args.auth_token_file {
                    tokens.push(read_secret("--auth-token-file", file)?);
                }
                Some(Auth::bearers(tokens.iter().flat_map(|t| t.lines())))
            }
            ([], Some(user), Some(password)) => {
                let user = read_secret("--auth-basic-username-file", user)?;
                if user.contains(':') {
                    bail!("the basic-auth username may not contain ':' (RFC 7617)");
                }
                Some(Auth::basic(
                    &user,
                    &read_secret("--auth-basic-password-file", password)?,
                ))
            }
            _ => None,
        },
    )
}

/// The connection cap fitted to the open-file limit, once the call bounds are known to
/// fit one another.
fn checked_bounds(args: &ServeArgs) -> anyhow::Result<usize> {
    let max_connections = fit_to_open_files(args.max_connections);
    if max_connections < args.max_in_flight {
        bail!(
            "--max-connections ({max_connections}, after fitting it to the open-file limit) must be at least --max-in-flight ({})",
            args.max_in_flight
        );
    }
    if args.body_budget_bytes < args.body_limit_bytes {
        bail!(
            "--body-budget-bytes ({}) must be at least --body-limit-bytes ({}), or no body of the largest size could ever be read",
            args.body_budget_bytes,
            args.body_limit_bytes
        );
    }
    if args.body_budget_per_client_bytes < args.body_limit_bytes {
        bail!(
            "--body-budget-per-client-bytes ({}) must be at least --body-limit-bytes ({}), or no body of the largest size could ever be read",
            args.body_budget_per_client_bytes,
            args.body_limit_bytes
        );
    }
    Ok(max_connections)
}

/// [`serve_settings`], and the push receivers' settings when `--receiver-listen` is set
/// (the source engine then asks parents to resync within `--receiver-resync-seconds`).
///
/// # Errors
/// As [`serve_settings`], and an unreadable or empty receiver secret.
pub fn serve_settings_with_receivers(
    args: &ServeArgs,
) -> anyhow::Result<(ServerSettings, Registry, Option<ReceiverSettings>)> {
    let max_connections = checked_bounds(args)?;
    let auth = auth(args)?;
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca_file.clone(),
        }),
        _ => None,
    };
    let settings = ServerSettings {
        listen: args.listen,
        probe_listen: args.probe_listen,
        limits: Limits {
            body_bytes: args.body_limit_bytes,
            max_in_flight: args.max_in_flight,
            body_budget_bytes: args.body_budget_bytes,
            body_budget_per_client_bytes: args.body_budget_per_client_bytes,
            deadline: Duration::from_millis(args.deadline_ms),
            retry_after_seconds: 1,
            body_read_timeout: Duration::from_secs(args.body_read_timeout_seconds),
            header_read_timeout: Duration::from_secs(args.header_read_timeout_seconds),
            idle_timeout: Duration::from_secs(args.idle_timeout_seconds),
            max_connections,
            max_connections_per_peer: args.max_connections_per_peer.min(max_connections),
            max_header_bytes: args.max_header_bytes,
            answer_memo_bytes: args.answer_memo_bytes,
            compute_threads: args.compute_threads,
        },
        auth,
        tls,
        shutdown_delay: Duration::from_secs(args.shutdown_delay_seconds),
        shutdown_grace: Duration::from_secs(args.shutdown_grace_seconds),
    };
    let receivers = match (&args.receiver_listen, &args.receiver_secret_file) {
        (Some(listen), Some(secret)) => Some(ReceiverSettings {
            listen: *listen,
            secret: read_secret("--receiver-secret-file", secret)?.into_bytes(),
        }),
        _ => None,
    };
    let push_resync = receivers.as_ref().map(|_| args.receiver_resync_seconds);
    let sources = source_settings(&args.controllers)?
        .push_resync_seconds(push_resync)
        .build();
    log_effective_policy(args, &settings, &sources);
    let fetcher = Fetcher::start(sources).context("cannot start the source fetcher")?;
    let controllers = ControllerSettings {
        heavy_validations: crate::server::compute_threads(args.compute_threads),
        step_memo_bytes: args.step_memo_bytes,
        ..controller_settings(&args.controllers)
    };
    let registry = Registry::standard(controllers).with_sources(std::sync::Arc::new(fetcher));
    Ok((settings, registry, receivers))
}

/// The first lines of a server's log: the policy and limits in force, as they came out of
/// flags, variables and defaults, so that a hardening that is off shows (an empty list
/// reads `any`).
fn log_effective_policy(args: &ServeArgs, settings: &ServerSettings, sources: &FetcherSettings) {
    let list = |values: &[String]| {
        if values.is_empty() {
            "any".to_owned()
        } else {
            values.join(",")
        }
    };
    let controllers = &args.controllers;
    tracing::info!(
        ingress_hosts = %list(&controllers.ingress_host),
        ingress_classes = %list(&controllers.ingress_class),
        child_annotations = %list(&controllers.child_annotation),
        service_types = %list(&controllers.service_type),
        deny_secret_env = controllers.deny_secret_env,
        mock_image = %controllers.mock_image,
        "policy for what CRs may create"
    );
    let policy = sources.policy();
    let schemes: Vec<String> = std::iter::once("https".to_owned())
        .chain(policy.extra_schemes.iter().cloned())
        .collect();
    let cidrs: Vec<String> = policy.allow_cidrs.iter().map(ToString::to_string).collect();
    let hosts: Vec<String> = policy
        .allow_hosts
        .iter()
        .map(|h| String::from(h.clone()))
        .collect();
    let none = |values: Vec<String>| {
        if values.is_empty() {
            "none".to_owned()
        } else {
            values.join(",")
        }
    };
    let proxy = |proxy: &Option<crate::source::proxy::ProxyUrl>| {
        proxy.as_ref().map_or("none".to_owned(), |p| p.shown())
    };
    tracing::info!(
        schemes = %schemes.join(","),
        allow_private_addresses = policy.allow_private_addresses,
        allow_cidrs = %none(cidrs),
        allow_hosts = %none(hosts),
        https_proxy = %proxy(&policy.proxies.https),
        http_proxy = %proxy(&policy.proxies.http),
        no_proxy = %none(policy.proxies.no_proxy.clone()),
        source_ca_file = policy.source_ca_pem.is_some(),
        download_bytes = policy.limits.download_bytes,
        fetch_timeout_seconds = policy.limits.timeout_seconds,
        fetch_workers = sources.workers(),
        fetch_workers_per_namespace = sources.workers_per_namespace(),
        "policy for sources"
    );
    let limits = &settings.limits;
    tracing::info!(
        auth = settings.auth.is_some(),
        tls = settings.tls.is_some(),
        body_limit_bytes = limits.body_bytes,
        body_budget_bytes = limits.body_budget_bytes,
        body_budget_per_client_bytes = limits.body_budget_per_client_bytes,
        max_in_flight = limits.max_in_flight,
        deadline_ms = u64::try_from(limits.deadline.as_millis()).unwrap_or(u64::MAX),
        max_connections = limits.max_connections,
        max_connections_per_peer = limits.max_connections_per_peer,
        "limits of hook calls"
    );
}

/// The egress proxies: `--source-proxy`, else the process environment's.
fn proxies(args: &ControllerArgs) -> anyhow::Result<crate::source::proxy::Proxies> {
    let credentials = match &args.source_proxy_credentials_file {
        Some(file) => Some(read_secret("--source-proxy-credentials-file", file)?),
        None => None,
    };
    crate::source::proxy::Proxies::configure(args.source_proxy.as_deref(), credentials, |name| {
        std::env::var(name).ok()
    })
    .map_err(anyhow::Error::msg)
}

/// The source engine the controller flags describe, started. Needs a Tokio runtime.
///
/// # Errors
/// As [`source_settings`], or the engine cannot start ([`Fetcher::start`]).
pub fn source_fetcher(args: &ControllerArgs) -> anyhow::Result<Fetcher> {
    Fetcher::start(source_settings(args)?.build()).context("cannot start the source fetcher")
}

/// The source engine's settings the controller flags describe.
///
/// # Errors
/// A file the flags name cannot be read, the cache directory cannot be created, or this
/// program's path (which fetch workers run) cannot be found.
pub fn source_settings(args: &ControllerArgs) -> anyhow::Result<SettingsBuilder> {
    let policy = Policy {
        extra_schemes: args.allow_scheme.iter().cloned().collect(),
        allow_private_addresses: args.allow_private_addresses,
        allow_cidrs: args.allow_cidr.clone(),
        allow_hosts: args.allow_host.clone(),
        proxies: proxies(args)?,
        limits: SourceLimits::default(),
        source_ca_pem: args
            .source_ca_file
            .as_deref()
            .map(crate::source::tls::read_ca_file)
            .transpose()
            .map_err(anyhow::Error::msg)?,
    };
    let cache_dir = args
        .cache_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("metahooks"));
    std::fs::create_dir_all(&cache_dir)
        .with_context(|| format!("cannot create the cache directory {}", cache_dir.display()))?;
    let isolation = Isolation::current_exe().context("cannot start fetch workers")?;
    Ok(FetcherSettings::builder(policy, cache_dir, isolation)
        .workers(args.fetch_workers)
        .workers_per_namespace(args.fetch_workers_per_namespace)
        .worker_memory_bytes(args.fetch_worker_memory_bytes)
        .cache_max_bytes(args.cache_max_bytes)
        .snapshot_budget_bytes(args.snapshot_memory_bytes)
        .max_remote_series(args.metrics_max_remotes))
}

/// File descriptors kept for everything but hook connections: listeners, probes and
/// metrics, the git cache, fetch workers' pipes, HTTP sources, logs.
const RESERVED_FDS: u64 = 256;

/// Raises the open-file soft limit to the hard limit (as Go programs do by themselves;
/// a soft limit of 1024 is common and equals the default connection cap, which then
/// cannot protect anything), and returns `wanted` lowered, if need be, to leave
/// [`RESERVED_FDS`] free. Logs both limits and the cap chosen.
fn fit_to_open_files(wanted: usize) -> usize {
    let before = rlimit::Resource::NOFILE.get().ok();
    let soft = rlimit::increase_nofile_limit(u64::MAX).ok();
    let hard = before.map(|(_, hard)| hard);
    let fitted = match soft {
        Some(soft) => {
            let room = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
            wanted.min(room.max(1))
        }
        None => wanted,
    };
    if fitted < wanted {
        tracing::warn!(
            wanted,
            max_connections = fitted,
            open_files = soft,
            "--max-connections lowered to fit the open-file limit"
        );
    }
    tracing::info!(
        soft_before = before.map(|(soft, _)| soft),
        soft = soft,
        hard = hard,
        max_connections = fitted,
        "open-file limit"
    );
    fitted
}

/// The controller settings the flags name.
pub fn controller_settings(args: &ControllerArgs) -> ControllerSettings {
    ControllerSettings {
        mock_image: args.mock_image.clone(),
        docs_image: args.docs_image.clone(),
        policy: ExposurePolicy {
            ingress_hosts: args.ingress_host.clone(),
            ingress_classes: args.ingress_class.clone(),
            child_annotations: args.child_annotation.clone(),
            service_types: args.service_type.clone(),
            deny_secret_env: args.deny_secret_env,
        },
        heavy_validations: 0,
        step_memo_bytes: crate::memo::steps::DEFAULT_BYTES,
    }
}

/// A secret file's content without the trailing newline editors and `echo` add.
fn read_secret(flag: &str, path: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("{flag}: cannot read {}", path.display()))?;
    // Metacontroller trims what it reads from its Secret; so do we.
    let text = text.trim().to_owned();
    if text.is_empty() {
        bail!("{flag}: {} is empty", path.display());
    }
    Ok(text)
}
