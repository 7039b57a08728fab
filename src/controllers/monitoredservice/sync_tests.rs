//! Every branch of a MonitoredService sync, through the registry with scripted sources:
//! no source, pending, fresh, failing and invalid (the running config kept), a replica
//! that is behind, and specs that cannot be used.

use std::time::Duration;

use serde_json::{Value, json};

use super::children::CONFIG_HASH_ANNOTATION;
use crate::controllers::fixtures::{Harness, Request, child, children, condition};
use crate::protocol::Hook;
use crate::source::FetchError;

const URL: &str = "https://git.example.com/team/config.git";

trait Sync {
    fn sync(&self, spec: Value, observed: &[Value]) -> Value;
}

impl Sync for Harness {
    fn sync(&self, spec: Value, observed: &[Value]) -> Value {
        let request = Request::composite(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "web",
            "team",
        )
        .spec(spec)
        .observing(observed);
        self.call("monitoredservice", Hook::Sync, &request)
    }
}

fn spec() -> Value {
    json!({"image": "web:1", "format": "env",
           "source": {"git": {"url": URL, "ref": "main", "path": "app.env"}}})
}

fn hash(answer: &Value) -> &Value {
    &child(answer, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        [CONFIG_HASH_ANNOTATION]
}

#[test]
fn without_a_source_the_deployment_is_plain_and_nothing_is_asked_again() {
    let harness = Harness::new();
    let answer = harness.sync(json!({"image": "web:1"}), &[]);
    assert_eq!(condition(&answer, "Fetched")["reason"], "NoSource");
    assert!(child(&answer, "Deployment").is_object());
    assert!(answer.get("resyncAfterSeconds").is_none());
    assert!(harness.sources.lookups().is_empty());
}

#[test]
fn a_first_fetch_in_progress_builds_nothing_and_asks_again_soon() {
    let harness = Harness::new();
    let answer = harness.sync(spec(), &[]);
    assert_eq!(answer["children"], json!([]));
    assert_eq!(condition(&answer, "Fetched")["reason"], "FetchPending");
    assert_eq!(condition(&answer, "ConfigValid")["reason"], "NoConfig");
    assert_eq!(answer["resyncAfterSeconds"], 2);
    assert_eq!(
        harness.sources.lookups(),
        [(URL.to_owned(), Duration::from_secs(60))]
    );
}

#[test]
fn a_fetched_config_is_built_and_polled_at_the_interval() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    let answer = harness.sync(spec(), &[]);
    assert_eq!(child(&answer, "ConfigMap")["data"], json!({"A": "1"}));
    assert_eq!(answer["status"]["revision"], "main@sha1:a");
    assert_eq!(answer["status"]["configHash"], *hash(&answer));
    assert_eq!(answer["resyncAfterSeconds"], 60);
}

#[test]
fn a_failing_fetch_or_an_invalid_config_keeps_the_running_one() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    let first = harness.sync(spec(), &[]);
    let observed = children(&first);

    harness.sources.fail(
        URL,
        FetchError::AuthFailed {
            url: URL.to_owned(),
        },
    );
    let failing = harness.sync(spec(), &observed);
    assert_eq!(condition(&failing, "Fetched")["reason"], "AuthFailed");
    assert!(
        condition(&failing, "Fetched")["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("still running main@sha1:a"))
    );
    assert_eq!(hash(&failing), hash(&first));
    assert_eq!(condition(&failing, "Ready")["reason"], "FetchFailing");

    harness.sources.serve(
        URL,
        "main@sha1:b",
        &[("app.env", "not an env line\n")],
        true,
        Some(200),
    );
    let invalid = harness.sync(spec(), &observed);
    assert_eq!(
        condition(&invalid, "ConfigValid")["reason"],
        "InvalidEnvFile"
    );
    assert_eq!(hash(&invalid), hash(&first));
    assert_eq!(invalid["status"]["revision"], "main@sha1:a");
}

#[test]
fn a_replica_with_an_older_copy_keeps_the_newer_config_and_refreshes() {
    let ahead = Harness::new();
    ahead.sources.serve(
        URL,
        "main@sha1:new",
        &[("app.env", "A=2\n")],
        true,
        Some(200),
    );
    let newer = ahead.sync(spec(), &[]);
    let behind = Harness::new();
    // The older copy carries the later commit date: dates decide nothing.
    behind.sources.serve(
        URL,
        "main@sha1:old",
        &[("app.env", "A=1\n")],
        true,
        Some(300),
    );
    behind.sources.ran_ahead("main@sha1:new");
    let answer = behind.sync(spec(), &children(&newer));
    assert_eq!(hash(&answer), hash(&newer));
    assert_eq!(answer["resyncAfterSeconds"], 2);
    assert!(
        behind
            .sources
            .lookups()
            .iter()
            .any(|(_, interval)| interval.is_zero())
    );
    assert_eq!(condition(&answer, "Fetched")["status"], "True");
    // A replica that cannot catch up says so, and still keeps what runs.
    behind.sources.fail(
        URL,
        crate::source::FetchError::Unreachable {
            url: "https://git.example/config.git".to_owned(),
            detail: "the remote hung up".to_owned(),
        },
    );
    let stuck = behind.sync(spec(), &children(&newer));
    assert_eq!(hash(&stuck), hash(&newer));
    let fetched = condition(&stuck, "Fetched");
    assert_eq!(fetched["status"], "False");
    let message = fetched["message"].as_str().unwrap();
    assert!(
        message.contains("the remote hung up") && message.contains("still running main@sha1:new"),
        "{message}"
    );
}

#[test]
fn a_spec_that_cannot_be_used_keeps_what_runs() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    let first = harness.sync(spec(), &[]);
    let observed = children(&first);

    let unreadable = harness.sync(json!({"image": 7}), &observed);
    assert_eq!(
        condition(&unreadable, "ConfigValid")["reason"],
        "InvalidSpec"
    );
    assert_eq!(
        unreadable["children"].as_array().map(Vec::len),
        Some(observed.len())
    );

    // A missing Secret stops the fetch, not the spec: Fetched says why, what runs stays
    // valid, and the children are rebuilt from the running config.
    let mut with_secret = spec();
    with_secret["source"]["git"]["secretRef"] = json!({"name": "creds"});
    let no_secret = harness.sync(with_secret.clone(), &observed);
    let fetched = condition(&no_secret, "Fetched");
    assert_eq!(
        (&fetched["status"], &fetched["reason"]),
        (&json!("False"), &json!("SecretNotFound"))
    );
    let valid = condition(&no_secret, "ConfigValid");
    assert_eq!(
        (&valid["status"], &valid["reason"]),
        (&json!("True"), &json!("Valid"))
    );
    assert_eq!(condition(&no_secret, "Ready")["reason"], "FetchFailing");
    assert_eq!(hash(&no_secret), hash(&first));
    // ... and with nothing running, nothing is built, and it asks again at the interval.
    let nothing = harness.sync(with_secret, &[]);
    assert_eq!(nothing["children"], json!([]));
    assert_eq!(nothing["resyncAfterSeconds"], 60);
    assert_eq!(condition(&nothing, "ConfigValid")["reason"], "NoConfig");
    assert_eq!(condition(&nothing, "Fetched")["reason"], "SecretNotFound");
}

/// A config fetched and running, as the first answer holds it.
fn running_config(harness: &Harness) -> Value {
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    harness.sync(spec(), &[])
}

/// A restarted server (or one that let its copy go under the snapshot budget): the
/// running config is only in the observed ConfigMap, and nothing has failed.
fn forget_the_copy(harness: &Harness) {
    harness.sources.set(
        URL,
        crate::source::SourceState {
            snapshot: None,
            error: None,
            pending: true,
            resync_within: None,
            after_running: true,
        },
    );
}

#[test]
fn a_server_without_its_own_copy_keeps_what_runs_and_says_fetched() {
    let harness = Harness::new();
    let observed = children(&running_config(&harness));
    let with_copy = harness.sync(spec(), &observed);
    forget_the_copy(&harness);
    let without = harness.sync(spec(), &observed);
    assert_eq!(condition(&without, "Fetched")["status"], "True");
    assert_eq!(hash(&without), hash(&with_copy));
    for kind in ["Ready", "ConfigValid"] {
        assert_eq!(
            (
                condition(&without, kind)["status"].clone(),
                condition(&without, kind)["reason"].clone()
            ),
            (
                condition(&with_copy, kind)["status"].clone(),
                condition(&with_copy, kind)["reason"].clone()
            ),
            "{kind} is as it was"
        );
    }
    assert_eq!(without["status"]["revision"], "main@sha1:a");
}

#[test]
fn a_held_config_without_its_revision_keeps_running_and_no_revision_is_invented() {
    let harness = Harness::new();
    let first = running_config(&harness);
    // Someone (or an older writer) left the held ConfigMap without its revision, and
    // this server has no copy of its own.
    let mut observed = children(&first);
    for object in &mut observed {
        if object["kind"] == "ConfigMap" {
            let annotations = object["metadata"]["annotations"].as_object_mut().unwrap();
            assert!(annotations.remove("config.metahooks.io/revision").is_some());
        }
    }
    forget_the_copy(&harness);
    let answer = harness.sync(spec(), &observed);
    assert_eq!(hash(&answer), hash(&first), "what runs keeps running");
    let held = child(&answer, "ConfigMap");
    assert!(
        held["metadata"]["annotations"]
            .get("config.metahooks.io/revision")
            .is_none(),
        "{held}"
    );
    assert!(answer["status"].get("revision").is_none(), "{answer}");
    let valid = condition(&answer, "ConfigValid");
    assert_eq!(valid["status"], "True");
    assert!(
        valid["message"]
            .as_str()
            .unwrap()
            .contains("a config of unknown revision"),
        "{valid}"
    );
}

#[test]
fn a_parent_of_another_kind_is_refused_by_name() {
    let harness = Harness::new();
    let apimock = Request::composite("apirator.io/v1alpha1", "APIMock", "shop", "team")
        .spec(json!({"definition": "openapi: 3.0.3"}));
    let body = serde_json::to_vec(apimock.value()).unwrap_or_default();
    let ctx = harness.registry.context(jiff::Timestamp::UNIX_EPOCH);
    for hook in [Hook::Sync, Hook::Customize] {
        let outcome = harness.registry.call("monitoredservice", hook, &body, &ctx);
        let error = outcome
            .result
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            error.contains("MonitoredService") && error.contains("APIMock"),
            "{hook}: {error}"
        );
    }
}

/// A 400 KB URL was held many times over by the engine, in its keys, metric labels and
/// logs: it is refused where it enters, naming the field and the limit, and never asked
/// of the engine. What runs keeps running.
#[test]
fn a_string_over_its_limit_is_refused_where_it_enters() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    let first = harness.sync(spec(), &[]);
    let observed = children(&first);
    let asked = harness.sources.lookups().len();
    let long_url = format!("https://git.example.com/{}", "a".repeat(400_000));
    let mut too_long = spec();
    too_long["source"]["git"]["url"] = json!(long_url);
    let refused = harness.sync(too_long, &observed);
    let valid = condition(&refused, "ConfigValid");
    assert_eq!(valid["reason"], "InvalidSpec");
    let message = valid["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("spec.source.git.url is 400024 bytes long; at most 2048"),
        "{message}"
    );
    assert_eq!(harness.sources.lookups().len(), asked, "nothing asked");
    assert_eq!(hash(&refused), hash(&first), "what runs keeps running");
    let mut long_image = spec();
    long_image["image"] = json!("i".repeat(5000));
    let refused = harness.sync(long_image, &observed);
    let message = condition(&refused, "ConfigValid")["message"].clone();
    assert!(
        message
            .as_str()
            .is_some_and(|m| m.starts_with("spec.image is 5000 bytes")),
        "{message}"
    );
}

/// The git block is the one APIMock's definition uses; its `root` names an APIMock's root
/// document and means nothing for a config, so it is refused by name, never ignored.
#[test]
fn a_git_root_is_refused_with_the_field_named() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    let first = harness.sync(spec(), &[]);
    let asked = harness.sources.lookups().len();
    let mut with_root = spec();
    with_root["source"]["git"]["root"] = json!("openapi.yaml");
    let refused = harness.sync(with_root, &children(&first));
    let valid = condition(&refused, "ConfigValid");
    assert_eq!(valid["reason"], "InvalidSpec");
    let message = valid["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("spec.source.git.root "), "{message}");
    assert_eq!(harness.sources.lookups().len(), asked, "nothing asked");
    assert_eq!(hash(&refused), hash(&first), "what runs keeps running");
}

#[test]
fn a_config_map_name_an_apimock_holds_is_reported_as_taken() {
    let harness = Harness::new();
    harness
        .sources
        .serve(URL, "main@sha1:a", &[("app.env", "A=1\n")], true, Some(100));
    // An APIMock called `web-config` owns the ConfigMap this service's config needs.
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-config", "namespace": "team", "uid": "c-1",
            "ownerReferences": [{"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                "name": "web-config", "uid": "m-1", "controller": true}]}});
    let request = Request::composite(
        "services.example.com/v1alpha1",
        "MonitoredService",
        "web",
        "team",
    )
    .spec(spec())
    .related(json!({"ConfigMap.v1": {"team/web-config": theirs}}));
    let answer = harness.call("monitoredservice", Hook::Sync, &request);
    let ready = condition(&answer, "Ready");
    assert_eq!(ready["reason"], "NameTaken");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("ConfigMap web-config already exists and belongs to APIMock web-config")
            && message.contains("this MonitoredService cannot create its own"),
        "{message}"
    );
    // The customize hook asks for the objects of each child's name.
    let customize = harness.call("monitoredservice", Hook::Customize, &request);
    let names: Vec<&str> = customize["relatedResources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rule| rule["names"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(names, ["web-config", "web", "web"]);
}
