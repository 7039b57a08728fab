//! MonitoredService objects checked against `kubernetes-validate --strict`, and the
//! config-monitor sample CR against the generated CRD schema.

use crate::support;

use std::collections::BTreeMap;

use metahooks::controllers::common::config::{Config, ConfigContent, ConfigFormat};
use metahooks::controllers::monitoredservice::children::build;
use metahooks::controllers::monitoredservice::spec::parse_spec;
use metahooks::source::Revision;
use serde_json::{Value, json};

fn emitted() -> Vec<Value> {
    let mut objects = Vec::new();
    let golden = support::repo_dir().join("hooks-tests/monitoredservice");
    for case in std::fs::read_dir(golden).unwrap().filter_map(Result::ok) {
        let response = support::read_json(&case.path().join("response.json"));
        objects.extend(response["children"].as_array().cloned().unwrap_or_default());
    }
    let parent = json!({"spec": {"image": "app:1", "port": 8080, "replicas": 3, "mountPath": "/srv/conf",
        "env": [{"name": "MODE", "value": "x"}], "resources": {"requests": {"cpu": "10m"}}}});
    let spec = parse_spec(&parent).unwrap();
    let env = Config::new(ConfigContent {
        format: Some(ConfigFormat::Env),
        data: BTreeMap::from([("GREETING".into(), "hi".into())]),
        revision: Some(Revision::new("main@sha1:0123")),
        ..ConfigContent::default()
    });
    let files = Config::new(ConfigContent {
        format: Some(ConfigFormat::Files),
        data: BTreeMap::from([
            ("app.yaml".into(), "a: 1\n".into()),
            ("nested__db.ini".into(), "[db]\n".into()),
        ]),
        binary: BTreeMap::from([("logo.bin".into(), vec![0x89, 0xff, 0x00])]),
        paths: BTreeMap::from([("nested__db.ini".into(), "nested/db.ini".into())]),
        revision: Some(Revision::new("sha256:ab")),
        ..ConfigContent::default()
    });
    for config in [env, files] {
        objects.extend(build("svc", &spec, Some(&config)).unwrap());
    }
    for object in &mut objects {
        object["metadata"]["namespace"] = json!("team-a");
    }
    objects
}

#[test]
fn every_emitted_object_passes_kubernetes_validate_strict() {
    let objects = emitted();
    let kinds: std::collections::BTreeSet<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["ConfigMap", "Deployment", "Service"]
    );
    if let Some(problems) = support::oracles::kubernetes_validate(&objects, &["1.30", "1.33"]) {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

#[test]
fn config_monitor_sample_validates_against_the_crd() {
    let crd = support::read_yaml_documents(
        &support::repo_dir()
            .join("manifests/crds/config-monitor/monitoredservices.services.example.com.yaml"),
    )
    .remove(0);
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let validator = jsonschema::options().build(schema).unwrap();
    let sample = support::read_yaml_documents(
        &support::examples_dir().join("example-monitoredservice.cr.yaml"),
    )
    .remove(0);
    let errors: Vec<String> = validator
        .iter_errors(&sample)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    // config-monitor's earliest sample CR carried only `size`; without an image there is
    // nothing to run, so the CRD refuses it.
    let early = json!({
        "apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "example-monitoredservice"}, "spec": {"size": 3}
    });
    assert!(
        validator.iter_errors(&early).count() > 0,
        "a CR without an image is refused"
    );
    assert!(crd["spec"]["versions"][0]["subresources"]["status"].is_object());
    let bad = json!({"spec": {"image": "x", "intervalSeconds": 5}});
    assert!(
        validator.iter_errors(&bad).count() > 0,
        "intervalSeconds below 10 is refused"
    );
}
