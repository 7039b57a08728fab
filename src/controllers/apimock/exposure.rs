//! What an APIMock exposes outside its namespace (the Ingress and the Service), checked
//! before anything is built: always for what the API server and ingress controllers
//! would refuse or misread (hostnames, paths, class and Secret names, annotation keys),
//! and against the operator's [`ExposurePolicy`] when one is set.

use super::spec::{ApiMockSpec, IngressSpec, PathType};
use crate::apiserver::{ANNOTATIONS_MAX_BYTES, check_dns1123_subdomain, check_qualified_name};
use crate::controllers::common::policy::{ExposurePolicy, refusal};
use crate::controllers::common::problem::Problem;
use crate::controllers::common::reason::Reason;

/// Why the spec's Ingress cannot be emitted, if it cannot (the rest of the mock can be,
/// without it).
///
/// # Errors
/// `InvalidSpec` for a value the API server or an ingress controller would refuse or
/// misread, `NotAllowed` for one the policy refuses; the message names the field.
pub fn check_ingress_exposure(
    spec: &ApiMockSpec,
    policy: &ExposurePolicy,
    namespace: &str,
) -> Result<(), Problem> {
    if let Some(ingress) = &spec.ingress {
        check_ingress(ingress)?;
        if !policy.allows_host(&ingress.hostname, namespace) {
            return Err(not_allowed(refusal(
                "spec.ingress.hostname",
                &ingress.hostname,
                "--ingress-host",
                &policy.ingress_hosts,
            )));
        }
        if !policy.allows_class(ingress.class_name.as_deref()) {
            return Err(not_allowed(refusal(
                "spec.ingress.className",
                ingress.class_name.as_deref().unwrap_or_default(),
                "--ingress-class",
                &policy.ingress_classes,
            )));
        }
        check_annotations(
            "spec.ingress.annotations",
            ingress.annotations.as_ref(),
            policy,
        )?;
    }
    Ok(())
}

/// Why the spec's Service cannot be emitted, if it cannot (then nothing is: the mock's
/// Deployment is reached through it).
///
/// # Errors
/// As [`check_ingress_exposure`], for `spec.service`.
pub fn check(spec: &ApiMockSpec, policy: &ExposurePolicy) -> Result<(), Problem> {
    if let Some(service) = &spec.service {
        let type_ = service.type_.unwrap_or_default().as_str();
        if !policy.allows_service_type(type_) {
            return Err(not_allowed(refusal(
                "spec.service.type",
                type_,
                "--service-type",
                &policy.service_types,
            )));
        }
        check_annotations(
            "spec.service.annotations",
            service.annotations.as_ref(),
            policy,
        )?;
    }
    Ok(())
}

fn invalid(message: String) -> Problem {
    Problem::new(Reason::InvalidSpec, message)
}

fn not_allowed(message: String) -> Problem {
    Problem::new(Reason::NotAllowed, message)
}

fn check_annotations(
    field: &str,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    policy: &ExposurePolicy,
) -> Result<(), Problem> {
    let total: usize = annotations
        .into_iter()
        .flatten()
        .map(|(key, value)| key.len() + value.len())
        .sum();
    // Under client-side apply the last-applied annotation holds them all again.
    if total > ANNOTATIONS_MAX_BYTES / 2 {
        return Err(invalid(format!(
            "{field}: {total} bytes in all, more than the {} the API server leaves room for",
            ANNOTATIONS_MAX_BYTES / 2
        )));
    }
    for key in annotations.into_iter().flat_map(|a| a.keys()) {
        check_qualified_name(key).map_err(|e| invalid(format!("{field}: key {key:?}: {e}")))?;
        if !policy.allows_annotation(key) {
            return Err(not_allowed(refusal(
                &format!("{field} key"),
                key,
                "--child-annotation",
                &policy.child_annotations,
            )));
        }
    }
    Ok(())
}

fn check_ingress(ingress: &IngressSpec) -> Result<(), Problem> {
    let host = &ingress.hostname;
    // networking/validation: a host is a DNS-1123 subdomain (no port, no IP address);
    // a wildcard would serve the mock for every name of a domain.
    check_dns1123_subdomain(host).map_err(|e| {
        invalid(format!(
            "spec.ingress.hostname: {e} (one host name, without port or wildcard)"
        ))
    })?;
    if host.parse::<std::net::IpAddr>().is_ok() || host.split('.').all(|l| l.parse::<u8>().is_ok())
    {
        return Err(invalid(format!(
            "spec.ingress.hostname {host:?} is an IP address; an Ingress host must be a DNS name"
        )));
    }
    check_path(&ingress.path, ingress.path_type.unwrap_or_default())?;
    if let Some(class) = &ingress.class_name {
        check_dns1123_subdomain(class)
            .map_err(|e| invalid(format!("spec.ingress.className: {e}")))?;
    }
    if let Some(tls) = &ingress.tls {
        check_dns1123_subdomain(&tls.secret_name)
            .map_err(|e| invalid(format!("spec.ingress.tls.secretName: {e}")))?;
    }
    Ok(())
}

/// networking/validation's path rules, and the characters ingress-nginx refuses in a
/// path because they end up inside its generated configuration.
fn check_path(path: &str, path_type: PathType) -> Result<(), Problem> {
    let field = "spec.ingress.path";
    if !path.starts_with('/') {
        return Err(invalid(format!(
            "{field} {path:?} must be an absolute path (start with /)"
        )));
    }
    if let Some(c) = path
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "{};$\\\"'`".contains(*c))
    {
        return Err(invalid(format!(
            "{field} {path:?} holds {c:?}, which an ingress controller cannot route"
        )));
    }
    if path_type != PathType::ImplementationSpecific {
        for bad in ["//", "/./", "/../"] {
            if path.contains(bad) {
                return Err(invalid(format!(
                    "{field} {path:?} must not contain {bad:?}"
                )));
            }
        }
        if path.ends_with("/..") || path.ends_with("/.") {
            return Err(invalid(format!(
                "{field} {path:?} must not end with '/..' or '/.'"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(ingress: serde_json::Value) -> ApiMockSpec {
        serde_json::from_value(json!({"definition": "x", "ingress": ingress})).unwrap()
    }

    fn reason(ingress: serde_json::Value, policy: &ExposurePolicy) -> Option<String> {
        check_ingress_exposure(&spec(ingress), policy, "team-a")
            .err()
            .map(|p| format!("{}: {}", p.reason, p.message))
    }

    #[test]
    fn hosts_and_paths_the_api_server_or_an_ingress_controller_refuses() {
        let open = ExposurePolicy::default();
        assert_eq!(
            reason(
                json!({"hostname": "api.example.com", "path": "/users"}),
                &open
            ),
            None
        );
        // A valid name, even a cluster-internal one (APIrator's sample uses one): only
        // --ingress-host keeps a CR off names it should not have.
        assert_eq!(
            reason(
                json!({"hostname": "apimock.svc.cluster.local", "path": "/"}),
                &open
            ),
            None
        );
        for (hostname, path) in [
            ("API_Example.com:8080", "/"),
            ("*.example.com", "/"),
            ("a b", "/"),
            ("10.0.0.1", "/"),
            ("api.example.com", "users"),
            ("api.example.com", "/a\nb"),
            ("api.example.com", "/a;b"),
            ("api.example.com", "/a/../b"),
        ] {
            let found = reason(json!({"hostname": hostname, "path": path}), &open);
            assert!(
                found
                    .as_deref()
                    .is_some_and(|f| f.starts_with("InvalidSpec: spec.ingress.")),
                "{hostname:?} {path:?}: {found:?}"
            );
        }
    }

    #[test]
    fn the_policy_refuses_what_it_does_not_list_and_names_the_flag() {
        let policy = ExposurePolicy {
            ingress_hosts: vec!["*.{namespace}.mocks.example.com".to_owned()],
            ingress_classes: vec!["public".to_owned()],
            child_annotations: vec!["example.com/".to_owned()],
            service_types: vec!["ClusterIP".to_owned()],
            deny_secret_env: false,
        };
        let ok = json!({"hostname": "users.team-a.mocks.example.com", "path": "/", "className": "public",
                        "annotations": {"example.com/team": "a"}});
        assert_eq!(reason(ok, &policy), None);
        for (ingress, flag) in [
            (
                json!({"hostname": "payments.team-b.example.com", "path": "/login"}),
                "--ingress-host",
            ),
            (
                json!({"hostname": "kubernetes.default.svc", "path": "/"}),
                "--ingress-host",
            ),
            (
                json!({"hostname": "u.team-a.mocks.example.com", "path": "/", "className": "internal-admin"}),
                "--ingress-class",
            ),
            (
                json!({"hostname": "u.team-a.mocks.example.com", "path": "/",
                    "annotations": {"nginx.ingress.kubernetes.io/server-snippet": "x"}}),
                "--child-annotation",
            ),
        ] {
            let found = reason(ingress, &policy).unwrap_or_default();
            assert!(
                found.starts_with("NotAllowed: ") && found.contains(flag),
                "{found}"
            );
        }
        let balancer: ApiMockSpec =
            serde_json::from_value(json!({"definition": "x", "service": {"type": "LoadBalancer"}}))
                .unwrap();
        let found = check(&balancer, &policy).unwrap_err();
        assert!(
            found.message.contains("--service-type"),
            "{}",
            found.message
        );
    }
}
