//! Sources through a real egress proxy: tinyproxy from Debian (the test command installs
//! it), on 127.0.0.2, the only address the policy allows. git over https goes through a
//! CONNECT tunnel (TLS still ends at the origin), git over http and HTTP files through
//! absolute-form requests, each with the proxy's Basic credentials; the direct route is
//! refused, a `NO_PROXY` host goes direct (and is refused), and the proxy's own log shows
//! each request.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use axum::http::StatusCode;
use metahooks::source::policy::Policy;
use metahooks::source::proxy::Proxies;
use metahooks::source::{Content, Credentials, Location, SourceRequest, SourceState};
use support::servers::{Files, Pki, Repo, serve_files_tls, serve_git_http, serve_git_https};

use crate::source_hardening::settled;
use crate::source_tls::basic_auth;

/// A tinyproxy on 127.0.0.2 that wants `proxy:pr0xy`, logging every request.
struct Tinyproxy {
    port: u16,
    dir: tempfile::TempDir,
    child: std::process::Child,
}

impl Tinyproxy {
    fn start(program: PathBuf) -> Tinyproxy {
        let dir = tempfile::tempdir().unwrap();
        // Bound and released: tinyproxy cannot be handed a listener.
        let port = std::net::TcpListener::bind("127.0.0.2:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = dir.path().join("tinyproxy.log");
        let config = dir.path().join("tinyproxy.conf");
        // No ConnectPort line: CONNECT to any port (the origins listen on random ones).
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListen 127.0.0.2\nTimeout 60\nMaxClients 32\nAllow 127.0.0.0/8\n\
                 BasicAuth proxy pr0xy\nLogLevel Info\nLogFile \"{}\"\nPidFile \"{}\"\n",
                log.display(),
                dir.path().join("tinyproxy.pid").display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new(program)
            .arg("-d")
            .arg("-c")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tinyproxy starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.2", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "tinyproxy never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Tinyproxy { port, dir, child }
    }

    fn url(&self, credentials: &str) -> String {
        format!("http://{credentials}@127.0.0.2:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("tinyproxy.log")).unwrap_or_default()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Only the proxy's address is allowed; `proxy` (and `no_proxy`) as the environment
/// would give them.
fn policy(pki: &Pki, proxy: Option<&str>, no_proxy: &str) -> Policy {
    let proxies = Proxies::configure(proxy, None, |name| {
        (name == "NO_PROXY").then(|| no_proxy.to_owned())
    })
    .unwrap();
    Policy {
        extra_schemes: ["http".to_owned()].into(),
        allow_cidrs: vec!["127.0.0.2/32".parse().unwrap()],
        source_ca_pem: Some(pki.ca_pem.clone()),
        proxies,
        ..Policy::default()
    }
}

fn git(url: &str) -> Location {
    Location::Git {
        url: url.to_owned(),
        reference: Some("main".to_owned()),
        semver: None,
        verify: None,
        path: "app.env".to_owned(),
    }
}

async fn fetch(
    policy: Policy,
    location: Location,
    credentials: Option<Credentials>,
) -> SourceState {
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(policy, cache.path());
    let request = SourceRequest {
        location,
        namespace: "team-a".to_owned(),
        credentials,
        tls: None,
    };
    settled(&fetcher, &request).await
}

fn text(state: &SourceState) -> Option<String> {
    state.snapshot.as_ref().and_then(|s| {
        s.files.values().next().map(|content| match content {
            Content::Text(text) => text.clone(),
            Content::Binary(_) => String::new(),
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_reach_their_origins_only_through_the_egress_proxy() {
    let Some(program) = support::oracles::tool("MHTEST_TINYPROXY") else {
        return;
    };
    let proxy = Tinyproxy::start(program);
    let pki = Pki::new(false);
    let repo = Repo::new();
    repo.commit(&[("app.env", "TIER=gold\n")]);
    let https_port = serve_git_https(repo.root.path().to_owned(), "reader", "s3cret", &pki).await;
    let http_port = serve_git_http(repo.root.path().to_owned(), "reader", "s3cret").await;
    let files = Files::default();
    files.set("/app.env", StatusCode::OK, "FROM=file\n");
    let files_port = serve_files_tls(files, &pki).await;
    let git_https = format!("https://localhost:{https_port}/config.git");
    let git_http = format!("http://localhost:{http_port}/config.git");
    let file = format!("https://localhost:{files_port}/app.env");
    let through = Some(proxy.url("proxy:pr0xy"));

    // git over https: a CONNECT tunnel, TLS to the origin's certificate inside it.
    let state = fetch(
        policy(&pki, through.as_deref(), ""),
        git(&git_https),
        Some(basic_auth(&format!("https://localhost:{https_port}/"))),
    )
    .await;
    assert_eq!(
        text(&state).as_deref(),
        Some("TIER=gold\n"),
        "{:?}",
        state.error
    );
    // git over plain http: absolute-form requests to the proxy.
    let state = fetch(
        policy(&pki, through.as_deref(), ""),
        git(&git_http),
        Some(basic_auth(&format!("http://localhost:{http_port}/"))),
    )
    .await;
    assert_eq!(
        text(&state).as_deref(),
        Some("TIER=gold\n"),
        "{:?}\n{}",
        state.error,
        proxy.log()
    );
    // An HTTP file over https.
    let state = fetch(
        policy(&pki, through.as_deref(), ""),
        Location::Http { url: file.clone() },
        None,
    )
    .await;
    assert_eq!(
        text(&state).as_deref(),
        Some("FROM=file\n"),
        "{:?}",
        state.error
    );
    let log = proxy.log();
    for seen in [
        format!("CONNECT localhost:{https_port}"),
        format!("GET http://localhost:{http_port}/config.git/info/refs"),
        format!("CONNECT localhost:{files_port}"),
    ] {
        assert!(log.contains(&seen), "the proxy did not see {seen}:\n{log}");
    }

    // Without the proxy, or for a NO_PROXY host, the direct route is refused.
    for (proxy_url, no_proxy) in [(None, ""), (through.as_deref(), "localhost")] {
        let state = fetch(
            policy(&pki, proxy_url, no_proxy),
            git(&git_https),
            Some(basic_auth(&format!("https://localhost:{https_port}/"))),
        )
        .await;
        let error = state.error.expect("the direct route is refused");
        assert_eq!(error.reason(), "HostRefused", "{error}");
    }
    // Wrong proxy credentials: the proxy refuses the tunnel (tinyproxy answers 401
    // where RFC 9110 has 407), and the message names the proxy it went through.
    let state = fetch(
        policy(&pki, Some(&proxy.url("proxy:wrong")), ""),
        git(&git_https),
        Some(basic_auth(&format!("https://localhost:{https_port}/"))),
    )
    .await;
    let error = state.error.expect("refused by the proxy");
    assert_eq!(error.reason(), "Unreachable", "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!(
            "through the proxy http://127.0.0.2:{}",
            proxy.port
        )) && !message.contains("wrong"),
        "{message}"
    );
}
