//! Which URLs a Secret's credentials may be sent to, as the Secret's owner wrote it.
//!
//! Anyone who can create a parent names a Secret and a URL; without a binding, pointing
//! the URL at a server the CR author controls would hand them the Secret. So the owner
//! of the Secret lists URL prefixes in the annotation [`ALLOWED_URLS`], and credentials
//! go to a URL only when one prefix covers it: scheme, host and port equal, and the
//! path equal or below the prefix's path on a `/` boundary (the rule Argo CD applies to
//! its repository credential templates). An ssh prefix may name its user as people
//! write ssh addresses (`ssh://git@host/team/`, `git@host:team/`); the source's user
//! must then be that user.

use serde::{Deserialize, Serialize};

/// The annotation on a Secret that lists the URL prefixes its credentials may reach.
pub const ALLOWED_URLS: &str = "sources.metahooks.io/allowed-urls";

/// The Secret type whose token is the cluster's own identity: never a source credential.
pub const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// Most prefixes one annotation may list (more is a mistake, not a policy).
const MAX_PREFIXES: usize = 64;

/// What the Secret allows, read from its type and annotation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Binding {
    /// The credentials may go to URLs under these prefixes; `unread` says which lines
    /// of the annotation were not read and why (the others still apply).
    Allowed {
        /// The prefixes read.
        prefixes: Vec<UrlPrefix>,
        /// Each line that was not, as written, with why.
        unread: Vec<UnreadLine>,
    },
    /// The credentials go nowhere, and why.
    Refused(Refusal),
}

/// Why a Secret's credentials go nowhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Refusal {
    /// Credentials built without a Secret's binding.
    #[error("no URLs are allowed")]
    Unbound,
    /// The cluster's own identity.
    #[error("Secret {name:?} is a {SERVICE_ACCOUNT_TOKEN} Secret, which is never sent to a source")]
    ServiceAccountToken {
        /// The Secret.
        name: String,
    },
    /// The owner listed nothing.
    #[error(
        "Secret {name:?} has no annotation {ALLOWED_URLS}; its owner allows URLs with: kubectl annotate secret {name} {ALLOWED_URLS}=https://host/path/"
    )]
    NoAnnotation {
        /// The Secret.
        name: String,
    },
    /// More lines than are read.
    #[error(
        "annotation {ALLOWED_URLS} of Secret {name:?} lists {count} prefixes; at most {MAX_PREFIXES} are read"
    )]
    TooManyPrefixes {
        /// The Secret.
        name: String,
        /// The lines it lists.
        count: usize,
    },
    /// Every line was unreadable.
    #[error("annotation {ALLOWED_URLS} of Secret {name:?} lists no usable prefix ({})", joined(.unread))]
    NoUsablePrefix {
        /// The Secret.
        name: String,
        /// Each line, with why it was not read.
        unread: Vec<UnreadLine>,
    },
}

/// A line of the annotation that was not read, as its owner wrote it (but for a
/// password, which is never repeated: a status is read by more people than the Secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("line {line:?} was not read: {problem}")]
pub struct UnreadLine {
    /// The line, its password masked.
    pub line: String,
    /// Why it was not read.
    pub problem: LineProblem,
}

/// Why a line of the annotation is not a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum LineProblem {
    /// The url crate's words.
    #[error("it is not a URL: {0}")]
    NotAUrl(String),
    /// No host to compare.
    #[error("it names no host")]
    NoHost,
    /// A password, which a prefix never carries.
    #[error("it carries a password; list the address without it")]
    Password,
    /// A user outside ssh.
    #[error("it names a user, which only an ssh address may; list the {scheme} URL without it")]
    UserOutsideSsh {
        /// The line's scheme.
        scheme: String,
    },
    /// A query or fragment, which a prefix never has.
    #[error("it has a query or fragment; list a path prefix")]
    QueryOrFragment,
}

/// Why a URL may not be given a Secret's credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum NotCovered {
    /// The credentials go nowhere.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The URL does not parse (the url crate's words).
    #[error("the URL is not valid: {0}")]
    InvalidUrl(String),
    /// No prefix covers the URL.
    #[error("the URL is not under any prefix its annotation {ALLOWED_URLS} lists{}", unread_note(.unread))]
    NotUnderAnyPrefix {
        /// The lines that were not read, which might have been meant to cover it.
        unread: Vec<UnreadLine>,
    },
}

fn joined(unread: &[UnreadLine]) -> String {
    unread
        .iter()
        .map(UnreadLine::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn unread_note(unread: &[UnreadLine]) -> String {
    if unread.is_empty() {
        String::new()
    } else {
        format!(" ({})", joined(unread))
    }
}

/// One allowed prefix, parsed once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlPrefix {
    scheme: String,
    /// The ssh user the prefix names (None: any user).
    user: Option<String>,
    host: String,
    port: Option<u16>,
    /// The path without its trailing `/` ("" for the whole origin).
    path: String,
}

impl Binding {
    /// The binding of Secret `name` given its `type` and the annotation's value.
    pub fn read(name: &str, secret_type: Option<&str>, annotation: Option<&str>) -> Binding {
        if secret_type == Some(SERVICE_ACCOUNT_TOKEN) {
            return Binding::Refused(Refusal::ServiceAccountToken {
                name: name.to_owned(),
            });
        }
        let Some(annotation) = annotation.map(str::trim).filter(|a| !a.is_empty()) else {
            return Binding::Refused(Refusal::NoAnnotation {
                name: name.to_owned(),
            });
        };
        let entries: Vec<&str> = annotation
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.len() > MAX_PREFIXES {
            return Binding::Refused(Refusal::TooManyPrefixes {
                name: name.to_owned(),
                count: entries.len(),
            });
        }
        let mut prefixes = Vec::with_capacity(entries.len());
        let mut unread = Vec::new();
        for entry in entries {
            match UrlPrefix::parse(entry) {
                Ok(prefix) => prefixes.push(prefix),
                Err(problem) => unread.push(UnreadLine {
                    line: as_written(entry),
                    problem,
                }),
            }
        }
        if prefixes.is_empty() {
            return Binding::Refused(Refusal::NoUsablePrefix {
                name: name.to_owned(),
                unread,
            });
        }
        Binding::Allowed { prefixes, unread }
    }

    /// Ok when `url` is under one of the allowed prefixes; else why not.
    pub fn check(&self, url: &str) -> Result<(), NotCovered> {
        match self {
            Binding::Refused(why) => Err(why.clone().into()),
            Binding::Allowed { prefixes, unread } => {
                let parsed =
                    parse_address(url).map_err(|e| NotCovered::InvalidUrl(e.to_string()))?;
                if prefixes.iter().any(|prefix| prefix.covers(&parsed)) {
                    return Ok(());
                }
                Err(NotCovered::NotUnderAnyPrefix {
                    unread: unread.clone(),
                })
            }
        }
    }
}

/// A line of the annotation as its owner wrote it, but for a password, which is never
/// repeated (a status message is read by more people than the Secret is).
fn as_written(line: &str) -> String {
    match url::Url::parse(line) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => line.to_owned(),
    }
}

/// An address as git reads it: a URL, or the scp-like `user@host:path` for ssh.
fn parse_address(text: &str) -> Result<url::Url, url::ParseError> {
    let standard = super::policy::scp_to_url(text);
    url::Url::parse(standard.as_deref().unwrap_or(text))
}

impl UrlPrefix {
    /// One line of the annotation (the caller keeps the line with the problem).
    fn parse(text: &str) -> Result<UrlPrefix, LineProblem> {
        let parsed = parse_address(text).map_err(|e| LineProblem::NotAUrl(e.to_string()))?;
        let host = parsed.host_str().unwrap_or_default();
        if host.is_empty() && parsed.scheme() != "file" {
            return Err(LineProblem::NoHost);
        }
        if parsed.password().is_some() {
            return Err(LineProblem::Password);
        }
        let user = match (parsed.username(), parsed.scheme()) {
            ("", _) => None,
            (user, "ssh") => Some(user.to_owned()),
            (_, scheme) => {
                return Err(LineProblem::UserOutsideSsh {
                    scheme: scheme.to_owned(),
                });
            }
        };
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(LineProblem::QueryOrFragment);
        }
        Ok(UrlPrefix {
            scheme: parsed.scheme().to_owned(),
            user,
            host: host.to_owned(),
            port: parsed.port_or_known_default(),
            path: parsed.path().trim_end_matches('/').to_owned(),
        })
    }

    /// The url crate has already lower-cased scheme and host and resolved `.` and `..`
    /// segments, so the comparison sees the path that will be requested.
    fn covers(&self, url: &url::Url) -> bool {
        if url.scheme() != self.scheme
            || url.host_str().unwrap_or_default() != self.host
            || url.port_or_known_default() != self.port
            || self
                .user
                .as_deref()
                .is_some_and(|user| url.username() != user)
        {
            return false;
        }
        let path = url.path();
        match path.strip_prefix(self.path.as_str()) {
            Some(rest) => rest.is_empty() || rest.starts_with('/'),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(annotation: &str) -> Binding {
        Binding::read("creds", Some("Opaque"), Some(annotation))
    }

    #[test]
    fn a_prefix_covers_its_origin_and_paths_below_it_on_a_slash_boundary() {
        let binding = allowed("https://git.example.com/team-a/\nhttps://files.example.com");
        for url in [
            "https://git.example.com/team-a/app.git",
            "https://git.example.com/team-a",
            "https://GIT.example.com:443/team-a/x/../app.git",
            "https://files.example.com/anything",
        ] {
            assert_eq!(binding.check(url), Ok(()), "{url}");
        }
        for url in [
            "https://git.example.com/team-ab/app.git",
            "https://git.example.com/team-a/../team-b/app.git",
            "https://git.example.com:8443/team-a/app.git",
            "http://git.example.com/team-a/app.git",
            "https://git.example.com.evil.test/team-a/app.git",
            "https://evil.test/team-a/",
            "not a url",
        ] {
            assert!(binding.check(url).is_err(), "{url} must not be covered");
        }
    }

    #[test]
    fn scp_like_addresses_are_checked_as_the_ssh_urls_they_stand_for() {
        let binding = allowed("ssh://github.com/team-a/");
        assert_eq!(binding.check("git@github.com:team-a/app.git"), Ok(()));
        assert_eq!(binding.check("ssh://git@github.com/team-a/app.git"), Ok(()));
        assert!(binding.check("git@github.com:team-b/app.git").is_err());
        assert!(binding.check("git@evil.test:team-a/app.git").is_err());
        assert!(binding.check("https://github.com/team-a/app.git").is_err());
    }

    #[test]
    fn comma_separated_prefixes_are_read_too() {
        let binding = allowed("https://a.example.com/x, https://b.example.com/y");
        assert_eq!(binding.check("https://b.example.com/y/z"), Ok(()));
        assert!(binding.check("https://b.example.com/x").is_err());
    }

    #[test]
    fn no_annotation_a_bad_entry_or_a_service_account_token_refuses_everything() {
        let none = Binding::read("creds", None, None);
        let why = none.check("https://a.example.com/").unwrap_err();
        assert!(
            why.to_string().contains("kubectl annotate secret creds"),
            "{why}"
        );
        let token = Binding::read(
            "sa",
            Some(SERVICE_ACCOUNT_TOKEN),
            Some("https://a.example.com/"),
        );
        assert!(token.check("https://a.example.com/").is_err());
        let userinfo = allowed("https://user:pw@a.example.com/");
        assert!(matches!(userinfo, Binding::Refused(ref why) if !why.to_string().contains("pw")));
        let nothing = allowed("ftp//nothing");
        assert!(
            matches!(nothing, Binding::Refused(ref why) if why.to_string().contains("not a URL"))
        );
    }

    /// SSH addresses as people write them, and as the forges print them.
    #[test]
    fn an_ssh_prefix_may_name_its_user_and_then_only_that_user_is_covered() {
        for prefix in [
            "ssh://git@gitlab.example.com/team/",
            "git@gitlab.example.com:team/",
        ] {
            let binding = allowed(prefix);
            assert_eq!(
                binding.check("git@gitlab.example.com:team/app.git"),
                Ok(()),
                "{prefix}"
            );
            assert_eq!(
                binding.check("ssh://git@gitlab.example.com/team/app.git"),
                Ok(()),
                "{prefix}"
            );
            for other in [
                "deploy@gitlab.example.com:team/app.git",
                "ssh://gitlab.example.com/team/app.git",
                "git@gitlab.example.com:other/app.git",
            ] {
                assert!(binding.check(other).is_err(), "{prefix} covers {other}");
            }
        }
        // Without a user, any user of that host and path.
        let any = allowed("ssh://gitlab.example.com/team/");
        assert_eq!(any.check("deploy@gitlab.example.com:team/app.git"), Ok(()));
    }

    #[test]
    fn a_line_that_cannot_be_read_is_quoted_as_written_and_the_others_still_apply() {
        let binding = allowed(
            "https://git.example.com/team/\nhttps://user@git.example.com/x/\nssh://git:pw@h/t/\nftp//nothing",
        );
        assert_eq!(
            binding.check("https://git.example.com/team/app.git"),
            Ok(())
        );
        let why = binding
            .check("https://elsewhere.example.com/app.git")
            .unwrap_err()
            .to_string();
        assert!(
            why.contains(r#"line "https://user@git.example.com/x/" was not read: it names a user"#),
            "{why}"
        );
        assert!(
            why.contains(r#"line "ssh://git:***@h/t/" was not read: it carries a password"#),
            "{why}"
        );
        assert!(!why.contains(":pw@"), "a password is never quoted: {why}");
        assert!(why.contains(r#"line "ftp//nothing" was not read"#), "{why}");
    }
}
