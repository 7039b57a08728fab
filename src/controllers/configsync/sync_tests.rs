//! Every branch of a configsync sync, through the registry with scripted sources: no
//! or bad annotations, a missing Secret, pending, fresh, failing and unusable fetches
//! (the served ConfigMap kept).

use serde_json::{Value, json};

use super::{ERROR, GIT_URL, INTERVAL, PATH, REVISION, SECRET};
use crate::controllers::fixtures::{Harness, Request};
use crate::protocol::Hook;
use crate::source::FetchError;

const URL: &str = "https://git.example.com/team/config.git";

trait Sync {
    fn sync(&self, annotations: Value, attachments: &[Value]) -> Value;
}

impl Sync for Harness {
    fn sync(&self, annotations: Value, attachments: &[Value]) -> Value {
        let request = Request::decorator("web", "team")
            .annotations(annotations)
            .observing(attachments);
        self.call("configsync", Hook::Sync, &request)
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
            .is_some_and(|e| e.starts_with("InvalidSpec: ") && e.contains("is missing"))
    );
    assert_eq!(missing["attachments"], json!([]));
    let bad_interval = harness.sync(json!({GIT_URL: URL, INTERVAL: "soon"}), &[]);
    assert!(
        bad_interval["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.starts_with("InvalidSpec: ") && e.contains("whole number"))
    );
    assert_eq!(bad_interval["resyncAfterSeconds"], 60);
    let no_secret = harness.sync(json!({GIT_URL: URL, SECRET: "creds"}), &[]);
    assert!(
        no_secret["annotations"][ERROR]
            .as_str()
            .is_some_and(|e| e.starts_with("SecretNotFound: ")
                && e.contains("configsync.metahooks.io/credentials=true"))
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
    assert!(failing["annotations"][ERROR].as_str().is_some_and(
        |e| e.starts_with("Unreachable: ") && e.ends_with("(still serving main@sha1:a)")
    ));

    harness.sources.serve(
        URL,
        "main@sha1:b",
        &[("bad name.conf", "x")],
        false,
        Some(2),
    );
    let unusable = harness.sync(annotations(), &attached);
    assert_eq!(attachments(&unusable), attached);
    assert!(unusable["annotations"][ERROR].as_str().is_some_and(|e| {
        e.starts_with("UnsupportedFileName: ") && e.contains("cannot be a ConfigMap key")
    }));
}

#[test]
fn a_workload_with_a_long_name_gets_a_configmap_the_api_server_accepts() {
    let harness = Harness::new();
    harness.sources.serve(
        URL,
        "main@sha1:a",
        &[("a/b.conf", "x"), ("a__b.conf", "y")],
        false,
        Some(1),
    );
    for length in [100, 242, 253] {
        let name = "w".repeat(length);
        let request = Request::decorator(&name, "team").annotations(annotations());
        let answer = harness.call("configsync", Hook::Sync, &request);
        // Two paths under one key are refused by name, not merged into one.
        assert!(
            answer["annotations"][ERROR]
                .as_str()
                .is_some_and(|e| e.contains("would share a ConfigMap key")),
            "{answer}"
        );
    }
    harness
        .sources
        .serve(URL, "main@sha1:b", &[("app.conf", "x")], false, Some(2));
    for length in [100, 242, 253] {
        let name = "w".repeat(length);
        let request = Request::decorator(&name, "team").annotations(annotations());
        let answer = harness.call("configsync", Hook::Sync, &request);
        let attached = attachments(&answer);
        let config_map = attached.first().unwrap_or_else(|| panic!("{answer}"));
        assert!(
            crate::apiserver::refusals(config_map).is_empty(),
            "{length}: {:?}",
            crate::apiserver::refusals(config_map)
        );
        assert_eq!(answer["annotations"][ERROR], Value::Null);
    }
}

#[test]
fn a_fetch_now_request_is_recorded_on_the_target_once_handled() {
    let harness = Harness::new();
    let asked = json!({GIT_URL: URL, PATH: "conf", crate::source::REQUESTED_AT: "t1"});
    let first = harness.sync(asked.clone(), &[]);
    assert_eq!(first["annotations"][super::HANDLED], "t1", "{first}");
    // Once recorded, the same value is not asked for again and not rewritten.
    let mut recorded = asked;
    recorded[super::HANDLED] = json!("t1");
    let again = harness.sync(recorded, &[]);
    assert!(
        again["annotations"].get(super::HANDLED).is_none(),
        "{again}"
    );
    let plain = harness.sync(annotations(), &[]);
    assert!(
        plain["annotations"].get(super::HANDLED).is_none(),
        "{plain}"
    );
}

#[test]
fn an_unknown_annotation_of_its_prefix_is_refused_by_name() {
    let harness = Harness::new();
    let typo = harness.sync(
        json!({GIT_URL: URL, "configsync.metahooks.io/pth": "conf"}),
        &[],
    );
    let error = typo["annotations"][ERROR].as_str().unwrap_or_default();
    assert!(
        error.contains("configsync.metahooks.io/pth") && error.contains("path"),
        "{typo}"
    );
    assert_eq!(typo["attachments"], json!([]), "nothing synced: {typo}");
    assert!(harness.sources.lookups().is_empty(), "nothing fetched");
    // Other prefixes are not configsync's business.
    let other = harness.sync(
        json!({GIT_URL: URL, PATH: "conf", "example.com/pth": "x"}),
        &[],
    );
    assert!(other["annotations"][ERROR].is_null(), "{other}");
}

#[test]
fn an_interval_below_the_minimum_is_raised_and_said() {
    let harness = Harness::new();
    let fast = harness.sync(json!({GIT_URL: URL, PATH: "conf", INTERVAL: "5"}), &[]);
    let warning = fast["annotations"][super::WARNING]
        .as_str()
        .unwrap_or_default();
    assert!(
        warning.contains("is 5") && warning.contains("every 10 s"),
        "{fast}"
    );
    let fine = harness.sync(json!({GIT_URL: URL, PATH: "conf", INTERVAL: "30"}), &[]);
    assert!(fine["annotations"][super::WARNING].is_null(), "{fine}");
}
