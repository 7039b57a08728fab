//! End to end with a real mock server: the Deployment our hook returns is run locally.
//! The ConfigMap's data is written to a temporary directory standing in for the volume
//! mount, and the mock container's arguments are run with `@stoplight/prism-cli` (the
//! program inside the default image). Only the mount path, host and port are rewritten,
//! so nothing binds beyond loopback and parallel runs do not collide.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a failed expectation is the point

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use metahooks::controllers::{Context, Registry};
use metahooks::protocol::Hook;
use serde_json::{Value, json};

struct Mock(Child);

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn children_for(spec: Value) -> Vec<Value> {
    let parent = json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "e2e", "namespace": "default", "generation": 1}, "spec": spec});
    let request = json!({"controller": {}, "parent": parent, "children": {}, "related": {}, "finalizing": false});
    let outcome = Registry::standard(Default::default()).call(
        "apimock",
        Hook::Sync,
        &serde_json::to_vec(&request).unwrap(),
        &Context::at(support::golden_now()),
    );
    let response: Value = serde_json::from_slice(&outcome.result.unwrap()).unwrap();
    assert_eq!(
        response["status"]["conditions"][0]["status"], "True",
        "{}",
        response["status"]
    );
    response["children"].as_array().unwrap().clone()
}

async fn serve_and_get(prism: &std::path::Path, definition: &str, path: &str) -> (u16, Value) {
    let (status, _, body) = serve_and_fetch(prism, json!({"definition": definition}), path).await;
    (status, body)
}

/// Runs Prism with our Deployment's arguments for an APIMock with `spec` and GETs `path`
/// (with an `Origin` header), returning status, headers and body.
async fn serve_and_fetch(
    prism: &std::path::Path,
    spec: Value,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let children = children_for(spec);
    let config_map = children.iter().find(|c| c["kind"] == "ConfigMap").unwrap();
    let deployment = children.iter().find(|c| c["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (file, content) in config_map["data"].as_object().unwrap() {
        std::fs::write(dir.path().join(file), content.as_str().unwrap()).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .map(|a| match a {
            "0.0.0.0" => "127.0.0.1".to_owned(),
            "4010" => port.to_string(),
            other => other.replacen(mount, &dir.path().to_string_lossy(), 1),
        })
        .collect();
    let _mock = Mock(
        Command::new(prism)
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prism starts"),
    );
    let url = format!("http://127.0.0.1:{port}{path}");
    let started = Instant::now();
    let client = reqwest::Client::new();
    loop {
        if let Ok(reply) = client
            .get(&url)
            .header("origin", "http://example.test")
            .send()
            .await
        {
            let status = reply.status().as_u16();
            let headers = reply.headers().clone();
            return (status, headers, reply.json().await.unwrap_or(Value::Null));
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "prism did not start serving {url} with args {args:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn prism_serves_examples_from_our_deployment() {
    let Some(prism) = support::oracles::tool("METAHOOKS_PRISM") else {
        return;
    };

    let swagger2 = r#"{"swagger": "2.0", "info": {"title": "Ping", "version": "1"}, "produces": ["application/json"],
        "paths": {"/ping": {"get": {"responses": {"200": {"description": "pong", "examples": {"application/json": {"pong": true}}}}}}}}"#;
    assert_eq!(
        serve_and_get(&prism, swagger2, "/ping").await,
        (200, json!({"pong": true}))
    );

    let openapi30 = "openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              example: [{name: rex}]\n";
    assert_eq!(
        serve_and_get(&prism, openapi30, "/pets").await,
        (200, json!([{"name": "rex"}]))
    );

    let openapi31 = "openapi: 3.1.0\ninfo: {title: Items, version: '1'}\npaths:\n  /items/{id}:\n    get:\n      parameters:\n        - {name: id, in: path, required: true, schema: {type: [integer, 'null']}}\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              examples:\n                one: {value: {id: 7, name: seven}}\n";
    assert_eq!(
        serve_and_get(&prism, openapi31, "/items/7").await,
        (200, json!({"id": 7, "name": "seven"}))
    );
}

/// An operation whose example breaks its own schema (`name` is required, `id` an integer).
const SLOPPY: &str = "openapi: 3.0.3\ninfo: {title: Items, version: '1'}\npaths:\n  /items/{id}:\n    get:\n      parameters:\n        - {name: id, in: path, required: true, schema: {type: integer}}\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema:\n                type: object\n                required: [id, name]\n                properties:\n                  id: {type: integer}\n                  name: {type: string}\n              example: {id: seven}\n";

#[tokio::test]
async fn prism_honours_the_mock_settings_of_the_spec() {
    let Some(prism) = support::oracles::tool("METAHOOKS_PRISM") else {
        return;
    };
    // Defaults: the example as written (flagged, not refused), with CORS headers.
    let (status, headers, body) =
        serve_and_fetch(&prism, json!({"definition": SLOPPY}), "/items/7").await;
    assert_eq!((status, body), (200, json!({"id": "seven"})));
    assert!(headers.contains_key("sl-violations"));
    assert!(headers.contains_key("access-control-allow-origin"));

    // errorOnViolations: the broken example becomes an error; cors: false drops the headers.
    let (status, headers, _) = serve_and_fetch(
        &prism,
        json!({"definition": SLOPPY, "mock": {"errorOnViolations": true, "cors": false}}),
        "/items/7",
    )
    .await;
    assert_eq!(status, 500);
    assert!(!headers.contains_key("access-control-allow-origin"));

    // dynamic with a seed: generated from the schema, not the example, and the same on
    // every start.
    let dynamic = json!({"definition": SLOPPY, "mock": {"dynamic": true, "seed": "s1"}});
    let (status, _, first) = serve_and_fetch(&prism, dynamic.clone(), "/items/7").await;
    let (_, _, again) = serve_and_fetch(&prism, dynamic, "/items/7").await;
    assert_eq!(status, 200);
    assert!(first["id"].is_i64() && first["name"].is_string(), "{first}");
    assert_eq!(first, again);
}
