//! Metacontroller's webhook wire format and the facts around it (hook names, the
//! annotation its apply writes), shared by the metahooks server and its emulator.
//!
//! Types here are serde-only: lenient when reading what Metacontroller sends (unknown
//! fields, `null` maps, both v1 and v2 object keys) and exact when writing what it reads
//! back (only the documented top-level fields, because v2 hooks decode strictly).
//! The logic that fills a response lives in the server's `controllers`; the HTTP edge in
//! its `server`. [`yaml`] is the codec for trusted manifests both read.
//! Reference: Metacontroller's hook documentation (`docs/src/api/hook.md`, the
//! CompositeController and DecoratorController API pages) and its `pkg/controller`.

#![warn(missing_docs)]

mod composite;
mod customize;
mod decorator;
mod objects;
mod version;
pub mod yaml;

pub use composite::{CompositeRequest, CompositeResponse, StatusError};
pub use customize::{CustomizeRequest, CustomizeResponse, RelatedResourceRule};
pub use decorator::{DecoratorRequest, DecoratorResponse};
pub use objects::{ObjectMap, TypeKey, object_name, object_namespace};
pub use version::HookVersion;

/// Where Metacontroller's client-side apply records what it applied last, on every
/// object it writes (pkg/dynamic/apply); absent under server-side apply.
pub const LAST_APPLIED_ANNOTATION: &str = "metacontroller.k8s.io/last-applied-configuration";

/// Metadata the API server sets on its own on every object it stores. A child in a
/// hook's answer that carries one asks Metacontroller to apply it: a stale
/// `resourceVersion` or a `uid` makes the write fail, the others are fought over.
pub const SERVER_POPULATED_METADATA: [&str; 5] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
];

/// Metadata a live object may carry that a desired object never should: the
/// server-populated fields, the deletion mark, the legacy `selfLink`, and the
/// `ownerReferences` Metacontroller adds itself.
pub const NOT_DESIRED_METADATA: [&str; 9] = [
    SERVER_POPULATED_METADATA[0],
    SERVER_POPULATED_METADATA[1],
    SERVER_POPULATED_METADATA[2],
    SERVER_POPULATED_METADATA[3],
    SERVER_POPULATED_METADATA[4],
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "ownerReferences",
];

use serde::{Deserialize, Deserializer};

/// Reads `null` (or an absent field, together with `#[serde(default)]`) as the type's
/// default, since Go marshals empty maps and slices as `null` in places.
pub(crate) fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Which hook of a controller is being called; the last path segment of a hook URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    /// The sync hook.
    Sync,
    /// The finalize hook.
    Finalize,
    /// The customize hook.
    Customize,
}

impl Hook {
    /// Every hook, in the order Metacontroller documents them.
    pub const ALL: [Hook; 3] = [Hook::Sync, Hook::Finalize, Hook::Customize];

    /// The hook's URL segment.
    pub fn as_str(self) -> &'static str {
        match self {
            Hook::Sync => "sync",
            Hook::Finalize => "finalize",
            Hook::Customize => "customize",
        }
    }

    /// The hook a URL segment names.
    pub fn from_segment(segment: &str) -> Option<Hook> {
        match segment {
            "sync" => Some(Hook::Sync),
            "finalize" => Some(Hook::Finalize),
            "customize" => Some(Hook::Customize),
            _ => None,
        }
    }
}

impl std::fmt::Display for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
