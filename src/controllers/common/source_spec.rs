//! The spec fields that name a config source (git, HTTP, credentials), shared by every
//! controller that fetches through the source engine, and their reading into a
//! [`SourceRequest`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::bounds;
use super::problem::Problem;
use super::reason::Reason;
use super::secrets;
use crate::protocol::ObjectMap;
use crate::source::policy::check_repo_path;
use crate::source::signature::VerifyMode;
use crate::source::tag_range::{MAX_RANGE_BYTES as TAG_RANGE_BYTES, TagRange};
use crate::source::{Credentials, Location, SourceRequest};

/// A file or directory in a git repository: a MonitoredService's config or an APIMock's
/// definition (the one type both specs use; configsync reads the same fields from
/// annotations).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitSource {
    /// Repository URL: https, or ssh (`ssh://user@host/path`, `user@host:path`) where
    /// the server allows it.
    #[schemars(length(max = 2048))]
    pub url: String,
    /// Branch, tag or commit; the remote's HEAD when unset.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub reference: Option<String>,
    /// A semver range (`>=1.2.0 <2.0.0`, `^1.4`, `~2.1 || ^3`): the highest tag whose
    /// version (a leading `v` allowed) is in it, picked again at each poll; pre-releases
    /// only when the range names one. Instead of `ref`, never with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub semver: Option<String>,
    /// File or directory inside the repository (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
    /// APIMock only: the root document inside a directory `path`; by default the first
    /// of openapi.yaml, openapi.yml, openapi.json, swagger.yaml, swagger.yml, swagger.json.
    /// A MonitoredService refuses it (its config is every file under `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub root: Option<String>,
    /// Secret with `username`/`password` or `token` (https), or `identity` and
    /// `known_hosts` (ssh; `password` unlocks an encrypted key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
    /// Secret with `ca.crt` (a CA trusted besides the public roots and the server's
    /// `--source-ca-file`) and/or `tls.crt` + `tls.key` (a client certificate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<SecretRef>,
    /// Roll only what is signed by a trusted key: the commit (`HEAD`), the annotated tag
    /// the ref names (`Tag`), or both (`TagAndHEAD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<GitVerify>,
}

/// Signature verification of a git source (Flux's `spec.verify`).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitVerify {
    /// What must be signed: `HEAD` (the commit), `Tag` (the annotated tag the ref
    /// names), `TagAndHEAD` (both).
    #[serde(default = "GitVerify::default_mode")]
    #[schemars(extend("enum" = ["HEAD", "Tag", "TagAndHEAD"]))]
    pub mode: String,
    /// Secret in the parent's namespace with the trusted keys: armored OpenPGP public
    /// keys under names ending in `.asc`, SSH keys in git's `allowed_signers` format
    /// under `allowed_signers`.
    pub secret_ref: SecretRef,
}

impl GitVerify {
    fn default_mode() -> String {
        "HEAD".to_owned()
    }

    /// The mode, or the problem naming `field`.
    ///
    /// # Errors
    /// The mode is not one of the three.
    pub fn mode(&self, field: &str) -> Result<VerifyMode, Problem> {
        VerifyMode::parse(&self.mode).ok_or_else(|| {
            Problem::new(
                Reason::InvalidSpec,
                format!(
                    "{field}.mode is {:?}; it is one of HEAD, Tag, TagAndHEAD",
                    self.mode
                ),
            )
        })
    }
}

/// One file over HTTP(S).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// The file's URL (https).
    #[schemars(length(max = 2048))]
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
    #[schemars(length(max = 253))]
    pub name: String,
}

impl GitSource {
    /// Where this source is; `field` names the source in messages (`spec.source.git`).
    ///
    /// # Errors
    /// `path` climbs out of the repository or is absolute ([`git_location`]).
    pub fn location(&self, field: &str) -> Result<Location, Problem> {
        git_location(
            &self.url,
            GitPick {
                reference: self.reference.as_deref(),
                semver: self.semver.as_deref(),
            },
            self.path.as_deref(),
            &GitFields::under(field),
        )
    }
}

/// What a spec calls the fields of a git source, for the messages that name them.
pub struct GitFields {
    /// The repository URL's field.
    pub url: String,
    /// The ref's field.
    pub reference: String,
    /// The semver range's field.
    pub semver: String,
    /// The path's field.
    pub path: String,
}

impl GitFields {
    /// `url`, `ref` and `path` under `prefix` (`spec.source.git`).
    pub fn under(prefix: &str) -> GitFields {
        GitFields {
            url: format!("{prefix}.url"),
            reference: format!("{prefix}.ref"),
            semver: format!("{prefix}.semver"),
            path: format!("{prefix}.path"),
        }
    }
}

/// Which commit of a repository a spec asks for: a ref (none or empty: the remote's
/// HEAD) or a semver range over its tags, never both.
#[derive(Debug, Clone, Copy, Default)]
pub struct GitPick<'a> {
    /// `ref`.
    pub reference: Option<&'a str>,
    /// `semver`.
    pub semver: Option<&'a str>,
}

/// A git location as specs write it: an empty `ref` means the remote's HEAD, no `path`
/// the repository's root. The path is normalised (`./conf/`, `conf//` and `conf` are one
/// path, so one read and one cache entry however a parent spells it).
///
/// # Errors
/// A value is over its length limit ([`bounds`]), both a ref and a semver range are set,
/// the range does not parse, or the path is absolute or climbs out of the repository;
/// the message names the field (`fields`).
pub fn git_location(
    url: &str,
    pick: GitPick<'_>,
    path: Option<&str>,
    fields: &GitFields,
) -> Result<Location, Problem> {
    let reference = pick.reference;
    bounds::check(&fields.url, url, bounds::URL_BYTES)?;
    bounds::check_optional(&fields.reference, reference, bounds::REF_BYTES)?;
    bounds::check_optional(&fields.semver, pick.semver, TAG_RANGE_BYTES)?;
    let semver = match pick.semver {
        None => None,
        Some(range) => {
            if reference.is_some_and(|r| !r.is_empty()) {
                return Err(Problem::new(
                    Reason::InvalidSpec,
                    format!(
                        "{} and {} are both set; a source follows a ref or the highest tag in a range, not both",
                        fields.reference, fields.semver
                    ),
                ));
            }
            TagRange::parse(range).map_err(|problem| {
                Problem::new(Reason::InvalidSpec, format!("{}: {problem}", fields.semver))
            })?;
            Some(range.trim().to_owned())
        }
    };
    bounds::check_optional(&fields.path, path, bounds::PATH_BYTES)?;
    let path = check_repo_path(path.unwrap_or_default()).map_err(|refused| {
        Problem::new(
            Reason::Fetch(refused.reason()),
            format!("{}: {refused}", fields.path),
        )
    })?;
    Ok(Location::Git {
        url: url.to_owned(),
        reference: reference.filter(|r| !r.is_empty()).map(str::to_owned),
        semver,
        verify: None,
        path,
    })
}

impl HttpSource {
    /// Where this source is; `field` names the source in messages (`spec.source.http`).
    ///
    /// # Errors
    /// The URL is over its length limit.
    pub fn location(&self, field: &str) -> Result<Location, Problem> {
        http_location(&self.url, &format!("{field}.url"))
    }
}

/// An HTTP location, its URL (the field `field`) within its length limit.
///
/// # Errors
/// The URL is over its length limit.
pub fn http_location(url: &str, field: &str) -> Result<Location, Problem> {
    bounds::check(field, url, bounds::URL_BYTES)?;
    Ok(Location::Http {
        url: url.to_owned(),
    })
}

/// The Secrets a source names: its credentials and its certificates.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceSecrets<'a> {
    /// `secretRef`.
    pub credentials: Option<&'a SecretRef>,
    /// `certSecretRef`.
    pub certificates: Option<&'a SecretRef>,
    /// `verify`, and the field it is at (for messages).
    pub verify: Option<(&'a GitVerify, &'static str)>,
}

impl SourceSecrets<'_> {
    /// Their names, for the customize hook's rule.
    pub fn names(&self) -> Vec<String> {
        [self.credentials, self.certificates]
            .into_iter()
            .flatten()
            .chain(self.verify.as_ref().map(|(verify, _)| &verify.secret_ref))
            .map(|secret| secret.name.clone())
            .collect()
    }
}

impl GitSource {
    /// The Secrets this source names; `field` is its `verify` field
    /// (`spec.source.git.verify`), for messages.
    pub fn secrets(&self, field: &'static str) -> SourceSecrets<'_> {
        SourceSecrets {
            credentials: self.secret_ref.as_ref(),
            certificates: self.cert_secret_ref.as_ref(),
            verify: self.verify.as_ref().map(|verify| (verify, field)),
        }
    }
}

impl HttpSource {
    /// The Secrets this source names.
    pub fn secrets(&self) -> SourceSecrets<'_> {
        SourceSecrets {
            credentials: self.secret_ref.as_ref(),
            certificates: self.cert_secret_ref.as_ref(),
            verify: None,
        }
    }
}

/// The request for `location`, with the credentials and certificates of `secrets` read
/// from the related Secrets in the parent's `namespace`.
///
/// # Errors
/// A Secret is missing or holds nothing usable.
pub fn request(
    mut location: Location,
    secrets: SourceSecrets<'_>,
    related: &ObjectMap,
    namespace: &str,
) -> Result<SourceRequest, Problem> {
    for secret in [secrets.credentials, secrets.certificates]
        .into_iter()
        .flatten()
    {
        bounds::check("a Secret's name", &secret.name, bounds::NAME_BYTES)?;
    }
    let credentials: Option<Credentials> = match secrets.credentials {
        Some(secret) => Some(secrets::credentials(related, namespace, &secret.name)?),
        None => None,
    };
    let tls = match secrets.certificates {
        Some(secret) => Some(secrets::tls_material(related, namespace, &secret.name)?),
        None => None,
    };
    if let (Some((asked, field)), Location::Git { verify, .. }) = (secrets.verify, &mut location) {
        bounds::check(
            "a Secret's name",
            &asked.secret_ref.name,
            bounds::NAME_BYTES,
        )?;
        let mode = asked.mode(field)?;
        *verify = Some(secrets::trusted_keys(
            related,
            namespace,
            &asked.secret_ref.name,
            mode,
        )?);
    }
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
        let fields = GitFields::under("spec");
        match git_location(
            "https://git.example/r.git",
            GitPick::default(),
            Some(path),
            &fields,
        )? {
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

    #[test]
    fn every_field_of_a_source_is_bounded_where_it_enters() {
        let fields = GitFields::under("spec.source.git");
        let long_url = format!("https://git.example/{}", "a".repeat(bounds::URL_BYTES));
        let refused = git_location(&long_url, GitPick::default(), None, &fields).err();
        assert!(refused.is_some_and(|p| p.message.starts_with("spec.source.git.url is ")));
        let long_ref = "r".repeat(bounds::REF_BYTES + 1);
        let refused = git_location("https://g/r", named(&long_ref), None, &fields).err();
        assert!(refused.is_some_and(|p| p.message.starts_with("spec.source.git.ref is ")));
        let long_path = "p/".repeat(bounds::PATH_BYTES);
        let refused =
            git_location("https://g/r", GitPick::default(), Some(&long_path), &fields).err();
        assert!(refused.is_some_and(|p| p.message.starts_with("spec.source.git.path is ")));
        let refused = http_location(&long_url, "spec.config_repo").err();
        assert!(refused.is_some_and(|p| p.message.starts_with("spec.config_repo is ")));
        let long_range = format!(">={}", "1".repeat(TAG_RANGE_BYTES));
        let refused = git_location("https://g/r", range(&long_range), None, &fields).err();
        assert!(refused.is_some_and(|p| p.message.starts_with("spec.source.git.semver is ")));
    }

    fn named(reference: &str) -> GitPick<'_> {
        GitPick {
            reference: Some(reference),
            semver: None,
        }
    }

    fn range(semver: &str) -> GitPick<'_> {
        GitPick {
            reference: None,
            semver: Some(semver),
        }
    }

    #[test]
    fn a_semver_range_is_checked_where_it_enters_and_never_goes_with_a_ref() {
        let fields = GitFields::under("spec.source.git");
        let url = "https://git.example/r.git";
        let both = GitPick {
            reference: Some("main"),
            semver: Some("^1"),
        };
        let refused = git_location(url, both, None, &fields).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(
            refused
                .message
                .contains("spec.source.git.ref and spec.source.git.semver are both set"),
            "{}",
            refused.message
        );
        let refused = git_location(url, range("1.2 - 1.4"), None, &fields).unwrap_err();
        assert_eq!(refused.reason, Reason::InvalidSpec);
        assert!(
            refused.message.starts_with("spec.source.git.semver: "),
            "{}",
            refused.message
        );
        let empty_ref = GitPick {
            reference: Some(""),
            semver: Some(" >=1.2.0 <2 "),
        };
        match git_location(url, empty_ref, None, &fields) {
            Ok(Location::Git {
                reference, semver, ..
            }) => {
                assert_eq!(reference, None);
                assert_eq!(semver.as_deref(), Some(">=1.2.0 <2"));
            }
            other => panic!("{other:?}"),
        }
    }
}
