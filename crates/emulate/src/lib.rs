//! A Metacontroller emulator: an in-memory cluster, and Metacontroller's reconcile loop
//! over it, calling hooks exactly as Metacontroller does (request shape, v1/v2 keys,
//! `finalizing`, `related` from customize rules, the customize cache, both apply
//! strategies) and applying their answers with its rules. It powers `metahooks emulate`
//! and metahooks' integration tests, and works for any hook server: over HTTP, or in
//! process through [`InProcess`] (see `examples/axum_in_process.rs`).
//!
//! Everything Metacontroller would reject, or would loop on, becomes a [`Finding`] that
//! names the rule it breaks.

#![warn(missing_docs)]

mod answers;
pub mod ci;
pub mod cluster;
pub mod findings;
pub mod objects;
pub mod output;
pub mod registration;
pub mod story;
pub mod tls;
pub mod transport;

use serde_json::Value;

pub use self::cluster::{
    CUSTOMIZE_CACHE_TTL, CallRecord, Emulator, LAST_APPLIED_ANNOTATION, RoundReport, Violation,
    describe,
};
pub use self::findings::{Finding, Origin, Rule, Subject};
pub use self::objects::{labels_match, three_way};
pub use self::registration::{Kinds, Registration};
pub use self::transport::{Answer, InProcess, Transport};

/// (apiVersion, kind, namespace, name)
pub type Key = (String, String, String, String);

/// The key an object is stored under: (apiVersion, kind, namespace, name).
pub fn key_of(object: &Value) -> Key {
    let field = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    (
        field("/apiVersion"),
        field("/kind"),
        field("/metadata/namespace"),
        field("/metadata/name"),
    )
}
