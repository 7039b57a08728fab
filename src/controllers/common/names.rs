//! The name rules a child name must pass before we emit it (the API server's, from
//! [`crate::apiserver`]), and the labels every child carries.

use std::collections::BTreeMap;

use crate::apiserver::check_label_value;
pub use crate::apiserver::{InvalidName, check_dns1035_label, check_dns1123_subdomain};

/// Characters of the content hash that keeps a shortened label value or name unique.
const SHORTENED_HASH_LEN: usize = 10;

/// `text` as a label value: as it is when the API server accepts it, otherwise a
/// stable shortening (the first characters that fit, a dash and a hash of the whole
/// text), so a parent whose name is longer than a label value still gets a label that
/// is always the same for it and differs from every other name's.
pub fn label_value(text: &str) -> String {
    if check_label_value(text).is_ok() {
        return text.to_owned();
    }
    let hash = &crate::hash::sha256_hex(text.as_bytes())[..SHORTENED_HASH_LEN];
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63 - SHORTENED_HASH_LEN - 1)
        .collect();
    let kept = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if kept.is_empty() {
        hash.to_owned()
    } else {
        format!("{kept}-{hash}")
    }
}

/// `base` followed by `suffix` as an object name (a DNS subdomain, at most 253
/// characters): as they are when they fit, otherwise `base` shortened, with a hash of
/// it before the suffix so two long bases never share a name.
pub fn suffixed_name(base: &str, suffix: &str) -> String {
    const MAX: usize = 253;
    if base.len() + suffix.len() <= MAX {
        return format!("{base}{suffix}");
    }
    let hash = &crate::hash::sha256_hex(base.as_bytes())[..SHORTENED_HASH_LEN];
    let room = MAX.saturating_sub(suffix.len() + SHORTENED_HASH_LEN + 1);
    let kept: String = base.chars().take(room).collect();
    let kept = kept.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{kept}-{hash}{suffix}")
}

/// The labels of every child: which controller made it, for which parent, and by whom.
pub fn child_labels(controller: &str, parent: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(controller, parent);
    labels.insert(
        "app.kubernetes.io/managed-by".to_owned(),
        "metahooks".to_owned(),
    );
    labels
}

/// The labels that select a parent's pods (a subset of [`child_labels`], so they never
/// change while the parent lives: a Deployment's selector is immutable).
pub fn selector_labels(controller: &str, parent: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), controller.to_owned()),
        ("app.kubernetes.io/instance".to_owned(), label_value(parent)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns1035_rules() {
        assert!(check_dns1035_label("users").is_ok());
        assert!(check_dns1035_label("a-1").is_ok());
        assert!(check_dns1035_label("1abc").is_err());
        assert!(check_dns1035_label("abc-").is_err());
        assert!(check_dns1035_label("a.b").is_err());
        assert!(check_dns1035_label(&"a".repeat(64)).is_err());
        assert!(check_dns1035_label("").is_err());
    }

    #[test]
    fn long_names_make_valid_stable_distinct_labels_and_names() {
        assert_eq!(label_value("web"), "web");
        assert_eq!(label_value(""), "");
        for length in [64, 100, 242, 253] {
            let name = "a".repeat(length);
            let other = format!("{}b", "a".repeat(length - 1));
            let label = label_value(&name);
            assert!(check_label_value(&label).is_ok(), "{label}");
            assert_eq!(label, label_value(&name), "stable");
            assert_ne!(label, label_value(&other), "distinct");
            let suffixed = suffixed_name(&name, "-configsync");
            assert!(check_dns1123_subdomain(&suffixed).is_ok(), "{suffixed}");
            assert!(suffixed.ends_with("-configsync"));
            assert_ne!(suffixed, suffixed_name(&other, "-configsync"));
        }
        // Characters a label may not hold, and a name that shortens to nothing but them.
        assert!(check_label_value(&label_value(&format!("{}.x", "a.b".repeat(30)))).is_ok());
        assert!(check_label_value(&label_value(&".".repeat(70))).is_ok());
        assert_eq!(suffixed_name("web", "-configsync"), "web-configsync");
    }

    #[test]
    fn dns1123_subdomain_rules() {
        assert!(check_dns1123_subdomain("my.app-1").is_ok());
        assert!(check_dns1123_subdomain("1abc").is_ok());
        assert!(check_dns1123_subdomain("a..b").is_err());
        assert!(check_dns1123_subdomain("Upper").is_err());
    }
}
