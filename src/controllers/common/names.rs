//! Kubernetes object-name rules a child name must pass before we emit it, and the
//! labels every child carries.

use std::collections::BTreeMap;

/// Why a name cannot be used for a child object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a valid {rule}: {problem}")]
pub struct InvalidName {
    /// The name refused.
    pub name: String,
    /// The rule it breaks (`DNS-1035 label`, …).
    pub rule: &'static str,
    /// What about it breaks the rule.
    pub problem: &'static str,
}

/// DNS-1035 label (Service names): at most 63 characters, lowercase alphanumerics or
/// '-', starting with a letter and ending with an alphanumeric.
pub fn check_dns1035_label(name: &str) -> Result<(), InvalidName> {
    let fail = |problem| {
        Err(InvalidName {
            name: name.to_owned(),
            rule: "DNS-1035 label",
            problem,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > 63 {
        return fail("it is longer than 63 characters");
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return fail("it must start with a lowercase letter");
    }
    if !name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        return fail("it must end with a lowercase letter or digit");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return fail("it may contain only lowercase letters, digits and '-'");
    }
    Ok(())
}

/// DNS-1123 subdomain (ConfigMap, Deployment, Ingress names): at most 253 characters,
/// dot-separated DNS-1123 labels.
pub fn check_dns1123_subdomain(name: &str) -> Result<(), InvalidName> {
    let fail = |problem| {
        Err(InvalidName {
            name: name.to_owned(),
            rule: "DNS-1123 subdomain",
            problem,
        })
    };
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.len() > 253 {
        return fail("it is longer than 253 characters");
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && label
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return fail(
                "each dot-separated part must be lowercase letters, digits or '-', starting and ending with a letter or digit",
            );
        }
    }
    Ok(())
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
