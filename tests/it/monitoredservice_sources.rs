//! MonitoredService against real sources on loopback: a `git daemon` over a repository
//! the test commits to, a static HTTP file server, and smart HTTP git behind basic auth.
//! The Metacontroller emulator applies the answers, so rollouts are observed as a
//! cluster would see them.

use crate::support;

use axum::http::StatusCode;
use metahooks::source::policy::Policy;
use serde_json::{Value, json};
use support::emulator::Emulator;
use support::servers::{Files, GitDaemon, Repo, serve_files, serve_git_http};

type Harness = support::SourceHarness;

async fn harness(policy: Policy) -> Harness {
    support::source_harness(policy).await
}

fn loopback_policy(schemes: &[&str]) -> Policy {
    support::loopback_policy(schemes)
}

fn service(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
           "metadata": {"name": name, "namespace": "team-a"}, "spec": spec})
}

fn parent<'a>(emulator: &'a Emulator, name: &str) -> &'a Value {
    emulator
        .get(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "team-a",
            name,
        )
        .unwrap()
}

fn condition(parent: &Value, type_: &str) -> (String, String, String) {
    let c = parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_}: {}", parent["status"]));
    (
        c["status"].as_str().unwrap().to_owned(),
        c["reason"].as_str().unwrap().to_owned(),
        c["message"].as_str().unwrap().to_owned(),
    )
}

fn hash(emulator: &Emulator, name: &str) -> Option<String> {
    emulator
        .get("apps/v1", "Deployment", "team-a", name)?
        .pointer("/spec/template/metadata/annotations/monitoredservice.metahooks.io~1config-hash")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// Runs emulator rounds (letting background fetches land) until `done` holds.
async fn settle(h: &mut Harness, what: &str, done: impl Fn(&Emulator) -> bool) {
    support::emulator::settle(&mut h.emulator, &h.fetcher, "MonitoredService", what, done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_changes_roll_the_deployment_and_failures_keep_it() {
    let repo = Repo::new();
    repo.commit(&[
        ("app/settings.env", "GREETING=hello\n"),
        ("other/readme.txt", "unrelated\n"),
    ]);
    let mut daemon = GitDaemon::start(&repo);
    let mut h = harness(loopback_policy(&["git"])).await;
    h.emulator.apply(service(
        "web",
        json!({"image": "web:1", "port": 8080, "format": "env",
        "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app/settings.env"}}}),
    ));
    settle(&mut h, "first fetch", |e| {
        hash(e, "web").is_some() && condition(parent(e, "web"), "Ready").0 == "True"
    })
    .await;
    let h1 = hash(&h.emulator, "web").unwrap();
    let config = h
        .emulator
        .get("v1", "ConfigMap", "team-a", "web-config")
        .unwrap();
    assert_eq!(config["data"], json!({"GREETING": "hello"}));
    let status = &parent(&h.emulator, "web")["status"];
    assert!(
        status["revision"]
            .as_str()
            .unwrap()
            .starts_with("main@sha1:"),
        "{status}"
    );
    assert_eq!(status["configHash"], json!(h1));
    let deployment = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "web")
        .unwrap();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"][0]["configMapRef"]["name"],
        "web-config"
    );
    let generation = deployment["metadata"]["generation"].as_i64().unwrap();

    // A change to the watched file: after the next fetch the pods roll.
    repo.commit(&[("app/settings.env", "GREETING=bonjour\n")]);
    h.fetcher.expire().await;
    settle(&mut h, "second revision", |e| {
        hash(e, "web").as_deref() != Some(h1.as_str())
    })
    .await;
    let h2 = hash(&h.emulator, "web").unwrap();
    assert_eq!(
        h.emulator
            .get("v1", "ConfigMap", "team-a", "web-config")
            .unwrap()["data"]["GREETING"],
        "bonjour"
    );
    let rolled = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "web")
        .unwrap()["metadata"]["generation"]
        .as_i64()
        .unwrap();
    assert_eq!(rolled, generation + 1, "exactly one rollout");

    // A commit elsewhere in the repository changes the revision but not the config.
    repo.commit(&[("other/readme.txt", "still unrelated\n")]);
    let before = parent(&h.emulator, "web")["status"]["revision"].clone();
    h.fetcher.expire().await;
    settle(&mut h, "unrelated commit", |e| {
        parent(e, "web")["status"]["revision"] != before
    })
    .await;
    assert_eq!(hash(&h.emulator, "web").unwrap(), h2, "nothing rolls");
    assert_eq!(
        h.emulator
            .get("apps/v1", "Deployment", "team-a", "web")
            .unwrap()["metadata"]["generation"]
            .as_i64()
            .unwrap(),
        rolled
    );

    // Server down: Fetched=False, everything keeps running as it was.
    daemon.stop();
    h.fetcher.expire().await;
    settle(&mut h, "fetch failure", |e| {
        condition(parent(e, "web"), "Fetched").0 == "False"
    })
    .await;
    let (_, reason, message) = condition(parent(&h.emulator, "web"), "Fetched");
    assert_eq!(reason, "Unreachable", "{message}");
    assert!(message.contains("still running main@sha1:"), "{message}");
    assert_eq!(hash(&h.emulator, "web").unwrap(), h2);
    assert_eq!(
        h.emulator
            .get("v1", "ConfigMap", "team-a", "web-config")
            .unwrap()["data"]["GREETING"],
        "bonjour"
    );

    // Back up: recovers without a rollout.
    daemon.restart();
    h.fetcher.expire().await;
    settle(&mut h, "recovery", |e| {
        condition(parent(e, "web"), "Fetched").0 == "True"
    })
    .await;
    assert_eq!(condition(parent(&h.emulator, "web"), "Ready").0, "True");
    assert_eq!(hash(&h.emulator, "web").unwrap(), h2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_monitor_sample_over_http() {
    let files = Files::default();
    // A config in config-monitor's KEY=VALUE format, with the quoting its sample uses.
    files.set(
        "/test_service/config",
        StatusCode::OK,
        "RESPONSE_TEXT=\"Hello world!\"\n",
    );
    let port = serve_files(files.clone()).await;
    let mut cr = support::read_yaml_documents(
        &support::examples_dir().join("example-monitoredservice.cr.yaml"),
    )
    .remove(0);
    cr["metadata"]["namespace"] = json!("team-a");
    cr["spec"]["config_repo"] = json!(format!("http://127.0.0.1:{port}/test_service/config"));
    let mut h = harness(loopback_policy(&["http"])).await;
    h.emulator.apply(cr);
    let name = "example-monitoredservice";
    settle(&mut h, "config-monitor sample", |e| hash(e, name).is_some()).await;
    let config = h
        .emulator
        .get("v1", "ConfigMap", "team-a", &format!("{name}-config"))
        .unwrap();
    assert_eq!(
        config["data"],
        json!({"RESPONSE_TEXT": "Hello world!"}),
        "quotes removed"
    );
    let deployment = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", name)
        .unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "test-service:latest");
    assert_eq!(container["ports"][0]["containerPort"], 8000);
    assert_eq!(deployment["spec"]["replicas"], 1, "size maps to replicas");
    assert!(h.emulator.get("v1", "Service", "team-a", name).is_some());
    assert!(
        parent(&h.emulator, name)["status"]["revision"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );

    // A 404 page is not a config: the running one stays (config-monitor rolled out an
    // empty env here).
    let h1 = hash(&h.emulator, name).unwrap();
    files.set(
        "/test_service/config",
        StatusCode::NOT_FOUND,
        "<html>gone</html>",
    );
    h.fetcher.expire().await;
    settle(&mut h, "404", |e| {
        condition(parent(e, name), "Fetched").0 == "False"
    })
    .await;
    assert_eq!(
        condition(parent(&h.emulator, name), "Fetched").1,
        "HTTPError"
    );
    assert_eq!(hash(&h.emulator, name).unwrap(), h1);

    // An invalid env file is reported with its line and nothing rolls.
    files.set("/test_service/config", StatusCode::OK, "A=1\nnot a pair\n");
    h.fetcher.expire().await;
    settle(&mut h, "invalid env", |e| {
        condition(parent(e, name), "ConfigValid").0 == "False"
    })
    .await;
    let (_, reason, message) = condition(parent(&h.emulator, name), "ConfigValid");
    assert_eq!(reason, "InvalidEnvFile");
    assert!(message.contains("line 2"), "{message}");
    assert_eq!(hash(&h.emulator, name).unwrap(), h1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_format_mounts_a_directory() {
    let repo = Repo::new();
    repo.commit(&[
        ("conf/app.yaml", "port: 80\n"),
        ("conf/nested/db.ini", "[db]\n"),
    ]);
    repo.commit_bytes("conf/logo.bin", &[0x89, 0x50, 0xff, 0xfe, 0x00]);
    let daemon = GitDaemon::start(&repo);
    let mut h = harness(loopback_policy(&["git"])).await;
    h.emulator.apply(service(
        "files",
        json!({"image": "app:1", "mountPath": "/srv/conf",
        "source": {"git": {"url": daemon.url(), "path": "conf"}}}),
    ));
    settle(&mut h, "files", |e| hash(e, "files").is_some()).await;
    let config = h
        .emulator
        .get("v1", "ConfigMap", "team-a", "files-config")
        .unwrap();
    assert_eq!(config["data"]["app.yaml"], "port: 80\n");
    assert_eq!(config["data"]["nested__db.ini"], "[db]\n");
    assert!(
        config["data"].get("logo.bin").is_none() && config["binaryData"]["logo.bin"].is_string(),
        "binary files go to binaryData"
    );
    let pod = &h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "files")
        .unwrap()["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/srv/conf"
    );
    let items = pod["volumes"][0]["configMap"]["items"].as_array().unwrap();
    assert!(items.contains(&json!({"key": "nested__db.ini", "path": "nested/db.ini"})));
    assert!(
        parent(&h.emulator, "files")["status"]["revision"]
            .as_str()
            .unwrap()
            .starts_with("main@sha1:"),
        "remote HEAD resolves to its branch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_a_secret_over_smart_http() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "TOKEN_OK=yes\n")]);
    let port = serve_git_http(repo.root.path().to_owned(), "deploy", "s3cret").await;
    let mut h = harness(loopback_policy(&["http"])).await;
    let url = format!("http://127.0.0.1:{port}/config.git");
    let secret = |password: &str| {
        use base64::Engine;
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git-creds", "namespace": "team-a",
                 "annotations": {"sources.metahooks.io/allowed-urls": format!("http://127.0.0.1:{port}/")}},
               "data": {"username": b64("deploy"), "password": b64(password)}})
    };
    h.emulator.apply(secret("wrong"));
    h.emulator.apply(service(
        "private",
        json!({"image": "app:1",
        "source": {"git": {"url": url, "path": "app.env", "secretRef": {"name": "git-creds"}}}}),
    ));
    settle(&mut h, "auth failure", |e| {
        condition(parent(e, "private"), "Fetched").1 == "AuthFailed"
    })
    .await;
    assert!(
        hash(&h.emulator, "private").is_none(),
        "nothing runs without a config"
    );

    h.emulator.apply(secret("s3cret"));
    h.fetcher.expire().await;
    settle(&mut h, "auth success", |e| hash(e, "private").is_some()).await;
    assert_eq!(
        h.emulator
            .get("v1", "ConfigMap", "team-a", "private-config")
            .unwrap()["data"]["TOKEN_OK"],
        "yes"
    );

    // Pods of the service are reported from the related objects the customize hook asked for.
    let pod_labels = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "private")
        .unwrap()["spec"]["template"]["metadata"]["labels"]
        .clone();
    h.emulator.apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "private-abc", "namespace": "team-a", "labels": pod_labels}}));
    settle(&mut h, "pods", |e| {
        parent(e, "private")["status"]["pods"] == json!(["private-abc"])
    })
    .await;
}

/// Each unsafe source is refused with its reason in status; nothing crashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_sources_are_refused_with_a_reason() {
    let repo = Repo::new();
    let big = "x".repeat(1100 * 1024);
    let mut many: Vec<(String, String)> = (0..300)
        .map(|i| (format!("many/f{i}.txt"), format!("{i}\n")))
        .collect();
    many.push(("big/huge.txt".to_owned(), big));
    let refs: Vec<(&str, &str)> = many.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    repo.commit(&refs);
    repo.commit(&[("ok/app.env", "A=1\n")]);
    repo.symlink("ok/passwd", "/etc/passwd");
    let daemon = GitDaemon::start(&repo);

    let mut strict = harness(Policy::default()).await;
    let mut loose = harness(loopback_policy(&["git", "http"])).await;
    let strict_cases = [
        (
            "file",
            json!({"git": {"url": "file:///etc"}}),
            "SchemeRefused",
        ),
        (
            "ssh",
            json!({"git": {"url": "ssh://git@example.com/repo.git"}}),
            "SchemeRefused",
        ),
        (
            "scp",
            json!({"git": {"url": "git@example.com:org/repo.git"}}),
            "SchemeRefused",
        ),
        (
            "metadata",
            json!({"http": {"url": "https://169.254.169.254/latest/meta-data/"}}),
            "HostRefused",
        ),
        (
            "loopback",
            json!({"http": {"url": "https://127.0.0.1:9/config"}}),
            "HostRefused",
        ),
        (
            "localhost",
            json!({"git": {"url": "https://localhost/repo.git"}}),
            "HostRefused",
        ),
    ];
    for (name, source, _) in &strict_cases {
        strict
            .emulator
            .apply(service(name, json!({"image": "x:1", "source": source})));
    }
    let loose_cases = [
        (
            "escape",
            json!({"git": {"url": daemon.url(), "path": "../../etc/passwd"}}),
            "PathRefused",
        ),
        (
            "symlink",
            json!({"git": {"url": daemon.url(), "path": "ok/passwd"}}),
            "SymlinkRefused",
        ),
        (
            "symlink-dir",
            json!({"git": {"url": daemon.url(), "path": "ok"}}),
            "SymlinkRefused",
        ),
        (
            "oversized",
            json!({"git": {"url": daemon.url(), "path": "big/huge.txt"}}),
            "TooLarge",
        ),
        (
            "too-many",
            json!({"git": {"url": daemon.url(), "path": "many"}}),
            "TooManyFiles",
        ),
        (
            "no-path",
            json!({"git": {"url": daemon.url(), "path": "nope.env"}}),
            "PathNotFound",
        ),
        (
            "no-ref",
            json!({"git": {"url": daemon.url(), "ref": "v9"}}),
            "RefNotFound",
        ),
    ];
    for (name, source, _) in &loose_cases {
        loose
            .emulator
            .apply(service(name, json!({"image": "x:1", "source": source})));
    }
    for (harness, cases) in [
        (&mut strict, &strict_cases[..]),
        (&mut loose, &loose_cases[..]),
    ] {
        settle(harness, "refusals", |e| {
            cases
                .iter()
                .all(|(name, ..)| condition(parent(e, name), "Fetched").1 != "FetchPending")
        })
        .await;
        for (name, _, reason) in cases {
            let (status, actual, message) = condition(parent(&harness.emulator, name), "Fetched");
            assert_eq!(
                (status.as_str(), actual.as_str()),
                ("False", *reason),
                "{name}: {message}"
            );
            assert!(
                harness
                    .emulator
                    .get("apps/v1", "Deployment", "team-a", name)
                    .is_none(),
                "{name}: nothing runs"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_parents_on_five_repositories_fetch_five_times_per_interval() {
    let repos: Vec<Repo> = (0..5).map(|_| Repo::new()).collect();
    for (index, repo) in repos.iter().enumerate() {
        repo.commit(&[("a.env", &format!("REPO={index}\n")), ("b.env", "B=2\n")]);
    }
    let daemons: Vec<GitDaemon> = repos.iter().map(GitDaemon::start).collect();
    let mut h = harness(loopback_policy(&["git"])).await;
    for i in 0..200 {
        let path = if i % 3 == 0 { "b.env" } else { "a.env" };
        h.emulator.apply(service(
            &format!("svc{i}"),
            json!({"image": "x:1", "intervalSeconds": 60,
            "source": {"git": {"url": daemons[i % 5].url(), "ref": "main", "path": path}}}),
        ));
    }
    settle(&mut h, "two hundred parents", |e| {
        (0..200).all(|i| hash(e, &format!("svc{i}")).is_some())
    })
    .await;
    assert_eq!(
        h.fetcher.network_fetches(),
        5,
        "one fetch per repository per interval"
    );
    // Another full pass within the interval fetches nothing.
    h.emulator.converge(5).await.unwrap();
    h.fetcher.idle().await;
    assert_eq!(h.fetcher.network_fetches(), 5);
    // The next interval: each repository once more, whatever the number of parents.
    h.fetcher.expire().await;
    h.emulator.round().await.unwrap();
    h.fetcher.idle().await;
    assert_eq!(h.fetcher.network_fetches(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_repository_poll_lists_refs_and_downloads_no_pack() {
    let repo = Repo::new();
    repo.commit(&[("a.env", "A=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let policy = loopback_policy(&["git"]);
    let url = daemon.url();
    // One poll of `main`, as a fetch job makes it.
    let poll = || {
        metahooks::source::git::fetch(
            cache.path(),
            &url,
            metahooks::source::git::Pick::Named("main"),
            None,
            None,
            &policy,
            metahooks::source::git::deadline(&policy),
        )
        .unwrap()
    };
    let first = poll();
    assert!(first.downloaded && first.received_bytes > 0);
    let again = poll();
    assert!(!again.downloaded, "same commit: no pack");
    assert_eq!(again.received_bytes, 0);
    assert_eq!(again.commit, first.commit);
    repo.commit(&[("a.env", "A=2\n")]);
    let changed = poll();
    assert!(changed.downloaded && changed.commit != first.commit);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_repositories_are_fetched_once_per_interval() {
    let repo = Repo::new();
    repo.commit(&[("a.env", "A=1\n"), ("b.env", "B=2\n")]);
    let daemon = GitDaemon::start(&repo);
    let mut h = harness(loopback_policy(&["git"])).await;
    for i in 0..20 {
        let path = if i % 2 == 0 { "a.env" } else { "b.env" };
        h.emulator.apply(service(&format!("svc{i}"), json!({"image": "x:1", "source": {"git": {"url": daemon.url(), "ref": "main", "path": path}}})));
    }
    settle(&mut h, "twenty parents", |e| {
        (0..20).all(|i| hash(e, &format!("svc{i}")).is_some())
    })
    .await;
    assert_eq!(
        h.fetcher.network_fetches(),
        1,
        "one repository, one fetch, however many parents"
    );
}

/// An HTTP source that answers `KEY=value` once `open` is set, and keeps the call
/// waiting (a slow or stuck origin) until then.
async fn gated_source(open: std::sync::Arc<tokio::sync::Notify>) -> u16 {
    let app = axum::Router::new().route(
        "/config",
        axum::routing::get(move || {
            let open = open.clone();
            async move {
                open.notified().await;
                "KEY=value\n"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_over_http_waits_for_sources_and_says_what_is_still_pending() {
    use metahooks::emulate::story::{Plan, pending_sources, play};
    // A stuck origin, and no time to wait: the run ends on FetchPending and says so.
    let stuck = std::sync::Arc::new(tokio::sync::Notify::new());
    let port = gated_source(stuck.clone()).await;
    let mut h = harness(loopback_policy(&["http"])).await;
    let cr = service(
        "web",
        json!({"config_repo": format!("http://127.0.0.1:{port}/config"), "image": "web:1"}),
    );
    play(&mut h.emulator, vec![cr.clone()], &Plan::default())
        .await
        .unwrap();
    assert_eq!(
        pending_sources(&h.emulator),
        ["MonitoredService team-a/web"]
    );
    // The same origin let go while the run waits: the run goes on until the source is
    // in, and ends with nothing pending.
    let plan = Plan {
        wait_for_sources: std::time::Duration::from_secs(120),
        ..Plan::default()
    };
    let release = tokio::spawn(async move {
        // Everything already waiting, and whatever asks later, is answered.
        loop {
            stuck.notify_waiters();
            tokio::task::yield_now().await;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    let mut again = harness(loopback_policy(&["http"])).await;
    play(&mut again.emulator, vec![cr], &plan).await.unwrap();
    release.abort();
    assert!(pending_sources(&again.emulator).is_empty());
    assert_eq!(
        condition(parent(&again.emulator, "web"), "Fetched").0,
        "True"
    );
}

fn revision(emulator: &Emulator, name: &str) -> String {
    parent(emulator, name)["status"]["revision"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn greeting(emulator: &Emulator, name: &str) -> Value {
    emulator
        .get("v1", "ConfigMap", "team-a", &format!("{name}-config"))
        .map_or(Value::Null, |c| c["data"]["GREETING"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semver_range_follows_the_highest_release_tag_in_it() {
    let repo = Repo::new();
    repo.commit(&[("settings.env", "GREETING=one\n")]);
    repo.tag("v1.2.0");
    repo.commit(&[("settings.env", "GREETING=two\n")]);
    repo.tag_annotated("v1.4.0");
    repo.commit(&[("settings.env", "GREETING=pre\n")]);
    repo.tag("v1.5.0-rc.1");
    repo.commit(&[("settings.env", "GREETING=three\n")]);
    repo.tag("v2.0.0");
    repo.commit(&[("settings.env", "GREETING=unreleased\n")]);
    let daemon = GitDaemon::start(&repo);
    let mut h = harness(loopback_policy(&["git"])).await;
    let git = |range: &str| {
        json!({"image": "web:1", "port": 8080, "format": "env",
               "source": {"git": {"url": daemon.url(), "semver": range, "path": "settings.env"}}})
    };
    h.emulator.apply(service("web", git(">=1.2.0 <2.0.0")));
    h.emulator.apply(service("future", git(">=3")));
    settle(&mut h, "the highest tag in each range", |e| {
        hash(e, "web").is_some()
            && parent(e, "future")["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Fetched"))
    })
    .await;
    // The annotated v1.4.0 is peeled to its commit; the pre-release and v2 are outside.
    assert!(
        revision(&h.emulator, "web").starts_with("v1.4.0@sha1:"),
        "{}",
        revision(&h.emulator, "web")
    );
    assert_eq!(greeting(&h.emulator, "web"), "two");
    let (status, reason, message) = condition(parent(&h.emulator, "future"), "Fetched");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NoMatchingTag")
    );
    assert!(
        message.contains("\">=3\""),
        "the range is quoted: {message}"
    );
    assert!(hash(&h.emulator, "future").is_none(), "nothing to run yet");

    // A new release in the range is followed at the next poll; one outside is not.
    repo.commit(&[("settings.env", "GREETING=four\n")]);
    repo.tag("v1.5.0");
    repo.commit(&[("settings.env", "GREETING=five\n")]);
    repo.tag("v3.0.0");
    h.fetcher.expire().await;
    settle(&mut h, "the new tags", |e| {
        revision(e, "web").starts_with("v1.5.0@") && hash(e, "future").is_some()
    })
    .await;
    assert_eq!(greeting(&h.emulator, "web"), "four");
    assert_eq!(greeting(&h.emulator, "future"), "five");
    assert!(revision(&h.emulator, "future").starts_with("v3.0.0@sha1:"));

    // A ref and a range together are refused by name, before anything is fetched.
    h.emulator.apply(service(
        "both",
        json!({"image": "web:1", "port": 8080, "format": "env",
               "source": {"git": {"url": daemon.url(), "ref": "main", "semver": "^1",
                                  "path": "settings.env"}}}),
    ));
    settle(&mut h, "the refusal", |e| {
        parent(e, "both")["status"]["conditions"].is_array()
    })
    .await;
    let refused = parent(&h.emulator, "both")["status"]["conditions"].to_string();
    assert!(refused.contains("InvalidSpec"), "{refused}");
    assert!(
        refused.contains("spec.source.git.ref and spec.source.git.semver are both set"),
        "{refused}"
    );
}

fn condition_of(emulator: &Emulator, name: &str, type_: &str) -> Option<(String, String, String)> {
    support::condition(parent(emulator, name), type_)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_that_breaks_its_schema_does_not_roll() {
    let repo = Repo::new();
    repo.commit(&[
        ("app.env", "GREETING=hello\nPORT=8080\n"),
        ("conf/app.yaml", "replicas: 2\nmode: fast\n"),
        (
            "schemas/app.json",
            r#"{"type": "object", "required": ["replicas"],
                "properties": {"replicas": {"type": "integer", "minimum": 1},
                               "mode": {"enum": ["fast", "safe"]}}}"#,
        ),
    ]);
    let daemon = GitDaemon::start(&repo);
    let mut h = harness(loopback_policy(&["git"])).await;
    let env_schema = json!({"type": "object", "required": ["PORT"],
        "properties": {"PORT": {"type": "string", "pattern": "^[0-9]+$"}}});
    h.emulator.apply(service(
        "env",
        json!({"image": "web:1", "format": "env", "configSchema": {"inline": env_schema},
               "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app.env"}}}),
    ));
    h.emulator.apply(service(
        "files",
        json!({"image": "web:1", "format": "files", "configSchema": {"path": "schemas/app.json"},
               "source": {"git": {"url": daemon.url(), "ref": "main", "path": "conf"}}}),
    ));
    h.emulator.apply(service(
        "catastrophic",
        json!({"image": "web:1", "format": "env",
               "configSchema": {"inline": {"properties": {"PORT": {"pattern": "^(\\d+)\\1$"}}}},
               "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app.env"}}}),
    ));
    // A few lines whose evaluation would take 2^60 steps: each level names the next twice.
    let mut defs = serde_json::Map::new();
    for i in 0..60 {
        let next = json!({"$ref": format!("#/$defs/l{}", i + 1)});
        defs.insert(format!("l{i}"), json!({"allOf": [next.clone(), next]}));
    }
    defs.insert("l60".to_owned(), json!({"type": "object"}));
    h.emulator.apply(service(
        "doubling",
        json!({"image": "web:1", "format": "env",
               "configSchema": {"inline": {"$defs": defs, "$ref": "#/$defs/l0"}},
               "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app.env"}}}),
    ));
    let refused = |e: &Emulator, name: &str| {
        condition_of(e, name, "ConfigValid").is_some_and(|c| c.0 == "False")
    };
    settle(&mut h, "both configs valid", |e| {
        hash(e, "env").is_some()
            && hash(e, "files").is_some()
            && refused(e, "catastrophic")
            && refused(e, "doubling")
    })
    .await;
    let (_, reason, message) = condition_of(&h.emulator, "catastrophic", "ConfigValid").unwrap();
    assert_eq!(reason, "SchemaInvalid", "{message}");
    let (_, reason, message) = condition_of(&h.emulator, "doubling", "ConfigValid").unwrap();
    assert_eq!(reason, "SchemaInvalid", "{message}");
    assert!(
        message.contains("the env file") && message.contains("more than 1000000 steps"),
        "{message}"
    );
    assert!(
        hash(&h.emulator, "doubling").is_none(),
        "refused, not evaluated"
    );
    assert!(
        hash(&h.emulator, "catastrophic").is_none(),
        "refused, not evaluated"
    );
    let (env_hash, files_hash) = (
        hash(&h.emulator, "env").unwrap(),
        hash(&h.emulator, "files").unwrap(),
    );

    // Both configs break their schemas in one commit: neither rolls, and status says
    // where (file, JSON pointer, rule).
    repo.commit(&[
        ("app.env", "GREETING=hello\nPORT=eighty\n"),
        ("conf/app.yaml", "replicas: 0\nmode: reckless\n"),
    ]);
    h.fetcher.expire().await;
    settle(&mut h, "the violations", |e| {
        ["env", "files"].iter().all(|name| {
            condition_of(e, name, "ConfigValid").is_some_and(|c| c.1 == "SchemaViolation")
        })
    })
    .await;
    let (status, _, message) = condition_of(&h.emulator, "env", "ConfigValid").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("the env file at /PORT"), "{message}");
    assert!(message.contains("pattern"), "the rule: {message}");
    assert!(message.contains("still running main@sha1:"), "{message}");
    let (_, _, message) = condition_of(&h.emulator, "files", "ConfigValid").unwrap();
    assert!(
        message.contains("app.yaml at /replicas") && message.contains("minimum"),
        "{message}"
    );
    assert!(
        message.contains("app.yaml at /mode") && message.contains("enum"),
        "{message}"
    );
    assert_eq!(
        hash(&h.emulator, "env").unwrap(),
        env_hash,
        "nothing rolled"
    );
    assert_eq!(
        hash(&h.emulator, "files").unwrap(),
        files_hash,
        "nothing rolled"
    );

    // The schema changes in the same commit as the config it allows: it rolls.
    repo.commit(&[(
        "schemas/app.json",
        r#"{"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 0},
                                            "mode": {"enum": ["fast", "safe", "reckless"]}}}"#,
    )]);
    h.fetcher.expire().await;
    settle(&mut h, "the new schema", |e| {
        hash(e, "files").is_some_and(|h| h != files_hash)
    })
    .await;
    assert_eq!(
        condition_of(&h.emulator, "files", "ConfigValid").unwrap().0,
        "True"
    );
}
