//! End to end with a real mock server: the Deployment our hook returns is run locally.
//! The ConfigMap's data is written to a temporary directory standing in for the volume
//! mount, and the mock container's arguments are run with `@stoplight/prism-cli` (the
//! program inside the default image). Only the mount path, host and port are rewritten,
//! so nothing binds beyond loopback and parallel runs do not collide. When the tests run
//! as root, Prism runs as the user the Deployment names (through `setpriv`), with only its
//! own temporary directory writable by that user.

use crate::support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use metahooks::controllers::Registry;
use metahooks::source::fake::FakeSources;
use serde_json::{Value, json};

struct Mock(Child);

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn children_for(spec: Value) -> Vec<Value> {
    children_with(spec, Arc::new(FakeSources::default()))
}

/// The children our sync asks for, with `sources` answering any git or HTTP lookup.
fn children_with(spec: Value, sources: Arc<FakeSources>) -> Vec<Value> {
    let parent = json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "e2e", "namespace": "default", "generation": 1}, "spec": spec});
    let request = json!({"controller": {}, "parent": parent, "children": {}, "related": {}, "finalizing": false});
    let registry = Registry::standard(Default::default()).with_sources(sources);
    let response = support::apimock_sync(&registry, &request);
    let validated = response["status"]["conditions"]
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "Validated"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(validated["status"], "True", "{}", response["status"]);
    response["children"].as_array().unwrap().clone()
}

/// The ConfigMap volume as the kubelet lays it out: every key under its own name, or,
/// when the volume lists items, each listed key at its path.
fn materialise(config_map: &Value, volume: &Value, dir: &std::path::Path) {
    let data = config_map["data"].as_object().unwrap();
    let placed: Vec<(String, String)> = match volume["configMap"]["items"].as_array() {
        Some(items) => items
            .iter()
            .map(|item| {
                (
                    item["key"].as_str().unwrap().to_owned(),
                    item["path"].as_str().unwrap().to_owned(),
                )
            })
            .collect(),
        None => data.keys().map(|key| (key.clone(), key.clone())).collect(),
    };
    for (key, path) in placed {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, data[&key].as_str().unwrap()).unwrap();
    }
}

/// The uid and gid a container runs as: its own securityContext's, else the pod's.
fn run_as_user(deployment: &Value, container: &Value) -> (u32, u32) {
    let pod = &deployment["spec"]["template"]["spec"]["securityContext"];
    let field = |name: &str| {
        container["securityContext"][name]
            .as_u64()
            .or(pod[name].as_u64())
            .and_then(|id| u32::try_from(id).ok())
            .unwrap_or_else(|| panic!("the mock's pod names no {name}"))
    };
    assert_eq!(pod["runAsNonRoot"], true);
    (field("runAsUser"), field("runAsGroup"))
}

/// The real uid of a process, from /proc.
fn real_uid(pid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Lets any user read the materialised volume, as the kubelet's ConfigMap files are.
fn make_readable(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut dirs = vec![dir.to_owned()];
    while let Some(dir) = dirs.pop() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            }
        }
    }
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
    serve_children(prism, children_for(spec), path).await
}

/// Runs Prism as our Deployment `children` would, and GETs `path`.
async fn serve_children(
    prism: &std::path::Path,
    children: Vec<Value>,
    path: &str,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let config_map = children.iter().find(|c| c["kind"] == "ConfigMap").unwrap();
    let deployment = children.iter().find(|c| c["kind"] == "Deployment").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mount = container["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let volume = &deployment["spec"]["template"]["spec"]["volumes"][0];
    materialise(config_map, volume, dir.path());
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
    // As the pod runs it: as the user our Deployment names (when the tests run as
    // root, through setpriv), with a private temporary directory for the /tmp emptyDir.
    let user = run_as_user(deployment, container);
    let tmp = tempfile::tempdir().unwrap();
    let as_root = real_uid(std::process::id()) == Some(0);
    let mut command = if as_root {
        make_readable(dir.path());
        std::os::unix::fs::chown(tmp.path(), Some(user.0), Some(user.1)).unwrap();
        let mut command = Command::new("setpriv");
        command
            .args([
                "--reuid",
                &user.0.to_string(),
                "--regid",
                &user.1.to_string(),
            ])
            .args(["--clear-groups", "--"])
            .arg(prism);
        command
    } else {
        Command::new(prism)
    };
    // Prism's own words, shown when it does not serve.
    let log_path = tmp.path().join("prism.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut mock = Mock(
        command
            .args(&args)
            .env("TMPDIR", tmp.path())
            .env("HOME", "/nonexistent")
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("prism starts"),
    );
    let said = || std::fs::read_to_string(&log_path).unwrap_or_default();

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
            // Serving, so setpriv has long since become prism.
            if as_root {
                assert_eq!(
                    real_uid(mock.0.id()),
                    Some(user.0),
                    "prism runs as the Deployment's user"
                );
            }
            let status = reply.status().as_u16();
            let headers = reply.headers().clone();
            return (status, headers, reply.json().await.unwrap_or(Value::Null));
        }
        if let Ok(Some(exit)) = mock.0.try_wait() {
            panic!(
                "prism exited ({exit}) before serving {url} with args {args:?}; it said:\n{}",
                said()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "prism did not start serving {url} with args {args:?}; it said:\n{}",
            said()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn prism_serves_examples_from_our_deployment() {
    let Some(prism) = support::oracles::tool("MHTEST_PRISM") else {
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
    let Some(prism) = support::oracles::tool("MHTEST_PRISM") else {
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

/// A multi-file definition as a git directory holds it: the operation's schema and a
/// whole path item live in other files, which Prism must find beside the root.
#[tokio::test]
async fn prism_resolves_a_bundled_multi_file_definition() {
    let Some(prism) = support::oracles::tool("MHTEST_PRISM") else {
        return;
    };
    let url = "https://git.example.com/team/shop.git";
    let sources = Arc::new(FakeSources::default());
    sources.serve(
        url,
        "main@sha1:abc",
        &[
            (
                "openapi.yaml",
                "openapi: 3.0.3\ninfo: {title: Shop, version: '1'}\npaths:\n  /pets/{id}:\n    get:\n      parameters:\n        - {name: id, in: path, required: true, schema: {type: integer}}\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema: {$ref: 'schemas/pet.yaml'}\n  /owners:\n    $ref: 'paths/owners.yaml'\n",
            ),
            (
                "schemas/pet.yaml",
                "type: object\nrequired: [name]\nproperties:\n  name: {type: string}\n  owner: {$ref: './owner.yaml'}\nexample: {name: rex, owner: {name: ann}}\n",
            ),
            (
                "schemas/owner.yaml",
                "type: object\nproperties:\n  name: {type: string}\n",
            ),
            (
                "paths/owners.yaml",
                "get:\n  responses:\n    '200':\n      description: ok\n      content:\n        application/json:\n          schema:\n            type: array\n            items: {$ref: '../schemas/owner.yaml'}\n          example: [{name: ann}, {name: bob}]\n",
            ),
            ("README.md", "not served"),
        ],
        false,
        Some(1),
    );
    let spec = json!({"definitionFrom": {"git": {"url": url, "ref": "main", "path": "shop"}}});
    let children = children_with(spec, sources);
    let config_map = children.iter().find(|c| c["kind"] == "ConfigMap").unwrap();
    assert!(config_map["data"].get("README.md").is_none());
    let (status, _, pet) = serve_children(&prism, children.clone(), "/pets/1").await;
    assert_eq!(
        (status, pet),
        (200, json!({"name": "rex", "owner": {"name": "ann"}}))
    );
    let (status, _, owners) = serve_children(&prism, children, "/owners").await;
    assert_eq!(
        (status, owners),
        (200, json!([{"name": "ann"}, {"name": "bob"}]))
    );
}
