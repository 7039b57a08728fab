//! Files held in a ConfigMap: the key each path is kept under (a key cannot hold `/`,
//! so `schemas/pet.yaml` is kept as `schemas__pet.yaml` and mounted back at its path),
//! with the API server's rule for keys (`IsConfigMapKey`, k8s.io/apimachinery
//! validation: at most 253 of `[-._a-zA-Z0-9]`, not `.` or `..`, not starting with
//! `..`) and no two paths under one key. One codec for every controller.

use std::collections::BTreeMap;

use super::conditions::quoted;

/// The longest key the API server accepts.
const MAX_KEY_LEN: usize = 253;

/// The key `path` is kept under, or why it cannot be one.
///
/// # Errors
/// The key would break the API server's rule; the message names the path.
pub fn key_of(path: &str) -> Result<String, String> {
    let key = path.replace('/', "__");
    let allowed = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !allowed || key == "." || key.starts_with("..") {
        return Err(format!(
            "{} cannot be a ConfigMap key (letters, digits, '-', '_', '.' and '/' only, not starting with '..')",
            quoted(path)
        ));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "{} cannot be a ConfigMap key: as {} it has {} characters, more than {MAX_KEY_LEN}",
            quoted(path),
            quoted(&key),
            key.len()
        ));
    }
    Ok(key)
}

/// The key of every path, by key.
///
/// # Errors
/// A path cannot be a key, or two paths would share one (`a/b.conf` and `a__b.conf`).
pub fn keys_of<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, &'a str>, String> {
    let mut keys = BTreeMap::new();
    for path in paths {
        let key = key_of(path)?;
        if let Some(other) = keys.insert(key, path) {
            return Err(format!(
                "{other:?} and {path:?} would share a ConfigMap key"
            ));
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_keys_the_api_server_accepts() {
        assert_eq!(
            key_of("schemas/pet.yaml").as_deref(),
            Ok("schemas__pet.yaml")
        );
        assert_eq!(key_of(".env").as_deref(), Ok(".env"));
        for refused in ["a b", "..x", ".", "", "ä.conf", "a\nb"] {
            assert!(key_of(refused).is_err(), "{refused:?}");
        }
        assert!(key_of(&"k".repeat(253)).is_ok());
        let long = key_of(&"k".repeat(254)).unwrap_err();
        assert!(long.contains("254 characters"), "{long}");
        // A slash becomes two characters: a 252-character path with one slash is 253.
        assert!(key_of(&format!("{}/x", "k".repeat(250))).is_ok());
        assert!(key_of(&format!("{}/xy", "k".repeat(250))).is_err());
    }

    #[test]
    fn two_paths_never_share_a_key() {
        let collision = keys_of(["a/b.conf", "a__b.conf"]).unwrap_err();
        assert!(
            collision.contains("would share a ConfigMap key"),
            "{collision}"
        );
        let keys = keys_of(["a/b.conf", "c.conf"]).unwrap();
        assert_eq!(keys["a__b.conf"], "a/b.conf");
    }
}
