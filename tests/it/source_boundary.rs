//! The source boundary as an attacker meets it: a CR author names a Secret of their
//! namespace and points the source at a server they control. Every server here is a
//! hostile one written for the test, on loopback; each records what reached it.

use crate::support;

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use support::emulator::Emulator;

/// Every request head that reached the sink: the path and the Authorization header.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// An exfiltration sink: answers 401 with a Basic challenge (what makes git offer
/// credentials) to everything, except `redirect` paths, which it sends to `to`.
async fn sink(redirect: Option<(&'static str, String)>) -> (u16, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
        let record = record.clone();
        let redirect = redirect.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            record.lock().unwrap().push((uri.path().to_owned(), auth));
            if let Some((_, to)) = redirect.filter(|(from, _)| uri.path() == *from) {
                return (StatusCode::FOUND, [("location", to)], "").into_response();
            }
            (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic realm=\"x\"".to_owned())],
                "",
            )
                .into_response()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, seen)
}

const TOKEN: &str = "TOKEN-that-must-never-leave";

fn secret(name: &str, secret_type: &str, allowed: Option<String>) -> Value {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut secret = json!({"apiVersion": "v1", "kind": "Secret", "type": secret_type,
        "metadata": {"name": name, "namespace": "team-a"},
        "data": {"token": b64(TOKEN), "username": b64("deploy-bot")}});
    if let Some(allowed) = allowed {
        secret["metadata"]["annotations"] = json!({"sources.metahooks.io/allowed-urls": allowed});
    }
    secret
}

fn service(name: &str, source: Value) -> Value {
    json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
           "metadata": {"name": name, "namespace": "team-a"},
           "spec": {"image": "app:1", "source": source}})
}

fn fetched(emulator: &Emulator, name: &str) -> Option<(String, String, String)> {
    let parent = emulator.get(
        "services.example.com/v1alpha1",
        "MonitoredService",
        "team-a",
        name,
    )?;
    let c = parent["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Fetched")?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str()?.to_owned(),
    ))
}

fn leaked(seen: &Seen) -> Vec<(String, Option<String>)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, auth)| auth.is_some())
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_only_the_urls_its_owner_allowed() {
    let (port, seen) = sink(None).await;
    let mut h = support::source_harness(support::loopback_policy(&["http"])).await;
    let sink_url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    h.emulator.apply(secret("unbound", "Opaque", None));
    h.emulator.apply(secret(
        "elsewhere",
        "Opaque",
        Some("https://git.example.com/team-a/".to_owned()),
    ));
    h.emulator.apply(secret(
        "sa-token",
        "kubernetes.io/service-account-token",
        Some(sink_url("/")),
    ));
    h.emulator
        .apply(secret("sibling", "Opaque", Some(sink_url("/team-a"))));
    let cases = [
        (
            "git-unbound",
            json!({"git": {"url": sink_url("/repo.git"), "secretRef": {"name": "unbound"}}}),
        ),
        (
            "http-unbound",
            json!({"http": {"url": sink_url("/app.env"), "secretRef": {"name": "unbound"}}}),
        ),
        (
            "git-elsewhere",
            json!({"git": {"url": sink_url("/team-a/repo.git"), "secretRef": {"name": "elsewhere"}}}),
        ),
        (
            "http-sa-token",
            json!({"http": {"url": sink_url("/app.env"), "secretRef": {"name": "sa-token"}}}),
        ),
        // A path that only starts like the allowed one is not under it.
        (
            "git-prefix-lookalike",
            json!({"git": {"url": sink_url("/team-ab/repo.git"), "secretRef": {"name": "sibling"}}}),
        ),
    ];
    for (name, source) in &cases {
        h.emulator.apply(service(name, source.clone()));
    }
    support::emulator::settle(
        &mut h.emulator,
        &h.fetcher,
        "MonitoredService",
        "credentials refused",
        |e| {
            cases
                .iter()
                .all(|(name, _)| fetched(e, name).is_some_and(|f| f.1 == "CredentialsNotAllowed"))
        },
    )
    .await;
    for (name, _) in &cases {
        let (status, _, message) = fetched(&h.emulator, name).unwrap();
        assert_eq!(status, "False", "{name}");
        assert!(
            message.contains("Secret") && message.contains(&format!("127.0.0.1:{port}")),
            "{name}: the message names the Secret and the URL: {message}"
        );
        assert!(!message.contains(TOKEN), "{message}");
    }
    let unbound = fetched(&h.emulator, "git-unbound").unwrap().2;
    assert!(
        unbound.contains("kubectl annotate secret unbound sources.metahooks.io/allowed-urls="),
        "the message says how to allow it: {unbound}"
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        0,
        "no request is made with refused credentials: {:?}",
        seen.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_redirect_out_of_the_allowed_prefix_carries_no_credentials() {
    // The allowed server redirects to a path outside the prefix on the same origin.
    let (port, seen) = sink(Some(("/team-a/app.env", "/stolen/app.env".to_owned()))).await;
    let mut h = support::source_harness(support::loopback_policy(&["http"])).await;
    h.emulator.apply(secret(
        "bound",
        "Opaque",
        Some(format!("http://127.0.0.1:{port}/team-a/")),
    ));
    h.emulator.apply(service(
        "redirected",
        json!({"http": {"url": format!("http://127.0.0.1:{port}/team-a/app.env"),
                        "secretRef": {"name": "bound"}}}),
    ));
    support::emulator::settle(
        &mut h.emulator,
        &h.fetcher,
        "MonitoredService",
        "fetch done",
        |e| fetched(e, "redirected").is_some_and(|f| f.1 != "FetchPending"),
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|(path, auth)| path == "/team-a/app.env" && auth.is_some()),
        "the allowed URL gets the credentials: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(path, auth)| path == "/stolen/app.env" && auth.is_none()),
        "the redirect is followed without them: {seen:?}"
    );
    let leaks: Vec<_> = leaked(&Arc::new(Mutex::new(seen)))
        .into_iter()
        .filter(|(path, _)| !path.starts_with("/team-a/"))
        .collect();
    assert!(leaks.is_empty(), "credentials left the prefix: {leaks:?}");
}
