//! Answers an origin compresses although libgit2 never asked (`Content-Encoding: gzip`
//! or `deflate`): libgit2 cannot read them, so the guard takes the body out of the
//! origin's framing (a length, chunks, or the end of the connection), decompresses it,
//! and passes it on chunked. The compressed bytes count against the phase's cap as every
//! byte from the remote does, and the decompressed bytes count against it again on
//! their own, so a small answer cannot grow into a large one (a decompression bomb).

use std::io::{self, Read};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::time::Instant;

use flate2::read::{MultiGzDecoder, ZlibDecoder};

use super::exchange::{Headers, header_value};
use super::origin::Framing;
use super::{Phase, Shared, Upstream};
use crate::source::FetchError;

/// A content coding the guard undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Coding {
    Gzip,
    /// HTTP's `deflate`: a zlib stream (RFC 9110 §8.4.1.2).
    Deflate,
}

/// The coding of an answer's body: None when it is sent as it is; an error for a coding
/// the guard cannot undo (libgit2 could not read it either).
pub(super) fn coding_of(headers: &Headers, shared: &Shared) -> Result<Option<Coding>, FetchError> {
    let Some(value) = header_value(headers, "content-encoding") else {
        return Ok(None);
    };
    match value.as_str() {
        "" | "identity" => Ok(None),
        "gzip" | "x-gzip" => Ok(Some(Coding::Gzip)),
        "deflate" => Ok(Some(Coding::Deflate)),
        other => Err(FetchError::Other(format!(
            "{} answered with Content-Encoding {:?}, which cannot be decoded (gzip and deflate can)",
            shared.origin,
            other.chars().take(100).collect::<String>()
        ))),
    }
}

/// How the origin frames the body it sends.
enum BodyFraming {
    /// `Content-Length`: this many bytes are still to come.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked(ChunkState),
    /// Neither: the body ends when the origin closes.
    UntilClose,
}

#[derive(Clone, Copy)]
enum ChunkState {
    /// Reading the size line of the next chunk.
    Size,
    /// Inside a chunk, with this many bytes of it left.
    Data(u64),
    /// After a chunk's data: its closing line break.
    DataEnd,
    /// The last (zero-size) chunk was read; trailers are not needed.
    Done,
}

/// The origin's body with its framing taken off: what a `Read` of it returns is the
/// (still compressed) content. Every byte read from the origin is counted, and every
/// read waits at most until the fetch's deadline.
struct OriginBody<'a> {
    upstream: &'a mut Upstream,
    shared: &'a Shared,
    /// Bytes read from the origin and not yet handed on.
    pending: Vec<u8>,
    framing: BodyFraming,
}

impl OriginBody<'_> {
    /// Reads more from the origin into `pending`; false at the origin's end of stream.
    fn fill(&mut self) -> io::Result<bool> {
        let mut buffer = [0u8; 16 * 1024];
        loop {
            let left = self
                .shared
                .deadline
                .saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.refused(FetchError::Timeout {
                    url: self.shared.shown.clone(),
                    seconds: self.shared.policy.limits.timeout_seconds,
                }));
            }
            self.upstream.set_read_timeout(Some(left))?;
            match self.upstream.read(&mut buffer) {
                Ok(0) => return Ok(false),
                Ok(read) => {
                    if let Some(refusal) = self.shared.count(read) {
                        return Err(self.refused(refusal));
                    }
                    self.pending.extend_from_slice(&buffer[..read]);
                    return Ok(true);
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn refused(&self, refusal: FetchError) -> io::Error {
        self.shared.record(refusal);
        io::Error::other("the guard cut the answer")
    }

    /// Hands on up to `out.len()` of the `available` bytes at the front of `pending`.
    fn take(&mut self, out: &mut [u8], available: u64) -> usize {
        let n = out
            .len()
            .min(self.pending.len())
            .min(usize::try_from(available).unwrap_or(usize::MAX));
        out[..n].copy_from_slice(&self.pending[..n]);
        self.pending.drain(..n);
        n
    }

    fn ended_early(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the origin closed inside the body",
        )
    }

    /// One step of the chunked framing: Some(bytes handed on) or None to go on.
    fn chunk_step(&mut self, state: ChunkState, out: &mut [u8]) -> io::Result<Option<usize>> {
        let next = match state {
            ChunkState::Done => return Ok(Some(0)),
            ChunkState::Size => match httparse::parse_chunk_size(&self.pending) {
                Ok(httparse::Status::Complete((used, 0))) => {
                    self.pending.drain(..used);
                    ChunkState::Done
                }
                Ok(httparse::Status::Complete((used, size))) => {
                    self.pending.drain(..used);
                    ChunkState::Data(size)
                }
                Ok(httparse::Status::Partial) => return self.more().map(|()| None),
                Err(_) => return Err(io::Error::other("the origin sent a malformed chunk size")),
            },
            ChunkState::Data(0) => ChunkState::DataEnd,
            ChunkState::Data(left) if self.pending.is_empty() => {
                self.more()?;
                ChunkState::Data(left)
            }
            ChunkState::Data(left) => {
                let n = self.take(out, left);
                self.framing = BodyFraming::Chunked(ChunkState::Data(left - n as u64));
                return Ok(Some(n));
            }
            ChunkState::DataEnd if self.pending.len() < 2 => {
                self.more()?;
                ChunkState::DataEnd
            }
            ChunkState::DataEnd if self.pending.starts_with(b"\r\n") => {
                self.pending.drain(..2);
                ChunkState::Size
            }
            ChunkState::DataEnd => {
                return Err(io::Error::other("the origin sent a malformed chunk"));
            }
        };
        self.framing = BodyFraming::Chunked(next);
        Ok(None)
    }

    /// More bytes, which the framing says must come.
    fn more(&mut self) -> io::Result<()> {
        if self.fill()? {
            Ok(())
        } else {
            Err(self.ended_early())
        }
    }
}

impl Read for OriginBody<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            match self.framing {
                BodyFraming::Length(0) => return Ok(0),
                BodyFraming::Length(left) => {
                    if self.pending.is_empty() {
                        self.more()?;
                    }
                    let n = self.take(out, left);
                    self.framing = BodyFraming::Length(left - n as u64);
                    return Ok(n);
                }
                BodyFraming::UntilClose => {
                    if self.pending.is_empty() && !self.fill()? {
                        return Ok(0);
                    }
                    return Ok(self.take(out, u64::MAX));
                }
                BodyFraming::Chunked(state) => {
                    if let Some(n) = self.chunk_step(state, out)? {
                        return Ok(n);
                    }
                }
            }
        }
    }
}

/// Sends libgit2 the decompressed body of an answer whose head it already has (chunked),
/// `rest` being what was read from the origin past the head. A body that does not
/// decompress, or grows past the phase's cap, is cut and the refusal recorded.
pub(super) fn copy_decoded(
    shared: &Shared,
    upstream: &mut Upstream,
    client: &mut TcpStream,
    headers: &Headers,
    rest: Vec<u8>,
    coding: Coding,
) -> io::Result<()> {
    let framing =
        if header_value(headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
            BodyFraming::Chunked(ChunkState::Size)
        } else if let Some(length) =
            header_value(headers, "content-length").and_then(|v| v.parse().ok())
        {
            BodyFraming::Length(length)
        } else {
            BodyFraming::UntilClose
        };
    let body = OriginBody {
        upstream,
        shared,
        pending: rest,
        framing,
    };
    let mut decoder: Box<dyn Read + '_> = match coding {
        Coding::Gzip => Box::new(MultiGzDecoder::new(body)),
        Coding::Deflate => Box::new(ZlibDecoder::new(body)),
    };
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = match decoder.read(&mut buffer) {
            Ok(0) => return Framing::Chunked.end(client),
            Ok(read) => read,
            Err(error) => {
                // A refusal (cap, deadline) was recorded where it happened; anything else
                // is the origin's body.
                shared.record(FetchError::Other(format!(
                    "{} answered a {coding:?}-compressed body that cannot be decompressed: {error}",
                    shared.origin
                )));
                return Ok(());
            }
        };
        if let Some(refusal) = count_decompressed(shared, read) {
            shared.record(refusal);
            return Ok(());
        }
        Framing::Chunked.write(client, &buffer[..read])?;
    }
}

/// Counts decompressed bytes against the phase's cap, apart from the bytes received.
fn count_decompressed(shared: &Shared, bytes: usize) -> Option<FetchError> {
    let phase = shared.phase.load(Ordering::SeqCst);
    let (index, cap, what) = if phase == Phase::Refs as u8 {
        (
            0,
            shared.policy.limits.refs_bytes,
            "the decompressed ref advertisement of",
        )
    } else {
        (
            1,
            shared.policy.limits.download_bytes,
            "the decompressed download from",
        )
    };
    let total = shared.decompressed[index].fetch_add(bytes as u64, Ordering::SeqCst) + bytes as u64;
    (total > cap).then(|| FetchError::TooLarge {
        what: format!("{what} {}", shared.shown),
        limit: cap,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::time::{Duration, Instant};

    use flate2::Compression;
    use flate2::write::{GzEncoder, ZlibEncoder};

    use super::super::ConnectGuard;
    use crate::source::policy::{Policy, SourceLimits};

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
        encoder.finish().unwrap_or_else(|e| panic!("{e}"))
    }

    fn zlib(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
        encoder.finish().unwrap_or_else(|e| panic!("{e}"))
    }

    fn chunked(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for piece in bytes.chunks(777) {
            out.extend_from_slice(format!("{:x};ext=1\r\n", piece.len()).as_bytes());
            out.extend_from_slice(piece);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
        out
    }

    /// Asks an origin that answers `answer` (head and body) through a guard limited by
    /// `limits`; returns what libgit2 would read, and the guard's refusal.
    fn through_guard(answer: Vec<u8>, limits: SourceLimits) -> (Vec<u8>, Option<String>) {
        let origin = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let port = origin.local_addr().map(|a| a.port()).unwrap_or(0);
        let server = std::thread::spawn(move || {
            let (mut conn, _) = origin.accept().unwrap_or_else(|e| panic!("{e}"));
            let _ = super::super::exchange::read_head(&mut conn);
            let _ = conn.write_all(&answer);
        });
        let policy = Policy {
            allow_private_addresses: true,
            limits,
            ..Policy::default()
        };
        let url = url::Url::parse(&format!("http://127.0.0.1:{port}/repo.git"))
            .unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(60);
        let guard =
            ConnectGuard::start(&policy, &url, deadline, None).unwrap_or_else(|e| panic!("{e}"));
        let mut client = TcpStream::connect(guard.address()).unwrap_or_else(|e| panic!("{e}"));
        client
            .write_all(b"GET /repo.git/info/refs HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut seen = Vec::new();
        let _ = std::io::Read::read_to_end(&mut client, &mut seen);
        let _ = server.join();
        (seen, guard.refusal().map(|r| r.to_string()))
    }

    /// Splits what libgit2 read into its head and its de-chunked body.
    fn head_and_body(seen: &[u8]) -> (String, Vec<u8>) {
        let end = seen
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(seen)));
        let head = String::from_utf8_lossy(&seen[..end + 4]).into_owned();
        let (mut at, mut body) = (end + 4, Vec::new());
        loop {
            let Ok(httparse::Status::Complete((used, size))) =
                httparse::parse_chunk_size(&seen[at..])
            else {
                panic!("not chunked after {} bytes: {head}", body.len());
            };
            at += used;
            if size == 0 {
                return (head, body);
            }
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            body.extend_from_slice(&seen[at..at + size]);
            at += size + 2;
        }
    }

    fn content() -> Vec<u8> {
        (0..200_000u32)
            .flat_map(|i| format!("{i:08x} refs/heads/branch-{i}\n").into_bytes())
            .take(300_000)
            .collect()
    }

    #[test]
    fn compressed_answers_reach_libgit2_decompressed_in_every_framing() {
        let content = content();
        type Compress = fn(&[u8]) -> Vec<u8>;
        let framings: [(&str, Compress, &str); 4] = [
            ("gzip", gzip, "Content-Length"),
            ("x-gzip", gzip, "chunked"),
            ("deflate", zlib, "chunked"),
            ("gzip", gzip, "close"),
        ];
        for (coding, compress, framing) in framings {
            let body = compress(&content);
            let mut answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement\r\nContent-Encoding: {coding}\r\n"
            )
            .into_bytes();
            match framing {
                "Content-Length" => {
                    answer.extend_from_slice(
                        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    answer.extend_from_slice(&body);
                }
                "chunked" => {
                    answer.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
                    answer.extend_from_slice(&chunked(&body));
                }
                _ => {
                    answer.extend_from_slice(b"Connection: close\r\n\r\n");
                    answer.extend_from_slice(&body);
                }
            }
            let (seen, refusal) = through_guard(answer, SourceLimits::default());
            assert_eq!(refusal, None, "{coding} {framing}");
            let (head, decoded) = head_and_body(&seen);
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            assert!(head.contains("Content-Type: application/x-git-upload-pack-advertisement"));
            let lower = head.to_ascii_lowercase();
            assert!(!lower.contains("content-encoding") && !lower.contains("content-length"));
            assert_eq!(decoded.len(), content.len(), "{coding} {framing}");
            assert!(decoded == content, "{coding} {framing}: the bytes differ");
        }
    }

    #[test]
    fn a_small_answer_that_decompresses_past_the_cap_is_cut() {
        let bomb = gzip(&vec![0u8; 8 * 1024 * 1024]);
        assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            bomb.len()
        )
        .into_bytes();
        answer.extend_from_slice(&bomb);
        let limits = SourceLimits {
            refs_bytes: 1024 * 1024,
            ..SourceLimits::default()
        };
        let (seen, refusal) = through_guard(answer, limits);
        let refusal = refusal.unwrap_or_default();
        assert!(
            refusal.contains("the decompressed ref advertisement of")
                && refusal.contains("limit of 1048576 bytes"),
            "{refusal}"
        );
        assert!(
            seen.len() < 2 * 1024 * 1024,
            "{} bytes reached libgit2",
            seen.len()
        );
        assert!(
            !seen.ends_with(b"0\r\n\r\n"),
            "a cut body must not look complete"
        );
    }

    #[test]
    fn a_body_that_does_not_decompress_or_a_coding_unknown_is_refused_by_name() {
        let mut broken = gzip(&content());
        broken.truncate(broken.len() / 2);
        broken.extend_from_slice(&[0xff; 64]);
        let mut answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\n\r\n",
            broken.len()
        )
        .into_bytes();
        answer.extend_from_slice(&broken);
        let (_, refusal) = through_guard(answer, SourceLimits::default());
        let refusal = refusal.unwrap_or_default();
        assert!(
            refusal.contains("Gzip-compressed body that cannot be decompressed"),
            "{refusal}"
        );

        let answer =
            b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc".to_vec();
        let (seen, refusal) = through_guard(answer, SourceLimits::default());
        let refusal = refusal.unwrap_or_default();
        assert!(
            refusal.contains("Content-Encoding \"br\", which cannot be decoded"),
            "{refusal}"
        );
        assert!(
            seen.starts_with(b"HTTP/1.1 403"),
            "{}",
            String::from_utf8_lossy(&seen)
        );
    }
}
