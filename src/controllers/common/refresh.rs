//! "Fetch now": a parent whose annotation `sources.metahooks.io/requested-at` holds a
//! value not yet handled has its source fetched at once, not at the next interval, and
//! the handled value is recorded (in `status.lastHandledRequestedAt`; configsync writes an
//! annotation), as Flux does with `reconcile.fluxcd.io/requestedAt`.

use std::time::Duration;

use serde_json::Value;

use super::reading::Reads;
use crate::protocol::CompositeResponse;
use crate::source::{REQUESTED_AT, Refresh, SourceRequest};

/// Where the handled value goes in a composite parent's status.
pub const STATUS_FIELD: &str = "lastHandledRequestedAt";

/// Longest annotation value acted on (a timestamp, or a commit id from a pipeline).
const MAX_TOKEN_LEN: usize = 256;

/// What to record after a sync. (While the fetch for a new value runs, the server asks
/// for the next sync soon: the call's reads say so, see `Requeue::for_sources`.)
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The handled value to write (the earlier one when nothing new was handled).
    pub handled: Option<String>,
}

/// The value the parent asks to be handled, if it is one not handled yet (`handled` is
/// what the parent records as handled).
pub fn new_request<'a>(parent: &'a Value, handled: Option<&str>) -> Option<&'a str> {
    let token = parent
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(REQUESTED_AT))
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty() && t.len() <= MAX_TOKEN_LEN)?;
    (Some(token) != handled).then_some(token)
}

/// What a composite parent's status records as handled.
pub fn recorded(parent: &Value) -> Option<&str> {
    parent
        .pointer(&format!("/status/{STATUS_FIELD}"))
        .and_then(Value::as_str)
}

/// Asks the engine to fetch `request` now when `parent` asks for it, telling whether that
/// fetch has been handled.
pub fn ask(
    reads: &mut Reads<'_>,
    request: &SourceRequest,
    interval: Duration,
    parent: &Value,
    handled: Option<&str>,
) -> Outcome {
    let Some(token) = new_request(parent, handled) else {
        return carried(handled);
    };
    match reads.fetch_now(request, interval, token) {
        Refresh::Handled => Outcome {
            handled: Some(token.to_owned()),
        },
        Refresh::Pending => carried(handled),
    }
}

/// Nothing new handled: the earlier value stays.
pub fn carried(handled: Option<&str>) -> Outcome {
    Outcome {
        handled: handled.map(str::to_owned),
    }
}

impl Outcome {
    /// Writes the handled value into the response's status.
    pub fn record(&self, response: &mut CompositeResponse) {
        if let (Some(handled), Some(Value::Object(status))) = (&self.handled, &mut response.status)
        {
            status.insert(STATUS_FIELD.to_owned(), Value::String(handled.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_a_new_value_is_a_request() {
        let parent = json!({"metadata": {"annotations": {REQUESTED_AT: "1700000000"}}});
        assert_eq!(new_request(&parent, None), Some("1700000000"));
        assert_eq!(new_request(&parent, Some("1600000000")), Some("1700000000"));
        assert_eq!(new_request(&parent, Some("1700000000")), None);
        assert_eq!(new_request(&json!({"metadata": {}}), None), None);
        let long = json!({"metadata": {"annotations": {REQUESTED_AT: "x".repeat(300)}}});
        assert_eq!(new_request(&long, None), None);
    }

    #[test]
    fn the_handled_value_lands_in_status() {
        let mut response = CompositeResponse::new(json!({"phase": "Ready"}), Vec::new());
        carried(None).record(&mut response);
        assert_eq!(response.status, Some(json!({"phase": "Ready"})));
        carried(Some("t1")).record(&mut response);
        assert_eq!(
            response.status,
            Some(json!({"phase": "Ready", STATUS_FIELD: "t1"}))
        );
    }
}
