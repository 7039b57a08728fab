//! One connection from libgit2: read its request head, decide, then either stand in for
//! the origin (forward the request, point redirects back at the guard) or relay the bytes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};

use super::decoding;
use super::origin::Framing;
use super::{MAX_BODY_BYTES, MAX_HEAD_BYTES, Mode, Origin, Shared, Upstream, bare_host};
use crate::source::FetchError;

/// One connection from libgit2: read the request head, decide, connect, relay.
pub(super) fn serve(mut client: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(shared.remaining()))?;
    if shared.mode == Mode::Raw {
        let upstream = match shared.connect(&shared.origin) {
            Ok(upstream) => upstream,
            Err(refusal) => {
                shared.record(refusal);
                return Ok(());
            }
        };
        return relay(client, upstream, shared);
    }
    let (head, rest) = read_head(&mut client)?;
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let (Ok(httparse::Status::Complete(_)), Some(method), Some(target)) =
        (request.parse(&head), request.method, request.path)
    else {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    };
    let headers = owned(request.headers);
    let (method, target) = (method.to_owned(), target.to_owned());
    stand_in(client, shared, &method, &target, &headers, rest)
}

/// Headers as read: name, and value bytes (which need not be text).
pub(super) type Headers = Vec<(String, Vec<u8>)>;

/// Headers a request or response head may carry at most (more is refused as malformed).
pub(super) const MAX_HEADERS: usize = 64;

pub(super) fn owned(headers: &[httparse::Header<'_>]) -> Headers {
    headers
        .iter()
        .map(|header| (header.name.to_owned(), header.value.to_vec()))
        .collect()
}

/// The value of the first header called `wanted` (any case), trimmed and lower-cased.
pub(super) fn header_value(headers: &Headers, wanted: &str) -> Option<String> {
    headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
        .map(|(_, value)| String::from_utf8_lossy(value).trim().to_ascii_lowercase())
}

/// http and https: the whole request is read from libgit2, then sent to the origin's
/// checked address (over TLS for https), one request per connection; the answer's head
/// is read so that no redirect leads libgit2 away from the guard.
pub(super) fn stand_in(
    mut client: TcpStream,
    shared: &Shared,
    method: &str,
    target: &str,
    headers: &Headers,
    rest: Vec<u8>,
) -> io::Result<()> {
    if !target.starts_with('/') {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n");
    }
    let body = read_body(&mut client, headers, rest)?;
    let mut upstream = match shared.open(&shared.origin) {
        Ok(upstream) => upstream,
        Err(refusal) => return shared.refuse(&mut client, refusal),
    };
    let (request_target, proxy_authorization) = shared.request_target(target);
    let mut forwarded =
        format!("{method} {request_target} HTTP/1.1\r\n{proxy_authorization}").into_bytes();
    for (name, value) in headers {
        if !matches!(
            name.to_ascii_lowercase().as_str(),
            "host" | "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            forwarded.extend_from_slice(name.as_bytes());
            forwarded.extend_from_slice(b": ");
            forwarded.extend_from_slice(value);
            forwarded.extend_from_slice(b"\r\n");
        }
    }
    forwarded.extend_from_slice(
        format!(
            "Host: {}\r\nConnection: close\r\n\r\n",
            shared.origin.host_header()
        )
        .as_bytes(),
    );
    let sent = upstream
        .write_all(&forwarded)
        .and_then(|()| upstream.write_all(&body))
        .and_then(|()| upstream.flush());
    if let Err(error) = sent {
        return shared.refuse(&mut client, shared.transport_error(&error));
    }
    let outcome = answer_back(&mut client, &mut upstream, shared);
    let _ = client.shutdown(Shutdown::Both);
    upstream.close();
    outcome
}

/// The request body libgit2 sends after the head: `Content-Length` bytes, or chunks up
/// to the last one (kept as they are: the head still says chunked). Bounded.
pub(super) fn read_body(
    client: &mut TcpStream,
    headers: &Headers,
    mut body: Vec<u8>,
) -> io::Result<Vec<u8>> {
    let header = |wanted: &str| header_value(headers, wanted);
    let too_long = || io::Error::other("request body too long");
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        let mut chunk = [0u8; 16 * 1024];
        while !chunked_complete(&body) {
            if body.len() > MAX_BODY_BYTES {
                return Err(too_long());
            }
            let read = client.read(&mut chunk)?;
            if read == 0 {
                return Err(io::Error::other("connection closed inside a chunked body"));
            }
            body.extend_from_slice(&chunk[..read]);
        }
        return Ok(body);
    }
    let length: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if length > MAX_BODY_BYTES {
        return Err(too_long());
    }
    if body.len() < length {
        let mut remaining = vec![0u8; length - body.len()];
        client.read_exact(&mut remaining)?;
        body.extend_from_slice(&remaining);
    }
    body.truncate(length);
    Ok(body)
}

/// Whether `body` holds a whole chunked body: sizes walked to the zero-size chunk and
/// the blank line after its (empty) trailer.
pub(super) fn chunked_complete(body: &[u8]) -> bool {
    let mut at = 0;
    loop {
        let Some(line_end) = body[at..].windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size_text = String::from_utf8_lossy(&body[at..at + line_end]).into_owned();
        let size_text = size_text.split(';').next().unwrap_or("").trim().to_owned();
        let Ok(size) = usize::from_str_radix(&size_text, 16) else {
            return false;
        };
        at += line_end + 2;
        if size == 0 {
            // Trailer lines, then an empty line.
            return body[at..].windows(2).any(|w| w == b"\r\n")
                && (body[at..].starts_with(b"\r\n")
                    || body[at..].windows(4).any(|w| w == b"\r\n\r\n"));
        }
        at = match at.checked_add(size + 2) {
            Some(next) if next <= body.len() => next,
            _ => return false,
        };
    }
}

/// Passes the origin's answer back, pointing redirects within the origin at the guard
/// and refusing redirects that leave it.
pub(super) fn answer_back(
    client: &mut TcpStream,
    upstream: &mut Upstream,
    shared: &Shared,
) -> io::Result<()> {
    let (head, rest) = match read_head(upstream) {
        Ok(read) => read,
        Err(error) => return shared.refuse(client, shared.transport_error(&error)),
    };
    if let Some(refusal) = shared.count(head.len() + rest.len()) {
        return shared.refuse(client, refusal);
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let (Ok(httparse::Status::Complete(_)), Some(status)) = (response.parse(&head), response.code)
    else {
        return shared.refuse(
            client,
            FetchError::Other(format!(
                "{} answered with a malformed HTTP head",
                shared.origin
            )),
        );
    };
    let reason = response.reason.unwrap_or_default().to_owned();
    let headers = owned(response.headers);
    let coding = match has_body(status).then(|| decoding::coding_of(&headers, shared)) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(coding))) => Some(coding),
        Some(Err(refusal)) => return shared.refuse(client, refusal),
    };
    let framing = match coding {
        Some(_) => Framing::Chunked,
        None => framing_of(status, &headers),
    };
    let out = match head_for_libgit2(status, &reason, &headers, framing, coding.is_some(), shared) {
        Ok(out) => out,
        Err(refusal) => return shared.refuse(client, refusal),
    };
    client.write_all(&out)?;
    if let Some(coding) = coding {
        return decoding::copy_decoded(shared, upstream, client, &headers, rest, coding);
    }
    framing.first(client, &rest)?;
    shared.copy_down(upstream, client, framing)
}

/// The answer's head as libgit2 gets it: `Connection: close` (the guard serves one
/// exchange per connection and closes it after, whatever the origin or a proxy said, or
/// libgit2 would send its next request on a connection about to close), no hop-by-hop
/// headers, a redirect within the origin pointed back at the guard (one that leaves it
/// refused), and chunked framing when the body ends only at the origin's close or is
/// passed on decompressed (then without the origin's coding and length).
fn head_for_libgit2(
    status: u16,
    reason: &str,
    headers: &Headers,
    framing: Framing,
    decompressed: bool,
    shared: &Shared,
) -> Result<Vec<u8>, FetchError> {
    let scheme = if shared.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let mut out = format!("HTTP/1.1 {status} {reason}\r\nConnection: close\r\n").into_bytes();
    for (name, value) in headers {
        if ["connection", "keep-alive", "proxy-connection"]
            .iter()
            .any(|hop| name.eq_ignore_ascii_case(hop))
        {
            continue;
        }
        if decompressed
            && ["content-encoding", "content-length", "transfer-encoding"]
                .iter()
                .any(|framing| name.eq_ignore_ascii_case(framing))
        {
            continue;
        }
        if (300..400).contains(&status) && name.eq_ignore_ascii_case("location") {
            out.extend_from_slice(redirect_within_origin(value, scheme, shared)?.as_bytes());
        } else {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
    }
    if framing == Framing::Chunked {
        out.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(out)
}

/// How an answer's body goes down to libgit2: re-framed as chunks when it has a body
/// that ends only when the origin closes.
fn framing_of(status: u16, headers: &Headers) -> Framing {
    let framed = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if has_body(status) && !framed("content-length") && !framed("transfer-encoding") {
        Framing::Chunked
    } else {
        Framing::AsIs
    }
}

/// Whether an answer with this status has a body (RFC 9112 §6.3).
fn has_body(status: u16) -> bool {
    !(status < 200 || status == 204 || status == 304)
}

/// Reads up to the blank line that ends a head; returns the head (blank line included,
/// as httparse wants it) and any bytes read past it.
pub(super) fn read_head(client: &mut impl Read) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buffer.split_off(end + 4);
            return Ok((buffer, rest));
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(io::Error::other("request head too long"));
        }
        let read = client.read(&mut chunk)?;
        if read == 0 {
            return Err(io::Error::other(
                "connection closed before the request head",
            ));
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

/// Copies both ways until either side closes, the remote passes a cap or the fetch's
/// time is up; then both connections are closed.
pub(super) fn relay(client: TcpStream, upstream: TcpStream, shared: &Shared) -> io::Result<()> {
    client.set_read_timeout(Some(shared.remaining()))?;
    let (mut client_in, mut upstream_out) = (client.try_clone()?, upstream.try_clone()?);
    let upward = std::thread::Builder::new()
        .name("connect-guard-relay".to_owned())
        .spawn(move || {
            let _ = io::copy(&mut client_in, &mut upstream_out);
            let _ = upstream_out.shutdown(Shutdown::Write);
        })?;
    let (mut upstream_in, mut client_out) = (Upstream::Plain(upstream), client);
    let _ = shared.copy_down(&mut upstream_in, &mut client_out, Framing::AsIs);
    let _ = client_out.shutdown(Shutdown::Both);
    upstream_in.close();
    let _ = upward.join();
    Ok(())
}

/// The `Location` line libgit2 is given for a redirect: pointed back at the guard when
/// it stays within the origin (same scheme, host and port); refused otherwise, so a
/// redirect cannot carry a user's token to another origin.
fn redirect_within_origin(
    value: &[u8],
    scheme: &str,
    shared: &Shared,
) -> Result<String, FetchError> {
    let value = String::from_utf8_lossy(value);
    let base = format!("{scheme}://{}/", shared.origin.host_header());
    let target = url::Url::parse(&base)
        .and_then(|b| b.join(value.trim()))
        .map_err(|_| {
            FetchError::Other(format!(
                "{} answered a redirect that is not a URL",
                shared.origin
            ))
        })?;
    let destination = Origin {
        host: bare_host(target.host_str().unwrap_or_default()).to_owned(),
        port: target.port_or_known_default().unwrap_or(80),
    };
    if target.scheme() != scheme || destination != shared.origin {
        return Err(FetchError::RedirectRefused {
            from: format!("{scheme}://{}", shared.origin),
            to: format!("{}://{destination}", target.scheme()),
        });
    }
    let mut path = target.path().to_owned();
    if let Some(query) = target.query() {
        path.push('?');
        path.push_str(query);
    }
    Ok(format!("Location: http://{}{path}\r\n", shared.address))
}
