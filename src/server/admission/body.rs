//! The body layer: the whole request body read within its size limit, its read timeout
//! and the byte budget (the port's total and the client's share), hashed as it arrives.
//!
//! A body holds one permit of the budget per byte as it arrives, so a sender that
//! trickles its body holds only what it has sent, and never an in-flight slot (that is
//! taken once the whole body is in). A declared length over the limit is refused without
//! reading a byte; a piece the budget cannot hold now is refused at once (429) rather
//! than waited for, so a stalled sender never delays anyone else.

use std::net::IpAddr;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use http_body_util::{BodyExt, LengthLimitError, Limited};

use super::{Call, Rest, Step};
use crate::error::{BadRequest, HookError};
use crate::server::answers::{CallHasher, CallKey};
use crate::server::budget::{self, OverBudget};
use crate::server::error::CallError;
use crate::server::{HookState, millis};

/// A body read whole: its pieces and the call's key (route and body hashed).
pub struct Received {
    /// The body as it arrived.
    pub body: Pieces,
    /// The call's key in the answer memo.
    pub key: CallKey,
}

/// A request body as it arrived, in the pieces it was read in. A remembered answer only
/// needs its hash, so the pieces are joined only when the body is to be parsed (at 2 MiB,
/// a copy that costs more than the hash).
pub struct Pieces(Vec<Bytes>);

impl Pieces {
    /// The pieces as one buffer (copied only when there are several).
    pub fn joined(mut self) -> Bytes {
        if self.0.len() <= 1 {
            return self.0.pop().unwrap_or_default();
        }
        let mut whole = Vec::with_capacity(self.0.iter().map(Bytes::len).sum());
        for piece in &self.0 {
            whole.extend_from_slice(piece);
        }
        Bytes::from(whole)
    }
}

/// Reads the call's body whole, then hands it inward (`Call::received`, and what it
/// holds of the budget in `Call::bytes`).
#[derive(Debug, Clone, Copy)]
pub struct ReadBody;

impl Step for ReadBody {
    async fn run<N: Rest>(self, call: &mut Call, next: N) -> Response {
        let Some(route) = call.route() else {
            return call.not_admitted();
        };
        let body = std::mem::take(call.request.body_mut());
        let mut hasher = CallHasher::new(&route.key);
        let read = read_within(
            &call.state,
            call.request.headers(),
            (call.client, body),
            &mut hasher,
        )
        .await;
        let (body, held) = match read {
            Ok(read) => read,
            Err(error) => return call.refuse(error),
        };
        call.received = Some(Received {
            body,
            key: hasher.finish(),
        });
        call.bytes = Some(held);
        next.run(call).await
    }
}

/// Reads the whole body within the size limit, the body-read timeout and the byte
/// budget, feeding each piece to `hasher` as it arrives; returns it with what it holds of
/// the budget.
async fn read_within(
    state: &HookState,
    headers: &HeaderMap,
    (client, body): (IpAddr, Body),
    hasher: &mut CallHasher,
) -> Result<(Pieces, budget::Held), CallError> {
    let limit = state.limits.body_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(CallError::TooLarge { limit });
    }
    let over_budget = |which| match which {
        OverBudget::Total => CallError::BodiesOverBudget {
            budget: state.limits.body_budget_bytes,
            retry_after_seconds: state.limits.retry_after_seconds,
        },
        OverBudget::Client => CallError::ClientOverBudget {
            share: state.limits.body_budget_per_client_bytes,
            retry_after_seconds: state.limits.retry_after_seconds,
        },
    };
    if let Some(length) = declared {
        state
            .body_budget
            .fits(client, length)
            .map_err(over_budget)?;
    }
    let timeout = state.limits.body_read_timeout;
    let read = async {
        let mut body = Limited::new(body, limit);
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut held = state.body_budget.start(client);
        while let Some(frame) = body.frame().await {
            if let Ok(piece) = frame?.into_data() {
                if let Err(which) = state.body_budget.take(&mut held, piece.len()) {
                    return Ok(Err(over_budget(which)));
                }
                hasher.update(&piece);
                pieces.push(piece);
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Ok((Pieces(pieces), held)))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(read)) => read,
        Ok(Err(error)) if error.downcast_ref::<LengthLimitError>().is_some() => {
            Err(CallError::TooLarge { limit })
        }
        Ok(Err(error)) => {
            Err(HookError::BadRequest(BadRequest::Unreadable(error.to_string())).into())
        }
        Err(_) => Err(CallError::SlowBody {
            timeout_ms: millis(timeout),
        }),
    }
}
