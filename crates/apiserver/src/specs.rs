//! What the API server refuses in the specs hook authors get wrong most after data:
//! containers (ValidateContainers in pkg/apis/core/validation: a name, an image for
//! workloads, ports in range, env values that decode as strings), Services
//! (ValidateService: ports, their names and ranges), Ingress paths (a `pathType`,
//! required in networking.k8s.io/v1), PodDisruptionBudgets (one of minAvailable and
//! maxUnavailable, each a count or a percentage in range), HorizontalPodAutoscalers
//! (replica bounds, a scale target), Jobs (counts not negative, an Indexed Job's
//! completions) and CronJobs (a short enough name, a schedule, a known concurrency
//! policy, the Job template's rules).

use serde_json::Value;

use crate::pod_security::pod_spec_of;

/// The refusals of `object`'s containers, Service ports or Ingress paths (each without
/// the `Kind "name" is invalid: ` prefix).
pub(crate) fn refusals(kind: &str, object: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(pod_spec) = pod_spec_of(object) {
        let at = match kind {
            "Pod" => "spec",
            "CronJob" => "spec.jobTemplate.spec.template.spec",
            _ => "spec.template.spec",
        };
        for field in ["initContainers", "containers"] {
            containers(pod_spec, at, field, &mut found);
        }
    }
    match kind {
        "Service" => service(object, &mut found),
        "Ingress" => ingress(object, &mut found),
        "PodDisruptionBudget" => disruption_budget(object, &mut found),
        "HorizontalPodAutoscaler" => autoscaler(object, &mut found),
        "Job" => {
            if let Some(spec) = object.get("spec") {
                job_spec(spec, "spec", &mut found);
            }
        }
        "CronJob" => cron_job(object, &mut found),
        _ => {}
    }
    found
}

/// `ValidateNonnegativeField`, for an optional integer field of `spec`.
fn non_negative(spec: &Value, field: &str, at: &str, found: &mut Vec<String>) {
    if let Some(value) = spec.get(field).and_then(Value::as_i64)
        && value < 0
    {
        found.push(format!(
            "{at}.{field}: Invalid value: {value}: must be greater than or equal to 0"
        ));
    }
}

/// `ValidateJobSpec` (pkg/apis/batch/validation): counts and deadlines not negative,
/// and an Indexed Job's completions given.
fn job_spec(spec: &Value, at: &str, found: &mut Vec<String>) {
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        non_negative(spec, field, at, found);
    }
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed")
        && spec.get("completions").is_none_or(Value::is_null)
    {
        found.push(format!(
            "{at}.completions: Required value: when completion mode is Indexed"
        ));
    }
}

/// `ValidateCronJob` and `ValidateCronJobSpec`: a name that leaves room for the Jobs'
/// 11-character suffix, a schedule, a known concurrency policy, history limits and the
/// starting deadline not negative, and the Job template's own rules (its pods may not
/// restart in place).
fn cron_job(object: &Value, found: &mut Vec<String>) {
    if let Some(name) = object.pointer("/metadata/name").and_then(Value::as_str)
        && name.len() > 52
    {
        found.push(format!(
            "metadata.name: Invalid value: {name:?}: must be no more than 52 characters"
        ));
    }
    let Some(spec) = object.get("spec") else {
        found.push("spec.schedule: Required value".to_owned());
        return;
    };
    if spec
        .get("schedule")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        found.push("spec.schedule: Required value".to_owned());
    }
    for field in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        non_negative(spec, field, "spec", found);
    }
    if let Some(policy) = spec.get("concurrencyPolicy").and_then(Value::as_str)
        && !matches!(policy, "Allow" | "Forbid" | "Replace")
    {
        found.push(format!(
            "spec.concurrencyPolicy: Unsupported value: {policy:?}: supported values: \"Allow\", \"Forbid\", \"Replace\""
        ));
    }
    if let Some(job) = spec.pointer("/jobTemplate/spec") {
        job_spec(job, "spec.jobTemplate.spec", found);
    }
    let policy = spec
        .pointer("/jobTemplate/spec/template/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("Always");
    if !matches!(policy, "OnFailure" | "Never") {
        found.push(format!(
            "spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: {policy:?}: supported values: \"OnFailure\", \"Never\""
        ));
    }
}

/// `ValidatePodDisruptionBudgetSpec` (pkg/apis/policy/validation): not both of
/// minAvailable and maxUnavailable, each a non-negative count or a percentage of at most
/// 100% (`ValidatePositiveIntOrPercent`, `IsNotMoreThan100Percent`).
fn disruption_budget(object: &Value, found: &mut Vec<String>) {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let given = |field: &str| spec.get(field).filter(|v| !v.is_null());
    if given("minAvailable").is_some() && given("maxUnavailable").is_some() {
        found.push(
            "spec: Invalid value: minAvailable and maxUnavailable cannot be both set".to_owned(),
        );
    }
    for field in ["minAvailable", "maxUnavailable"] {
        let Some(value) = given(field) else { continue };
        let at = format!("spec.{field}");
        match value {
            Value::Number(n) if n.as_i64().is_some_and(|n| n < 0) => {
                found.push(format!("{at}: Invalid value: {n}: must be greater than or equal to 0"));
            }
            Value::Number(_) => {}
            Value::String(text) => match text.strip_suffix('%').map(str::parse::<i64>) {
                Some(Ok(percent)) if percent < 0 => found.push(format!(
                    "{at}: Invalid value: {text:?}: must be greater than or equal to 0"
                )),
                Some(Ok(percent)) if percent > 100 => found.push(format!(
                    "{at}: Invalid value: {text:?}: must not be greater than 100%"
                )),
                Some(Ok(_)) => {}
                _ => found.push(format!(
                    "{at}: Invalid value: {text:?}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
                )),
            },
            other => found.push(format!(
                "{at}: Invalid value: {other}: must be an integer or a percentage"
            )),
        }
    }
}

/// `ValidateHorizontalPodAutoscalerSpec` (pkg/apis/autoscaling/validation): minReplicas
/// at least 1, maxReplicas above 0 and not below minReplicas, a scale target with a kind
/// and a name.
fn autoscaler(object: &Value, found: &mut Vec<String>) {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let min = spec.get("minReplicas").and_then(Value::as_i64);
    let max = spec.get("maxReplicas").and_then(Value::as_i64).unwrap_or(0);
    if let Some(min) = min.filter(|m| *m < 1) {
        found.push(format!(
            "spec.minReplicas: Invalid value: {min}: must be greater than or equal to 1"
        ));
    }
    if max < 1 {
        found.push(format!(
            "spec.maxReplicas: Invalid value: {max}: must be greater than 0"
        ));
    }
    if min.is_some_and(|min| max < min) {
        found.push(format!(
            "spec.maxReplicas: Invalid value: {max}: must be greater than or equal to `minReplicas`"
        ));
    }
    for field in ["kind", "name"] {
        if spec
            .pointer(&format!("/scaleTargetRef/{field}"))
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            found.push(format!("spec.scaleTargetRef.{field}: Required value"));
        }
    }
}

fn containers(pod_spec: &Value, at: &str, field: &str, found: &mut Vec<String>) {
    let list = pod_spec.get(field).and_then(Value::as_array);
    if field == "containers" && list.is_none_or(Vec::is_empty) {
        found.push(format!("{at}.containers: Required value"));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, container) in list.into_iter().flatten().enumerate() {
        let at = format!("{at}.{field}[{i}]");
        let name = container
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name.is_empty() {
            found.push(format!("{at}.name: Required value"));
        } else if let Err(invalid) = crate::check_dns1123_label(name) {
            found.push(format!(
                "{at}.name: Invalid value: {name:?}: {}",
                invalid.problem
            ));
        } else if !names.insert(name.to_owned()) {
            found.push(format!("{at}.name: Duplicate value: {name:?}"));
        }
        if container
            .get("image")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            found.push(format!("{at}.image: Required value"));
        }
        ports(container, &at, found);
        env(container, &at, found);
    }
}

fn ports(container: &Value, at: &str, found: &mut Vec<String>) {
    for (i, port) in crate::indexed(container.get("ports")) {
        let at = format!("{at}.ports[{i}].containerPort");
        match port.get("containerPort") {
            None | Some(Value::Null) => found.push(format!("{at}: Required value")),
            Some(value) => port_number(value, &at, "ContainerPort.containerPort", found),
        }
    }
}

/// An `int32` port in 1–65535 (a string is a decoding error, as Go reports it).
fn port_number(value: &Value, at: &str, go_field: &str, found: &mut Vec<String>) {
    match value.as_i64() {
        Some(number) if (1..=65535).contains(&number) => {}
        Some(number) => found.push(format!(
            "{at}: Invalid value: {number}: must be between 1 and 65535, inclusive"
        )),
        None => found.push(format!(
            "{at}: json: cannot unmarshal {} into Go struct field {go_field} of type int32",
            crate::go_json_type(value)
        )),
    }
}

/// `env[].value` must decode as a string: `value: 8080` (a number) is the classic.
fn env(container: &Value, at: &str, found: &mut Vec<String>) {
    for (i, variable) in crate::indexed(container.get("env")) {
        let at = format!("{at}.env[{i}]");
        if variable
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            found.push(format!("{at}.name: Required value"));
        }
        if let Some(value) = variable
            .get("value")
            .filter(|v| !v.is_null() && !v.is_string())
        {
            found.push(format!(
                "{at}.value: json: cannot unmarshal {} into Go struct field EnvVar.value of type string",
                crate::go_json_type(value)
            ));
        }
    }
}

/// A Service needs ports unless it is headless or ExternalName (`ValidateService`,
/// pkg/apis/core/validation: `len(Ports) == 0 && !isHeadlessService && Type !=
/// ExternalName`, a headless Service's cluster IP being `None`); with more than one port,
/// each needs a name, and names are unique; port numbers in range; targetPort a number in
/// range or a name.
fn service(object: &Value, found: &mut Vec<String>) {
    let external = object.pointer("/spec/type").and_then(Value::as_str) == Some("ExternalName");
    let headless = object.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None")
        || object
            .pointer("/spec/clusterIPs")
            .and_then(Value::as_array)
            .is_some_and(|ips| ips.len() == 1 && ips[0] == "None");
    let ports = object.pointer("/spec/ports").and_then(Value::as_array);
    if !external && !headless && ports.is_none_or(Vec::is_empty) {
        found.push("spec.ports: Required value".to_owned());
    }
    let ports = ports.map_or(&[][..], Vec::as_slice);
    let mut names = std::collections::BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = format!("spec.ports[{i}]");
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            found.push(format!("{at}.name: Required value"));
        } else if !name.is_empty() && !names.insert(name.to_owned()) {
            found.push(format!("{at}.name: Duplicate value: {name:?}"));
        }
        match port.get("port") {
            None | Some(Value::Null) => found.push(format!("{at}.port: Required value")),
            Some(value) => port_number(value, &format!("{at}.port"), "ServicePort.port", found),
        }
        if let Some(target) = port.get("targetPort").filter(|t| !t.is_null())
            && let Some(number) = target.as_i64()
            && !(1..=65535).contains(&number)
        {
            found.push(format!(
                "{at}.targetPort: Invalid value: {number}: must be between 1 and 65535, inclusive"
            ));
        }
    }
}

/// `ValidateIngressSpec` (pkg/apis/networking/validation) for networking.k8s.io/v1: rules
/// or a default backend; hosts that are names, not addresses; each HTTP rule with paths,
/// each path with a supported `pathType`, absolute where the type needs it, and a
/// backend that is a Service (named, with a port name or number) or a resource, not both.
fn ingress(object: &Value, found: &mut Vec<String>) {
    let spec = object.get("spec");
    let rules = spec.and_then(|s| s.get("rules")).and_then(Value::as_array);
    let default_backend = spec
        .and_then(|s| s.get("defaultBackend"))
        .filter(|b| !b.is_null());
    if rules.is_none_or(Vec::is_empty) && default_backend.is_none() {
        found.push(
            "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified"
                .to_owned(),
        );
    }
    if let Some(backend) = default_backend {
        ingress_backend(backend, "spec.defaultBackend", found);
    }
    for (r, rule) in crate::indexed(object.pointer("/spec/rules")) {
        if let Some(host) = rule.get("host").and_then(Value::as_str)
            && host.parse::<std::net::IpAddr>().is_ok()
        {
            found.push(format!(
                "spec.rules[{r}].host: Invalid value: {host:?}: must be a DNS name, not an IP address"
            ));
        }
        let Some(http) = rule.get("http").filter(|h| !h.is_null()) else {
            continue;
        };
        if http
            .get("paths")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            found.push(format!("spec.rules[{r}].http.paths: Required value"));
        }
        for (p, path) in crate::indexed(http.get("paths")) {
            let at = format!("spec.rules[{r}].http.paths[{p}]");
            ingress_path(path, &at, found);
        }
    }
}

/// `validateHTTPIngressPath`: the path type first (nothing else is checked without one).
fn ingress_path(path: &Value, at: &str, found: &mut Vec<String>) {
    let Some(path_type) = path.get("pathType").filter(|t| !t.is_null()) else {
        found.push(format!(
            "{at}.pathType: Required value: pathType must be specified"
        ));
        return;
    };
    let text = path.get("path").and_then(Value::as_str).unwrap_or_default();
    match path_type.as_str() {
        Some("Exact" | "Prefix") => {
            if !text.starts_with('/') {
                found.push(format!(
                    "{at}.path: Invalid value: {text:?}: must be an absolute path"
                ));
            }
        }
        Some("ImplementationSpecific") => {
            if !text.is_empty() && !text.starts_with('/') {
                found.push(format!(
                    "{at}.path: Invalid value: {text:?}: must be an absolute path"
                ));
            }
        }
        _ => found.push(format!(
            "{at}.pathType: Unsupported value: {}: supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            path_type
        )),
    }
    match path.get("backend") {
        Some(backend) => ingress_backend(backend, &format!("{at}.backend"), found),
        None => found.push(format!(
            "{at}.backend: Invalid value: \"\": resource or service backend is required"
        )),
    }
}

/// `validateIngressBackend`: a resource or a Service, not both; a Service by name, with
/// a port name or a port number (not both), the number in range.
fn ingress_backend(backend: &Value, at: &str, found: &mut Vec<String>) {
    let resource = backend.get("resource").filter(|r| !r.is_null());
    let service = backend.get("service").filter(|s| !s.is_null());
    match (resource, service) {
        (Some(_), Some(_)) => found.push(format!(
            "{at}: Invalid value: \"\": cannot set both resource and service backends"
        )),
        (Some(_), None) => {}
        (None, None) => found.push(format!(
            "{at}: Invalid value: \"\": resource or service backend is required"
        )),
        (None, Some(service)) => {
            if service
                .get("name")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                found.push(format!("{at}.service.name: Required value"));
            }
            let name = service
                .pointer("/port/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty());
            let number = service
                .pointer("/port/number")
                .filter(|n| n.as_i64() != Some(0) && !n.is_null());
            match (name, number) {
                (Some(_), Some(_)) => found.push(format!(
                    "{at}: Invalid value: \"\": cannot set both port name & port number"
                )),
                (None, None) => found.push(format!(
                    "{at}: Required value: port name or number is required"
                )),
                (None, Some(number)) => {
                    port_number(
                        number,
                        &format!("{at}.service.port.number"),
                        "ServiceBackendPort.number",
                        found,
                    );
                }
                (Some(_), None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn refusals(object: serde_json::Value) -> Vec<String> {
        crate::refusals(&object)
    }

    #[test]
    fn what_hook_authors_get_wrong_in_specs_is_refused_in_the_api_servers_words() {
        let deployment = |container: serde_json::Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                   "spec": {"selector": {"matchLabels": {"app": "web"}},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [container]}}}})
        };
        assert_eq!(
            refusals(deployment(json!({"name": "web", "image": "web:1",
                "ports": [{"containerPort": 8080}], "env": [{"name": "A", "value": "1"}]}))),
            Vec::<String>::new()
        );
        let wrong = refusals(deployment(
            json!({"name": "Web", "ports": [{"containerPort": "8080"}],
            "env": [{"name": "PORT", "value": 8080}]}),
        ));
        let expected = [
            "Deployment \"web\" is invalid: spec.template.spec.containers[0].name: Invalid value: \"Web\"",
            "spec.template.spec.containers[0].image: Required value",
            "spec.template.spec.containers[0].ports[0].containerPort: json: cannot unmarshal string into Go struct field ContainerPort.containerPort of type int32",
            "spec.template.spec.containers[0].env[0].value: json: cannot unmarshal number into Go struct field EnvVar.value of type string",
        ];
        for (found, wanted) in wrong.iter().zip(expected) {
            assert!(found.contains(wanted), "{found}\n{wanted}");
        }
        assert_eq!(wrong.len(), expected.len(), "{wrong:?}");

        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"ports": [{"port": 80}, {"port": 70000, "name": "b"}]}});
        let found = refusals(service);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].ends_with("spec.ports[0].name: Required value"));
        assert!(found[1].ends_with(
            "spec.ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive"
        ));
        let no_ports =
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}, "spec": {}});
        assert!(refusals(no_ports)[0].ends_with("spec.ports: Required value"));
        let external = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}});
        assert!(refusals(external).is_empty());
        // A headless Service (a StatefulSet's governing Service, say) needs no ports.
        for headless in [
            json!({"clusterIP": "None"}),
            json!({"clusterIPs": ["None"]}),
        ] {
            let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"},
                "spec": headless});
            assert!(refusals(service).is_empty());
        }

        let budget = |spec: serde_json::Value| {
            refusals(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web"}, "spec": spec}),
            )
        };
        assert!(budget(json!({"minAvailable": 1, "selector": {}})).is_empty());
        assert!(budget(json!({"maxUnavailable": "25%"})).is_empty());
        assert!(
            budget(json!({"minAvailable": 1, "maxUnavailable": 1}))[0]
                .ends_with("minAvailable and maxUnavailable cannot be both set")
        );
        assert!(
            budget(json!({"minAvailable": "150%"}))[0].ends_with("must not be greater than 100%")
        );
        assert!(
            budget(json!({"maxUnavailable": -1}))[0]
                .ends_with("must be greater than or equal to 0")
        );
        let autoscaler = |spec: serde_json::Value| {
            refusals(
                json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"}, "spec": spec}),
            )
        };
        let target = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"});
        assert!(
            autoscaler(json!({"scaleTargetRef": target, "minReplicas": 1, "maxReplicas": 3}))
                .is_empty()
        );
        let found =
            autoscaler(json!({"scaleTargetRef": target, "minReplicas": 4, "maxReplicas": 3}));
        assert!(
            found[0].ends_with(
                "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"
            ),
            "{found:?}"
        );
        let found = autoscaler(json!({"minReplicas": 0, "maxReplicas": 0}));
        assert_eq!(found.len(), 4, "{found:?}");

        let ingress = json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
            "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {}}]}}]}});
        assert!(refusals(ingress)[0].ends_with(
            "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"
        ));
    }

    /// ValidateJobSpec and ValidateCronJob (pkg/apis/batch/validation/validation.go).
    #[test]
    fn jobs_and_cron_jobs_as_validate_job_spec_and_validate_cron_job_have_them() {
        let template = json!({"spec": {"restartPolicy": "Never",
            "containers": [{"name": "run", "image": "busybox"}]}});
        let job = |extra: serde_json::Value| {
            let mut spec = json!({"template": template});
            for (k, v) in extra.as_object().unwrap() {
                spec[k] = v.clone();
            }
            refusals(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "run"}, "spec": spec}),
            )
        };
        assert!(job(json!({"parallelism": 2, "completions": 4})).is_empty());
        assert!(job(json!({"completionMode": "Indexed", "completions": 3})).is_empty());
        assert!(
            job(json!({"backoffLimit": -1}))[0].ends_with(
                "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"
            )
        );
        assert!(
            job(json!({"completionMode": "Indexed"}))[0]
                .ends_with("spec.completions: Required value: when completion mode is Indexed")
        );
        let cron = |name: &str, spec: serde_json::Value| {
            refusals(
                json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name}, "spec": spec}),
            )
        };
        let good =
            json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": template}}});
        assert_eq!(cron("nightly", good.clone()), Vec::<String>::new());
        let mut no_schedule = good.clone();
        no_schedule["schedule"] = json!("");
        assert!(cron("nightly", no_schedule)[0].ends_with("spec.schedule: Required value"));
        assert!(
            cron(&"n".repeat(53), good.clone())[0].ends_with("must be no more than 52 characters")
        );
        let mut policy = good.clone();
        policy["concurrencyPolicy"] = json!("Queue");
        assert!(cron("nightly", policy)[0].ends_with(
            "spec.concurrencyPolicy: Unsupported value: \"Queue\": supported values: \"Allow\", \"Forbid\", \"Replace\""
        ));
        let mut restarts = good;
        restarts["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        restarts["jobTemplate"]["spec"]["parallelism"] = json!(-2);
        let found = cron("nightly", restarts);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].ends_with("spec.jobTemplate.spec.parallelism: Invalid value: -2: must be greater than or equal to 0"));
        assert!(found[1].ends_with("spec.jobTemplate.spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\""));
    }

    /// validateIngressRules, validateHTTPIngressPath and validateIngressBackend
    /// (pkg/apis/networking/validation/validation.go), one rule at a time.
    #[test]
    fn ingress_rules_paths_and_backends_as_validate_ingress_spec_has_them() {
        let ingress = |spec: serde_json::Value| {
            refusals(
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                            "metadata": {"name": "web"}, "spec": spec}),
            )
        };
        let service = json!({"service": {"name": "web", "port": {"number": 80}}});
        let path = |extra: serde_json::Value| {
            let mut path = json!({"path": "/", "pathType": "Prefix", "backend": service});
            for (k, v) in extra.as_object().unwrap() {
                path[k] = v.clone();
            }
            json!({"rules": [{"host": "web.example.com", "http": {"paths": [path]}}]})
        };
        assert_eq!(ingress(path(json!({}))), Vec::<String>::new());
        assert!(ingress(json!({"defaultBackend": service})).is_empty());
        // ImplementationSpecific may leave the path empty.
        assert!(
            ingress(path(
                json!({"pathType": "ImplementationSpecific", "path": ""})
            ))
            .is_empty()
        );
        let cases = [
            (
                json!({}),
                "spec: Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified",
            ),
            (
                json!({"rules": [{"host": "10.0.0.1"}]}),
                "spec.rules[0].host: Invalid value: \"10.0.0.1\": must be a DNS name, not an IP address",
            ),
            (
                json!({"rules": [{"http": {"paths": []}}]}),
                "spec.rules[0].http.paths: Required value",
            ),
            (
                path(json!({"path": "api"})),
                "spec.rules[0].http.paths[0].path: Invalid value: \"api\": must be an absolute path",
            ),
            (
                path(json!({"pathType": "Regex"})),
                "spec.rules[0].http.paths[0].pathType: Unsupported value: \"Regex\": supported values: \"Exact\", \"ImplementationSpecific\", \"Prefix\"",
            ),
            (
                path(json!({"backend": {}})),
                "spec.rules[0].http.paths[0].backend: Invalid value: \"\": resource or service backend is required",
            ),
            (
                path(
                    json!({"backend": {"service": {"name": "web", "port": {"number": 80}},
                                         "resource": {"kind": "Bucket", "name": "b"}}}),
                ),
                "spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both resource and service backends",
            ),
            (
                path(json!({"backend": {"service": {"name": "web", "port": {}}}})),
                "spec.rules[0].http.paths[0].backend: Required value: port name or number is required",
            ),
            (
                path(
                    json!({"backend": {"service": {"name": "web", "port": {"name": "http", "number": 80}}}}),
                ),
                "spec.rules[0].http.paths[0].backend: Invalid value: \"\": cannot set both port name & port number",
            ),
            (
                path(json!({"backend": {"service": {"name": "web", "port": {"number": 70000}}}})),
                "spec.rules[0].http.paths[0].backend.service.port.number: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                path(json!({"backend": {"service": {"port": {"number": 80}}}})),
                "spec.rules[0].http.paths[0].backend.service.name: Required value",
            ),
        ];
        for (spec, expected) in cases {
            let found = ingress(spec.clone());
            assert_eq!(found.len(), 1, "{spec}: {found:?}");
            assert!(
                found[0].ends_with(expected),
                "{spec}:\n{}\n{expected}",
                found[0]
            );
        }
    }
}
