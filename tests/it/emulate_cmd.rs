//! `metahooks emulate` as a user runs it: the real binary on files. Our examples
//! converge with no findings; a deliberately broken hook server gets the right finding
//! for each fault and a failing exit code; and calling our own server over HTTP gives
//! the same final objects as running the controllers in-process.

use crate::support;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use metahooks::server::Clock;
use serde_json::{Value, json};

pub(crate) fn emulate(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_metahooks"))
        .arg("emulate")
        .args(args)
        .output()
        .expect("the metahooks binary runs")
}

pub(crate) async fn emulate_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        emulate(&args)
    })
    .await
    .unwrap()
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}):\n{}\n{}",
            stdout(output),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn rules(report: &Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["rule"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_example_converges_without_findings() {
    let examples = support::repo_dir().join("manifests/examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        // A credentials Secret alone is no parent: emulate says nothing was reconciled.
        if path.to_string_lossy().ends_with(".secret.yaml") {
            let output = emulate(&["-f", path.to_str().unwrap()]);
            assert!(!output.status.success(), "{}", path.display());
            continue;
        }
        seen += 1;
        let output = emulate(&["-f", path.to_str().unwrap(), "-o", "json"]);
        let report = report(&output);
        assert!(
            output.status.success() && rules(&report).is_empty(),
            "{}: {:#}",
            path.display(),
            report["findings"]
        );
        assert!(
            report["summary"]["roundsToConverge"].as_u64().unwrap() < 20,
            "{}",
            path.display()
        );
    }
    assert!(seen >= 4, "examples found: {seen}");
}

#[test]
fn users_example_report_matches_the_golden_text() {
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let output = emulate(&["-f", example.to_str().unwrap(), "--no-timing"]);
    assert!(output.status.success(), "{}", stdout(&output));
    let golden = support::repo_dir().join("hooks-tests/emulate/users.api-mock.txt");
    if std::env::var("MHTEST_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, stdout(&output)).unwrap();
    }
    let expected = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (MHTEST_UPDATE_GOLDEN=1 writes it)",
            golden.display()
        )
    });
    assert_eq!(stdout(&output), expected);
}

#[test]
fn bad_input_files_are_named_and_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("list.yaml", "- a\n- b\n", "not a mapping"),
        (
            "nokind.yaml",
            "apiVersion: v1\nmetadata: {name: x}\n",
            "no kind",
        ),
        (
            "noname.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
            "no metadata.name",
        ),
        ("broken.yaml", "kind: [\n", "not YAML"),
        (
            "labels.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {a: 1}}\n",
            "metadata.labels must map strings to strings",
        ),
    ];
    for (file, text, expected) in cases {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let output = emulate(&["-f", path.to_str().unwrap()]);
        let error = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.code() == Some(2) && error.contains(expected) && error.contains(file),
            "{file}: exit {:?}: {error}",
            output.status.code()
        );
    }
}

/// Faults a hook author could ship, one per hook path.
#[derive(Clone, Copy)]
enum Fault {
    UnknownField,
    DropsChildOnce,
    FlipsStatus,
    NeverFinalizes,
    ResyncStorm,
}

struct Broken {
    fault: Fault,
    calls: AtomicU64,
}

async fn broken_sync(State(hook): State<Arc<Broken>>, Json(request): Json<Value>) -> Json<Value> {
    let call = hook.calls.fetch_add(1, Ordering::SeqCst);
    let name = request["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or("x");
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("{name}-cm")}, "data": {"a": "b"}});
    let mut answer = json!({"status": {"ok": true}, "children": [child]});
    match hook.fault {
        Fault::UnknownField => answer["childs"] = json!([]),
        // Metacontroller calls twice per sync here: the second sync's answers leave the
        // child out, the third's ask for it again.
        Fault::DropsChildOnce if (2..4).contains(&call) => answer["children"] = json!([]),
        Fault::DropsChildOnce => {}
        Fault::FlipsStatus => {
            let was = request["parent"]["status"]["flip"]
                .as_bool()
                .unwrap_or(false);
            answer["status"]["flip"] = json!(!was);
        }
        Fault::NeverFinalizes => {
            if request["finalizing"] == json!(true) {
                answer = json!({"status": {}, "children": [], "finalized": false});
            }
        }
        Fault::ResyncStorm => answer["resyncAfterSeconds"] = json!(0.1),
    }
    Json(answer)
}

async fn broken_server(fault: Fault) -> String {
    let hook = Arc::new(Broken {
        fault,
        calls: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/things/sync", post(broken_sync))
        .with_state(hook);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn write_things(dir: &Path) {
    std::fs::write(
        dir.join("things.yaml"),
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: things}
spec:
  generateSelector: true
  parentResource: {apiVersion: example.com/v1, resource: things}
  childResources:
    - {apiVersion: v1, resource: configmaps, updateStrategy: {method: InPlace}}
  hooks:
    sync: {version: v2, webhook: {url: "http://hooks.example.svc/things/sync"}}
    finalize: {version: v2, webhook: {url: "http://hooks.example.svc/things/sync"}}
---
apiVersion: example.com/v1
kind: Thing
metadata: {name: one, namespace: team}
spec: {}
"#,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_of_a_broken_hook_server_is_its_own_finding() {
    let cases = [
        (Fault::UnknownField, "StrictDecoding"),
        (Fault::DropsChildOnce, "ChildDropped"),
        (Fault::FlipsStatus, "StatusNeverSettles"),
        (Fault::NeverFinalizes, "FinalizeNeverCompletes"),
        (Fault::ResyncStorm, "ResyncStorm"),
    ];
    for (fault, rule) in cases {
        let base = broken_server(fault).await;
        let dir = tempfile::tempdir().unwrap();
        write_things(dir.path());
        let output = emulate_async(vec![
            "-f".into(),
            dir.path().to_str().unwrap().into(),
            "--hooks-url".into(),
            base,
            "--delete".into(),
            "--max-rounds".into(),
            "6".into(),
            // These faults count calls; a delayed call would shift them.
            "--recheck-after-ms".into(),
            "0".into(),
            "-o".into(),
            "json".into(),
        ])
        .await;
        let report = report(&output);
        assert_eq!(output.status.code(), Some(1), "{rule}: findings exit 1");
        assert!(
            rules(&report).contains(&rule.to_owned()),
            "{rule}: {:#}",
            report["findings"]
        );
    }
}

#[test]
fn another_projects_registration_without_hooks_url_says_to_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    write_things(dir.path());
    let output = emulate(&["-f", dir.path().to_str().unwrap(), "-o", "json"]);
    assert!(!output.status.success());
    let report = report(&output);
    let message = report["findings"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("answered 404")
            && message.contains("metahooks' own controllers, which have no /things/sync")
            && message.contains("pass --hooks-url"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_server_over_http_ends_in_the_same_objects_as_in_process() {
    // The emulator's clock starts at 2026-01-01T00:00:00Z; the server's is fixed there.
    let server = support::start_standard(Clock::Fixed(support::golden_now())).await;
    let examples = support::repo_dir().join("manifests/examples");
    for example in ["users.api-mock.cr.yaml", "bets.api-mock.cr.yaml"] {
        let file = examples.join(example).to_str().unwrap().to_owned();
        let local =
            emulate_async(vec!["-f".into(), file.clone(), "-o".into(), "json".into()]).await;
        let remote = emulate_async(vec![
            "-f".into(),
            file,
            "--hooks-url".into(),
            format!("http://{}", server.hook_addr),
            "-o".into(),
            "json".into(),
        ])
        .await;
        let (local, remote) = (report(&local), report(&remote));
        assert!(local["objects"].as_array().unwrap().len() >= 4, "{example}");
        assert_eq!(local["objects"], remote["objects"], "{example}");
        assert_eq!(local["findings"], json!([]), "{example}");
    }
}

#[test]
fn replicas_answer_alike() {
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let one = report(&emulate(&["-f", example.to_str().unwrap(), "-o", "json"]));
    let three = report(&emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--replicas",
        "3",
        "-o",
        "json",
    ]));
    assert_eq!(one["objects"], three["objects"]);
    let replicas: std::collections::BTreeSet<u64> = three["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|round| round["calls"].as_array().unwrap())
        .map(|call| call["replica"].as_u64().unwrap())
        .collect();
    assert_eq!(replicas.len(), 3, "calls went to replicas {replicas:?}");
}

#[test]
fn a_run_that_reconciles_nothing_fails_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.yaml");
    // `ApiMock` is not the kind the APIMock registration watches.
    std::fs::write(
        &typo,
        "apiVersion: apirator.io/v1alpha1\nkind: ApiMock\nmetadata: {name: users}\nspec: {definition: x}\n",
    )
    .unwrap();
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "").unwrap();
    for file in [&typo, &empty] {
        let output = emulate(&["-f", file.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
        assert!(
            stderr.contains("nothing was reconciled")
                && stderr.contains("APIMock apirator.io/v1alpha1"),
            "{stderr}"
        );
    }
}

#[test]
fn a_parent_without_a_selector_is_an_invalid_parent_finding_not_an_empty_run() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("things.yaml");
    std::fs::write(
        &file,
        r#"apiVersion: metacontroller.k8s.io/v1alpha1
kind: CompositeController
metadata: {name: things}
spec:
  parentResource: {apiVersion: example.com/v1, resource: things}
  childResources: [{apiVersion: v1, resource: configmaps}]
  hooks: {sync: {webhook: {url: "http://hooks.example/sync"}}}
---
apiVersion: example.com/v1
kind: Thing
metadata: {name: one, namespace: ns}
spec: {}
"#,
    )
    .unwrap();
    let output = emulate(&["-f", file.to_str().unwrap(), "-o", "json"]);
    assert!(!output.status.success());
    let report = report(&output);
    assert_eq!(rules(&report), ["InvalidParent"], "{report}");
    assert_eq!(report["hookCalls"], 0, "no hook is called");
}

#[test]
fn required_conditions_are_checked_per_parent() {
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let met = emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--require",
        "condition=Ready",
    ]);
    assert!(met.status.success(), "{}", stdout(&met));
    let unmet = emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--require",
        "condition=Frobnicated",
    ]);
    assert!(!unmet.status.success());
    assert!(
        stdout(&unmet).contains("required: APIMock default/")
            && stdout(&unmet).contains("Frobnicated=absent"),
        "{}",
        stdout(&unmet)
    );
    let malformed = emulate(&["-f", example.to_str().unwrap(), "--require", "Ready"]);
    assert!(!malformed.status.success());
    assert!(String::from_utf8_lossy(&malformed.stderr).contains("condition=TYPE"));
}

#[test]
fn a_story_edits_the_cluster_after_convergence_and_checks_what_follows() {
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let dir = tempfile::tempdir().unwrap();
    let story = dir.path().join("story.yaml");
    let write = |text: &str| std::fs::write(&story, text).unwrap();
    let deployment = "apiVersion: apps/v1, kind: Deployment, namespace: default, name: users";
    // The mock's Deployment is a child: deleted, it comes back; scaled parent-side, the
    // controller puts its own replica count back.
    write(&format!(
        "steps:\n- delete: {{{deployment}}}\n- expect: {{{deployment}, path: /status/readyReplicas, equals: 1}}\n"
    ));
    let output = emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--story",
        story.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stdout(&output));
    write(&format!(
        "steps:\n- expect: {{{deployment}, path: /spec/replicas, equals: 7}}\n"
    ));
    let failed = emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--story",
        story.to_str().unwrap(),
    ]);
    assert!(!failed.status.success());
    assert!(
        stdout(&failed).contains("ExpectationFailed") && stdout(&failed).contains("expected 7"),
        "{}",
        stdout(&failed)
    );
    write("steps:\n- scael: {apiVersion: v1, kind: X, name: y}\n");
    let typo = emulate(&[
        "-f",
        example.to_str().unwrap(),
        "--story",
        story.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&typo.stderr);
    assert!(
        !typo.status.success() && stderr.contains("scael"),
        "{stderr}"
    );
}

#[test]
fn what_a_decorator_sets_on_its_target_is_in_the_text_report() {
    // Without a network configsync reports the unreachable repository in its error
    // annotation (with one, the revision): either way under the Deployment.
    let example = support::repo_dir().join("manifests/examples/configsync-deployment.yaml");
    let output = emulate(&["-f", example.to_str().unwrap(), "--no-timing"]);
    let text = stdout(&output);
    assert!(
        text.contains("Deployment team-a/web")
            && (text.contains("set by decorator: configsync.metahooks.io/error=")
                || text.contains("set by decorator: configsync.metahooks.io/revision=")),
        "{text}"
    );
}

/// The shipped APIMock registration with `webhook.authorization` on every hook, pointing
/// at Secret `hook-token` (key `token`) in `metahooks`, and that Secret holding `token`.
fn registration_with_authorization(dir: &Path, token: &str) -> String {
    let shipped = support::read_yaml_documents(
        &support::repo_dir().join("manifests/controllers/apimock.yaml"),
    );
    let mut registration = shipped
        .into_iter()
        .find(|d| d["kind"] == "CompositeController")
        .unwrap();
    for hook in ["sync", "finalize", "customize"] {
        registration["spec"]["hooks"][hook]["webhook"]["authorization"] = json!({
            "secretRef": {"name": "hook-token", "namespace": "metahooks", "key": "token"}
        });
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "hook-token", "namespace": "metahooks"},
                        "stringData": {"token": format!("{token}\n")}});
    let path = dir.join(format!("registration-{token}.json"));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [registration, secret]});
    std::fs::write(&path, list.to_string()).unwrap();
    path.to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_with_authorization_sends_the_token_of_its_secret() {
    let mut settings = support::local_settings();
    settings.auth = Some(metahooks::server::Auth::bearer("right-token"));
    let server = metahooks::server::Server::start(
        settings,
        metahooks::controllers::Registry::standard(
            metahooks::controllers::ControllerSettings::default(),
        ),
        Clock::Fixed(support::golden_now()),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let run = |token: &str| {
        let registration = registration_with_authorization(dir.path(), token);
        emulate_async(vec![
            "-f".into(),
            example.to_str().unwrap().to_owned(),
            "-f".into(),
            registration,
            "--hooks-url".into(),
            format!("http://{}", server.hook_addr),
            "-o".into(),
            "json".into(),
        ])
    };
    let accepted = run("right-token").await;
    let accepted = report(&accepted);
    assert_eq!(accepted["findings"], json!([]), "{accepted}");
    assert!(accepted["objects"].as_array().unwrap().len() >= 4);
    let refused = run("wrong-token").await;
    assert!(!refused.status.success());
    let refused = report(&refused);
    assert!(
        rules(&refused).iter().any(|r| r == "NonOkAnswer"),
        "{refused}"
    );
    assert!(refused.to_string().contains("401"), "{refused}");
}
