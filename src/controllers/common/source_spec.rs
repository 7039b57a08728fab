//! The spec fields that name a config source (git, HTTP, credentials), shared by every
//! controller that fetches through the source engine, and their reading into a
//! [`SourceRequest`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::problem::Problem;
use super::reason::Reason;
use super::secrets;
use crate::protocol::ObjectMap;
use crate::source::policy::check_repo_path;
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
    /// Secret with `ca.crt` (a CA trusted besides the public roots and the server's
    /// `--source-ca-file`) and/or `tls.crt` + `tls.key` (a client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<SecretRef>,
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
    /// Secret with `ca.crt` (a CA trusted besides the public roots and the server's
    /// `--source-ca-file`) and/or `tls.crt` + `tls.key` (a client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<SecretRef>,
}

/// A Secret in the parent's namespace.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct SecretRef {
    /// The Secret's name.
    pub name: String,
}

impl GitSource {
    /// Where this source is.
    ///
    /// # Errors
    /// `path` climbs out of the repository or is absolute ([`git_location`]).
    pub fn location(&self) -> Result<Location, Problem> {
        git_location(
            &self.url,
            self.reference.as_deref(),
            self.path.as_deref(),
            "spec.source.git.path",
        )
    }
}

/// A git location as specs write it: an empty `ref` means the remote's HEAD, no `path`
/// the repository's root. The path is normalised (`./conf/`, `conf//` and `conf` are one
/// path, so one read and one cache entry however a parent spells it).
///
/// # Errors
/// The path (the field `path_field`) is absolute or climbs out of the repository.
pub fn git_location(
    url: &str,
    reference: Option<&str>,
    path: Option<&str>,
    path_field: &str,
) -> Result<Location, Problem> {
    let path = check_repo_path(path.unwrap_or_default()).map_err(|refused| {
        Problem::new(
            Reason::Fetch(refused.reason()),
            format!("{path_field}: {refused}"),
        )
    })?;
    Ok(Location::Git {
        url: url.to_owned(),
        reference: reference.filter(|r| !r.is_empty()).map(str::to_owned),
        path,
    })
}

impl HttpSource {
    /// Where this source is.
    pub fn location(&self) -> Location {
        Location::Http {
            url: self.url.clone(),
        }
    }
}

/// The Secrets a source names: its credentials and its certificates.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceSecrets<'a> {
    /// `secretRef`.
    pub credentials: Option<&'a SecretRef>,
    /// `certSecretRef`.
    pub certificates: Option<&'a SecretRef>,
}

impl SourceSecrets<'_> {
    /// Their names, for the customize hook's rule.
    pub fn names(&self) -> Vec<String> {
        [self.credentials, self.certificates]
            .into_iter()
            .flatten()
            .map(|secret| secret.name.clone())
            .collect()
    }
}

impl GitSource {
    /// The Secrets this source names.
    pub fn secrets(&self) -> SourceSecrets<'_> {
        SourceSecrets {
            credentials: self.secret_ref.as_ref(),
            certificates: self.cert_secret_ref.as_ref(),
        }
    }
}

impl HttpSource {
    /// The Secrets this source names.
    pub fn secrets(&self) -> SourceSecrets<'_> {
        SourceSecrets {
            credentials: self.secret_ref.as_ref(),
            certificates: self.cert_secret_ref.as_ref(),
        }
    }
}

/// The request for `location`, with the credentials and certificates of `secrets` read
/// from the related Secrets in the parent's `namespace`.
///
/// # Errors
/// A Secret is missing or holds nothing usable.
pub fn request(
    location: Location,
    secrets: SourceSecrets<'_>,
    related: &ObjectMap,
    namespace: &str,
) -> Result<SourceRequest, Problem> {
    let credentials: Option<Credentials> = match secrets.credentials {
        Some(secret) => Some(secrets::credentials(related, namespace, &secret.name)?),
        None => None,
    };
    let tls = match secrets.certificates {
        Some(secret) => Some(secrets::tls_material(related, namespace, &secret.name)?),
        None => None,
    };
    Ok(SourceRequest {
        tls,
        location,
        namespace: namespace.to_owned(),
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_of(path: &str) -> Result<String, Problem> {
        match git_location("https://git.example/r.git", None, Some(path), "spec.path")? {
            Location::Git { path, .. } => Ok(path),
            Location::Http { .. } => Err(Problem::new(Reason::InvalidSpec, "not git")),
        }
    }

    /// Every spelling of a path is one path, so one read and one cache entry: spellings
    /// once let one parent make a shared remote's worker read the same files many times.
    #[test]
    fn a_path_is_normalised_before_it_names_anything() {
        for spelling in ["conf", "./conf", "././conf/", "conf//", "./conf/./"] {
            assert_eq!(
                path_of(spelling).ok().as_deref(),
                Some("conf"),
                "{spelling}"
            );
        }
        assert_eq!(path_of("").ok().as_deref(), Some(""));
        assert_eq!(path_of("./").ok().as_deref(), Some(""));
        assert_eq!(path_of("a/./b").ok().as_deref(), Some("a/b"));
        for escaping in ["../conf", "a/../../b", "/etc", "a\\b"] {
            let refused = path_of(escaping).err();
            let problem = refused.unwrap_or_else(|| panic!("{escaping} is refused"));
            assert_eq!(problem.reason, Reason::Fetch("PathRefused"), "{escaping}");
            assert!(
                problem.message.starts_with("spec.path: "),
                "{}",
                problem.message
            );
        }
    }
}
