//! `metahooks emulate` in a CI job: exit codes that tell findings (1) from a broken setup
//! (2), findings that point at the object, field, file and line, JUnit read by
//! `junitparser` and SARIF checked by Microsoft's SARIF validator (neither ours), and
//! several named stories in one run.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::emulate_cmd::{emulate, emulate_async, report, stdout};
use crate::support;

/// A hook whose answer depends on the parent's name: `flaky` puts a call counter in its
/// child, the others are well behaved.
async fn sync(State(calls): State<Arc<AtomicU64>>, Json(request): Json<Value>) -> Json<Value> {
    let call = calls.fetch_add(1, Ordering::SeqCst);
    let parent = &request["parent"];
    let name = parent["metadata"]["name"].as_str().unwrap_or_default();
    let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": format!("{name}-cm")}, "data": {"a": "b"}});
    let status = json!({"ok": true});
    if name == "flaky" {
        child["data"]["nonce"] = json!(call.to_string());
    }
    if request["finalizing"] == json!(true) {
        return Json(json!({"status": {}, "children": [], "finalized": true}));
    }
    Json(json!({"status": status, "children": [child]}))
}

async fn hook_server() -> String {
    let app = Router::new()
        .route("/things/sync", post(sync))
        .with_state(Arc::new(AtomicU64::new(0)));
    let port = crate::support::servers::serve_app(app, None).await;
    let address = format!("127.0.0.1:{port}");
    format!("http://{address}")
}

/// The registration and three parents, each parent's document starting on a known line.
const THINGS: &str = "apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: things}
spec:
  generateSelector: true
  parentResource: {apiVersion: example.com/v1, resource: things}
  childResources:
    - {apiVersion: v1, resource: configmaps, updateStrategy: {method: InPlace}}
  hooks:
    sync: {version: v2, webhook: {url: \"http://hooks.example/things/sync\"}}
---
# line 12 is this comment; the object starts on line 13
apiVersion: example.com/v1
kind: Thing
metadata: {name: steady, namespace: team}
spec: {}
---
apiVersion: example.com/v1
kind: Thing
metadata: {name: flaky, namespace: team}
spec: {}
--- {\"apiVersion\": \"example.com/v1\", \"kind\": \"Thing\", \"metadata\": {\"name\": \"quiet\", \"namespace\": \"team\"}, \"spec\": {}}
";

fn write_inputs(dir: &Path) -> String {
    let path = dir.join("things.yaml");
    std::fs::write(&path, THINGS).unwrap();
    path.to_str().unwrap().to_owned()
}

async fn run(output: &str, extra: &[&str]) -> (std::process::Output, String) {
    let base = hook_server().await;
    let dir = tempfile::tempdir().unwrap().keep();
    let file = write_inputs(&dir);
    let mut args: Vec<String> = [
        "-f",
        &file,
        "--hooks-url",
        &base,
        "--max-rounds",
        "6",
        "--recheck-after-ms",
        "0",
        "-o",
        output,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    (emulate_async(args).await, file)
}

fn finding<'a>(report: &'a Value, rule: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == rule)
        .unwrap_or_else(|| panic!("no {rule}: {:#}", report["findings"]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn findings_name_the_object_field_file_and_line() {
    let (output, file) = run("json", &[]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report = report(&output);
    let unstable = &finding(&report, "UnstableAnswer")["about"];
    assert_eq!(
        unstable,
        &json!({"controller": "things", "apiVersion": "example.com/v1", "kind": "Thing",
                "namespace": "team", "name": "flaky", "field": "/children/0/data/nonce",
                "origin": {"file": file, "line": 18}})
    );
    // The loop names what kept changing: the child's field, found in the file at its
    // parent's line.
    let churning = &finding(&report, "HotLoop");
    assert_eq!(
        churning["about"],
        json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team",
               "name": "flaky-cm", "field": "/data/nonce",
               "origin": {"file": file, "line": 18}})
    );
    assert!(
        churning["message"]
            .as_str()
            .unwrap()
            .ends_with("still changed ConfigMap team/flaky-cm at /data/nonce"),
        "{churning}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn junit_reports_a_case_per_parent_as_junitparser_reads_it() {
    let (output, file) = run("junit", &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let Some(python) = support::oracles::tool("MHTEST_PYTHON") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let xml = dir.path().join("report.xml");
    std::fs::write(&xml, &output.stdout).unwrap();
    let script = r#"
import json, sys
from junitparser import JUnitXml, Failure
xml = JUnitXml.fromfile(sys.argv[1])
cases = []
for suite in xml:
    for case in suite:
        failures = [r for r in case.result if isinstance(r, Failure)]
        cases.append({"suite": suite.name, "class": case.classname, "name": case.name,
                      "file": case._elem.get("file"), "line": case._elem.get("line"),
                      "failures": sorted(f.type for f in failures)})
print(json.dumps({"tests": xml.tests, "failures": xml.failures, "cases": cases}))
"#;
    let read = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&xml)
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "junitparser could not read it: {}\n{}",
        String::from_utf8_lossy(&read.stderr),
        stdout(&output)
    );
    let seen: Value = serde_json::from_slice(&read.stdout).unwrap();
    // Three parents, and the child the loop was about.
    assert_eq!(seen["tests"], 4, "{seen:#}");
    assert_eq!(seen["failures"], 2, "{seen:#}");
    let case = |name: &str| {
        seen["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no case {name}: {seen:#}"))
    };
    assert_eq!(
        case("Thing team/steady"),
        json!({"suite": "emulate", "class": "things", "name": "Thing team/steady",
               "file": file, "line": "13", "failures": []})
    );
    assert_eq!(
        case("Thing team/flaky")["failures"],
        json!(["UnstableAnswer"])
    );
    // A JSON document after a marker starts on the marker's line.
    assert_eq!(case("Thing team/quiet")["line"], "22");
    assert_eq!(
        case("ConfigMap team/flaky-cm"),
        json!({"suite": "emulate", "class": "emulate", "name": "ConfigMap team/flaky-cm",
               "file": file, "line": "18", "failures": ["HotLoop"]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sarif_passes_microsofts_validator_and_points_at_the_line() {
    let (output, file) = run("sarif", &[]).await;
    assert_eq!(output.status.code(), Some(1));
    let log: Value = serde_json::from_slice(&output.stdout).unwrap();
    let results = log["runs"][0]["results"].as_array().unwrap();
    let flaky = results
        .iter()
        .find(|r| r["ruleId"] == "UnstableAnswer")
        .unwrap();
    let location = &flaky["locations"][0];
    assert_eq!(location["physicalLocation"]["region"]["startLine"], 18);
    assert_eq!(
        location["physicalLocation"]["artifactLocation"]["uri"],
        format!("file://{file}")
    );
    assert_eq!(
        location["logicalLocations"][1]["fullyQualifiedName"],
        "Thing/team/flaky#/children/0/data/nonce"
    );
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return; // the validator's package is built for linux-x64 only
    }
    let Some(validator) = support::oracles::tool("MHTEST_SARIF_MULTITOOL") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sarif = dir.path().join("report.sarif");
    let verdict = dir.path().join("verdict.sarif");
    std::fs::write(&sarif, &output.stdout).unwrap();
    let ran = std::process::Command::new(validator)
        .arg("validate")
        .arg(&sarif)
        .arg("--output")
        .arg(&verdict)
        .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr)
    );
    let verdict: Value = serde_json::from_slice(&std::fs::read(&verdict).unwrap()).unwrap();
    let errors: Vec<&Value> = verdict["runs"][0]["results"]
        .as_array()
        .map(|r| r.iter().filter(|r| r["level"] == "error").collect())
        .unwrap_or_default();
    assert!(
        errors.is_empty(),
        "the SARIF validator objects: {errors:#?}"
    );
}

#[test]
fn a_broken_setup_exits_2_and_findings_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_inputs(dir.path());
    // A missing input file, an unknown story step, a story file that is not there, a
    // registration that does not parse: the harness, not the hook.
    let story = dir.path().join("typo.yaml");
    std::fs::write(&story, "steps:\n  - scael: {}\n").unwrap();
    let broken_registration = dir.path().join("broken.yaml");
    std::fs::write(
        &broken_registration,
        "apiVersion: metacontroller.k8s.io/v1alpha1\nkind: CompositeController\nmetadata: {name: x}\nspec: {}\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.yaml");
    let cases: [Vec<&str>; 4] = [
        vec!["-f", missing.to_str().unwrap()],
        vec!["-f", &file, "--story", story.to_str().unwrap()],
        vec!["-f", &file, "--story", missing.to_str().unwrap()],
        vec!["-f", broken_registration.to_str().unwrap()],
    ];
    for args in cases {
        let output = emulate(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_stories_each_run_on_a_fresh_cluster_and_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let holds = dir.path().join("holds.yaml");
    std::fs::write(
        &holds,
        "name: steady keeps its child\nsteps:\n  - expect: {apiVersion: v1, kind: ConfigMap, namespace: team, name: steady-cm, path: /data/a, equals: b}\n",
    )
    .unwrap();
    let fails = dir.path().join("fails.yaml");
    std::fs::write(
        &fails,
        "name: a wrong expectation\nsteps:\n  - delete: {apiVersion: v1, kind: ConfigMap, namespace: team, name: steady-cm}\n  - expect: {apiVersion: v1, kind: ConfigMap, namespace: team, name: steady-cm, path: /data/a, equals: c}\n",
    )
    .unwrap();
    let (output, _) = run(
        "json",
        &[
            "--story",
            holds.to_str().unwrap(),
            "--story",
            fails.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(output.status.code(), Some(1));
    let report = report(&output);
    let stories = report["stories"].as_array().unwrap();
    let names: Vec<&str> = stories
        .iter()
        .map(|s| s["story"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["steady keeps its child", "a wrong expectation"]);
    let expectations = |story: &Value| {
        story["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["rule"] == "ExpectationFailed")
            .map(|f| f["about"]["field"].clone())
            .collect::<Vec<_>>()
    };
    assert!(expectations(&stories[0]).is_empty(), "{:#}", stories[0]);
    assert_eq!(expectations(&stories[1]), [json!("/data/a")]);
    // The same name twice is refused before anything runs.
    let (twice, _) = run(
        "json",
        &[
            "--story",
            holds.to_str().unwrap(),
            "--story",
            holds.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(twice.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&twice.stderr).contains("already named"),
        "{}",
        String::from_utf8_lossy(&twice.stderr)
    );
}
