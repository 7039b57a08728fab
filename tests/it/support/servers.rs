//! Real servers on loopback for source tests: `git daemon` over a repository the test
//! commits to, a static HTTP file server, and git's smart HTTP (`git http-backend`)
//! behind basic auth. All bind 127.0.0.1 and stop when dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn git(dir: &Path, args: &[&str]) {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A bare repository `config.git` under a temp root plus a work tree to commit from.
pub struct Repo {
    pub root: tempfile::TempDir,
    work: PathBuf,
}

impl Repo {
    pub fn new() -> Repo {
        let root = tempfile::tempdir().unwrap();
        let bare = root.path().join("config.git");
        std::fs::create_dir_all(&bare).unwrap();
        git(&bare, &["init", "--bare", "--initial-branch=main", "-q"]);
        let work = root.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "--initial-branch=main", "-q"]);
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        Repo { root, work }
    }

    pub fn bare(&self) -> PathBuf {
        self.root.path().join("config.git")
    }

    /// Writes files (path → content), commits them all and pushes to `main`.
    pub fn commit(&self, files: &[(&str, &str)]) {
        for (path, content) in files {
            let target = self.work.join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
        self.push("change");
    }

    pub fn commit_bytes(&self, path: &str, content: &[u8]) {
        std::fs::write(self.work.join(path), content).unwrap();
        self.push("bytes");
    }

    pub fn symlink(&self, link: &str, target: &str) {
        std::os::unix::fs::symlink(target, self.work.join(link)).unwrap();
        self.push("link");
    }

    fn push(&self, message: &str) {
        // Commits a test makes in one second still get strictly increasing committer
        // times, as commits made by people do.
        static CLOCK: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(1_750_000_000);
        let at = CLOCK.fetch_add(10, std::sync::atomic::Ordering::SeqCst);
        git(&self.work, &["add", "-A"]);
        let output = Command::new("git")
            .args(["commit", "-q", "-m", message])
            .current_dir(&self.work)
            .env("GIT_AUTHOR_NAME", "test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .env("GIT_AUTHOR_DATE", format!("@{at} +0000"))
            .env("GIT_COMMITTER_DATE", format!("@{at} +0000"))
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git commit: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        git(&self.work, &["push", "-q", "origin", "HEAD:main"]);
    }
}

/// `git daemon` serving the repository's root on a fixed loopback port.
pub struct GitDaemon {
    pub port: u16,
    base: PathBuf,
    child: Option<Child>,
}

impl GitDaemon {
    pub fn start(repo: &Repo) -> GitDaemon {
        let mut daemon = GitDaemon {
            port: free_port(),
            base: repo.root.path().to_owned(),
            child: None,
        };
        daemon.restart();
        daemon
    }

    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/config.git", self.port)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.stop();
        // `git daemon` would fork `git-daemon` and leave it running when killed; start
        // the real program so stop() stops it.
        let exec_path = Command::new("git")
            .arg("--exec-path")
            .output()
            .expect("git runs")
            .stdout;
        let program = PathBuf::from(String::from_utf8_lossy(&exec_path).trim()).join("git-daemon");
        let child = Command::new(program)
            .args([
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
                "--informative-errors",
            ])
            .arg(format!("--port={}", self.port))
            .arg(format!("--base-path={}", self.base.display()))
            .arg(self.base.display().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("git daemon starts");
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "git daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Files served over plain HTTP; entries can be changed or removed while it runs.
#[derive(Clone, Default)]
pub struct Files {
    pub files: Arc<Mutex<BTreeMap<String, (StatusCode, String)>>>,
}

impl Files {
    pub fn set(&self, path: &str, status: StatusCode, body: &str) {
        self.files
            .lock()
            .unwrap()
            .insert(path.to_owned(), (status, body.to_owned()));
    }
}

pub async fn serve_files(files: Files) -> u16 {
    async fn handle(State(files): State<Files>, uri: Uri) -> Response {
        match files.files.lock().unwrap().get(uri.path()) {
            Some((status, body)) => (*status, body.clone()).into_response(),
            None => (StatusCode::NOT_FOUND, "not found").into_response(),
        }
    }
    let app = axum::Router::new().fallback(handle).with_state(files);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}

/// git's smart HTTP protocol through `git http-backend` (CGI), behind basic auth.
pub async fn serve_git_http(
    project_root: PathBuf,
    user: &'static str,
    password: &'static str,
) -> u16 {
    serve_git_http_per_user(vec![(user, password, project_root)]).await
}

/// Smart HTTP where each user (basic auth) sees a project root of their own, as a forge
/// shows each token only the refs it may read.
pub async fn serve_git_http_per_user(users: Vec<(&'static str, &'static str, PathBuf)>) -> u16 {
    #[derive(Clone)]
    struct Backend {
        /// (expected Authorization header, project root)
        users: Vec<(String, PathBuf)>,
    }
    async fn handle(
        State(backend): State<Backend>,
        method: Method,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let presented = headers.get("authorization").and_then(|v| v.to_str().ok());
        let root = backend
            .users
            .iter()
            .find(|(expected, _)| Some(expected.as_str()) == presented)
            .map(|(_, root)| root.clone());
        let Some(root) = root else {
            return (
                StatusCode::UNAUTHORIZED,
                [("www-authenticate", "Basic realm=\"git\"")],
                "",
            )
                .into_response();
        };
        let content_type = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let output = tokio::task::spawn_blocking(move || {
            use std::io::Write;
            let mut child = Command::new("git")
                .arg("http-backend")
                .env("GIT_PROJECT_ROOT", &root)
                .env("GIT_HTTP_EXPORT_ALL", "1")
                .env("PATH_INFO", uri.path())
                .env("QUERY_STRING", uri.query().unwrap_or_default())
                .env("REQUEST_METHOD", method.as_str())
                .env("CONTENT_TYPE", content_type)
                .env("CONTENT_LENGTH", body.len().to_string())
                .env("REMOTE_USER", "test")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&body).unwrap();
            child.wait_with_output().unwrap().stdout
        })
        .await
        .unwrap();
        let split = output
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| (i, 4))
            .or_else(|| output.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)));
        let Some((at, gap)) = split else {
            return (StatusCode::BAD_GATEWAY, "bad CGI output").into_response();
        };
        let head = String::from_utf8_lossy(&output[..at]).into_owned();
        let mut builder = Response::builder().status(StatusCode::OK);
        for line in head.lines() {
            if let Some((name, value)) = line.split_once(':') {
                let value = value.trim();
                if name.eq_ignore_ascii_case("status") {
                    let code = value
                        .split_whitespace()
                        .next()
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(500);
                    builder = builder.status(code);
                } else {
                    builder = builder.header(name.trim(), value);
                }
            }
        }
        builder
            .body(axum::body::Body::from(output[at + gap..].to_vec()))
            .unwrap()
    }
    use base64::Engine;
    let users = users
        .into_iter()
        .map(|(user, password, root)| {
            let encoded =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            (format!("Basic {encoded}"), root)
        })
        .collect();
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(Backend { users });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    port
}
