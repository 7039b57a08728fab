//! The in-flight slot and the deadline.
//!
//! A call takes its slot once its whole body is in, and the slot holds the body's bytes
//! with it. Both are free again only when the work has really stopped (the handler hands
//! a clone to the computation, so a call answered 503 at its deadline keeps counting
//! until its work ends) and the answer has been sent or dropped (a client that does not
//! read its answers cannot pile them up). tower's concurrency layers let their permit go
//! when the response future ends, before either, which is why this layer is ours.

use std::sync::Arc;

use axum::body::Body;
use axum::response::Response;
use tokio::sync::OwnedSemaphorePermit;

use super::{Call, Rest, Step};
use crate::server::error::CallError;
use crate::server::{budget, millis};

/// What a call holds while it is answered: its in-flight slot and its body's share of
/// the byte budget, shared by the call's work and its response.
pub type Slot = Arc<Held>;

/// Permits that are let go together when the last holder drops them.
pub struct Held {
    _call: OwnedSemaphorePermit,
    _body: budget::Held,
}

/// Takes an in-flight slot for a call whose body is in (429 with `Retry-After` when none
/// is free), hands it inward and holds it until the response body is gone.
#[derive(Debug, Clone, Copy)]
pub struct InFlight;

impl Step for InFlight {
    async fn run<N: Rest>(self, call: &mut Call, next: N) -> Response {
        let Some(body) = call.bytes.take() else {
            return call.not_admitted();
        };
        let Ok(permit) = call.state.in_flight.clone().try_acquire_owned() else {
            let error = CallError::Overloaded {
                limit: call.state.limits.max_in_flight,
                retry_after_seconds: call.state.limits.retry_after_seconds,
            };
            return call.refuse(error);
        };
        let slot: Slot = Arc::new(Held {
            _call: permit,
            _body: body,
        });
        call.slot = Some(slot.clone());
        let response = next.run(call).await;
        held_until_sent(response, slot)
    }
}

/// Answers 503 when the rest of the stack has no answer by the call's deadline (counted
/// from when it came in). The handler's work, if it started, runs on and keeps its slot.
#[derive(Debug, Clone, Copy)]
pub struct Deadline;

impl Step for Deadline {
    async fn run<N: Rest>(self, call: &mut Call, next: N) -> Response {
        let limit = call.state.limits.deadline;
        let due = call.started + limit;
        call.deadline = Some(due);
        match tokio::time::timeout_at(due.into(), next.run(call)).await {
            Ok(response) => response,
            Err(_) => call.refuse(CallError::DeadlineExceeded {
                deadline_ms: millis(limit),
            }),
        }
    }
}

/// The response with `slot` held until hyper has sent its body or dropped it.
pub fn held_until_sent(response: Response, slot: Slot) -> Response {
    response.map(|body| {
        Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
            // The closure owns the slot, so it lives exactly as long as the body.
            let _held = &slot;
            frame
        }))
    })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn the_slot_and_the_body_bytes_are_held_until_the_response_body_is_gone() {
        let slots = Arc::new(tokio::sync::Semaphore::new(1));
        let bytes = budget::BodyBudget::new(100, 100);
        let client = IpAddr::from([10, 0, 0, 1]);
        let held = |slots: &Arc<tokio::sync::Semaphore>| {
            let mut body = bytes.start(client);
            bytes.take(&mut body, 40).unwrap();
            Arc::new(Held {
                _call: slots.clone().try_acquire_owned().unwrap(),
                _body: body,
            })
        };
        let response = held_until_sent(Response::new(Body::from("answer")), held(&slots));
        assert_eq!(slots.available_permits(), 0, "taken while the body exists");
        assert_eq!(bytes.held(), 40);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"answer");
        assert_eq!(
            slots.available_permits(),
            1,
            "free once the body is consumed"
        );
        assert_eq!(bytes.held(), 0);

        let unsent = held_until_sent(Response::new(Body::from("never read")), held(&slots));
        assert_eq!(slots.available_permits(), 0);
        drop(unsent);
        assert_eq!(
            slots.available_permits(),
            1,
            "free once the body is dropped"
        );
        assert_eq!(bytes.held(), 0);
    }
}
