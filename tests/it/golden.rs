//! Golden hook cases in `hooks-tests/<controller>/<case>/{request,response}.json`.
//!
//! Each request is posted to the real router (clock fixed at `support::golden_now`) and
//! the answer must equal the stored response exactly. `hooks-tests/run.sh` is run too,
//! against a live server with the real clock, so the curl path users copy stays honest.
//! Requests are built by `build_cases` below; set `MHTEST_UPDATE_GOLDEN=1` to rewrite
//! the files after an intended change, then review the diff.

use crate::support;

use std::path::{Path, PathBuf};

use metahooks::server::Clock;
use serde_json::{Value, json};

fn cases_dir() -> PathBuf {
    support::repo_dir().join("hooks-tests")
}

/// finalize when `finalizing` is true; customize when there is no observed map (a
/// customize request carries only controller and parent); else sync.
fn hook_of(request: &Value) -> &'static str {
    if request.get("children").is_none() && request.get("attachments").is_none() {
        "customize"
    } else if request["finalizing"] == json!(true) {
        "finalize"
    } else {
        "sync"
    }
}

async fn post(
    client: &reqwest::Client,
    base: &str,
    controller: &str,
    request: &Value,
) -> (u16, Value) {
    let url = format!("{base}/{controller}/{}", hook_of(request));
    let reply = client
        .post(url)
        .json(request)
        .send()
        .await
        .expect("hook answers");
    let status = reply.status().as_u16();
    (status, reply.json().await.expect("json answer"))
}

fn case_dirs() -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for controller in std::fs::read_dir(cases_dir())
        .expect("hooks-tests exists")
        .filter_map(Result::ok)
    {
        if !controller.path().is_dir() {
            continue;
        }
        let name = controller.file_name().to_string_lossy().into_owned();
        for case in std::fs::read_dir(controller.path())
            .expect("controller dir")
            .filter_map(Result::ok)
        {
            if case.path().join("request.json").exists() {
                found.push((name.clone(), case.path()));
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_match_exactly() {
    let server = support::start_standard(Clock::Fixed(support::golden_now())).await;
    let base = format!("http://{}", server.hook_addr);
    let client = reqwest::Client::new();
    if std::env::var("MHTEST_UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        for (controller, case, request) in build_cases(&client, &base).await {
            let dir = cases_dir().join(controller).join(case);
            std::fs::create_dir_all(&dir).expect("case dir");
            let (_, response) = post(&client, &base, controller, &request).await;
            write_pretty(&dir.join("request.json"), &request);
            write_pretty(&dir.join("response.json"), &response);
        }
    }
    let cases = case_dirs();
    assert!(
        cases.len() >= 12,
        "expected the golden cases to exist, found {}",
        cases.len()
    );
    let mut failures = Vec::new();
    for (controller, dir) in &cases {
        let request = support::read_json(&dir.join("request.json"));
        let expected = support::read_json(&dir.join("response.json"));
        let (status, actual) = post(&client, &base, controller, &request).await;
        if status != 200 || actual != expected {
            failures.push(format!(
                "{}: status {status}\nexpected {}\nactual   {}",
                dir.display(),
                expected,
                actual
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_passes_against_a_live_server() {
    let server = support::start_standard(Clock::System).await;
    let output = std::process::Command::new("bash")
        .arg(cases_dir().join("run.sh"))
        .arg(format!("http://{}/", server.hook_addr)) // a trailing slash is fine
        .output()
        .expect("run.sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "run.sh failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("{} passed, 0 failed", case_dirs().len())),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_reports_a_difference() {
    // A server whose mock image differs from the one the golden answers were made with.
    let settings = metahooks::controllers::ControllerSettings {
        mock_image: "example.com/other-mock:1".to_owned(),
        ..Default::default()
    };
    let server = metahooks::server::Server::start(
        support::local_settings(),
        metahooks::controllers::Registry::standard(settings),
        Clock::System,
    )
    .await
    .expect("server starts");
    let output = std::process::Command::new("bash")
        .arg(cases_dir().join("run.sh"))
        .arg(format!("http://{}", server.hook_addr))
        .output()
        .expect("run.sh runs");
    assert!(
        !output.status.success(),
        "run.sh must fail when answers differ"
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("other-mock"));
}

fn write_pretty(path: &Path, value: &Value) {
    let mut text = serde_json::to_string_pretty(value).expect("json");
    text.push('\n');
    std::fs::write(path, text).expect("write golden file");
}

// ---- building the cases -------------------------------------------------------------

fn registration(version: &str) -> Value {
    let mut documents = support::read_yaml_documents(
        &support::repo_dir().join("manifests/controllers/apimock.yaml"),
    );
    let mut controller = documents.remove(0);
    for hook in ["sync", "finalize"] {
        controller["spec"]["hooks"][hook]["version"] = json!(version);
    }
    controller
}

const PETS: &str = "openapi: 3.0.3\ninfo:\n  title: Pets\n  version: 1.0.0\npaths:\n  /pets:\n    get:\n      operationId: listPets\n      responses:\n        '200':\n          description: the pets\n          content:\n            application/json:\n              example: [{name: rex}]\n";

fn parent(name: &str, spec: Value, generation: i64, status: Option<Value>) -> Value {
    let mut parent = json!({
        "apiVersion": "apirator.io/v1alpha1",
        "kind": "APIMock",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"), "generation": generation,
                     "resourceVersion": "100", "creationTimestamp": "2025-12-31T00:00:00Z",
                     "finalizers": ["metacontroller.io/compositecontroller-apimock"]},
        "spec": spec,
    });
    if let Some(status) = status {
        parent["status"] = status;
    }
    parent
}

fn request(version: &str, parent: Value, children: Value, finalizing: bool) -> Value {
    json!({"controller": registration(version), "parent": parent, "children": children, "related": {}, "finalizing": finalizing})
}

fn empty_children() -> Value {
    json!({"ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}, "Ingress.networking.k8s.io/v1": {}})
}

/// What Metacontroller would later send back for children we asked for: server fields,
/// owner reference, last-applied annotation, and (for the Deployment) a status.
fn observed(version: &str, parent: &Value, desired: &[Value], deployment_ready: bool) -> Value {
    let mut groups = empty_children();
    for (index, child) in desired.iter().enumerate() {
        let mut object = child.clone();
        let name = object["metadata"]["name"].as_str().unwrap().to_owned();
        let meta = object["metadata"].as_object_mut().unwrap();
        meta.insert("namespace".into(), json!("team-a"));
        meta.insert("uid".into(), json!(format!("child-uid-{index}")));
        meta.insert("resourceVersion".into(), json!("200"));
        meta.insert("generation".into(), json!(1));
        meta.insert("creationTimestamp".into(), json!("2025-12-31T00:00:01Z"));
        meta.insert("ownerReferences".into(), json!([{"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
            "name": parent["metadata"]["name"], "uid": parent["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]));
        meta.entry("annotations").or_insert(json!({}))["metacontroller.k8s.io/last-applied-configuration"] =
            json!(child.to_string());
        if object["kind"] == "Deployment" {
            let replicas = object["spec"]["replicas"].as_i64().unwrap_or(1);
            let ready = if deployment_ready { replicas } else { 0 };
            object["status"] = json!({"observedGeneration": 1, "replicas": replicas, "updatedReplicas": replicas,
                "readyReplicas": ready, "availableReplicas": ready,
                "conditions": [{"type": "Available", "status": if deployment_ready { "True" } else { "False" }, "reason": "MinimumReplicasAvailable"}]});
        }
        if object["kind"] == "Service" {
            object["spec"]["clusterIP"] = json!("10.96.0.10");
        }
        let type_key = format!(
            "{}.{}",
            object["kind"].as_str().unwrap(),
            object["apiVersion"].as_str().unwrap()
        );
        let key = if version == "v2" {
            format!("team-a/{name}")
        } else {
            name
        };
        groups[type_key][key] = object;
    }
    groups
}

async fn build_cases(
    client: &reqwest::Client,
    base: &str,
) -> Vec<(&'static str, &'static str, Value)> {
    let samples = support::examples_dir();
    let sample = |file: &str| {
        let mut cr = support::read_yaml_documents(&samples.join(file)).remove(0);
        cr["metadata"]["namespace"] = json!("team-a");
        cr["metadata"]["uid"] = json!("uid-sample");
        cr["metadata"]["generation"] = json!(1);
        cr
    };
    let pets = json!({"definition": PETS});
    let mut cases = vec![
        (
            "apimock",
            "fresh-parent",
            request(
                "v2",
                parent("pets", pets.clone(), 1, None),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "apirator-users-sample",
            request(
                "v2",
                sample("users.api-mock.cr.yaml"),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "apirator-bets-sample",
            request(
                "v1",
                sample("bets.api-mock.cr.yaml"),
                empty_children(),
                false,
            ),
        ),
        (
            // A host the API server refuses (upper case, a port) and a relative path:
            // refused by name before anything is built.
            "apimock",
            "ingress-host-refused",
            request(
                "v2",
                parent(
                    "pets",
                    json!({"definition": pets["definition"], "ingress": {"hostname": "API_Example.com:8080", "path": "users"}}),
                    1,
                    None,
                ),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "ingress-path-refused",
            request(
                "v2",
                parent(
                    "pets",
                    json!({"definition": pets["definition"], "ingress": {"hostname": "pets.example.com", "path": "/a;b"}}),
                    1,
                    None,
                ),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "invalid-from-the-start",
            request(
                "v2",
                parent(
                    "pets",
                    json!({"definition": "openapi: 3.0.3\npaths: {}\n"}),
                    1,
                    None,
                ),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "unsupported-version",
            request(
                "v2",
                parent("pets", json!({"definition": "swagger: '1.2'\n"}), 1, None),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "name-not-a-dns-label",
            request(
                "v2",
                parent("1pets", pets.clone(), 1, None),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "swagger-2-with-docs-and-ingress",
            request(
                "v2",
                parent(
                    "legacy",
                    json!({
                        "definition": "{\"swagger\": \"2.0\", \"info\": {\"title\": \"Legacy\", \"version\": \"2\"}, \"paths\": {\"/ping\": {\"get\": {\"responses\": {\"200\": {\"description\": \"pong\", \"examples\": {\"application/json\": {\"pong\": true}}}}}}}}",
                        "docs": {"enabled": true}, "replicas": 2,
                        "service": {"port": 9000, "type": "LoadBalancer", "externalTrafficPolicy": "Local", "annotations": {"example.com/lb": "internal"}},
                        "ingress": {"hostname": "legacy.example.com", "path": "/legacy", "pathType": "Exact", "className": "nginx", "tls": {"secretName": "legacy-tls"}}
                    }),
                    1,
                    None,
                ),
                empty_children(),
                false,
            ),
        ),
        (
            "apimock",
            "openapi-3-1",
            request(
                "v2",
                parent(
                    "webhooks",
                    json!({
                        "definition": "openapi: 3.1.0\ninfo: {title: Hooks, version: '1'}\npaths:\n  /items/{id}:\n    get:\n      parameters:\n        - {name: id, in: path, required: true, schema: {type: [integer, 'null']}}\n      responses:\n        '200': {description: ok, content: {application/json: {examples: {one: {value: {id: 1}}}}}}\n",
                        "image": "registry.example.com/prism:5"
                    }),
                    1,
                    None,
                ),
                empty_children(),
                false,
            ),
        ),
    ];

    // Observed states come from the server's own earlier answers, as in a cluster.
    for version in ["v2", "v1"] {
        let fresh_parent = parent("pets", pets.clone(), 1, None);
        let (_, first) = post(
            client,
            base,
            "apimock",
            &request(version, fresh_parent.clone(), empty_children(), false),
        )
        .await;
        let desired = first["children"].as_array().unwrap().clone();
        let status = first["status"].clone();
        let ready_parent = parent("pets", pets.clone(), 1, Some(status.clone()));
        let ready = request(
            version,
            ready_parent.clone(),
            observed(version, &fresh_parent, &desired, true),
            false,
        );
        let name = if version == "v2" {
            "ready-deployment-v2-keys"
        } else {
            "ready-deployment-v1-keys"
        };
        cases.push(("apimock", name, ready.clone()));
        if version == "v1" {
            continue;
        }
        let (_, settled) = post(client, base, "apimock", &ready).await;
        let settled_status = settled["status"].clone();
        // Pod Security forbids the mock's pods: the Deployment says so in ReplicaFailure,
        // and Ready says it too, in the Deployment's words (not "rolling out" for ever).
        let mut forbidden = observed(version, &fresh_parent, &desired, false);
        let deployment = forbidden["Deployment.apps/v1"]
            .as_object_mut()
            .unwrap()
            .values_mut()
            .next()
            .unwrap();
        deployment["status"]["conditions"] = json!([
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
             "message": "pods \"pets-7d4b9c-x2x7q\" is forbidden: violates PodSecurity \"restricted:latest\": runAsNonRoot != true"},
            {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
             "message": "ReplicaSet \"pets-7d4b9c\" has timed out progressing."}]);
        cases.push((
            "apimock",
            "rollout-forbidden-by-pod-security",
            request(
                version,
                parent("pets", pets.clone(), 1, Some(settled_status.clone())),
                forbidden,
                false,
            ),
        ));
        let edited = json!({"definition": PETS.replace("rex", "fido")});
        cases.push((
            "apimock",
            "definition-edited",
            request(
                version,
                parent("pets", edited, 2, Some(settled_status.clone())),
                observed(version, &fresh_parent, &desired, true),
                false,
            ),
        ));
        let broken = json!({"definition": "openapi: 3.0.3\ninfo: {title: Pets}\npaths: {}\n"});
        cases.push((
            "apimock",
            "invalid-with-good-observed",
            request(
                version,
                parent("pets", broken.clone(), 2, Some(settled_status.clone())),
                observed(version, &fresh_parent, &desired, true),
                false,
            ),
        ));
        // Server-side apply keeps no last-applied annotation; a spec that cannot be read
        // still keeps every observed child, taken from the objects themselves.
        let mut applied_server_side = observed(version, &fresh_parent, &desired, true);
        for group in applied_server_side.as_object_mut().unwrap().values_mut() {
            for child in group.as_object_mut().unwrap().values_mut() {
                child["metadata"]["annotations"]
                    .as_object_mut()
                    .unwrap()
                    .remove("metacontroller.k8s.io/last-applied-configuration");
            }
        }
        cases.push((
            "apimock",
            "unreadable-spec-server-side-apply",
            request(
                version,
                parent(
                    "pets",
                    json!({"definition": 42}),
                    3,
                    Some(settled_status.clone()),
                ),
                applied_server_side,
                false,
            ),
        ));
        let mut deleting = parent("pets", broken, 2, Some(settled_status.clone()));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        cases.push((
            "apimock",
            "finalize-with-children",
            request(
                version,
                deleting.clone(),
                observed(version, &fresh_parent, &desired, true),
                true,
            ),
        ));
        cases.push((
            "apimock",
            "finalize-children-gone",
            request(version, deleting, empty_children(), true),
        ));
    }
    cases.extend(definition_from_cases(client, base).await);
    cases.extend(monitoredservice_cases());
    cases.extend(configsync_cases());
    cases
}

/// `spec.definitionFrom.configMapKeyRef`: the ConfigMap arrives as a related object, so
/// good, missing and failed reads are all fixed by the request. (Git and HTTP sources
/// answer from the server's own engine; their branches are unit-tested with scripted
/// sources and run against a real `git daemon` in `apimock_emulator`.)
async fn definition_from_cases(
    client: &reqwest::Client,
    base: &str,
) -> Vec<(&'static str, &'static str, Value)> {
    let spec =
        json!({"definitionFrom": {"configMapKeyRef": {"name": "pets-api", "key": "openapi.yaml"}}});
    let holder = |data: Value| {
        json!({"ConfigMap.v1": {"team-a/pets-api": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "pets-api", "namespace": "team-a", "uid": "uid-pets-api", "resourceVersion": "300"},
            "data": data}}})
    };
    let with_related = |parent: Value, children: Value, related: Value| {
        let mut request = request("v2", parent, children, false);
        request["related"] = related;
        request
    };
    let fresh = parent("pets", spec.clone(), 1, None);
    let good = with_related(
        fresh.clone(),
        empty_children(),
        holder(json!({"openapi.yaml": PETS})),
    );
    let (_, first) = post(client, base, "apimock", &good).await;
    let desired = first["children"].as_array().unwrap().clone();
    let running = parent("pets", spec.clone(), 1, Some(first["status"].clone()));
    let token = json!({"definitionFrom": {"http": {"url": "https://api.example.com/pets.yaml", "secretRef": {"name": "api-token"}}}});
    vec![
        ("apimock", "definition-from-config-map", good),
        (
            "apimock",
            "definition-from-config-map-not-found",
            with_related(fresh.clone(), empty_children(), json!({})),
        ),
        (
            "apimock",
            "definition-from-config-map-key-gone-keeps-running",
            with_related(
                running,
                observed("v2", &fresh, &desired, true),
                holder(json!({"other.yaml": PETS})),
            ),
        ),
        (
            "apimock",
            "definition-and-definition-from",
            with_related(
                parent(
                    "pets",
                    json!({"definition": PETS, "definitionFrom": spec["definitionFrom"]}),
                    1,
                    None,
                ),
                empty_children(),
                json!({}),
            ),
        ),
        (
            "apimock",
            "customize-definition-from-http-with-secret",
            json!({"controller": registration("v2"), "parent": parent("pets", token, 1, None)}),
        ),
    ]
}

fn ms_registration() -> Value {
    support::read_yaml_documents(
        &support::repo_dir().join("manifests/controllers/monitoredservice.yaml"),
    )
    .remove(0)
}

fn ms_parent(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
           "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"), "generation": 1},
           "spec": spec})
}

fn ms_request(parent: Value, related: Value, finalizing: bool) -> Value {
    json!({"controller": ms_registration(), "parent": parent,
           "children": {"ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}},
           "related": related, "finalizing": finalizing})
}

/// Cases whose answer does not depend on a fetch (those are covered against real
/// servers in tests/monitoredservice_sources.rs).
fn monitoredservice_cases() -> Vec<(&'static str, &'static str, Value)> {
    let git = json!({"git": {"url": "https://git.example.com/team/config.git", "ref": "main", "path": "app.env", "secretRef": {"name": "git-creds"}}});
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain-7d9f-abcde", "namespace": "team-a"}});
    vec![
        (
            "monitoredservice",
            "no-source-plain-deployment",
            ms_request(
                ms_parent(
                    "plain",
                    json!({"image": "nginx:1.27", "port": 8080, "size": 2, "env": [{"name": "MODE", "value": "demo"}]}),
                ),
                json!({"Pod.v1": {"team-a/plain-7d9f-abcde": pod}}),
                false,
            ),
        ),
        (
            "monitoredservice",
            "ambiguous-source",
            ms_request(
                ms_parent(
                    "both",
                    json!({"image": "app:1", "config_repo": "https://example.com/config", "source": git}),
                ),
                json!({}),
                false,
            ),
        ),
        (
            "monitoredservice",
            "secret-not-found",
            ms_request(
                ms_parent("private", json!({"image": "app:1", "source": git})),
                json!({"Secret.v1": {}}),
                false,
            ),
        ),
        (
            // A NUL in an env value: a container runtime cannot set it.
            "monitoredservice",
            "env-value-with-nul",
            ms_request(
                ms_parent(
                    "nul",
                    json!({"image": "app:1", "env": [{"name": "MODE", "value": "a\u{0}b"}]}),
                ),
                json!({}),
                false,
            ),
        ),
        (
            "monitoredservice",
            "name-not-a-dns-label",
            ms_request(
                ms_parent("Bad_Name", json!({"image": "app:1"})),
                json!({}),
                false,
            ),
        ),
        (
            // A service that ran without a source now has one whose Secret is in another
            // namespace only: nothing is used from there, and what runs stays.
            "monitoredservice",
            "secret-elsewhere-keeps-running-children",
            {
                let mut request = ms_request(
                    ms_parent(
                        "private",
                        json!({"image": "app:1", "port": 8080, "source": git}),
                    ),
                    json!({"Secret.v1": {"team-b/git-creds": {"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": "git-creds", "namespace": "team-b"},
                        "data": {"token": "dGVhbS1iLXRva2Vu"}}}}),
                    false,
                );
                request["children"] = json!({
                    "ConfigMap.v1": {},
                    "Deployment.apps/v1": {"private": {"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": "private", "namespace": "team-a", "uid": "uid-d", "resourceVersion": "5",
                                     "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z",
                                     "ownerReferences": [{"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
                                                          "name": "private", "uid": "uid-private", "controller": true}],
                                     "labels": {"app.kubernetes.io/name": "monitoredservice", "app.kubernetes.io/instance": "private"}},
                        "spec": {"replicas": 1,
                                 "selector": {"matchLabels": {"app.kubernetes.io/instance": "private"}},
                                 "template": {"metadata": {"labels": {"app.kubernetes.io/instance": "private"}},
                                              "spec": {"containers": [{"name": "private", "image": "app:1"}]}}},
                        "status": {"replicas": 1, "readyReplicas": 1}}},
                    "Service.v1": {}
                });
                request
            },
        ),
        (
            "monitoredservice",
            "finalize",
            ms_request(
                ms_parent("plain", json!({"image": "nginx:1.27"})),
                json!({}),
                true,
            ),
        ),
        (
            "monitoredservice",
            "customize",
            json!({"controller": ms_registration(), "parent": ms_parent("private", json!({"image": "app:1", "source": git}))}),
        ),
    ]
}

fn cs_registration(version: &str) -> Value {
    let mut controller = support::read_yaml_documents(
        &support::repo_dir().join("manifests/controllers/configsync.yaml"),
    )
    .remove(0);
    for hook in ["sync", "finalize", "customize"] {
        controller["spec"]["hooks"][hook]["version"] = json!(version);
    }
    controller
}

fn cs_target(annotations: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "namespace": "team-a", "uid": "uid-web", "generation": 3, "annotations": annotations},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
           "status": {"observedGeneration": 3, "replicas": 1}})
}

/// An attachment as Metacontroller would send it back (v1 key `name`, v2 `namespace/name`).
fn cs_attachments(version: &str, present: bool) -> Value {
    if !present {
        return json!({"ConfigMap.v1": {}});
    }
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "web-configsync", "namespace": "team-a", "uid": "cm-uid", "resourceVersion": "9",
                     "labels": {"app.kubernetes.io/managed-by": "metahooks", "configsync.metahooks.io/target": "web"},
                     "annotations": {"metacontroller.k8s.io/decorator-controller": "configsync",
                                     "config.metahooks.io/revision": "main@sha1:1111111111111111111111111111111111111111",
                                     "config.metahooks.io/format": "files",
                                     "config.metahooks.io/paths": "{\"conf__site.conf\":\"conf/site.conf\"}"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-web", "controller": true}]},
        "data": {"conf__site.conf": "server {}\n"},
        "binaryData": {"logo.png": "iVBORw0KGgo="}});
    let key = if version == "v2" {
        "team-a/web-configsync"
    } else {
        "web-configsync"
    };
    json!({"ConfigMap.v1": {key: object}})
}

fn cs_request(
    version: &str,
    annotations: Value,
    attachments: bool,
    related: Value,
    finalizing: bool,
) -> Value {
    json!({"controller": cs_registration(version), "object": cs_target(annotations),
           "attachments": cs_attachments(version, attachments), "related": related, "finalizing": finalizing})
}

/// Cases whose answer does not depend on a fetch.
fn configsync_cases() -> Vec<(&'static str, &'static str, Value)> {
    let with_secret = json!({"configsync.metahooks.io/git-url": "https://git.example.com/web.git", "configsync.metahooks.io/secret": "git-creds"});
    let bad_interval = json!({"configsync.metahooks.io/git-url": "https://git.example.com/web.git", "configsync.metahooks.io/interval-seconds": "soon"});
    vec![
        (
            "configsync",
            "secret-not-found-v2-keys",
            cs_request(
                "v2",
                with_secret.clone(),
                false,
                json!({"Secret.v1": {}}),
                false,
            ),
        ),
        (
            "configsync",
            "secret-not-found-keeps-attachment-v2-keys",
            cs_request(
                "v2",
                with_secret.clone(),
                true,
                json!({"Secret.v1": {}}),
                false,
            ),
        ),
        (
            "configsync",
            "secret-not-found-keeps-attachment-v1-keys",
            cs_request(
                "v1",
                with_secret.clone(),
                true,
                json!({"Secret.v1": {}}),
                false,
            ),
        ),
        (
            "configsync",
            "bad-interval-v1-keys",
            cs_request("v1", bad_interval, true, json!({}), false),
        ),
        (
            "configsync",
            "finalize-with-attachment",
            cs_request(
                "v2",
                json!({"configsync.metahooks.io/revision": "main@sha1:1111111111111111111111111111111111111111"}),
                true,
                json!({}),
                true,
            ),
        ),
        (
            "configsync",
            "finalize-attachment-gone",
            cs_request("v1", json!({}), false, json!({}), true),
        ),
        (
            "configsync",
            "customize",
            json!({"controller": cs_registration("v2"), "parent": cs_target(with_secret)}),
        ),
    ]
}
