//! git over http(s) from origins that do not behave like ours: one that keeps every
//! connection alive whatever it is asked (no `Connection: close` back), one that answers
//! HTTP/1.0 without a length (the body ends when it closes), one that answers chunked,
//! one that has moved its repository (a 301 within the origin), and two that compress
//! every answer unasked (gzip, chunked; deflate, with a length). Each stands in front
//! of `git http-backend` (behind basic auth, so every fetch also meets a 401 challenge)
//! and rewrites its answers, over http and over https with a private CA (one over mutual
//! TLS too); a commit, the next commit, a tag and a directory are fetched through each.

use crate::support;

use std::time::Duration;

use metahooks::source::binding::Binding;
use metahooks::source::fetcher::Fetcher;
use metahooks::source::tls::TlsMaterial;
use metahooks::source::{Content, Credentials, Location, SourceRequest, SourceView};
use support::servers::{Pki, serve_git_http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::source_hardening::settled;

#[derive(Clone, Copy, Debug)]
enum Quirk {
    KeepAlive,
    Http10,
    Chunked,
    /// Moved: `/config.git/…` answers 301 to `/moved/config.git/…`, served from there.
    Redirect,
    /// `Content-Encoding: gzip` on every body (libgit2 sends no `Accept-Encoding`), chunked.
    Gzip,
    /// `Content-Encoding: deflate` (a zlib stream) on every body, with a length.
    Deflate,
}

fn compressed(body: &[u8], quirk: Quirk) -> Vec<u8> {
    use flate2::Compression;
    use std::io::Write;
    let mut out = Vec::new();
    match quirk {
        Quirk::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(&mut out, Compression::best());
            encoder.write_all(body).unwrap();
            encoder.finish().unwrap();
        }
        Quirk::Deflate => {
            let mut encoder = flate2::write::ZlibEncoder::new(&mut out, Compression::fast());
            encoder.write_all(body).unwrap();
            encoder.finish().unwrap();
        }
        _ => out.extend_from_slice(body),
    }
    out
}

/// Reads one request (head, and a body of `Content-Length`); None at end of stream.
async fn read_request(connection: &mut (impl tokio::io::AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let read = connection.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        let read = connection.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    Some(buffer)
}

/// The request with its connection headers replaced by `Connection: close`.
fn closing(request: &[u8]) -> Vec<u8> {
    let end = request.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 2;
    let head = String::from_utf8_lossy(&request[..end]);
    let mut out: String = head
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .map(|l| format!("{l}\r\n"))
        .collect();
    out.push_str("Connection: close\r\n\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&request[end + 2..]);
    bytes
}

/// The upstream answer rewritten the way `quirk` answers.
fn rewritten(answer: &[u8], quirk: Quirk) -> Vec<u8> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&answer[..end]).into_owned();
    let body = &compressed(&answer[end + 4..], quirk);
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split_once(' ').unwrap().1.to_owned();
    let headers: Vec<&str> = lines
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            !l.starts_with("connection:") && !l.starts_with("content-length:")
        })
        .collect();
    let mut out = match quirk {
        Quirk::Http10 => format!("HTTP/1.0 {status}\r\n"),
        Quirk::Gzip => format!("HTTP/1.1 {status}\r\nContent-Encoding: gzip\r\n"),
        Quirk::Deflate => format!("HTTP/1.1 {status}\r\nContent-Encoding: deflate\r\n"),
        Quirk::KeepAlive | Quirk::Chunked | Quirk::Redirect => {
            format!("HTTP/1.1 {status}\r\n")
        }
    };
    for header in headers {
        out.push_str(header);
        out.push_str("\r\n");
    }
    let mut bytes = match quirk {
        Quirk::KeepAlive | Quirk::Redirect | Quirk::Deflate => {
            format!("{out}Content-Length: {}\r\n\r\n", body.len()).into_bytes()
        }
        Quirk::Http10 => format!("{out}\r\n").into_bytes(),
        Quirk::Chunked | Quirk::Gzip => {
            format!("{out}Transfer-Encoding: chunked\r\n\r\n").into_bytes()
        }
    };
    match quirk {
        Quirk::Chunked | Quirk::Gzip => {
            for piece in body.chunks(1000) {
                bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                bytes.extend_from_slice(piece);
                bytes.extend_from_slice(b"\r\n");
            }
            bytes.extend_from_slice(b"0\r\n\r\n");
        }
        Quirk::KeepAlive | Quirk::Http10 | Quirk::Redirect | Quirk::Deflate => {
            bytes.extend_from_slice(body)
        }
    }
    bytes
}

/// For the redirecting origin: a request under the old path is answered 301 to the new
/// one (Err), one under the new path is passed on with the old path (Ok).
fn moved(request: &[u8], quirk: Quirk, base: &str) -> Result<Vec<u8>, Vec<u8>> {
    if !matches!(quirk, Quirk::Redirect) {
        return Ok(request.to_vec());
    }
    let line_end = request.windows(2).position(|w| w == b"\r\n").unwrap();
    let line = String::from_utf8_lossy(&request[..line_end]).into_owned();
    let mut parts = line.splitn(3, ' ');
    let (method, target, version) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    match target.strip_prefix("/moved") {
        Some(old) => {
            let mut out = format!("{method} {old} {version}").into_bytes();
            out.extend_from_slice(&request[line_end..]);
            Ok(out)
        }
        None => Err(format!(
            "HTTP/1.1 301 Moved Permanently\r\nLocation: {base}/moved{target}\r\nContent-Length: 0\r\n\r\n"
        )
        .into_bytes()),
    }
}

/// An origin in front of `upstream` that answers as `quirk` does, over https with the
/// PKI's server certificate when `tls` is given (asking for a client certificate when
/// the PKI says so); keeps connections open after an answer unless it speaks HTTP/1.0.
/// Returns its base URL.
async fn quirky_origin(upstream: u16, quirk: Quirk, tls: Option<&Pki>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor =
        tls.map(|pki| tokio_rustls::TlsAcceptor::from(pki.server_files().server_config().unwrap()));
    let base = match tls {
        Some(_) => format!("https://localhost:{port}"),
        None => format!("http://127.0.0.1:{port}"),
    };
    let served = base.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, base) = (acceptor.clone(), served.clone());
            tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            answer_quirkily(stream, upstream, quirk, &base).await;
                        }
                    }
                    None => answer_quirkily(tcp, upstream, quirk, &base).await,
                }
            });
        }
    });
    base
}

/// One client connection to a quirky origin: each request passed to `upstream` with
/// `Connection: close`, each answer rewritten as `quirk` answers.
async fn answer_quirkily(
    mut connection: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    upstream: u16,
    quirk: Quirk,
    base: &str,
) {
    while let Some(request) = read_request(&mut connection).await {
        let request = match moved(&request, quirk, base) {
            Ok(request) => request,
            Err(redirect) => {
                if connection.write_all(&redirect).await.is_err() {
                    return;
                }
                continue;
            }
        };
        let mut origin = tokio::net::TcpStream::connect(("127.0.0.1", upstream))
            .await
            .unwrap();
        origin.write_all(&closing(&request)).await.unwrap();
        let mut answer = Vec::new();
        origin.read_to_end(&mut answer).await.unwrap();
        if connection
            .write_all(&rewritten(&answer, quirk))
            .await
            .is_err()
        {
            return;
        }
        if matches!(quirk, Quirk::Http10) {
            let _ = connection.shutdown().await;
            return;
        }
    }
}

/// A request for `url` whose credentials' Secret allows its whole origin: the
/// redirecting origin moves the repository within it (and credentials follow a redirect
/// only to a URL their Secret allows).
fn request(url: &str, reference: &str, tls: Option<TlsMaterial>) -> SourceRequest {
    let origin = url::Url::parse(url).unwrap().join("/").unwrap();
    SourceRequest {
        location: Location::Git {
            url: url.to_owned(),
            reference: Some(reference.to_owned()),
            semver: None,
            verify: None,
            path: "app.env".to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: Some(Credentials {
            secret: "reader".to_owned(),
            binding: Binding::read("reader", None, Some(origin.as_str())),
            username: Some("reader".to_owned()),
            password: Some("s3cret".to_owned()),
            ..Credentials::default()
        }),
        tls,
    }
}

fn text(fetcher: &Fetcher, request: &SourceRequest) -> Option<String> {
    let state = fetcher.state(request, Duration::from_secs(60), None);
    state
        .snapshot
        .as_ref()
        .and_then(|s| match s.files.get("app.env") {
            Some(Content::Text(text)) => Some(text.clone()),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_that_keep_alive_speak_http_1_0_chunk_compress_or_redirect_are_fetched_from() {
    let repo = crate::source_servers::served_repository();
    let upstream = serve_git_http(repo.root.path().to_owned(), "reader", "s3cret").await;
    let (server_tls, mutual_tls) = (Pki::new(false), Pki::new(true));
    let quirks = [
        Quirk::KeepAlive,
        Quirk::Http10,
        Quirk::Chunked,
        Quirk::Redirect,
        Quirk::Gzip,
        Quirk::Deflate,
    ];
    // Every quirk over http and over https with a private CA; one over mutual TLS too.
    let cases = quirks
        .iter()
        .flat_map(|quirk| [(*quirk, None), (*quirk, Some(&server_tls))])
        .chain([(Quirk::KeepAlive, Some(&mutual_tls))]);
    for (quirk, pki) in cases {
        let base = quirky_origin(upstream, quirk, pki).await;
        let url = format!("{base}/config.git");
        let tls = pki.map(|pki| TlsMaterial {
            secret: "source-tls".to_owned(),
            binding: Binding::read("source-tls", None, Some(&format!("{base}/"))),
            ca_pem: Some(pki.ca_pem.clone()),
            cert_pem: pki.require_client_cert.then(|| pki.client_cert_pem.clone()),
            key_pem: pki.require_client_cert.then(|| pki.client_key_pem.clone()),
        });
        let quirk = (quirk, base.split(':').next().unwrap_or_default().to_owned());
        let cache = tempfile::tempdir().unwrap();
        let fetcher = support::fetcher(support::loopback_policy(&["http"]), cache.path());
        let request = |url: &str, reference: &str| request(url, reference, tls.clone());
        let main = request(&url, "main");
        let first = settled(&fetcher, &main).await;
        assert!(first.snapshot.is_some(), "{quirk:?}: {:?}", first.error);
        assert_eq!(text(&fetcher, &main).as_deref(), Some("V=1\n"), "{quirk:?}");
        let tag = request(&url, "v1");
        let tagged = settled(&fetcher, &tag).await;
        assert!(
            tagged.snapshot.is_some(),
            "{quirk:?} tag: {:?}",
            tagged.error
        );
        let mut directory = request(&url, "main");
        if let Location::Git { path, .. } = &mut directory.location {
            "conf".clone_into(path);
        }
        let listed = settled(&fetcher, &directory).await;
        let names: Vec<String> = listed
            .snapshot
            .as_ref()
            .map(|s| s.files.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(
            names,
            ["a.yaml", "b.yaml"],
            "{quirk:?} directory: {:?}",
            listed.error
        );
        repo.commit(&[("app.env", "V=2\n")]);
        fetcher.expire().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while text(&fetcher, &main).as_deref() != Some("V=2\n") {
            assert!(
                std::time::Instant::now() < deadline,
                "{quirk:?}: the next commit never came"
            );
            let _ = settled(&fetcher, &main).await;
        }
        // Back to V=1 for the next origin.
        repo.commit(&[("app.env", "V=1\n")]);
    }
}

/// A web server that publishes a bare repository as plain files (git's old "dumb" HTTP
/// protocol, after `git update-server-info`): answers each GET with the file, or 404.
async fn plain_file_server(root: std::path::PathBuf) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut connection, _)) = listener.accept().await {
            let root = root.clone();
            tokio::spawn(async move {
                let Some(request) = read_request(&mut connection).await else {
                    return;
                };
                let line = String::from_utf8_lossy(&request);
                let target = line.split(' ').nth(1).unwrap_or("/");
                let path = target.split('?').next().unwrap_or("/");
                let file = root.join(path.trim_start_matches('/'));
                let answer = match std::fs::read(&file) {
                    Ok(body) => {
                        let mut answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                        .into_bytes();
                        answer.extend_from_slice(&body);
                        answer
                    }
                    Err(_) => {
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .to_vec()
                    }
                };
                let _ = connection.write_all(&answer).await;
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// libgit2 speaks only git's smart HTTP protocol. A repository published as plain files
/// (which `git clone` can still read) is refused with what that means, not only with
/// the content type libgit2 names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_published_as_plain_files_is_refused_naming_the_protocol() {
    let repo = crate::source_servers::served_repository();
    let updated = std::process::Command::new("git")
        .arg("-C")
        .arg(repo.bare())
        .arg("update-server-info")
        .status()
        .unwrap();
    assert!(updated.success());
    let base = plain_file_server(repo.root.path().to_owned()).await;
    let url = format!("{base}/config.git");
    let cloned = tempfile::tempdir().unwrap();
    let clone = std::process::Command::new("git")
        .args(["clone", "-q", &url])
        .arg(cloned.path().join("copy"))
        .output()
        .unwrap();
    assert!(
        clone.status.success(),
        "git itself reads the dumb protocol: {}",
        String::from_utf8_lossy(&clone.stderr)
    );
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(support::loopback_policy(&["http"]), cache.path());
    let mut plain = request(&url, "main", None);
    plain.credentials = None;
    let state = settled(&fetcher, &plain).await;
    assert!(state.snapshot.is_none());
    let error = state.error.expect("the fetch fails");
    assert_eq!(error.reason(), "Unreachable");
    let message = error.to_string();
    assert!(
        message.contains("does not speak git's smart HTTP protocol"),
        "{message}"
    );
}
