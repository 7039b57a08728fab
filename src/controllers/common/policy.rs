//! The operator's policy for what a CR may expose through the children we make for it
//! (`serve`/`render` flags): without it, a team allowed to create an APIMock but not
//! an Ingress or a LoadBalancer would get one through us, with any host, class or
//! annotation in it. Each list left empty allows anything, as before the flags existed.

/// What CRs may put in the children that face outside their namespace.
#[derive(Debug, Clone, Default)]
pub struct ExposurePolicy {
    /// Ingress hosts allowed (`*` matches one DNS label, `{namespace}` stands for the
    /// CR's namespace); empty: any.
    pub ingress_hosts: Vec<String>,
    /// `ingressClassName`s allowed; empty: any. An Ingress without a class (the
    /// cluster's default class) is always allowed.
    pub ingress_classes: Vec<String>,
    /// Annotation keys a CR may put on its Service and Ingress (an entry ending in `/`
    /// or `*` is a prefix); empty: any.
    pub child_annotations: Vec<String>,
    /// Service types allowed; empty: any.
    pub service_types: Vec<String>,
    /// Refuse `env[].valueFrom.secretKeyRef` and `fieldRef` in a MonitoredService
    /// (creating one would otherwise be reading any Secret of the namespace).
    pub deny_secret_env: bool,
}

/// A value the policy refuses: which field, which flag, and what it allows.
pub fn refusal(field: &str, value: &str, flag: &str, allowed: &[String]) -> String {
    format!(
        "{field} {value:?} is not allowed by the server's {flag} (allowed: {})",
        allowed.join(", ")
    )
}

impl ExposurePolicy {
    /// Whether `host` matches an allowed pattern for a CR in `namespace`.
    pub fn allows_host(&self, host: &str, namespace: &str) -> bool {
        self.ingress_hosts.is_empty()
            || self
                .ingress_hosts
                .iter()
                .any(|pattern| host_matches(&pattern.replace("{namespace}", namespace), host))
    }

    /// Whether the Ingress class may be used.
    pub fn allows_class(&self, class: Option<&str>) -> bool {
        class.is_none_or(|class| {
            self.ingress_classes.is_empty() || self.ingress_classes.iter().any(|c| c == class)
        })
    }

    /// Whether a CR may set the annotation `key` on a child.
    pub fn allows_annotation(&self, key: &str) -> bool {
        self.child_annotations.is_empty()
            || self
                .child_annotations
                .iter()
                .any(|allowed| match allowed.strip_suffix('*') {
                    Some(prefix) => key.starts_with(prefix),
                    None if allowed.ends_with('/') => key.starts_with(allowed.as_str()),
                    None => key == allowed,
                })
    }

    /// Whether the Service type may be used.
    pub fn allows_service_type(&self, type_: &str) -> bool {
        self.service_types.is_empty() || self.service_types.iter().any(|t| t == type_)
    }
}

/// Label by label, `*` matching exactly one label (as Ingress wildcards do).
fn host_matches(pattern: &str, host: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let host: Vec<&str> = host.split('.').collect();
    pattern.len() == host.len()
        && pattern
            .iter()
            .zip(&host)
            .all(|(p, h)| *p == "*" || p.eq_ignore_ascii_case(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ExposurePolicy {
        ExposurePolicy {
            ingress_hosts: vec!["*.{namespace}.mocks.example.com".to_owned()],
            ingress_classes: vec!["public".to_owned()],
            child_annotations: vec![
                "nginx.ingress.kubernetes.io/rewrite-target".to_owned(),
                "example.com/".to_owned(),
            ],
            service_types: vec!["ClusterIP".to_owned()],
            deny_secret_env: true,
        }
    }

    #[test]
    fn hosts_match_label_by_label_in_the_crs_own_namespace() {
        let policy = policy();
        assert!(policy.allows_host("users.team-a.mocks.example.com", "team-a"));
        assert!(!policy.allows_host("users.team-b.mocks.example.com", "team-a"));
        assert!(!policy.allows_host("a.users.team-a.mocks.example.com", "team-a"));
        assert!(!policy.allows_host("payments.team-b.example.com", "team-a"));
        assert!(ExposurePolicy::default().allows_host("anything.example", "x"));
    }

    #[test]
    fn classes_annotations_and_service_types_follow_their_lists() {
        let policy = policy();
        assert!(policy.allows_class(None) && policy.allows_class(Some("public")));
        assert!(!policy.allows_class(Some("internal-admin")));
        assert!(policy.allows_annotation("nginx.ingress.kubernetes.io/rewrite-target"));
        assert!(policy.allows_annotation("example.com/team"));
        assert!(!policy.allows_annotation("nginx.ingress.kubernetes.io/server-snippet"));
        assert!(!policy.allows_annotation("cert-manager.io/cluster-issuer"));
        assert!(policy.allows_service_type("ClusterIP"));
        assert!(!policy.allows_service_type("LoadBalancer"));
        let open = ExposurePolicy::default();
        assert!(
            open.allows_annotation("anything/at-all") && open.allows_service_type("LoadBalancer")
        );
    }
}
