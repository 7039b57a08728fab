//! The source engine against hostile or awkward repositories and URLs: tree bombs, a
//! pinned commit behind a shallow fetch, user-info in URLs, forgotten requests, and
//! snapshots that are not re-read when nothing changed. Real `git daemon` and HTTP
//! servers on loopback; the fetcher is driven directly (no emulator).

use crate::support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use metahooks::source::binding::Binding;
use metahooks::source::fetcher::Fetcher;
use metahooks::source::policy::Policy;
use metahooks::source::{Location, SourceRequest, SourceState, Sources};
use support::servers::{Files, GitDaemon, Repo, serve_files};

fn loopback_policy() -> Policy {
    Policy {
        extra_schemes: ["git".to_owned(), "http".to_owned()].into(),
        allow_private_addresses: true,
        ..Policy::default()
    }
}

fn git_request(url: &str, reference: Option<&str>, path: &str) -> SourceRequest {
    SourceRequest {
        tls: None,
        location: Location::Git {
            url: url.to_owned(),
            reference: reference.map(str::to_owned),
            semver: None,
            verify: None,
            path: path.to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: None,
    }
}

/// Asks and waits for background jobs until the request has a result (a snapshot or an
/// error) and no job is pending for it.
pub async fn settled(fetcher: &Fetcher, request: &SourceRequest) -> SourceState {
    let interval = Duration::from_secs(60);
    for _ in 0..20 {
        let state = fetcher.lookup(request, interval);
        if !state.pending && (state.snapshot.is_some() || state.error.is_some()) {
            return state;
        }
        fetcher.idle().await;
    }
    panic!("no result for {request:?}");
}

pub fn git_stdin(dir: &Path, args: &[&str], input: &[u8]) -> String {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// Writes, straight into the bare repository, a commit whose root holds `ok.env` and a
/// directory `bomb` of `levels` nested trees, each naming the tree below `fan_out` times
/// and holding no file at all: a few kilobytes that describe fan_out^levels directories,
/// so a file limit alone never stops the walk.
fn commit_tree_bomb(repo: &Repo, levels: usize, fan_out: usize) {
    let bare = repo.bare();
    let blob = git_stdin(&bare, &["hash-object", "-w", "--stdin"], b"A=1\n");
    let mut tree = git_stdin(&bare, &["mktree"], b"");
    for _ in 0..levels {
        let listing: String = (0..fan_out)
            .map(|i| format!("040000 tree {tree}\td{i}\n"))
            .collect();
        tree = git_stdin(&bare, &["mktree"], listing.as_bytes());
    }
    let root = git_stdin(
        &bare,
        &["mktree"],
        format!("040000 tree {tree}\tbomb\n100644 blob {blob}\tok.env\n").as_bytes(),
    );
    let commit = git_stdin(&bare, &["commit-tree", &root, "-m", "bomb"], b"");
    git_stdin(&bare, &["update-ref", "refs/heads/main", &commit], b"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tree_bombs_are_stopped_by_counting_every_entry() {
    let repo = Repo::new();
    commit_tree_bomb(&repo, 6, 100);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    let bomb = git_request(&daemon.url(), Some("main"), "bomb");
    let neighbour = git_request(&daemon.url(), Some("main"), "ok.env");
    let _ = fetcher.lookup(&neighbour, Duration::from_secs(60));
    let state = settled(&fetcher, &bomb).await;
    let error = state.error.expect("the bomb is refused");
    assert_eq!(error.reason(), "TooManyEntries", "{error}");
    assert!(error.to_string().contains("4096"), "{error}");
    // A parent reading another path of the same repository is not held up by it.
    let state = settled(&fetcher, &neighbour).await;
    assert!(state.error.is_none(), "{:?}", state.error);
    assert!(state.snapshot.unwrap().files.contains_key("ok.env"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_commit_works_after_a_shallow_branch_fetch() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "V=1\n")]);
    let first = git_stdin(&repo.bare(), &["rev-parse", "main"], b"");
    repo.commit(&[("app.env", "V=2\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    let branch = settled(
        &fetcher,
        &git_request(&daemon.url(), Some("main"), "app.env"),
    )
    .await;
    let branch = branch.snapshot.expect("branch fetched");
    assert_eq!(
        branch.files["app.env"],
        metahooks::source::Content::Text("V=2\n".to_owned())
    );
    let pinned = settled(
        &fetcher,
        &git_request(&daemon.url(), Some(&first), "app.env"),
    )
    .await;
    assert!(pinned.error.is_none(), "{:?}", pinned.error);
    let pinned = pinned.snapshot.expect("pinned commit fetched");
    assert_eq!(
        pinned.files["app.env"],
        metahooks::source::Content::Text("V=1\n".to_owned())
    );
    assert!(pinned.revision.ends_with(&first), "{}", pinned.revision);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_info_in_a_url_never_reaches_a_message() {
    let files = Files::default();
    files.set("/config", StatusCode::NOT_FOUND, "no");
    let port = serve_files(files).await;
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    let http = SourceRequest {
        tls: None,
        location: Location::Http {
            url: format!("http://reader:s3cr3t-token@127.0.0.1:{port}/config"),
        },
        namespace: "team-a".to_owned(),
        credentials: None,
    };
    let error = settled(&fetcher, &http)
        .await
        .error
        .expect("404 is an error");
    assert_eq!(error.reason(), "HTTPError");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
    assert!(error.to_string().contains("127.0.0.1"), "{error}");
    // A git remote that does not answer, with user-info in its URL.
    let closed = support::servers::closed_port();
    let git = git_request(
        &format!("git://reader:s3cr3t-token@127.0.0.1:{closed}/x.git"),
        None,
        "",
    );
    let error = settled(&fetcher, &git).await.error.expect("unreachable");
    assert!(!error.to_string().contains("s3cr3t"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_nobody_asks_for_are_forgotten() {
    let repo = Repo::new();
    repo.commit(&[("a.env", "A=1\n"), ("b.env", "B=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    for path in ["a.env", "b.env"] {
        let state = settled(&fetcher, &git_request(&daemon.url(), None, path)).await;
        assert!(state.snapshot.is_some());
    }
    assert_eq!(fetcher.tracked(), (2, 2));
    fetcher.forget_unasked(Duration::ZERO).await;
    assert_eq!(
        fetcher.tracked(),
        (0, 0),
        "deleted parents leave nothing behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_commit_is_not_read_again() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "A=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    let request = git_request(&daemon.url(), None, "app.env");
    let first = settled(&fetcher, &request).await.snapshot.unwrap();
    fetcher.expire().await;
    let polls_before = fetcher.network_fetches();
    let second = settled(&fetcher, &request).await.snapshot.unwrap();
    assert_eq!(
        fetcher.network_fetches(),
        polls_before + 1,
        "the remote was polled"
    );
    assert!(
        Arc::ptr_eq(&first, &second),
        "the same commit keeps the same snapshot"
    );
    repo.commit(&[("app.env", "A=2\n")]);
    fetcher.expire().await;
    let third = settled(&fetcher, &request).await.snapshot.unwrap();
    assert!(!Arc::ptr_eq(&second, &third));
}

/// A server that answers every request 401 (asking for basic auth) and records the
/// Authorization headers it was sent.
async fn recording_server() -> (u16, Arc<std::sync::Mutex<Vec<String>>>) {
    use axum::http::HeaderMap;
    use axum::response::IntoResponse;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let app = axum::Router::new().fallback(move |headers: HeaderMap| {
        let record = record.clone();
        async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("<none>")
                .to_owned();
            record.lock().unwrap().push(auth);
            (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic realm=\"git\"")],
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

/// Redirects every request to the same path on another port.
async fn redirecting_server(to_port: u16) -> u16 {
    use axum::http::Uri;
    use axum::response::{IntoResponse, Redirect};
    let app = axum::Router::new().fallback(move |uri: Uri| async move {
        let target = format!(
            "http://127.0.0.1:{to_port}{}",
            uri.path_and_query().map_or("/", |p| p.as_str())
        );
        Redirect::to(&target).into_response()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_credentials_never_follow_a_redirect_to_another_origin() {
    let (other, seen) = recording_server().await;
    let origin = redirecting_server(other).await;
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(loopback_policy(), cache.path());
    let request = SourceRequest {
        tls: None,
        location: Location::Git {
            url: format!("http://127.0.0.1:{origin}/config.git"),
            reference: None,
            semver: None,
            verify: None,
            path: String::new(),
        },
        namespace: "team-a".to_owned(),
        credentials: Some(metahooks::source::Credentials {
            token: Some("tenant-token".to_owned()),
            // The owner allows the origin and the other origin too: a redirect still
            // never carries credentials across origins.
            binding: Binding::read(
                "t",
                None,
                Some(&format!(
                    "http://127.0.0.1:{origin}/, http://127.0.0.1:{other}/"
                )),
            ),
            ..Default::default()
        }),
    };
    let error = settled(&fetcher, &request).await.error.expect("refused");
    assert_eq!(
        error.reason(),
        "RedirectRefused",
        "{error} (other origin saw {:?})",
        seen.lock().unwrap()
    );
    assert!(
        error.to_string().contains(&format!("127.0.0.1:{other}")),
        "{error}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|auth| !auth.contains("Basic")),
        "the other origin was sent credentials: {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_disk_cache_stays_under_its_cap() {
    let (first, second) = (Repo::new(), Repo::new());
    first.commit(&[("a.env", "A=1\n")]);
    second.commit(&[("b.env", "B=1\n")]);
    let (first_daemon, second_daemon) = (GitDaemon::start(&first), GitDaemon::start(&second));
    let cache = tempfile::tempdir().unwrap();
    // A cap below one repository: each download evicts every other repository.
    let fetcher = support::start(
        support::fetcher_settings(loopback_policy(), cache.path())
            .cache_max_bytes(1)
            .build(),
    );
    let a = git_request(&first_daemon.url(), None, "a.env");
    let b = git_request(&second_daemon.url(), None, "b.env");
    assert!(settled(&fetcher, &a).await.snapshot.is_some());
    let repos = || std::fs::read_dir(cache.path().join("git")).unwrap().count();
    assert_eq!(repos(), 1);
    assert!(settled(&fetcher, &b).await.snapshot.is_some());
    assert_eq!(repos(), 1, "the older repository was evicted");
    // The evicted one is fetched again when asked for.
    first.commit(&[("a.env", "A=2\n")]);
    fetcher.expire().await;
    let _ = fetcher.lookup(&a, Duration::from_secs(60));
    fetcher.idle().await;
    let again = settled(&fetcher, &a).await;
    assert!(again.error.is_none(), "{:?}", again.error);
    assert_eq!(
        again.snapshot.unwrap().files["a.env"],
        metahooks::source::Content::Text("A=2\n".to_owned())
    );
}

/// Internal git without the blunt switch: a range or a host name allows the one server,
/// and a refusal names the address, the host and the flag that would allow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_lists_open_one_internal_server_and_nothing_else() {
    let repo = Repo::new();
    repo.commit(&[("app.env", "A=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let by_address = daemon.url();
    let by_name = by_address.replace("127.0.0.1", "localhost");
    let policy = |cidrs: &[&str], hosts: &[&str]| Policy {
        extra_schemes: ["git".to_owned()].into(),
        allow_cidrs: cidrs.iter().map(|c| c.parse().unwrap()).collect(),
        allow_hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        ..Policy::default()
    };
    let fetch = |policy: Policy, url: String| async move {
        let cache = tempfile::tempdir().unwrap();
        let fetcher = support::fetcher(policy, cache.path());
        settled(&fetcher, &git_request(&url, None, "app.env")).await
    };
    let ranged = fetch(policy(&["127.0.0.0/8"], &[]), by_address.clone()).await;
    assert!(ranged.snapshot.is_some(), "{:?}", ranged.error);
    let named = fetch(policy(&[], &["localhost"]), by_name.clone()).await;
    assert!(named.snapshot.is_some(), "{:?}", named.error);
    // Another range allowed, or another host: refused, with the way to allow it.
    let refused = fetch(policy(&["10.20.0.0/16"], &["git.corp.example"]), by_name).await;
    let error = refused.error.expect("refused");
    assert_eq!(error.reason(), "HostRefused");
    let message = error.to_string();
    assert!(
        message.contains("127.0.0.1 is a loopback address")
            && message.contains("--allow-cidr 127.0.0.1/32")
            && message.contains("--allow-host localhost"),
        "{message}"
    );
}
