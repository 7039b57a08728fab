//! Behaviours of a real cluster that the hooks must get right, driven through the
//! emulator (which models them after Metacontroller's source): related objects listed
//! across namespaces, the customize answer cache, children kept while no config exists,
//! and keep-last-good under both apply strategies.

use crate::support;

use metahooks::source::fetcher::Fetcher;
use serde_json::{Value, json};
use support::emulator::Emulator;
use support::servers::{GitDaemon, Repo, closed_port};

type Harness = support::SourceHarness;

async fn harness() -> Harness {
    support::source_harness(support::loopback_policy(&["git", "http"])).await
}

async fn settle(h: &mut Harness, kind: &str, what: &str, done: impl Fn(&Emulator) -> bool) {
    support::emulator::settle(&mut h.emulator, &h.fetcher, kind, what, done).await;
}

fn condition(parent: &Value, type_: &str) -> Option<(String, String, String)> {
    let c = parent["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str()?.to_owned(),
    ))
}

/// A token Secret whose owner allows it for `allowed` (URL prefixes).
fn secret(namespace: &str, name: &str, token: &str, labels: Value, allowed: &str) -> Value {
    use base64::Engine;
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": name, "namespace": namespace, "labels": labels,
                        "annotations": {"sources.metahooks.io/allowed-urls": allowed}},
           "data": {"token": base64::engine::general_purpose::STANDARD.encode(token)}})
}

fn monitored(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
           "metadata": {"name": name, "namespace": "team-a"}, "spec": spec})
}

fn ms<'a>(e: &'a Emulator, name: &str) -> &'a Value {
    e.get(
        "services.example.com/v1alpha1",
        "MonitoredService",
        "team-a",
        name,
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_secret_and_pods_are_never_used() {
    let mut h = harness().await;
    // team-b holds a Secret with the name team-a's service asks for, and a Pod carrying
    // the labels team-a's pods would carry.
    h.emulator.apply(secret(
        "team-b",
        "git-creds",
        "team-b-token",
        json!({}),
        "http://127.0.0.1/",
    ));
    h.emulator.apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "intruder", "namespace": "team-b",
                     "labels": {"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": "web",
                                "app": "web", "monitored_service_cr": "web"}}}));
    let closed = closed_port();
    h.emulator.apply(monitored(
        "web",
        json!({"image": "app:1", "source": {"git": {
            "url": format!("http://127.0.0.1:{closed}/config.git"),
            "secretRef": {"name": "git-creds"}}}}),
    ));
    settle(&mut h, "MonitoredService", "secret lookup", |e| {
        condition(ms(e, "web"), "Fetched").is_some()
    })
    .await;
    let parent = ms(&h.emulator, "web");
    // A Secret that cannot be used stops the fetch; the spec is fine.
    let (status, reason, message) = condition(parent, "Fetched").unwrap();
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "SecretNotFound"),
        "{message}"
    );
    assert!(message.contains("team-a"), "{message}");
    let pods = parent["status"]["pods"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        pods.is_empty(),
        "another namespace's pod is listed: {pods:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configsync_secret_annotation_takes_effect_despite_the_customize_cache() {
    let repo = Repo::new();
    repo.commit(&[("app.conf", "a=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let mut h = harness().await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team-a", "generation": 1,
                     "annotations": {"configsync.metahooks.io/git-url": daemon.url()}},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "web:1"}]}}}});
    let key = h.emulator.apply(deployment);
    let revision = |e: &Emulator| {
        e.get("apps/v1", "Deployment", "team-a", "web")
            .and_then(|d| d.pointer("/metadata/annotations/configsync.metahooks.io~1revision"))
            .is_some()
    };
    settle(&mut h, "Deployment", "first sync", revision).await;
    // The user adds credentials: a labelled Secret and the annotation naming it. An
    // annotation edit does not bump the generation, so Metacontroller reuses its cached
    // customize answer; the answer must already bring the Secret.
    h.emulator.apply(secret(
        "team-a",
        "creds",
        "t",
        json!({"configsync.metahooks.io/credentials": "true"}),
        &daemon.url(),
    ));
    let mut target = h.emulator.objects[&key].clone();
    target["metadata"]["annotations"]["configsync.metahooks.io/secret"] = json!("creds");
    h.emulator.objects.insert(key.clone(), target);
    h.fetcher.expire().await;
    h.emulator.converge(20).await.unwrap();
    h.fetcher.idle().await;
    h.emulator.converge(20).await.unwrap();
    let target = &h.emulator.objects[&key];
    assert!(
        target
            .pointer("/metadata/annotations/configsync.metahooks.io~1error")
            .is_none(),
        "the named Secret was not seen at the next sync: {}",
        target["metadata"]["annotations"]
    );
    // An unlabelled Secret is not brought, and the message says what is missing.
    h.emulator
        .apply(secret("team-a", "plain", "t", json!({}), &daemon.url()));
    let mut target = h.emulator.objects[&key].clone();
    target["metadata"]["annotations"]["configsync.metahooks.io/secret"] = json!("plain");
    h.emulator.objects.insert(key.clone(), target);
    h.emulator.converge(20).await.unwrap();
    let error = h.emulator.objects[&key]
        .pointer("/metadata/annotations/configsync.metahooks.io~1error")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    assert!(
        error.contains("configsync.metahooks.io/credentials=true"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_service_is_kept_when_its_new_source_does_not_answer() {
    let mut h = harness().await;
    let key = h
        .emulator
        .apply(monitored("web", json!({"image": "app:1", "port": 8080})));
    settle(&mut h, "MonitoredService", "plain service", |e| {
        e.get("apps/v1", "Deployment", "team-a", "web").is_some()
    })
    .await;
    let closed = closed_port();
    let mut parent = h.emulator.objects[&key].clone();
    parent["spec"]["source"] =
        json!({"http": {"url": format!("http://127.0.0.1:{closed}/app.env")}});
    parent["metadata"]["generation"] = json!(2);
    h.emulator.objects.insert(key.clone(), parent);
    settle(&mut h, "MonitoredService", "failed first fetch", |e| {
        condition(ms(e, "web"), "Fetched").is_some_and(|(_, reason, _)| reason == "Unreachable")
    })
    .await;
    assert!(
        h.emulator
            .get("apps/v1", "Deployment", "team-a", "web")
            .is_some(),
        "the running Deployment was deleted while the first fetch failed"
    );
    assert!(h.emulator.get("v1", "Service", "team-a", "web").is_some());
    let (_, _, message) = condition(ms(&h.emulator, "web"), "ConfigValid").unwrap();
    assert!(message.contains("kept"), "{message}");
}

async fn keep_last_good_under(server_side_apply: bool) {
    let mut h = harness().await;
    h.emulator.server_side_apply = server_side_apply;
    let key = h.emulator.apply(
        json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "pets", "namespace": "team-a"},
        "spec": {"definition": "openapi: 3.0.3\ninfo: {title: P, version: '1'}\npaths: {}\n"}}),
    );
    h.emulator.converge(10).await.unwrap();
    let before: Vec<(String, Value)> = ["ConfigMap", "Service"]
        .iter()
        .map(|kind| {
            let object = h
                .emulator
                .get("v1", kind, "team-a", "pets")
                .unwrap()
                .clone();
            ((*kind).to_owned(), object)
        })
        .collect();
    assert!(
        h.emulator
            .get("apps/v1", "Deployment", "team-a", "pets")
            .is_some()
    );
    // A spec that cannot be read at all (definition is not text).
    let mut parent = h.emulator.objects[&key].clone();
    parent["spec"]["definition"] = json!(42);
    parent["metadata"]["generation"] = json!(2);
    h.emulator.objects.insert(key, parent);
    h.emulator
        .converge(10)
        .await
        .unwrap_or_else(|v| panic!("server_side_apply={server_side_apply}: {v}"));
    assert!(
        h.emulator
            .get("apps/v1", "Deployment", "team-a", "pets")
            .is_some()
    );
    for (kind, object) in before {
        let now = h.emulator.get("v1", &kind, "team-a", "pets").unwrap();
        assert_eq!(now["data"], object["data"], "{kind} changed");
        assert_eq!(now["spec"], object["spec"], "{kind} changed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_spec_keeps_the_children_under_client_side_apply() {
    keep_last_good_under(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_spec_keeps_the_children_under_server_side_apply() {
    keep_last_good_under(true).await;
}

/// Two servers, each with its own source cache, behind one Service, and a
/// MonitoredService `web` on a git daemon's `app.env` (V=1).
struct Replicas {
    repo: Repo,
    _daemon: GitDaemon,
    a: Harness,
    b: Harness,
    emulator: Emulator,
}

async fn two_replicas_on_one_source() -> Replicas {
    let repo = Repo::new();
    repo.commit(&[("app.env", "V=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let (a, b) = (harness().await, harness().await);
    let mut emulator =
        support::emulator::over_replicas(vec![a.base_url.clone(), b.base_url.clone()]);
    emulator.apply(monitored(
        "web",
        json!({"image": "app:1", "source": {"git": {"url": daemon.url(), "path": "app.env"}}}),
    ));
    Replicas {
        repo,
        _daemon: daemon,
        a,
        b,
        emulator,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_roll_forward_once_per_commit_and_never_back() {
    let Replicas {
        repo,
        _daemon,
        a,
        b,
        mut emulator,
    } = two_replicas_on_one_source().await;
    let hash = |e: &Emulator| {
        e.get("apps/v1", "Deployment", "team-a", "web")
            .and_then(|d| {
                d.pointer(
                    "/spec/template/metadata/annotations/monitoredservice.metahooks.io~1config-hash",
                )
            })
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut seen: Vec<String> = Vec::new();
    // Runs rounds alternating over both replicas, letting both caches' jobs land, and
    // records every distinct pod-template hash in order.
    async fn run(
        emulator: &mut Emulator,
        a: &Fetcher,
        b: &Fetcher,
        seen: &mut Vec<String>,
        rounds: usize,
        hash: &(dyn Fn(&Emulator) -> Option<String> + Sync),
    ) {
        for _ in 0..rounds {
            emulator.round().await.unwrap_or_else(|v| panic!("{v}"));
            a.idle().await;
            b.idle().await;
            if let Some(current) = hash(emulator)
                && seen.last() != Some(&current)
            {
                seen.push(current);
            }
        }
    }
    run(&mut emulator, &a.fetcher, &b.fetcher, &mut seen, 12, &hash).await;
    assert_eq!(seen.len(), 1, "first config rolled out once: {seen:?}");
    // A push; only replica A's interval has passed, so B still holds the old commit.
    repo.commit(&[("app.env", "V=2\n")]);
    a.fetcher.expire().await;
    run(&mut emulator, &a.fetcher, &b.fetcher, &mut seen, 12, &hash).await;
    assert_eq!(seen.len(), 2, "one roll per commit, never back: {seen:?}");
    // The next push reaches B first.
    repo.commit(&[("app.env", "V=3\n")]);
    b.fetcher.expire().await;
    run(&mut emulator, &a.fetcher, &b.fetcher, &mut seen, 12, &hash).await;
    assert_eq!(seen.len(), 3, "one roll per commit, never back: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_dated_ahead_does_not_freeze_the_source() {
    let Replicas {
        repo,
        _daemon,
        a,
        b,
        mut emulator,
    } = two_replicas_on_one_source().await;
    let config = |e: &Emulator| {
        e.get("v1", "ConfigMap", "team-a", "web-config")
            .and_then(|c| c.pointer("/data/V").cloned())
    };
    async fn rounds(emulator: &mut Emulator, a: &Fetcher, b: &Fetcher) {
        for _ in 0..8 {
            emulator.round().await.unwrap_or_else(|v| panic!("{v}"));
            a.idle().await;
            b.idle().await;
        }
    }
    let (fa, fb) = (&a.fetcher, &b.fetcher);
    rounds(&mut emulator, fa, fb).await;
    assert_eq!(config(&emulator), Some(json!("1")));
    // A commit dated a day ahead, then an ordinary one: each rolls in turn, on whichever
    // replica fetched it first.
    repo.commit_dated_ahead(&[("app.env", "V=2\n")], 86_400);
    a.fetcher.expire().await;
    rounds(&mut emulator, fa, fb).await;
    assert_eq!(config(&emulator), Some(json!("2")));
    repo.commit(&[("app.env", "V=3\n")]);
    b.fetcher.expire().await;
    rounds(&mut emulator, fa, fb).await;
    assert_eq!(
        config(&emulator),
        Some(json!("3")),
        "the commit after a future-dated one rolls"
    );
    a.fetcher.expire().await;
    b.fetcher.expire().await;
    rounds(&mut emulator, fa, fb).await;
    assert_eq!(config(&emulator), Some(json!("3")), "and stays");
    let parent = emulator
        .get(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "team-a",
            "web",
        )
        .unwrap();
    let fetched = parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Fetched"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(fetched["status"], "True", "{fetched}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_name_another_parent_holds_is_reported_in_the_losers_status() {
    let mut h = harness().await;
    // An APIMock `web` first: its ConfigMap, Deployment and Service are all `web`.
    h.emulator.apply(
        json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"definition": "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths: {}\n"}}),
    );
    settle(&mut h, "APIMock", "web", |e| {
        e.get("apps/v1", "Deployment", "team-a", "web").is_some()
    })
    .await;
    // Then a MonitoredService `web`, whose Deployment and Service need the same names.
    h.emulator
        .apply(monitored("web", json!({"image": "app:1"})));
    // Metacontroller refuses to adopt the APIMock's Deployment (the emulator says so as
    // it would); the MonitoredService's status is where its owner learns why.
    let refusal = h
        .emulator
        .converge(20)
        .await
        .expect_err("the create is refused");
    assert!(
        refusal.to_string().contains("OwnershipConflict"),
        "{refusal}"
    );
    let (status, _, message) = condition(ms(&h.emulator, "web"), "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains("Deployment web already exists and belongs to APIMock web"),
        "{message}"
    );
    // The winner is not disturbed: its Deployment is still its own.
    let deployment = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "web")
        .unwrap();
    assert_eq!(
        deployment["metadata"]["ownerReferences"][0]["kind"],
        "APIMock"
    );
}

#[test]
fn client_side_apply_merges_list_maps_and_keeps_server_defaults() {
    // What Metacontroller applied last time and wants now: one container, one port.
    let applied = json!({"spec": {"containers": [{"name": "web", "image": "web:1",
        "ports": [{"containerPort": 80}]}]}});
    // What the API server stored: the same, plus its defaults inside the list items.
    let live = json!({"spec": {"containers": [{"name": "web", "image": "web:1",
        "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log",
        "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}});
    assert_eq!(
        support::emulator::three_way(&live, &applied, &applied),
        live,
        "an unchanged answer changes nothing"
    );
    // A new image changes only the image; a container added is appended.
    let desired = json!({"spec": {"containers": [
        {"name": "web", "image": "web:2", "ports": [{"containerPort": 80}]},
        {"name": "sidecar", "image": "s:1"}]}});
    let merged = support::emulator::three_way(&live, &applied, &desired);
    assert_eq!(merged["spec"]["containers"][0]["image"], "web:2");
    assert_eq!(
        merged["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(
        merged["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );
    assert_eq!(merged["spec"]["containers"][1]["name"], "sidecar");
    // A field dropped from the answer is removed; one nobody applied stays.
    let dropped = json!({"spec": {"containers": [{"name": "web", "image": "web:1"}]}});
    let merged = support::emulator::three_way(&live, &applied, &dropped);
    assert!(merged["spec"]["containers"][0].get("ports").is_none());
    assert_eq!(
        merged["spec"]["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_reaches_a_steady_state() {
    use axum::http::StatusCode;
    use support::servers::{Files, serve_files};
    let repo = Repo::new();
    repo.commit(&[("production/app.conf", "a=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let files = Files::default();
    files.set("/config", StatusCode::OK, "RESPONSE_TEXT=hello\n");
    let port = serve_files(files).await;
    let mut h = harness().await;
    for path in std::fs::read_dir(support::examples_dir()).unwrap() {
        let path = path.unwrap().path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        for mut object in support::read_yaml_documents(&path) {
            object["metadata"]["namespace"] = json!("team-a");
            // Sources point at loopback servers instead of the internet.
            if object["kind"] == "MonitoredService" {
                object["spec"]["config_repo"] = json!(format!("http://127.0.0.1:{port}/config"));
            }
            if let Some(annotations) = object
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
                && annotations.contains_key("configsync.metahooks.io/git-url")
            {
                annotations.insert(
                    "configsync.metahooks.io/git-url".to_owned(),
                    json!(daemon.url()),
                );
            }
            h.emulator.apply(object);
        }
    }
    settle(&mut h, "MonitoredService", "examples", |e| {
        e.get(
            "v1",
            "ConfigMap",
            "team-a",
            "example-monitoredservice-config",
        )
        .is_some()
            && e.get("v1", "ConfigMap", "team-a", "web-configsync")
                .is_some()
    })
    .await;
    h.emulator.converge(20).await.unwrap();
    for round in 0..5 {
        let report = h.emulator.round().await.unwrap();
        assert!(
            !report.changed(),
            "round {round} after convergence still changed the cluster: {report:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_emulator_caches_customize_answers_like_metacontroller() {
    let mut h = harness().await;
    let key = h
        .emulator
        .apply(monitored("web", json!({"image": "app:1", "port": 8080})));
    let customize_calls = |e: &Emulator| e.calls.iter().filter(|c| c.hook == "customize").count();
    h.emulator.converge(10).await.unwrap();
    let first = customize_calls(&h.emulator);
    assert_eq!(first, 1);
    // More syncs, a label edit: the cached answer is reused.
    let mut parent = h.emulator.objects[&key].clone();
    parent["metadata"]["labels"] = json!({"team": "a"});
    h.emulator.objects.insert(key.clone(), parent);
    h.emulator.round().await.unwrap();
    assert_eq!(customize_calls(&h.emulator), first);
    // Twenty minutes later it has expired.
    h.emulator.advance(support::emulator::CUSTOMIZE_CACHE_TTL);
    h.emulator.round().await.unwrap();
    assert_eq!(customize_calls(&h.emulator), first + 1);
    // A new generation asks again at once.
    let mut parent = h.emulator.objects[&key].clone();
    parent["metadata"]["generation"] = json!(7);
    h.emulator.objects.insert(key, parent);
    h.emulator.round().await.unwrap();
    assert_eq!(customize_calls(&h.emulator), first + 2);
}
