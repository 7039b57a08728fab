//! Connections as a bounded, fair resource on every port: idle connections give their
//! slots to new ones, one peer address cannot take them all, HTTP/2 connections are closed
//! when idle, and `/readyz` says when the hook port cannot take a connection.

use crate::support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use metahooks::controllers::{ControllerSettings, Registry};
use metahooks::server::{Clock, Server, ServerSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start(settings: ServerSettings) -> Server {
    Server::start(
        settings,
        Registry::standard(ControllerSettings::default()),
        Clock::System,
    )
    .await
    .expect("server starts")
}

/// An honest APIMock sync, as Metacontroller sends it.
fn sync_body() -> Vec<u8> {
    std::fs::read(support::repo_dir().join("hooks-tests/apimock/fresh-parent/request.json"))
        .unwrap()
}

fn sync_head(length: usize, close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "POST /apimock/sync HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {length}\r\nconnection: {connection}\r\n\r\n"
    )
}

/// A connection from `from` (any loopback address: each is a peer of its own).
async fn connect_from(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(IpAddr::V4(from), 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads one HTTP/1.1 answer whose body is `content-length` long; its status line.
async fn read_answer(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let mut buffer = [0u8; 8192];
    let deadline = Duration::from_secs(60);
    loop {
        let read = tokio::time::timeout(deadline, stream.read(&mut buffer))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(read > 0, "closed mid-answer: {received:?}");
        received.extend_from_slice(&buffer[..read]);
        let text = String::from_utf8_lossy(&received);
        if let Some(end) = text.find("\r\n\r\n") {
            let length: usize = text[..end]
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if received.len() >= end + 4 + length {
                return text.lines().next().unwrap_or_default().to_owned();
            }
        }
    }
}

/// `count` connections from `from` that each send one honest sync, read its answer and
/// then stay open, idle.
async fn idle_after_one_call(count: usize, from: Ipv4Addr, to: SocketAddr) -> Vec<TcpStream> {
    let body = sync_body();
    let mut held = Vec::new();
    for _ in 0..count {
        let mut stream = connect_from(from, to).await;
        stream
            .write_all(sync_head(body.len(), false).as_bytes())
            .await
            .unwrap();
        stream.write_all(&body).await.unwrap();
        assert_eq!(read_answer(&mut stream).await, "HTTP/1.1 200 OK");
        held.push(stream);
    }
    held
}

/// An honest sync on a new connection from `from`: its status line, or None when the
/// connection was closed unanswered.
async fn honest_sync(from: Ipv4Addr, to: SocketAddr) -> Option<String> {
    let body = sync_body();
    let mut stream = connect_from(from, to).await;
    let sent = async {
        stream
            .write_all(sync_head(body.len(), true).as_bytes())
            .await?;
        stream.write_all(&body).await
    };
    if sent.await.is_err() {
        return None;
    }
    let mut received = Vec::new();
    let read =
        tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut received)).await;
    assert!(read.is_ok(), "neither answered nor closed");
    let text = String::from_utf8_lossy(&received);
    text.lines().next().map(str::to_owned)
}

/// Whether the server has closed `stream` (end of stream or reset), waiting up to 60 s.
async fn closed(stream: &mut TcpStream) -> bool {
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_end(&mut rest))
        .await
        .is_ok()
}

async fn readyz(server: &Server) -> u16 {
    reqwest::get(format!("http://{}/readyz", server.probe_addr))
        .await
        .unwrap()
        .status()
        .as_u16()
}

const ATTACKER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const ATTACKER_TOO: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const HONEST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_hook_connections_give_their_slots_to_honest_syncs() {
    let mut settings = support::local_settings();
    settings.limits.max_connections = 24;
    settings.limits.max_connections_per_peer = 12;
    let server = start(settings).await;
    // Every slot held by two addresses' idle connections, after one call each.
    let mut idle = idle_after_one_call(12, ATTACKER, server.hook_addr).await;
    idle.extend(idle_after_one_call(12, ATTACKER_TOO, server.hook_addr).await);
    assert_eq!(readyz(&server).await, 200, "idle connections can make room");
    // Ten honest syncs, each on a new connection kept alive afterwards (as Go's client
    // keeps them), so each needs a slot of its own.
    let honest = idle_after_one_call(10, HONEST, server.hook_addr).await;
    // Each took the slot of the connection idle the longest, in order.
    for stream in &mut idle[..10] {
        assert!(
            closed(stream).await,
            "the longest-idle connections went first"
        );
    }
    let mut still_open = Vec::new();
    for stream in &mut idle[10..] {
        let mut byte = [0u8; 1];
        let probe = tokio::time::timeout(Duration::from_millis(50), stream.read(&mut byte)).await;
        still_open.push(probe.is_err());
    }
    assert!(
        still_open.iter().all(|open| *open),
        "the others keep their slots: {still_open:?}"
    );
    super::http::metrics_show(&server, "metahooks_hook_connections_evicted_total 10").await;
    drop(honest);
}

/// Sends a request head announcing a body, and part of it: a call in flight. (A
/// connection closed unread fails the writes; what the caller checks is whether it is.)
async fn trickling(from: Ipv4Addr, to: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, to).await;
    let _ = stream.write_all(sync_head(1000, false).as_bytes()).await;
    let _ = stream.write_all(b"{").await;
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_whose_every_slot_is_answering_refuses_new_connections_and_is_unready() {
    let mut settings = support::local_settings();
    settings.limits.max_connections = 4;
    settings.limits.max_in_flight = 4;
    settings.limits.body_read_timeout = Duration::from_secs(600);
    let server = start(settings).await;
    let mut busy = Vec::new();
    for _ in 0..4 {
        busy.push(trickling(ATTACKER, server.hook_addr).await);
    }
    // Unready once the server has seen all four calls start (polled: it reads them in
    // its own time).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while readyz(&server).await != 503 {
        assert!(std::time::Instant::now() < deadline, "never unready");
        tokio::task::yield_now().await;
    }
    assert_eq!(honest_sync(HONEST, server.hook_addr).await, None);
    // One call ends (its sender goes): ready again, and the next sync is answered.
    drop(busy.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while readyz(&server).await != 200 {
        assert!(std::time::Instant::now() < deadline, "never ready again");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        honest_sync(HONEST, server.hook_addr).await.as_deref(),
        Some("HTTP/1.1 200 OK")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peer_cannot_hold_more_than_its_share_of_calls() {
    let mut settings = support::local_settings();
    settings.limits.max_connections = 8;
    settings.limits.max_connections_per_peer = 2;
    settings.limits.body_read_timeout = Duration::from_secs(600);
    let server = start(settings).await;
    let _busy = [
        trickling(ATTACKER, server.hook_addr).await,
        trickling(ATTACKER, server.hook_addr).await,
    ];
    // Both calls have started once the server has read a byte of each body.
    super::http::metrics_show(&server, "metahooks_hook_body_bytes 2").await;
    // A third call from the same address is closed unread; another address is served.
    let mut third = trickling(ATTACKER, server.hook_addr).await;
    assert!(closed(&mut third).await);
    assert_eq!(
        honest_sync(HONEST, server.hook_addr).await.as_deref(),
        Some("HTTP/1.1 200 OK")
    );
    assert_eq!(readyz(&server).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_probe_connections_never_starve_new_probes() {
    let server = start(support::local_settings()).await;
    let cap = metahooks::server::ConnectionLimits::PROBES.max_connections;
    let per_peer = metahooks::server::ConnectionLimits::PROBES.max_per_peer;
    // Every probe slot held by idle kept-alive connections from four addresses.
    let mut idle = Vec::new();
    for peer in 0..cap / per_peer {
        let from = Ipv4Addr::new(127, 0, 1, u8::try_from(peer).unwrap());
        for _ in 0..per_peer {
            let mut stream = connect_from(from, server.probe_addr).await;
            stream
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            assert_eq!(read_answer(&mut stream).await, "HTTP/1.1 200 OK");
            idle.push(stream);
        }
    }
    // A kubelet opens a new connection for every probe: each is answered.
    for _ in 0..20 {
        let mut probe = connect_from(HONEST, server.probe_addr).await;
        probe
            .write_all(b"GET /readyz HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(60), probe.read_to_end(&mut answer))
            .await
            .expect("answered in time")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

/// A connection that sends nothing at all is closed by the first-request deadline, on
/// the probe port as on the hook port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_a_request_is_closed() {
    let mut settings = support::local_settings();
    settings.limits.header_read_timeout = Duration::from_millis(300);
    let server = start(settings).await;
    let mut silent = TcpStream::connect(server.hook_addr).await.unwrap();
    assert!(closed(&mut silent).await);
    let mut half_head = TcpStream::connect(server.probe_addr).await.unwrap();
    half_head
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    assert!(closed(&mut half_head).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_after_the_idle_timeout() {
    use axum::body::Bytes;
    let pki = super::http::pki();
    let mut settings = support::local_settings();
    settings.tls = Some(pki.server_files());
    settings.limits.idle_timeout = Duration::from_millis(300);
    let server = start(settings).await;
    let tcp = TcpStream::connect(server.hook_addr).await.unwrap();
    let tls = super::http::h2_connector(&pki)
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut client, connection) = h2::client::handshake(tls).await.unwrap();
    let driver = tokio::spawn(connection);
    let url = format!("https://localhost:{}/apimock/sync", server.hook_addr.port());
    let request = axum::http::Request::post(url.as_str())
        .header("content-type", "application/json")
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(Bytes::from(sync_body()), true).unwrap();
    let mut response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    while let Some(chunk) = response.body_mut().data().await {
        let chunk = chunk.unwrap();
        let _ = response
            .body_mut()
            .flow_control()
            .release_capacity(chunk.len());
    }
    // Idle now: the server says GOAWAY and closes, so the client's connection ends.
    let ended = tokio::time::timeout(Duration::from_secs(60), driver).await;
    assert!(ended.is_ok(), "an idle HTTP/2 connection is closed");
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holding_large_bodies_cannot_turn_honest_syncs_into_429s() {
    let limit = sync_body().len() + 100;
    let mut settings = support::local_settings();
    settings.limits.body_bytes = limit;
    settings.limits.body_budget_bytes = 4 * limit;
    settings.limits.body_budget_per_client_bytes = 2 * limit;
    settings.limits.body_read_timeout = Duration::from_secs(600);
    let server = start(settings).await;
    // Two bodies of the largest size, all but their last byte sent, held open.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = connect_from(ATTACKER, server.hook_addr).await;
        stream
            .write_all(sync_head(limit, false).as_bytes())
            .await
            .unwrap();
        stream.write_all(&vec![b' '; limit - 1]).await.unwrap();
        held.push(stream);
    }
    let holding = format!("metahooks_hook_body_bytes {}", 2 * (limit - 1));
    super::http::metrics_show(&server, &holding).await;
    // The same client's next body does not fit its share: 429 at once, saying why.
    let mut more = connect_from(ATTACKER, server.hook_addr).await;
    more.write_all(sync_head(limit, true).as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), more.read_to_end(&mut answer))
        .await
        .expect("answered at once")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    assert!(answer.contains("its share of"), "{answer}");
    // Another client's syncs are answered while the first holds its share.
    for _ in 0..5 {
        assert_eq!(
            honest_sync(HONEST, server.hook_addr).await.as_deref(),
            Some("HTTP/1.1 200 OK")
        );
    }
    drop(held);
}
