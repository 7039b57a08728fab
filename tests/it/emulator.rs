//! The emulator's own tests: it must catch every protocol violation the real
//! Metacontroller would reject or loop on, and accept a well-behaved controller.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use support::emulator::{Emulator, Registration};

/// A hand-written hook that misbehaves in one chosen way.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    UnregisteredKind,
    WrongApiVersion,
    OwnerReferences,
    ChildStatus,
    UnknownTopLevelField,
    StatusCounter,
    NonDeterministic,
    Http500,
    NoStatus,
    MissingKind,
    ServerFields,
    /// Two children, in another order on every call (a Go hook ranging over a map).
    ShuffledChildren,
    /// The same answer with its keys in another order on every call.
    ShuffledKeys,
    /// Finalize lists a child nobody had yet, and says it is done.
    FinalizeListsAChild,
    /// The child carries the time in whole seconds.
    SecondsStamp,
    /// A token generated on every call until the child exists, then read back from it
    /// (a password Secret written once).
    GeneratedOnce,
    /// Another answer on the third call only, the first asked after a delay: state
    /// outside the request that moves and comes back (a source poll that turns pending
    /// and, finding nothing new, back).
    MovesAndBack,
    /// From the third call on, one answer on odd calls and another on even ones.
    Flips,
}

struct Hook {
    fault: Fault,
    calls: AtomicU64,
}

async fn sync(
    State(hook): State<Arc<Hook>>,
    Json(request): Json<Value>,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let call = hook.calls.fetch_add(1, Ordering::SeqCst);
    let name = request["parent"]["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut child = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-cm")}, "data": {"a": "b"}});
    let mut response = json!({"status": {"children": 1}, "children": []});
    match hook.fault {
        Fault::UnregisteredKind => {
            child = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})
        }
        Fault::WrongApiVersion => child["apiVersion"] = json!("v2"),
        Fault::OwnerReferences => {
            child["metadata"]["ownerReferences"] = json!([{"apiVersion": "example.com/v1", "kind": "Thing", "name": name, "uid": "x", "controller": true}])
        }
        Fault::ChildStatus => child["status"] = json!({"ready": true}),
        Fault::UnknownTopLevelField => response["Children"] = json!([]),
        // Deterministic per request, yet different after every status write: a hot loop.
        Fault::StatusCounter => {
            response["status"]["seenVersion"] =
                request["parent"]["metadata"]["resourceVersion"].clone()
        }
        Fault::NonDeterministic => child["data"]["nonce"] = json!(call.to_string()),
        Fault::Http500 => {
            return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
        }
        Fault::NoStatus => {
            response.as_object_mut().unwrap().remove("status");
        }
        Fault::MissingKind => child
            .as_object_mut()
            .unwrap()
            .remove("kind")
            .map(|_| ())
            .unwrap_or(()),
        Fault::ServerFields => child["metadata"]["resourceVersion"] = json!("7"),
        Fault::ShuffledChildren if request["finalizing"] != json!(true) => {
            let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-other")}, "data": {"c": "d"}});
            let children = if call % 2 == 0 {
                json!([child, other])
            } else {
                json!([other, child])
            };
            return Json(json!({"status": {"children": 2}, "children": children})).into_response();
        }
        Fault::ShuffledKeys if request["finalizing"] != json!(true) => {
            // Written by hand: serde_json's maps would sort the keys.
            let child = format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}-cm"}},"data":{{"a":"b"}}}}"#
            );
            let body = if call % 2 == 0 {
                format!(r#"{{"status":{{"children":1,"ok":true}},"children":[{child}]}}"#)
            } else {
                format!(r#"{{"children":[{child}],"status":{{"ok":true,"children":1}}}}"#)
            };
            return (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
                .into_response();
        }
        Fault::SecondsStamp => {
            let seconds = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            child["data"]["at"] = json!(seconds.to_string());
        }
        Fault::GeneratedOnce => {
            let kept = request["children"]["ConfigMap.v1"]
                .as_object()
                .into_iter()
                .flat_map(|children| children.values())
                .find(|c| c["metadata"]["name"] == format!("{name}-cm").as_str())
                .and_then(|c| c["data"]["token"].as_str())
                .map(str::to_owned);
            child["data"]["token"] = json!(kept.unwrap_or_else(|| format!("generated-{call}")));
        }
        // In the status: a child that does not exist yet is compared by its key alone.
        Fault::MovesAndBack if call == 2 => response["status"]["phase"] = json!("pending"),
        Fault::Flips if call >= 2 && call % 2 == 0 => response["status"]["phase"] = json!("other"),
        Fault::MovesAndBack
        | Fault::Flips
        | Fault::ShuffledChildren
        | Fault::ShuffledKeys
        | Fault::FinalizeListsAChild
        | Fault::None => {}
    }
    if request["finalizing"] == json!(true) && hook.fault == Fault::FinalizeListsAChild {
        let late = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("{name}-late")}});
        return Json(json!({"status": {}, "children": [late], "finalized": true})).into_response();
    }
    if request["finalizing"] == json!(true) {
        let gone = request["children"]["ConfigMap.v1"]
            .as_object()
            .is_none_or(|m| m.is_empty());
        return Json(json!({"status": {}, "children": [], "finalized": gone})).into_response();
    }
    response["children"] = json!([child]);
    Json(response).into_response()
}

fn registration(version: &str) -> Registration {
    Registration::parse(json!({
        "apiVersion": "metacontroller.k8s.io/v1alpha1",
        "kind": "CompositeController",
        "metadata": {"name": "things"},
        "spec": {
            "generateSelector": true,
            "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps", "updateStrategy": {"method": "InPlace"}}],
            "hooks": {
                "sync": {"version": version, "webhook": {"url": "http://hooks.example/things/sync"}},
                "finalize": {"version": version, "webhook": {"url": "http://hooks.example/things/sync"}}
            }
        }
    }), &things())
    .unwrap()
}

/// Kinds the test registrations use: the built-in ones plus `things` → `Thing`.
fn things() -> metahooks::emulate::Kinds {
    let mut kinds = metahooks::emulate::Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    kinds
}

async fn emulator_with(fault: Fault, version: &str) -> Emulator {
    let hook = Arc::new(Hook {
        fault,
        calls: AtomicU64::new(0),
    });
    let app = Router::new()
        .route("/things/sync", post(sync))
        .with_state(hook);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut emulator = Emulator::new(&format!("http://{addr}"), vec![registration(version)]);
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "one", "namespace": "ns"}, "spec": {}}));
    emulator
}

async fn violation(fault: Fault, version: &str) -> String {
    let mut emulator = emulator_with(fault, version).await;
    match emulator.converge(8).await {
        Ok(rounds) => {
            panic!("{fault:?} under {version} was accepted (converged in {rounds} rounds)")
        }
        Err(violation) => violation,
    }
}

#[tokio::test]
async fn a_well_behaved_controller_converges_and_finalizes() {
    let mut emulator = emulator_with(Fault::None, "v2").await;
    emulator.converge(5).await.unwrap();
    let child = emulator
        .get("v1", "ConfigMap", "ns", "one-cm")
        .expect("child created");
    assert_eq!(child["metadata"]["ownerReferences"][0]["controller"], true);
    assert!(
        child["metadata"]["labels"]["controller-uid"].is_string(),
        "generateSelector label"
    );
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert_eq!(
        parent["status"],
        json!({"children": 1, "observedGeneration": 1})
    );
    let key = support::emulator::key_of(parent);
    emulator.delete(&key);
    emulator.converge(5).await.unwrap();
    assert!(
        emulator
            .get("example.com/v1", "Thing", "ns", "one")
            .is_none()
    );
    assert!(emulator.get("v1", "ConfigMap", "ns", "one-cm").is_none());
}

#[tokio::test]
async fn a_child_of_an_unlisted_type_is_created_as_metacontroller_creates_it() {
    // ManageChildren writes whatever the answer lists; only observing (and so updating
    // or deleting) is limited to childResources.
    let mut emulator = emulator_with(Fault::UnregisteredKind, "v1").await;
    emulator.converge(8).await.unwrap();
    let secret = emulator
        .get("v1", "Secret", "ns", "s")
        .expect("the Secret is created");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["name"], "one");
}

#[tokio::test]
async fn catches_a_child_at_an_api_version_that_is_not_served() {
    let message = violation(Fault::WrongApiVersion, "v1").await;
    assert!(
        message.contains("can't find kind \"ConfigMap\" in apiVersion \"v2\""),
        "{message}"
    );
}

#[tokio::test]
async fn catches_owner_references_on_children() {
    assert!(
        violation(Fault::OwnerReferences, "v1")
            .await
            .contains("ownerReferences")
    );
}

#[tokio::test]
async fn status_on_children_is_dropped_as_metacontroller_does() {
    let mut emulator = emulator_with(Fault::ChildStatus, "v1").await;
    emulator.converge(5).await.unwrap();
    let child = emulator.get("v1", "ConfigMap", "ns", "one-cm").unwrap();
    assert!(child.get("status").is_none(), "{child}");
}

#[tokio::test]
async fn catches_server_populated_fields_on_children() {
    assert!(
        violation(Fault::ServerFields, "v1")
            .await
            .contains("resourceVersion")
    );
}

#[tokio::test]
async fn catches_missing_kind() {
    assert!(
        violation(Fault::MissingKind, "v1")
            .await
            .contains("Kind' is missing")
    );
}

#[tokio::test]
async fn unknown_top_level_fields_fail_strict_v2_only() {
    assert!(
        violation(Fault::UnknownTopLevelField, "v2")
            .await
            .contains("unknown field \"Children\"")
    );
    // v1 decodes loosely: the same answer is accepted.
    let mut loose = emulator_with(Fault::UnknownTopLevelField, "v1").await;
    loose.converge(5).await.unwrap();
}

#[tokio::test]
async fn catches_a_status_that_changes_on_every_call() {
    let message = violation(Fault::StatusCounter, "v1").await;
    assert!(
        message.starts_with("[StatusNeverSettles]")
            && message.contains("the status of Thing ns/one at /status/seenVersion changed"),
        "{message}"
    );
}

/// updateParentObject (pkg/controller/composite/controller.go): with
/// `ignoreStatusChanges`, a status-only update enqueues nothing, so the same counter
/// is written once per real change and the cluster goes quiet.
#[tokio::test]
async fn ignore_status_changes_lets_a_status_written_on_every_sync_settle() {
    let mut emulator = emulator_with(Fault::StatusCounter, "v1").await;
    let mut raw = emulator.registrations[0].raw.clone();
    raw["spec"]["parentResource"]["ignoreStatusChanges"] = json!(true);
    emulator.registrations = vec![Registration::parse(raw, &things()).unwrap()];
    let rounds = emulator.converge(8).await.unwrap();
    assert!(rounds < 8, "converged in {rounds} rounds");
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert!(parent["status"]["seenVersion"].is_string(), "{parent}");
}

#[tokio::test]
async fn catches_answers_that_differ_for_identical_requests() {
    let message = violation(Fault::NonDeterministic, "v1").await;
    assert!(
        message.starts_with("[UnstableAnswer]")
            && message.contains(
                "answered two identical requests differently at /children/0/data/nonce: "
            ),
        "{message}"
    );
}

/// Metacontroller keys children by kind, namespace and name, and decodes JSON: neither
/// the order of the children nor the order of keys is a difference to it
/// (`MakeChildMap`, pkg/controller/common/children.go).
#[tokio::test]
async fn children_or_keys_in_another_order_are_the_same_answer() {
    for fault in [Fault::ShuffledChildren, Fault::ShuffledKeys] {
        for _ in 0..20 {
            let mut emulator = emulator_with(fault, "v2").await;
            emulator
                .converge(8)
                .await
                .unwrap_or_else(|finding| panic!("{fault:?}: {finding}"));
            assert!(emulator.get("v1", "ConfigMap", "ns", "one-cm").is_some());
        }
    }
}

/// A value generated on each call until its child exists, then read back from it:
/// Metacontroller creates the child from the first answer, and the create of a second,
/// different answer to the same request meets AlreadyExists, which `DynamicApply.Apply`
/// ignores (pkg/dynamic/apply), so nothing flaps.
#[tokio::test]
async fn a_value_generated_until_its_child_exists_is_no_finding() {
    for _ in 0..20 {
        let mut emulator = emulator_with(Fault::GeneratedOnce, "v2").await;
        emulator.recheck_after = std::time::Duration::from_millis(5);
        emulator.converge(8).await.unwrap();
        let child = emulator.get("v1", "ConfigMap", "ns", "one-cm").unwrap();
        assert!(
            child["data"]["token"]
                .as_str()
                .is_some_and(|t| t.starts_with("generated-")),
            "{child}"
        );
    }
}

/// Asked again a second later, an answer stamped with the time in seconds differs on
/// every run, not only when two back-to-back calls straddle a tick; one whose keys move
/// passes on every run. Twenty runs each, side by side.
#[tokio::test]
async fn the_delayed_call_gives_the_same_verdict_on_every_run() {
    let runs = (0..20).map(|_| async {
        let mut emulator = emulator_with(Fault::SecondsStamp, "v2").await;
        emulator.recheck_after = std::time::Duration::from_secs(1);
        emulator.converge(8).await
    });
    for verdict in futures_util::future::join_all(runs).await {
        let message = verdict.expect_err("a time-stamped answer is unstable");
        assert!(
            message.starts_with("[UnstableAnswer]")
                && message.contains("differently (after a delay) at /children/0/data/at: "),
            "{message}"
        );
    }
    let runs = (0..20).map(|_| async {
        let mut emulator = emulator_with(Fault::ShuffledKeys, "v2").await;
        emulator.recheck_after = std::time::Duration::from_secs(1);
        emulator.converge(8).await
    });
    for verdict in futures_util::future::join_all(runs).await {
        verdict.unwrap();
    }
}

/// The first call after a delay differs and the one after it is back to the answer
/// before: outside state that moved and came back, no finding. An answer that keeps
/// flipping between two values is still one, caught by the third call after a delay.
#[tokio::test]
async fn an_answer_that_moves_and_comes_back_is_asked_once_more() {
    let mut emulator = emulator_with(Fault::MovesAndBack, "v2").await;
    emulator.recheck_after = std::time::Duration::from_millis(5);
    emulator.converge(8).await.unwrap();
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert!(parent["status"].get("phase").is_none(), "{parent}");

    let mut emulator = emulator_with(Fault::Flips, "v2").await;
    emulator.recheck_after = std::time::Duration::from_millis(5);
    let message = emulator
        .converge(8)
        .await
        .expect_err("an answer that flips is unstable");
    assert!(
        message.starts_with("[UnstableAnswer]")
            && message.contains("differently (after a delay) at /status/phase: "),
        "{message}"
    );
}

#[tokio::test]
async fn catches_non_200_answers() {
    let message = violation(Fault::Http500, "v1").await;
    assert!(
        message.starts_with("[NonOkAnswer]")
            && message.contains("answered 500")
            && message.contains("boom"),
        "{message}"
    );
}

#[tokio::test]
async fn an_answer_without_status_applies_its_children_and_writes_observed_generation() {
    // As Metacontroller's updateParentStatus: no status is an empty one.
    let mut emulator = emulator_with(Fault::NoStatus, "v1").await;
    emulator.converge(5).await.unwrap();
    assert!(emulator.get("v1", "ConfigMap", "ns", "one-cm").is_some());
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert_eq!(parent["status"], json!({"observedGeneration": 1}));
}

#[test]
fn strictness_follows_metacontrollers_decoding_cases() {
    // tests/fixtures/metacontroller/response-decoding.json: which hook versions and modes
    // Metacontroller decodes strictly.
    let cases =
        support::read_json(&support::fixtures_dir().join("metacontroller/response-decoding.json"));
    for case in cases["cases"].as_array().unwrap() {
        let version = case["hook_version"].as_str().unwrap();
        let mut sync = json!({"version": version, "webhook": {"url": "http://x/sync"}});
        if let Some(mode) = case["mode"].as_str() {
            sync["webhook"]["responseUnMarshallMode"] = json!(mode);
        }
        let registration = Registration::parse(json!({
            "kind": "CompositeController", "metadata": {"name": "c"},
            "spec": {"parentResource": {"apiVersion": "v1", "resource": "configmaps"}, "hooks": {"sync": sync}}
        }), &metahooks::emulate::Kinds::default())
        .unwrap();
        let strict = registration.hooks.values().next().unwrap().strict;
        assert_eq!(Some(strict), case["strict"].as_bool(), "{case}");
    }
}

/// `finalized: true` lets the finalizer go before the children are managed
/// (syncParentObject), and a terminating parent without it manages none
/// (`finalizer.ShouldFinalize`): a child the last finalize lists is never created.
#[tokio::test]
async fn a_child_listed_by_the_answer_that_finalizes_is_not_created() {
    let mut emulator = emulator_with(Fault::FinalizeListsAChild, "v2").await;
    emulator.converge(5).await.unwrap();
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap()
        .clone();
    emulator.delete(&support::emulator::key_of(&parent));
    emulator.converge(5).await.unwrap();
    assert!(
        emulator
            .get("example.com/v1", "Thing", "ns", "one")
            .is_none()
    );
    let created: Vec<String> = emulator
        .timeline
        .iter()
        .flat_map(|(_, report)| report.created.iter())
        .map(|key| key.3.clone())
        .collect();
    assert!(
        !created.iter().any(|name| name == "one-late"),
        "{created:?}"
    );
}
