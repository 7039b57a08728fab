//! An axum hook tested in `cargo test`, in process: the emulator plays Metacontroller
//! against the router (request shape, apply rules, the API server's checks) with no
//! server, port or cluster. `cargo test -p metahooks-emulate --example axum_in_process`
#![allow(clippy::expect_used)] // a failed expectation is the test failing

use axum::{Json, Router, body::Body, http::Request, routing::post};
use metahooks_emulate::{Emulator, Kinds, Registration, Transport};
use serde_json::{Value, json};
use tower::ServiceExt;

/// The hook under test: each Greeting gets a ConfigMap holding its message.
async fn sync(Json(request): Json<Value>) -> Json<Value> {
    let (parent, name) = (&request["parent"], &request["parent"]["metadata"]["name"]);
    Json(json!({"status": {"greeted": true}, "children": [{
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{}-greeting", name.as_str().unwrap_or_default())},
        "data": {"message": parent["spec"]["message"]}}]}))
}

async fn greeting_becomes_a_config_map() {
    let app = Router::new().route("/sync", post(sync));
    let transport = Transport::in_process(move |path, body| {
        let request = Request::post(path).header("content-type", "application/json");
        let reply = app
            .clone()
            .oneshot(request.body(Body::from(body)).expect("a request"));
        async move {
            let reply = reply.await.expect("a router never fails");
            let status = reply.status().as_u16();
            let body = axum::body::to_bytes(reply.into_body(), 1 << 20).await;
            (status, body.expect("an answer under 1 MiB").to_vec())
        }
    });
    let mut kinds = Kinds::default();
    kinds.learn(&json!({"kind": "CustomResourceDefinition",
        "spec": {"names": {"plural": "greetings", "kind": "Greeting"}}}));
    let registration = json!({"kind": "CompositeController", "metadata": {"name": "greeter"},
        "spec": {"parentResource": {"apiVersion": "example.com/v1", "resource": "greetings"},
            "childResources": [{"apiVersion": "v1", "resource": "configmaps"}], "generateSelector": true,
            "hooks": {"sync": {"webhook": {"url": "http://greeter/sync"}}}}});
    let registration = Registration::parse(registration, &kinds).expect("a registration");
    let mut emulator = Emulator::with_transport(transport, vec![registration]);
    emulator.kinds = kinds;
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Greeting",
        "metadata": {"name": "hello", "namespace": "default"}, "spec": {"message": "hi"}}));
    emulator
        .converge(10)
        .await
        .expect("Metacontroller accepts every answer");
    let child = emulator.get("v1", "ConfigMap", "default", "hello-greeting");
    assert_eq!(
        child.expect("the hook's child exists")["data"]["message"],
        "hi"
    );
    let parent = emulator.get("example.com/v1", "Greeting", "default", "hello");
    assert_eq!(parent.expect("the parent")["status"]["greeted"], true);
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    greeting_becomes_a_config_map().await;
    println!("the emulator applied the hook's ConfigMap and status");
}

#[tokio::test]
async fn test_greeting_becomes_a_config_map() {
    greeting_becomes_a_config_map().await;
}
