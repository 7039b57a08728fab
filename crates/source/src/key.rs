//! The engine's keys as values: which fetch requests share ([`RemoteKey`]) and which
//! snapshot is a request's own ([`SourceKey`]). Compared and hashed field by field,
//! never joined into text.

use serde::{Deserialize, Serialize};

/// How a remote is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Protocol {
    /// A git repository (any transport git speaks).
    Git,
    /// One file over HTTP(S).
    Http,
}

/// The fetch shared by every request for the same URL, ref and credential holder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RemoteKey {
    /// Git or HTTP.
    pub protocol: Protocol,
    /// The URL as the parent wrote it.
    pub url: String,
    /// The git ref asked for (None: the remote's default branch; always None for HTTP).
    pub reference: Option<String>,
    /// The semver range whose highest tag is fetched (git; instead of `reference`).
    pub semver: Option<String>,
    /// Whose credentials and client certificate: a keyed fingerprint of each (empty
    /// without), so different holders never share a fetch.
    pub holder: String,
}

/// One request's snapshot: its remote, and the path in it (git; None for HTTP).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SourceKey {
    /// The fetch the snapshot comes from.
    pub remote: RemoteKey,
    /// The file or directory read from the remote's commit.
    pub path: Option<String>,
    /// A digest of the keys its signatures are checked against (None: not checked).
    pub trust: Option<String>,
}
