//! A battery of hostile and borderline CRs rendered by our controllers: every object
//! they emit passes the API server's rules (`metahooks::apiserver::refusals`, with the
//! last-applied annotation client-side apply adds), every pod passes Pod Security
//! "restricted", and what cannot be emitted is refused by name in the status instead.

use std::sync::Arc;

use metahooks::apiserver::pod_security::{Level, pod_spec_of, violations};
use metahooks::controllers::Registry;
use metahooks::protocol::Hook;
use metahooks::source::fake::FakeSources;
use serde_json::{Value, json};

use crate::support;

const DEFINITION: &str = "openapi: 3.0.3\ninfo: {title: P, version: '1'}\npaths:\n  /p:\n    get:\n      responses:\n        '200': {description: ok}\n";
const URL: &str = "https://git.example.com/team/config.git";

fn call(registry: &Registry, controller: &str, request: &Value) -> Value {
    let body = serde_json::to_vec(request).unwrap();
    let outcome = registry.call(
        controller,
        Hook::Sync,
        &body,
        &registry.context(support::golden_now()),
    );
    serde_json::from_slice(&outcome.result.expect("the sync answers")).unwrap()
}

fn composite(api_version: &str, kind: &str, name: &str, spec: Value) -> Value {
    json!({"controller": {}, "children": {}, "related": {}, "finalizing": false,
           "parent": {"apiVersion": api_version, "kind": kind,
                      "metadata": {"name": name, "namespace": "team-a", "uid": "u", "generation": 1},
                      "spec": spec}})
}

fn decorator(name: &str, annotations: Value) -> Value {
    json!({"controller": {}, "attachments": {}, "related": {}, "finalizing": false,
           "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                      "metadata": {"name": name, "namespace": "team-a", "uid": "u", "annotations": annotations},
                      "spec": {}}})
}

/// What the API server and Pod Security say about every emitted object.
fn refusals(answer: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for field in ["children", "attachments"] {
        for child in answer[field].as_array().into_iter().flatten() {
            let mut probe = child.clone();
            probe["metadata"]["namespace"] = json!("team-a");
            probe["metadata"]["annotations"]["metacontroller.k8s.io/last-applied-configuration"] =
                json!(child.to_string());
            found.extend(metahooks::apiserver::refusals(&probe));
            if let Some(spec) = pod_spec_of(child) {
                found.extend(violations(spec, None, Level::Restricted));
            }
        }
    }
    found
}

fn condition<'a>(answer: &'a Value, type_: &str) -> &'a Value {
    answer["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[test]
fn hostile_apimocks_emit_only_what_the_api_server_accepts() {
    let registry = Registry::standard(Default::default());
    let long = "m".repeat(63);
    let huge = "v".repeat(200 * 1024);
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        (
            &long,
            json!({"definition": DEFINITION, "docs": {"enabled": true}, "replicas": 3}),
            None,
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "ingress": {"hostname": "*.example.com", "path": "/"}}),
            Some("spec.ingress.hostname"),
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "ingress": {"hostname": "pets.example.com", "path": "/\n"}}),
            Some("spec.ingress.path"),
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "ingress": {"hostname": "pets.example.com", "path": "/", "className": "Bad Class"}}),
            Some("spec.ingress.className"),
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "service": {"annotations": {"bad key!": "x"}}}),
            Some("spec.service.annotations"),
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "service": {"annotations": {"example.com/big": huge}}}),
            Some("spec.service.annotations"),
        ),
        (
            "pets",
            json!({"definition": DEFINITION, "ingress": {"hostname": "pets.example.com", "path": "/",
                        "tls": {"secretName": "Not_A_Name"}}}),
            Some("spec.ingress.tls.secretName"),
        ),
    ];
    for (name, spec, refused_field) in cases {
        let answer = call(
            &registry,
            "apimock",
            &composite("apirator.io/v1alpha1", "APIMock", name, spec),
        );
        assert_eq!(refusals(&answer), Vec::<String>::new(), "{name}: {answer}");
        let validated = condition(&answer, "Validated");
        let kinds: Vec<&str> = answer["children"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["kind"].as_str())
            .collect();
        match refused_field {
            None => assert_eq!(validated["status"], "True", "{validated}"),
            // An Ingress that cannot be made is left out; the rest of the mock runs.
            Some(field) if field.starts_with("spec.ingress.") => {
                let exposed = condition(&answer, "Exposed");
                assert_eq!(exposed["status"], "False", "{field}: {exposed}");
                assert!(
                    exposed["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(field)),
                    "{exposed}"
                );
                assert_eq!(validated["status"], "True", "{validated}");
                assert_eq!(kinds, ["ConfigMap", "Deployment", "Service"], "{field}");
            }
            Some(field) => {
                assert_eq!(validated["status"], "False", "{field}: {validated}");
                assert!(
                    validated["message"]
                        .as_str()
                        .is_some_and(|m| m.contains(field)),
                    "{validated}"
                );
                assert_eq!(answer["children"], json!([]), "nothing emitted for {field}");
            }
        }
    }
}

#[test]
fn hostile_monitoredservices_emit_only_what_the_api_server_accepts() {
    let registry = Registry::standard(Default::default());
    let long = "s".repeat(63);
    for (name, spec, refused) in [
        (
            long.as_str(),
            json!({"image": "app:1", "port": 8080, "replicas": 2}),
            false,
        ),
        (
            "web",
            json!({"image": "app:1", "env": [{"name": "A", "value": "line\u{7}bell"}]}),
            true,
        ),
        (
            "web",
            json!({"image": "app:1", "securityContext": {"runAsUser": 1234}}),
            false,
        ),
    ] {
        let answer = call(
            &registry,
            "monitoredservice",
            &composite(
                "services.example.com/v1alpha1",
                "MonitoredService",
                name,
                spec,
            ),
        );
        assert_eq!(refusals(&answer), Vec::<String>::new(), "{name}: {answer}");
        assert_eq!(
            condition(&answer, "ConfigValid")["status"] == "False",
            refused,
            "{answer}"
        );
    }
}

#[test]
fn configsync_targets_with_long_names_and_awkward_paths() {
    let sources = Arc::new(FakeSources::default());
    let registry = Registry::standard(Default::default()).with_sources(sources.clone());
    let annotations =
        json!({"configsync.metahooks.io/git-url": URL, "configsync.metahooks.io/path": "conf"});
    // 250 + "__" + "x.conf": 258 characters as a key.
    let deep = format!("{}/x.conf", "d".repeat(250));
    for (files, attached) in [
        (vec![("a.conf", "1"), ("nested/b.conf", "2")], true),
        (vec![("a/b.conf", "1"), ("a__b.conf", "2")], false),
        (vec![(deep.as_str(), "1")], false),
    ] {
        sources.serve(URL, "main@sha1:a", &files, false, Some(1));
        for length in [1, 63, 64, 200, 253] {
            let answer = call(
                &registry,
                "configsync",
                &decorator(&"t".repeat(length), annotations.clone()),
            );
            assert_eq!(
                refusals(&answer),
                Vec::<String>::new(),
                "{length}: {answer}"
            );
            let error = &answer["annotations"]["configsync.metahooks.io/error"];
            assert_eq!(
                !answer["attachments"].as_array().unwrap().is_empty(),
                attached,
                "{files:?}: {answer}"
            );
            assert_eq!(error.is_null(), attached, "{files:?}: {error}");
        }
    }
}

#[test]
fn a_definition_too_large_for_client_side_apply_says_so() {
    let registry = Registry::standard(Default::default());
    let mut big = String::from("openapi: 3.0.3\ninfo: {title: Big, version: '1'}\npaths:\n");
    for i in 0..2200 {
        big.push_str(&format!(
            "  /items{i}:\n    get:\n      description: '{}'\n      responses:\n        '200': {{description: ok}}\n",
            "x".repeat(80)
        ));
    }
    assert!(big.len() > 250_000, "{}", big.len());
    let answer = call(
        &registry,
        "apimock",
        &composite(
            "apirator.io/v1alpha1",
            "APIMock",
            "big",
            json!({"definition": big}),
        ),
    );
    assert_eq!(
        condition(&answer, "Validated")["status"],
        "True",
        "{}",
        answer["status"]
    );
    let fits = condition(&answer, "FitsClientSideApply");
    assert_eq!(fits["status"], "False", "{}", answer["status"]);
    assert_eq!(fits["reason"], "LastAppliedTooLarge");
    assert!(
        fits["message"]
            .as_str()
            .is_some_and(|m| m.contains("server-side apply")),
        "{fits}"
    );
    // The refusal it warns about is the API server's own.
    assert!(!refusals(&answer).is_empty());
    // A definition that fits gets no such condition.
    let small = call(
        &registry,
        "apimock",
        &composite(
            "apirator.io/v1alpha1",
            "APIMock",
            "small",
            json!({"definition": DEFINITION}),
        ),
    );
    assert_eq!(condition(&small, "FitsClientSideApply"), &Value::Null);
}
