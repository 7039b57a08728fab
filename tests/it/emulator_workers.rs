//! The parents of a round are called as Metacontroller's workers call them: up to
//! `--workers` syncs in flight at once per controller (pkg/controller/composite starts
//! `numWorkers` goroutines on one queue), while the cluster is read and the answers are
//! applied in parent order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::{Value, json};
use tokio::sync::watch;

/// How many calls the hook saw at once, at most.
struct InFlight {
    now: AtomicUsize,
    most: AtomicUsize,
    /// Set once `gate` calls have been in flight together; from then on calls pass.
    open: watch::Sender<bool>,
}

/// A sync hook that holds each call until `gate` calls are in flight together (or 20 s
/// have passed: a serial caller then fails on the webhook timeout, not on a hang), then
/// answers one ConfigMap named after the parent.
async fn gated_hook(gate: usize) -> (String, Arc<InFlight>) {
    let (open, _) = watch::channel(false);
    let state = Arc::new(InFlight {
        now: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        open,
    });
    let shared = state.clone();
    let app = axum::Router::new().route(
        "/sync",
        post(move |Json(request): Json<Value>| {
            let state = shared.clone();
            async move {
                let now = state.now.fetch_add(1, Ordering::SeqCst) + 1;
                state.most.fetch_max(now, Ordering::SeqCst);
                if now >= gate {
                    state.open.send_replace(true);
                }
                let mut opened = state.open.subscribe();
                let _ = tokio::time::timeout(Duration::from_secs(20), opened.wait_for(|o| *o)).await;
                let name = request["parent"]["metadata"]["name"].as_str().unwrap_or_default().to_owned();
                state.now.fetch_sub(1, Ordering::SeqCst);
                Json(json!({
                    "status": {"seen": request["children"]["ConfigMap.v1"].as_object().map_or(0, |m| m.len())},
                    "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": format!("{name}-config")}}],
                }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), state)
}

fn emulator(base: &str, parents: usize) -> Emulator {
    emulator_updating(base, parents, "OnDelete")
}

/// As [`emulator`], with the ConfigMaps' `updateStrategy.method`.
fn emulator_updating(base: &str, parents: usize, method: &str) -> Emulator {
    let mut kinds = Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "things"},
               "spec": {"generateSelector": true,
                        "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps",
                                            "updateStrategy": {"method": method}}],
                        "hooks": {"sync": {"webhook": {"url": "http://hooks.example/sync"}}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    emulator.stop_at_first = false;
    for i in 0..parents {
        emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                              "metadata": {"name": format!("p{i}"), "namespace": "ns"}, "spec": {}}));
    }
    emulator
}

/// Every parent got its child and a status that saw it, with no finding.
fn assert_converged(emulator: &Emulator, parents: usize) {
    assert!(emulator.findings.is_empty(), "{:?}", emulator.findings);
    for i in 0..parents {
        assert!(
            emulator
                .get("v1", "ConfigMap", "ns", &format!("p{i}-config"))
                .is_some(),
            "p{i} has its ConfigMap"
        );
        let parent = emulator
            .get("example.com/v1", "Thing", "ns", &format!("p{i}"))
            .unwrap();
        assert_eq!(parent["status"]["seen"], 1, "p{i}: {parent}");
    }
}

#[tokio::test]
async fn up_to_workers_syncs_are_in_flight_at_once() {
    let parents = 8;
    let (base, seen) = gated_hook(5).await;
    let mut emulator = emulator(&base, parents);
    emulator.converge(10).await.unwrap();
    assert_eq!(
        seen.most.load(Ordering::SeqCst),
        5,
        "Metacontroller's default of 5 workers: five calls at once, never more"
    );
    assert_converged(&emulator, parents);
}

#[tokio::test]
async fn one_worker_calls_one_parent_at_a_time() {
    let parents = 3;
    let (base, seen) = gated_hook(1).await;
    let mut emulator = emulator(&base, parents);
    emulator.workers = 1;
    emulator.converge(10).await.unwrap();
    assert_eq!(seen.most.load(Ordering::SeqCst), 1);
    assert_converged(&emulator, parents);
}

#[tokio::test]
async fn a_child_edited_by_someone_else_is_merged_again_and_put_back() {
    // Steady-state rounds skip the merge of a child nothing has touched; an edit by
    // anyone else must still be seen and reverted on the next sync.
    let app = axum::Router::new().route(
        "/sync",
        post(|Json(request): Json<Value>| async move {
            let name = request["parent"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            Json(
                json!({"status": {}, "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("{name}-config"), "labels": {"v": "1"}}}]}),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut emulator = emulator_updating(&base, 1, "InPlace");
    emulator.converge(10).await.unwrap();
    emulator.converge(10).await.unwrap();
    let mut edited = emulator
        .get("v1", "ConfigMap", "ns", "p0-config")
        .unwrap()
        .clone();
    edited["metadata"]["labels"]["v"] = json!("2");
    emulator.apply(edited);
    emulator.converge(10).await.unwrap();
    let child = emulator.get("v1", "ConfigMap", "ns", "p0-config").unwrap();
    assert_eq!(child["metadata"]["labels"]["v"], "1", "{child}");
}
