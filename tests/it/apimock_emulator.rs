//! APIMock driven by the Metacontroller emulator over real HTTP: create → Running,
//! edit → pods roll → Running, break → Error with the old mock kept, fix → Running,
//! delete → finalized; no hot loop at any point.

use crate::support;

use metahooks::server::Clock;
use serde_json::{Value, json};
use support::emulator::Emulator;

const V1: &str = "openapi: 3.0.3\ninfo: {title: Pets, version: '1.0'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              example: [{name: rex}]\n";

fn mock(definition: &str) -> Value {
    json!({
        "apiVersion": "apirator.io/v1alpha1",
        "kind": "APIMock",
        "metadata": {"name": "pets", "namespace": "team-a"},
        "spec": {"definition": definition, "service": {"port": 8000}},
    })
}

fn template_hash(emulator: &Emulator) -> String {
    emulator
        .get("apps/v1", "Deployment", "team-a", "pets")
        .and_then(|d| {
            d.pointer("/spec/template/metadata/annotations/apimock.metahooks.io~1definition-sha256")
        })
        .and_then(Value::as_str)
        .expect("deployment with a definition hash")
        .to_owned()
}

fn parent(emulator: &Emulator) -> Value {
    emulator
        .get("apirator.io/v1alpha1", "APIMock", "team-a", "pets")
        .cloned()
        .expect("parent exists")
}

fn condition(parent: &Value, type_: &str) -> (String, String) {
    let found = parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {}", parent["status"]));
    (
        found["status"].as_str().unwrap().to_owned(),
        found["reason"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apimock_lifecycle_converges_without_hot_loops() {
    let server = support::start_standard(Clock::System).await;
    let mut emulator = support::emulator::for_repository(&format!("http://{}", server.hook_addr));

    let key = emulator.apply(mock(V1));
    emulator.converge(10).await.expect("create converges");
    let created = parent(&emulator);
    assert_eq!(
        created["status"]["phase"], "Running",
        "{}",
        created["status"]
    );
    assert_eq!(condition(&created, "Ready").0, "True");
    assert_eq!(created["status"]["url"], "http://pets.team-a.svc:8000");
    assert!(
        created["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
    );
    let first_hash = template_hash(&emulator);
    assert!(emulator.get("v1", "ConfigMap", "team-a", "pets").is_some());
    assert!(emulator.get("v1", "Service", "team-a", "pets").is_some());

    // Converged means stable: another round changes nothing.
    assert!(!emulator.round().await.expect("round").changed());

    let edited = V1.replace("rex", "fido");
    emulator.apply(mock(&edited));
    emulator.converge(10).await.expect("edit converges");
    let second_hash = template_hash(&emulator);
    assert_ne!(
        first_hash, second_hash,
        "an edited definition rolls the pods"
    );
    let deployment = emulator
        .get("apps/v1", "Deployment", "team-a", "pets")
        .unwrap();
    assert_eq!(
        deployment["metadata"]["generation"], 2,
        "the Deployment was updated in place"
    );
    assert_eq!(parent(&emulator)["status"]["phase"], "Running");

    emulator.apply(mock("openapi: 3.0.3\ninfo: {title: Broken}\npaths: {}\n"));
    emulator
        .converge(10)
        .await
        .expect("broken definition converges");
    let broken = parent(&emulator);
    assert_eq!(broken["status"]["phase"], "Error");
    let (validated, reason) = condition(&broken, "Validated");
    assert_eq!(
        (validated.as_str(), reason.as_str()),
        ("False", "InvalidDocument")
    );
    assert_eq!(
        template_hash(&emulator),
        second_hash,
        "the last good mock keeps running"
    );
    let config = emulator.get("v1", "ConfigMap", "team-a", "pets").unwrap();
    assert!(
        config["data"]["openapi.yaml"]
            .as_str()
            .unwrap()
            .contains("fido")
    );

    emulator.apply(mock(V1));
    emulator.converge(10).await.expect("fix converges");
    assert_eq!(parent(&emulator)["status"]["phase"], "Running");
    assert_eq!(template_hash(&emulator), first_hash);

    emulator.delete(&key);
    emulator.converge(10).await.expect("delete converges");
    assert!(
        emulator
            .get("apirator.io/v1alpha1", "APIMock", "team-a", "pets")
            .is_none(),
        "finalized and gone"
    );
    assert!(
        emulator
            .get("apps/v1", "Deployment", "team-a", "pets")
            .is_none()
    );
    assert!(emulator.calls.iter().any(|c| c.hook == "finalize"));
    // Every call answered; the sync hook enables etag, so an unchanged answer is a 304
    // that Metacontroller's client reads from its cache.
    assert!(
        emulator
            .calls
            .iter()
            .all(|c| c.status == 200 || (c.status == 304 && c.hook == "sync")),
        "{:?}",
        emulator.calls
    );
    assert!(emulator.calls.iter().any(|c| c.status == 304));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_from_the_start_creates_nothing_and_settles() {
    let server = support::start_standard(Clock::System).await;
    let mut emulator = support::emulator::for_repository(&format!("http://{}", server.hook_addr));
    emulator.apply(mock("swagger: '1.2'\n"));
    emulator.converge(10).await.expect("converges");
    let status = &parent(&emulator)["status"];
    assert_eq!(status["phase"], "Error");
    assert_eq!(
        condition(&parent(&emulator), "Validated").1,
        "UnsupportedVersion"
    );
    assert_eq!(condition(&parent(&emulator), "Ready").1, "NoMock");
    assert!(
        emulator
            .get("apps/v1", "Deployment", "team-a", "pets")
            .is_none()
    );
}

const ROOT: &str = "openapi: 3.0.3\ninfo: {title: Shop, version: '1'}\npaths:\n  /items:\n    get:\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema: {$ref: 'schemas/item.yaml'}\n";

fn shop_hash(emulator: &Emulator) -> Option<String> {
    emulator
        .get("apps/v1", "Deployment", "team-a", "shop")?
        .pointer("/spec/template/metadata/annotations/apimock.metahooks.io~1definition-sha256")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn shop(emulator: &Emulator) -> Value {
    emulator
        .get("apirator.io/v1alpha1", "APIMock", "team-a", "shop")
        .cloned()
        .unwrap_or_default()
}

async fn settle(h: &mut support::SourceHarness, what: &str, done: impl Fn(&Emulator) -> bool) {
    support::emulator::settle(&mut h.emulator, &h.fetcher, "APIMock", what, done).await;
}

/// A multi-file definition in a real git repository served by `git daemon` on loopback:
/// the root and the schema it refers to are bundled; a commit to that schema rolls the
/// mock, commits to files it does not reach (in its directory or elsewhere) do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_definition_from_git_rolls_only_when_a_reached_file_changes() {
    use support::servers::{GitDaemon, Repo};
    let repo = Repo::new();
    repo.commit(&[
        ("api/openapi.yaml", ROOT),
        (
            "api/schemas/item.yaml",
            "type: object\nproperties:\n  id: {type: integer}\n",
        ),
        ("api/schemas/unused.yaml", "type: string\n"),
        ("docs/readme.md", "first\n"),
    ]);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(json!({
        "apiVersion": "apirator.io/v1alpha1",
        "kind": "APIMock",
        "metadata": {"name": "shop", "namespace": "team-a"},
        "spec": {"definitionFrom": {"git": {"url": daemon.url(), "ref": "main", "path": "api"}}},
    }));
    settle(&mut h, "first fetch", |e| {
        shop_hash(e).is_some() && shop(e)["status"]["phase"] == "Running"
    })
    .await;
    let first = shop_hash(&h.emulator).unwrap();
    let config_map = h.emulator.get("v1", "ConfigMap", "team-a", "shop").unwrap();
    let keys: Vec<&String> = config_map["data"].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["openapi.yaml", "schemas__item.yaml"]);
    let status = shop(&h.emulator)["status"].clone();
    assert_eq!(status["source"], format!("git {} main:/api", daemon.url()));
    let revision = status["revision"].as_str().unwrap().to_owned();
    assert!(revision.starts_with("main@sha1:"), "{status}");
    let generation = h
        .emulator
        .get("apps/v1", "Deployment", "team-a", "shop")
        .unwrap()["metadata"]["generation"]
        .clone();

    // Commits that reach no bundled file: a new revision, the same mock.
    repo.commit(&[
        ("docs/readme.md", "second\n"),
        ("api/schemas/unused.yaml", "type: integer\n"),
    ]);
    h.fetcher.expire().await;
    let seen = revision.clone();
    settle(&mut h, "unrelated commit", move |e| {
        shop(e)["status"]["revision"] != seen.as_str()
    })
    .await;
    assert_eq!(shop_hash(&h.emulator).unwrap(), first);
    assert_eq!(
        h.emulator
            .get("apps/v1", "Deployment", "team-a", "shop")
            .unwrap()["metadata"]["generation"],
        generation
    );

    // A commit to the referenced schema rolls the mock.
    repo.commit(&[(
        "api/schemas/item.yaml",
        "type: object\nproperties:\n  id: {type: integer}\n  name: {type: string}\n",
    )]);
    h.fetcher.expire().await;
    let before = first.clone();
    settle(&mut h, "schema commit", move |e| {
        shop_hash(e).is_some_and(|hash| hash != before)
    })
    .await;
    let config_map = h.emulator.get("v1", "ConfigMap", "team-a", "shop").unwrap();
    assert!(
        config_map["data"]["schemas__item.yaml"]
            .as_str()
            .unwrap()
            .contains("name")
    );

    // A commit that breaks a reference keeps the last good mock and says why.
    let good = shop_hash(&h.emulator).unwrap();
    repo.commit(&[(
        "api/openapi.yaml",
        &ROOT.replace("schemas/item.yaml", "schemas/gone.yaml"),
    )]);
    h.fetcher.expire().await;
    settle(&mut h, "broken reference", |e| {
        shop(e)["status"]["phase"] == "Error"
    })
    .await;
    assert_eq!(shop_hash(&h.emulator).unwrap(), good);
    let validated = shop(&h.emulator)["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Validated")
        .cloned()
        .unwrap();
    assert_eq!(validated["reason"], "InvalidReference", "{validated}");
    assert!(
        validated["message"]
            .as_str()
            .unwrap()
            .contains("schemas/gone.yaml")
    );
}
