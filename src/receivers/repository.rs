//! Which repositories a push payload names ([`normalise`]d, the form the source engine
//! matches remotes by).

use serde_json::Value;

pub use crate::source::repository::normalise;

/// Most URLs read from one payload (a forge lists a handful).
const MAX_URLS: usize = 16;

/// The repository URLs a forge's push payload names (normalised, deduplicated): GitHub
/// and Gitea's `repository.{clone_url,ssh_url,git_url,html_url,url}`, GitLab's
/// `project.{git_http_url,git_ssh_url,web_url}` and `repository.{git_http_url,
/// git_ssh_url,url,homepage}`, the generic receiver's `url`. Only a trigger: no content
/// of the payload is used.
pub fn named_in(payload: &Value) -> Vec<String> {
    let pointers = [
        "/url",
        "/repository/clone_url",
        "/repository/ssh_url",
        "/repository/git_url",
        "/repository/html_url",
        "/repository/url",
        "/repository/git_http_url",
        "/repository/git_ssh_url",
        "/repository/homepage",
        "/project/git_http_url",
        "/project/git_ssh_url",
        "/project/web_url",
    ];
    let mut found: Vec<String> = pointers
        .iter()
        .filter_map(|pointer| payload.pointer(pointer).and_then(Value::as_str))
        .filter_map(normalise)
        .collect();
    found.sort();
    found.dedup();
    found.truncate(MAX_URLS);
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn payloads_of_each_forge_name_their_repository() {
        let github = json!({"ref": "refs/heads/main", "repository": {
            "clone_url": "https://github.com/org/app.git", "ssh_url": "git@github.com:org/app.git",
            "html_url": "https://github.com/org/app"}});
        assert_eq!(named_in(&github), ["github.com/org/app"]);
        let gitlab = json!({"object_kind": "push", "project": {
            "git_http_url": "https://gitlab.example.com/group/app.git",
            "git_ssh_url": "git@gitlab.example.com:group/app.git"}});
        assert_eq!(named_in(&gitlab), ["gitlab.example.com/group/app"]);
        assert_eq!(
            named_in(&json!({"url": "https://git.example.com/a/b.git"})),
            ["git.example.com/a/b"]
        );
        assert!(named_in(&json!({"repository": "nope"})).is_empty());
    }
}
