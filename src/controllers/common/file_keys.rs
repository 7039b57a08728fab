//! Files held in a ConfigMap: the key each path is kept under (a key cannot hold `/`,
//! so `schemas/pet.yaml` is kept as `schemas__pet.yaml` and mounted back at its path),
//! with the API server's rule for keys (`IsConfigMapKey`, k8s.io/apimachinery
//! validation: at most 253 of `[-._a-zA-Z0-9]`, not `.` or `..`, not starting with
//! `..`) and no two paths under one key. One codec for every controller.

use std::collections::BTreeMap;

use super::conditions::quoted;

/// The longest key the API server accepts.
const MAX_KEY_LEN: usize = 253;

/// Why a path cannot be kept in a ConfigMap, naming the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum KeyError {
    #[error(
        "{} cannot be a ConfigMap key (letters, digits, '-', '_', '.' and '/' only, not starting with '..')",
        quoted(path)
    )]
    Characters { path: String },
    #[error(
        "{} cannot be a ConfigMap key: as {} it has {} characters, more than {MAX_KEY_LEN}",
        quoted(path),
        quoted(key),
        key.len()
    )]
    TooLong { path: String, key: String },
    #[error("{first:?} and {second:?} would share a ConfigMap key")]
    Shared { first: String, second: String },
}

/// The ConfigMap key `path` is kept under, or why it cannot be one.
///
/// # Errors
/// The key would break the API server's rule.
pub fn config_map_key(path: &str) -> Result<String, KeyError> {
    let key = path.replace('/', "__");
    let allowed = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c));
    if !allowed || key == "." || key.starts_with("..") {
        return Err(KeyError::Characters {
            path: path.to_owned(),
        });
    }
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError::TooLong {
            path: path.to_owned(),
            key,
        });
    }
    Ok(key)
}

/// The ConfigMap key of every path, by key.
///
/// # Errors
/// A path cannot be a key, or two paths would share one (`a/b.conf` and `a__b.conf`).
pub fn config_map_keys<'a>(
    paths: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, &'a str>, KeyError> {
    let mut keys = BTreeMap::new();
    for path in paths {
        let key = config_map_key(path)?;
        if let Some(other) = keys.insert(key, path) {
            return Err(KeyError::Shared {
                first: other.to_owned(),
                second: path.to_owned(),
            });
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
            config_map_key("schemas/pet.yaml").as_deref(),
            Ok("schemas__pet.yaml")
        );
        assert_eq!(config_map_key(".env").as_deref(), Ok(".env"));
        for refused in ["a b", "..x", ".", "", "ä.conf", "a\nb"] {
            assert!(config_map_key(refused).is_err(), "{refused:?}");
        }
        assert!(config_map_key(&"k".repeat(253)).is_ok());
        let long = config_map_key(&"k".repeat(254)).unwrap_err();
        assert!(long.to_string().contains("254 characters"), "{long}");
        // A slash becomes two characters: a 252-character path with one slash is 253.
        assert!(config_map_key(&format!("{}/x", "k".repeat(250))).is_ok());
        assert!(config_map_key(&format!("{}/xy", "k".repeat(250))).is_err());
    }

    #[test]
    fn two_paths_never_share_a_key() {
        let collision = config_map_keys(["a/b.conf", "a__b.conf"]).unwrap_err();
        assert_eq!(
            collision.to_string(),
            "\"a/b.conf\" and \"a__b.conf\" would share a ConfigMap key"
        );
        let keys = config_map_keys(["a/b.conf", "c.conf"]).unwrap();
        assert_eq!(keys["a__b.conf"], "a/b.conf");
    }
}
