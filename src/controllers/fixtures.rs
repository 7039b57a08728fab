//! Test fixtures for controller tests: a registry over scripted sources, hook requests
//! built step by step, and readers for the answers.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ControllerSettings, Registry};
use crate::protocol::Hook;
use crate::source::fake::FakeSources;

/// The standard controllers, reading sources a test scripts.
pub struct Harness {
    pub registry: Registry,
    pub sources: Arc<FakeSources>,
}

impl Harness {
    pub fn new() -> Harness {
        let sources = Arc::new(FakeSources::default());
        Harness {
            registry: Registry::standard(ControllerSettings::default())
                .with_sources(sources.clone()),
            sources,
        }
    }

    /// The answer of `controller`'s `hook` to `request`, at the Unix epoch; a refused
    /// call or an answer that is not JSON fails the test.
    pub fn call(&self, controller: &str, hook: Hook, request: &Request) -> Value {
        let body = serde_json::to_vec(&request.value).unwrap_or_default();
        let ctx = self.registry.context(jiff::Timestamp::UNIX_EPOCH);
        match self.registry.call(controller, hook, &body, &ctx).result {
            // An answer that is not JSON fails the test: turning it into `null` would
            // let every "this child is absent" check pass on garbage.
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|error| {
                panic!(
                    "the answer is not JSON ({error}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            }),
            Err(error) => panic!("the hook refused the call: {error}"),
        }
    }
}

/// A v2 hook request, built step by step.
#[derive(Clone)]
pub struct Request {
    value: Value,
    /// `children` for a composite request, `attachments` for a decorator's.
    observed_field: &'static str,
    namespace: String,
}

impl Request {
    /// A composite sync request for a parent of `kind` named `name` in `namespace`, with
    /// nothing observed.
    pub fn composite(api_version: &str, kind: &str, name: &str, namespace: &str) -> Request {
        Request {
            value: json!({
                "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
                "parent": {"apiVersion": api_version, "kind": kind,
                           "metadata": {"name": name, "namespace": namespace, "generation": 1, "uid": "u"}},
                "children": {}, "related": {},
            }),
            observed_field: "children",
            namespace: namespace.to_owned(),
        }
    }

    /// A decorator sync request for a Deployment named `name` in `namespace`.
    pub fn decorator(name: &str, namespace: &str) -> Request {
        Request {
            value: json!({
                "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
                "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": name, "namespace": namespace, "uid": "u"}},
                "attachments": {}, "related": {},
            }),
            observed_field: "attachments",
            namespace: namespace.to_owned(),
        }
    }

    /// The parent's `spec`.
    pub fn spec(mut self, spec: Value) -> Request {
        self.value["parent"]["spec"] = spec;
        self
    }

    /// The decorated object's annotations.
    pub fn annotations(mut self, annotations: Value) -> Request {
        self.value["object"]["metadata"]["annotations"] = annotations;
        self
    }

    /// These objects exist as children (or attachments), in the request's namespace.
    pub fn observing(mut self, objects: &[Value]) -> Request {
        for object in objects {
            let type_key = format!(
                "{}.{}",
                object["kind"].as_str().unwrap_or_default(),
                object["apiVersion"].as_str().unwrap_or_default()
            );
            let key = format!(
                "{}/{}",
                self.namespace,
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            if let Some(groups) = self.value[self.observed_field].as_object_mut() {
                groups.entry(type_key).or_insert_with(|| json!({}))[key] = object.clone();
            }
        }
        self
    }

    /// The related objects Metacontroller sends.
    /// The request as JSON.
    pub fn value(&self) -> &Value {
        &self.value
    }

    pub fn related(mut self, related: Value) -> Request {
        self.value["related"] = related;
        self
    }
}

/// The answer's condition of `type_` (null when absent).
pub fn condition<'a>(answer: &'a Value, type_: &str) -> &'a Value {
    answer["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

/// The answer's child of `kind` (null when absent).
pub fn child<'a>(answer: &'a Value, kind: &str) -> &'a Value {
    answer["children"]
        .as_array()
        .and_then(|children| children.iter().find(|c| c["kind"] == kind))
        .unwrap_or(&Value::Null)
}

/// Every child of the answer, as a cluster would then hold them.
pub fn children(answer: &Value) -> Vec<Value> {
    answer["children"].as_array().cloned().unwrap_or_default()
}
