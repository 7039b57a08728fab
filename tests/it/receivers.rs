//! Push receivers against a real `git daemon`: each forge's signature (good and bad), a
//! verified push fetching the named repository at once and rolling a MonitoredService
//! whose interval is ten minutes, and the resync bound that brings the next sync close.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use metahooks::controllers::{ControllerSettings, Registry};
use metahooks::receivers::{ReceiverSettings, verify::sign};
use metahooks::server::{Clock, Server};
use metahooks::source::Sources;
use serde_json::{Value, json};
use support::emulator::Emulator;
use support::servers::{GitDaemon, Repo};

const SECRET: &str = "push-secret";

struct Setup {
    repo: Repo,
    daemon: GitDaemon,
    fetcher: metahooks::source::fetcher::Fetcher,
    emulator: Emulator,
    receivers: metahooks::receivers::Receivers,
    _server: Server,
    _cache: tempfile::TempDir,
}

async fn setup() -> Setup {
    let repo = Repo::new();
    repo.commit(&[("app.env", "COLOUR=blue\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::start(
        support::fetcher_settings(support::loopback_policy(&["git"]), cache.path())
            .push_resync_seconds(Some(5))
            .build(),
    );
    let sources: Arc<dyn Sources> = Arc::new(fetcher.clone());
    let registry = Registry::standard(ControllerSettings::default()).with_sources(sources.clone());
    let server = Server::start(support::local_settings(), registry, Clock::System)
        .await
        .unwrap();
    let receivers = metahooks::receivers::start(
        ReceiverSettings {
            listen: "127.0.0.1:0".parse().unwrap(),
            secret: SECRET.as_bytes().to_vec(),
        },
        sources,
    )
    .await
    .unwrap();
    let emulator = support::emulator::for_repository(&format!("http://{}", server.hook_addr));
    Setup {
        repo,
        daemon,
        fetcher,
        emulator,
        receivers,
        _server: server,
        _cache: cache,
    }
}

/// A MonitoredService "web" reading the repository with a ten-minute interval, synced
/// until its first fetch has rolled out; returns the repository's URL.
async fn start_web(s: &mut Setup) -> String {
    let url = s.daemon.url();
    s.emulator.apply(
        json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"image": "web:1", "format": "env", "intervalSeconds": 600,
            "source": {"git": {"url": url, "ref": "main", "path": "app.env"}}}}),
    );
    support::emulator::settle(
        &mut s.emulator,
        &s.fetcher,
        "MonitoredService",
        "first fetch",
        |e| hash(e).is_some(),
    )
    .await;
    url
}

/// Polls `done` (a fetch runs in the background) with a generous deadline.
async fn until(what: &str, done: impl Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(60), "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn hash(emulator: &Emulator) -> Option<String> {
    emulator
        .get("apps/v1", "Deployment", "team-a", "web")?
        .pointer("/spec/template/metadata/annotations/monitoredservice.metahooks.io~1config-hash")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

async fn post(s: &Setup, forge: &str, headers: &[(&str, String)], body: &Value) -> (u16, Value) {
    let client = reqwest::Client::new();
    let mut request = client
        .post(format!("http://{}/receivers/{forge}", s.receivers.addr))
        .body(serde_json::to_vec(body).unwrap());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The headers that prove `body` for `forge`, under `secret`.
fn proof(forge: &str, body: &Value, secret: &str) -> Vec<(&'static str, String)> {
    let bytes = serde_json::to_vec(body).unwrap();
    let signature = sign(&bytes, secret.as_bytes());
    match forge {
        "github" => vec![
            ("x-hub-signature-256", signature),
            ("x-github-event", "push".to_owned()),
        ],
        "gitlab" => vec![
            ("x-gitlab-token", secret.to_owned()),
            ("x-gitlab-event", "Push Hook".to_owned()),
        ],
        "gitea" => vec![(
            "x-gitea-signature",
            signature.trim_start_matches("sha256=").to_owned(),
        )],
        _ => vec![("x-signature-256", signature)],
    }
}

fn payload(forge: &str, url: &str) -> Value {
    match forge {
        "github" | "gitea" => json!({"ref": "refs/heads/main", "repository": {"clone_url": url}}),
        "gitlab" => json!({"object_kind": "push", "project": {"git_http_url": url}}),
        _ => json!({"url": url}),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_forge_is_verified_and_a_bad_signature_triggers_nothing() {
    let mut s = setup().await;
    let url = start_web(&mut s).await;
    let fetches = s.fetcher.network_fetches();
    for forge in ["github", "gitlab", "gitea", "generic"] {
        let body = payload(forge, &url);
        let (status, answer) = post(&s, forge, &proof(forge, &body, "not-the-secret"), &body).await;
        assert_eq!(status, 401, "{forge}: {answer}");
        assert_eq!(answer["reason"], "BadSignature", "{forge}");
        let (status, answer) = post(&s, forge, &[], &body).await;
        assert_eq!(status, 401, "{forge} without a signature: {answer}");
    }
    s.fetcher.idle().await;
    assert_eq!(
        s.fetcher.network_fetches(),
        fetches,
        "a refused push fetched"
    );

    for forge in ["github", "gitlab", "gitea", "generic"] {
        let body = payload(forge, &url);
        let (status, answer) = post(&s, forge, &proof(forge, &body, SECRET), &body).await;
        assert_eq!(status, 202, "{forge}: {answer}");
        assert_eq!(answer["remotes"], 1, "{forge}: {answer}");
        s.fetcher.idle().await;
    }
    until("verified pushes fetch", || {
        s.fetcher.network_fetches() > fetches
    })
    .await;

    // Another repository's push matches no remote.
    let other = payload("generic", "https://git.example.com/elsewhere.git");
    let (status, answer) = post(&s, "generic", &proof("generic", &other, SECRET), &other).await;
    assert_eq!(
        (status, answer["remotes"].clone()),
        (202, json!(0)),
        "{answer}"
    );
    let (status, _) = post(&s, "bitbucket", &[], &other).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verified_push_rolls_a_ten_minute_service_at_its_next_sync() {
    let mut s = setup().await;
    let url = start_web(&mut s).await;
    let before = hash(&s.emulator);

    s.repo.commit(&[("app.env", "COLOUR=green\n")]);
    let body = json!({"ref": "refs/heads/main", "repository": {"ssh_url": "git@127.0.0.1:config.git",
        "clone_url": url}});
    let pushed_at = Instant::now();
    let (status, answer) = post(&s, "github", &proof("github", &body, SECRET), &body).await;
    assert_eq!(status, 202, "{answer}");
    // The fetch the push started lands without any sync asking for it.
    let wanted = metahooks::source::SourceRequest {
        location: metahooks::source::Location::Git {
            url: url.clone(),
            reference: Some("main".to_owned()),
            semver: None,
            verify: None,
            path: "app.env".to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: None,
        tls: None,
    };
    let fetched = || {
        s.fetcher
            .lookup(&wanted, Duration::from_secs(600))
            .snapshot
            .is_some_and(|snapshot| {
                snapshot.files["app.env"]
                    == metahooks::source::Content::Text("COLOUR=green\n".to_owned())
            })
    };
    until("the pushed commit is fetched", fetched).await;
    let state = s.fetcher.lookup(&wanted, Duration::from_secs(600));
    assert_eq!(
        state.snapshot.unwrap().files["app.env"],
        metahooks::source::Content::Text("COLOUR=green\n".to_owned())
    );
    // While receivers listen, parents are asked to sync again within 5 s, not 600.
    assert_eq!(state.resync_within, Some(5));
    eprintln!("push to fetched: {} ms", pushed_at.elapsed().as_millis());
    support::emulator::settle(
        &mut s.emulator,
        &s.fetcher,
        "MonitoredService",
        "push",
        |e| hash(e) != before,
    )
    .await;
    let config = s
        .emulator
        .get("v1", "ConfigMap", "team-a", "web-config")
        .unwrap();
    assert_eq!(config["data"], json!({"COLOUR": "green"}));
}

/// Senders without the secret cannot take the slots signed pushes need: a missing or
/// malformed signature is refused from the headers alone, before any body is read, and
/// a signed push sent while they hang on is handled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_slow_senders_hold_nothing_a_signed_push_needs() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = setup().await;
    let url = start_web(&mut s).await;
    let mut stalled = Vec::new();
    for header in ["", "x-hub-signature-256: sha256=nothex\r\n"] {
        for _ in 0..20 {
            let mut connection = tokio::net::TcpStream::connect(s.receivers.addr)
                .await
                .unwrap();
            let head = format!(
                "POST /receivers/github HTTP/1.1\r\nhost: x\r\n{header}content-length: 100000\r\n\r\n{{"
            );
            connection.write_all(head.as_bytes()).await.unwrap();
            // Answered 401 at once, from its headers, while its body never comes. (Read
            // now: a refused sender's connection is idle, and a later connection from the
            // same address may take its slot.)
            let mut answer = vec![0; 12];
            tokio::time::timeout(Duration::from_secs(60), connection.read_exact(&mut answer))
                .await
                .expect("answered before the body arrived")
                .unwrap();
            assert_eq!(&answer, b"HTTP/1.1 401");
            stalled.push(connection);
        }
    }
    let body = payload("github", &url);
    let (status, answer) = post(&s, "github", &proof("github", &body, SECRET), &body).await;
    assert_eq!(status, 202, "{answer}");
}

/// A signed delivery sent again (a replay, or a forge's redelivery) is recognised by its
/// delivery ID and answered without another fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_delivery_is_answered_without_a_fetch() {
    let mut s = setup().await;
    let url = start_web(&mut s).await;
    let body = payload("github", &url);
    let mut headers = proof("github", &body, SECRET);
    headers.push((
        "x-github-delivery",
        "72d3162e-cc78-11e3-81ab-4c9367dc0958".to_owned(),
    ));
    let (status, first) = post(&s, "github", &headers, &body).await;
    assert_eq!(
        (status, first["remotes"].clone()),
        (202, json!(1)),
        "{first}"
    );
    let (status, again) = post(&s, "github", &headers, &body).await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["remotes"], 0, "{again}");
    // Another delivery of the same repository is a push of its own.
    headers.pop();
    headers.push(("x-github-delivery", "another".to_owned()));
    let (status, other) = post(&s, "github", &headers, &body).await;
    assert_eq!(
        (status, other["remotes"].clone()),
        (202, json!(1)),
        "{other}"
    );
}

/// Every answer of the receiver port is `{"error", "reason"}`, the wrong method and an
/// unknown path included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wrong_method_and_an_unknown_path_get_a_reason() {
    let s = setup().await;
    let base = format!("http://{}", s.receivers.addr);
    let get = reqwest::get(format!("{base}/receivers/github"))
        .await
        .unwrap();
    assert_eq!(get.status(), 405);
    let body: Value = get.json().await.unwrap();
    assert_eq!(body["reason"], "MethodNotAllowed", "{body}");
    let unknown = reqwest::Client::new()
        .post(format!("{base}/elsewhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["reason"], "UnknownPath", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("/receivers/github")
    );
}
