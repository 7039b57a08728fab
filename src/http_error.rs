//! The one way an error becomes an HTTP answer, for hook calls and push receivers alike:
//! its status, a JSON body `{"error": "<sentence>", "reason": "<label>"}`, and the
//! headers its status calls for.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An error a client is answered with.
pub trait HttpError: std::error::Error {
    /// The status it is answered with.
    fn status(&self) -> StatusCode;

    /// A stable label for alerts and logs.
    fn reason(&self) -> &'static str;

    /// Seconds the client should wait before it retries (sent as `Retry-After`).
    fn retry_after_seconds(&self) -> Option<u64> {
        None
    }

    /// The challenge of a 401 (sent as `WWW-Authenticate`).
    fn challenge(&self) -> Option<&'static str> {
        None
    }
}

/// The body of the answer for `error`.
pub fn body(error: &impl HttpError) -> Vec<u8> {
    serde_json::json!({"error": error.to_string(), "reason": error.reason()})
        .to_string()
        .into_bytes()
}

/// The answer for `error`.
pub fn answer(error: &impl HttpError) -> Response {
    let mut response = (
        error.status(),
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body(error),
    )
        .into_response();
    let headers = response.headers_mut();
    if let Some(seconds) = error.retry_after_seconds() {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if let Some(challenge) = error.challenge() {
        headers.insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("slow down")]
    struct Busy;

    impl HttpError for Busy {
        fn status(&self) -> StatusCode {
            StatusCode::TOO_MANY_REQUESTS
        }
        fn reason(&self) -> &'static str {
            "Busy"
        }
        fn retry_after_seconds(&self) -> Option<u64> {
            Some(3)
        }
    }

    #[tokio::test]
    async fn an_error_is_answered_with_its_status_words_reason_and_headers() {
        let response = answer(&Busy);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        assert!(response.headers().get(header::WWW_AUTHENTICATE).is_none());
        let bytes = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap_or_default();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        assert_eq!(
            body,
            serde_json::json!({"error": "slow down", "reason": "Busy"})
        );
    }
}
