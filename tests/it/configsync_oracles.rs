//! Every attachment configsync emits passes `kubernetes-validate --strict`, and the
//! example workload opted into configsync is a valid Deployment.

use crate::support;

use serde_json::json;

#[test]
fn attachments_and_example_pass_kubernetes_validate_strict() {
    let mut objects = Vec::new();
    for case in std::fs::read_dir(support::repo_dir().join("hooks-tests/configsync"))
        .unwrap()
        .filter_map(Result::ok)
    {
        let response = support::read_json(&case.path().join("response.json"));
        objects.extend(
            response["attachments"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    assert!(
        objects.iter().any(|o| o["binaryData"].is_object()),
        "the cases include a ConfigMap with binaryData"
    );
    for object in &mut objects {
        object["metadata"]["namespace"] = json!("team-a");
    }
    objects.extend(support::read_yaml_documents(
        &support::repo_dir().join("manifests/examples/configsync-deployment.yaml"),
    ));
    if let Some(problems) = support::oracles::kubernetes_validate(&objects, &["1.30", "1.33"]) {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
