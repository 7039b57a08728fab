//! git over http and https from a real server the test command installs from Debian:
//! Apache httpd (`apache2-bin`) in front of `git http-backend`, set up as git's own
//! documentation gives it (`ScriptAlias /git/ …/git-http-backend/`, `GIT_PROJECT_ROOT`,
//! `GIT_HTTP_EXPORT_ALL`) behind basic auth, over http, over https with a private CA, and
//! over https asking for a client certificate. Through each, the source engine fetches a
//! commit, the next commit, a tag and a directory.

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

/// One Apache on a loopback port, stopped when dropped.
struct Apache {
    port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for Apache {
    /// SIGTERM, not SIGKILL: Apache stops its worker processes on the way out.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
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

fn config(dir: &Path, port: u16, project_root: &Path, scheme: Scheme, pki: &Pki) -> String {
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

/// A free loopback port: Apache binds its own socket, so one is picked and let go.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(program: &Path, project_root: &Path, scheme: Scheme, pki: &Pki) -> Apache {
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
    let port = free_port();
    let conf = dir.path().join("httpd.conf");
    std::fs::write(&conf, config(dir.path(), port, project_root, scheme, pki)).unwrap();
    let mut command = if root {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &NOBODY.to_string(),
            "--regid",
            &NOBODY.to_string(),
            "--clear-groups",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    };
    command.args(["-DFOREGROUND", "-f"]).arg(&conf);
    let child = command.spawn().expect("apache2 starts");
    let apache = Apache { port, child, dir };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "apache2 did not listen on {port}: {}",
            std::fs::read_to_string(apache.dir.path().join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    apache
}

fn request(url: &str, reference: &str, path: &str, tls: Option<TlsMaterial>) -> SourceRequest {
    let origin = url.split("/git/").next().unwrap().to_owned() + "/";
    SourceRequest {
        location: Location::Git {
            url: url.to_owned(),
            reference: Some(reference.to_owned()),
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

fn apache_program() -> Option<PathBuf> {
    support::oracles::tool("METAHOOKS_APACHE")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apache_with_git_http_backend_serves_commits_tags_and_directories() {
    let Some(program) = apache_program() else {
        return;
    };
    let repo = Repo::new();
    repo.commit(&[
        ("app.env", "V=1\n"),
        ("conf/a.yaml", "a: 1\n"),
        ("conf/b.yaml", "b: 2\n"),
    ]);
    repo.tag("v1");
    let pki = Pki::new(true);
    let mut table = Vec::new();
    for scheme in [Scheme::Http, Scheme::Https, Scheme::HttpsClientCert] {
        let apache = start(&program, repo.root.path(), scheme, &pki);
        let base = match scheme {
            Scheme::Http => format!("http://127.0.0.1:{}", apache.port),
            _ => format!("https://localhost:{}", apache.port),
        };
        let url = format!("{base}/git/config.git");
        let tls = tls_for(scheme, &pki, &format!("{base}/"));
        let cache = tempfile::tempdir().unwrap();
        let fetcher = support::fetcher(support::loopback_policy(&["http"]), cache.path());
        let main = request(&url, "main", "app.env", tls.clone());
        assert_eq!(
            fetched(&fetcher, &main).await,
            Ok(vec![("app.env".to_owned(), "V=1\n".to_owned())]),
            "{scheme:?}: a commit"
        );
        let tag = request(&url, "v1", "app.env", tls.clone());
        assert!(fetched(&fetcher, &tag).await.is_ok(), "{scheme:?}: a tag");
        let directory = request(&url, "main", "conf", tls.clone());
        assert_eq!(
            fetched(&fetcher, &directory).await,
            Ok(vec![
                ("a.yaml".to_owned(), "a: 1\n".to_owned()),
                ("b.yaml".to_owned(), "b: 2\n".to_owned())
            ]),
            "{scheme:?}: a directory"
        );
        repo.commit(&[("app.env", "V=2\n")]);
        fetcher.expire();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let files = fetched(&fetcher, &main).await;
            if files == Ok(vec![("app.env".to_owned(), "V=2\n".to_owned())]) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{scheme:?}: the next commit never came: {files:?}"
            );
        }
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
        repo.commit(&[("app.env", "V=1\n")]);
        table.push(format!(
            "apache2 {scheme:?}: commit, next commit, tag, directory fetched"
        ));
        drop(apache);
    }
    eprintln!("{}", table.join("\n"));
}
