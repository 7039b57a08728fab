//! Test support: paths to the repository's fixtures, an in-process server, external
//! tools, and the Metacontroller emulator.

#![allow(dead_code)]

pub mod emulator;
pub mod oracles;
pub mod servers;
pub mod signing;

use std::path::PathBuf;

use metahooks::controllers::{ControllerSettings, Registry};
use metahooks::server::{Clock, Limits, Server, ServerSettings};

/// Test data kept in the repository (`tests/fixtures/`).
pub fn fixtures_dir() -> PathBuf {
    repo_dir().join("tests").join("fixtures")
}

/// The example CRs shipped in `manifests/examples/` (the seed systems' samples among them).
pub fn examples_dir() -> PathBuf {
    repo_dir().join("manifests").join("examples")
}

pub fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The instant golden cases are recorded at; conditions that appear or flip carry it.
pub fn golden_now() -> jiff::Timestamp {
    "2026-01-01T00:00:00Z"
        .parse()
        .expect("fixed timestamp parses")
}

pub fn local_settings() -> ServerSettings {
    ServerSettings {
        listen: "127.0.0.1:0".parse().expect("address"),
        probe_listen: "127.0.0.1:0".parse().expect("address"),
        limits: Limits::default(),
        auth: None,
        tls: None,
        shutdown_delay: std::time::Duration::from_millis(0),
        shutdown_grace: std::time::Duration::from_secs(2),
    }
}

/// The shipped controllers on loopback ports.
pub async fn start_standard(clock: Clock) -> Server {
    Server::start(
        local_settings(),
        Registry::standard(ControllerSettings::default()),
        clock,
    )
    .await
    .expect("server starts")
}

/// An APIMock sync through `registry` at [`golden_now`]; the answer as JSON.
pub fn apimock_sync(registry: &Registry, request: &serde_json::Value) -> serde_json::Value {
    let body = serde_json::to_vec(request).expect("request serialises");
    let outcome = registry.call(
        "apimock",
        metahooks::protocol::Hook::Sync,
        &body,
        &registry.context(golden_now()),
    );
    let answer = outcome.result.expect("the sync answers");
    serde_json::from_slice(&answer).expect("the answer is JSON")
}

/// (status, reason, message) of `parent`'s condition of `type_`, if it has one.
pub fn condition(parent: &serde_json::Value, type_: &str) -> Option<(String, String, String)> {
    let found = parent["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    let text = |key: &str| found[key].as_str().unwrap_or_default().to_owned();
    Some((text("status"), text("reason"), text("message")))
}

pub fn read_json(path: &std::path::Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

pub fn read_yaml_documents(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    yaml_documents(&text, &path.display().to_string())
}

/// The documents of a YAML stream (`what` names it in a failure), empty ones left out.
pub fn yaml_documents(text: &str, what: &str) -> Vec<serde_json::Value> {
    metahooks::yaml::documents::<serde_json::Value>(text)
        .unwrap_or_else(|e| panic!("{what} is not YAML: {e}"))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

/// A server with the shipped controllers, a source engine of its own (cache in a temp
/// dir) and an emulator over the repository's registrations, for source-backed tests.
pub struct SourceHarness {
    pub server: Server,
    pub fetcher: metahooks::source::fetcher::Fetcher,
    pub emulator: emulator::Emulator,
    /// The hook server's base URL.
    pub base_url: String,
    _cache: tempfile::TempDir,
}

/// A source engine whose git jobs run in worker processes of the metahooks binary, as
/// the server's do (the test binary itself cannot be re-executed as a worker).
pub fn fetcher(
    policy: metahooks::source::policy::Policy,
    cache: &std::path::Path,
) -> metahooks::source::fetcher::Fetcher {
    start(fetcher_settings(policy, cache).build())
}

/// The engine's defaults, with workers that run this package's `metahooks` binary.
pub fn fetcher_settings(
    policy: metahooks::source::policy::Policy,
    cache: &std::path::Path,
) -> metahooks::source::fetcher::SettingsBuilder {
    use metahooks::source::worker::spawn::Isolation;
    let program = std::path::PathBuf::from(env!("CARGO_BIN_EXE_metahooks"));
    metahooks::source::fetcher::FetcherSettings::builder(
        policy,
        cache.to_owned(),
        Isolation::Process(program),
    )
}

/// Starts an engine with `settings`.
pub fn start(
    settings: metahooks::source::fetcher::FetcherSettings,
) -> metahooks::source::fetcher::Fetcher {
    metahooks::source::fetcher::Fetcher::start(settings).expect("fetcher")
}

/// Sources on loopback: the given extra schemes and private addresses allowed.
pub fn loopback_policy(schemes: &[&str]) -> metahooks::source::policy::Policy {
    metahooks::source::policy::Policy {
        extra_schemes: schemes.iter().map(|s| (*s).to_owned()).collect(),
        allow_private_addresses: true,
        ..metahooks::source::policy::Policy::default()
    }
}

pub async fn source_harness(policy: metahooks::source::policy::Policy) -> SourceHarness {
    let cache = tempfile::tempdir().expect("temp dir");
    let fetcher = fetcher(policy, cache.path());
    let registry = Registry::standard(ControllerSettings::default())
        .with_sources(std::sync::Arc::new(fetcher.clone()));
    let server = Server::start(local_settings(), registry, Clock::System)
        .await
        .expect("server starts");
    let base_url = format!("http://{}", server.hook_addr);
    let emulator = emulator::for_repository(&base_url);
    SourceHarness {
        server,
        fetcher,
        emulator,
        base_url,
        _cache: cache,
    }
}
