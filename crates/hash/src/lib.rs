//! Every digest metahooks takes, in one place. A crate of its own because both the source
//! engine (`metahooks-source`) and the server's controllers use it, and the engine must
//! not depend on the server.
//!
//! - SHA-256 in hex for hashes people see and compare with other tools (annotations,
//!   status, an HTTP file's revision);
//! - BLAKE3 for internal keys: of bytes ([`digest`]), of typed values through their JSON
//!   encoding ([`digest_of`]), and of several parts ([`Parts`], each part length-framed,
//!   so no part can run into the next).

use sha2::{Digest, Sha256};

/// A BLAKE3 digest.
pub type Digest32 = [u8; 32];

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Lowercase hex SHA-256 of the pieces `feed` hands over, in order, as one run of bytes.
pub fn sha256_hex_of(feed: impl FnOnce(&mut dyn FnMut(&[u8]))) -> String {
    let mut hasher = Sha256::new();
    feed(&mut |piece| hasher.update(piece));
    hex::encode(hasher.finalize())
}

/// The BLAKE3 digest of `bytes`.
pub fn digest(bytes: &[u8]) -> Digest32 {
    *blake3::hash(bytes).as_bytes()
}

/// The first `chars` hex digits of the BLAKE3 digest of `bytes` (at most 64).
pub fn digest_hex(bytes: &[u8], chars: usize) -> String {
    let hex = blake3::hash(bytes).to_hex();
    hex[..chars.min(hex.len())].to_owned()
}

/// The digest of typed inputs: a BLAKE3 hash of their JSON encoding, so every field is
/// part of it, with JSON's own framing (a value cannot run into the next one).
///
/// # Errors
/// A value that cannot be encoded as JSON (a map with non-string keys).
pub fn digest_of(inputs: &impl serde::Serialize) -> Result<Digest32, serde_json::Error> {
    let mut hasher = blake3::Hasher::new();
    serde_json::to_writer(&mut hasher, inputs)?;
    Ok(*hasher.finalize().as_bytes())
}

/// A digest of several parts, each framed by its length (an absent part by a length no
/// part can have), optionally keyed with a secret.
pub struct Parts(blake3::Hasher);

impl Parts {
    /// Parts hashed without a key.
    pub fn new() -> Parts {
        Parts(blake3::Hasher::new())
    }

    /// Parts hashed with `key` (the digest says nothing of them to whoever lacks it).
    pub fn keyed(key: &[u8; 32]) -> Parts {
        Parts(blake3::Hasher::new_keyed(key))
    }

    /// Adds one part.
    pub fn part(&mut self, bytes: &[u8]) -> &mut Parts {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Adds a part that may be absent.
    pub fn optional(&mut self, bytes: Option<&[u8]>) -> &mut Parts {
        match bytes {
            Some(bytes) => self.part(bytes),
            None => {
                self.0.update(&u64::MAX.to_le_bytes());
                self
            }
        }
    }

    /// The digest of the parts so far.
    pub fn finish(&self) -> Digest32 {
        *self.0.finalize().as_bytes()
    }
}

/// A keyed digest of bytes that arrive in pieces (a request body as it is read), each
/// piece fed as it comes: BLAKE3 hashes whole 1 KiB chunks of one update in parallel, and
/// nothing may come before the first piece, or every chunk boundary would shift.
///
/// Boxed: BLAKE3's state is nearly 2 KiB, and held in a future it would be copied with
/// that future at every move.
pub struct Stream(Box<blake3::Hasher>);

impl Stream {
    /// A stream hashed without a key (the pieces bring their own framing).
    pub fn new() -> Stream {
        Stream(Box::new(blake3::Hasher::new()))
    }

    /// A stream hashed with `key`.
    pub fn keyed(key: &[u8; 32]) -> Stream {
        Stream(Box::new(blake3::Hasher::new_keyed(key)))
    }

    /// Adds the next piece.
    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The digest of the pieces so far.
    pub fn finish(&self) -> Digest32 {
        *self.0.finalize().as_bytes()
    }
}

impl Default for Stream {
    fn default() -> Stream {
        Stream::new()
    }
}

impl Default for Parts {
    fn default() -> Parts {
        Parts::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        // BLAKE3's published test vector for the empty input.
        assert_eq!(
            digest_hex(b"", 64),
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
        );
    }

    #[test]
    fn parts_cannot_run_into_each_other_and_absence_is_not_emptiness() {
        let of = |parts: &[Option<&str>]| {
            let mut digest = Parts::new();
            for part in parts {
                digest.optional(part.map(str::as_bytes));
            }
            digest.finish()
        };
        assert_ne!(of(&[Some("ab"), Some("c")]), of(&[Some("a"), Some("bc")]));
        assert_ne!(of(&[None]), of(&[Some("")]));
        assert_eq!(of(&[Some("a"), None]), of(&[Some("a"), None]));
        assert_eq!(
            sha256_hex_of(|feed| {
                feed(b"a");
                feed(b"bc");
            }),
            sha256_hex(b"abc")
        );
        let mut stream = Stream::new();
        stream.update(b"a");
        stream.update(b"bc");
        assert_eq!(stream.finish(), digest(b"abc"));
        assert_ne!(
            Parts::keyed(&[1; 32]).part(b"x").finish(),
            Parts::keyed(&[2; 32]).part(b"x").finish()
        );
    }
}
