//! How the emulator decodes and waits for answers, as Metacontroller's webhook client
//! does (pkg/hooks/webhook.go): type errors fail in every mode, duplicate fields where it
//! decodes strictly, and a hook slower than `webhook.timeout` gets no answer applied.

use std::time::Duration;

use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::json;

/// A sync hook answering `body` as it is, after `delay`.
async fn raw_hook(body: &'static str, delay: Duration) -> String {
    let app = axum::Router::new().route(
        "/sync",
        post(move || async move {
            tokio::time::sleep(delay).await;
            ([("content-type", "application/json")], body)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
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
