//! Command line: `serve`, `render`, `emulate`, `crds`, `version`. Every flag is also an environment
//! variable. Parsing does no I/O; [`config`] turns the flags into checked settings.

pub mod config;
pub mod emulate;
pub mod environment;
pub mod in_process;
pub mod related;
pub mod render;

/// An error and its causes on one line, each said once: an error whose message already
/// quotes its cause (as typed errors do, so that a Kubernetes event carries it) is not
/// followed by that cause again.
pub fn explain(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::telemetry::LogFormat;

#[derive(Debug, Parser)]
#[command(
    name = "metahooks",
    version,
    about = "Metacontroller hook server: APIMock, MonitoredService, configsync"
)]
/// metahooks: hook server, renderer and emulator for Metacontroller controllers.
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the hooks (and probes/metrics on a second port).
    Serve(Box<ServeArgs>),
    /// Print the response `sync` would give for a parent, without a cluster.
    Render(Box<RenderArgs>),
    /// Run Metacontroller's loop on objects from files, without a cluster, against our
    /// controllers in-process or any hook server, and report what a hook does wrong.
    Emulate(Box<EmulateArgs>),
    /// Print the CustomResourceDefinitions generated from the Rust types.
    Crds,
    /// Print the version.
    Version,
    /// Run one git fetch job read from stdin (started by the server itself).
    #[command(name = "source-worker", hide = true)]
    SourceWorker,
}

/// `metahooks serve`: the hook and probe ports.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address of the hook port.
    #[arg(long, env = "METAHOOKS_LISTEN", default_value = "0.0.0.0:8080", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// Address of the probe/metrics port (/healthz, /readyz, /metrics).
    #[arg(long, env = "METAHOOKS_PROBE_LISTEN", default_value = "0.0.0.0:9090", value_parser = listen_address)]
    pub probe_listen: SocketAddr,
    /// Largest request body accepted, in bytes; larger ones get 413.
    #[arg(long, env = "METAHOOKS_BODY_LIMIT_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub body_limit_bytes: usize,
    /// Hook calls answered at once; more get 429 with Retry-After.
    #[arg(long, env = "METAHOOKS_MAX_IN_FLIGHT", default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_in_flight: usize,
    /// Bytes of request bodies being read or answered at once (at least
    /// --body-limit-bytes); a body that would take more gets 429 with Retry-After. A
    /// sender that trickles its body holds only the bytes it has sent.
    #[arg(long, env = "METAHOOKS_BODY_BUDGET_BYTES", default_value_t = 128 * 1024 * 1024)]
    pub body_budget_bytes: usize,
    /// Of those, bytes the bodies of one client (peer address) may hold at once (at least
    /// --body-limit-bytes); a body that would take more gets 429 with Retry-After.
    #[arg(long, env = "METAHOOKS_BODY_BUDGET_PER_CLIENT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub body_budget_per_client_bytes: usize,
    /// Per-call deadline in milliseconds (keep it below Metacontroller's webhook timeout).
    #[arg(long, env = "METAHOOKS_DEADLINE_MS", default_value_t = 8000, value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline_ms: u64,
    /// Seconds a client may take to send a request body once its headers are in; then 408.
    #[arg(
        long,
        env = "METAHOOKS_BODY_READ_TIMEOUT_SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub body_read_timeout_seconds: u64,
    /// Seconds a new connection may take to send its first request's headers (a TLS
    /// handshake included); then it is closed.
    #[arg(
        long,
        env = "METAHOOKS_HEADER_READ_TIMEOUT_SECONDS",
        default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub header_read_timeout_seconds: u64,
    /// Seconds a kept-alive connection may wait for (and take to send the headers of) its
    /// next request; above Go's 90 s client idle time so Metacontroller closes first.
    #[arg(long, env = "METAHOOKS_IDLE_TIMEOUT_SECONDS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_seconds: u64,
    /// Open hook connections at most. A new connection takes the slot of the one idle the
    /// longest, and is closed unread only when every slot is answering a call.
    #[arg(long, env = "METAHOOKS_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Open hook connections from one peer address at most (behind a sidecar proxy every
    /// connection comes from its address: set it to --max-connections there).
    #[arg(long, env = "METAHOOKS_MAX_CONNECTIONS_PER_PEER", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections_per_peer: usize,
    /// Bytes of one request's head (request line and headers) at most; a connection
    /// sending more gets 431 and is closed. A connection's read buffer holds at most the
    /// larger of this and 128 KiB.
    #[arg(long, env = "METAHOOKS_MAX_HEADER_BYTES", default_value_t = 64 * 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8192..=16 * 1024 * 1024))]
    pub max_header_bytes: usize,
    /// Bytes of answers remembered at most (a resync repeated byte for byte is sent from
    /// memory); `metahooks_answer_memo_bytes` says how many are held.
    #[arg(long, env = "METAHOOKS_ANSWER_MEMO_BYTES", default_value_t = crate::server::DEFAULT_ANSWER_MEMO_BYTES)]
    pub answer_memo_bytes: u64,
    /// Bytes of remembered steps at most (validated definitions);
    /// `metahooks_step_memo_bytes` says how many are held.
    #[arg(long, env = "METAHOOKS_STEP_MEMO_BYTES", default_value_t = crate::memo::steps::DEFAULT_BYTES)]
    pub step_memo_bytes: u64,
    /// Threads hook answers are computed on (validation, building children); 0 chooses
    /// one per core the process may use.
    #[arg(long, env = "METAHOOKS_COMPUTE_THREADS", default_value_t = 0)]
    pub compute_threads: usize,
    /// Require `Authorization: Bearer <token>` with a token read from these files
    /// (repeatable or comma-separated; each file holds one token per line, and any of
    /// them is accepted, so that a rotation never refuses the caller).
    #[arg(long, env = "METAHOOKS_AUTH_TOKEN_FILE", value_delimiter = ',', conflicts_with_all = ["auth_basic_username_file", "auth_basic_password_file"])]
    pub auth_token_file: Vec<PathBuf>,
    /// Require HTTP basic auth; username read from this file (with --auth-basic-password-file).
    #[arg(
        long,
        env = "METAHOOKS_AUTH_BASIC_USERNAME_FILE",
        requires = "auth_basic_password_file"
    )]
    pub auth_basic_username_file: Option<PathBuf>,
    /// Password file for basic auth.
    #[arg(
        long,
        env = "METAHOOKS_AUTH_BASIC_PASSWORD_FILE",
        requires = "auth_basic_username_file"
    )]
    pub auth_basic_password_file: Option<PathBuf>,
    /// Serve the hook port over TLS with this PEM certificate chain (with --tls-key-file).
    #[arg(long, env = "METAHOOKS_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key for --tls-cert-file.
    #[arg(long, env = "METAHOOKS_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Require client certificates signed by this PEM CA (mTLS); needs TLS.
    #[arg(long, env = "METAHOOKS_TLS_CLIENT_CA_FILE", requires = "tls_cert_file")]
    pub tls_client_ca_file: Option<PathBuf>,
    /// Serve push receivers (POST /receivers/{github,gitlab,gitea,generic}) on this
    /// address, a port of their own; off unless set. Needs --receiver-secret-file.
    #[arg(long, env = "METAHOOKS_RECEIVER_LISTEN", value_parser = listen_address, requires = "receiver_secret_file")]
    pub receiver_listen: Option<SocketAddr>,
    /// The secret push receivers verify each forge's signature (or GitLab's token) with.
    #[arg(
        long,
        env = "METAHOOKS_RECEIVER_SECRET_FILE",
        requires = "receiver_listen"
    )]
    pub receiver_secret_file: Option<PathBuf>,
    /// While receivers listen, parents that read a source sync again within this many
    /// seconds whatever their interval (a push is seen at the next sync).
    #[arg(long, env = "METAHOOKS_RECEIVER_RESYNC_SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub receiver_resync_seconds: u64,
    /// Seconds readiness reports 503 before the hook port stops accepting on SIGTERM.
    #[arg(long, env = "METAHOOKS_SHUTDOWN_DELAY_SECONDS", default_value_t = 5)]
    pub shutdown_delay_seconds: u64,
    /// Seconds in-flight calls may take to finish after that.
    #[arg(long, env = "METAHOOKS_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub shutdown_grace_seconds: u64,
    /// Log format.
    #[arg(long, env = "METAHOOKS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Log level, or filter directives such as `metahooks=debug,warn`. At info a hook call
    /// is logged when its answer creates or deletes children, refused or failed; at debug
    /// every call.
    #[arg(long, env = "METAHOOKS_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Settings of the controllers served.
    #[command(flatten)]
    pub controllers: ControllerArgs,
}

/// Settings the controllers read; shared by `serve` and `render` so both answer alike.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Default mock-server image for APIMock (a CR's spec.image overrides it).
    #[arg(long, env = "METAHOOKS_MOCK_IMAGE", default_value = crate::controllers::apimock::DEFAULT_MOCK_IMAGE)]
    pub mock_image: String,
    /// Image of the optional Swagger UI container (APIMock spec.docs.enabled).
    #[arg(long, env = "METAHOOKS_DOCS_IMAGE", default_value = crate::controllers::apimock::DEFAULT_DOCS_IMAGE)]
    pub docs_image: String,
    /// Hostnames an APIMock's Ingress may use: `*` matches one DNS label, `{namespace}`
    /// stands for the APIMock's namespace (e.g. `*.{namespace}.mocks.example.com`);
    /// repeatable. Unset: any valid host name.
    #[arg(
        long = "ingress-host",
        env = "METAHOOKS_INGRESS_HOST",
        value_delimiter = ','
    )]
    pub ingress_host: Vec<String>,
    /// `ingressClassName`s an APIMock's Ingress may name; repeatable. Unset: any (an
    /// Ingress without a class is always allowed: it gets the cluster's default).
    #[arg(
        long = "ingress-class",
        env = "METAHOOKS_INGRESS_CLASS",
        value_delimiter = ','
    )]
    pub ingress_class: Vec<String>,
    /// Annotation keys a CR may put on its Service and Ingress (an entry ending in `/`
    /// or `*` is a prefix); repeatable. Unset: any.
    #[arg(
        long = "child-annotation",
        env = "METAHOOKS_CHILD_ANNOTATION",
        value_delimiter = ','
    )]
    pub child_annotation: Vec<String>,
    /// Service types an APIMock may ask for; repeatable. Unset: any.
    #[arg(long = "service-type", env = "METAHOOKS_SERVICE_TYPE", value_delimiter = ',', value_parser = ["ClusterIP", "NodePort", "LoadBalancer"])]
    pub service_type: Vec<String>,
    /// Refuse MonitoredService env taken from Secrets or pod fields
    /// (`valueFrom.secretKeyRef`, `valueFrom.fieldRef`).
    #[arg(long, env = "METAHOOKS_DENY_SECRET_ENV", value_parser = clap::builder::BoolishValueParser::new())]
    pub deny_secret_env: bool,
    /// Let sources use this scheme besides https (http, git, file); repeatable.
    #[arg(long = "allow-scheme", env = "METAHOOKS_ALLOW_SCHEME", value_delimiter = ',', value_parser = ["http", "git", "ssh", "file"])]
    pub allow_scheme: Vec<String>,
    /// CA certificates (PEM) every https source trusts besides the public web roots, for
    /// git and HTTP sources alike.
    #[arg(long, env = "METAHOOKS_SOURCE_CA_FILE", value_name = "PEM")]
    pub source_ca_file: Option<std::path::PathBuf>,
    /// Let sources reach loopback, private and link-local addresses (cloud metadata too):
    /// the blunt switch; prefer --allow-cidr and --allow-host.
    #[arg(long, env = "METAHOOKS_ALLOW_PRIVATE_ADDRESSES", value_parser = clap::builder::BoolishValueParser::new())]
    pub allow_private_addresses: bool,
    /// Egress proxy for http and https sources (http://[user:password@]host:port),
    /// overriding HTTPS_PROXY/HTTP_PROXY; NO_PROXY still names the hosts that go direct.
    /// git:// and ssh:// sources never use a proxy.
    #[arg(long, env = "METAHOOKS_SOURCE_PROXY", value_name = "URL")]
    pub source_proxy: Option<String>,
    /// A file holding `user:password` for the egress proxy (instead of putting them in
    /// its URL).
    #[arg(
        long,
        env = "METAHOOKS_SOURCE_PROXY_CREDENTIALS_FILE",
        value_name = "FILE"
    )]
    pub source_proxy_credentials_file: Option<std::path::PathBuf>,
    /// Let sources reach this address range (CIDR, e.g. 10.20.0.0/16); repeatable or
    /// comma-separated. Link-local (cloud metadata) addresses only by a range inside
    /// 169.254.0.0/16, fe80::/10 or fd00:ec2::254 itself.
    #[arg(
        long = "allow-cidr",
        env = "METAHOOKS_ALLOW_CIDR",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub allow_cidr: Vec<ipnet::IpNet>,
    /// Let sources on this host reach private addresses: a name, or *.name for any host
    /// below it; repeatable or comma-separated. Never link-local (cloud metadata).
    #[arg(
        long = "allow-host",
        env = "METAHOOKS_ALLOW_HOST",
        value_delimiter = ',',
        value_name = "PATTERN"
    )]
    pub allow_host: Vec<crate::source::policy::HostPattern>,
    /// Where fetched sources are cached (default: a metahooks folder in the temp dir).
    #[arg(long, env = "METAHOOKS_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Bytes the git cache may take on disk; least recently used repositories are
    /// removed beyond it (and fetched again when asked for).
    #[arg(long, env = "METAHOOKS_CACHE_MAX_BYTES", default_value_t = crate::source::fetcher::DEFAULT_CACHE_MAX_BYTES)]
    pub cache_max_bytes: u64,
    /// Git fetch worker processes running at once.
    #[arg(long, env = "METAHOOKS_FETCH_WORKERS", default_value_t = crate::source::fetcher::DEFAULT_WORKERS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub fetch_workers: usize,
    /// Git fetch workers one namespace may use at once (the rest stay free for others).
    #[arg(long, env = "METAHOOKS_FETCH_WORKERS_PER_NAMESPACE", default_value_t = crate::source::fetcher::DEFAULT_WORKERS_PER_NAMESPACE, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256))]
    pub fetch_workers_per_namespace: usize,
    /// Address space of each git fetch worker, in bytes; a fetch that needs more fails
    /// with reason MemoryLimit.
    #[arg(long, env = "METAHOOKS_FETCH_WORKER_MEMORY_BYTES", default_value_t = crate::source::worker::WorkerLimits::DEFAULT_MEMORY_BYTES, value_parser = clap::value_parser!(u64).range(32 * 1024 * 1024..))]
    pub fetch_worker_memory_bytes: u64,
    /// Bytes of fetched files held in memory, with what was made of them and what running
    /// fetches bring; beyond it the least recently asked are let go (parents keep running
    /// what their ConfigMaps hold; others are read again).
    #[arg(long, env = "METAHOOKS_SNAPSHOT_MEMORY_BYTES", default_value_t = crate::source::fetcher::DEFAULT_SNAPSHOT_BUDGET_BYTES)]
    pub snapshot_memory_bytes: u64,
    /// Remotes that get per-remote metric series (last success, interval); beyond it the
    /// least recently fetched lose theirs. Each label is bounded (a prefix and a hash).
    #[arg(long, env = "METAHOOKS_METRICS_MAX_REMOTES", default_value_t = crate::source::metrics::MAX_REMOTE_SERIES)]
    pub metrics_max_remotes: usize,
}

/// A `--require` value that is not `condition=TYPE`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?}: write condition=TYPE, e.g. --require condition=Ready")]
pub struct NotACondition(String);

/// `condition=TYPE` → TYPE.
fn required_condition(text: &str) -> Result<String, NotACondition> {
    match text.split_once('=') {
        Some(("condition", kind)) if !kind.trim().is_empty() => Ok(kind.trim().to_owned()),
        _ => Err(NotACondition(text.to_owned())),
    }
}

/// `metahooks render`: one hook answer for a parent in a file.
#[derive(Debug, Clone, Args)]
pub struct RenderArgs {
    /// Which controller's sync to run.
    pub controller: String,
    /// The parent (or, for configsync, the target) as YAML or JSON.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Objects that already exist (YAML documents or a List), passed as observed children.
    #[arg(long)]
    pub observed: Option<PathBuf>,
    /// Objects the parent reads (a ConfigMap its `configMapKeyRef` names, a credentials
    /// Secret), passed as related objects; repeatable. Objects in `--file` besides the
    /// parent are passed the same way. Without a namespace they are in the parent's.
    #[arg(long)]
    pub related: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Settings of the controllers rendered.
    #[command(flatten)]
    pub controllers: ControllerArgs,
}

/// `metahooks emulate`: a Metacontroller emulator over the given objects.
#[derive(Debug, Clone, Args)]
pub struct EmulateArgs {
    /// YAML or JSON files or directories (all *.yaml, *.yml, *.json in them): controller
    /// registrations, CRDs, parents, targets and related objects. Multi-document files
    /// and `List`s are read whole. Without any registration, metahooks' own are used.
    #[arg(short = 'f', long = "file", required = true)]
    pub files: Vec<PathBuf>,
    /// Call a running hook server at this base URL (`http://127.0.0.1:8080`) instead of
    /// metahooks' controllers in-process; the path of each registered hook URL is kept.
    /// Repeat it to spread calls over several replicas, round-robin.
    #[arg(long = "hooks-url")]
    pub hooks_url: Vec<String>,
    /// PEM file of the CA(s) that sign an https hook server's certificate (beside the
    /// system roots), for servers with a private or self-signed CA.
    #[arg(long = "hooks-ca-file", requires = "hooks_url")]
    pub hooks_ca_file: Option<PathBuf>,
    /// In-process replicas (each with its own caches), called round-robin.
    #[arg(long, default_value_t = 1, conflicts_with = "hooks_url", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub replicas: u16,
    /// Rounds without a steady state after which the hooks count as looping.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_rounds: u16,
    /// Simulated seconds to run after converging (resyncAfterSeconds and
    /// resyncPeriodSeconds are honoured on a simulated clock).
    #[arg(long = "for-seconds", default_value_t = 0)]
    pub for_seconds: u64,
    /// With --hooks-url: real seconds to wait, after the first convergence, for parents
    /// whose status says their source is still being fetched (`FetchPending`); what is
    /// still pending then is listed in the report.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub wait_for_sources: u64,
    /// Delete every parent at the end and check that finalize lets it go.
    #[arg(long)]
    pub delete: bool,
    /// Deployments and Pods never become ready (a stuck rollout).
    #[arg(long)]
    pub hold_unready: bool,
    /// A story file: edits and checks made after the first convergence (`steps:` of
    /// patch, scale, delete and expect), each followed by a convergence. Repeatable:
    /// each story is played on its own fresh cluster and reported by its `name:`.
    #[arg(long)]
    pub story: Vec<PathBuf>,
    /// Nodes of the simulated cluster (a DaemonSet runs one Pod on each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub nodes: u16,
    /// Hook calls in flight at once per controller, as Metacontroller's `--workers`
    /// (parents are read and their answers applied in order either way).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub workers: u16,
    /// Milliseconds after a new answer before the same request is sent again (once, and
    /// once more if the answer moved), so an answer that drifts with time is found on
    /// every run; 0 turns the delayed check off.
    #[arg(long = "recheck-after-ms", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub recheck_after_ms: u64,
    /// Metacontroller's apply strategy for children.
    #[arg(long, value_enum, default_value_t = ApplyStrategy::ClientSide)]
    pub apply_strategy: ApplyStrategy,
    /// Report unknown fields in answers even from v1 hooks, whose answers Metacontroller
    /// decodes loosely (dropping such fields without a word).
    #[arg(long)]
    pub strict: bool,
    /// Every parent must end with this condition True, as `condition=TYPE` (repeatable);
    /// a parent that does not is reported and the run fails.
    #[arg(long = "require", value_parser = required_condition)]
    pub require: Vec<String>,
    /// Leave answer times out of the text report (for golden files and diffs).
    #[arg(long)]
    pub no_timing: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = EmulateOutput::Text)]
    pub output: EmulateOutput,
    /// Settings of the in-process controllers.
    #[command(flatten)]
    pub controllers: ControllerArgs,
}

/// How answers are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApplyStrategy {
    /// kubectl-style three-way merge with a last-applied annotation (Metacontroller's
    /// `--apply-strategy=dynamic-apply`, its default).
    #[value(alias = "dynamic-apply")]
    ClientSide,
    /// Server-side apply with a field manager (Metacontroller's `server-side-apply`).
    #[value(alias = "server-side-apply")]
    ServerSide,
}

/// The report's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EmulateOutput {
    /// A summary, the objects and a timeline.
    Text,
    /// The same as JSON.
    Json,
    /// JUnit XML: a test case per parent, failed by its findings.
    Junit,
    /// SARIF 2.1.0: a result per finding, at the file and line its object came from.
    Sarif,
}

/// The rendered answer's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// `HOST:PORT` where HOST is an address or a name (`localhost:8080`); a name is resolved
/// once, at start-up, to its first address.
fn listen_address(text: &str) -> Result<SocketAddr, ListenAddressError> {
    use std::net::ToSocketAddrs;
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let mut addresses = text
        .to_socket_addrs()
        .map_err(ListenAddressError::NotHostPort)?;
    addresses
        .next()
        .ok_or_else(|| ListenAddressError::NoAddress(text.to_owned()))
}

/// A listen address that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ListenAddressError {
    /// Neither an address nor a name that resolves (the resolver's words).
    #[error("expected HOST:PORT such as 0.0.0.0:8080 or localhost:8080 ({0})")]
    NotHostPort(std::io::Error),
    /// The name resolves to nothing.
    #[error("{0} resolves to no address")]
    NoAddress(String),
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use");
        #[derive(Debug, thiserror::Error)]
        #[error("cannot listen on 127.0.0.1:8080 for hooks: {source}")]
        struct Listen {
            source: std::io::Error,
        }
        let error = anyhow::Error::new(Listen { source: io });
        assert_eq!(
            super::explain(&error),
            "cannot listen on 127.0.0.1:8080 for hooks: Address already in use"
        );
        let wrapped = anyhow::Error::new(std::io::Error::other("disk full"))
            .context("cannot create the cache");
        assert_eq!(
            super::explain(&wrapped),
            "cannot create the cache: disk full"
        );
    }

    use super::*;

    #[test]
    fn metacontrollers_apply_strategy_names_are_accepted() {
        use clap::ValueEnum;
        for (name, strategy) in [
            ("client-side", ApplyStrategy::ClientSide),
            ("dynamic-apply", ApplyStrategy::ClientSide),
            ("server-side", ApplyStrategy::ServerSide),
            ("server-side-apply", ApplyStrategy::ServerSide),
        ] {
            assert_eq!(ApplyStrategy::from_str(name, false), Ok(strategy), "{name}");
        }
        assert!(ApplyStrategy::from_str("inplace", false).is_err());
    }

    #[test]
    fn listen_accepts_addresses_and_host_names() {
        assert_eq!(
            listen_address("0.0.0.0:8080").ok(),
            "0.0.0.0:8080".parse().ok()
        );
        let local = listen_address("localhost:8080").unwrap_or_else(|e| panic!("{e}"));
        assert!(local.ip().is_loopback() && local.port() == 8080);
        let error = listen_address("8080").unwrap_err();
        assert!(
            matches!(error, ListenAddressError::NotHostPort(_)),
            "{error}"
        );
        assert!(error.to_string().contains("HOST:PORT"), "{error}");
    }
}
