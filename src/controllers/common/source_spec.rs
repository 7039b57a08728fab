//! The spec fields that name a config source (git, HTTP, credentials), shared by every
//! controller that fetches through the source engine, and their reading into a
//! [`SourceRequest`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::problem::Problem;
use super::secrets;
use crate::protocol::ObjectMap;
use crate::source::{Credentials, Location, SourceRequest};

/// A file or directory in a git repository.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: https, or ssh (`ssh://user@host/path`, `user@host:path`) where
    /// the server allows it.
    pub url: String,
    /// Branch, tag or commit; the remote's HEAD when unset.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// File or directory inside the repository (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Secret with `username`/`password` or `token` (https), or `identity` and
    /// `known_hosts` (ssh; `password` unlocks an encrypted key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// One file over HTTP(S).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// The file's URL (https).
    pub url: String,
    /// Secret with `username`/`password` or `token`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// A Secret in the parent's namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
}

impl GitSource {
    /// Where this source is.
    pub fn location(&self) -> Location {
        git_location(&self.url, self.reference.as_deref(), self.path.as_deref())
    }
}

/// A git location as specs write it: an empty `ref` means the remote's HEAD, no `path`
/// the repository's root.
pub fn git_location(url: &str, reference: Option<&str>, path: Option<&str>) -> Location {
    Location::Git {
        url: url.to_owned(),
        reference: reference.filter(|r| !r.is_empty()).map(str::to_owned),
        path: path.unwrap_or_default().to_owned(),
    }
}

impl HttpSource {
    /// Where this source is.
    pub fn location(&self) -> Location {
        Location::Http {
            url: self.url.clone(),
        }
    }
}

/// The request for `location`, with the credentials of `secret` read from the related
/// Secret in the parent's `namespace`.
///
/// # Errors
/// The Secret is missing or holds no usable credentials.
pub fn request(
    location: Location,
    secret: Option<&SecretRef>,
    related: &ObjectMap,
    namespace: &str,
) -> Result<SourceRequest, Problem> {
    let credentials: Option<Credentials> = match secret {
        Some(secret) => Some(secrets::credentials(related, namespace, &secret.name)?),
        None => None,
    };
    Ok(SourceRequest {
        location,
        namespace: namespace.to_owned(),
        credentials,
    })
}
