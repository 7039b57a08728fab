//! configsync driven by the emulator against a real `git daemon` on loopback: sync,
//! change, fetch failure (the last ConfigMap stays), and opt-out by removing the
//! annotation (finalize removes the attachment and the annotations).

use crate::support;

use std::sync::Arc;

use metahooks::controllers::{ControllerSettings, Registry};
use metahooks::server::{Clock, Server};
use metahooks::source::fetcher::Fetcher;
use metahooks::source::policy::Policy;
use serde_json::{Value, json};
use support::emulator::Emulator;
use support::servers::{GitDaemon, Repo};

fn workload(kind: &str, annotations: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "web", "namespace": "team-a", "annotations": annotations},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
}

fn target(emulator: &Emulator, kind: &str) -> Value {
    emulator
        .get("apps/v1", kind, "team-a", "web")
        .cloned()
        .unwrap()
}

fn annotation(object: &Value, key: &str) -> Option<String> {
    object["metadata"]["annotations"]
        .get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

async fn settle(
    emulator: &mut Emulator,
    fetcher: &Fetcher,
    what: &str,
    done: impl Fn(&Emulator) -> bool,
) {
    support::emulator::settle(emulator, fetcher, "Deployment", what, done).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configsync_follows_git_and_cleans_up_on_opt_out() {
    let repo = Repo::new();
    repo.commit(&[("production/extra/mime.types", "text/html html\n")]);
    let mut daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let policy = Policy {
        extra_schemes: ["git".to_owned()].into(),
        allow_private_addresses: true,
        ..Policy::default()
    };
    let fetcher = support::fetcher(policy, cache.path());
    let registry =
        Registry::standard(ControllerSettings::default()).with_sources(Arc::new(fetcher.clone()));
    let server = Server::start(support::local_settings(), registry, Clock::System)
        .await
        .unwrap();
    let mut emulator = support::emulator::for_repository(&format!("http://{}", server.hook_addr));

    for kind in ["Deployment", "StatefulSet"] {
        let annotations = json!({"configsync.metahooks.io/git-url": daemon.url(), "configsync.metahooks.io/path": "production", "unrelated": "kept"});
        let base = format!("server {{ listen 80; }} # {kind}\n");
        repo.commit(&[("production/site.conf", base.as_str())]);
        fetcher.expire().await;
        emulator.objects.clear();
        emulator.apply(workload(kind, annotations.clone()));
        settle(&mut emulator, &fetcher, "first sync", |e| {
            e.get("v1", "ConfigMap", "team-a", "web-configsync")
                .is_some()
        })
        .await;
        let config = emulator
            .get("v1", "ConfigMap", "team-a", "web-configsync")
            .unwrap()
            .clone();
        assert_eq!(config["data"]["site.conf"], base, "{kind}");
        assert_eq!(config["data"]["extra__mime.types"], "text/html html\n");
        assert_eq!(
            config["metadata"]["annotations"]["metacontroller.k8s.io/decorator-controller"],
            "configsync"
        );
        let workload_now = target(&emulator, kind);
        let revision = annotation(&workload_now, "configsync.metahooks.io/revision").unwrap();
        assert!(revision.starts_with("main@sha1:"), "{revision}");
        assert_eq!(
            annotation(&workload_now, "configsync.metahooks.io/error"),
            None
        );
        assert_eq!(
            annotation(&workload_now, "unrelated").as_deref(),
            Some("kept")
        );
        // Only the (fake) workload controller writes status; the decorator leaves it alone.
        let workload_fields = [
            "observedGeneration",
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
            "currentReplicas",
            "conditions",
        ];
        let status_keys: Vec<&String> = workload_now["status"]
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        assert!(
            status_keys
                .iter()
                .all(|k| workload_fields.contains(&k.as_str())),
            "{status_keys:?}"
        );

        // A change in git reaches the ConfigMap.
        repo.commit(&[("production/site.conf", "server { listen 8080; }\n")]);
        fetcher.expire().await;
        settle(&mut emulator, &fetcher, "change", |e| {
            e.get("v1", "ConfigMap", "team-a", "web-configsync")
                .unwrap()["data"]["site.conf"]
                == "server { listen 8080; }\n"
        })
        .await;
        assert_ne!(
            annotation(&target(&emulator, kind), "configsync.metahooks.io/revision").unwrap(),
            revision
        );

        // Source down: the error is reported on the target, the ConfigMap stays.
        daemon.stop();
        fetcher.expire().await;
        settle(&mut emulator, &fetcher, "failure", |e| {
            annotation(&target(e, kind), "configsync.metahooks.io/error").is_some()
        })
        .await;
        let error = annotation(&target(&emulator, kind), "configsync.metahooks.io/error").unwrap();
        assert!(
            error.contains("cannot reach") && error.contains("still serving"),
            "{error}"
        );
        assert_eq!(
            emulator
                .get("v1", "ConfigMap", "team-a", "web-configsync")
                .unwrap()["data"]["site.conf"],
            "server { listen 8080; }\n"
        );
        daemon.restart();
        fetcher.expire().await;
        settle(&mut emulator, &fetcher, "recovery", |e| {
            annotation(&target(e, kind), "configsync.metahooks.io/error").is_none()
        })
        .await;

        // Opt out: remove the annotation; finalize removes the attachment and our annotations.
        let mut opted_out = target(&emulator, kind);
        opted_out["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove("configsync.metahooks.io/git-url");
        emulator.apply(opted_out);
        settle(&mut emulator, &fetcher, "opt-out", |e| {
            e.get("v1", "ConfigMap", "team-a", "web-configsync")
                .is_none()
        })
        .await;
        let after = target(&emulator, kind);
        assert_eq!(annotation(&after, "configsync.metahooks.io/revision"), None);
        assert_eq!(annotation(&after, "unrelated").as_deref(), Some("kept"));
        assert!(
            after["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty),
            "finalizer released"
        );
        assert!(
            emulator
                .calls
                .iter()
                .any(|c| c.controller == "configsync" && c.hook == "finalize")
        );
    }
}
