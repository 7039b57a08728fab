//! The "limit" an APIMock hook server is measured against: a server that does only the
//! work no hook server can skip (read the body, parse the request JSON, write a response
//! carrying the definition) and, with `--yaml`, one YAML parse of the definition, which
//! a server must do at least once per edited definition. No validation, no memo, no
//! safety bounds. `scripts/load.sh` runs it next to `metahooks serve` on the same
//! request bytes and prints the ratio.
//!
//! With `--floor` it is the ceiling of a resync answered from memory: read the body,
//! hash it (BLAKE3, as metahooks keys its whole-answer memo) and send the bytes
//! remembered for that hash, building them the JSON way only the first time. A memo hit
//! in metahooks cannot cost less than this.
//!
//! It also writes those request bytes, so both servers see exactly the same input:
//!
//! ```sh
//! cargo run --release --example limit_server -- request --kib 12 > req-12k.json
//! cargo run --release --example limit_server -- serve --listen 127.0.0.1:18080 [--yaml | --floor]
//! ```
//!
//! The definition's title carries `EDIT-000000000`; the load script's wrk Lua replaces
//! those digits with a counter to make every call an edited definition.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// Placeholder the load script rewrites to make a definition new.
const EDIT_MARKER: &str = "EDIT-000000000";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("request") => write_request(&args[1..]),
        Some("serve") => serve(&args[1..]),
        _ => Err(
            "usage: limit_server request --kib N | serve --listen ADDR [--yaml | --floor]".into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("limit_server: {message}");
            ExitCode::FAILURE
        }
    }
}

fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1))
        .map(String::as_str)
}

/// Prints a Metacontroller v2 sync request for an APIMock whose YAML definition makes the
/// whole request about `--kib` KiB (at least one operation). As in a cluster's steady
/// state, the observed ConfigMap already holds the definition, so a request carries it
/// twice.
fn write_request(args: &[String]) -> Result<(), String> {
    let kib: usize = flag_value(args, "--kib")
        .ok_or("request needs --kib N")?
        .parse()
        .map_err(|e| format!("--kib: {e}"))?;
    let mut operations = 1;
    let body = loop {
        let body = request(&definition_yaml(operations));
        if body.len() >= kib * 1024 {
            break body;
        }
        // Grow in proportion to the gap so a 2 MiB request takes a few rounds, not thousands.
        let per_operation = body.len() / operations;
        operations += ((kib * 1024 - body.len()) / per_operation).max(1);
    };
    println!("{body}");
    Ok(())
}

fn definition_yaml(operations: usize) -> String {
    let mut text =
        format!("openapi: 3.0.3\ninfo:\n  title: Load {EDIT_MARKER}\n  version: 1.0.0\npaths:\n");
    for i in 0..operations {
        text.push_str(&format!(
            "  /items{i}/{{id}}:\n    get:\n      operationId: getItem{i}\n      parameters:\n        - name: id\n          in: path\n          required: true\n          schema:\n            type: integer\n      responses:\n        '200':\n          description: item {i}\n          content:\n            application/json:\n              schema:\n                type: object\n                properties:\n                  id: {{type: integer}}\n                  name: {{type: string}}\n              example: {{id: {i}, name: item-{i}}}\n"
        ));
    }
    text
}

fn request(definition: &str) -> String {
    json!({
        "controller": {"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
                       "metadata": {"name": "apimock"}, "spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                   "metadata": {"name": "load", "namespace": "default", "generation": 1,
                                "uid": "5f1c0a52-0000-4000-8000-000000000001"},
                   "spec": {"definition": definition}},
        "children": {"ConfigMap.v1": {"load": {
                         "apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "load", "namespace": "default"},
                         "data": {"openapi.yaml": definition}}},
                     "Deployment.apps/v1": {}, "Service.v1": {},
                     "Ingress.networking.k8s.io/v1": {}},
        "related": {},
        "finalizing": false
    })
    .to_string()
}

fn serve(args: &[String]) -> Result<(), String> {
    let listen: SocketAddr = flag_value(args, "--listen")
        .unwrap_or("127.0.0.1:18080")
        .parse()
        .map_err(|e| format!("--listen: {e}"))?;
    let parse_yaml = args.iter().any(|arg| arg == "--yaml");
    let floor = args.iter().any(|arg| arg == "--floor");
    let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let remembered = Arc::new(Remembered::default());
        let app = Router::new()
            .route(
                "/apimock/sync",
                post(move |body: Bytes| async move {
                    if floor {
                        remembered.answer(&body)
                    } else {
                        answer(&body, parse_yaml)
                    }
                }),
            )
            .layer(DefaultBodyLimit::max(64 * 1024 * 1024));
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
        eprintln!("limit_server: listening on {listen} (yaml parse: {parse_yaml}, floor: {floor})");
        axum::serve(listener, app).await.map_err(|e| e.to_string())
    })
}

/// The floor's memory: answers by the BLAKE3 hash of the request they answer.
#[derive(Default)]
struct Remembered {
    answers: RwLock<HashMap<[u8; 32], Bytes>>,
}

impl Remembered {
    fn answer(&self, body: &[u8]) -> Response {
        let key = *blake3::hash(body).as_bytes();
        let known = self
            .answers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        let bytes = match known {
            Some(bytes) => bytes,
            None => match answer_bytes(body, false) {
                Ok(bytes) => {
                    let bytes = Bytes::from(bytes);
                    self.answers
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(key, bytes.clone());
                    bytes
                }
                Err(why) => return (StatusCode::BAD_REQUEST, why).into_response(),
            },
        };
        ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
    }
}

fn answer(body: &[u8], parse_yaml: bool) -> Response {
    match answer_bytes(body, parse_yaml) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(why) => (StatusCode::BAD_REQUEST, why).into_response(),
    }
}

/// The answer's bytes, or why the request is refused.
fn answer_bytes(body: &[u8], parse_yaml: bool) -> Result<Vec<u8>, &'static str> {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Err("request is not JSON");
    };
    let Some(definition) = request["parent"]["spec"]["definition"].as_str() else {
        return Err("no spec.definition");
    };
    if parse_yaml && serde_norway::from_str::<Value>(definition).is_err() {
        return Err("definition is not YAML");
    }
    let response = json!({
        "status": {},
        "children": [{"apiVersion": "v1", "kind": "ConfigMap",
                      "metadata": {"name": "load", "namespace": "default"},
                      "data": {"openapi.yaml": definition}}]
    });
    serde_json::to_vec(&response).map_err(|_| "the answer cannot be serialised")
}
