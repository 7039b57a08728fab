//! git over http and https from real servers the test command takes from Debian: Apache
//! httpd (`apache2-bin`) and nginx with fcgiwrap, each in front of `git http-backend` as
//! git's own documentation sets them up (`GIT_PROJECT_ROOT`, `GIT_HTTP_EXPORT_ALL`),
//! behind basic auth, over http, over https with a private CA, and over https asking for
//! a client certificate; and `git daemon` and OpenSSH's `sshd`. Through each, the source
//! engine fetches a commit, a tag, a directory and the next commit.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use metahooks::source::binding::Binding;
use metahooks::source::fetcher::Fetcher;
use metahooks::source::tls::TlsMaterial;
use metahooks::source::{Content, Credentials, Location, SourceRequest};
use support::servers::{Pki, Repo};

use crate::source_hardening::settled;

/// The uid Apache runs as when the tests run as root: Apache will not serve as root.
const NOBODY: u32 = 65534;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Scheme {
    Http,
    Https,
    HttpsClientCert,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Server {
    Apache,
    Nginx,
}

/// A server on a loopback port (and the FastCGI wrapper nginx hands git to), stopped
/// when dropped.
struct Running {
    port: u16,
    children: Vec<Child>,
    dir: tempfile::TempDir,
}

impl Running {
    /// SIGTERM, not SIGKILL: the servers stop their worker processes on the way out.
    fn stop(&mut self) {
        for mut child in self.children.drain(..) {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }

    /// Waits until the server accepts connections on its port: true, or false when one
    /// of its processes ended first (the port was taken after `free_port` let it go).
    fn listening(&mut self, server: Server) -> bool {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            if self
                .children
                .iter_mut()
                .any(|child| child.try_wait().is_ok_and(|ended| ended.is_some()))
            {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "{server:?} did not listen on {}: {}",
                self.port,
                std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// Lets `nobody` read `path` and what is under it (git creates its files world-readable).
fn open_to_all(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut at = Some(path);
    while let Some(dir) = at {
        if dir == Path::new("/") || dir == Path::new("/tmp") {
            break;
        }
        let mode = std::fs::metadata(dir).unwrap().permissions().mode();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o755)).unwrap();
        at = dir.parent();
    }
}

fn apache_config(dir: &Path, port: u16, project_root: &Path, scheme: Scheme, pki: &Pki) -> String {
    let modules = "/usr/lib/apache2/modules";
    let mut loads: Vec<&str> = vec![
        "mpm_prefork",
        "authn_core",
        "authz_core",
        "authn_file",
        "authz_user",
        "auth_basic",
        "alias",
        "env",
        "cgi",
    ];
    if scheme != Scheme::Http {
        loads.extend(["socache_shmcb", "ssl"]);
    }
    let mut text = format!(
        "ServerRoot \"{root}\"\nServerName localhost\nListen 127.0.0.1:{port}\nPidFile \"{root}/httpd.pid\"\nDefaultRuntimeDir \"{root}\"\nErrorLog \"{root}/error.log\"\nLogLevel warn\nStartServers 2\nMaxRequestWorkers 8\n",
        root = dir.display()
    );
    for module in loads {
        text.push_str(&format!(
            "LoadModule {module}_module {modules}/mod_{module}.so\n"
        ));
    }
    // git's documentation (git-http-backend(1), "Apache 2.x"); the repository belongs to
    // the test's user, not to the one Apache runs git as.
    text.push_str(&format!(
        "SetEnv GIT_PROJECT_ROOT {}\nSetEnv GIT_HTTP_EXPORT_ALL 1\nSetEnv GIT_CONFIG_COUNT 1\nSetEnv GIT_CONFIG_KEY_0 safe.directory\nSetEnv GIT_CONFIG_VALUE_0 *\nScriptAlias /git/ /usr/lib/git-core/git-http-backend/\n<Location \"/git/\">\n  AuthType Basic\n  AuthName \"git\"\n  AuthUserFile \"{}/htpasswd\"\n  Require valid-user\n</Location>\n",
        project_root.display(),
        dir.display()
    ));
    if scheme != Scheme::Http {
        let pki_dir = pki.ca_file().parent().unwrap().to_owned();
        text.push_str(&format!(
            "SSLEngine on\nSSLCertificateFile {0}/tls.crt\nSSLCertificateKeyFile {0}/tls.key\nSSLSessionCache \"shmcb:{1}/ssl_scache(512000)\"\n",
            pki_dir.display(),
            dir.display()
        ));
    }
    if scheme == Scheme::HttpsClientCert {
        text.push_str(&format!(
            "SSLVerifyClient require\nSSLVerifyDepth 2\nSSLCACertificateFile {}\n",
            pki.ca_file().display()
        ));
    }
    text
}

/// A free loopback port: Apache and nginx bind their own socket, so one is picked and
/// let go. It is picked below the kernel's ephemeral range (32768 up), where the port 0
/// listeners and the connections of the tests running beside this one never land, and
/// [`start`] tries another should the server still find it taken.
fn free_port() -> u16 {
    let mut seed = [0u8; 2];
    getrandom::fill(&mut seed).unwrap();
    let first = 20_000 + u16::from_le_bytes(seed) % 12_000;
    (first..32_000)
        .chain(20_000..first)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free loopback port below 32000")
}

/// nginx in front of fcgiwrap in front of git http-backend (git-http-backend(1) and
/// fcgiwrap's own setup), with the same auth and TLS as Apache's.
fn nginx_config(dir: &Path, port: u16, project_root: &Path, scheme: Scheme, pki: &Pki) -> String {
    let d = dir.display();
    let pki_dir = pki.ca_file().parent().unwrap().display().to_string();
    let tls = match scheme {
        Scheme::Http => String::new(),
        Scheme::Https => {
            format!("ssl_certificate {pki_dir}/tls.crt; ssl_certificate_key {pki_dir}/tls.key;")
        }
        Scheme::HttpsClientCert => format!(
            "ssl_certificate {pki_dir}/tls.crt; ssl_certificate_key {pki_dir}/tls.key; ssl_client_certificate {pki_dir}/ca.pem; ssl_verify_client on;"
        ),
    };
    let ssl = if scheme == Scheme::Http { "" } else { " ssl" };
    format!(
        r#"daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_processes 1;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body; fastcgi_temp_path {d}/fastcgi; proxy_temp_path {d}/proxy;
  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port}{ssl};
    {tls}
    location ~ ^/git(/.*) {{
      auth_basic "git";
      auth_basic_user_file {d}/htpasswd;
      client_max_body_size 0;
      fastcgi_pass unix:{d}/fcgiwrap.sock;
      fastcgi_param SCRIPT_FILENAME /usr/lib/git-core/git-http-backend;
      fastcgi_param PATH_INFO $1;
      fastcgi_param QUERY_STRING $query_string;
      fastcgi_param REQUEST_METHOD $request_method;
      fastcgi_param CONTENT_TYPE $content_type;
      fastcgi_param CONTENT_LENGTH $content_length;
      fastcgi_param REMOTE_USER $remote_user;
      fastcgi_param GIT_PROJECT_ROOT {root};
      fastcgi_param GIT_HTTP_EXPORT_ALL "";
      fastcgi_param GIT_CONFIG_COUNT 1;
      fastcgi_param GIT_CONFIG_KEY_0 safe.directory;
      fastcgi_param GIT_CONFIG_VALUE_0 *;
    }}
  }}
}}
"#,
        root = project_root.display()
    )
}

/// `program` run as `nobody` when the tests run as root (the servers will not serve as
/// root, and nginx's workers must reach fcgiwrap's socket), else as is.
fn as_server_user(program: &Path, root: bool) -> Command {
    if !root {
        return Command::new(program);
    }
    let mut command = Command::new("setpriv");
    command
        .args([
            "--reuid",
            &NOBODY.to_string(),
            "--regid",
            &NOBODY.to_string(),
            "--clear-groups",
        ])
        .arg(program);
    command
}

fn start(tools: &Tools, server: Server, project_root: &Path, scheme: Scheme, pki: &Pki) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let hashed = Command::new("openssl")
        .args(["passwd", "-apr1", "s3cret"])
        .output()
        .expect("openssl runs");
    std::fs::write(
        dir.path().join("htpasswd"),
        format!("reader:{}", String::from_utf8_lossy(&hashed.stdout)),
    )
    .unwrap();
    let root = running_as_root();
    if root {
        open_to_all(project_root);
        open_to_all(pki.ca_file().parent().unwrap());
        for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
            std::os::unix::fs::chown(entry.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        }
        std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        open_to_all(dir.path());
    }
    let mut running = Running {
        port: 0,
        children: Vec::new(),
        dir,
    };
    for _ in 0..3 {
        running.port = free_port();
        running.children = launch(tools, server, &running, project_root, scheme, pki, root);
        if running.listening(server) {
            return running;
        }
        running.stop();
    }
    panic!(
        "{server:?} ended three times before listening: {}",
        std::fs::read_to_string(running.dir.path().join("error.log")).unwrap_or_default()
    );
}

/// Starts the server's processes on `running`'s port and files.
fn launch(
    tools: &Tools,
    server: Server,
    running: &Running,
    project_root: &Path,
    scheme: Scheme,
    pki: &Pki,
    root: bool,
) -> Vec<Child> {
    let (dir, port) = (running.dir.path(), running.port);
    let conf = dir.join("server.conf");
    let mut children = Vec::new();
    match server {
        Server::Apache => {
            std::fs::write(&conf, apache_config(dir, port, project_root, scheme, pki)).unwrap();
            let mut command = as_server_user(&tools.apache, root);
            command.args(["-DFOREGROUND", "-f"]).arg(&conf);
            children.push(command.spawn().expect("apache2 starts"));
        }
        Server::Nginx => {
            std::fs::write(&conf, nginx_config(dir, port, project_root, scheme, pki)).unwrap();
            let socket = dir.join("fcgiwrap.sock");
            // An earlier attempt's socket would keep fcgiwrap from binding its own.
            let _ = std::fs::remove_file(&socket);
            let mut wrapper = as_server_user(&tools.fcgiwrap, root);
            wrapper
                .arg("-s")
                .arg(format!("unix:{}", socket.display()))
                .env("LD_LIBRARY_PATH", &tools.fcgi_libs);
            children.push(wrapper.spawn().expect("fcgiwrap starts"));
            let mut nginx = as_server_user(&tools.nginx, root);
            nginx
                .arg("-p")
                .arg(dir)
                .arg("-c")
                .arg(&conf)
                .args(["-e", "stderr"]);
            children.push(nginx.spawn().expect("nginx starts"));
        }
    }
    children
}

fn request(url: &str, reference: &str, path: &str, tls: Option<TlsMaterial>) -> SourceRequest {
    let origin = url.split("/git/").next().unwrap().to_owned() + "/";
    SourceRequest {
        location: Location::Git {
            url: url.to_owned(),
            reference: Some(reference.to_owned()),
            semver: None,
            verify: None,
            path: path.to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: Some(Credentials {
            secret: "reader".to_owned(),
            binding: Binding::read("reader", None, Some(&origin)),
            username: Some("reader".to_owned()),
            password: Some("s3cret".to_owned()),
            ..Credentials::default()
        }),
        tls,
    }
}

fn tls_for(scheme: Scheme, pki: &Pki, origin: &str) -> Option<TlsMaterial> {
    (scheme != Scheme::Http).then(|| TlsMaterial {
        secret: "source-tls".to_owned(),
        binding: Binding::read("source-tls", None, Some(origin)),
        ca_pem: Some(pki.ca_pem.clone()),
        cert_pem: (scheme == Scheme::HttpsClientCert).then(|| pki.client_cert_pem.clone()),
        key_pem: (scheme == Scheme::HttpsClientCert).then(|| pki.client_key_pem.clone()),
    })
}

/// The files a settled fetch of `request` brought, or the error.
async fn fetched(
    fetcher: &Fetcher,
    request: &SourceRequest,
) -> Result<Vec<(String, String)>, String> {
    let state = settled(fetcher, request).await;
    match state.snapshot {
        Some(snapshot) => Ok(snapshot
            .files
            .iter()
            .map(|(name, content)| {
                let text = match content {
                    Content::Text(text) => text.clone(),
                    other => format!("{other:?}"),
                };
                (name.clone(), text)
            })
            .collect()),
        None => Err(format!("{:?}", state.error)),
    }
}

/// Where the servers are: set by the test command (Apache from `apache2-bin`; nginx and
/// fcgiwrap unpacked from their Debian packages into .tools/, so no service starts).
struct Tools {
    apache: PathBuf,
    nginx: PathBuf,
    fcgiwrap: PathBuf,
    fcgi_libs: PathBuf,
}

fn tools() -> Option<Tools> {
    Some(Tools {
        apache: support::oracles::tool("MHTEST_APACHE")?,
        nginx: support::oracles::tool("MHTEST_NGINX")?,
        fcgiwrap: support::oracles::tool("MHTEST_FCGIWRAP")?,
        fcgi_libs: support::oracles::tool("MHTEST_FCGI_LIBS")?,
    })
}

/// Through one server: a commit, a tag, a directory, then the next commit once pushed
/// (and the repository back to where it was, for the next server).
async fn exercise(
    repo: &Repo,
    fetcher: &Fetcher,
    label: &str,
    request: impl Fn(&str, &str) -> SourceRequest,
) {
    let main = request("main", "app.env");
    assert_eq!(
        fetched(fetcher, &main).await,
        Ok(vec![("app.env".to_owned(), "V=1\n".to_owned())]),
        "{label}: a commit"
    );
    assert!(
        fetched(fetcher, &request("v1", "app.env")).await.is_ok(),
        "{label}: a tag"
    );
    assert_eq!(
        fetched(fetcher, &request("main", "conf")).await,
        Ok(vec![
            ("a.yaml".to_owned(), "a: 1\n".to_owned()),
            ("b.yaml".to_owned(), "b: 2\n".to_owned())
        ]),
        "{label}: a directory"
    );
    repo.commit(&[("app.env", "V=2\n")]);
    fetcher.expire().await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let files = fetched(fetcher, &main).await;
        if files == Ok(vec![("app.env".to_owned(), "V=2\n".to_owned())]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{label}: the next commit never came: {files:?}"
        );
    }
    repo.commit(&[("app.env", "V=1\n")]);
}

/// The repository every server here (and each quirky origin) serves: a file, a
/// directory and a tag.
pub(crate) fn served_repository() -> Repo {
    let repo = Repo::new();
    repo.commit(&[
        ("app.env", "V=1\n"),
        ("conf/a.yaml", "a: 1\n"),
        ("conf/b.yaml", "b: 2\n"),
    ]);
    repo.tag("v1");
    repo
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_daemon_and_sshd_serve_commits_tags_and_directories() {
    let repo = served_repository();
    let daemon = support::servers::GitDaemon::start(&repo);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(support::loopback_policy(&["git"]), cache.path());
    exercise(&repo, &fetcher, "git daemon", |reference, path| {
        SourceRequest {
            location: Location::Git {
                url: daemon.url(),
                reference: Some(reference.to_owned()),
                semver: None,
                verify: None,
                path: path.to_owned(),
            },
            namespace: "team-a".to_owned(),
            credentials: None,
            tls: None,
        }
    })
    .await;
    let Some(program) = support::servers::sshd_program() else {
        return;
    };
    let sshd = support::servers::SshServer::start(&program, "ed25519", "");
    let url = sshd.url(&repo);
    let credentials = crate::source_ssh::credentials(&sshd, Some(sshd.known_hosts.clone()), None);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(support::loopback_policy(&["ssh"]), cache.path());
    exercise(&repo, &fetcher, "sshd", |reference, path| SourceRequest {
        location: Location::Git {
            url: url.clone(),
            reference: Some(reference.to_owned()),
            semver: None,
            verify: None,
            path: path.to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: Some(credentials.clone()),
        tls: None,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_git_http_servers_serve_commits_tags_and_directories_over_http_and_https() {
    let Some(tools) = tools() else {
        return;
    };
    let repo = served_repository();
    let pki = Pki::new(true);
    let mut table = Vec::new();
    let matrix = [Server::Apache, Server::Nginx]
        .into_iter()
        .flat_map(|server| {
            [Scheme::Http, Scheme::Https, Scheme::HttpsClientCert].map(|s| (server, s))
        });
    for (server, scheme) in matrix {
        let running = start(&tools, server, repo.root.path(), scheme, &pki);
        let base = match scheme {
            Scheme::Http => format!("http://127.0.0.1:{}", running.port),
            _ => format!("https://localhost:{}", running.port),
        };
        let url = format!("{base}/git/config.git");
        let tls = tls_for(scheme, &pki, &format!("{base}/"));
        let cache = tempfile::tempdir().unwrap();
        let fetcher = support::fetcher(support::loopback_policy(&["http"]), cache.path());
        let label = format!("{server:?} {scheme:?}");
        exercise(&repo, &fetcher, &label, |reference, path| {
            request(&url, reference, path, tls.clone())
        })
        .await;
        // The client certificate is what lets the fetch in: without it, refused.
        if scheme == Scheme::HttpsClientCert {
            let without = request(
                &url,
                "main",
                "app.env",
                tls_for(Scheme::Https, &pki, &format!("{base}/")),
            );
            let cache = tempfile::tempdir().unwrap();
            let fresh = support::fetcher(support::loopback_policy(&["http"]), cache.path());
            assert!(
                fetched(&fresh, &without).await.is_err(),
                "no client certificate, no fetch"
            );
        }
        table.push(format!(
            "{server:?} {scheme:?}: commit, next commit, tag, directory fetched"
        ));
        drop(running);
    }
    eprintln!("{}", table.join("\n"));
}
