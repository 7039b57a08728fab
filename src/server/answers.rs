//! Whole answers remembered by the request bytes they answer.
//!
//! Metacontroller resyncs every parent on a timer and repeats the same request byte for
//! byte while nothing changed; hashing a request costs far less than parsing it, so an
//! answer is kept with its ETag and what it read of its sources, and sent again as it is
//! for as long as the source engine holds what it read. What a hit costs beyond reading
//! the body is one BLAKE3 pass, one lookup and a look at each source read, which is
//! about all `examples/limit_server.rs --floor` does.

use std::sync::Arc;

use axum::body::Bytes;
use axum::http::HeaderValue;

use crate::controllers::ParentRef;
use crate::controllers::common::reading::SourceUse;
use crate::memo::Memo;
use crate::protocol::Hook;

/// Bytes of answers remembered by default, and the number of answers that is sized for.
pub const DEFAULT_BYTES: u64 = 64 * 1024 * 1024;
const ANSWER_ENTRIES: u64 = 4096;

/// The key of one call: which hook of which controller, and the request's bytes.
pub type CallKey = [u8; 32];

/// An answer as it is sent: its body, the ETag of that body, whom it was about (for the
/// log line) and what it read of its sources (it holds while they are held the same).
pub struct Remembered {
    pub parent: ParentRef,
    pub body: Bytes,
    pub etag: HeaderValue,
    pub sources: Vec<SourceUse>,
}

impl Remembered {
    /// `body` with its ETag computed once.
    pub fn new(parent: ParentRef, body: Bytes, sources: Vec<SourceUse>) -> Remembered {
        let etag = etag_of(&body);
        Remembered {
            parent,
            body,
            etag,
            sources,
        }
    }
}

/// The memo, bounded by the bytes it holds.
pub struct AnswerMemo {
    answers: Memo<CallKey, Answers>,
}

/// The answers remembered for one call's bytes: the latest, and the one before it.
///
/// A background poll turns every source it fetches pending (its parents are asked back
/// soon) and then, when it found nothing new, back to what it was. With one answer per
/// call, each poll made every parent's answer afresh twice, once each way. With two, the
/// answer from before the poll holds again when it ends, and from the second poll on the
/// pending answer is remembered too. Which of the two is sent is decided by what the
/// engine holds, never by age, so an answer is sent only while its sources are held as
/// they were when it was made.
#[derive(Clone)]
struct Answers {
    latest: Arc<Remembered>,
    before: Option<Arc<Remembered>>,
}

impl AnswerMemo {
    /// A memo holding at most `bytes` of answers.
    pub fn with_bytes(bytes: u64) -> AnswerMemo {
        AnswerMemo {
            answers: Memo::weighted(ANSWER_ENTRIES, bytes, weight),
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.answers.weight()
    }

    /// The answer remembered for this call whose sources `hold` says are still held as
    /// they were read, if any.
    pub fn holding(
        &self,
        key: &CallKey,
        hold: impl Fn(&[SourceUse]) -> bool,
    ) -> Option<Arc<Remembered>> {
        let answers = self.answers.get(key)?;
        [Some(answers.latest), answers.before]
            .into_iter()
            .flatten()
            .find(|answer| hold(&answer.sources))
    }

    /// Remembers an answer for this call, keeping the latest one before it.
    pub fn insert(&self, key: CallKey, answer: Arc<Remembered>) {
        // Two calls with the same bytes computed at once: the second insert keeps the
        // first's answer as the one before, which is harmless (it still has to hold).
        let before = self.answers.get(&key).map(|answers| answers.latest);
        self.answers.insert(
            key,
            Answers {
                latest: answer,
                before,
            },
        );
    }
}

fn weight(_key: &CallKey, answers: &Answers) -> u64 {
    [Some(&answers.latest), answers.before.as_ref()]
        .into_iter()
        .flatten()
        .map(|answer| answer_weight(answer))
        .sum()
}

fn answer_weight(answer: &Remembered) -> u64 {
    let sources: usize = answer
        .sources
        .iter()
        .map(|used| used.interest.request.location.url().len() + 512)
        .sum();
    (answer.body.len() + answer.parent.name.len() + answer.parent.namespace.len() + sources + 64)
        as u64
}

/// The key a hook's calls are hashed under: a hash of the controller's and the hook's
/// names, computed once per route when the router is built. The names are
/// length-prefixed so that no (controller, hook) pair can collide with another's bytes.
pub type RouteKey = [u8; 32];

/// The [`RouteKey`] of `hook` on `controller`.
pub fn route_key(controller: &str, hook: Hook) -> RouteKey {
    crate::hash::Parts::new()
        .part(controller.as_bytes())
        .part(hook.as_str().as_bytes())
        .finish()
}

/// Hashes a call's request as its body arrives, so that a large body is hashed piece by
/// piece between reads instead of in one long pass on an async worker. Keyed with the
/// route's key: the call's key is one pass over the body, with no second hash to bind
/// the route.
pub struct CallHasher {
    body: crate::hash::Stream,
}

impl CallHasher {
    /// A hasher for a call on the route whose key is `route`.
    pub fn new(route: &RouteKey) -> CallHasher {
        CallHasher {
            body: crate::hash::Stream::keyed(route),
        }
    }

    /// Adds the next piece of the body.
    pub fn update(&mut self, piece: &[u8]) {
        self.body.update(piece);
    }

    /// The call's key.
    pub fn finish(&self) -> CallKey {
        self.body.finish()
    }
}

/// A content hash of an answer. Metacontroller keys its cache by the root object only,
/// so the tag must change whenever the bytes do — hence a hash, not a revision.
pub fn etag_of(bytes: &[u8]) -> HeaderValue {
    let tag = format!("\"{}\"", crate::hash::digest_hex(bytes, 32));
    // Hex between quotes is always a valid header value.
    HeaderValue::from_str(&tag).unwrap_or_else(|_| HeaderValue::from_static("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_is_a_quoted_content_hash() {
        let a = etag_of(b"{\"status\":{}}");
        let text = a.to_str().unwrap_or_default();
        assert!(text.starts_with('"') && text.ends_with('"') && text.len() == 34);
        assert_ne!(a, etag_of(b"{\"status\":{\"x\":1}}"));
        assert_eq!(a, etag_of(b"{\"status\":{}}"));
    }

    #[test]
    fn a_key_depends_on_controller_hook_and_every_body_byte() {
        let key = |controller: &str, hook: Hook, chunks: &[&[u8]]| {
            let mut hasher = CallHasher::new(&route_key(controller, hook));
            for chunk in chunks {
                hasher.update(chunk);
            }
            hasher.finish()
        };
        let whole = key("apimock", Hook::Sync, &[b"{\"a\":1}"]);
        assert_eq!(
            whole,
            key("apimock", Hook::Sync, &[b"{\"a\"", b":1}"]),
            "chunking does not matter"
        );
        assert_ne!(whole, key("apimock", Hook::Finalize, &[b"{\"a\":1}"]));
        assert_ne!(whole, key("monitoredservice", Hook::Sync, &[b"{\"a\":1}"]));
        assert_ne!(whole, key("apimock", Hook::Sync, &[b"{\"a\":2}"]));
        // A name's bytes cannot slide into the next field.
        assert_ne!(
            key("ab", Hook::Sync, &[b"x"]),
            key("a", Hook::Sync, &[b"bx"])
        );
    }
}
