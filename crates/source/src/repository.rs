//! Which repository a URL names, in one form for every way of writing it, so that a
//! push for `https://github.com/org/app` reaches a source that reads
//! `git@github.com:org/app.git`.

/// `host/path` in lower case: no scheme, user, port, `.git` suffix or trailing `/`. None
/// when `raw` names no host and path.
pub fn normalise(raw: &str) -> Option<String> {
    let standard = crate::policy::scp_to_url(raw);
    let parsed = url::Url::parse(standard.as_deref().unwrap_or(raw)).ok()?;
    let host = parsed
        .host_str()?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let path = parsed.path().trim_start_matches("/~").trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    if host.is_empty() || path.is_empty() {
        return None;
    }
    Some(format!("{host}/{path}").to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_of_a_repository_is_one_name() {
        for url in [
            "https://github.com/Org/App.git",
            "https://github.com/org/app",
            "https://user:token@github.com:443/org/app/",
            "git@github.com:org/app.git",
            "ssh://git@github.com/org/app.git",
            "ssh://git@github.com:22/~/org/app.git",
            "git://github.com/org/app.git",
        ] {
            assert_eq!(
                normalise(url).as_deref(),
                Some("github.com/org/app"),
                "{url}"
            );
        }
        assert_ne!(
            normalise("https://github.com/org/app2"),
            normalise("https://github.com/org/app")
        );
        assert_eq!(normalise("https://github.com/"), None);
        assert_eq!(normalise("not a url"), None);
    }
}
