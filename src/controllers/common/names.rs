//! The name rules a child name must pass before we emit it (the API server's, from
//! [`crate::apiserver`]), and the labels every child carries.

use std::collections::BTreeMap;

pub use crate::apiserver::{InvalidName, check_dns1035_label, check_dns1123_subdomain};

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
        ("app.kubernetes.io/instance".to_owned(), parent.to_owned()),
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
    fn dns1123_subdomain_rules() {
        assert!(check_dns1123_subdomain("my.app-1").is_ok());
        assert!(check_dns1123_subdomain("1abc").is_ok());
        assert!(check_dns1123_subdomain("a..b").is_err());
        assert!(check_dns1123_subdomain("Upper").is_err());
    }
}
