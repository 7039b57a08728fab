//! The Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards,
//! as k8s.io/pod-security-admission's `policy` checks apply them), checked field by field
//! on a pod spec: what the PodSecurity admission would refuse in a namespace labelled
//! `pod-security.kubernetes.io/enforce: baseline` or `restricted`.

use serde_json::Value;

/// A Pod Security level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// No restriction.
    Privileged,
    /// Known privilege escalations refused.
    Baseline,
    /// Current hardening practice.
    Restricted,
}

impl Level {
    /// The level a namespace label value names (`privileged`, `baseline`, `restricted`).
    pub fn parse(label: &str) -> Option<Level> {
        match label {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }

    /// The level as a label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// Capabilities baseline allows a container to add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Sysctls baseline allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// Volume types restricted allows.
const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// SELinux types baseline allows.
const SELINUX_TYPES: &[&str] = &[
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The pod spec of a Pod or of a workload's pod template (Deployment, ReplicaSet,
/// StatefulSet, DaemonSet, Job, CronJob), if the object has one.
pub fn pod_spec_of(object: &Value) -> Option<&Value> {
    match object.get("kind").and_then(Value::as_str)? {
        "Pod" => object.get("spec"),
        "CronJob" => object.pointer("/spec/jobTemplate/spec/template/spec"),
        "Deployment"
        | "ReplicaSet"
        | "StatefulSet"
        | "DaemonSet"
        | "Job"
        | "ReplicationController" => object.pointer("/spec/template/spec"),
        _ => None,
    }
}

/// What the pod spec breaks at `level`, one line per rule and field, in the words of
/// the standard's control names (empty: the pod is admitted). `annotations` are the
/// pod's (AppArmor may still be set there).
pub fn violations(spec: &Value, annotations: Option<&Value>, level: Level) -> Vec<String> {
    let mut found = Vec::new();
    if level == Level::Privileged {
        return found;
    }
    baseline(spec, annotations, &mut found);
    if level == Level::Restricted {
        restricted(spec, &mut found);
    }
    found
}

/// Every container of the pod, with the field path it is at.
fn containers(spec: &Value) -> Vec<(String, &Value)> {
    let mut all = Vec::new();
    for field in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, container) in items(spec, &format!("/{field}")).enumerate() {
            let name = container.get("name").and_then(Value::as_str).unwrap_or("");
            all.push((format!("{field}[{i}] {name:?}"), container));
        }
    }
    all
}

/// The items of the array at `pointer` (none when it is absent or not an array).
fn items<'a>(value: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The capabilities a container's securityContext adds.
fn added_capabilities(context: Option<&Value>) -> impl Iterator<Item = &str> {
    context
        .into_iter()
        .flat_map(|c| items(c, "/capabilities/add"))
        .filter_map(Value::as_str)
}

fn text<'a>(value: &'a Value, pointer: &str) -> Option<&'a str> {
    value.pointer(pointer).and_then(Value::as_str)
}

fn flag(value: &Value, pointer: &str) -> Option<bool> {
    value.pointer(pointer).and_then(Value::as_bool)
}

fn baseline(spec: &Value, annotations: Option<&Value>, found: &mut Vec<String>) {
    baseline_pod(spec, found);
    let mut contexts = vec![("pod".to_owned(), spec.get("securityContext"))];
    for (at, container) in containers(spec) {
        let context = container.get("securityContext");
        baseline_container(&at, container, context, found);
        contexts.push((at, context));
    }
    for (at, context) in &contexts {
        if let Some(context) = context {
            baseline_confinement(at, context, found);
        }
    }
    for (key, value) in annotations.and_then(Value::as_object).into_iter().flatten() {
        if key.starts_with("container.apparmor.security.beta.kubernetes.io/") {
            let value = value.as_str().unwrap_or("");
            if value != "runtime/default" && !value.starts_with("localhost/") {
                found.push(format!("AppArmor: annotation {key}={value:?}"));
            }
        }
    }
}

/// Baseline's pod-level controls: host namespaces and processes, hostPath, sysctls.
fn baseline_pod(spec: &Value, found: &mut Vec<String>) {
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if flag(spec, &format!("/{field}")) == Some(true) {
            found.push(format!("host namespaces: {field}=true"));
        }
    }
    if flag(spec, "/securityContext/windowsOptions/hostProcess") == Some(true) {
        found.push("HostProcess: securityContext.windowsOptions.hostProcess=true".to_owned());
    }
    for volume in items(spec, "/volumes") {
        if volume.get("hostPath").is_some() {
            let name = volume.get("name").and_then(Value::as_str).unwrap_or("");
            found.push(format!("hostPath volumes: volume {name:?}"));
        }
    }
    for sysctl in items(spec, "/securityContext/sysctls") {
        let name = text(sysctl, "/name").unwrap_or("");
        if !SAFE_SYSCTLS.contains(&name) {
            found.push(format!("sysctls: {name:?} is not a safe sysctl"));
        }
    }
}

/// Baseline's container controls: privileged, hostProcess, capabilities, host ports,
/// the /proc mount.
fn baseline_container(
    at: &str,
    container: &Value,
    context: Option<&Value>,
    found: &mut Vec<String>,
) {
    if context.and_then(|c| flag(c, "/privileged")) == Some(true) {
        found.push(format!("privileged: {at} securityContext.privileged=true"));
    }
    if context.and_then(|c| flag(c, "/windowsOptions/hostProcess")) == Some(true) {
        found.push(format!("HostProcess: {at} hostProcess=true"));
    }
    for added in added_capabilities(context) {
        if !BASELINE_CAPABILITIES.contains(&added) {
            found.push(format!("capabilities: {at} adds {added:?}"));
        }
    }
    for port in items(container, "/ports") {
        if port
            .get("hostPort")
            .and_then(Value::as_i64)
            .is_some_and(|p| p != 0)
        {
            found.push(format!("host ports: {at} hostPort={}", port["hostPort"]));
        }
    }
    if let Some(mount) = context.and_then(|c| text(c, "/procMount"))
        && mount != "Default"
    {
        found.push(format!("/proc mount type: {at} procMount={mount:?}"));
    }
}

/// Baseline's confinement controls, for the pod's and each container's context:
/// seccomp, AppArmor and SELinux.
fn baseline_confinement(at: &str, context: &Value, found: &mut Vec<String>) {
    if text(context, "/seccompProfile/type") == Some("Unconfined") {
        found.push(format!("seccomp: {at} seccompProfile.type=Unconfined"));
    }
    if let Some(kind) = text(context, "/appArmorProfile/type")
        && kind == "Unconfined"
    {
        found.push(format!("AppArmor: {at} appArmorProfile.type=Unconfined"));
    }
    if let Some(options) = context.get("seLinuxOptions") {
        let kind = text(options, "/type").unwrap_or("");
        if !SELINUX_TYPES.contains(&kind) {
            found.push(format!("SELinux: {at} seLinuxOptions.type={kind:?}"));
        }
        if options.get("user").is_some() || options.get("role").is_some() {
            found.push(format!("SELinux: {at} sets seLinuxOptions.user or role"));
        }
    }
}

fn restricted(spec: &Value, found: &mut Vec<String>) {
    restricted_volumes(spec, found);
    let pod = spec.get("securityContext");
    let pod_non_root = pod.and_then(|c| flag(c, "/runAsNonRoot"));
    let pod_seccomp = pod.and_then(|c| text(c, "/seccompProfile/type"));
    if pod.and_then(|c| c.get("runAsUser")).and_then(Value::as_i64) == Some(0) {
        found.push("running as non-root user: pod runAsUser=0".to_owned());
    }
    for (at, container) in containers(spec) {
        let context = container.get("securityContext");
        if context.and_then(|c| flag(c, "/allowPrivilegeEscalation")) != Some(false) {
            found.push(format!(
                "privilege escalation: {at} must set securityContext.allowPrivilegeEscalation=false"
            ));
        }
        match context.and_then(|c| flag(c, "/runAsNonRoot")) {
            Some(false) => found.push(format!("running as non-root: {at} runAsNonRoot=false")),
            None if pod_non_root != Some(true) => found.push(format!(
                "running as non-root: {at} must set runAsNonRoot=true (or the pod must)"
            )),
            _ => {}
        }
        if context
            .and_then(|c| c.get("runAsUser"))
            .and_then(Value::as_i64)
            == Some(0)
        {
            found.push(format!("running as non-root user: {at} runAsUser=0"));
        }
        let seccomp = context
            .and_then(|c| text(c, "/seccompProfile/type"))
            .or(pod_seccomp);
        if !matches!(seccomp, Some("RuntimeDefault" | "Localhost")) {
            found.push(format!(
                "seccomp: {at} must have seccompProfile.type RuntimeDefault or Localhost (or the pod must)"
            ));
        }
        restricted_capabilities(&at, context, found);
    }
}

/// Restricted's volume types: only those that cannot reach the node (hostPath is
/// baseline's to report).
fn restricted_volumes(spec: &Value, found: &mut Vec<String>) {
    for volume in items(spec, "/volumes") {
        let Some(map) = volume.as_object() else {
            continue;
        };
        for field in map.keys().filter(|k| *k != "name") {
            if !RESTRICTED_VOLUMES.contains(&field.as_str()) && field != "hostPath" {
                let name = map.get("name").and_then(Value::as_str).unwrap_or("");
                found.push(format!("volume types: volume {name:?} is {field}"));
            }
        }
    }
}

/// Restricted's capabilities: drop ALL, add at most NET_BIND_SERVICE.
fn restricted_capabilities(at: &str, context: Option<&Value>, found: &mut Vec<String>) {
    let dropped_all = context
        .and_then(|c| c.pointer("/capabilities/drop"))
        .and_then(Value::as_array)
        .is_some_and(|d| d.iter().any(|c| c.as_str() == Some("ALL")));
    if !dropped_all {
        found.push(format!("capabilities: {at} must drop ALL"));
    }
    for added in added_capabilities(context) {
        if added != "NET_BIND_SERVICE" {
            found.push(format!(
                "capabilities: {at} may add only NET_BIND_SERVICE, adds {added:?}"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn restricted_pod() -> Value {
        json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "image": "x",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}],
            "volumes": [{"name": "c", "configMap": {"name": "c"}}, {"name": "t", "emptyDir": {}}],
        })
    }

    /// Sets the field at `pointer`, adding it to its parent when missing.
    fn set(pod: &mut Value, pointer: &str, value: Value) {
        if let Some(slot) = pod.pointer_mut(pointer) {
            *slot = value;
            return;
        }
        let (parent, field) = pointer.rsplit_once('/').unwrap();
        pod.pointer_mut(parent)
            .unwrap_or_else(|| panic!("{parent}"))[field] = value;
    }

    /// Each (field, value) set on a good pod breaks `level` with a message naming `expected`.
    fn each_is_refused(cases: Vec<(&str, Value, &str)>, level: Level) {
        for (pointer, value, expected) in cases {
            let mut pod = restricted_pod();
            set(&mut pod, pointer, value);
            let found = violations(&pod, None, level);
            assert!(
                found.iter().any(|f| f.contains(expected)),
                "{pointer}: {found:?}"
            );
        }
    }

    #[test]
    fn a_pod_written_to_the_standard_passes_every_level() {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(
                violations(&restricted_pod(), None, level),
                Vec::<String>::new()
            );
        }
    }

    #[test]
    fn each_restricted_control_is_checked() {
        let cases: Vec<(&str, Value, &str)> = vec![
            (
                "/containers/0/securityContext/allowPrivilegeEscalation",
                json!(true),
                "privilege escalation",
            ),
            (
                "/securityContext/runAsNonRoot",
                json!(false),
                "running as non-root",
            ),
            (
                "/containers/0/securityContext/runAsUser",
                json!(0),
                "non-root user",
            ),
            (
                "/securityContext/seccompProfile/type",
                json!("Unconfined"),
                "seccomp",
            ),
            (
                "/containers/0/securityContext/capabilities/drop",
                json!(["NET_RAW"]),
                "must drop ALL",
            ),
            (
                "/containers/0/securityContext/capabilities/add",
                json!(["NET_BIND_SERVICE", "CHOWN"]),
                "only NET_BIND_SERVICE",
            ),
            (
                "/volumes/1",
                json!({"name": "n", "nfs": {"server": "s", "path": "/"}}),
                "volume types",
            ),
        ];
        each_is_refused(cases, Level::Restricted);
        // Restricted's own controls are not baseline's.
        let mut escalating = restricted_pod();
        set(
            &mut escalating,
            "/containers/0/securityContext/allowPrivilegeEscalation",
            json!(true),
        );
        assert_eq!(
            violations(&escalating, None, Level::Baseline),
            Vec::<String>::new()
        );
    }

    #[test]
    fn each_baseline_control_is_checked() {
        let cases: Vec<(&str, Value, &str)> = vec![
            ("/hostNetwork", json!(true), "host namespaces"),
            (
                "/containers/0/securityContext/privileged",
                json!(true),
                "privileged",
            ),
            (
                "/containers/0/securityContext/capabilities/add",
                json!(["SYS_ADMIN"]),
                "capabilities",
            ),
            (
                "/volumes/1",
                json!({"name": "h", "hostPath": {"path": "/"}}),
                "hostPath",
            ),
            (
                "/containers/0/ports",
                json!([{"containerPort": 80, "hostPort": 80}]),
                "host ports",
            ),
            (
                "/containers/0/securityContext/procMount",
                json!("Unmasked"),
                "/proc mount",
            ),
            (
                "/securityContext/sysctls",
                json!([{"name": "kernel.msgmax", "value": "1"}]),
                "sysctls",
            ),
            (
                "/securityContext/seLinuxOptions",
                json!({"type": "spc_t"}),
                "SELinux",
            ),
        ];
        each_is_refused(cases, Level::Baseline);
        let annotations =
            json!({"container.apparmor.security.beta.kubernetes.io/app": "unconfined"});
        assert!(!violations(&restricted_pod(), Some(&annotations), Level::Baseline).is_empty());
    }

    #[test]
    fn workloads_carry_their_pod_spec_in_the_template() {
        let deployment =
            json!({"kind": "Deployment", "spec": {"template": {"spec": restricted_pod()}}});
        assert!(pod_spec_of(&deployment).is_some());
        let cronjob = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        assert!(pod_spec_of(&cronjob).is_some());
        assert!(pod_spec_of(&json!({"kind": "Service"})).is_none());
    }
}
