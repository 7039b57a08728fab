//! Which URLs a Secret's credentials may be sent to, as the Secret's owner wrote it.
//!
//! Anyone who can create a parent names a Secret and a URL; without a binding, pointing
//! the URL at a server the CR author controls would hand them the Secret. So the owner
//! of the Secret lists URL prefixes in the annotation [`ALLOWED_URLS`], and credentials
//! go to a URL only when one prefix covers it: scheme, host and port equal, and the
//! path equal or below the prefix's path on a `/` boundary (the rule Argo CD applies to
//! its repository credential templates).

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
    /// The credentials may go to URLs under these prefixes.
    Allowed(Vec<UrlPrefix>),
    /// The credentials go nowhere; the sentence says why.
    Refused(String),
}

/// One allowed prefix, parsed once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UrlPrefix {
    scheme: String,
    host: String,
    port: Option<u16>,
    /// The path without its trailing `/` ("" for the whole origin).
    path: String,
}

impl Binding {
    /// The binding of Secret `name` given its `type` and the annotation's value.
    pub fn read(name: &str, secret_type: Option<&str>, annotation: Option<&str>) -> Binding {
        if secret_type == Some(SERVICE_ACCOUNT_TOKEN) {
            return Binding::Refused(format!(
                "Secret {name:?} is a {SERVICE_ACCOUNT_TOKEN} Secret, which is never sent to a source"
            ));
        }
        let Some(annotation) = annotation.map(str::trim).filter(|a| !a.is_empty()) else {
            return Binding::Refused(format!(
                "Secret {name:?} has no annotation {ALLOWED_URLS}; its owner allows URLs with: kubectl annotate secret {name} {ALLOWED_URLS}=https://host/path/"
            ));
        };
        let entries: Vec<&str> = annotation
            .split(['\n', ','])
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if entries.len() > MAX_PREFIXES {
            return Binding::Refused(format!(
                "annotation {ALLOWED_URLS} of Secret {name:?} lists {} prefixes; at most {MAX_PREFIXES} are read",
                entries.len()
            ));
        }
        let mut prefixes = Vec::with_capacity(entries.len());
        for entry in entries {
            match UrlPrefix::parse(entry) {
                Ok(prefix) => prefixes.push(prefix),
                Err(problem) => {
                    return Binding::Refused(format!(
                        "annotation {ALLOWED_URLS} of Secret {name:?}: {problem}"
                    ));
                }
            }
        }
        Binding::Allowed(prefixes)
    }

    /// Ok when `url` is under one of the allowed prefixes; else why not.
    pub fn check(&self, url: &str) -> Result<(), String> {
        match self {
            Binding::Refused(why) => Err(why.clone()),
            Binding::Allowed(prefixes) => {
                let standard = super::policy::scp_to_url(url);
                let parsed = url::Url::parse(standard.as_deref().unwrap_or(url))
                    .map_err(|e| format!("the URL is not valid: {e}"))?;
                if prefixes.iter().any(|prefix| prefix.covers(&parsed)) {
                    Ok(())
                } else {
                    Err(format!(
                        "the URL is not under any prefix its annotation {ALLOWED_URLS} lists"
                    ))
                }
            }
        }
    }
}

impl UrlPrefix {
    fn parse(text: &str) -> Result<UrlPrefix, String> {
        let parsed = url::Url::parse(text)
            .map_err(|e| format!("{:?} is not a URL: {e}", super::redact_url(text)))?;
        let host = parsed.host_str().unwrap_or_default();
        if host.is_empty() && parsed.scheme() != "file" {
            return Err(format!("{text:?} names no host"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!(
                "{:?} carries user-info; list the URL without it",
                super::redact_url(text)
            ));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(format!(
                "{text:?} has a query or fragment; list a path prefix"
            ));
        }
        Ok(UrlPrefix {
            scheme: parsed.scheme().to_owned(),
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
        assert!(why.contains("kubectl annotate secret creds"), "{why}");
        let token = Binding::read(
            "sa",
            Some(SERVICE_ACCOUNT_TOKEN),
            Some("https://a.example.com/"),
        );
        assert!(token.check("https://a.example.com/").is_err());
        let bad = allowed("https://a.example.com/, ftp//nothing");
        assert!(matches!(bad, Binding::Refused(ref why) if why.contains("not a URL")));
        let userinfo = allowed("https://user:pw@a.example.com/");
        assert!(matches!(userinfo, Binding::Refused(ref why) if !why.contains("pw")));
    }
}
