//! The test suite's use of the Metacontroller emulator (`metahooks::emulate`): over the
//! repository's own registrations, with helpers that wait for background fetches.

pub use metahooks::emulate::*;
use serde_json::Value;

/// An emulator over the repository's registrations (`manifests/controllers/`, and the
/// config-monitor group's in `manifests/config-monitor/`), calling the server at
/// `base_url`, stopping at the first problem.
pub fn for_repository(base_url: &str) -> Emulator {
    let mut paths = Vec::new();
    for dir in ["manifests/controllers", "manifests/config-monitor"] {
        let dir = super::repo_dir().join(dir);
        paths.extend(
            std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
                .filter(|p| !p.ends_with("kustomization.yaml")),
        );
    }
    paths.sort();
    let kinds = Kinds::default();
    let registrations = paths
        .iter()
        .flat_map(|path| super::read_yaml_documents(path))
        // The directory also holds the ClusterRole Metacontroller needs for them.
        .filter(|document| {
            matches!(
                document["kind"].as_str(),
                Some("CompositeController" | "DecoratorController")
            )
        })
        .map(|document| Registration::parse(document, &kinds))
        .collect::<Result<Vec<_>, _>>()
        .unwrap_or_else(|e| panic!("a registration in manifests/ does not parse: {e}"));
    Emulator::new(base_url, registrations)
}

/// Emulator calling several server replicas round-robin.
pub fn over_replicas(base_urls: Vec<String>) -> Emulator {
    let mut emulator = for_repository(&base_urls[0]);
    emulator.transport = Transport::http(base_urls);
    emulator
}

/// holds; fails after 30 s naming `what` and showing the parents of `kind`.
pub async fn settle(
    emulator: &mut Emulator,
    fetcher: &metahooks::source::fetcher::Fetcher,
    kind: &str,
    what: &str,
    done: impl Fn(&Emulator) -> bool,
) {
    let started = std::time::Instant::now();
    loop {
        emulator
            .converge(20)
            .await
            .unwrap_or_else(|v| panic!("{what}: {v}"));
        fetcher.idle().await;
        emulator
            .converge(20)
            .await
            .unwrap_or_else(|v| panic!("{what}: {v}"));
        if done(emulator) {
            return;
        }
        let parents: Vec<&Value> = emulator
            .objects
            .values()
            .filter(|o| o["kind"] == kind)
            .collect();
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "never settled: {what}\n{parents:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
