//! Commit and tag signatures (`source.git.verify`): whether the commit a source is about
//! to roll, or the release tag that names it, was signed by a key its parent trusts.
//!
//! Verification runs in the git worker, where the commit is read: the signature packets
//! and key material parsed here come from whoever can push, and the worker is the
//! process whose memory and time are bounded. The trusted keys travel with the job;
//! they are part of the snapshot's key, so a key added to or removed from the Secret
//! makes the next sync read the same commit again (from the cache, no download) under
//! the new keys.
//!
//! OpenPGP signatures are checked by rpgp (`pgp`), SSH signatures (git's
//! `gpg.format=ssh`, what `ssh-keygen -Y sign` makes) by RustCrypto's `ssh-key`, against
//! keys in git's `allowed_signers` format ([`allowed_signers`]). X.509 signatures
//! (gpgsm, gitsign) are refused by name.

pub mod allowed_signers;
mod openpgp;
mod ssh;

use git2::{Oid, Repository};
use serde::{Deserialize, Serialize};

use crate::FetchError;

/// What must be signed (Flux's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum VerifyMode {
    /// The commit the ref points at.
    #[serde(rename = "HEAD")]
    Head,
    /// The annotated tag the ref names (the ref must be a signed, annotated tag).
    Tag,
    /// Both the tag and the commit it points at.
    #[serde(rename = "TagAndHEAD")]
    TagAndHead,
}

impl VerifyMode {
    /// The spelling in specs and annotations.
    pub fn parse(text: &str) -> Option<VerifyMode> {
        match text {
            "HEAD" => Some(VerifyMode::Head),
            "Tag" => Some(VerifyMode::Tag),
            "TagAndHEAD" => Some(VerifyMode::TagAndHead),
            _ => None,
        }
    }

    fn commit(self) -> bool {
        matches!(self, VerifyMode::Head | VerifyMode::TagAndHead)
    }

    fn tag(self) -> bool {
        matches!(self, VerifyMode::Tag | VerifyMode::TagAndHead)
    }
}

/// The keys a parent trusts, as its Secret holds them, and what must be signed.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TrustedKeys {
    /// The Secret they come from (for messages).
    pub secret: String,
    /// What must be signed.
    pub mode: VerifyMode,
    /// Armored OpenPGP public keys: (the Secret's key name, its text).
    pub openpgp: Vec<(String, String)>,
    /// SSH keys in `allowed_signers` format: (the Secret's key name, its text).
    pub allowed_signers: Vec<(String, String)>,
}

impl TrustedKeys {
    /// A digest of everything that decides a verdict (mode and keys): part of the
    /// snapshot's key, so other keys are another snapshot.
    pub fn digest(&self) -> String {
        let mut parts = metahooks_hash::Parts::new();
        parts.part(format!("{:?}", self.mode).as_bytes());
        for (name, text) in self.openpgp.iter().chain(&self.allowed_signers) {
            parts.part(name.as_bytes()).part(text.as_bytes());
        }
        hex::encode(&parts.finish()[..16])
    }

    /// Whether every key parses, in words naming the Secret's key that does not: checked
    /// where the Secret is read, so a broken Secret is reported as such.
    ///
    /// # Errors
    /// A key does not parse, or the Secret holds none.
    pub fn check(&self) -> Result<(), String> {
        if self.openpgp.is_empty() && self.allowed_signers.is_empty() {
            return Err(format!(
                "the Secret {:?} holds no keys (OpenPGP keys under names ending in .asc, SSH keys under allowed_signers)",
                self.secret
            ));
        }
        for (name, text) in &self.openpgp {
            openpgp::keys(text).map_err(|e| format!("key {name:?}: {e}"))?;
        }
        for (name, text) in &self.allowed_signers {
            allowed_signers::parse(text).map_err(|e| format!("key {name:?}: {e}"))?;
        }
        Ok(())
    }
}

/// Who signed what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signer {
    /// `commit` or `tag`, and its object id.
    pub object: String,
    /// `openpgp` or `ssh`.
    pub method: String,
    /// The signing key's fingerprint (OpenPGP: the primary key's, upper-case hex; SSH:
    /// `SHA256:…`).
    pub fingerprint: String,
    /// OpenPGP: the key's first user ID; SSH: the principal of the allowed_signers line.
    pub identity: String,
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} signed by {} ({} {})",
            self.object, self.identity, self.method, self.fingerprint
        )
    }
}

/// Why one signature is not accepted (the object is added by the caller).
#[derive(Debug)]
pub(crate) enum Refusal {
    Untrusted(String),
    Invalid(String),
}

/// Checks what `keys.mode` asks of `commit` and, in the tag modes, of the annotated tag
/// object `tag` (None: the ref is not an annotated tag).
///
/// # Errors
/// A signature is missing, of an unsupported kind, made by a key not trusted, or does not
/// verify; the error names the object.
pub fn verify(
    repo: &Repository,
    commit: Oid,
    tag: Option<(Oid, &str)>,
    keys: &TrustedKeys,
) -> Result<Vec<Signer>, FetchError> {
    let mut signers = Vec::new();
    if keys.mode.tag() {
        let Some((tag, name)) = tag else {
            return Err(FetchError::SignatureMissing {
                object: format!("commit {commit}"),
                detail: "verify mode Tag needs the ref to be an annotated, signed tag; it is not a tag object".to_owned(),
            });
        };
        let object = format!("tag {name} ({tag})");
        let unreadable = |e: git2::Error| FetchError::CacheUnreadable {
            detail: format!("cannot read {object}: {e}"),
        };
        let odb = repo.odb().map_err(unreadable)?;
        let raw = odb.read(tag).map_err(unreadable)?;
        let Some((payload, signature)) = split_tag(raw.data()) else {
            return Err(FetchError::SignatureMissing {
                object,
                detail: "the tag carries no signature".to_owned(),
            });
        };
        signers.push(check(signature, payload, keys, &object, "tag")?);
    }
    if keys.mode.commit() {
        let object = format!("commit {commit}");
        let Ok((signature, payload)) = repo.extract_signature(&commit, None) else {
            return Err(FetchError::SignatureMissing {
                object,
                detail: "the commit carries no signature".to_owned(),
            });
        };
        signers.push(check(&signature, &payload, keys, &object, "commit")?);
    }
    Ok(signers)
}

/// One signature over `payload`, by its armor.
fn check(
    signature: &[u8],
    payload: &[u8],
    keys: &TrustedKeys,
    object: &str,
    kind: &str,
) -> Result<Signer, FetchError> {
    let text = String::from_utf8_lossy(signature);
    let trimmed = text.trim_start();
    let outcome = if trimmed.starts_with("-----BEGIN PGP SIGNATURE-----") {
        openpgp::verify(trimmed, payload, &keys.openpgp)
    } else if trimmed.starts_with("-----BEGIN SSH SIGNATURE-----") {
        ssh::verify(trimmed, payload, &keys.allowed_signers)
    } else {
        let kind = if trimmed.starts_with("-----BEGIN SIGNED MESSAGE-----") {
            "an X.509 (gpgsm or gitsign)"
        } else {
            "an unrecognised"
        };
        return Err(FetchError::UnsupportedSignature {
            object: object.to_owned(),
            kind: kind.to_owned(),
        });
    };
    match outcome {
        Ok((method, fingerprint, identity)) => Ok(Signer {
            object: format!(
                "{kind} {}",
                object.split_once(' ').map_or(object, |(_, id)| id)
            ),
            method: method.to_owned(),
            fingerprint,
            identity,
        }),
        Err(Refusal::Untrusted(detail)) => Err(FetchError::SignatureUntrusted {
            object: object.to_owned(),
            detail,
        }),
        Err(Refusal::Invalid(detail)) => Err(FetchError::SignatureInvalid {
            object: object.to_owned(),
            detail,
        }),
    }
}

/// A signed tag object as (what was signed, the signature): git appends the armored
/// signature to the tag message, and signs everything before it.
fn split_tag(raw: &[u8]) -> Option<(&[u8], &[u8])> {
    const STARTS: [&[u8]; 3] = [
        b"-----BEGIN PGP SIGNATURE-----",
        b"-----BEGIN SSH SIGNATURE-----",
        b"-----BEGIN SIGNED MESSAGE-----",
    ];
    let mut found = None;
    let mut line_start = 0;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        if STARTS.iter().any(|start| line.starts_with(start)) {
            found = Some(line_start);
        }
        line_start += line.len();
    }
    found.map(|at| raw.split_at(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_splits_at_its_last_signature_block() {
        let raw = b"object 1\ntype commit\ntag v1\n\nrelease\n-----BEGIN SSH SIGNATURE-----\nabc\n-----END SSH SIGNATURE-----\n";
        let (payload, signature) = split_tag(raw).unwrap();
        assert_eq!(payload, b"object 1\ntype commit\ntag v1\n\nrelease\n");
        assert!(signature.starts_with(b"-----BEGIN SSH SIGNATURE-----"));
        assert!(split_tag(b"object 1\n\nunsigned\n").is_none());
    }

    #[test]
    fn x509_and_unknown_signatures_are_refused_by_name() {
        let keys = TrustedKeys {
            secret: "s".into(),
            mode: VerifyMode::Head,
            openpgp: Vec::new(),
            allowed_signers: Vec::new(),
        };
        let x509 = b"-----BEGIN SIGNED MESSAGE-----\nMIIB\n-----END SIGNED MESSAGE-----\n";
        let refused = check(x509, b"tree 1\n", &keys, "commit abc", "commit").unwrap_err();
        assert_eq!(refused.reason(), "UnsupportedSignature");
        assert!(refused.to_string().contains("X.509"), "{refused}");
        assert!(refused.to_string().contains("commit abc"), "{refused}");
        let odd = check(b"garbage", b"", &keys, "commit abc", "commit").unwrap_err();
        assert_eq!(odd.reason(), "UnsupportedSignature");
        let pgp =
            b"-----BEGIN PGP SIGNATURE-----\n\nnot base64 at all\n-----END PGP SIGNATURE-----\n";
        let broken = check(pgp, b"", &keys, "commit abc", "commit").unwrap_err();
        assert_eq!(broken.reason(), "SignatureInvalid", "{broken}");
    }

    #[test]
    fn modes_read_as_flux_writes_them() {
        assert_eq!(VerifyMode::parse("HEAD"), Some(VerifyMode::Head));
        assert_eq!(VerifyMode::parse("Tag"), Some(VerifyMode::Tag));
        assert_eq!(
            VerifyMode::parse("TagAndHEAD"),
            Some(VerifyMode::TagAndHead)
        );
        assert_eq!(VerifyMode::parse("head"), None);
    }

    #[test]
    fn other_keys_are_another_digest() {
        let keys = |text: &str| TrustedKeys {
            secret: "s".into(),
            mode: VerifyMode::Head,
            openpgp: Vec::new(),
            allowed_signers: vec![("allowed_signers".into(), text.into())],
        };
        assert_eq!(keys("a").digest(), keys("a").digest());
        assert_ne!(keys("a").digest(), keys("b").digest());
    }
}
