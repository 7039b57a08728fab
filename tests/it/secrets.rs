//! No secret reaches what people and machines read: known secrets are put through every
//! path a URL takes (its query and fragment, its user-info, a redirect's target that
//! echoes the credentials sent, a proxy's URL, error text) into a real `serve` process,
//! and its answers (status), its log lines and `/metrics` are searched for them.

use std::process::Command;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::process::{Serving, binary};
use crate::support;

const QUERY: &str = "glpat-QUERYSECRET1";
const FRAGMENT: &str = "FRAGMENTSECRET2";
const BEARER: &str = "BEARERSECRET3";
const SIGNATURE: &str = "SIGNATURESECRET4";
const USER_INFO: &str = "USERINFOSECRET5";
const SECOND_QUERY: &str = "QUERYSECRET6";
const PROXY: &str = "PROXYSECRET7";
const SECRETS: &[&str] = &[
    QUERY,
    FRAGMENT,
    BEARER,
    SIGNATURE,
    USER_INFO,
    SECOND_QUERY,
    PROXY,
];

/// An origin whose file redirects to a URL that echoes the credentials it was sent, as
/// a signed redirect (S3's `X-Amz-Signature`) carries a secret in its query.
async fn echoing_origin() -> u16 {
    async fn config(headers: HeaderMap) -> axum::response::Response {
        let sent = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .replace(' ', "+");
        let location = format!("/gone?echo={sent}&X-Amz-Signature={SIGNATURE}");
        (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
    }
    let app = axum::Router::new()
        .route("/config.env", axum::routing::get(config))
        .fallback(|| async { (StatusCode::NOT_FOUND, "gone") });
    support::servers::serve_app(app, None).await
}

fn request(name: &str, url: &str, related: Value) -> Value {
    json!({
        "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
                   "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}"), "generation": 1},
                   "spec": {"image": "app:1", "intervalSeconds": 10,
                            "source": {"http": {"url": url, "secretRef": {"name": "token"}}}}},
        "children": {"ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}},
        "related": related,
        "finalizing": false
    })
}

/// The `Fetched` condition of an answer: (status, reason).
fn fetched(answer: &Value) -> (String, String) {
    answer["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Fetched")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_status_logs_or_metrics() {
    let port = echoing_origin().await;
    let closed = support::servers::closed_port();
    let allowed =
        format!("http://127.0.0.1:{port}/, http://127.0.0.1:{closed}/, http://localhost:{closed}/");
    let secret = {
        use base64::Engine;
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "token", "namespace": "team-a",
                            "annotations": {"sources.metahooks.io/allowed-urls": allowed}},
               "data": {"token": base64::engine::general_purpose::STANDARD.encode(BEARER)}})
    };
    let related = json!({"Secret.v1": {"team-a/token": secret}});
    let sources = [
        // A token in the query and the fragment, credentials sent to an origin whose
        // redirect echoes them.
        format!("http://127.0.0.1:{port}/config.env?private_token={QUERY}&ref=main#{FRAGMENT}"),
        // User-info and a query in a URL that cannot be reached: error text.
        format!("http://deploy:{USER_INFO}@127.0.0.1:{closed}/app.env?token={SECOND_QUERY}"),
        // Through a proxy (with credentials in its URL) that cannot be reached.
        format!("http://localhost:{closed}/app.env"),
    ];
    let mut command = Command::new(binary());
    command
        .env("NO_PROXY", "127.0.0.1")
        .args(["serve", "--log-format", "json", "--log-level", "debug"])
        .args(["--allow-scheme", "http", "--allow-cidr", "127.0.0.1/32"])
        .args([
            "--source-proxy",
            &format!("http://proxy:{PROXY}@127.0.0.1:{closed}"),
        ])
        .args([
            "--cache-dir",
            &tempfile::tempdir().unwrap().keep().display().to_string(),
        ]);
    let mut server = Serving::start(command, false);
    let client = reqwest::Client::new();
    let mut answers = Vec::new();
    for (index, url) in sources.iter().enumerate() {
        let body = request(&format!("s{index}"), url, related.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        let answer = loop {
            let answer: Value = client
                .post(format!("http://{}/monitoredservice/sync", server.hooks))
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let (status, reason) = fetched(&answer);
            if status == "False" && reason != "FetchPending" {
                break answer;
            }
            assert!(Instant::now() < deadline, "never fetched: {answer}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        answers.push(answer.to_string());
    }
    let metrics = reqwest::get(format!("http://{}/metrics", server.probes))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let _ = server.child_kill();
    let logs = server.all_lines().join("\n");
    let status = answers.join("\n");
    // The paths were taken: the redirect's echo and the query are shown redacted.
    assert!(status.contains("echo=redacted"), "{status}");
    assert!(logs.contains("private_token=redacted"), "{logs}");
    assert!(status.contains("through the proxy"), "{status}");
    assert!(metrics.contains("remote=\"http://127.0.0.1:"), "{metrics}");
    for secret in SECRETS {
        assert!(!status.contains(secret), "{secret} in status: {status}");
        assert!(!logs.contains(secret), "{secret} in the log: {logs}");
        assert!(!metrics.contains(secret), "{secret} in /metrics: {metrics}");
    }
}
