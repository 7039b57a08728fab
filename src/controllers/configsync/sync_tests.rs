//! Every branch of a configsync sync, through the registry with scripted sources: no
//! or bad annotations, a missing Secret, pending, fresh, failing and unusable fetches
//! (the served ConfigMap kept).

use std::sync::Arc;

use serde_json::{Value, json};

use super::{ERROR, GIT_URL, INTERVAL, PATH, REVISION, SECRET};
use crate::controllers::{ControllerSettings, Registry};
use crate::protocol::Hook;
use crate::source::FetchError;
use crate::source::fake::FakeSources;

const URL: &str = "https://git.example.com/team/config.git";

struct Harness {
    registry: Registry,
    sources: Arc<FakeSources>,
}

impl Harness {
    fn new() -> Harness {
        let sources = Arc::new(FakeSources::default());
        Harness {
            registry: Registry::standard(ControllerSettings::default())
                .with_sources(sources.clone()),
            sources,
        }
    }

    fn sync(&self, annotations: Value, attachments: &[Value]) -> Value {
        let mut observed = json!({"ConfigMap.v1": {}});
        for attachment in attachments {
            observed["ConfigMap.v1"][format!(
                "team/{}",
                attachment["metadata"]["name"].as_str().unwrap_or_default()
            )] = attachment.clone();
        }
        let request = json!({
            "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
            "object": {"apiVersion": "apps/v1", "kind": "Deployment",
                       "metadata": {"name": "web", "namespace": "team", "uid": "u", "annotations": annotations}},
            "attachments": observed, "related": {},
        });
        let body = serde_json::to_vec(&request).unwrap_or_default();
        let ctx = self.registry.context(jiff::Timestamp::UNIX_EPOCH);
        match self
            .registry
            .call("configsync", Hook::Sync, &body, &ctx)
            .result
        {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(error) => panic!("the hook refused the call: {error}"),
        }
    }
}

fn annotations() -> Value {
    json!({GIT_URL: URL, PATH: "conf"})
}

fn attachments(answer: &Value) -> Vec<Value> {
    answer["attachments"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn without_a_usable_source_nothing_is_fetched_and_the_error_says_why() {
    let harness = Harness::new();
    let missing = harness.sync(json!({}), &[]);
    assert!(
        missing["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.contains("is missing"))
    );
    assert_eq!(missing["attachments"], json!([]));
    let bad_interval = harness.sync(json!({GIT_URL: URL, INTERVAL: "soon"}), &[]);
    assert!(
        bad_interval["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.contains("whole number"))
    );
    assert_eq!(bad_interval["resyncAfterSeconds"], 60);
    let no_secret = harness.sync(json!({GIT_URL: URL, SECRET: "creds"}), &[]);
    assert!(
        no_secret["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.contains("configsync.metahooks.io/credentials=true"))
    );
    assert!(harness.sources.lookups().is_empty());
}

#[test]
fn a_fetch_in_progress_attaches_nothing_yet_and_asks_again_soon() {
    let harness = Harness::new();
    let answer = harness.sync(annotations(), &[]);
    assert_eq!(answer["attachments"], json!([]));
    assert_eq!(answer["annotations"][ERROR], Value::Null);
    assert_eq!(answer["resyncAfterSeconds"], 2);
}

#[test]
fn fetched_files_are_attached_and_failures_keep_them() {
    let harness = Harness::new();
    harness.sources.serve(
        URL,
        "main@sha1:a",
        &[("app.conf", "a=1\n"), ("nested/db.ini", "[db]\n")],
        false,
        Some(1),
    );
    let first = harness.sync(annotations(), &[]);
    let attached = attachments(&first);
    assert_eq!(
        attached.first().map(|c| c["data"].clone()),
        Some(json!({"app.conf": "a=1\n", "nested__db.ini": "[db]\n"}))
    );
    assert_eq!(first["annotations"][REVISION], "main@sha1:a");
    assert_eq!(first["resyncAfterSeconds"], 60);

    harness.sources.fail(
        URL,
        FetchError::Unreachable {
            url: URL.to_owned(),
            detail: "connection refused".to_owned(),
        },
    );
    let failing = harness.sync(annotations(), &attached);
    assert_eq!(attachments(&failing), attached);
    assert!(
        failing["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.ends_with("(still serving main@sha1:a)"))
    );

    harness.sources.serve(
        URL,
        "main@sha1:b",
        &[("bad name.conf", "x")],
        false,
        Some(2),
    );
    let unusable = harness.sync(annotations(), &attached);
    assert_eq!(attachments(&unusable), attached);
    assert!(
        unusable["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.contains("cannot be a ConfigMap key"))
    );
}
