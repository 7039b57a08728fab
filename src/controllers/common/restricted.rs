//! Pods that Pod Security "restricted" admits (the Pod Security Standards, as the
//! API server's PodSecurity admission applies them): non-root, no privilege
//! escalation, every capability dropped, the runtime's default seccomp profile, and no
//! service-account token mounted into pods that never call the API server.

use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};

/// The pod-level context: non-root and RuntimeDefault seccomp for every container,
/// with `user` as uid and gid when the image's own user is known.
pub fn pod(user: Option<i64>) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: user,
        run_as_group: user,
        seccomp_profile: Some(runtime_default()),
        ..PodSecurityContext::default()
    }
}

/// A container's context: no privilege escalation, no capabilities, and a read-only
/// root filesystem where the program writes nowhere but its mounted volumes.
pub fn container(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            ..Capabilities::default()
        }),
        read_only_root_filesystem: read_only_root.then_some(true),
        ..SecurityContext::default()
    }
}

/// `given` with every field it leaves unset taken from the restricted pod context
/// (so `runAsNonRoot: false` is an explicit, visible opt-out).
pub fn fill_pod(given: Option<PodSecurityContext>) -> PodSecurityContext {
    let defaults = pod(None);
    let mut context = given.unwrap_or_default();
    context.run_as_non_root = context.run_as_non_root.or(defaults.run_as_non_root);
    context.seccomp_profile = context.seccomp_profile.or(defaults.seccomp_profile);
    context
}

/// `given` with every field it leaves unset taken from the restricted container
/// context (the root filesystem stays writable unless asked: the image is unknown).
pub fn fill_container(given: Option<SecurityContext>) -> SecurityContext {
    let defaults = container(false);
    let mut context = given.unwrap_or_default();
    context.allow_privilege_escalation = context
        .allow_privilege_escalation
        .or(defaults.allow_privilege_escalation);
    context.capabilities = context.capabilities.or(defaults.capabilities);
    context
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        ..SeccompProfile::default()
    }
}
