//! Rolling updates as Metacontroller's composite controller runs them: `syncRevisions`
//! (pkg/controller/composite/controller_revision.go) asks the sync hook with each older
//! revision's parent while it still claims children, and `syncRollingUpdate`
//! (rolling_update.go) moves one child at a time to the latest revision, pausing while a
//! moved child fails its `statusChecks`, and says so in an `Updated` condition.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<String>>>;

/// A hook answering two children, `a` and `b`, of `kind`, carrying the parent's
/// `spec.version`; it records the version of every request.
async fn hook(kind: &'static str) -> (String, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route(
            "/sync",
            post(
                move |State(seen): State<Seen>, Json(request): Json<Value>| async move {
                    let version = request["parent"]["spec"]["version"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    seen.lock().unwrap().push(version.clone());
                    let child = |name: &str| {
                        let mut child = json!({"metadata": {"name": name, "namespace": "team",
                                                            "labels": {"app": "things"}}});
                        if kind == "ConfigMap" {
                            child["apiVersion"] = json!("v1");
                            child["kind"] = json!("ConfigMap");
                            child["data"] = json!({"version": version});
                        } else {
                            child["apiVersion"] = json!("example.com/v1");
                            child["kind"] = json!("Widget");
                            child["spec"] = json!({"version": version});
                            // Status is part of a Widget (no status subresource).
                            child["status"] = json!({"conditions": [{"type": "Ready", "status": "False"}]});
                        }
                        child
                    };
                    Json(json!({"status": {"version": version}, "children": [child("a"), child("b")]}))
                },
            ),
        )
        .with_state(seen.clone());
    let port = crate::support::servers::serve_app(app, None).await;
    let address = format!("127.0.0.1:{port}");
    (format!("http://{address}"), seen)
}

fn emulator(base: &str, child_rule: Value) -> Emulator {
    let widgets = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"kind": "Widget", "plural": "widgets"},
                 "versions": [{"name": "v1", "served": true, "storage": true}]}});
    let mut kinds = Kinds::default();
    kinds.learn(&widgets);
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "things"},
               "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                        "childResources": [child_rule],
                        "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://h/sync"}}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    emulator.stop_at_first = false;
    emulator.apply(widgets);
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "one", "namespace": "team"},
        "spec": {"version": "v1", "selector": {"matchLabels": {"app": "things"}}}}));
    emulator
}

fn updated(emulator: &Emulator) -> Value {
    let parent = emulator
        .get("example.com/v1", "Thing", "team", "one")
        .unwrap();
    parent["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Updated"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn new_version(emulator: &mut Emulator, version: &str) {
    let mut parent = emulator
        .get("example.com/v1", "Thing", "team", "one")
        .unwrap()
        .clone();
    parent["spec"]["version"] = json!(version);
    emulator.update(parent);
}

#[tokio::test]
async fn children_move_to_the_new_revision_one_at_a_time_while_the_old_one_is_asked_too() {
    let (base, seen) = hook("ConfigMap").await;
    let mut emulator = emulator(
        &base,
        json!({"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "RollingInPlace"}}),
    );
    emulator.converge(6).await.unwrap();
    assert_eq!(updated(&emulator)["reason"], "OnLatestRevision");
    assert!(
        updated(&emulator)["message"]
            .as_str()
            .unwrap()
            .starts_with("latest ControllerRevision: things.example.com-")
    );
    new_version(&mut emulator, "v2");
    seen.lock().unwrap().clear();
    emulator.round().await.unwrap();
    let data = |emulator: &Emulator, name: &str| {
        emulator.get("v1", "ConfigMap", "team", name).unwrap()["data"]["version"].clone()
    };
    // The first child moved; the second is still what the old revision asks for.
    assert_eq!(
        (data(&emulator, "a"), data(&emulator, "b")),
        (json!("v2"), json!("v1"))
    );
    assert_eq!(
        updated(&emulator),
        json!({"type": "Updated", "status": "False", "reason": "RolloutProgressing", "message": "updating ConfigMap a"})
    );
    assert!(
        seen.lock().unwrap().iter().any(|v| v == "v1"),
        "the old revision's parent was asked: {:?}",
        seen.lock().unwrap()
    );
    emulator.converge(6).await.unwrap();
    assert_eq!(
        (data(&emulator, "a"), data(&emulator, "b")),
        (json!("v2"), json!("v2"))
    );
    assert_eq!(updated(&emulator)["reason"], "OnLatestRevision");
    assert!(emulator.findings.is_empty(), "{:?}", emulator.findings);
}

#[tokio::test]
async fn a_moved_child_that_fails_its_status_checks_pauses_the_rollout() {
    let (base, _) = hook("Widget").await;
    let mut emulator = emulator(
        &base,
        json!({"apiVersion": "example.com/v1", "resource": "widgets",
               "updateStrategy": {"method": "RollingRecreate",
                                  "statusChecks": {"conditions": [{"type": "Ready", "status": "True"}]}}}),
    );
    emulator.converge(6).await.unwrap();
    new_version(&mut emulator, "v2");
    emulator.converge(6).await.unwrap();
    let version = |name: &str| {
        emulator
            .get("example.com/v1", "Widget", "team", name)
            .unwrap()["spec"]["version"]
            .clone()
    };
    assert_eq!((version("a"), version("b")), (json!("v2"), json!("v1")));
    assert_eq!(
        updated(&emulator),
        json!({"type": "Updated", "status": "False", "reason": "RolloutWaiting",
               "message": "child Widget a failed status check: \"Ready\" condition status is \"False\" (want \"True\")"})
    );
}
