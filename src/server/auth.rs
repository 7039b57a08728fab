//! Caller authentication on the hook port: the `Authorization` header Metacontroller
//! v4.16+ sends (`authorization` → `Bearer <secret>`, `basicAuth` → `Basic base64(u:p)`),
//! compared in constant time against the value built from the configured secret files.

use axum::http::{HeaderMap, header};
use base64::Engine;
use subtle::ConstantTimeEq;

/// The exact `Authorization` value a caller must send.
#[derive(Clone)]
pub struct Auth {
    expected: Vec<u8>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}

impl Auth {
    /// Metacontroller trims the secret before sending `Bearer <secret>`; so do we.
    pub fn bearer(token: &str) -> Auth {
        Auth {
            expected: format!("Bearer {}", token.trim()).into_bytes(),
        }
    }

    pub fn basic(username: &str, password: &str) -> Auth {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        Auth {
            expected: format!("Basic {encoded}").into_bytes(),
        }
    }

    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(sent) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        bool::from(sent.as_bytes().ct_eq(&self.expected))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn bearer_matches_trimmed_token_only() {
        let auth = Auth::bearer("s3cret\n");
        assert!(auth.allows(&headers("Bearer s3cret")));
        assert!(!auth.allows(&headers("Bearer s3cre")));
        assert!(!auth.allows(&headers("bearer s3cret")));
        assert!(!auth.allows(&HeaderMap::new()));
    }

    #[test]
    fn basic_matches_rfc7617_encoding() {
        let auth = Auth::basic("mc", "pw");
        assert!(auth.allows(&headers("Basic bWM6cHc=")));
        assert!(!auth.allows(&headers("Basic bWM6cHd4")));
    }
}
