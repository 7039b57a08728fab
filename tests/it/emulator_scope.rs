//! The emulator's namespaces as Metacontroller and the API server have them: scope from
//! discovery (built-in kinds, CRDs' `spec.scope`), cluster-scoped keys, children of
//! cluster-scoped parents in any namespace, and what Metacontroller adds to or takes from
//! a desired child (its controller reference, status).

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::State;
use axum::routing::post;
use metahooks::emulate::{Emulator, Kinds, Registration};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<Value>>>;

/// A sync hook answering `children` for every parent, recording each request.
async fn hook(children: Value) -> (String, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let state = (seen.clone(), children);
    let app = axum::Router::new()
        .route(
            "/sync",
            post(
                |State((seen, children)): State<(Seen, Value)>, Json(request): Json<Value>| async move {
                    seen.lock().unwrap().push(request);
                    Json(json!({"status": {"ok": true}, "children": children}))
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}"), seen)
}

fn crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": format!("{plural}.example.com")},
           "spec": {"group": "example.com", "scope": scope,
                    "names": {"kind": kind, "plural": plural},
                    "versions": [{"name": "v1", "served": true, "storage": true,
                                  "subresources": {"status": {}}}]}})
}

/// A v2 CompositeController for `plural` (of group example.com) with these child types.
fn registration(
    plural: &str,
    children: Value,
    generate_selector: bool,
    kinds: &Kinds,
) -> Registration {
    Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": plural},
               "spec": {"generateSelector": generate_selector,
                        "parentResource": {"apiVersion": "example.com/v1", "resource": plural},
                        "childResources": children,
                        "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.example/sync"}}}}}),
        kinds,
    )
    .unwrap()
}

fn emulator(base: &str, plural: &str, crds: &[Value]) -> Emulator {
    let mut kinds = Kinds::default();
    for crd in crds {
        kinds.learn(crd);
    }
    let children = json!([{"apiVersion": "v1", "resource": "configmaps"},
                          {"apiVersion": "rbac.authorization.k8s.io/v1", "resource": "clusterroles"}]);
    let registration = registration(plural, children, true, &kinds);
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    for crd in crds {
        emulator.apply(crd.clone());
    }
    emulator
}

/// An emulator for `locals` with these child types (generated selector), calling
/// `base`, knowing the kinds of `crds` (the Local CRD among them).
fn locals_emulator(base: &str, children: Value, crds: &[Value]) -> Emulator {
    let mut kinds = Kinds::default();
    for crd in crds {
        kinds.learn(crd);
    }
    let registration = registration("locals", children, true, &kinds);
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    emulator
}

#[tokio::test]
async fn a_cluster_scoped_parent_owns_children_in_any_namespace_and_cluster_scoped_ones() {
    let (base, seen) = hook(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "first"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared", "namespace": "second"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"}},
    ]))
    .await;
    let global = crd("Global", "globals", "Cluster");
    let mut emulator = emulator(&base, "globals", &[global]);
    // A namespace written on a cluster-scoped object is dropped, as the API server does.
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Global",
                          "metadata": {"name": "everywhere", "namespace": "default"}, "spec": {}}));
    emulator.converge(10).await.unwrap();
    let parent = emulator
        .get("example.com/v1", "Global", "", "everywhere")
        .unwrap();
    assert!(parent.pointer("/metadata/namespace").is_none(), "{parent}");
    assert_eq!(parent["status"]["ok"], true);
    for namespace in ["first", "second"] {
        assert!(
            emulator
                .get("v1", "ConfigMap", namespace, "shared")
                .is_some(),
            "{namespace}"
        );
    }
    let role = emulator
        .get("rbac.authorization.k8s.io/v1", "ClusterRole", "", "reader")
        .expect("the cluster-scoped child exists without a namespace");
    assert!(role.pointer("/metadata/namespace").is_none(), "{role}");
    // Request maps key cluster-scoped objects by name alone (UniformObjectMap).
    let last = seen.lock().unwrap().last().cloned().unwrap();
    let roles = last["children"]["ClusterRole.rbac.authorization.k8s.io/v1"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        roles.keys().collect::<Vec<_>>(),
        ["reader"],
        "{}",
        last["children"]
    );
    let maps = last["children"]["ConfigMap.v1"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        maps.keys().collect::<Vec<_>>(),
        ["first/shared", "second/shared"]
    );
    // Scope comes from the CRD given, or the built-in table.
    let namespaced = crd("Local", "locals", "Namespaced");
    let mut kinds = Kinds::default();
    kinds.learn(&namespaced);
    assert!(!kinds.is_cluster_scoped("Local"));
    assert!(kinds.is_cluster_scoped("ClusterRole") && kinds.is_cluster_scoped("Namespace"));
}

#[tokio::test]
async fn a_namespaced_parent_cannot_put_a_child_in_another_namespace() {
    let (base, _) = hook(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "stray", "namespace": "elsewhere"}},
    ]))
    .await;
    let local = crd("Local", "locals", "Namespaced");
    let mut emulator = emulator(&base, "locals", &[local]);
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Local",
                          "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}}));
    let error = emulator.converge(5).await.expect_err("refused");
    assert!(error.contains("elsewhere"), "{error}");
}

#[tokio::test]
async fn the_hooks_owner_references_are_kept_beside_metacontrollers_and_status_is_dropped() {
    let (base, _) = hook(json!([
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "owned", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                              "name": "other", "uid": "uid-other"}]},
         "status": {"made": "up"}},
    ]))
    .await;
    let local = crd("Local", "locals", "Namespaced");
    let mut emulator = emulator(&base, "locals", &[local]);
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Local",
                          "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}}));
    emulator.converge(10).await.unwrap();
    let child = emulator.get("v1", "ConfigMap", "team-a", "owned").unwrap();
    let references = child["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(references.len(), 2, "{child}");
    assert_eq!(references[0]["name"], "other");
    assert_eq!(references[1]["kind"], "Local");
    assert_eq!(references[1]["controller"], true);
    assert!(child.get("status").is_none(), "{child}");
}

#[tokio::test]
async fn the_api_server_refuses_bad_names_long_labels_and_oversized_annotations() {
    let local = crd("Local", "locals", "Namespaced");
    let parent = json!({"apiVersion": "example.com/v1", "kind": "Local",
                        "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}});
    let cases = [
        (
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "BadName_x"}}]),
            "metadata.name: Invalid value: \"BadName_x\"",
        ),
        (
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ok", "labels": {"target": "x".repeat(70)}}}]),
            "must be no more than 63 characters",
        ),
        // ~300 KB of data: fine as data, but client-side apply copies it into an annotation.
        (
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"d": "x".repeat(300 * 1024)}}]),
            "metadata.annotations: Too long",
        ),
    ];
    for (children, expected) in cases {
        let (base, _) = hook(children).await;
        let mut emulator = emulator(&base, "locals", std::slice::from_ref(&local));
        emulator.apply(parent.clone());
        let error = emulator.converge(5).await.expect_err("refused");
        assert!(
            error.starts_with("[APIServerRefused]") && error.contains(expected),
            "{error}"
        );
    }
    // Under server-side apply there is no last-applied annotation: the big one is fine.
    let (base, _) = hook(
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
                                 "data": {"d": "x".repeat(300 * 1024)}}]),
    )
    .await;
    let mut emulator = emulator(&base, "locals", &[local]);
    emulator.server_side_apply = true;
    emulator.apply(parent);
    emulator.converge(5).await.unwrap();
    assert!(emulator.get("v1", "ConfigMap", "team-a", "big").is_some());
}

/// An emulator whose registration may own every workload kind.
fn workload_emulator(base: &str) -> Emulator {
    let local = crd("Local", "locals", "Namespaced");
    let mut kinds = Kinds::default();
    kinds.learn(&local);
    let children = json!([{"apiVersion": "apps/v1", "resource": "statefulsets"},
                          {"apiVersion": "apps/v1", "resource": "daemonsets"},
                          {"apiVersion": "batch/v1", "resource": "jobs"},
                          {"apiVersion": "v1", "resource": "pods"}]);
    let registration = registration("locals", children, true, &kinds);
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = kinds;
    emulator.nodes = 2;
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Local",
                          "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}}));
    emulator
}

#[tokio::test]
async fn workloads_get_pods_that_run_and_report_status() {
    let template = json!({"metadata": {"labels": {"app": "w"}},
                          "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
    let mut job_template = template.clone();
    job_template["spec"]["restartPolicy"] = json!("Never");
    let (base, seen) = hook(json!([
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
         "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "w"}}, "template": template}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
         "spec": {"selector": {"matchLabels": {"app": "w"}}, "template": template}},
        // A Job's pods may not restart in place (the API server refuses Always).
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "batch"},
         "spec": {"completions": 2, "completionMode": "Indexed", "template": job_template}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own-pod"},
         "spec": {"containers": [{"name": "c", "image": "busybox"}]}},
    ]))
    .await;
    let mut emulator = workload_emulator(&base);
    emulator.converge(20).await.unwrap();
    for i in 0..3 {
        let pod = emulator
            .get("v1", "Pod", "team-a", &format!("db-{i}"))
            .unwrap();
        assert_eq!(pod["status"]["phase"], "Running");
        assert_eq!(
            pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            format!("db-{i}")
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    }
    let db = emulator
        .get("apps/v1", "StatefulSet", "team-a", "db")
        .unwrap();
    assert_eq!(db["status"]["readyReplicas"], 3);
    let agent = emulator
        .get("apps/v1", "DaemonSet", "team-a", "agent")
        .unwrap();
    assert_eq!(agent["status"]["numberReady"], 2, "one Pod per node");
    let job = emulator.get("batch/v1", "Job", "team-a", "batch").unwrap();
    assert_eq!(job["status"]["succeeded"], 2);
    assert_eq!(job["status"]["conditions"][0]["type"], "Complete");
    let index = emulator.get("v1", "Pod", "team-a", "batch-1").unwrap()["metadata"]["annotations"]
        ["batch.kubernetes.io/job-completion-index"]
        .clone();
    assert_eq!(index, "1");
    // The hook's own Pod runs too, and the hook sees the workloads' status.
    let own = emulator.get("v1", "Pod", "team-a", "own-pod").unwrap();
    assert_eq!(own["status"]["phase"], "Running");
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last["children"]["StatefulSet.apps/v1"]["team-a/db"]["status"]["readyReplicas"],
        3
    );
    // Deleting the parent collects the workloads and their Pods.
    let key = (
        "example.com/v1".to_owned(),
        "Local".to_owned(),
        "team-a".to_owned(),
        "one".to_owned(),
    );
    emulator.delete(&key);
    emulator.converge(10).await.unwrap();
    assert!(emulator.get("v1", "Pod", "team-a", "db-0").is_none());
}

#[tokio::test]
async fn run_to_completion_pods_of_a_hook_succeed() {
    // As Metacontroller's indexedjob example makes them: Pods with restartPolicy Never.
    let (base, _) = hook(json!([
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "once"},
         "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "server"},
         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
    ]))
    .await;
    let mut emulator = workload_emulator(&base);
    emulator.converge(10).await.unwrap();
    let phase =
        |name: &str| emulator.get("v1", "Pod", "team-a", name).unwrap()["status"]["phase"].clone();
    assert_eq!(phase("once"), "Succeeded");
    assert_eq!(phase("server"), "Running");
}

#[tokio::test]
async fn orphans_the_selector_matches_are_adopted_and_children_that_stop_matching_released() {
    // A hook that asks for nothing of its own, so what it sees is what was claimed.
    let (base, seen) = hook(json!([])).await;
    let local = crd("Local", "locals", "Namespaced");
    let mut kinds = Kinds::default();
    kinds.learn(&local);
    let registration = registration(
        "locals",
        json!([{"apiVersion": "v1", "resource": "configmaps"}]),
        false,
        &kinds,
    );
    let mut emulator = Emulator::new(&base, vec![registration]);
    emulator.kinds = kinds;
    emulator.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "orphan", "namespace": "team-a", "labels": {"app": "x"}}}));
    emulator.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "stranger", "namespace": "team-a", "labels": {"app": "y"}}}));
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Local",
                          "metadata": {"name": "one", "namespace": "team-a"},
                          "spec": {"selector": {"matchLabels": {"app": "x"}}}}));
    // The first sync sees the adopted orphan and not the stranger; its answer (no
    // children) then deletes the orphan, as Metacontroller would.
    emulator.converge(10).await.unwrap();
    let first = seen.lock().unwrap().first().cloned().unwrap();
    let observed: Vec<String> = first["children"]["ConfigMap.v1"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(observed, ["team-a/orphan"]);
    assert!(
        emulator
            .get("v1", "ConfigMap", "team-a", "orphan")
            .is_none()
    );
    let stranger = emulator
        .get("v1", "ConfigMap", "team-a", "stranger")
        .unwrap();
    assert!(stranger.pointer("/metadata/ownerReferences").is_none());
}

/// A registration for `locals` with a sync hook (recording every request, answering no
/// children) and a customize hook answering `customize`, at these versions.
async fn customize_emulator(
    sync_version: &str,
    customize_version: &str,
    customize: Value,
) -> (Emulator, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new()
        .route(
            "/sync",
            post(move |Json(request): Json<Value>| {
                let record = record.clone();
                async move {
                    record.lock().unwrap().push(request);
                    Json(json!({"status": {}, "children": []}))
                }
            }),
        )
        .route("/customize", post(move || async move { Json(customize) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let local = crd("Local", "locals", "Namespaced");
    let mut kinds = Kinds::default();
    kinds.learn(&local);
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "locals"},
               "spec": {"generateSelector": true,
                        "parentResource": {"apiVersion": "example.com/v1", "resource": "locals"},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {"sync": {"version": sync_version, "webhook": {"url": "http://h/sync"}},
                                  "customize": {"version": customize_version, "webhook": {"url": "http://h/customize"}}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(&format!("http://{address}"), vec![registration]);
    emulator.kinds = kinds;
    (emulator, seen)
}

/// The keys of `group` in the `related` of the first sync request seen.
fn related_keys(seen: &Seen, group: &str) -> Vec<String> {
    let request = seen.lock().unwrap().first().cloned().unwrap();
    request["related"][group]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

const PARENT: &str = r#"{"apiVersion": "example.com/v1", "kind": "Local", "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}}"#;

#[tokio::test]
async fn related_keys_follow_the_sync_hooks_version_not_the_customize_hooks() {
    let rules = json!({"relatedResources": [{"apiVersion": "v1", "resource": "configmaps",
                                             "namespace": "team-a", "names": ["settings"]}]});
    for (sync_version, customize_version, expected) in
        [("v1", "v2", "settings"), ("v2", "v1", "team-a/settings")]
    {
        let (mut emulator, seen) =
            customize_emulator(sync_version, customize_version, rules.clone()).await;
        emulator.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "settings", "namespace": "team-a"}, "data": {"a": "1"}}));
        emulator.apply(serde_json::from_str(PARENT).unwrap());
        emulator.converge(5).await.unwrap();
        assert_eq!(
            related_keys(&seen, "ConfigMap.v1"),
            [expected],
            "sync {sync_version}, customize {customize_version}"
        );
    }
}

#[tokio::test]
async fn a_v1_customize_hook_of_a_namespaced_parent_sees_only_its_namespace() {
    // Names without a namespace, and Namespaces by label (cluster-scoped: no filter).
    let rules = json!({"relatedResources": [
        {"apiVersion": "v1", "resource": "secrets", "names": ["creds"]},
        {"apiVersion": "v1", "resource": "namespaces", "labelSelector": {"matchLabels": {"team": "yes"}}}]});
    for (version, expected) in [
        ("v1", vec!["team-a/creds"]),
        ("v2", vec!["team-a/creds", "team-b/creds"]),
    ] {
        let (mut emulator, seen) = customize_emulator("v2", version, rules.clone()).await;
        for namespace in ["team-a", "team-b"] {
            emulator.apply(json!({"apiVersion": "v1", "kind": "Secret",
                                  "metadata": {"name": "creds", "namespace": namespace}}));
            emulator.apply(json!({"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace, "labels": {"team": "yes"}}}));
        }
        emulator.apply(serde_json::from_str(PARENT).unwrap());
        emulator.converge(5).await.unwrap();
        assert_eq!(
            related_keys(&seen, "Secret.v1"),
            expected,
            "customize {version}"
        );
        assert_eq!(
            related_keys(&seen, "Namespace.v1"),
            ["team-a", "team-b"],
            "customize {version}"
        );
    }
}

/// A decorator's attachment in another namespace than its target's is refused as a
/// composite child is: owned by the target and listed in its namespace, it would be
/// deleted by the garbage collector and made again on every sync.
#[tokio::test]
async fn a_decorators_attachment_in_another_namespace_is_refused() {
    let app = axum::Router::new().route(
        "/sync",
        post(|Json(_request): Json<Value>| async move {
            Json(json!({"labels": {}, "annotations": {}, "status": null,
                        "attachments": [{"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": "stray", "namespace": "elsewhere"}}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let kinds = Kinds::default();
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
               "metadata": {"name": "decorate"},
               "spec": {"resources": [{"apiVersion": "v1", "resource": "configmaps",
                                       "labelSelector": {"matchLabels": {"decorate": "yes"}}}],
                        "attachments": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "hooks": {"sync": {"version": "v2", "webhook": {"url": "http://hooks.example/sync"}}}}}),
        &kinds,
    )
    .unwrap();
    let mut emulator = Emulator::new(&format!("http://{address}"), vec![registration]);
    emulator.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "target", "namespace": "team-a", "labels": {"decorate": "yes"}}}));
    let error = emulator.converge(5).await.expect_err("refused");
    assert!(
        error.contains("elsewhere") && error.contains("not the parent's"),
        "{error}"
    );
    assert!(
        emulator
            .get("v1", "ConfigMap", "elsewhere", "stray")
            .is_none()
    );
}

/// A namespaced parent's children are listed in its namespace (claimChildren): a
/// cluster-scoped child is created once (a later create is AlreadyExists, which
/// Metacontroller lets go) and never observed, so the hook never sees it and it is never
/// updated nor deleted.
#[tokio::test]
async fn a_namespaced_parents_cluster_scoped_child_is_created_and_never_observed() {
    let (base, seen) = hook(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "local"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "reader"}},
    ]))
    .await;
    let local = crd("Local", "locals", "Namespaced");
    let mut emulator = emulator(&base, "locals", &[local]);
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Local",
                          "metadata": {"name": "one", "namespace": "team-a"}, "spec": {}}));
    emulator.converge(10).await.unwrap();
    assert!(
        emulator
            .get("rbac.authorization.k8s.io/v1", "ClusterRole", "", "reader")
            .is_some(),
        "created"
    );
    let last = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        last["children"]["ClusterRole.rbac.authorization.k8s.io/v1"],
        json!({}),
        "never observed: {}",
        last["children"]
    );
    assert_eq!(
        last["children"]["ConfigMap.v1"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["team-a/local".to_owned()])
    );
}

/// A registration as Metacontroller's discovery resolves it, or the event it records
/// when the controller cannot start (`newParentController` and `makeUpdateStrategyMap`,
/// pkg/controller/composite; `newDecoratorController` and `newDecoratorSelector`,
/// pkg/controller/decorator; `Clientset.Resource`, pkg/dynamic/clientset).
fn refusal(registration: Value, crds: &[Value]) -> String {
    let mut kinds = Kinds::default();
    for crd in crds {
        kinds.learn(crd);
    }
    match Registration::parse(registration, &kinds) {
        Ok(_) => panic!("a registration Metacontroller would not start was accepted"),
        Err(message) => message,
    }
}

fn composite(parent: Value, child: Value) -> Value {
    json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
           "metadata": {"name": "things"},
           "spec": {"parentResource": parent, "childResources": [child],
                    "hooks": {"sync": {"webhook": {"url": "http://h/sync"}}}}})
}

#[test]
fn a_resource_discovery_does_not_serve_stops_the_controller_in_metacontrollers_words() {
    let things = crd("Thing", "things", "Namespaced");
    let parent = json!({"apiVersion": "example.com/v1", "resource": "things"});
    // The everyday typo: Deployments are apps/v1. Without an update strategy the child
    // informer fails; with one, makeUpdateStrategyMap fails first.
    let typo = json!({"apiVersion": "v1", "resource": "deployments"});
    assert!(
        refusal(composite(parent.clone(), typo.clone()), std::slice::from_ref(&things)).contains(
            "would not start; Metacontroller records the event \"Cannot create new controller: can't create informer for child resource: discovery: can't find resource deployments in apiVersion v1\" (the API server serves deployments at apps/v1)"
        )
    );
    let mut in_place = typo;
    in_place["updateStrategy"] = json!({"method": "InPlace"});
    assert!(
        refusal(composite(parent, in_place), std::slice::from_ref(&things)).contains(
            "Cannot create new controller: can't find child resource \"deployments\" in v1\""
        )
    );
    // The parent at a version its CRD does not serve.
    let message = refusal(
        composite(
            json!({"apiVersion": "example.com/v2", "resource": "things"}),
            json!({"apiVersion": "v1", "resource": "configmaps"}),
        ),
        &[things],
    );
    assert!(
        message.contains(
            "Cannot create new controller: discovery: can't find resource things in apiVersion example.com/v2\" (the API server serves things at example.com/v1)"
        ),
        "{message}"
    );
    // A decorator's resources, in newDecoratorSelector's words.
    let decorator = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "d"},
        "spec": {"resources": [{"apiVersion": "v1", "resource": "statefulsets"}],
                 "hooks": {"sync": {"webhook": {"url": "http://h/sync"}}}}});
    assert!(refusal(decorator, &[]).contains(
        "Cannot create new controller: can't find resource \"statefulsets\" in apiVersion \"v1\""
    ));
    // Its attachments as makeUpdateStrategyMap (pkg/controller/decorator) resolves them.
    let attachments = json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "DecoratorController",
        "metadata": {"name": "d"},
        "spec": {"resources": [{"apiVersion": "apps/v1", "resource": "statefulsets"}],
                 "attachments": [{"apiVersion": "v1", "resource": "deployments",
                                  "updateStrategy": {"method": "InPlace"}}],
                 "hooks": {"sync": {"webhook": {"url": "http://h/sync"}}}}});
    assert!(refusal(attachments, &[]).contains(
        "DecoratorController \"d\" would not start; Metacontroller records the event \"Cannot create new controller: can't find child resource \"deployments\" in v1\""
    ));
}

/// getRelatedClient (pkg/controller/common/customize/manager.go) resolves a related
/// rule with discovery on every sync: a resource not served there fails each sync.
#[tokio::test]
async fn a_related_rule_discovery_does_not_serve_fails_the_sync() {
    let rules = json!({"relatedResources": [{"apiVersion": "v1", "resource": "deployments",
                                             "names": ["web"]}]});
    let (mut emulator, seen) = customize_emulator("v2", "v2", rules).await;
    emulator.stop_at_first = false;
    emulator.apply(serde_json::from_str(PARENT).unwrap());
    emulator.converge(5).await.unwrap();
    assert!(seen.lock().unwrap().is_empty(), "no sync call is made");
    let finding = emulator
        .findings
        .iter()
        .find(|f| f.rule == metahooks::emulate::Rule::InvalidCustomize)
        .unwrap_or_else(|| panic!("{:?}", emulator.findings));
    assert!(
        finding
            .message
            .starts_with("discovery: can't find resource deployments in apiVersion v1"),
        "{finding}"
    );
}

/// MakeChildMap keys children by group, version and kind: a child answered at
/// autoscaling/v1 while the registration lists autoscaling/v2 is never matched with
/// the observed one, so Metacontroller deletes and creates it on every sync.
#[tokio::test]
async fn a_child_at_another_served_version_is_reported() {
    let (base, _) = hook(json!([
        {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
         "metadata": {"name": "web"},
         "spec": {"maxReplicas": 3, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}
    ]))
    .await;
    let local = crd("Local", "locals", "Namespaced");
    let mut emulator = locals_emulator(
        &base,
        json!([{"apiVersion": "autoscaling/v2", "resource": "horizontalpodautoscalers"}]),
        std::slice::from_ref(&local),
    );
    emulator.stop_at_first = false;
    emulator.apply(local);
    emulator.apply(serde_json::from_str(PARENT).unwrap());
    emulator.converge(5).await.unwrap();
    let finding = emulator
        .findings
        .iter()
        .find(|f| f.rule == metahooks::emulate::Rule::ChildAtAnotherVersion)
        .unwrap_or_else(|| panic!("{:?}", emulator.findings));
    assert!(
        finding.message.starts_with(
            "HorizontalPodAutoscaler web is answered at autoscaling/v1, but the registration lists HorizontalPodAutoscaler at autoscaling/v2"
        ),
        "{finding}"
    );
    // Deleted and created again on every sync: the cluster never settles.
    let (_, last) = emulator.timeline.last().unwrap();
    let hpa = (
        "autoscaling/v2".to_owned(),
        "HorizontalPodAutoscaler".to_owned(),
        "team-a".to_owned(),
        "web".to_owned(),
    );
    assert!(
        last.deleted.contains(&hpa) && last.created.contains(&hpa),
        "{last:?}"
    );
    assert!(
        emulator
            .findings
            .iter()
            .any(|f| f.rule == metahooks::emulate::Rule::HotLoop),
        "{:?}",
        emulator.findings
    );
}

/// applyNamespaceDefaults (pkg/controller/composite) leaves a namespaced child of a
/// cluster-scoped parent without a namespace, and the API server refuses to create it.
#[tokio::test]
async fn a_namespaced_child_of_a_cluster_scoped_parent_needs_a_namespace() {
    let (base, _) = hook(json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "nowhere"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "somewhere", "namespace": "first"}},
    ]))
    .await;
    let global = crd("Global", "globals", "Cluster");
    let mut emulator = emulator(&base, "globals", &[global]);
    emulator.stop_at_first = false;
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Global",
                          "metadata": {"name": "everywhere"}, "spec": {}}));
    emulator.converge(5).await.unwrap();
    assert!(
        emulator
            .get("v1", "ConfigMap", "first", "somewhere")
            .is_some()
    );
    assert!(emulator.get("v1", "ConfigMap", "", "nowhere").is_none());
    let refused = emulator
        .findings
        .iter()
        .find(|f| f.rule == metahooks::emulate::Rule::APIServerRefused)
        .unwrap_or_else(|| panic!("{:?}", emulator.findings));
    assert!(
        refused
            .message
            .contains("ConfigMap nowhere: an empty namespace may not be set during creation"),
        "{refused}"
    );
}

/// A `Local` CRD with this status schema, with or without a status subresource.
fn local_crd(status_schema: Value, subresource: bool) -> Value {
    let mut version = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "status": status_schema}}}});
    if subresource {
        version["subresources"] = json!({"status": {}});
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "locals.example.com"},
           "spec": {"group": "example.com", "scope": "Namespaced",
                    "names": {"kind": "Local", "plural": "locals"}, "versions": [version]}})
}

/// A hook answering `status` for every `Local`, and an emulator with its CRD.
async fn status_emulator(status: Value, crd: Value) -> Emulator {
    let app = axum::Router::new().route(
        "/sync",
        post(move || {
            let status = status.clone();
            async move { Json(json!({"status": status, "children": []})) }
        }),
    );
    let port = crate::support::servers::serve_app(app, None).await;
    let address = format!("127.0.0.1:{port}");
    let mut emulator = locals_emulator(
        &format!("http://{address}"),
        json!([{"apiVersion": "v1", "resource": "configmaps"}]),
        std::slice::from_ref(&crd),
    );
    emulator.stop_at_first = false;
    emulator.apply(crd);
    emulator.apply(serde_json::from_str(PARENT).unwrap());
    emulator
}

/// The API server prunes what a structural schema does not declare, observedGeneration
/// included (apiextensions-apiserver's pruning), and refuses a wrong type with 422:
/// the status update fails (updateParentStatus), which Metacontroller retries.
#[tokio::test]
async fn parent_status_is_pruned_and_type_checked_by_the_crds_schema() {
    let schema = json!({"type": "object", "properties": {"ready": {"type": "boolean"},
                                                         "replicas": {"type": "integer"}}});
    let mut emulator = status_emulator(
        json!({"ready": true, "replicas": 2, "note": "undeclared"}),
        local_crd(schema.clone(), true),
    )
    .await;
    emulator.converge(5).await.unwrap();
    assert!(emulator.findings.is_empty(), "{:?}", emulator.findings);
    let parent = emulator
        .get("example.com/v1", "Local", "team-a", "one")
        .unwrap();
    assert_eq!(parent["status"], json!({"ready": true, "replicas": 2}));

    let mut emulator = status_emulator(
        json!({"ready": true, "replicas": "2"}),
        local_crd(schema, true),
    )
    .await;
    emulator.converge(5).await.unwrap();
    let refused = emulator
        .findings
        .iter()
        .find(|f| f.rule == metahooks::emulate::Rule::APIServerRefused)
        .unwrap_or_else(|| panic!("{:?}", emulator.findings));
    assert!(
        refused.message.starts_with(
            "Local.example.com \"one\" is invalid: status.replicas: Invalid value: \"string\": status.replicas in body must be of type integer: \"string\""
        ),
        "{refused}"
    );
    let parent = emulator
        .get("example.com/v1", "Local", "team-a", "one")
        .unwrap();
    assert!(parent.get("status").is_none(), "{parent}");
}

/// Without a status subresource, AtomicStatusUpdate falls back to a plain Update, which
/// bumps metadata.generation: the observedGeneration just written is already one behind,
/// the next sync writes it again, and the status never settles.
#[tokio::test]
async fn without_a_status_subresource_every_status_write_bumps_the_generation() {
    let schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut emulator = status_emulator(json!({"ready": true}), local_crd(schema, false)).await;
    emulator.converge(6).await.unwrap();
    let parent = emulator
        .get("example.com/v1", "Local", "team-a", "one")
        .unwrap();
    let generation = parent["metadata"]["generation"].as_i64().unwrap();
    assert!(generation > 2, "{parent}");
    assert_eq!(
        parent["status"]["observedGeneration"].as_i64(),
        Some(generation - 1),
        "{parent}"
    );
    assert!(
        emulator
            .findings
            .iter()
            .any(|f| f.rule == metahooks::emulate::Rule::StatusNeverSettles
                && f.message.contains("at /status/observedGeneration")),
        "{:?}",
        emulator.findings
    );
}

/// A child custom resource whose CRD has no status subresource keeps the status it is
/// created with (status is then part of the object); with one, the API server drops it.
#[tokio::test]
async fn a_child_cr_without_a_status_subresource_keeps_its_status() {
    for (subresource, kept) in [(false, true), (true, false)] {
        let (base, _) = hook(json!([{"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {}, "status": {"phase": "New"}}]))
        .await;
        let mut widget = crd("Widget", "widgets", "Namespaced");
        if !subresource {
            widget["spec"]["versions"][0]
                .as_object_mut()
                .unwrap()
                .remove("subresources");
        }
        let local = crd("Local", "locals", "Namespaced");
        let mut emulator = locals_emulator(
            &base,
            json!([{"apiVersion": "example.com/v1", "resource": "widgets"}]),
            &[widget, local],
        );
        emulator.apply(serde_json::from_str(PARENT).unwrap());
        emulator.converge(5).await.unwrap();
        let child = emulator
            .get("example.com/v1", "Widget", "team-a", "w")
            .unwrap();
        assert_eq!(child.get("status").is_some(), kept, "{child}");
    }
}
