//! Every pod we generate is admitted under Pod Security "restricted", checked with the
//! standard's controls (`metahooks::apiserver::pod_security`, whose own tests show
//! each control refusing): over every golden answer, and in the emulator, whose
//! namespaces labelled `pod-security.kubernetes.io/enforce` refuse the Pods of a
//! workload that breaks the level.

use crate::support;

use metahooks::apiserver::pod_security::{Level, pod_spec_of, violations};
use metahooks::emulate::Rule;
use metahooks::server::Clock;
use serde_json::{Value, json};

/// Every child workload the controllers built in the golden answers under
/// `hooks-tests/` (a workload kept exactly as the request observed it, as a controller
/// does while its spec or source is broken, was built by whoever made the request).
fn golden_workloads() -> Vec<(String, Value)> {
    let mut found = Vec::new();
    let mut dirs = vec![support::repo_dir().join("hooks-tests")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.file_name().is_none_or(|n| n != "response.json") {
                continue;
            }
            let answer = support::read_json(&path);
            let request = support::read_json(&path.with_file_name("request.json"));
            let observed_templates: Vec<&Value> = ["children", "attachments"]
                .iter()
                .filter_map(|field| request[field].as_object())
                .flat_map(|groups| groups.values())
                .filter_map(Value::as_object)
                .flat_map(|objects| objects.values())
                .filter_map(|object| object.pointer("/spec/template"))
                .collect();
            for field in ["children", "attachments"] {
                for child in answer[field].as_array().into_iter().flatten() {
                    let kept = child
                        .pointer("/spec/template")
                        .is_some_and(|t| observed_templates.contains(&t));
                    if pod_spec_of(child).is_some() && !kept {
                        found.push((
                            format!("{} {}", path.display(), child["kind"]),
                            child.clone(),
                        ));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn every_golden_workload_is_admitted_under_restricted() {
    let workloads = golden_workloads();
    for controller in ["/apimock/", "/monitoredservice/"] {
        assert!(
            workloads.iter().any(|(name, _)| name.contains(controller)),
            "no {controller} workload among {}",
            workloads.len()
        );
    }
    for (name, workload) in &workloads {
        let found = violations(
            pod_spec_of(workload).unwrap(),
            workload.pointer("/spec/template/metadata/annotations"),
            Level::Restricted,
        );
        assert!(found.is_empty(), "{name}: {found:?}");
        assert_eq!(
            workload.pointer("/spec/template/spec/automountServiceAccountToken"),
            Some(&json!(false)),
            "{name} mounts a service-account token it never uses"
        );
    }
}

fn restricted_namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_mocks_and_services_run_in_a_restricted_namespace() {
    let server = support::start_standard(Clock::System).await;
    let mut emulator = support::emulator::for_repository(&format!("http://{}", server.hook_addr));
    emulator.apply(restricted_namespace("team-a"));
    emulator.apply(
        json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "pets", "namespace": "team-a"},
        "spec": {"definition": "openapi: 3.0.3\ninfo: {title: P, version: '1'}\npaths: {}\n",
                 "docs": {"enabled": true}}}),
    );
    emulator.apply(
        json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"image": "nginx", "port": 8080}}),
    );
    emulator
        .converge(10)
        .await
        .expect("no finding, PodSecurity included");
    for (kind, name) in [("Deployment", "pets"), ("Deployment", "web")] {
        let deployment = emulator.get("apps/v1", kind, "team-a", name).unwrap();
        assert_eq!(
            deployment["status"]["readyReplicas"], 1,
            "{name}: {deployment}"
        );
    }
}

#[tokio::test]
async fn a_workload_that_breaks_the_level_has_its_pods_refused() {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/sync",
        post(|| async {
            axum::Json(json!({"status": {}, "children": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "root"},
                "spec": {"selector": {"matchLabels": {"app": "root"}},
                         "template": {"metadata": {"labels": {"app": "root"}},
                                      "spec": {"containers": [{"name": "app", "image": "x",
                                               "securityContext": {"privileged": true}}]}}}}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let kinds = metahooks::emulate::Kinds::default();
    let registration = metahooks::emulate::Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "roots"},
               "spec": {"generateSelector": true,
                        "parentResource": {"apiVersion": "v1", "resource": "configmaps"},
                        "childResources": [{"apiVersion": "apps/v1", "resource": "deployments"}],
                        "hooks": {"sync": {"webhook": {"url": "http://hooks.example/sync"}}}}}),
        &kinds,
    )
    .unwrap();
    for (level, refused) in [
        ("restricted", true),
        ("baseline", true),
        ("privileged", false),
    ] {
        let mut emulator = metahooks::emulate::Emulator::new(&base, vec![registration.clone()]);
        emulator.stop_at_first = false;
        let mut namespace = restricted_namespace("ns");
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = json!(level);
        emulator.apply(namespace);
        emulator.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "p", "namespace": "ns"}}));
        emulator.converge(10).await.unwrap();
        let finding = emulator
            .findings
            .iter()
            .find(|f| f.rule == Rule::PodSecurity);
        assert_eq!(
            finding.is_some(),
            refused,
            "{level}: {:?}",
            emulator.findings
        );
        if let Some(finding) = finding {
            assert!(
                finding.message.contains("privileged"),
                "{}",
                finding.message
            );
        }
        let deployment = emulator.get("apps/v1", "Deployment", "ns", "root").unwrap();
        let ready = deployment["status"]["readyReplicas"].as_i64().unwrap_or(0);
        assert_eq!(ready == 0, refused, "{level}: {deployment}");
    }
}
