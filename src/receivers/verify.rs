//! Each forge's way of proving a webhook came from someone who holds the shared secret.
//! Every comparison is constant-time; nothing in the payload is read before it passes.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The forges a receiver speaks for (the last path segment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forge {
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    GitHub,
    /// `X-Gitlab-Token: <secret>`.
    GitLab,
    /// `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`.
    Gitea,
    /// `X-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, body `{"url": …}`.
    Generic,
}

impl Forge {
    /// The forge a path segment names.
    pub fn from_segment(segment: &str) -> Option<Forge> {
        match segment {
            "github" => Some(Forge::GitHub),
            "gitlab" => Some(Forge::GitLab),
            "gitea" => Some(Forge::Gitea),
            "generic" => Some(Forge::Generic),
            _ => None,
        }
    }

    /// The header that carries the proof.
    pub fn header(self) -> &'static str {
        match self {
            Forge::GitHub => "x-hub-signature-256",
            Forge::GitLab => "x-gitlab-token",
            Forge::Gitea => "x-gitea-signature",
            Forge::Generic => "x-signature-256",
        }
    }
}

/// Why a request was not accepted as the forge's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    /// The header is absent.
    #[error("header {0} is missing")]
    Missing(&'static str),
    /// The header is there and does not prove the secret.
    #[error("the signature in {0} does not match the body and the receiver's secret")]
    Mismatch(&'static str),
}

/// What can be checked before the body is read: the proof's header is there and well
/// formed (a hex HMAC of the right length), and GitLab's token, which is the secret
/// itself, is right. A request that fails here is refused before it costs a slot or a
/// byte of body.
///
/// # Errors
/// The header is missing, malformed or (GitLab) wrong.
pub fn precheck(forge: Forge, headers: &HeaderMap, secret: &[u8]) -> Result<(), Rejected> {
    let (name, value) = proof(forge, headers)?;
    let hex = match forge {
        Forge::GitLab => {
            return bool::from(value.as_bytes().ct_eq(secret))
                .then_some(())
                .ok_or(Rejected::Mismatch(name));
        }
        Forge::Gitea => Some(value),
        Forge::GitHub | Forge::Generic => value.strip_prefix("sha256="),
    };
    // An HMAC-SHA256 is 32 bytes: 64 hex digits.
    match hex {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => Ok(()),
        _ => Err(Rejected::Mismatch(name)),
    }
}

/// Checks `body` against the forge's proof in `headers`.
///
/// # Errors
/// The proof is missing or wrong.
pub fn verify(
    forge: Forge,
    headers: &HeaderMap,
    body: &[u8],
    secret: &[u8],
) -> Result<(), Rejected> {
    let (name, value) = proof(forge, headers)?;
    let good = match forge {
        Forge::GitLab => bool::from(value.as_bytes().ct_eq(secret)),
        Forge::Gitea => hmac_matches(value, body, secret),
        Forge::GitHub | Forge::Generic => value
            .strip_prefix("sha256=")
            .is_some_and(|hex| hmac_matches(hex, body, secret)),
    };
    if good {
        Ok(())
    } else {
        Err(Rejected::Mismatch(name))
    }
}

/// The forge's proof header, by name, and its value.
fn proof(forge: Forge, headers: &HeaderMap) -> Result<(&'static str, &str), Rejected> {
    let name = forge.header();
    let value = headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .ok_or(Rejected::Missing(name))?;
    Ok((name, value))
}

fn hmac_matches(hex_digest: &str, body: &[u8], secret: &[u8]) -> bool {
    let Ok(expected) = hex::decode(hex_digest) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// `sha256=<hex>` of `body` under `secret`: what a sender of the generic receiver puts
/// in `X-Signature-256`.
pub fn sign(body: &[u8], secret: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().unwrap());
        headers
    }

    #[test]
    fn github_gitea_and_generic_sign_the_body_gitlab_sends_the_secret() {
        let secret = b"It's a Secret to Everybody";
        let body = b"Hello, World!";
        // GitHub's documented example (docs.github.com, "Validating webhook deliveries").
        let github = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert_eq!(sign(body, secret), github);
        assert_eq!(
            verify(
                Forge::GitHub,
                &headers("x-hub-signature-256", github),
                body,
                secret
            ),
            Ok(())
        );
        assert_eq!(
            verify(
                Forge::GitHub,
                &headers("x-hub-signature-256", github),
                b"Hello, World?",
                secret
            ),
            Err(Rejected::Mismatch("x-hub-signature-256"))
        );
        let bare = github.trim_start_matches("sha256=");
        assert_eq!(
            verify(
                Forge::Gitea,
                &headers("x-gitea-signature", bare),
                body,
                secret
            ),
            Ok(())
        );
        assert!(
            verify(
                Forge::GitHub,
                &headers("x-hub-signature-256", bare),
                body,
                secret
            )
            .is_err()
        );
        assert_eq!(
            verify(
                Forge::Generic,
                &headers("x-signature-256", github),
                body,
                secret
            ),
            Ok(())
        );
        assert_eq!(
            verify(
                Forge::GitLab,
                &headers("x-gitlab-token", "It's a Secret to Everybody"),
                body,
                secret
            ),
            Ok(())
        );
        assert!(
            verify(
                Forge::GitLab,
                &headers("x-gitlab-token", "guess"),
                body,
                secret
            )
            .is_err()
        );
        assert_eq!(
            verify(Forge::GitHub, &HeaderMap::new(), body, secret),
            Err(Rejected::Missing("x-hub-signature-256"))
        );
        assert!(
            verify(
                Forge::Gitea,
                &headers("x-gitea-signature", "zz"),
                body,
                secret
            )
            .is_err()
        );
    }
}
