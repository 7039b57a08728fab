//! The real binary: `serve` logs one JSON line per hook call, turns readiness to 503 on
//! SIGTERM while still answering hooks, then exits 0; `version`, `crds` and `render` work.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub(crate) fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_metahooks")
}

/// A `serve` process on ports the kernel chose (`127.0.0.1:0`), learnt from its start-up
/// log lines: binding a port, letting it go and passing its number on would race with
/// anything else binding one in between. Killed when dropped, however the test ends.
pub(crate) struct Serving {
    child: std::process::Child,
    pub(crate) hooks: String,
    pub(crate) probes: String,
    receivers: Option<String>,
    /// The stdout lines read so far.
    pub(crate) seen: Vec<String>,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Serving {
    /// Spawns `command` (which ends in `serve` and its flags) with the listen flags
    /// added, and reads its stdout until it says where it listens, which it does once it
    /// is ready.
    pub(crate) fn start(mut command: Command, with_receivers: bool) -> Serving {
        command.args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"]);
        if with_receivers {
            command.args(["--receiver-listen", "127.0.0.1:0"]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary starts");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut serving = Serving {
            child,
            hooks: String::new(),
            probes: String::new(),
            receivers: None,
            seen: Vec::new(),
            lines,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while serving.hooks.is_empty() || (with_receivers && serving.receivers.is_none()) {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = serving.lines.recv_timeout(left) else {
                panic!(
                    "the server never said where it listens: {:#?}",
                    serving.seen
                );
            };
            let value: Value = serde_json::from_str(&line).unwrap_or_default();
            let text = |field: &str| value[field].as_str().unwrap_or_default().to_owned();
            match value["message"].as_str() {
                Some("listening") => {
                    (serving.hooks, serving.probes) = (text("hooks"), text("probes"))
                }
                Some("push receivers listening") => serving.receivers = Some(text("addr")),
                _ => {}
            }
            serving.seen.push(line);
        }
        serving
    }

    /// Every stdout line, once the process has ended (and so closed its stdout).
    pub(crate) fn all_lines(&mut self) -> Vec<String> {
        let mut all = std::mem::take(&mut self.seen);
        all.extend(self.lines.iter());
        all
    }
}

impl Serving {
    /// Ends the process now (its stdout then closes).
    pub(crate) fn child_kill(&mut self) -> std::io::Result<()> {
        self.child.kill()?;
        self.child.wait().map(|_| ())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_logs_json_and_drains_on_sigterm() {
    let mut command = Command::new(binary());
    // Every hook call at debug; the rest (hyper's own lines) at info.
    command.args([
        "serve",
        "--shutdown-delay-seconds",
        "5",
        "--log-level",
        "info,metahooks=debug",
    ]);
    let mut served = Serving::start(command, false);
    let (hook_port, probe_port) = (served.hooks.clone(), served.probes.clone());

    let request = support::read_json(
        &support::repo_dir().join("hooks-tests/apimock/fresh-parent/request.json"),
    );
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("http://{hook_port}/apimock/sync"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);

    // A call for a hook that does not exist: refused, and the log says why.
    let wrong = client
        .post(format!("http://{hook_port}/apimock/synk"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 404);

    // A source the default policy refuses (plain http): poll until the answer reports
    // the failed fetch, whose log line then names the fetch it belongs to.
    let refused = json!({"controller": {}, "children": {}, "related": {},
        "parent": {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
            "metadata": {"name": "web", "namespace": "team-a", "generation": 1},
            "spec": {"image": "web:1", "config_repo": "http://127.0.0.1:9/config"}}});
    let started = Instant::now();
    loop {
        let answer: Value = client
            .post(format!("http://{hook_port}/monitoredservice/sync"))
            .json(&refused)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if answer["status"]["conditions"][0]["reason"] == "SchemeRefused" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the refused fetch never reported: {answer}"
        );
        tokio::task::yield_now().await;
    }

    Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    // Readiness flips as soon as the signal is handled: wait for that event, then call a
    // hook inside the (generous) drain window.
    let started = Instant::now();
    while reqwest::get(format!("http://{probe_port}/readyz"))
        .await
        .unwrap()
        .status()
        != 503
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "readiness never flipped after SIGTERM"
        );
        tokio::task::yield_now().await;
    }
    let during = client
        .post(format!("http://{hook_port}/apimock/sync"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(
        during.status(),
        200,
        "hooks are still answered during the drain delay"
    );

    let (exit, mut served) = tokio::task::spawn_blocking(move || (served.child.wait(), served))
        .await
        .unwrap();
    let exit = exit.unwrap();
    assert!(exit.success(), "exit status {exit:?}");
    let lines = served.all_lines();
    let calls: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| {
            l["controller"] == "apimock"
                && l["hook"] == "sync"
                && l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("hook "))
        })
        .collect();
    assert_eq!(calls.len(), 2, "one JSON line per hook call: {lines:#?}");
    // The first answer creates the mock's children, which is worth an info line; the
    // same call again changes nothing and is logged at debug.
    assert_eq!(calls[0]["message"], "hook answer changes the children");
    assert_eq!(calls[0]["level"], "INFO");
    assert_eq!(calls[0]["created"], 3, "ConfigMap, Deployment, Service");
    assert_eq!(calls[0]["deleted"], 0);
    assert_eq!(calls[1]["message"], "hook call");
    assert_eq!(calls[1]["level"], "DEBUG");
    let line = &calls[0];
    assert_eq!(line["controller"], "apimock");
    assert_eq!(line["hook"], "sync");
    assert_eq!(line["parent.namespace"], "team-a");
    assert_eq!(line["parent.name"], "pets");
    assert_eq!(line["status"], 200);
    let duration = line["duration_ms"].to_string();
    assert!(
        line["duration_ms"].as_f64().is_some()
            && duration
                .split('.')
                .nth(1)
                .is_none_or(|decimals| decimals.len() <= 3),
        "a number, to the microsecond: {duration}"
    );
    assert!(lines.iter().any(|l| l.contains("shutdown complete")));
    let parsed: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let listening = parsed
        .iter()
        .find(|l| l["message"] == "listening")
        .unwrap_or_else(|| panic!("no startup line: {lines:#?}"));
    assert_eq!(
        listening["version"],
        env!("CARGO_PKG_VERSION"),
        "{listening}"
    );
    assert_eq!(listening["max_in_flight"], 64, "{listening}");
    let refused_call = parsed
        .iter()
        .find(|l| l["message"] == "hook call refused")
        .unwrap_or_else(|| panic!("no refused call logged: {lines:#?}"));
    assert_eq!(refused_call["level"], "WARN", "{refused_call}");
    assert_eq!(refused_call["status"], 404, "{refused_call}");
    assert_eq!(refused_call["reason"], "NotFound", "{refused_call}");
    assert!(
        refused_call["error"]
            .as_str()
            .is_some_and(|e| e.contains("/apimock/synk")),
        "{refused_call}"
    );
    let summary = parsed
        .iter()
        .find(|l| l["message"] == "source fetch failed for some requests")
        .unwrap_or_else(|| panic!("no failed fetch summary: {lines:#?}"));
    assert_eq!(summary["level"], "WARN", "{summary}");
    assert_eq!(summary["reasons"], "SchemeRefused", "{summary}");
    let failed = lines
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|l| l["message"] == "source fetch failed")
        .unwrap_or_else(|| panic!("no failed fetch logged: {lines:#?}"));
    assert_eq!(failed["span"]["name"], "fetch", "{failed}");
    assert_eq!(
        failed["span"]["remote"], "http://127.0.0.1:9/config",
        "the URL, not an internal key: {failed}"
    );
    assert_eq!(failed["reason"], "SchemeRefused");
}

#[test]
fn version_crds_and_render() {
    let version = Command::new(binary()).arg("version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("metahooks "));

    let crds = Command::new(binary()).arg("crds").output().unwrap();
    assert!(crds.status.success());
    let text = String::from_utf8(crds.stdout).unwrap();
    let mut committed = String::new();
    for file in [
        "apimocks.apirator.io.yaml",
        "monitoredservices.metahooks.io.yaml",
        "config-monitor/monitoredservices.services.example.com.yaml",
    ] {
        committed.push_str("---\n");
        committed.push_str(
            &std::fs::read_to_string(support::repo_dir().join("manifests/crds").join(file))
                .unwrap(),
        );
    }
    assert_eq!(
        text, committed,
        "manifests/crds/ must equal `metahooks crds` (regenerate with: cargo run -- crds)"
    );

    let sample = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let rendered = Command::new(binary())
        .args(["render", "apimock", "-f"])
        .arg(&sample)
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let response: Value = serde_json::from_slice(&rendered.stdout).unwrap();
    let kinds: Vec<&str> = response["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment", "Service", "Ingress"]);

    let unknown = Command::new(binary())
        .args(["render", "nosuch", "-f"])
        .arg(&sample)
        .output()
        .unwrap();
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown controller"));
}

#[test]
fn render_with_observed_children_keeps_the_last_good_mock() {
    let dir = tempfile::tempdir().unwrap();
    let good = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let first = Command::new(binary())
        .args(["render", "apimock", "-f"])
        .arg(&good)
        .args(["-o", "yaml"])
        .output()
        .unwrap();
    assert!(first.status.success());
    let response: Value =
        metahooks::yaml::from_str(&String::from_utf8(first.stdout).unwrap()).unwrap();
    let observed: Vec<Value> = response["children"].as_array().unwrap().clone();
    let observed_path = dir.path().join("observed.yaml");
    std::fs::write(
        &observed_path,
        metahooks::yaml::to_string(&serde_json::json!({"kind": "List", "items": observed}))
            .unwrap(),
    )
    .unwrap();
    let broken_path = dir.path().join("broken.yaml");
    std::fs::write(&broken_path, "apiVersion: apirator.io/v1alpha1\nkind: APIMock\nmetadata: {name: users}\nspec: {definition: 'openapi: 3.0.0'}\n").unwrap();
    let second = Command::new(binary())
        .args(["render", "apimock", "-f"])
        .arg(&broken_path)
        .arg("--observed")
        .arg(&observed_path)
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let kept: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(kept["status"]["phase"], "Error");
    assert_eq!(
        kept["children"].as_array().unwrap().len(),
        3,
        "ConfigMap, Deployment, Service kept (no Ingress in the new spec)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_raises_its_open_file_limit_and_fits_the_connection_cap_under_it() {
    // A soft limit of 64 under a hard limit of 512: raised to 512, and the default cap
    // of 1024 connections lowered to leave descriptors for everything else.
    let mut command = Command::new("prlimit");
    command
        .arg("--nofile=64:512")
        .arg(binary())
        .args(["serve", "--max-in-flight", "16"]);
    let served = Serving::start(command, false);
    // Logged before the server listens, so among the lines already read.
    let limit = served
        .seen
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == "open-file limit")
        .unwrap_or_else(|| panic!("no open-file limit line: {:#?}", served.seen));
    let fields = &limit;
    assert_eq!(fields["soft_before"], 64, "{limit}");
    assert_eq!(fields["soft"], 512, "{limit}");
    assert_eq!(fields["hard"], 512, "{limit}");
    assert_eq!(fields["max_connections"], 256, "{limit}");
}

#[test]
fn source_and_receiver_flags_are_checked_before_serving() {
    let run = |args: &[&str]| {
        let output = Command::new(binary())
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--probe-listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (ok, stderr) = run(&["--source-ca-file", "/nonexistent/ca.pem"]);
    assert!(
        !ok && stderr.contains("--source-ca-file") && stderr.contains("/nonexistent/ca.pem"),
        "{stderr}"
    );
    let not_pem = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_pem.path(), "not a certificate").unwrap();
    let (ok, stderr) = run(&["--source-ca-file", not_pem.path().to_str().unwrap()]);
    assert!(!ok && stderr.contains("BEGIN CERTIFICATE"), "{stderr}");
    let (ok, stderr) = run(&["--receiver-listen", "127.0.0.1:0"]);
    assert!(!ok && stderr.contains("--receiver-secret-file"), "{stderr}");
    let empty = tempfile::NamedTempFile::new().unwrap();
    let (ok, stderr) = run(&[
        "--receiver-listen",
        "127.0.0.1:0",
        "--receiver-secret-file",
        empty.path().to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("is empty"), "{stderr}");
    let (ok, stderr) = run(&["--allow-scheme", "ftp"]);
    assert!(
        !ok && stderr.contains("ssh"),
        "the possible values list ssh: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_push_receivers_on_their_own_port() {
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "s3cret\n").unwrap();
    let mut command = Command::new(binary());
    command
        .arg("serve")
        .arg("--receiver-secret-file")
        .arg(secret.path());
    let served = Serving::start(command, true);
    let hook_port = served.hooks.clone();
    let receiver_port = served.receivers.clone().unwrap_or_default();
    let client = reqwest::Client::new();
    let body = br#"{"url": "https://git.example.com/a.git"}"#;
    let url = format!("http://{receiver_port}/receivers/generic");
    let forged = client
        .post(&url)
        .header("x-signature-256", "sha256=00")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    // The file's trailing newline is not part of the secret.
    let signature = metahooks::receivers::verify::sign(body, b"s3cret");
    let signed = client
        .post(&url)
        .header("x-signature-256", signature)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 202);
    // Receivers are not on the hook port.
    let on_hooks = client
        .post(format!("http://{hook_port}/receivers/generic"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(on_hooks.status(), 404);
}

#[test]
fn boolean_environment_variables_take_the_usual_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let mock = dir.path().join("mock.yaml");
    std::fs::write(
        &mock,
        "apiVersion: apirator.io/v1alpha1\nkind: APIMock\nmetadata: {name: shop, namespace: team}\nspec:\n  definitionFrom:\n    http: {url: \"https://127.0.0.1:1/api.yaml\"}\n",
    )
    .unwrap();
    let reason = |value: &str| {
        let output = Command::new(binary())
            .args(["render", "apimock", "-f"])
            .arg(&mock)
            .env("METAHOOKS_ALLOW_PRIVATE_ADDRESSES", value)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{value}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        if text.contains("reason: HostRefused") {
            "refused"
        } else {
            "allowed"
        }
    };
    for on in ["1", "true", "yes", "on"] {
        assert_eq!(reason(on), "allowed", "{on}");
    }
    for off in ["0", "false", "no", "off"] {
        assert_eq!(reason(off), "refused", "{off}");
    }
}

#[test]
fn a_startup_error_says_its_cause_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let output = Command::new(binary())
        .args([
            "serve",
            "--listen",
            &address,
            "--probe-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("metahooks:"))
        .unwrap_or_default();
    assert!(
        line.contains(&format!("cannot listen on {address} for hooks")),
        "{stderr}"
    );
    assert_eq!(line.matches("in use").count(), 1, "{line}");
}

#[test]
fn a_misspelt_variable_or_log_level_stops_serve_before_it_starts() {
    let refused = |variable: (&str, &str), args: &[&str]| {
        let output = Command::new(binary())
            .env(variable.0, variable.1)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--probe-listen",
                "127.0.0.1:0",
            ])
            .args(args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "started");
        assert!(output.stdout.is_empty(), "logged before refusing");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let typo = refused(("METAHOOKS_INGRES_HOST", "*.example.com"), &[]);
    assert!(
        typo.contains("unknown environment variable METAHOOKS_INGRES_HOST (did you mean METAHOOKS_INGRESS_HOST?)"),
        "{typo}"
    );
    let level = refused(("HOME", "/root"), &["--log-level", "debugg"]);
    assert!(level.contains("--log-level \"debugg\""), "{level}");
    assert!(level.contains("did you mean debug?"), "{level}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_log_lines_state_the_policy_in_force() {
    let mut command = Command::new(binary());
    command
        .env("METAHOOKS_INGRESS_HOST", "*.mocks.example.com")
        .args([
            "serve",
            "--allow-cidr",
            "10.0.0.0/8",
            "--service-type",
            "ClusterIP",
        ]);
    let server = Serving::start(command, false);
    let lines: Vec<Value> = server
        .seen
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_default())
        .collect();
    let line = |message: &str| {
        lines
            .iter()
            .find(|l| l["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in {lines:#?}"))
            .clone()
    };
    let children = line("policy for what CRs may create");
    assert_eq!(children["ingress_hosts"], "*.mocks.example.com");
    assert_eq!(children["service_types"], "ClusterIP");
    assert_eq!(children["ingress_classes"], "any");
    assert_eq!(children["deny_secret_env"], false);
    let sources = line("policy for sources");
    assert_eq!(sources["schemes"], "https");
    assert_eq!(sources["allow_cidrs"], "10.0.0.0/8");
    assert_eq!(sources["allow_private_addresses"], false);
    assert_eq!(sources["https_proxy"], "none");
    let limits = line("limits of hook calls");
    assert_eq!(limits["auth"], false);
    assert_eq!(limits["max_connections_per_peer"], 256);
}

#[test]
fn a_hooks_url_without_a_scheme_says_what_is_missing() {
    let sample = support::examples_dir().join("users.api-mock.cr.yaml");
    let output = Command::new(binary())
        .args(["emulate", "--hooks-url", "127.0.0.1:8080", "-f"])
        .arg(&sample)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("has no scheme") && stderr.contains("http://"),
        "{stderr}"
    );
}

#[test]
fn every_example_renders_with_the_objects_beside_it_as_related() {
    let dir = support::examples_dir();
    let mut rendered = 0;
    for entry in std::fs::read_dir(&dir).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "yaml") {
            continue;
        }
        let documents = support::read_yaml_documents(&path);
        let controller = documents.iter().find_map(|d| match d["kind"].as_str() {
            Some("APIMock") => Some("apimock"),
            Some("MonitoredService") => Some("monitoredservice"),
            Some("Deployment" | "StatefulSet") => Some("configsync"),
            _ => None,
        });
        let Some(controller) = controller else {
            continue;
        };
        let output = Command::new(binary())
            .args(["render", controller, "-o", "json", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        rendered += 1;
    }
    assert!(rendered >= 5, "rendered {rendered} examples");

    // The ConfigMap in the same file is the related object the APIMock reads; given
    // apart with --related, it is read just the same.
    let answer = |args: &[&std::ffi::OsStr]| {
        let output = Command::new(binary())
            .args(["render", "apimock", "-o", "json"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
        answer["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Fetched"))
            .map(|c| c["reason"].clone())
            .unwrap_or_default()
    };
    let both = dir.join("shop.api-mock-from-configmap.yaml");
    assert_eq!(answer(&["-f".as_ref(), both.as_os_str()]), "Fetched");
    let split = tempfile::tempdir().unwrap();
    let documents = support::read_yaml_documents(&both);
    let write = |name: &str, kind: &str| {
        let path = split.path().join(name);
        let object = documents.iter().find(|d| d["kind"] == kind).unwrap();
        std::fs::write(&path, serde_json::to_string(object).unwrap()).unwrap();
        path
    };
    let (mock, config_map) = (write("mock.json", "APIMock"), write("cm.json", "ConfigMap"));
    assert_eq!(
        answer(&["-f".as_ref(), mock.as_os_str()]),
        "ConfigMapNotFound"
    );
    assert_eq!(
        answer(&[
            "-f".as_ref(),
            mock.as_os_str(),
            "--related".as_ref(),
            config_map.as_os_str()
        ]),
        "Fetched"
    );
}

#[test]
fn text_logs_carry_no_colour_codes_into_a_pipe() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let output = Command::new(binary())
        .args([
            "serve",
            "--log-format",
            "text",
            "--probe-listen",
            "127.0.0.1:0",
            "--listen",
        ])
        .arg(taken.local_addr().unwrap().to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("open-file limit"),
        "a text line was logged: {stdout}"
    );
    assert!(!stdout.contains('\u{1b}'), "no ANSI escapes: {stdout:?}");
}

#[test]
fn render_names_what_a_file_holds_with_the_right_article() {
    let dir = tempfile::tempdir().unwrap();
    let mock = dir.path().join("mock.yaml");
    std::fs::write(
        &mock,
        "apiVersion: apirator.io/v1alpha1\nkind: APIMock\nmetadata: {name: x}\nspec: {}\n",
    )
    .unwrap();
    let output = Command::new(binary())
        .args(["render", "monitoredservice", "-f"])
        .arg(&mock)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("holds an apirator.io/v1alpha1 APIMock"),
        "{stderr}"
    );
    assert!(stderr.contains("render apimock"), "{stderr}");
}

/// `metahooks crds | head -1`: a reader that stops early ends the command quietly (its
/// output, 80 KB of CRDs, is more than a pipe holds, so the write does fail).
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let mut child = Command::new(binary())
        .arg("crds")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{:?}", output.status);
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

/// A JSON file is read as JSON: an emoji escaped as a surrogate pair (how JSON writers
/// write it) is not the invalid escape YAML would take it for.
/// `metahooks render <controller> -o json -f <file>`, the file holding `text`.
fn render_file(controller: &str, file_name: &str, text: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(file_name);
    std::fs::write(&file, text).unwrap();
    Command::new(binary())
        .args(["render", controller, "-o", "json", "-f"])
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn render_reads_a_json_file_as_json() {
    let definition = "openapi: 3.0.3\ninfo: {title: Smiles, version: '1'}\npaths: {}\n";
    let parent = json!({"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "smiles", "namespace": "team"},
        "spec": {"definition": definition}});
    let text = serde_json::to_string(&parent)
        .unwrap()
        .replace("Smiles", "Smiles \\ud83d\\ude00");
    let rendered = render_file("apimock", "mock.json", &text);
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let answer: Value = serde_json::from_slice(&rendered.stdout).unwrap();
    assert_eq!(answer["status"]["definition"]["title"], "Smiles \u{1F600}");
}

/// `render` passes on only the related objects the controller's customize hook selects,
/// as the cluster does: a Secret without configsync's credentials label works in neither,
/// and render says it left it out.
#[test]
fn render_passes_related_objects_through_the_customize_rules() {
    let rendered = render_file(
        "configsync",
        "workload.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: team\n  annotations:\n    configsync.metahooks.io/git-url: https://git.example.com/config.git\n    configsync.metahooks.io/secret: creds\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: web, image: web:1}]}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: creds, namespace: team}\nstringData: {token: t}\n",
    );
    let stderr = String::from_utf8_lossy(&rendered.stderr);
    assert!(rendered.status.success(), "{stderr}");
    assert!(
        stderr.contains("left out Secret team/creds: no related-resource rule of the configsync customize hook selects it"),
        "{stderr}"
    );
    let answer: Value = serde_json::from_slice(&rendered.stdout).unwrap();
    let error = answer["annotations"]["configsync.metahooks.io/error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.starts_with("SecretNotFound: "), "{answer}");
}

/// `render` runs the same sync as the server: a config that breaks its schema shows the
/// same verdict, so a team can check a change in CI before merging it.
#[test]
fn render_shows_a_schema_violation_as_the_server_would() {
    let repo = support::servers::Repo::new();
    repo.commit(&[("app.env", "PORT=eighty\n")]);
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("web.yaml");
    let cr = serde_json::json!({
        "apiVersion": "metahooks.io/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"image": "web:1", "format": "env",
                 "configSchema": {"inline": {"properties": {"PORT": {"pattern": "^[0-9]+$"}}}},
                 "source": {"git": {"url": format!("file://{}", repo.bare().display()),
                                    "ref": "main", "path": "app.env"}}}});
    std::fs::write(&parent, cr.to_string()).unwrap();
    let output = Command::new(binary())
        .args(["render", "monitoredservice", "-f"])
        .arg(&parent)
        .args(["--allow-scheme", "file", "--cache-dir"])
        .arg(dir.path().join("cache"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rendered: Value = serde_json::from_slice(&output.stdout).unwrap();
    let valid = rendered["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "ConfigValid"))
        .cloned()
        .unwrap_or_else(|| panic!("{rendered}"));
    assert_eq!(valid["status"], "False", "{valid}");
    assert_eq!(valid["reason"], "SchemaViolation", "{valid}");
    assert!(
        valid["message"].as_str().unwrap().contains("/PORT"),
        "{valid}"
    );
}
