//! `metav1.Condition`-shaped status conditions with stable transition times.
//!
//! Metacontroller writes the parent's status whenever our answer differs from what is
//! stored, and a write triggers another sync; a timestamp that moved on every call would
//! loop forever. So a condition keeps the `lastTransitionTime` it had in the observed
//! parent status until its `status` flips; only then does it take `now`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::reason::Reason;

/// A status condition as stored in the parent (`metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// What the condition is about (`Ready`, `Fetched`, …).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason of the status.
    #[serde(default)]
    pub reason: String,
    /// A sentence for people.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default)]
    pub last_transition_time: String,
    /// The parent generation this condition describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// What a condition is about: every condition type our controllers write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionType {
    /// The children are in place and serving.
    Ready,
    /// The definition is valid (APIMock).
    Validated,
    /// The source was read (APIMock and MonitoredService from a source).
    Fetched,
    /// What rolls is signed by a trusted key (a git source with `verify`).
    Verified,
    /// The fetched config could be turned into a ConfigMap (MonitoredService).
    ConfigValid,
    /// The Deployment's own `Available` condition holds.
    Available,
    /// The children fit Metacontroller's client-side apply (APIMock).
    FitsClientSideApply,
    /// The Ingress the spec asks for is made (APIMock with `spec.ingress`).
    Exposed,
}

impl ConditionType {
    /// The `type` as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Validated => "Validated",
            ConditionType::Fetched => "Fetched",
            ConditionType::Verified => "Verified",
            ConditionType::ConfigValid => "ConfigValid",
            ConditionType::Available => "Available",
            ConditionType::FitsClientSideApply => "FitsClientSideApply",
            ConditionType::Exposed => "Exposed",
        }
    }
}

/// A condition as a controller decides it, before the transition time is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// What the condition is about.
    pub type_: ConditionType,
    /// Whether it holds.
    pub status: bool,
    /// CamelCase reason.
    pub reason: Reason,
    /// A sentence for people.
    pub message: String,
}

impl Decided {
    /// A condition as decided now.
    pub fn new(
        type_: ConditionType,
        status: bool,
        reason: Reason,
        message: impl Into<String>,
    ) -> Decided {
        Decided {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// The conditions found in an observed parent's `status.conditions`; malformed entries
/// are skipped (they will simply be rewritten).
pub fn observed(parent: &Value) -> Vec<Condition> {
    parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|item| Condition::deserialize(item).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The longest message a condition may carry: `metav1.Condition`'s limit and our CRDs'
/// (`maxLength` counts characters; a message cut to this many bytes is within it). The
/// API server refuses a whole status with one longer message, and the parent would
/// then show nothing at all.
pub const MAX_MESSAGE_BYTES: usize = 32 * 1024;

/// `text` quoted for a message, with at most [`QUOTED_CHARS`] of its characters: names
/// and references come from CRs and repositories, and one can be as long as the file
/// that holds it.
pub fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => format!("{text:?}"),
        Some((cut, _)) => format!(
            "{:?}… ({} characters in all)",
            &text[..cut],
            text.chars().count()
        ),
    }
}

/// How much of a quoted name or reference a message shows.
pub const QUOTED_CHARS: usize = 200;

/// `message` within [`MAX_MESSAGE_BYTES`], cut on a character boundary with a note of
/// how long it was.
fn within_limit(mut message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let note = format!("… (cut: {} bytes in all)", message.len());
    let mut cut = MAX_MESSAGE_BYTES - note.len();
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    message.truncate(cut);
    message.push_str(&note);
    message
}

/// Turns decided conditions into status conditions, keeping each one's transition time
/// from `previous` unless its status flipped (or it is new), in which case it gets `now`.
/// A message longer than the API server accepts is cut (see [`MAX_MESSAGE_BYTES`]).
pub fn settle(
    decided: Vec<Decided>,
    previous: &[Condition],
    now: &str,
    generation: Option<i64>,
) -> Vec<Condition> {
    decided
        .into_iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" };
            let last_transition_time = previous
                .iter()
                .find(|p| {
                    p.type_ == d.type_.as_str()
                        && p.status == status
                        && !p.last_transition_time.is_empty()
                })
                .map_or_else(|| now.to_owned(), |p| p.last_transition_time.clone());
            Condition {
                type_: d.type_.as_str().to_owned(),
                status: status.to_owned(),
                reason: d.reason.as_str().to_owned(),
                message: within_limit(d.message),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

/// RFC 3339 at whole seconds, the precision `metav1.Time` keeps.
pub fn format_time(now: jiff::Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `metav1.Condition` list, merged by `type` (as `kubectl` and SSA expect).
/// Used by the CRDs of every parent with conditions (`#[schemars(schema_with)]`).
pub fn conditions_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string", "maxLength": 1024},
                "message": {"type": "string", "maxLength": 32768},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64", "minimum": 0}
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn previous() -> Vec<Condition> {
        observed(&json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"},
            {"type": "broken"}
        ]}}))
    }

    #[test]
    fn unchanged_status_keeps_its_transition_time() {
        let settled = settle(
            vec![Decided::new(
                ConditionType::Ready,
                true,
                Reason::MockReady,
                "m",
            )],
            &previous(),
            "NOW",
            Some(2),
        );
        assert_eq!(settled[0].last_transition_time, "2020-01-01T00:00:00Z");
        assert_eq!(settled[0].reason, "MockReady");
        assert_eq!(settled[0].observed_generation, Some(2));
    }

    #[test]
    fn flipped_or_new_condition_takes_now() {
        let settled = settle(
            vec![
                Decided::new(ConditionType::Ready, false, Reason::NoMock, ""),
                Decided::new(ConditionType::Validated, true, Reason::ValidDefinition, ""),
            ],
            &previous(),
            "NOW",
            None,
        );
        assert_eq!(settled[0].last_transition_time, "NOW");
        assert_eq!(settled[1].last_transition_time, "NOW");
    }

    #[test]
    fn formats_whole_seconds() {
        let ts: jiff::Timestamp = "2026-11-30T10:00:01.75Z".parse().unwrap();
        assert_eq!(format_time(ts), "2026-11-30T10:00:01Z");
    }

    #[test]
    fn a_message_is_cut_to_what_the_api_server_accepts() {
        let decided = |message: String| {
            vec![Decided::new(
                ConditionType::Validated,
                false,
                Reason::InvalidDocument,
                message,
            )]
        };
        let settled = |message: String| {
            settle(decided(message), &[], "2020-01-01T00:00:00Z", None)
                .remove(0)
                .message
        };
        // Two-byte characters across the cut: it must land between them.
        let long = format!("a.yaml: {}", "é".repeat(40_000));
        let cut = settled(long.clone());
        assert!(cut.len() <= MAX_MESSAGE_BYTES, "{} bytes", cut.len());
        assert!(
            cut.len() > MAX_MESSAGE_BYTES - 64,
            "as much as fits is kept"
        );
        assert!(cut.starts_with("a.yaml: é"));
        assert!(
            cut.ends_with(&format!("… (cut: {} bytes in all)", long.len())),
            "{}",
            &cut[cut.len() - 40..]
        );
        // The schema our CRDs declare agrees (maxLength counts characters).
        let limit = conditions_schema(&mut schemars::SchemaGenerator::default())
            .as_value()
            .pointer("/items/properties/message/maxLength")
            .and_then(Value::as_u64);
        assert_eq!(limit, Some(MAX_MESSAGE_BYTES as u64));
        let exact = "x".repeat(MAX_MESSAGE_BYTES);
        assert_eq!(
            settled(exact.clone()),
            exact,
            "a message that fits is kept whole"
        );
    }

    #[test]
    fn a_long_name_is_quoted_in_part() {
        assert_eq!(quoted("pets.yaml"), "\"pets.yaml\"");
        let long = "d/".repeat(1_000);
        let shown = quoted(&long);
        assert!(
            shown.starts_with(&format!("{:?}", &long[..QUOTED_CHARS])),
            "{shown}"
        );
        assert!(shown.ends_with("… (2000 characters in all)"), "{shown}");
        assert_eq!(
            quoted(&"é".repeat(QUOTED_CHARS)),
            format!("{:?}", "é".repeat(QUOTED_CHARS))
        );
    }
}
