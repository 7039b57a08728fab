//! Finalizers and the webhook client's ETag cache, rule by rule as Metacontroller v4.17
//! and the API server decide them: a child with a finalizer stays terminating
//! (registry deletion), a finalizer left without a finalize hook is removed
//! (`finalizer.Manager.SyncObject`), a composite parent that stops matching its
//! controller's label selector is finalized (`shouldCallFinalizeHook`), and an enabled
//! `etag` sends If-None-Match and reuses the kept answer on 304 (pkg/hooks/webhook_etag.go).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

use super::emulator_apply::{config_map, emulator, hook, parent, registration, selector};

const FINALIZER: &str = "metacontroller.io/compositecontroller-things";

#[tokio::test]
async fn a_dropped_child_with_a_finalizer_stays_terminating_until_it_is_removed() {
    let wanted = Arc::new(AtomicBool::new(true));
    let asked = wanted.clone();
    let (base, _) = hook(Arc::new(move |_: &Value| {
        let mut cm = config_map("held", json!({}));
        cm["metadata"]["finalizers"] = json!(["example.com/hold"]);
        let children = if asked.load(Ordering::SeqCst) {
            vec![cm]
        } else {
            vec![]
        };
        json!({"status": {}, "children": children})
    }))
    .await;
    let mut emulator = emulator(&base, json!({}), selector());
    emulator.converge(8).await.unwrap();
    wanted.store(false, Ordering::SeqCst);
    emulator.converge(8).await.unwrap();
    let held = emulator
        .get("v1", "ConfigMap", "ns", "held")
        .expect("still there, terminating")
        .clone();
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");
    // Whoever holds the finalizer lets go (a story's patch does the same): it is gone.
    let mut released = held;
    released["metadata"]["finalizers"] = json!([]);
    emulator.update(released);
    assert!(emulator.get("v1", "ConfigMap", "ns", "held").is_none());
}

#[tokio::test]
async fn a_finalizer_without_a_finalize_hook_is_removed_and_a_deleted_parent_goes() {
    let (base, calls) = hook(Arc::new(|_: &Value| json!({"status": {}, "children": []}))).await;
    let mut emulator = emulator(&base, json!({}), selector());
    // Left by an earlier version of the controller that had a finalize hook.
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "kept", "namespace": "ns", "labels": {"app": "one"}, "finalizers": [FINALIZER]},
        "spec": {"selector": {"matchLabels": {"app": "kept"}}}}));
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "going", "namespace": "ns", "finalizers": [FINALIZER],
                     "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"selector": {"matchLabels": {"app": "going"}}}}));
    emulator.converge(8).await.unwrap();
    let kept = emulator
        .get("example.com/v1", "Thing", "ns", "kept")
        .unwrap();
    assert!(
        kept["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{kept}"
    );
    assert!(
        emulator
            .get("example.com/v1", "Thing", "ns", "going")
            .is_none()
    );
    let synced: Vec<String> = emulator.calls.iter().map(|c| c.parent.clone()).collect();
    assert!(!synced.contains(&"ns/going".to_owned()), "{synced:?}");
    assert!(calls.load(Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn a_composite_parent_that_stops_matching_its_label_selector_is_finalized() {
    let (base, _) = hook(Arc::new(|request: &Value| {
        if request["finalizing"] == json!(true) {
            return json!({"status": {"finalized": true}, "children": [], "finalized": true});
        }
        json!({"status": {}, "children": [config_map("cm", json!({}))]})
    }))
    .await;
    let spec = json!({
        "parentResource": {"apiVersion": "example.com/v1", "resource": "things",
                           "labelSelector": {"matchLabels": {"app": "one"}}},
        "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.example/sync"}},
                  "finalize": {"version": "v2", "webhook": {"url": "http://hooks.example/finalize"}}}});
    let mut emulator = emulator(&base, spec, selector());
    emulator.converge(8).await.unwrap();
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_some());
    let mut opted_out = parent(&emulator).clone();
    assert_eq!(opted_out["metadata"]["finalizers"], json!([FINALIZER]));
    opted_out["metadata"]["labels"] = json!({"app": "other"});
    emulator.update(opted_out);
    emulator.converge(8).await.unwrap();
    let after = parent(&emulator);
    assert!(
        after["metadata"]["finalizers"]
            .as_array()
            .is_none_or(Vec::is_empty),
        "{after}"
    );
    assert_eq!(after["status"]["finalized"], true);
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_none());
    let hooks: Vec<&str> = emulator.calls.iter().map(|c| c.hook).collect();
    assert!(hooks.contains(&"finalize"), "{hooks:?}");
}

/// A hook that tags its answer with an ETag and answers 304 to a matching
/// If-None-Match; it counts the 304s.
async fn etag_hook() -> (String, Arc<AtomicU64>) {
    let not_modified = Arc::new(AtomicU64::new(0));
    let counted = not_modified.clone();
    let app = axum::Router::new().route(
        "/sync",
        post(move |headers: HeaderMap| {
            let counted = counted.clone();
            async move {
                let etag = "\"v1\"";
                if headers.get("if-none-match").and_then(|v| v.to_str().ok()) == Some(etag) {
                    counted.fetch_add(1, Ordering::SeqCst);
                    return StatusCode::NOT_MODIFIED.into_response();
                }
                let body =
                    json!({"status": {"tagged": true}, "children": [config_map("cm", json!({}))]});
                ([("etag", etag)], axum::Json(body)).into_response()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), not_modified)
}

#[tokio::test]
async fn an_enabled_etag_asks_with_if_none_match_and_reuses_the_kept_answer() {
    let (base, not_modified) = etag_hook().await;
    let with_etag = json!({"hooks": {"sync": {"version": "v2", "webhook": {
        "url": "http://hooks.example/sync", "etag": {"enabled": true}}}}});
    let mut emulator = emulator(&base, with_etag, selector());
    emulator.converge(8).await.unwrap();
    assert!(not_modified.load(Ordering::SeqCst) > 0);
    assert!(emulator.calls.iter().any(|c| c.status == 304));
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_some());
    assert_eq!(parent(&emulator)["status"]["tagged"], true);

    // Without etag enabled no If-None-Match is sent, so the hook never answers 304.
    let (base, not_modified) = etag_hook().await;
    let mut plain = emulator_for(&base);
    plain.converge(8).await.unwrap();
    assert_eq!(not_modified.load(Ordering::SeqCst), 0);
}

fn emulator_for(base: &str) -> metahooks::emulate::Emulator {
    emulator(base, json!({}), selector())
}

#[tokio::test]
async fn a_304_to_a_call_without_if_none_match_is_an_error() {
    let app = axum::Router::new().route("/sync", post(|| async { StatusCode::NOT_MODIFIED }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let with_etag = json!({"hooks": {"sync": {"version": "v2", "webhook": {
        "url": "http://hooks.example/sync", "etag": {"enabled": true}}}}});
    let mut emulator = emulator(&format!("http://{address}"), with_etag, selector());
    let error = emulator.converge(3).await.expect_err("refused");
    assert!(
        error.starts_with("[NonOkAnswer]") && error.contains("answered 304"),
        "{error}"
    );
}

#[test]
fn an_etag_timeout_without_a_cleanup_interval_is_refused_as_metacontroller_crashes_on_it() {
    let refused = registration(json!({"hooks": {"sync": {"webhook": {
        "url": "http://hooks.example/sync",
        "etag": {"enabled": true, "cacheTimeoutSeconds": 60}}}}}));
    let message = refused.expect_err("refused");
    assert!(message.contains("cacheCleanupSeconds"), "{message}");
    registration(json!({"hooks": {"sync": {"webhook": {
        "url": "http://hooks.example/sync",
        "etag": {"enabled": true, "cacheTimeoutSeconds": 60, "cacheCleanupSeconds": 120}}}}}))
    .unwrap();
}
