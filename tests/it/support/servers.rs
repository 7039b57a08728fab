//! Real servers on loopback for source tests: `git daemon` over a repository the test
//! commits to, a static HTTP file server, and git's smart HTTP (`git http-backend`)
//! behind basic auth. All bind 127.0.0.1 and stop when dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// A port nobody listens on (bound, then released), for a remote that refuses to be
/// reached. Servers the tests run hold their own listeners instead ([`Inetd`]).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A loopback listener the test holds, handing each connection to a new process that
/// speaks on its stdin and stdout (as inetd does): the port is the test's from bind to
/// stop, so no other test can take it in between.
pub struct Inetd {
    pub port: u16,
    sessions: Arc<Mutex<Vec<Child>>>,
    stopping: Arc<std::sync::atomic::AtomicBool>,
    accepting: Option<std::thread::JoinHandle<()>>,
}

impl Inetd {
    /// Listens on `port` (0: any free one); each connection runs `command()`.
    pub fn start(port: u16, command: impl Fn() -> Command + Send + 'static) -> Inetd {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let sessions = Arc::new(Mutex::new(Vec::new()));
        let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (serving, stop) = (sessions.clone(), stopping.clone());
        let accepting = std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let Ok(input) = stream.try_clone() else {
                    continue;
                };
                let session = command()
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(input)))
                    .stdout(Stdio::from(std::os::fd::OwnedFd::from(stream)))
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("a session starts");
                serving.lock().unwrap().push(session);
            }
        });
        Inetd {
            port,
            sessions,
            stopping,
            accepting: Some(accepting),
        }
    }
}

impl Drop for Inetd {
    fn drop(&mut self) {
        // The accept loop sees the flag on its next connection: this one. Joining it
        // closes the listener before this returns, so the port refuses from then on.
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
        for mut session in self.sessions.lock().unwrap().drain(..) {
            let _ = session.kill();
            let _ = session.wait();
        }
    }
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

    /// Tags the last commit `name` and pushes the tag.
    pub fn tag(&self, name: &str) {
        git(&self.work, &["tag", name]);
        git(
            &self.work,
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        );
    }

    /// Tags the last commit `name` with an annotated tag and pushes the tag.
    pub fn tag_annotated(&self, name: &str) {
        git(
            &self.work,
            &["tag", "-a", "-m", &format!("release {name}"), name],
        );
        git(
            &self.work,
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        );
    }

    pub fn commit_bytes(&self, path: &str, content: &[u8]) {
        std::fs::write(self.work.join(path), content).unwrap();
        self.push("bytes");
    }

    pub fn symlink(&self, link: &str, target: &str) {
        std::os::unix::fs::symlink(target, self.work.join(link)).unwrap();
        self.push("link");
    }

    /// Commits like [`Repo::commit`] with a committer time `ahead_seconds` past the
    /// clock the other commits follow (a skewed clock, or a date set on purpose).
    pub fn commit_dated_ahead(&self, files: &[(&str, &str)], ahead_seconds: u64) {
        for (path, content) in files {
            std::fs::write(self.work.join(path), content).unwrap();
        }
        self.push_at("dated ahead", ahead_seconds);
    }

    fn push(&self, message: &str) {
        self.push_at(message, 0);
    }

    /// Commits like [`Repo::commit`], signed by `signer` (git's own `commit -S`).
    pub fn commit_signed(&self, files: &[(&str, &str)], signer: &super::signing::Signer) {
        for (path, content) in files {
            let target = self.work.join(path);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::write(target, content).unwrap();
        }
        self.push_with("signed change", 0, Some(signer));
    }

    /// Tags the last commit `name` with an annotated tag signed by `signer` (`tag -s`).
    pub fn tag_signed(&self, name: &str, signer: &super::signing::Signer) {
        let output = signer
            .git(&self.work)
            .args(["tag", "-s", "-m", &format!("release {name}"), name])
            .output()
            .expect("git runs");
        assert!(
            output.status.success(),
            "git tag -s: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        git(
            &self.work,
            &["push", "-q", "origin", &format!("refs/tags/{name}")],
        );
    }

    fn push_at(&self, message: &str, ahead_seconds: u64) {
        self.push_with(message, ahead_seconds, None);
    }

    fn push_with(
        &self,
        message: &str,
        ahead_seconds: u64,
        signer: Option<&super::signing::Signer>,
    ) {
        // Commits a test makes in one second still get strictly increasing committer
        // times, as commits made by people do.
        static CLOCK: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(1_750_000_000);
        let at = CLOCK.fetch_add(10, std::sync::atomic::Ordering::SeqCst) + ahead_seconds;
        git(&self.work, &["add", "-A"]);
        let mut command = match signer {
            Some(signer) => {
                let mut command = signer.git(&self.work);
                command.arg("commit").arg("-S");
                command
            }
            None => {
                let mut command = Command::new("git");
                command.arg("commit").current_dir(&self.work);
                command
            }
        };
        let output = command
            .args(["-q", "-m", message])
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

/// `git daemon` serving the repository's root on a loopback port that stays the same
/// across `stop` and `restart` (each connection served by `git daemon --inetd`).
pub struct GitDaemon {
    pub port: u16,
    base: PathBuf,
    serving: Option<Inetd>,
}

impl GitDaemon {
    pub fn start(repo: &Repo) -> GitDaemon {
        let mut daemon = GitDaemon {
            port: 0,
            base: repo.root.path().to_owned(),
            serving: None,
        };
        daemon.restart();
        daemon
    }

    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/config.git", self.port)
    }

    /// Stops listening: connections are refused until `restart`.
    pub fn stop(&mut self) {
        self.serving = None;
    }

    pub fn restart(&mut self) {
        self.stop();
        let base = self.base.clone();
        let serving = Inetd::start(self.port, move || {
            let mut command = Command::new("git");
            command
                .args(["daemon", "--inetd", "--export-all", "--informative-errors"])
                .arg(format!("--base-path={}", base.display()))
                .arg(base.display().to_string());
            command
        });
        self.port = serving.port;
        self.serving = Some(serving);
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
    serve_app(files_app(files), None).await
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
    serve_app(git_http_app(users), None).await
}

/// git's smart HTTP over TLS with `pki`'s server certificate, behind basic auth.
pub async fn serve_git_https(
    project_root: PathBuf,
    user: &'static str,
    password: &'static str,
    pki: &Pki,
) -> u16 {
    serve_app(
        git_http_app(vec![(user, password, project_root)]),
        Some(pki),
    )
    .await
}

/// Files over TLS with `pki`'s server certificate.
pub async fn serve_files_tls(files: Files, pki: &Pki) -> u16 {
    serve_app(files_app(files), Some(pki)).await
}

fn files_app(files: Files) -> axum::Router {
    async fn handle(State(files): State<Files>, uri: Uri) -> Response {
        match files.files.lock().unwrap().get(uri.path()) {
            Some((status, body)) => (*status, body.clone()).into_response(),
            None => (StatusCode::NOT_FOUND, "not found").into_response(),
        }
    }
    axum::Router::new().fallback(handle).with_state(files)
}

fn git_http_app(users: Vec<(&'static str, &'static str, PathBuf)>) -> axum::Router {
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
    axum::Router::new()
        .fallback(handle)
        .with_state(Backend { users })
}

/// Serves `app` on a loopback port, over TLS when `tls` is given.
pub async fn serve_app(app: axum::Router, tls: Option<&Pki>) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    match tls {
        Some(pki) => {
            let limits = metahooks::server::Limits::default().connection_limits();
            let slots = metahooks::server::Slots::new(limits.max_connections, limits.max_per_peer);
            let serving =
                metahooks::server::serve(listener, Some(&pki.server_files()), limits, slots, app)
                    .unwrap();
            // Served for as long as the test runs.
            std::mem::forget(serving);
        }
        None => {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
    }
    port
}

/// A private CA, a `localhost` server certificate and a client certificate it signed,
/// as files (for servers) and PEM text (for Secrets).
pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca_pem: String,
    pub client_cert_pem: String,
    pub client_key_pem: String,
    /// Whether servers ask for a client certificate signed by the CA.
    pub require_client_cert: bool,
}

impl Pki {
    pub fn new(require_client_cert: bool) -> Pki {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let leaf = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
            // A subject of its own: with the CA's (rcgen's default), OpenSSL takes the
            // leaf for a self-signed certificate and refuses it.
            params.distinguished_name = rcgen::DistinguishedName::new();
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, name);
            let cert = params.signed_by(&key, &issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf("localhost");
        let (client_cert_pem, client_key_pem) = leaf("metahooks-source");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("tls.crt"), server_cert).unwrap();
        std::fs::write(dir.path().join("tls.key"), server_key).unwrap();
        Pki {
            dir,
            ca_pem: ca.pem(),
            client_cert_pem,
            client_key_pem,
            require_client_cert,
        }
    }

    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn server_files(&self) -> metahooks::server::TlsFiles {
        metahooks::server::TlsFiles {
            cert: self.dir.path().join("tls.crt"),
            key: self.dir.path().join("tls.key"),
            client_ca: self.require_client_cert.then(|| self.ca_file()),
        }
    }
}

/// OpenSSH's `sshd` on a loopback port, serving the repository's root to one client key
/// through `git-shell` (forced for every session, as git hosts do: only git's own
/// commands on a quoted repository path get through, never a shell). The test
/// holds the listening socket (port 0: no port is picked and released) and hands each
/// connection to an `sshd -i`, as inetd would.
pub struct SshServer {
    pub port: u16,
    /// The client's private key (OpenSSH format), as a Secret's `identity` holds it.
    pub identity: String,
    /// `known_hosts` lines for this server's host keys, under `[127.0.0.1]:port`.
    pub known_hosts: String,
    /// The login the client key is authorised for.
    pub user: String,
    dir: tempfile::TempDir,
    _serving: Inetd,
}

fn keygen(path: &Path, key_type: &str, passphrase: &str) {
    let output = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            key_type,
            "-N",
            passphrase,
            "-C",
            "metahooks-test",
            "-f",
        ])
        .arg(path)
        .output()
        .expect("ssh-keygen runs");
    assert!(
        output.status.success(),
        "ssh-keygen: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// git's `git-shell`, from git's own exec path (where git keeps the programs it runs).
fn git_shell() -> PathBuf {
    let output = Command::new("git")
        .arg("--exec-path")
        .output()
        .expect("git runs");
    let exec_path = String::from_utf8(output.stdout).expect("git's exec path is UTF-8");
    let shell = Path::new(exec_path.trim()).join("git-shell");
    assert!(shell.exists(), "no git-shell at {}", shell.display());
    shell
}

/// Where sshd is, or None (then the caller skips, unless oracles are required).
pub fn sshd_program() -> Option<PathBuf> {
    let found = ["/usr/sbin/sshd", "/usr/bin/sshd"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("MHTEST_REQUIRE_ORACLES").is_none(),
            "sshd (openssh-server) is required: scripts/test.sh installs it"
        );
    }
    found
}

impl SshServer {
    /// Starts sshd with ed25519 and ecdsa host keys; the client key is `client_key_type`,
    /// encrypted with `passphrase` unless it is empty.
    pub fn start(program: &Path, client_key_type: &str, passphrase: &str) -> SshServer {
        SshServer::start_on(program, 0, client_key_type, passphrase)
    }

    /// [`SshServer::start`] on a given port (22 for scp-like addresses, which name none;
    /// 0 for any free one).
    pub fn start_on(
        program: &Path,
        port: u16,
        client_key_type: &str,
        passphrase: &str,
    ) -> SshServer {
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name);
        keygen(&path("host_ed25519"), "ed25519", "");
        keygen(&path("host_ecdsa"), "ecdsa", "");
        keygen(&path("client"), client_key_type, passphrase);
        std::fs::copy(path("client.pub"), path("authorized_keys")).unwrap();
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_owned();
        // The repository is reached by absolute path; git-shell runs what the client asked
        // for only if it is git-upload-pack (or another of git's transport commands).
        let config = format!(
            "HostKey {}\nHostKey {}\nAuthorizedKeysFile {}\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
             PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile none\n\
             AllowUsers {user}\nLogLevel ERROR\n\
             ForceCommand {} -c \"$SSH_ORIGINAL_COMMAND\"\n",
            path("host_ed25519").display(),
            path("host_ecdsa").display(),
            path("authorized_keys").display(),
            git_shell().display(),
        );
        std::fs::write(path("sshd_config"), config).unwrap();
        // sshd run as root wants its privilege-separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let (program, config) = (program.to_owned(), path("sshd_config"));
        let serving = Inetd::start(port, move || {
            let mut command = Command::new(&program);
            command.args(["-i", "-e", "-f"]).arg(&config);
            command
        });
        let port = serving.port;
        let alias = if port == 22 {
            "127.0.0.1".to_owned()
        } else {
            format!("[127.0.0.1]:{port}")
        };
        let known_hosts = ["host_ed25519.pub", "host_ecdsa.pub"]
            .iter()
            .map(|name| {
                let public = std::fs::read_to_string(path(name)).unwrap();
                let mut fields = public.split_whitespace();
                let (key_type, key) = (fields.next().unwrap(), fields.next().unwrap());
                format!("{alias} {key_type} {key}\n")
            })
            .collect();
        SshServer {
            port,
            identity: std::fs::read_to_string(path("client")).unwrap(),
            known_hosts,
            user,
            dir,
            _serving: serving,
        }
    }

    /// `ssh://user@127.0.0.1:port/<bare repository path>`.
    pub fn url(&self, repo: &Repo) -> String {
        format!(
            "ssh://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            repo.bare().display()
        )
    }

    /// Runs `command` on this server through OpenSSH's own client with the client key.
    pub fn ssh(&self, command: &str) -> std::process::Output {
        let path = |name: &str| self.dir.path().join(name);
        std::fs::write(path("client_known_hosts"), &self.known_hosts).unwrap();
        Command::new("ssh")
            .args([
                "-F",
                "none",
                "-o",
                "BatchMode=yes",
                "-o",
                "IdentitiesOnly=yes",
            ])
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                path("client_known_hosts").display()
            ))
            .arg("-i")
            .arg(path("client"))
            .args(["-p", &self.port.to_string()])
            .arg(format!("{}@127.0.0.1", self.user))
            .arg(command)
            .output()
            .expect("ssh runs")
    }

    /// A `known_hosts` line for a key this server does not hold.
    pub fn stranger_known_hosts(&self) -> String {
        let other = self.dir.path().join("stranger");
        keygen(&other, "ed25519", "");
        let public = std::fs::read_to_string(other.with_extension("pub")).unwrap();
        let mut fields = public.split_whitespace();
        let (key_type, key) = (fields.next().unwrap(), fields.next().unwrap());
        format!("[127.0.0.1]:{} {key_type} {key}\n", self.port)
    }
}
