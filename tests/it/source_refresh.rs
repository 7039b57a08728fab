//! "Fetch now" (`sources.metahooks.io/requested-at`): the engine fetches a remote at
//! once for a new token, however long its interval, once per token; and a
//! MonitoredService with a ten-minute interval rolls to a pushed commit at its next
//! sync after the annotation changes, recording the handled value. Real `git daemon`.

use crate::support;

use std::time::Duration;

use metahooks::source::{Content, Location, Refresh, SourceRequest, Sources};
use serde_json::json;
use support::emulator::Emulator;
use support::servers::{GitDaemon, Repo};

const HOUR: Duration = Duration::from_secs(3600);

fn request(url: &str) -> SourceRequest {
    SourceRequest {
        location: Location::Git {
            url: url.to_owned(),
            reference: Some("main".to_owned()),
            semver: None,
            verify: None,
            path: "app.env".to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: None,
        tls: None,
    }
}

/// Asks `refresh` until the token is handled.
async fn refreshed(
    fetcher: &metahooks::source::fetcher::Fetcher,
    request: &SourceRequest,
    token: &str,
) {
    // As a parent resyncing would: a fetch for the token may wait out the 2 s spacing
    // after the last one. Polled with a generous deadline.
    let started = std::time::Instant::now();
    while fetcher.refresh(request, HOUR, token) != Refresh::Handled {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "token {token} never handled"
        );
        fetcher.idle().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_token_fetches_at_once_and_only_once() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "V=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(support::loopback_policy(&["git"]), cache.path());
    let wanted = request(&daemon.url());
    let first = crate::source_hardening::settled(&fetcher, &wanted).await;
    assert_eq!(
        first.snapshot.unwrap().files["app.env"],
        Content::Text("V=1\n".to_owned())
    );
    let fetches = fetcher.network_fetches();

    repo.commit(&[("app.env", "V=2\n")]);
    // Within the hour-long interval a lookup answers from the cache and fetches nothing.
    let cached = fetcher.lookup(&wanted, HOUR);
    assert!(!cached.pending, "{cached:?}");
    assert_eq!(
        cached.snapshot.unwrap().files["app.env"],
        Content::Text("V=1\n".to_owned())
    );

    refreshed(&fetcher, &wanted, "1700000000").await;
    let fresh = fetcher.lookup(&wanted, HOUR);
    assert_eq!(
        fresh.snapshot.unwrap().files["app.env"],
        Content::Text("V=2\n".to_owned())
    );
    assert_eq!(fetcher.network_fetches(), fetches + 1);

    // The same token again is already handled: no second fetch.
    assert_eq!(
        fetcher.refresh(&wanted, HOUR, "1700000000"),
        Refresh::Handled
    );
    fetcher.idle().await;
    assert_eq!(fetcher.network_fetches(), fetches + 1);
}

fn hash(emulator: &Emulator) -> Option<String> {
    emulator
        .get("apps/v1", "Deployment", "team-a", "web")?
        .pointer("/spec/template/metadata/annotations/monitoredservice.metahooks.io~1config-hash")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

fn handled(emulator: &Emulator) -> serde_json::Value {
    emulator
        .get(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "team-a",
            "web",
        )
        .map(|parent| parent["status"]["lastHandledRequestedAt"].clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_monitored_service_rolls_when_asked_to_fetch_now() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "COLOUR=blue\n")]);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    let service = |annotations: serde_json::Value| {
        json!({
            "apiVersion": "services.example.com/v1alpha1",
            "kind": "MonitoredService",
            "metadata": {"name": "web", "namespace": "team-a", "annotations": annotations},
            "spec": {"image": "web:1", "format": "env", "intervalSeconds": 600,
                "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app.env"}}},
        })
    };
    h.emulator.apply(service(json!({})));
    support::emulator::settle(
        &mut h.emulator,
        &h.fetcher,
        "MonitoredService",
        "first fetch",
        |e| hash(e).is_some(),
    )
    .await;
    let before = hash(&h.emulator);

    repo.commit(&[("app.env", "COLOUR=green\n")]);
    // Within the ten-minute interval nothing is fetched again.
    h.emulator.converge(20).await.unwrap();
    h.fetcher.idle().await;
    h.emulator.converge(20).await.unwrap();
    assert_eq!(hash(&h.emulator), before, "no fetch before the interval");
    assert!(handled(&h.emulator).is_null());

    h.emulator.apply(service(
        json!({"sources.metahooks.io/requested-at": "1700000000"}),
    ));
    support::emulator::settle(
        &mut h.emulator,
        &h.fetcher,
        "MonitoredService",
        "fetch now",
        |e| hash(e) != before && handled(e) == "1700000000",
    )
    .await;
    let config = h
        .emulator
        .get("v1", "ConfigMap", "team-a", "web-config")
        .unwrap();
    assert_eq!(config["data"], json!({"COLOUR": "green"}));
}
