//! How the emulator decodes and waits for answers, as Metacontroller's webhook client
//! does (pkg/hooks/webhook.go): type errors fail in every mode, duplicate fields where it
//! decodes strictly, and a hook slower than `webhook.timeout` gets no answer applied.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::json;

/// Serves `app` on a loopback port; returns its base URL.
async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// A sync hook answering `body` as it is, after `delay`.
async fn raw_hook(body: &'static str, delay: Duration) -> String {
    let app = axum::Router::new().route(
        "/sync",
        post(move || async move {
            tokio::time::sleep(delay).await;
            ([("content-type", "application/json")], body)
        }),
    );
    serve(app).await
}

fn emulator(base: &str, version: &str, timeout: Option<&str>) -> Emulator {
    let mut kinds = Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    let mut webhook = json!({"url": "http://hooks.example/sync"});
    if let Some(timeout) = timeout {
        webhook["timeout"] = json!(timeout);
    }
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "things"},
               "spec": {"generateSelector": true,
                        "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {"sync": {"version": version, "webhook": webhook}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                          "metadata": {"name": "one", "namespace": "ns"}, "spec": {}}));
    emulator
}

async fn refused(body: &'static str, version: &str) -> String {
    let base = raw_hook(body, Duration::ZERO).await;
    let mut emulator = emulator(&base, version, None);
    let error = emulator.converge(5).await.expect_err("refused");
    assert!(
        emulator.get("v1", "ConfigMap", "ns", "cm").is_none(),
        "a refused answer applies nothing"
    );
    error
}

const CHILD: &str = r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}"#;

#[tokio::test]
async fn type_errors_fail_in_every_decoding_mode() {
    let as_object: &'static str =
        Box::leak(format!(r#"{{"status": {{}}, "children": {{"cm": {CHILD}}}}}"#).into_boxed_str());
    let text_seconds: &'static str = Box::leak(
        format!(r#"{{"status": {{}}, "children": [{CHILD}], "resyncAfterSeconds": "5"}}"#)
            .into_boxed_str(),
    );
    for version in ["v1", "v2"] {
        let error = refused(as_object, version).await;
        assert!(
            error.contains("cannot unmarshal object") && error.contains(".children"),
            "{error}"
        );
        let error = refused(text_seconds, version).await;
        assert!(
            error.contains("resyncAfterSeconds of type float64"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn duplicate_fields_fail_where_decoding_is_strict() {
    let body: &'static str = Box::leak(
        format!(r#"{{"status": {{"a": 1, "a": 2}}, "children": [{CHILD}]}}"#).into_boxed_str(),
    );
    let error = refused(body, "v2").await;
    assert!(error.contains("duplicate field \"status.a\""), "{error}");
    // v1 decodes loosely: the last value wins and the child is applied.
    let base = raw_hook(body, Duration::ZERO).await;
    let mut loose = emulator(&base, "v1", None);
    loose.converge(5).await.unwrap();
    assert!(loose.get("v1", "ConfigMap", "ns", "cm").is_some());
}

#[tokio::test]
async fn a_hook_slower_than_its_webhook_timeout_gets_nothing_applied() {
    let body: &'static str =
        Box::leak(format!(r#"{{"status": {{}}, "children": [{CHILD}]}}"#).into_boxed_str());
    let base = raw_hook(body, Duration::from_secs(3)).await;
    let mut emulator = emulator(&base, "v2", Some("300ms"));
    let error = emulator.converge(3).await.expect_err("timed out");
    assert!(error.contains("webhook timeout of 300ms"), "{error}");
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_none());
}

/// A sync hook answering `answer(n)` to its n-th call (from 0); counts its calls.
async fn counting_hook<F>(answer: F) -> (String, Arc<AtomicU64>)
where
    F: Fn(u64) -> axum::response::Response + Clone + Send + Sync + 'static,
{
    use axum::response::IntoResponse;
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let app = axum::Router::new().route(
        "/sync",
        post(move || {
            let (counter, answer) = (counter.clone(), answer.clone());
            async move { answer(counter.fetch_add(1, Ordering::SeqCst)).into_response() }
        }),
    );
    (serve(app).await, calls)
}

/// A sync hook answering 429 (Retry-After: 3) to its first `throttled` calls, then
/// `body`; counts its calls.
async fn throttling_hook(throttled: u64, body: &'static str) -> (String, Arc<AtomicU64>) {
    use axum::response::IntoResponse;
    counting_hook(move |call| {
        if call < throttled {
            return (
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "3"), ("content-type", "text/plain")],
                "slow down",
            )
                .into_response();
        }
        (
            axum::http::StatusCode::OK,
            [("retry-after", "0"), ("content-type", "application/json")],
            body,
        )
            .into_response()
    })
    .await
}

#[tokio::test]
async fn a_429_is_a_requeue_not_an_error_unless_it_never_ends() {
    let body: &'static str =
        Box::leak(format!(r#"{{"status": {{}}, "children": [{CHILD}]}}"#).into_boxed_str());
    let (base, _) = throttling_hook(2, body).await;
    let mut patient = emulator(&base, "v2", None);
    patient.converge(10).await.unwrap();
    assert!(patient.get("v1", "ConfigMap", "ns", "cm").is_some());
    let (base, _) = throttling_hook(u64::MAX, body).await;
    let mut stuck = emulator(&base, "v2", None);
    let error = stuck
        .converge(10)
        .await
        .expect_err("a hook that never stops throttling");
    assert!(
        error.starts_with("[NonOkAnswer]") && error.contains("429"),
        "{error}"
    );
}

#[tokio::test]
async fn a_parent_without_a_selector_gets_no_hook_call() {
    let (base, calls) = throttling_hook(0, r#"{"status": {}, "children": []}"#).await;
    let mut kinds = Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "things"},
               "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {"sync": {"webhook": {"url": "http://hooks.example/sync"}}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(&base, vec![registration]);
    emulator.kinds = kinds;
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                          "metadata": {"name": "one", "namespace": "ns"}, "spec": {}}));
    let error = emulator.converge(3).await.expect_err("refused");
    assert!(
        error.starts_with("[InvalidParent]") && error.contains(".spec.selector"),
        "{error}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_terminating_parent_without_a_finalize_hook_gets_no_new_children() {
    let body: &'static str =
        Box::leak(format!(r#"{{"status": {{}}, "children": [{CHILD}]}}"#).into_boxed_str());
    let (base, _) = throttling_hook(0, body).await;
    let mut emulator = emulator(&base, "v2", None);
    // A parent already being deleted (held by another finalizer) when first seen.
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                          "metadata": {"name": "going", "namespace": "ns", "finalizers": ["someone.else/hold"],
                                       "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}}));
    emulator.converge(5).await.unwrap();
    let owners: Vec<String> = ["cm"]
        .iter()
        .filter_map(|name| emulator.get("v1", "ConfigMap", "ns", name))
        .flat_map(|cm| {
            cm["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|r| r["name"].as_str().map(str::to_owned))
        .collect();
    assert!(!owners.contains(&"going".to_owned()), "{owners:?}");
}

#[tokio::test]
async fn a_child_the_hook_replaces_is_no_dropped_child() {
    // step-1 while the first syncs run, then step-2 for good, the parent unchanged: a
    // replacement the hook chose (a job's next step), not a lost child.
    use axum::response::IntoResponse;
    let (base, _) = counting_hook(|call| {
        let step = if call < 2 { 1 } else { 2 };
        axum::Json(json!({"status": {}, "children": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("step-{step}")}}]}))
        .into_response()
    })
    .await;
    let mut emulator = emulator(&base, "v2", None);
    emulator.converge(10).await.unwrap();
    assert!(emulator.get("v1", "ConfigMap", "ns", "step-2").is_some());
    assert!(emulator.get("v1", "ConfigMap", "ns", "step-1").is_none());
}

#[tokio::test]
async fn a_refused_child_does_not_stop_the_others_or_the_status() {
    // `Bad_Name` breaks the API server's naming rules; `cm` is fine. Metacontroller's
    // ManageChildren goes on after a failed write, and syncParentObject writes the
    // status regardless (it returns the manage error afterwards).
    let body = r#"{"status": {"seen": true}, "children": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}]}"#;
    let base = raw_hook(body, Duration::ZERO).await;
    let mut emulator = emulator(&base, "v2", None);
    let error = emulator
        .converge(3)
        .await
        .expect_err("the bad child is refused");
    assert!(error.contains("APIServerRefused"), "{error}");
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_some());
    assert!(emulator.get("v1", "ConfigMap", "ns", "Bad_Name").is_none());
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert_eq!(parent["status"]["seen"], true);
}

#[tokio::test]
async fn a_null_answer_deletes_every_child_and_says_so_by_name() {
    use axum::response::IntoResponse;
    // The first answers ask for a ConfigMap; then the hook forgets to return anything.
    let (base, _) = counting_hook(|call| {
        if call < 2 {
            return axum::Json(json!({"status": {"ok": true}, "children": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}]}))
            .into_response();
        }
        ([("content-type", "application/json")], "null").into_response()
    })
    .await;
    let mut emulator = emulator(&base, "v2", None);
    let error = emulator
        .converge(10)
        .await
        .expect_err("a null answer is a finding");
    assert!(
        error.contains("AllChildrenDeleted") && error.contains("deleted every child (1 here)"),
        "{error}"
    );
    // What Metacontroller does with it: the child is gone, the status is cleared.
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_none());
    let parent = emulator
        .get("example.com/v1", "Thing", "ns", "one")
        .unwrap();
    assert!(parent["status"].get("ok").is_none(), "{parent}");
}

#[tokio::test]
async fn a_config_map_with_a_number_in_its_data_is_refused_as_the_api_server_does() {
    // What a newcomer's hook writes: a number where the API server wants a string.
    let body = r#"{"status": {}, "children": [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
         "data": {"retries": 2}}]}"#;
    let base = raw_hook(body, Duration::ZERO).await;
    let mut emulator = emulator(&base, "v2", None);
    let error = emulator.converge(3).await.expect_err("refused");
    assert!(
        error.contains("APIServerRefused")
            && error.contains(
                "ConfigMap \"cm\" is invalid: data[retries]: json: cannot unmarshal number"
            ),
        "{error}"
    );
    assert!(emulator.get("v1", "ConfigMap", "ns", "cm").is_none());
}

#[tokio::test]
async fn a_crashed_hook_is_told_apart_from_a_server_that_is_not_running() {
    use tokio::io::AsyncReadExt;
    // A hook that reads the call and dies without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let crashing = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut connection, _)) = listener.accept().await else {
                return;
            };
            let mut request = vec![0u8; 4096];
            let _ = connection.read(&mut request).await;
            drop(connection);
        }
    });
    let mut crashed = emulator(&crashing, "v2", None);
    let error = crashed.converge(1).await.expect_err("no answer");
    assert!(
        error.contains("closed the connection without an answer (did it crash?)"),
        "{error}"
    );
    // Nothing listening at all.
    let closed = format!("http://127.0.0.1:{}", support::servers::closed_port());
    let mut down = emulator(&closed, "v2", None);
    let error = down.converge(1).await.expect_err("no server");
    assert!(
        error.contains("is the hook server running there?"),
        "{error}"
    );
}
