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

// ---------------------------------------------------------------------------------
// Remotes that try to make the engine spend without bound. Each runs in a fetch worker
// of the real binary, as the server's do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::source_hardening::{git_stdin, settled};
use metahooks::source::fetcher::Fetcher;
use metahooks::source::policy::{Policy, SourceLimits};
use metahooks::source::{Location, SourceRequest, Sources};
use support::servers::{GitDaemon, Repo, serve_git_http_per_user};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a hostile remote does once a client has connected.
#[derive(Clone, Copy)]
enum Hostility {
    /// Advertises distinct refs forever.
    RefFlood,
    /// Sends one byte at a time, slowly, forever.
    Tarpit,
}

/// What the remote saw: bytes it got out, and how long each connection stayed open.
#[derive(Default)]
struct Witness {
    sent: AtomicU64,
    lifetimes: Mutex<Vec<Duration>>,
}

/// A git remote on loopback that behaves as `hostility` says. `http`: speaks smart HTTP's
/// ref advertisement (a 200 and then the stream); otherwise git://.
async fn hostile_remote(hostility: Hostility, http: bool) -> (u16, Arc<Witness>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let witness = Arc::new(Witness::default());
    let seen = witness.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let opened = Instant::now();
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request).await;
                if http {
                    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Length: 100000000000\r\n\r\n001e# service=git-upload-pack\n0000";
                    let _ = stream.write_all(head.as_bytes()).await;
                }
                let mut n: u64 = 0;
                loop {
                    let chunk = match hostility {
                        Hostility::RefFlood => {
                            let mut batch = String::new();
                            for _ in 0..512 {
                                let line = if n == 0 {
                                    format!("{:040x} refs/heads/r{n}\0multi_ack\n", n + 1)
                                } else {
                                    format!("{:040x} refs/heads/r{n}\n", n + 1)
                                };
                                batch.push_str(&format!("{:04x}{line}", line.len() + 4));
                                n += 1;
                            }
                            batch.into_bytes()
                        }
                        // A pkt-line announcing 64 KiB, then its bytes one at a time.
                        Hostility::Tarpit if n == 0 => {
                            n += 1;
                            b"ffff".to_vec()
                        }
                        Hostility::Tarpit => {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                            b"a".to_vec()
                        }
                    };
                    if stream.write_all(&chunk).await.is_err() {
                        break;
                    }
                    seen.sent.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                seen.lifetimes.lock().unwrap().push(opened.elapsed());
            });
        }
    });
    (port, witness)
}

fn worker_fetcher(
    limits: SourceLimits,
    workers: usize,
    per_namespace: usize,
) -> (Fetcher, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    let policy = Policy {
        limits,
        ..support::loopback_policy(&["git", "http"])
    };
    let fetcher = support::start(
        support::fetcher_settings(policy, cache.path())
            .workers(workers)
            .workers_per_namespace(per_namespace)
            .build(),
    );
    (fetcher, cache)
}

fn git(url: String, namespace: &str, path: &str) -> SourceRequest {
    SourceRequest {
        tls: None,
        location: Location::Git {
            url,
            reference: None,
            semver: None,
            verify: None,
            path: path.to_owned(),
        },
        namespace: namespace.to_owned(),
        credentials: None,
    }
}

/// Waits until the remote has seen every connection closed (or panics after `within`).
async fn closed(witness: &Witness, connections: usize, within: Duration) -> Vec<Duration> {
    let started = Instant::now();
    loop {
        let lifetimes = witness.lifetimes.lock().unwrap().clone();
        if lifetimes.len() >= connections {
            return lifetimes;
        }
        assert!(
            started.elapsed() < within,
            "the hostile connection was still open after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_ref_advertisement_is_cut_off_at_its_cap() {
    for http in [false, true] {
        let (port, witness) = hostile_remote(Hostility::RefFlood, http).await;
        let limits = SourceLimits {
            refs_bytes: 1024 * 1024,
            ..SourceLimits::default()
        };
        let (fetcher, _cache) = worker_fetcher(limits.clone(), 2, 2);
        let scheme = if http { "http" } else { "git" };
        let request = git(
            format!("{scheme}://127.0.0.1:{port}/repo.git"),
            "team-a",
            "",
        );
        let error = settled(&fetcher, &request).await.error.expect("refused");
        assert_eq!(
            error.reason(),
            "TooLarge",
            "{scheme}: {error} (the remote sent {})",
            witness.sent.load(Ordering::SeqCst)
        );
        assert!(error.to_string().contains("ref advertisement"), "{error}");
        let lifetimes = closed(&witness, 1, Duration::from_secs(limits.timeout_seconds + 5)).await;
        let sent = witness.sent.load(Ordering::SeqCst);
        // What the remote got out is the cap plus what socket buffers hold, not gigabytes.
        assert!(
            sent < 16 * 1024 * 1024,
            "{scheme}: the remote sent {sent} bytes"
        );
        assert!(
            lifetimes[0] < Duration::from_secs(limits.timeout_seconds),
            "{scheme}: closed at the cap, not at the deadline: {lifetimes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tarpit_is_closed_at_the_deadline() {
    let (port, witness) = hostile_remote(Hostility::Tarpit, false).await;
    let limits = SourceLimits {
        timeout_seconds: 3,
        ..SourceLimits::default()
    };
    let (fetcher, _cache) = worker_fetcher(limits, 2, 2);
    let request = git(format!("git://127.0.0.1:{port}/repo.git"), "team-a", "");
    let error = settled(&fetcher, &request).await.error.expect("timed out");
    assert_eq!(error.reason(), "Timeout", "{error}");
    let lifetimes = closed(&witness, 1, Duration::from_secs(3 + 5)).await;
    assert!(lifetimes[0] <= Duration::from_secs(3 + 5), "{lifetimes:?}");
    assert_eq!(
        fetcher.git_load(),
        (0, 0),
        "the worker's turn is given back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_namespaces_tarpits_do_not_delay_another_namespace() {
    let (port, _witness) = hostile_remote(Hostility::Tarpit, false).await;
    let repo = Repo::new();
    repo.commit(&[("app.env", "HONEST=1\n")]);
    let daemon = GitDaemon::start(&repo);
    // The default deadline (20 s): every tarpit holds its worker far longer than an
    // honest fetch takes.
    let (fetcher, _cache) = worker_fetcher(SourceLimits::default(), 4, 2);
    let tarpits: Vec<SourceRequest> = (0..30)
        .map(|i| {
            git(
                format!("git://127.0.0.1:{port}/repo-{i}.git"),
                "attacker",
                "",
            )
        })
        .collect();
    let interval = Duration::from_secs(3600);
    for tarpit in &tarpits {
        assert!(fetcher.lookup(tarpit, interval).pending);
    }
    let honest = git(daemon.url(), "honest", "app.env");
    let asked = Instant::now();
    loop {
        let state = fetcher.lookup(&honest, interval);
        if let Some(snapshot) = state.snapshot {
            assert!(snapshot.files.contains_key("app.env"));
            break;
        }
        assert!(state.error.is_none(), "{:?}", state.error);
        assert!(
            asked.elapsed() < Duration::from_secs(15),
            "the honest source waited behind the tarpits"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every tarpit is still unanswered: the honest fetch did not wait for any of them.
    let (running, waiting) = fetcher.git_load();
    assert_eq!(
        (running, waiting),
        (2, 28),
        "the attacker holds its share only"
    );
    for tarpit in &tarpits {
        let state = fetcher.lookup(tarpit, interval);
        assert!(state.error.is_none() && state.snapshot.is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_bomb_is_refused_from_its_header_without_inflating_it() {
    let repo = Repo::new();
    repo.commit(&[("ok.env", "A=1\n")]);
    // 512 MiB of zeros: half a megabyte on the wire, past the worker's memory limit if
    // it were ever inflated (the worker would then die with MemoryLimit instead).
    let bare = repo.bare();
    let blob = {
        let mut child = std::process::Command::new("git")
            .args(["hash-object", "-w", "--stdin"])
            .current_dir(&bare)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let zeros = vec![0u8; 1024 * 1024];
        for _ in 0..512 {
            std::io::Write::write_all(&mut stdin, &zeros).unwrap();
        }
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let ok = git_stdin(&bare, &["hash-object", "-w", "--stdin"], b"A=1\n");
    let root = git_stdin(
        &bare,
        &["mktree"],
        format!("100644 blob {blob}\tapp.env\n100644 blob {ok}\tok.env\n").as_bytes(),
    );
    let commit = git_stdin(&bare, &["commit-tree", &root, "-m", "bomb"], b"");
    git_stdin(&bare, &["update-ref", "refs/heads/main", &commit], b"");
    let daemon = GitDaemon::start(&repo);
    // git daemon inflates and deflates the 512 MiB again for every fetch: seconds of
    // CPU, minutes on a busy machine, so the deadline is generous (what is checked is
    // the reason the worker gives, not how fast the server packs).
    let limits = SourceLimits {
        timeout_seconds: 180,
        ..SourceLimits::default()
    };
    let (fetcher, _cache) = worker_fetcher(limits, 2, 2);
    for path in ["app.env", ""] {
        let request = git(daemon.url(), "team-a", path);
        let error = settled(&fetcher, &request).await.error.expect("refused");
        assert_eq!(error.reason(), "TooLarge", "{path:?}: {error}");
    }
    // The cached bomb is refused the same way when read again (a restart re-reads it).
    fetcher.expire().await;
    let again = settled(&fetcher, &git(daemon.url(), "team-a", "app.env")).await;
    assert_eq!(again.error.map(|e| e.reason()), Some("TooLarge"));
    // The small file beside it is read as usual.
    let fine = settled(&fetcher, &git(daemon.url(), "team-a", "ok.env")).await;
    assert!(fine.snapshot.is_some(), "{:?}", fine.error);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_one_token_may_read_is_never_served_to_another() {
    // The forge shows team A's token a branch with a secret; team B's token sees a copy
    // of the repository without it (and without its objects).
    let full = Repo::new();
    full.commit(&[("app.env", "PUBLIC=1\n")]);
    git_stdin(&full.bare(), &["branch", "hidden", "main"], b"");
    let hidden_blob = git_stdin(
        &full.bare(),
        &["hash-object", "-w", "--stdin"],
        b"DB_PASSWORD=team-a-only\n",
    );
    let tree = git_stdin(
        &full.bare(),
        &["mktree"],
        format!("100644 blob {hidden_blob}\tapp.env\n").as_bytes(),
    );
    let hidden = git_stdin(&full.bare(), &["commit-tree", &tree, "-m", "secret"], b"");
    git_stdin(
        &full.bare(),
        &["update-ref", "refs/heads/hidden", &hidden],
        b"",
    );
    let narrow = tempfile::tempdir().unwrap();
    let narrow_bare = narrow.path().join("config.git");
    let cloned = std::process::Command::new("git")
        .args([
            "clone",
            "-q",
            "--bare",
            "--single-branch",
            "--branch",
            "main",
        ])
        .arg(full.bare())
        .arg(&narrow_bare)
        .status()
        .unwrap();
    assert!(cloned.success());
    let port = serve_git_http_per_user(vec![
        ("team-a", "a-token", full.root.path().to_owned()),
        ("team-b", "b-token", narrow.path().to_owned()),
    ])
    .await;
    let url = format!("http://127.0.0.1:{port}/config.git");
    let (fetcher, _cache) = worker_fetcher(SourceLimits::default(), 2, 2);
    let with = |user: &str, password: &str, reference: &str| SourceRequest {
        tls: None,
        location: Location::Git {
            url: url.clone(),
            reference: Some(reference.to_owned()),
            semver: None,
            verify: None,
            path: "app.env".to_owned(),
        },
        namespace: user.to_owned(),
        credentials: Some(metahooks::source::Credentials {
            secret: "creds".to_owned(),
            binding: metahooks::source::binding::Binding::read("creds", None, Some(&url)),
            username: Some(user.to_owned()),
            password: Some(password.to_owned()),
            ..metahooks::source::Credentials::default()
        }),
    };
    let a = settled(&fetcher, &with("team-a", "a-token", "hidden")).await;
    let a_text = a
        .snapshot
        .as_ref()
        .and_then(|s| s.files.get("app.env").cloned());
    assert_eq!(
        a_text,
        Some(metahooks::source::Content::Text(
            "DB_PASSWORD=team-a-only\n".to_owned()
        )),
        "{:?}",
        a.error
    );
    // B asks for A's commit by id with its own token.
    let b = settled(&fetcher, &with("team-b", "b-token", &hidden)).await;
    assert!(b.snapshot.is_none(), "team B was served team A's commit");
    assert_eq!(b.error.map(|e| e.reason()), Some("RefNotFound"));
}

/// A hostile git:// server (tests/hostile/delta_bomb.py) that sends a crafted pack as it
/// is; killed when dropped.
struct DeltaBombServer {
    child: std::process::Child,
    port: u16,
    _repo: Repo,
}

impl DeltaBombServer {
    fn start(target_mib: u32) -> DeltaBombServer {
        use std::io::BufRead;
        let repo = Repo::new();
        let mut child = std::process::Command::new("python3")
            .arg(support::repo_dir().join("tests/hostile/delta_bomb.py"))
            .arg("serve")
            .arg(repo.bare())
            .arg(target_mib.to_string())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port: {line:?}"));
        DeltaBombServer {
            child,
            port,
            _repo: repo,
        }
    }
}

impl Drop for DeltaBombServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_bomb_ends_the_worker_at_its_memory_limit_not_the_server() {
    // A 17 KB pack whose commit holds, beside a 4-byte file, a 300 MiB blob stored as a
    // delta: indexing it needs the whole blob in memory (~340 MiB unbounded).
    let bomb = DeltaBombServer::start(300);
    let (fetcher, _cache) = worker_fetcher(SourceLimits::default(), 2, 2);
    let url = format!("git://127.0.0.1:{}/config.git", bomb.port);
    let error = settled(&fetcher, &git(url, "team-a", "app.env"))
        .await
        .error
        .expect("the fetch fails");
    assert_eq!(error.reason(), "MemoryLimit", "{error}");
    assert!(error.to_string().contains("160 MiB"), "{error}");
    // The engine goes on: an honest repository is fetched by the next worker.
    let honest = Repo::new();
    honest.commit(&[("app.env", "A=1\n")]);
    let daemon = GitDaemon::start(&honest);
    let fine = settled(&fetcher, &git(daemon.url(), "team-a", "app.env")).await;
    assert!(fine.snapshot.is_some(), "{:?}", fine.error);
}

/// A repository of `count` directories `d<n>` each holding ~900 KB of compressible text
/// (so the pack stays small), served by git daemon.
fn directories_of_900_kb(count: usize) -> (Repo, GitDaemon) {
    let repo = Repo::new();
    let files: Vec<(String, String)> = (0..count)
        .map(|n| {
            let line = format!("KEY_{n}=value of directory {n}\n");
            (format!("d{n}/app.env"), line.repeat(900_000 / line.len()))
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    repo.commit(&refs);
    let daemon = GitDaemon::start(&repo);
    (repo, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_paths_of_one_remote_are_read_within_one_workers_memory() {
    // 48 directories of ~900 KB each (compressible, so the pack is small): 43 MB of
    // files that one worker holding them all at once could not keep under 96 MiB.
    let (_repo, daemon) = directories_of_900_kb(48);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::start(
        support::fetcher_settings(support::loopback_policy(&["git"]), cache.path())
            .worker_memory_bytes(96 * 1024 * 1024)
            .build(),
    );
    let requests: Vec<SourceRequest> = (0..48)
        .map(|n| git(daemon.url(), "team-a", &format!("d{n}")))
        .collect();
    let interval = Duration::from_secs(3600);
    // The first ask starts a job for its path; the other 47 join the remote while it
    // runs, and the next job reads them all from the commit it fetched.
    for request in &requests {
        fetcher.want(&metahooks::source::Interest::keep(request, interval));
    }
    fetcher.idle().await;
    for request in &requests {
        let state = settled(&fetcher, request).await;
        assert!(
            state.error.is_none() && state.snapshot.is_some(),
            "{:?}",
            state.error
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_snapshots_are_handed_over_batch_by_batch_within_the_budget() {
    // 40 directories of ~900 KB on one remote, a snapshot budget of 8 MiB: one job reads
    // them all, storing each batch as it comes and waiting for parents to take theirs.
    let (_repo, daemon) = directories_of_900_kb(40);
    let cache = tempfile::tempdir().unwrap();
    let budget: u64 = 8 * 1024 * 1024;
    let fetcher = support::start(
        support::fetcher_settings(support::loopback_policy(&["git"]), cache.path())
            .snapshot_budget_bytes(budget)
            .build(),
    );
    let requests: Vec<SourceRequest> = (0..40)
        .map(|n| git(daemon.url(), "team-a", &format!("d{n}")))
        .collect();
    let interval = Duration::from_secs(3600);
    // Parents come back for their snapshots while the job runs (as their 2 s resync
    // would), and the peak of what the engine holds is watched.
    let mut served = vec![false; requests.len()];
    let mut peak = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while served.iter().any(|s| !s) {
        assert!(Instant::now() < deadline, "never served: {served:?}");
        for (request, served) in requests.iter().zip(served.iter_mut()) {
            *served |= fetcher.lookup(request, interval).snapshot.is_some();
            peak = peak.max(fetcher.snapshot_bytes());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The budget plus what one batch brings (8 paths) and what a parent has not
    // yet come back for.
    assert!(
        peak <= budget + 16 * 1024 * 1024,
        "peak {} MiB of snapshots held against a budget of 8 MiB",
        peak >> 20
    );
}
