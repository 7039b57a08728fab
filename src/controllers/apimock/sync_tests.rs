//! Every branch of an APIMock sync whose definition comes from `spec.definitionFrom`,
//! through the registry (request bytes in, answer bytes out) with scripted sources.

use std::time::Duration;

use serde_json::{Value, json};

use super::children::DEFINITION_HASH_ANNOTATION;
use crate::controllers::common::held_files::APIMOCK;
use crate::controllers::fixtures::{Harness, Request, child, children, condition};
use crate::protocol::Hook;
use crate::source::FetchError;

const URL: &str = "https://git.example.com/team/api.git";
const PETS: &str = "openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200': {description: ok}\n";
const PETS_V2: &str = "openapi: 3.0.3\ninfo: {title: Pets, version: '2'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200': {description: ok}\n    post:\n      responses:\n        '201': {description: made}\n";
const ROOT: &str = "openapi: 3.0.3\ninfo: {title: Shop, version: '1'}\npaths:\n  /items:\n    get:\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema: {$ref: 'schemas/item.yaml'}\n  /orders:\n    $ref: 'paths/orders.yaml'\n";
const ITEM: &str = "type: object\nproperties:\n  id: {type: integer}\n";
const ORDERS: &str = "get:\n  responses:\n    '200': {description: ok}\n";

fn request(spec: Value, observed: &[Value]) -> Request {
    Request::composite("apirator.io/v1alpha1", "APIMock", "shop", "team")
        .spec(spec)
        .observing(observed)
}

trait Sync {
    fn sync(&self, spec: Value, observed: &[Value]) -> Value;
}

impl Sync for Harness {
    fn sync(&self, spec: Value, observed: &[Value]) -> Value {
        self.call("apimock", Hook::Sync, &request(spec, observed))
    }
}

fn git(path: &str) -> Value {
    json!({"definitionFrom": {"git": {"url": URL, "ref": "main", "path": path}}})
}

fn template_hash(answer: &Value) -> &Value {
    &child(answer, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        [DEFINITION_HASH_ANNOTATION]
}

#[test]
fn a_first_fetch_in_progress_asks_again_soon_and_builds_nothing() {
    let harness = Harness::new();
    let answer = harness.sync(git("api.yaml"), &[]);
    assert_eq!(answer["children"], json!([]));
    assert_eq!(answer["status"]["phase"], "Pending");
    assert_eq!(condition(&answer, "Fetched")["reason"], "FetchPending");
    assert_eq!(condition(&answer, "Ready")["reason"], "NoMock");
    assert_eq!(answer["resyncAfterSeconds"], 2);
    assert_eq!(
        answer["status"]["source"],
        format!("git {URL} main:/api.yaml")
    );
    assert_eq!(
        harness.sources.lookups(),
        [(URL.to_owned(), Duration::from_secs(60))]
    );
}

#[test]
fn a_fetched_file_is_served_like_the_same_text_inline() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:aaa", &[("api.yaml", PETS)], true, Some(100));
    let fetched = harness.sync(git("api.yaml"), &[]);
    let inline = harness.sync(json!({"definition": PETS}), &[]);
    assert_eq!(condition(&fetched, "Fetched")["status"], "True");
    assert_eq!(fetched["status"]["revision"], "main@sha1:aaa");
    assert_eq!(
        fetched["status"]["definition"],
        inline["status"]["definition"]
    );
    assert_eq!(child(&fetched, "Deployment"), child(&inline, "Deployment"));
    let config_map = child(&fetched, "ConfigMap");
    assert_eq!(config_map["data"], child(&inline, "ConfigMap")["data"]);
    assert_eq!(
        config_map["metadata"]["annotations"][APIMOCK.revision],
        "main@sha1:aaa"
    );
    assert_eq!(fetched["resyncAfterSeconds"], 60);
    assert!(inline.get("resyncAfterSeconds").is_none());
}

#[test]
fn a_directory_is_bundled_and_mounted_file_by_file() {
    let harness = Harness::new();
    let files = [
        ("openapi.yaml", ROOT),
        ("schemas/item.yaml", ITEM),
        ("paths/orders.yaml", ORDERS),
        ("README.md", "# not part of the API"),
    ];
    harness
        .sources
        .serve(URL, "main@sha1:bbb", &files, false, Some(100));
    let answer = harness.sync(git("api"), &[]);
    assert_eq!(
        condition(&answer, "Validated")["status"],
        "True",
        "{}",
        answer["status"]
    );
    assert_eq!(answer["status"]["definition"]["operations"], 2);
    let config_map = child(&answer, "ConfigMap");
    let keys: Vec<&String> = config_map["data"]
        .as_object()
        .map(|data| data.keys().collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        ["openapi.yaml", "paths__orders.yaml", "schemas__item.yaml"]
    );
    assert_eq!(
        config_map["metadata"]["annotations"][APIMOCK.root],
        "openapi.yaml"
    );
    let pod = &child(&answer, "Deployment")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"][0]["configMap"]["items"],
        json!([
            {"key": "openapi.yaml", "path": "openapi.yaml"},
            {"key": "paths__orders.yaml", "path": "paths/orders.yaml"},
            {"key": "schemas__item.yaml", "path": "schemas/item.yaml"},
        ])
    );
    let args = pod["containers"][0]["args"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(args.last(), Some(&json!("/spec/openapi.yaml")));

    // Observed as built: the held copy is read back whole when the source fails.
    let observed = children(&answer);
    harness.sources.fail(
        URL,
        FetchError::Unreachable {
            url: URL.to_owned(),
            detail: "connection refused".to_owned(),
        },
    );
    let failing = harness.sync(git("api"), &observed);
    assert_eq!(condition(&failing, "Fetched")["reason"], "Unreachable");
    assert_eq!(template_hash(&failing), template_hash(&answer));
    assert_eq!(child(&failing, "ConfigMap"), child(&answer, "ConfigMap"));
}

#[test]
fn only_a_change_to_a_reached_file_rolls_the_mock() {
    let harness = Harness::new();
    let files = |item: &'static str, readme: &'static str| {
        [
            ("openapi.yaml", ROOT),
            ("schemas/item.yaml", item),
            ("paths/orders.yaml", ORDERS),
            ("README.md", readme),
        ]
    };
    harness
        .sources
        .serve(URL, "main@sha1:c1", &files(ITEM, "one"), false, Some(100));
    let first = harness.sync(git("api"), &[]);
    harness
        .sources
        .serve(URL, "main@sha1:c2", &files(ITEM, "two"), false, Some(200));
    let elsewhere = harness.sync(git("api"), &[]);
    assert_eq!(template_hash(&elsewhere), template_hash(&first));
    assert_eq!(elsewhere["status"]["revision"], "main@sha1:c2");
    let edited = "type: object\nproperties:\n  id: {type: integer}\n  name: {type: string}\n";
    harness
        .sources
        .serve(URL, "main@sha1:c3", &files(edited, "two"), false, Some(300));
    let rolled = harness.sync(git("api"), &[]);
    assert_ne!(template_hash(&rolled), template_hash(&first));
}

#[test]
fn an_invalid_new_revision_keeps_the_last_good_mock() {
    let harness = Harness::new();
    harness.sources.serve(
        URL,
        "main@sha1:good",
        &[("api.yaml", PETS)],
        true,
        Some(100),
    );
    let good = harness.sync(git("api.yaml"), &[]);
    let observed = children(&good);
    harness.sources.serve(
        URL,
        "main@sha1:bad",
        &[("api.yaml", "openapi: 9.9.9\n")],
        true,
        Some(200),
    );
    let answer = harness.sync(git("api.yaml"), &observed);
    assert_eq!(
        condition(&answer, "Validated")["reason"],
        "UnsupportedVersion"
    );
    assert_eq!(condition(&answer, "Fetched")["status"], "True");
    assert_eq!(answer["status"]["phase"], "Error");
    assert_eq!(template_hash(&answer), template_hash(&good));
    assert_eq!(answer["status"]["revision"], "main@sha1:good");
    assert!(
        condition(&answer, "Ready")["message"]
            .as_str()
            .is_some_and(|m| m.contains("at its source"))
    );
}

#[test]
fn a_replica_with_an_older_copy_keeps_the_newer_mock_and_refreshes() {
    let harness = Harness::new();
    harness.sources.serve(
        URL,
        "main@sha1:new",
        &[("api.yaml", PETS_V2)],
        true,
        Some(200),
    );
    let newer = harness.sync(git("api.yaml"), &[]);
    let observed = children(&newer);

    let behind = Harness::new();
    // The older copy carries the later commit date: dates decide nothing.
    behind
        .sources
        .serve(URL, "main@sha1:old", &[("api.yaml", PETS)], true, Some(300));
    behind.sources.ran_ahead("main@sha1:new");
    let answer = behind.sync(git("api.yaml"), &observed);
    assert_eq!(template_hash(&answer), template_hash(&newer));
    assert_eq!(answer["status"]["revision"], "main@sha1:new");
    assert_eq!(
        condition(&answer, "Fetched")["message"],
        "running main@sha1:new, fetched more recently than this server's copy; refreshing"
    );
    assert_eq!(answer["resyncAfterSeconds"], 2);
    assert!(
        behind
            .sources
            .lookups()
            .iter()
            .any(|(_, interval)| interval.is_zero()),
        "the replica that is behind refreshes at once"
    );
    // Another ref (a pinned tag) is served whatever its age.
    behind
        .sources
        .serve(URL, "v1@sha1:old", &[("api.yaml", PETS)], true, Some(100));
    let pinned = behind.sync(
        json!({"definitionFrom": {"git": {"url": URL, "ref": "v1", "path": "api.yaml"}}}),
        &observed,
    );
    assert_eq!(pinned["status"]["revision"], "v1@sha1:old");
    assert_ne!(template_hash(&pinned), template_hash(&newer));
}

#[test]
fn an_answer_follows_its_source_from_pending_to_fetched() {
    let harness = Harness::new();
    let first = harness.sync(git("api.yaml"), &[]);
    assert_eq!(condition(&first, "Fetched")["reason"], "FetchPending");
    harness
        .sources
        .serve(URL, "main@sha1:aaa", &[("api.yaml", PETS)], true, Some(100));
    let second = harness.sync(git("api.yaml"), &[]);
    assert_eq!(condition(&second, "Fetched")["reason"], "Fetched");
}

#[test]
fn a_config_map_key_is_read_from_the_parents_namespace_only() {
    let harness = Harness::new();
    let spec = json!({"definitionFrom": {"configMapKeyRef": {"name": "docs", "key": "api.yaml"}}});
    let config_map = |namespace: &str, data: Value| {
        json!({"ConfigMap.v1": {format!("{namespace}/docs"): {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "docs", "namespace": namespace}, "data": data}}})
    };
    let good = harness.call(
        "apimock",
        Hook::Sync,
        &request(spec.clone(), &[]).related(config_map("team", json!({"api.yaml": PETS}))),
    );
    assert_eq!(condition(&good, "Fetched")["status"], "True");
    assert_eq!(child(&good, "ConfigMap")["data"]["openapi.yaml"], PETS);
    assert_eq!(good["status"]["source"], "ConfigMap docs, key api.yaml");

    let elsewhere = harness.call(
        "apimock",
        Hook::Sync,
        &request(spec.clone(), &[]).related(config_map("other", json!({"api.yaml": PETS}))),
    );
    assert_eq!(
        condition(&elsewhere, "Fetched")["reason"],
        "ConfigMapNotFound"
    );
    assert_eq!(elsewhere["children"], json!([]));

    let observed = children(&good);
    let missing_key = harness.call(
        "apimock",
        Hook::Sync,
        &request(spec, &observed).related(config_map("team", json!({"other.yaml": PETS}))),
    );
    assert_eq!(condition(&missing_key, "Fetched")["reason"], "KeyNotFound");
    assert_eq!(template_hash(&missing_key), template_hash(&good));
    assert_eq!(condition(&missing_key, "Validated")["status"], "True");
}

#[test]
fn the_spec_names_exactly_one_definition() {
    let harness = Harness::new();
    let cases = [
        (
            json!({"definition": PETS, "definitionFrom": {"http": {"url": URL}}}),
            "AmbiguousDefinition",
        ),
        (json!({"definitionFrom": {}}), "AmbiguousSource"),
        (
            json!({"definitionFrom": {"http": {"url": URL}, "configMapKeyRef": {"name": "a", "key": "b"}}}),
            "AmbiguousSource",
        ),
        (json!({}), "InvalidSpec"),
        (
            json!({"definitionFrom": {"configMapKeyRef": {"name": "shop", "key": "openapi.yaml"}}}),
            "InvalidSpec",
        ),
        (
            json!({"definitionFrom": {"git": {"url": URL, "secretRef": {"name": "creds"}}}}),
            "SecretNotFound",
        ),
    ];
    for (spec, reason) in cases {
        let answer = harness.sync(spec.clone(), &[]);
        assert_eq!(
            condition(&answer, "Validated")["reason"],
            reason,
            "{spec}: {}",
            answer["status"]
        );
        assert_eq!(answer["children"], json!([]), "{spec}");
    }
    assert!(harness.sources.lookups().is_empty());
}

#[test]
fn customize_asks_for_the_config_map_and_the_secret_by_name_in_the_namespace() {
    let harness = Harness::new();
    let customize = |spec: Value| harness.call("apimock", Hook::Customize, &request(spec, &[]));
    // Every answer asks for the objects holding its children's names (see NameTaken).
    let children = json!([
        {"apiVersion": "v1", "resource": "configmaps", "names": ["shop"], "namespace": "team"},
        {"apiVersion": "apps/v1", "resource": "deployments", "names": ["shop"], "namespace": "team"},
        {"apiVersion": "v1", "resource": "services", "names": ["shop"], "namespace": "team"}
    ]);
    let with = |rule: Value| {
        let mut rules = children.as_array().cloned().unwrap_or_default();
        rules.push(rule);
        Value::Array(rules)
    };
    assert_eq!(
        customize(json!({"definition": PETS}))["relatedResources"],
        children
    );
    assert_eq!(
        customize(json!({"definitionFrom": {"configMapKeyRef": {"name": "docs", "key": "k"}}}))["relatedResources"],
        with(
            json!({"apiVersion": "v1", "resource": "configmaps", "names": ["docs"], "namespace": "team"})
        )
    );
    assert_eq!(
        customize(
            json!({"definitionFrom": {"http": {"url": URL, "secretRef": {"name": "creds"}}}})
        )["relatedResources"],
        with(
            json!({"apiVersion": "v1", "resource": "secrets", "names": ["creds"], "namespace": "team"})
        )
    );
}

#[test]
fn a_name_another_parent_holds_is_reported_as_taken() {
    let harness = Harness::new();
    // A MonitoredService `shop` already has a Service called `shop` in this namespace.
    let theirs = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shop", "namespace": "team", "uid": "s-1",
            "ownerReferences": [{"apiVersion": "services.example.com/v1alpha1",
                "kind": "MonitoredService", "name": "shop", "uid": "ms-1", "controller": true}]}});
    let call = request(json!({"definition": PETS}), &[])
        .related(json!({"Service.v1": {"team/shop": theirs}}));
    let answer = harness.call("apimock", Hook::Sync, &call);
    let ready = condition(&answer, "Ready");
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "NameTaken");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("Service shop already exists and belongs to MonitoredService shop"),
        "{message}"
    );
    // Once the name is free the same call is ready to roll.
    let call = request(json!({"definition": PETS}), &[]);
    let answer = harness.call("apimock", Hook::Sync, &call);
    assert_ne!(condition(&answer, "Ready")["reason"], "NameTaken");
}

#[test]
fn a_certificate_secret_is_asked_for_and_checked_key_by_key() {
    let harness = Harness::new();
    let spec = json!({"definitionFrom": {"git": {"url": URL, "secretRef": {"name": "creds"},
        "certSecretRef": {"name": "corp-ca"}}}});
    let rules = harness.call("apimock", Hook::Customize, &request(spec.clone(), &[]));
    let names: Vec<&Value> = rules["relatedResources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rule| rule["names"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(
        names[names.len() - 2..],
        [&json!("creds"), &json!("corp-ca")],
        "{rules}"
    );

    let secret = |name: &str, data: Value| {
        (
            format!("team/{name}"),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": name, "namespace": "team",
                    "annotations": {"sources.metahooks.io/allowed-urls": "https://git.example.com/"}},
                "stringData": data}),
        )
    };
    let related = |secrets: Vec<(String, Value)>| json!({"Secret.v1": secrets.into_iter().collect::<serde_json::Map<String, Value>>()});
    let creds = secret("creds", json!({"token": "t"}));
    let sync = |secrets| {
        harness.call(
            "apimock",
            Hook::Sync,
            &request(spec.clone(), &[]).related(related(secrets)),
        )
    };
    let missing = sync(vec![creds.clone()]);
    let fetched = condition(&missing, "Validated");
    assert_eq!(fetched["reason"], "SecretNotFound", "{fetched}");
    assert!(
        fetched["message"]
            .as_str()
            .unwrap_or_default()
            .contains("corp-ca"),
        "{fetched}"
    );

    let junk = sync(vec![
        creds.clone(),
        secret("corp-ca", json!({"ca.crt": "not a certificate"})),
    ]);
    let fetched = condition(&junk, "Validated");
    assert_eq!(fetched["reason"], "SecretInvalid", "{fetched}");
    assert!(
        fetched["message"]
            .as_str()
            .unwrap_or_default()
            .contains("ca.crt"),
        "{fetched}"
    );

    let lonely_cert = sync(vec![creds, secret("corp-ca", json!({"tls.crt": "x"}))]);
    let fetched = condition(&lonely_cert, "Validated");
    assert_eq!(fetched["reason"], "SecretInvalid", "{fetched}");
    assert!(
        fetched["message"]
            .as_str()
            .unwrap_or_default()
            .contains("tls.key"),
        "{fetched}"
    );
}

/// A restarted server has no copy of the source yet: what runs (the observed ConfigMap's
/// revision) is reported as fetched, as MonitoredService does, not "pending".
#[test]
fn a_restarted_server_reports_what_runs_until_it_has_its_own_copy() {
    let before = Harness::new();
    before
        .sources
        .serve(URL, "main@sha1:aaa", &[("api.yaml", PETS)], true, Some(100));
    let first = before.sync(git("api.yaml"), &[]);
    let observed = children(&first);
    let restarted = Harness::new();
    let answer = restarted.sync(git("api.yaml"), &observed);
    let fetched = condition(&answer, "Fetched");
    assert_eq!(fetched["status"], "True", "{fetched}");
    assert_eq!(fetched["reason"], "Fetched");
    assert!(
        fetched["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("running main@sha1:aaa")),
        "{fetched}"
    );
    assert_eq!(child(&answer, "Deployment"), child(&first, "Deployment"));
    assert_eq!(
        answer["resyncAfterSeconds"], 2,
        "asks again once its copy is read"
    );
}

#[test]
fn a_title_and_version_as_long_as_the_definition_allows_are_cut_in_status() {
    let title = "T".repeat(400 * 1024);
    let version = "9".repeat(400 * 1024);
    let definition =
        format!("openapi: 3.0.3\ninfo: {{title: '{title}', version: '{version}'}}\npaths: {{}}\n");
    let answer = Harness::new().sync(json!({ "definition": definition }), &[]);
    assert_eq!(
        condition(&answer, "Validated")["status"],
        "True",
        "{answer}"
    );
    let shown = &answer["status"]["definition"];
    assert_eq!(
        shown["title"],
        format!(
            "{}… (cut: {} characters in all)",
            &title[..200],
            title.len()
        )
    );
    assert!(
        shown["version"]
            .as_str()
            .is_some_and(|v| v.len() < 200 && v.ends_with("characters in all)")),
        "{shown}"
    );
    let status_bytes = answer["status"].to_string().len();
    assert!(status_bytes < 8 * 1024, "{status_bytes} bytes of status");
}
