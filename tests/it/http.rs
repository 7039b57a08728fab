//! The hook server over real HTTP: every status code of the error model, auth on and
//! off, TLS and mTLS, ETag/304, probes and metrics. Test controllers stand in for real
//! ones where a behaviour (slowness, a panic, an internal error) must be provoked.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use metahooks::controllers::common::reading::Reads;
use metahooks::controllers::{Answer, CompositeHooks, Context, Registry, Reply};
use metahooks::error::HookError;
use metahooks::protocol::{CompositeRequest, CompositeResponse};
use metahooks::server::{Auth, Clock, Limits, Server, ServerSettings, TlsFiles};
use metahooks::source::fake::FakeSources;
use serde_json::{Value, json};

/// Answers with the parent's name in status; `gate` and `fail` provoke the error paths.
struct Probe {
    gate: Option<Gate>,
    fail: Option<&'static str>,
}

/// Holds a controller's computation until the test opens it, and tells the test when a
/// computation has entered: the test waits on these events, never on the clock.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<GateState>, Condvar)>);

#[derive(Default)]
struct GateState {
    entered: usize,
    left: usize,
    open: bool,
}

impl Gate {
    fn pass(&self) {
        let (state, changed) = &*self.0;
        let mut state = state.lock().unwrap();
        state.entered += 1;
        changed.notify_all();
        while !state.open {
            state = changed.wait(state).unwrap();
        }
        state.left += 1;
        changed.notify_all();
    }

    fn open(&self) {
        let (state, changed) = &*self.0;
        state.lock().unwrap().open = true;
        changed.notify_all();
    }

    /// Waits (off the async runtime) until `count` computations have entered (or left).
    async fn wait_for(&self, count: usize, left: bool) {
        let gate = self.clone();
        tokio::task::spawn_blocking(move || {
            let (state, changed) = &*gate.0;
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let mut state = state.lock().unwrap();
            while (if left { state.left } else { state.entered }) < count {
                let remaining = deadline.saturating_duration_since(std::time::Instant::now());
                assert!(!remaining.is_zero(), "gate event never happened");
                state = changed.wait_timeout(state, remaining).unwrap().0;
            }
        })
        .await
        .unwrap();
    }
}

impl CompositeHooks for Probe {
    fn sync(
        &self,
        request: &CompositeRequest,
        _: &Context,
    ) -> Result<Answer<CompositeResponse>, HookError> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        match self.fail {
            Some("panic") => panic!("test controller panics"),
            // A fault of ours: an object that does not serialise.
            Some(_) => Err(metahooks::error::Fault::serialise("the children")(
                serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
            )),
            None => Ok(Answer::of(CompositeResponse::new(
                json!({"seen": request.parent["metadata"]["name"]}),
                vec![],
            ))),
        }
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        self.sync(request, ctx)
            .map(|answer| answer.response.with_finalized(true))
    }
}

fn registry_with(gate: &Gate) -> Registry {
    Registry::new()
        .composite(
            "probe",
            Probe {
                gate: None,
                fail: None,
            },
        )
        .composite(
            "slow",
            Probe {
                gate: Some(gate.clone()),
                fail: None,
            },
        )
        .composite(
            "broken",
            Probe {
                gate: None,
                fail: Some("serialise"),
            },
        )
        .composite(
            "panics",
            Probe {
                gate: None,
                fail: Some("panic"),
            },
        )
}

fn hook_request(name: &str) -> Value {
    json!({"controller": {"spec": {"hooks": {"sync": {"version": "v1"}}}}, "parent": {"metadata": {"name": name, "namespace": "ns"}},
           "children": {}, "related": {}, "finalizing": false})
}

async fn start(settings: ServerSettings) -> Server {
    start_gated(settings, &Gate::default()).await
}

async fn start_gated(settings: ServerSettings, gate: &Gate) -> Server {
    Server::start(settings, registry_with(gate), Clock::System)
        .await
        .expect("server starts")
}

async fn post_raw(base: &str, path: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("request is answered")
}

/// The status and `error` of an error answer, which always carries a `reason` too.
async fn error_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("error body is JSON");
    assert!(
        body["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "an error answer without a reason: {body}"
    );
    (
        status,
        body["error"].as_str().expect("error field").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn status_codes_of_the_error_model() {
    let mut settings = support::local_settings();
    settings.limits = Limits {
        body_bytes: 64 * 1024,
        max_in_flight: 1,
        deadline: Duration::from_secs(30),
        retry_after_seconds: 2,
        ..Limits::default()
    };
    let gate = Gate::default();
    let server = start_gated(settings, &gate).await;
    let base = format!("http://{}", server.hook_addr);
    let body = |v: &Value| serde_json::to_vec(v).unwrap();

    let ok = post_raw(&base, "/probe/sync", body(&hook_request("p1"))).await;
    assert_eq!(ok.status(), 200);
    assert!(ok.headers().get("etag").is_some());
    assert_eq!(
        ok.json::<Value>().await.unwrap(),
        json!({"status": {"seen": "p1"}, "children": []})
    );

    let (code, message) =
        error_of(post_raw(&base, "/probe/sync", b"{not json".to_vec()).await).await;
    assert_eq!(code, 400);
    assert!(message.contains("not a hook request"), "{message}");

    let (code, message) =
        error_of(post_raw(&base, "/probe/sync", body(&json!({"children": {}}))).await).await;
    assert_eq!(code, 400, "{message}");
    assert!(message.contains("no parent object"), "{message}");

    let (code, message) = error_of(
        post_raw(
            &base,
            "/probe/sync",
            body(&json!({"parent": {"metadata": {}}, "children": []})),
        )
        .await,
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        message.contains("children"),
        "the JSON path is named: {message}"
    );

    let (code, _) = error_of(post_raw(&base, "/nosuch/sync", body(&hook_request("x"))).await).await;
    assert_eq!(code, 404);
    // Each hook has a path of its own; the same path percent-escaped still finds it.
    let escaped = post_raw(&base, "/pr%6Fbe/s%79nc", body(&hook_request("p2"))).await;
    assert_eq!(escaped.status(), 200);
    assert_eq!(
        escaped.json::<Value>().await.unwrap(),
        json!({"status": {"seen": "p2"}, "children": []})
    );
    let (code, message) =
        error_of(post_raw(&base, "/probe/resync", body(&hook_request("x"))).await).await;
    assert_eq!(code, 404);
    assert!(
        message.contains("/probe/resync") && message.contains("/probe/{sync,finalize,customize}"),
        "a 404 lists the hooks that exist: {message}"
    );
    let (code, message) = error_of(post_raw(&base, "/a/b/c", vec![]).await).await;
    assert_eq!(code, 404);
    assert!(message.contains("/probe/{sync"), "{message}");
    let get = reqwest::get(format!("{base}/probe/sync")).await.unwrap();
    assert_eq!(
        get.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("POST")
    );
    assert_eq!(error_of(get).await.0, 405);

    let huge = vec![b' '; 65 * 1024];
    let (code, message) = error_of(post_raw(&base, "/probe/sync", huge).await).await;
    assert_eq!(code, 413);
    assert!(message.contains("65536"), "{message}");

    let (code, message) =
        error_of(post_raw(&base, "/broken/sync", body(&hook_request("x"))).await).await;
    assert_eq!(code, 500);
    assert!(
        message.starts_with("cannot serialise the children: EOF while parsing"),
        "{message}"
    );

    let (code, message) =
        error_of(post_raw(&base, "/panics/sync", body(&hook_request("x"))).await).await;
    assert_eq!(code, 500, "{message}");
    let still_up = post_raw(&base, "/probe/sync", body(&hook_request("after-panic"))).await;
    assert_eq!(
        still_up.status(),
        200,
        "a panic does not take the server down"
    );

    // One slow call holds the only in-flight slot; the next is turned away with 429.
    let slow_base = base.clone();
    let slow = tokio::spawn(async move {
        post_raw(
            &slow_base,
            "/slow/sync",
            serde_json::to_vec(&hook_request("s")).unwrap(),
        )
        .await
        .status()
    });
    gate.wait_for(1, false).await;
    let busy = post_raw(&base, "/probe/sync", body(&hook_request("x"))).await;
    assert_eq!(
        busy.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("2")
    );
    let (code, _) = error_of(busy).await;
    assert_eq!(code, 429);
    gate.open();
    assert_eq!(slow.await.unwrap(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_timed_out_call_keeps_its_slot_until_its_work_ends() {
    let mut settings = support::local_settings();
    // The gate holds the work past any deadline; the deadline only has to leave the
    // work time to start on a busy machine (work that could only start after it is
    // skipped, and then the gate would never see it).
    settings.limits.deadline = Duration::from_secs(2);
    settings.limits.max_in_flight = 1;
    let gate = Gate::default();
    let server = start_gated(settings, &gate).await;
    let base = format!("http://{}", server.hook_addr);
    // This controller's answers are not the request's alone: its work runs on a compute
    // thread, under the deadline.
    let late = serde_json::to_vec(&hook_request("late")).unwrap();
    let (code, message) = error_of(post_raw(&base, "/slow/sync", late).await).await;
    assert_eq!(code, 503);
    assert!(message.contains("2000 ms"), "{message}");
    gate.wait_for(1, false).await;
    // The work behind the 503 is still running, so it still holds the only slot.
    let (code, _) = error_of(
        post_raw(
            &base,
            "/probe/sync",
            serde_json::to_vec(&hook_request("x")).unwrap(),
        )
        .await,
    )
    .await;
    assert_eq!(
        code, 429,
        "a timed-out computation still counts against the limit"
    );
    gate.open();
    gate.wait_for(1, true).await;
    // Once the work has ended its slot comes back (polled: the permit is dropped just
    // after the computation returns).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let response = post_raw(
            &base,
            "/probe/sync",
            serde_json::to_vec(&hook_request("after")).unwrap(),
        )
        .await;
        if response.status() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never came back"
        );
        tokio::task::yield_now().await;
    }
}

/// Sends a request head announcing `declared` body bytes and the first `sent` of them,
/// then stalls: a sender trickling its body.
async fn trickling(
    addr: std::net::SocketAddr,
    declared: usize,
    sent: usize,
) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /probe/sync HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&vec![b' '; sent]).await.unwrap();
    stream
}

/// Waits until `/metrics` shows `line` (the server has seen what the test sent).
pub(crate) async fn metrics_show(server: &Server, line: &str) {
    let url = format!("http://{}/metrics", server.probe_addr);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "metrics never showed {line}"
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_bodies_hold_no_in_flight_slot() {
    let mut settings = support::local_settings();
    settings.limits.max_in_flight = 1;
    settings.limits.body_read_timeout = Duration::from_secs(600);
    let gate = Gate::default();
    let server = start_gated(settings, &gate).await;
    let base = format!("http://{}", server.hook_addr);
    // Four senders that have sent one byte each of their bodies and stall.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(trickling(server.hook_addr, 100, 1).await);
    }
    metrics_show(&server, "metahooks_hook_body_bytes 4").await;
    // The only slot is still free for a call whose body is all there.
    let answered = post_raw(
        &base,
        "/probe/sync",
        serde_json::to_vec(&hook_request("x")).unwrap(),
    )
    .await;
    assert_eq!(answered.status(), 200);
    // A call holds the slot once its body is in; the next whole call finds it taken.
    let slow = tokio::spawn({
        let base = base.clone();
        async move {
            post_raw(
                &base,
                "/slow/sync",
                serde_json::to_vec(&hook_request("s")).unwrap(),
            )
            .await
            .status()
        }
    });
    gate.wait_for(1, false).await;
    let busy = post_raw(
        &base,
        "/probe/sync",
        serde_json::to_vec(&hook_request("y")).unwrap(),
    )
    .await;
    assert_eq!(busy.headers()["retry-after"], "1");
    let (code, message) = error_of(busy).await;
    assert_eq!(code, 429);
    assert!(message.contains("in flight (limit 1)"), "{message}");
    gate.open();
    assert_eq!(slow.await.unwrap(), 200);
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_a_client_does_not_read_hold_their_slots_until_it_goes() {
    use axum::body::Bytes;
    let pki = pki();
    let mut settings = support::local_settings();
    settings.limits.max_in_flight = 2;
    settings.tls = Some(pki.server_files());
    let server = start(settings).await;
    let url = format!("https://localhost:{}/probe/sync", server.hook_addr.port());
    let other_client = tls_client(&pki, false);
    let post = |name: &'static str| other_client.post(&url).json(&hook_request(name)).send();
    // An HTTP/2 client (over TLS, chosen by ALPN) that grants no flow-control window:
    // the heads of its answers arrive, their bodies never can.
    let tcp = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    let tls = h2_connector(&pki)
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tls)
        .await
        .unwrap();
    let driver = tokio::spawn(connection);
    let mut unread = Vec::new();
    for name in ["a", "b"] {
        let request = axum::http::Request::post(url.as_str())
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (response, mut body) = client.send_request(request, false).unwrap();
        let bytes = serde_json::to_vec(&hook_request(name)).unwrap();
        body.send_data(Bytes::from(bytes), true).unwrap();
        let response = response.await.unwrap();
        assert_eq!(response.status(), 200);
        unread.push(response);
    }
    // Both slots are held by answers nobody reads.
    let (code, message) = error_of(post("c").await.unwrap()).await;
    assert_eq!(code, 429, "{message}");
    // Once that client is gone, so are its answers and their slots (polled: the
    // server sees the connection close in its own time).
    drop(unread);
    drop(client);
    driver.abort();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if post("d").await.unwrap().status() == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slots never came back"
        );
        tokio::task::yield_now().await;
    }
}

/// HTTP/2 is served over TLS only (chosen by ALPN): a plain-text HTTP/2 preface is
/// refused and its connection closed at once, never left waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_without_tls_is_refused_and_closed() {
    let server = start(support::local_settings()).await;
    let answer = sent_until_closed(server.hook_addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .expect("the connection is closed");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 5") || answer.starts_with("HTTP/1.1 4"),
        "refused, never served: {answer}"
    );
}

/// What the server answers on a fresh connection to `bytes` until it closes it; None
/// when it is still open after 60 s.
async fn sent_until_closed(address: std::net::SocketAddr, bytes: &[u8]) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    // The server may close before it has read all of it.
    let _ = stream.write_all(bytes).await;
    let mut answer = Vec::new();
    // A reset closes it too: what counts is that it ends in time.
    let _ = tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut answer))
        .await
        .ok()?;
    Some(String::from_utf8_lossy(&answer).into_owned())
}

/// A TLS connector that trusts the test CA (the source engine's client settings) and
/// offers only `h2` by ALPN.
pub(crate) fn h2_connector(pki: &Pki) -> tokio_rustls::TlsConnector {
    let settings = metahooks::source::tls::client_config(Some(&pki.ca_pem), None).unwrap();
    let mut config = rustls::ClientConfig::clone(&settings);
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_beyond_the_byte_budget_are_refused_without_waiting() {
    let mut settings = support::local_settings();
    settings.limits.body_bytes = 1000;
    settings.limits.body_budget_bytes = 1000;
    settings.limits.body_read_timeout = Duration::from_secs(600);
    let server = start(settings).await;
    let base = format!("http://{}", server.hook_addr);
    // A stalled sender holds the 600 bytes it has sent, not the 1,000 it announced.
    let _stalled = trickling(server.hook_addr, 1000, 600).await;
    metrics_show(&server, "metahooks_hook_body_bytes 600").await;
    // A body announcing more than the 400 left is refused before a byte is read.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut announced = trickling(server.hook_addr, 500, 0).await;
    let mut head = [0u8; 12];
    announced.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 429");
    // A body without a declared length is refused at the piece that does not fit.
    let mut chunked = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    chunked
        .write_all(
            b"POST /probe/sync HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n1f4\r\n",
        )
        .await
        .unwrap();
    chunked.write_all(&[b' '; 500]).await.unwrap();
    chunked.write_all(b"\r\n").await.unwrap();
    let mut answer = vec![0u8; 4096];
    let read = chunked.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..read]);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("budget of 1000 bytes"), "{answer}");
    // A body that fits is answered, and gives its bytes back.
    let small = serde_json::to_vec(&hook_request("small")).unwrap();
    assert!(small.len() <= 400);
    assert_eq!(post_raw(&base, "/probe/sync", small).await.status(), 200);
    metrics_show(&server, "metahooks_hook_body_bytes 600").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    let mut settings = support::local_settings();
    settings.limits.header_read_timeout = Duration::from_millis(300);
    settings.limits.body_read_timeout = Duration::from_millis(300);
    settings.limits.max_connections = 2;
    let server = start(settings).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Headers never finished: the server closes the connection.
    let mut stalled = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    stalled
        .write_all(b"POST /probe/sync HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut rest)).await;
    assert!(
        read.is_ok(),
        "a connection that never finishes its headers is closed"
    );
    // A body that never arrives: 408 with a sentence.
    let mut trickle = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    trickle
        .write_all(b"POST /probe/sync HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(60), trickle.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("did not arrive within 300 ms"), "{answer}");
}

#[tokio::test]
async fn etag_and_if_none_match() {
    let server = start(support::local_settings()).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/probe/sync", server.hook_addr);
    let first = client
        .post(&url)
        .json(&hook_request("e"))
        .send()
        .await
        .unwrap();
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let body = first.text().await.unwrap();
    let cached = client
        .post(&url)
        .header("if-none-match", &etag)
        .json(&hook_request("e"))
        .send()
        .await
        .unwrap();
    assert_eq!(cached.status(), 304);
    assert_eq!(cached.headers()["etag"].to_str().unwrap(), etag);
    assert!(cached.text().await.unwrap().is_empty());
    // Another answer (another parent) is a 200 with another tag, whatever was sent.
    let other = client
        .post(&url)
        .header("if-none-match", &etag)
        .json(&hook_request("f"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    assert_ne!(other.headers()["etag"].to_str().unwrap(), etag);
    assert_ne!(other.text().await.unwrap(), body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_are_computed_on_the_compute_threads() {
    let threads = Arc::new(std::sync::Mutex::new(Vec::new()));
    let registry = Registry::new().composite(
        "counted",
        Counted {
            reads: None,
            syncs: Arc::default(),
            threads: threads.clone(),
        },
    );
    let server = Server::start(support::local_settings(), registry, Clock::System)
        .await
        .expect("server starts");
    let mut large = hook_request("large");
    large["parent"]["metadata"]["annotations"] = json!({"pad": "x".repeat(70 * 1024)});
    for request in [hook_request("small"), large] {
        let answer = post_raw(
            &format!("http://{}", server.hook_addr),
            "/counted/sync",
            serde_json::to_vec(&request).unwrap(),
        )
        .await;
        assert_eq!(answer.status(), 200);
        let ran_on = threads.lock().unwrap().pop().expect("the sync ran");
        assert!(
            ran_on.starts_with("metahooks-compute-"),
            "{} bytes: ran on {ran_on}",
            request.to_string().len()
        );
    }
}

/// Counts its syncs and notes the thread each ran on; reads the source at `reads` when
/// given, answering with the revision it saw.
struct Counted {
    reads: Option<&'static str>,
    syncs: Arc<std::sync::atomic::AtomicUsize>,
    threads: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Counted {
    /// Counts into `syncs`, reading the source at `reads` when given.
    fn reading(reads: Option<&'static str>, syncs: &Arc<AtomicUsize>) -> Counted {
        Counted {
            reads,
            syncs: syncs.clone(),
            threads: Arc::default(),
        }
    }
}

fn source_at(url: &str) -> metahooks::source::SourceRequest {
    metahooks::source::SourceRequest {
        location: metahooks::source::Location::Http {
            url: url.to_owned(),
        },
        namespace: "ns".to_owned(),
        credentials: None,
        tls: None,
    }
}

impl CompositeHooks for Counted {
    fn sync(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<Answer<CompositeResponse>, HookError> {
        self.syncs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        self.threads.lock().unwrap().push(thread);
        let mut reads = Reads::new(ctx.sources.as_ref());
        let revision = self.reads.map(|url| {
            let state = reads.lookup(&source_at(url), Duration::from_secs(60), None);
            state.snapshot.map(|s| s.revision.clone())
        });
        let response = CompositeResponse::new(
            json!({"seen": request.parent["metadata"]["name"], "revision": revision}),
            vec![],
        );
        Ok(Reply::await_change(response).with_sources(reads.finish()))
    }

    fn finalize(
        &self,
        request: &CompositeRequest,
        ctx: &Context,
    ) -> Result<CompositeResponse, HookError> {
        self.sync(request, ctx).map(|answer| answer.response)
    }
}

/// A repeated request is answered from memory for as long as the sources its answer read
/// are held the same, and the parent's wish to keep them fresh still reaches the engine.
#[tokio::test]
async fn a_repeated_request_is_answered_from_memory_while_what_it_read_is_unchanged() {
    const URL: &str = "https://example.com/config.env";
    let sources = Arc::new(FakeSources::default());
    sources.serve(URL, "r1", &[("config.env", "A=1\n")], true, None);
    let counters = [None, Some(URL)].map(|reads| (reads, Arc::new(AtomicUsize::new(0))));
    let mut registry = Registry::new().with_sources(sources.clone());
    for (reads, syncs) in &counters {
        let name = if reads.is_some() { "reader" } else { "pure" };
        registry = registry.composite(name, Counted::reading(*reads, syncs));
    }
    let server = Server::start(support::local_settings(), registry, Clock::System)
        .await
        .expect("server starts");
    let client = reqwest::Client::new();
    let post = |name: &str, hook: &str, parent: &str| {
        client
            .post(format!("http://{}/{name}/{hook}", server.hook_addr))
            .json(&hook_request(parent))
            .send()
    };
    let syncs = |index: usize| counters[index].1.load(Ordering::SeqCst);
    for (index, name) in ["pure", "reader"].into_iter().enumerate() {
        let first = post(name, "sync", "a").await.unwrap();
        let tag = first.headers()["etag"].clone();
        let first = first.text().await.unwrap();
        let again = post(name, "sync", "a").await.unwrap();
        assert_eq!(
            again.headers()["etag"],
            tag,
            "{name}: the same bytes, the same tag"
        );
        assert_eq!(again.text().await.unwrap(), first, "{name}");
        assert_eq!(syncs(index), 1, "{name}: the second call was remembered");
        let other = post(name, "sync", "b").await.unwrap().text().await.unwrap();
        assert_ne!(
            other, first,
            "{name}: another request is answered on its own"
        );
        post(name, "finalize", "a").await.unwrap();
        assert_eq!(syncs(index), 3, "{name}: finalize is a hook of its own");
    }
    let asked = sources.lookups().len();
    let remembered = post("reader", "sync", "a")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(remembered.contains("r1"), "{remembered}");
    assert_eq!(syncs(1), 3, "remembered while the source is unchanged");
    assert_eq!(
        sources.lookups().len(),
        asked + 1,
        "an answer sent from memory still asks for its source to be kept fresh"
    );
    // The source changes: the remembered answer no longer holds.
    sources.serve(URL, "r2", &[("config.env", "A=2\n")], true, None);
    let fresh = post("reader", "sync", "a")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(fresh.contains("r2"), "{fresh}");
    assert_eq!(syncs(1), 4);
    let pure = post("pure", "sync", "a").await.unwrap();
    assert_eq!(pure.status(), 200);
    assert_eq!(
        syncs(0),
        3,
        "an answer that read no source holds whatever the sources do"
    );
}

/// A background poll turns a source pending (its parents are asked back soon) and, when
/// it finds nothing new, back as it was. The answer from before the poll holds again
/// when it ends, and the next poll's pending answer is the first poll's: a poll that
/// finds nothing new costs at most one computed answer per parent, once.
#[tokio::test]
async fn a_poll_that_finds_nothing_new_brings_back_the_answers_remembered() {
    const URL: &str = "https://example.com/config.env";
    let sources = Arc::new(FakeSources::default());
    sources.serve(URL, "r1", &[("config.env", "A=1\n")], true, None);
    let syncs = Arc::new(AtomicUsize::new(0));
    let registry = Registry::new()
        .with_sources(sources.clone())
        .composite("reader", Counted::reading(Some(URL), &syncs));
    let server = Server::start(support::local_settings(), registry, Clock::System)
        .await
        .expect("server starts");
    let client = reqwest::Client::new();
    let sync = || async {
        let response = client
            .post(format!("http://{}/reader/sync", server.hook_addr))
            .json(&hook_request("a"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        (body, syncs.load(Ordering::SeqCst))
    };
    let (settled, computed) = sync().await;
    assert_eq!(computed, 1);
    assert!(settled.get("resyncAfterSeconds").is_none(), "{settled}");

    sources.polling(URL, true);
    let (pending, computed) = sync().await;
    assert_eq!(computed, 2, "the poll changes what the answer asks for");
    assert!(
        pending["resyncAfterSeconds"].as_u64().is_some(),
        "{pending}"
    );
    assert_eq!(pending["status"], settled["status"]);

    for round in 0..2 {
        sources.polling(URL, false);
        assert_eq!(
            sync().await,
            (settled.clone(), 2),
            "round {round}: after the poll"
        );
        sources.polling(URL, true);
        assert_eq!(
            sync().await,
            (pending.clone(), 2),
            "round {round}: during the next poll"
        );
    }

    // A poll that finds something new: neither remembered answer holds.
    sources.serve(URL, "r2", &[("config.env", "A=2\n")], true, None);
    let (fresh, computed) = sync().await;
    assert_eq!(computed, 3);
    assert_eq!(fresh["status"]["revision"], "r2", "{fresh}");
    sources.polling(URL, true);
    let (pending_fresh, computed) = sync().await;
    assert_eq!(computed, 4, "r1's pending answer does not hold for r2");
    assert_eq!(pending_fresh["status"]["revision"], "r2", "{pending_fresh}");
    sources.polling(URL, false);
    assert_eq!(sync().await, (fresh, 4));
}

#[tokio::test]
async fn bearer_and_basic_auth() {
    let mut settings = support::local_settings();
    settings.auth = Some(Auth::bearer("s3cret\n"));
    let server = start(settings).await;
    let client = reqwest::Client::new();
    let url = format!("http://{}/probe/sync", server.hook_addr);
    let none = client
        .post(&url)
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(none).await.0, 401);
    let wrong = client
        .post(&url)
        .bearer_auth("nope")
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(error_of(wrong).await.0, 401);
    let right = client
        .post(&url)
        .bearer_auth("s3cret")
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    // Probes are not behind auth: kubelet has no token.
    let probe = reqwest::get(format!("http://{}/readyz", server.probe_addr))
        .await
        .unwrap();
    assert_eq!(probe.status(), 200);

    let mut settings = support::local_settings();
    settings.auth = Some(Auth::basic("metacontroller", "pw"));
    let server = start(settings).await;
    let url = format!("http://{}/probe/sync", server.hook_addr);
    let right = client
        .post(&url)
        .basic_auth("metacontroller", Some("pw"))
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), 200);
    let wrong = client
        .post(&url)
        .basic_auth("metacontroller", Some("px"))
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
}

#[tokio::test]
async fn auth_off_accepts_any_caller() {
    let server = start(support::local_settings()).await;
    let response = reqwest::Client::new()
        .post(format!("http://{}/probe/sync", server.hook_addr))
        .bearer_auth("anything")
        .json(&hook_request("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

pub(crate) struct Pki {
    dir: tempfile::TempDir,
    ca_pem: String,
    client_identity: Vec<u8>,
}

pub(crate) fn pki() -> Pki {
    // The same CA, `localhost` server certificate and client certificate as the source
    // tests use, with the client's certificate and key as one PEM identity.
    let shared = support::servers::Pki::new(false);
    Pki {
        client_identity: format!("{}{}", shared.client_cert_pem, shared.client_key_pem)
            .into_bytes(),
        ca_pem: shared.ca_pem,
        dir: shared.dir,
    }
}

impl Pki {
    /// The server certificate and key, with no client CA.
    pub(crate) fn server_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.dir.path().join("tls.crt"),
            key: self.dir.path().join("tls.key"),
            client_ca: None,
        }
    }
}

fn tls_client(pki: &Pki, with_identity: bool) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca_pem.as_bytes()).unwrap())
        .resolve("localhost", "127.0.0.1:0".parse().unwrap());
    if with_identity {
        builder = builder.identity(reqwest::Identity::from_pem(&pki.client_identity).unwrap());
    }
    builder.build().unwrap()
}

#[tokio::test]
async fn tls_and_client_certificates() {
    let pki = pki();
    let files = pki.server_files();
    let mut settings = support::local_settings();
    settings.tls = Some(files.clone());
    let server = start(settings).await;
    let url = format!("https://localhost:{}/probe/sync", server.hook_addr.port());
    let response = tls_client(&pki, false)
        .post(&url)
        .json(&hook_request("t"))
        .send()
        .await
        .expect("TLS call");
    assert_eq!(response.status(), 200);
    let plain = reqwest::Client::new()
        .post(format!("http://{}/probe/sync", server.hook_addr))
        .json(&hook_request("t"))
        .send()
        .await;
    assert!(
        plain.is_err() || plain.is_ok_and(|r| r.status() != 200),
        "plain HTTP is not served on a TLS port"
    );

    let mut settings = support::local_settings();
    settings.tls = Some(TlsFiles {
        client_ca: Some(pki.dir.path().join("ca.pem")),
        ..files
    });
    let server = start(settings).await;
    let url = format!("https://localhost:{}/probe/sync", server.hook_addr.port());
    let with_cert = tls_client(&pki, true)
        .post(&url)
        .json(&hook_request("m"))
        .send()
        .await
        .expect("mTLS call");
    assert_eq!(with_cert.status(), 200);
    let without = tls_client(&pki, false)
        .post(&url)
        .json(&hook_request("m"))
        .send()
        .await;
    assert!(
        without.is_err(),
        "a client without a certificate is refused"
    );
}

#[tokio::test]
async fn probes_and_metrics() {
    let server = start(support::local_settings()).await;
    let probe = format!("http://{}", server.probe_addr);
    assert_eq!(
        reqwest::get(format!("{probe}/healthz"))
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        reqwest::get(format!("{probe}/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );
    reqwest::Client::new()
        .post(format!("http://{}/probe/sync", server.hook_addr))
        .json(&hook_request("m"))
        .send()
        .await
        .unwrap();
    let metrics = reqwest::get(format!("{probe}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "metahooks_hook_requests_total{controller=\"probe\",hook=\"sync\",code=\"200\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "metahooks_hook_duration_seconds_count{controller=\"probe\",hook=\"sync\"} 1"
        )
    );
    // The answer is remembered, and the memo's size says so.
    let held = metrics
        .lines()
        .find_map(|line| line.strip_prefix("metahooks_answer_memo_bytes "))
        .and_then(|value| value.parse::<u64>().ok());
    assert!(held.is_some_and(|bytes| bytes > 0), "{metrics}");
    assert!(metrics.contains("metahooks_step_memo_bytes "), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_shutdown_drains_and_flips_readiness() {
    let mut settings = support::local_settings();
    // Long enough that the hook call below lands inside the drain window even on a
    // loaded machine; the test waits for readiness to flip, not for a time.
    settings.shutdown_delay = Duration::from_secs(3);
    let server = start(settings).await;
    let (hook, probe) = (server.hook_addr, server.probe_addr);
    let shutdown = tokio::spawn(server.shutdown());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while reqwest::get(format!("http://{probe}/readyz"))
        .await
        .unwrap()
        .status()
        != 503
    {
        assert!(
            std::time::Instant::now() < deadline,
            "readiness never flipped"
        );
        tokio::task::yield_now().await;
    }
    let during = reqwest::Client::new()
        .post(format!("http://{hook}/probe/sync"))
        .json(&hook_request("d"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        during.status(),
        200,
        "hooks keep answering during the drain delay"
    );
    shutdown.await.unwrap().unwrap();
    assert!(
        reqwest::get(format!("http://{probe}/readyz"))
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_shutdown_starts_is_answered() {
    let mut settings = support::local_settings();
    settings.shutdown_grace = Duration::from_secs(60);
    let gate = Gate::default();
    let server = start_gated(settings, &gate).await;
    let hook = server.hook_addr;
    let call = tokio::spawn(async move {
        post_raw(
            &format!("http://{hook}"),
            "/slow/sync",
            serde_json::to_vec(&hook_request("inflight")).unwrap(),
        )
        .await
    });
    gate.wait_for(1, false).await;
    let shutdown = tokio::spawn(server.shutdown());
    // Draining has begun once the port accepts no more connections.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tokio::net::TcpStream::connect(hook).await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hook port kept accepting"
        );
        tokio::task::yield_now().await;
    }
    gate.open();
    let answer = call.await.unwrap();
    assert_eq!(answer.status(), 200);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["status"]["seen"], "inflight");
    shutdown.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_is_closed_after_the_idle_timeout() {
    let mut settings = support::local_settings();
    settings.limits.idle_timeout = Duration::from_millis(300);
    let server = start(settings).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut connection = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    let body = serde_json::to_vec(&hook_request("idle")).unwrap();
    let head = format!(
        "POST /probe/sync HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    connection.write_all(head.as_bytes()).await.unwrap();
    connection.write_all(&body).await.unwrap();
    // The answer, then nothing: the server closes the connection (end of stream).
    let mut received = Vec::new();
    let read = tokio::time::timeout(
        Duration::from_secs(60),
        connection.read_to_end(&mut received),
    )
    .await;
    assert!(read.is_ok(), "an idle kept-alive connection is closed");
    let received = String::from_utf8_lossy(&received);
    assert!(received.starts_with("HTTP/1.1 200"), "{received}");
    assert!(received.contains("\"idle\""), "{received}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_connection_that_never_completes_its_handshake_is_closed() {
    let pki = pki();
    let mut settings = support::local_settings();
    settings.limits.header_read_timeout = Duration::from_millis(300);
    settings.tls = Some(pki.server_files());
    let server = start(settings).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // The first bytes of a ClientHello record, and then nothing.
    let mut stalled = tokio::net::TcpStream::connect(server.hook_addr)
        .await
        .unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02]).await.unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(60), stalled.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "a stalled TLS handshake is cut off");
    // The server still serves TLS afterwards.
    let url = format!("https://localhost:{}/probe/sync", server.hook_addr.port());
    let answer = tls_client(&pki, false)
        .post(&url)
        .json(&hook_request("after"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_is_served_to_a_client_that_chooses_it_over_tls() {
    let pki = pki();
    let mut settings = support::local_settings();
    settings.tls = Some(pki.server_files());
    let server = start(settings).await;
    let url = format!("https://localhost:{}/probe/sync", server.hook_addr.port());
    let client = tls_client(&pki, false);
    for name in ["first", "second"] {
        let answer = client
            .post(&url)
            .json(&hook_request(name))
            .send()
            .await
            .expect("HTTP/2 call");
        assert_eq!(answer.version(), reqwest::Version::HTTP_2);
        assert_eq!(answer.status(), 200);
        let body: Value = answer.json().await.unwrap();
        assert_eq!(body["status"]["seen"], name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulate_calls_an_https_hook_server_signed_by_a_private_ca() {
    let pki = pki();
    let mut settings = support::local_settings();
    settings.tls = Some(pki.server_files());
    let registry = Registry::standard(metahooks::controllers::ControllerSettings::default());
    let server = Server::start(settings, registry, Clock::System)
        .await
        .unwrap();
    let url = format!("https://localhost:{}", server.hook_addr.port());
    let example = support::repo_dir().join("manifests/examples/users.api-mock.cr.yaml");
    let ca = pki.dir.path().join("ca.pem");
    let run = move |with_ca: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_metahooks"));
        command
            .args(["emulate", "--hooks-url", &url, "-f"])
            .arg(&example);
        if with_ca {
            command.arg("--hooks-ca-file").arg(&ca);
        }
        command.output().unwrap()
    };
    let (trusted, untrusted) = tokio::task::spawn_blocking(move || (run(true), run(false)))
        .await
        .unwrap();
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(trusted.status.success(), "{}", text(&trusted));
    assert!(!untrusted.status.success());
    assert!(
        text(&untrusted).contains("NonOkAnswer"),
        "{}",
        text(&untrusted)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_over_the_limit_is_refused_and_the_port_serves_on() {
    let mut settings = support::local_settings();
    settings.limits.max_header_bytes = 8192;
    let server = start(settings).await;
    let padding = "a".repeat(32 * 1024);
    let head = format!("POST /probe/sync HTTP/1.1\r\nhost: x\r\nx-padding: {padding}\r\n\r\n");
    let answer = sent_until_closed(server.hook_addr, head.as_bytes())
        .await
        .expect("a head over the limit ends the connection");
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
        "refused, never answered: {answer}"
    );
    let fine = post_raw(
        &format!("http://{}", server.hook_addr),
        "/probe/sync",
        serde_json::to_vec(&hook_request("after")).unwrap(),
    )
    .await;
    assert_eq!(fine.status(), 200);
}
