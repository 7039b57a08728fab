//! The one place a [`HookError`] becomes an HTTP reply: a status code and
//! `{"error": "<sentence>"}`, which Metacontroller copies into the parent's Warning event.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::error::HookError;

impl HookError {
    /// The HTTP status a hook error is answered with.
    pub fn status_code(&self) -> StatusCode {
        match self {
            HookError::BadRequest(_) => StatusCode::BAD_REQUEST,
            HookError::NotFound { .. } => StatusCode::NOT_FOUND,
            HookError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            HookError::Overloaded { .. } => StatusCode::TOO_MANY_REQUESTS,
            HookError::Unauthorized => StatusCode::UNAUTHORIZED,
            HookError::DeadlineExceeded { .. } => StatusCode::SERVICE_UNAVAILABLE,
            HookError::SlowBody { .. } => StatusCode::REQUEST_TIMEOUT,
            HookError::Saturated(_) => StatusCode::SERVICE_UNAVAILABLE,
            HookError::NeedsComputeThread | HookError::Internal(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        }
    }
}

impl IntoResponse for HookError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.to_string() }).to_string();
        let mut response = (
            self.status_code(),
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response();
        let headers = response.headers_mut();
        match self {
            // Metacontroller re-queues after Retry-After; without it, it retries at once.
            HookError::Overloaded {
                retry_after_seconds,
                ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after_seconds));
            }
            HookError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"metahooks\""),
                );
            }
            _ => {}
        }
        response
    }
}
