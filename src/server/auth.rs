//! Caller authentication on the hook port: the `Authorization` header Metacontroller
//! v4.16+ sends (`authorization` → `Bearer <secret>`, `basicAuth` → `Basic base64(u:p)`),
//! compared in constant time against the value built from the configured secret files.

use axum::http::{HeaderMap, header};
use base64::Engine;
use subtle::ConstantTimeEq;

/// The `Authorization` value a caller must send: a scheme (matched without regard to
/// case, as HTTP defines it) and credentials (compared exactly, in constant time).
#[derive(Clone)]
pub struct Auth {
    scheme: &'static str,
    /// Each accepted credential (several while a token is being rotated).
    credentials: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Auth(<redacted>)")
    }
}

impl Auth {
    /// Metacontroller sends `Bearer ` + the Secret value with surrounding whitespace
    /// trimmed (pkg/hooks/auth.go), so the token file is trimmed the same way.
    pub fn bearer(token: &str) -> Auth {
        Auth::bearers([token])
    }

    /// Any of `tokens` (each trimmed; empty ones ignored): while a token is rotated, the
    /// old and the new are both accepted.
    pub fn bearers<'a>(tokens: impl IntoIterator<Item = &'a str>) -> Auth {
        Auth {
            scheme: "Bearer",
            credentials: tokens
                .into_iter()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(|t| t.as_bytes().to_vec())
                .collect(),
        }
    }

    /// How many credentials are accepted.
    pub fn accepted(&self) -> usize {
        self.credentials.len()
    }

    /// Metacontroller trims username and password before encoding them.
    pub fn basic(username: &str, password: &str) -> Auth {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            username.trim(),
            password.trim()
        ));
        Auth {
            scheme: "Basic",
            credentials: vec![encoded.into_bytes()],
        }
    }

    /// Whether the request's `Authorization` header carries an accepted credential.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(sent) = headers.get(header::AUTHORIZATION) else {
            return false;
        };
        let sent = sent.as_bytes();
        let Some(space) = sent.iter().position(|b| *b == b' ') else {
            return false;
        };
        let (scheme, credentials) = (&sent[..space], &sent[space + 1..]);
        // Every accepted credential is compared, matched or not, so the time taken does
        // not say which one (or whether an earlier one) matched.
        let matched = self
            .credentials
            .iter()
            .fold(subtle::Choice::from(0), |any, accepted| {
                any | credentials.ct_eq(accepted)
            });
        scheme.eq_ignore_ascii_case(self.scheme.as_bytes()) && bool::from(matched)
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
        assert!(
            auth.allows(&headers("bearer s3cret")),
            "schemes are case-insensitive"
        );
        assert!(auth.allows(&headers("BEARER s3cret")));
        assert!(!auth.allows(&headers("Basic s3cret")));
        assert!(!auth.allows(&headers("Bearers3cret")));
        assert!(Auth::bearer("  s3cret \t\n").allows(&headers("Bearer s3cret")));
        assert!(!auth.allows(&HeaderMap::new()));
    }

    #[test]
    fn any_of_several_tokens_is_accepted_while_one_is_rotated() {
        let auth = Auth::bearers(["old-token", "", " new-token\n"]);
        assert_eq!(auth.accepted(), 2);
        assert!(auth.allows(&headers("Bearer old-token")));
        assert!(auth.allows(&headers("Bearer new-token")));
        assert!(!auth.allows(&headers("Bearer other")));
        assert!(!auth.allows(&headers("Bearer ")));
    }

    #[test]
    fn basic_matches_rfc7617_encoding() {
        let auth = Auth::basic("mc", "pw");
        assert!(auth.allows(&headers("Basic bWM6cHc=")));
        assert!(!auth.allows(&headers("Basic bWM6cHd4")));
        assert!(Auth::basic(" mc\n", "pw \n").allows(&headers("basic bWM6cHc=")));
    }
}
