//! The Helm chart (`charts/metahooks`) as a platform team installs it, rendered offline by
//! the real `helm` (pinned by the test command, after `helm lint --strict`): with the
//! defaults it is the kustomize base, object for object (but the Namespace, which Helm's
//! `--create-namespace` makes); both ways each object passes `kubernetes-validate
//! --strict`, and with every value set the values land where they should.

use crate::support;

use serde_json::Value;

use super::manifests::{hook_namespaces, render, validate_built_in};

/// The chart rendered as release `metahooks` into `namespace`, with `values` (a file under
/// the chart), or None when helm is not installed. `helm lint --strict` must pass first.
fn render_chart(namespace: &str, values: Option<&str>) -> Option<Vec<Value>> {
    let chart = support::repo_dir().join("charts/metahooks");
    let values = values.map(|v| chart.join(v));
    let text = helm_template(&chart, namespace, values.as_deref(), &[])
        .map(|r| r.unwrap_or_else(|error| panic!("helm lint or template failed:\n{error}")))?;
    Some(support::yaml_documents(&text, "the rendered chart"))
}

/// `helm lint --strict`, then `helm template` with the CRDs, of `chart` as release
/// `metahooks` into `namespace` with a values file and `--set` pairs; the rendered
/// stream, or what helm said when either failed; None without helm.
pub(crate) fn helm_template(
    chart: &std::path::Path,
    namespace: &str,
    values: Option<&std::path::Path>,
    set: &[&str],
) -> Option<Result<String, String>> {
    let helm = support::oracles::tool("MHTEST_HELM")?;
    let mut options: Vec<std::ffi::OsString> = vec!["--namespace".into(), namespace.into()];
    if let Some(values) = values {
        options.extend(["--values".into(), values.as_os_str().to_owned()]);
    }
    for pair in set {
        options.extend(["--set".into(), (*pair).into()]);
    }
    let run = |args: &[&str]| {
        let output = std::process::Command::new(&helm)
            .args(args)
            .arg(chart)
            .args(&options)
            .output()
            .expect("helm runs");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(said)
        }
    };
    Some(run(&["lint", "--strict"]).and_then(|_| run(&["template", "metahooks", "--include-crds"])))
}

/// The labels Helm's conventions add and kustomize has no use for: which release, which
/// chart version, who manages it. Everything else must be the same.
const RELEASE_LABELS: [&str; 4] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

/// An object as compared: numbers by value (YAML writers differ on `10` and `10.0`), and
/// without the release labels (in metadata, selectors and pod templates alike).
fn numbers_as_floats(value: &Value) -> Value {
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64()),
        Value::Array(items) => Value::Array(items.iter().map(numbers_as_floats).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !RELEASE_LABELS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), numbers_as_floats(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn by_identity(objects: &[Value]) -> std::collections::BTreeMap<String, Value> {
    objects
        .iter()
        .map(|o| {
            let key = format!(
                "{} {}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            );
            (key, numbers_as_floats(o))
        })
        .collect()
}

#[test]
fn the_default_chart_is_the_kustomize_base() {
    let Some(chart) = render_chart("metahooks", None) else {
        return;
    };
    validate_built_in(&chart);
    let repo = support::repo_dir();
    let Some(mut base) = render(&repo.join("manifests")) else {
        return;
    };
    base.extend(render(&repo.join("manifests/crds")).unwrap_or_default());
    base.retain(|o| o["kind"] != "Namespace");
    let (chart, base) = (by_identity(&chart), by_identity(&base));
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        base.keys().collect::<Vec<_>>()
    );
    for (key, object) in &base {
        assert_eq!(
            &chart[key], object,
            "{key} differs between the chart and kustomize"
        );
    }
}

#[test]
fn every_value_lands_and_every_object_validates() {
    let Some(objects) = render_chart("platform", Some("ci/full-values.yaml")) else {
        return;
    };
    validate_built_in(&objects);
    assert_eq!(
        hook_namespaces(&objects),
        vec!["platform"; 12],
        "hook URLs follow the release"
    );
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    let pod = &find("Deployment", "metahooks")["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/platform/metahooks@sha256:5f3e9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f"
    );
    assert_eq!(pod["priorityClassName"], "platform-critical");
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    assert_eq!(pod["tolerations"][0]["key"], "dedicated");
    assert_eq!(pod["imagePullSecrets"][0]["name"], "registry-credentials");
    let env: std::collections::BTreeMap<&str, &str> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["value"].as_str().unwrap_or(""),
            )
        })
        .collect();
    for (name, value) in [
        ("METAHOOKS_ALLOW_CIDR", "10.20.0.0/16"),
        ("METAHOOKS_CACHE_MAX_BYTES", "2147483648"),
        ("METAHOOKS_DENY_SECRET_ENV", "true"),
        ("METAHOOKS_SOURCE_PROXY", "http://proxy.corp.example:3128"),
        ("METAHOOKS_RECEIVER_LISTEN", "0.0.0.0:8443"),
        ("METAHOOKS_LOG_FORMAT", "json"),
    ] {
        assert_eq!(env.get(name).copied(), Some(value), "{name}");
    }
    assert!(
        !env.contains_key("METAHOOKS_ALLOW_PRIVATE_ADDRESSES"),
        "false stays unset"
    );
    // Every policy value names a flag the server has.
    let cli = <metahooks::cli::Cli as clap::CommandFactory>::command();
    let serve = cli.find_subcommand("serve").unwrap();
    let known: Vec<String> = serve
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    for name in env.keys().filter(|n| n.starts_with("METAHOOKS_")) {
        assert!(
            known.iter().any(|k| k == name),
            "{name} is no flag of serve"
        );
    }
    let policy = find("NetworkPolicy", "metahooks");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "metacontroller-system"
    );
    assert_eq!(
        find("ServiceMonitor", "metahooks")["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(
        find("PrometheusRule", "metahooks")["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    let kept = find(
        "CustomResourceDefinition",
        "monitoredservices.services.example.com",
    );
    assert_eq!(
        kept["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    find("Service", "metahooks-receivers");
    find("ConfigMap", "metahooks-dashboard");
}

#[test]
fn the_charts_copies_are_the_kustomize_files() {
    let repo = support::repo_dir();
    for (copy, original) in [
        (
            "crds/apimocks.apirator.io.yaml",
            "manifests/crds/apimocks.apirator.io.yaml",
        ),
        (
            "crds/monitoredservices.metahooks.io.yaml",
            "manifests/crds/monitoredservices.metahooks.io.yaml",
        ),
        (
            "files/monitoredservices.services.example.com.yaml",
            "manifests/crds/config-monitor/monitoredservices.services.example.com.yaml",
        ),
        (
            "files/prometheusrule.yaml",
            "manifests/monitoring/prometheusrule.yaml",
        ),
        (
            "files/dashboard.json",
            "manifests/monitoring/dashboard.json",
        ),
        (
            "files/metacontroller-role.yaml",
            "manifests/controllers/metacontroller-role.yaml",
        ),
    ] {
        assert_eq!(
            std::fs::read_to_string(repo.join("charts/metahooks").join(copy)).unwrap(),
            std::fs::read_to_string(repo.join(original)).unwrap(),
            "charts/metahooks/{copy} must be a copy of {original}"
        );
    }
}

#[test]
fn every_ci_values_file_renders_objects_that_validate() {
    let dir = support::repo_dir().join("charts/metahooks/ci");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        let Some(objects) = render_chart("platform", Some(&format!("ci/{file}"))) else {
            return;
        };
        validate_built_in(&objects);
    }
}

/// A misspelt or mistyped value fails the render, naming it: with no schema, each of
/// these rendered exactly as the defaults do, a hardening silently off.
#[test]
fn a_misspelt_or_mistyped_value_fails_naming_it() {
    let chart = support::repo_dir().join("charts/metahooks");
    for (set, named) in [
        ("replica=3", "'replica'"),
        ("imag.tag=x", "'imag'"),
        ("resource.limits.cpu=1", "'resource'"),
        ("networkpolicy.enabled=false", "'networkpolicy'"),
        ("policy.ingresHost=*.example.com", "'ingresHost'"),
        ("replicas=two", "/replicas"),
        ("hookAuth.enabled=true", "hookAuth.existingSecret"),
        ("logFormat=yaml", "/logFormat"),
    ] {
        let Some(rendered) = helm_template(&chart, "metahooks", None, &[set]) else {
            return;
        };
        let refused = rendered.expect_err(set);
        assert!(refused.contains(named), "{set}: {refused}");
    }
}

#[test]
fn hook_authentication_reaches_every_registration_and_the_server() {
    let Some(objects) = render_chart("platform", Some("ci/hook-auth-values.yaml")) else {
        return;
    };
    let mut hooks = 0;
    for registration in objects
        .iter()
        .filter(|o| o["apiVersion"] == "metacontroller.k8s.io/v1alpha1")
    {
        for (_, hook) in registration["spec"]["hooks"].as_object().unwrap() {
            hooks += 1;
            assert_eq!(
                hook["webhook"]["authorization"],
                serde_json::json!({"type": "Bearer", "secretRef": {"name": "hook-token", "namespace": "platform", "key": "token"}}),
                "{registration}"
            );
            assert_eq!(hook["webhook"]["service"]["name"], "hooks");
        }
    }
    assert_eq!(hooks, 9);
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    assert_eq!(deployment["metadata"]["name"], "hooks");
    let pod = &deployment["spec"]["template"]["spec"];
    let env = pod["containers"][0]["env"].as_array().unwrap();
    let token_files = env
        .iter()
        .find(|e| e["name"] == "METAHOOKS_AUTH_TOKEN_FILE")
        .unwrap();
    assert_eq!(
        token_files["value"],
        "/etc/metahooks/hook-auth/token,/etc/metahooks/hook-auth/next-token"
    );
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "hook-auth")
        .unwrap();
    assert_eq!(volume["secret"]["secretName"], "hook-token");
    assert_eq!(
        pod["containers"][0]["readinessProbe"]["failureThreshold"],
        2
    );
    assert_eq!(
        objects
            .iter()
            .find(|o| o["kind"] == "ServiceAccount")
            .unwrap()["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/metahooks"
    );
    // One replica: a budget of minAvailable 1 would block every drain, so there is none.
    assert!(!objects.iter().any(|o| o["kind"] == "PodDisruptionBudget"));
    // Every object carries the standard labels.
    for object in &objects {
        if object["kind"] == "CustomResourceDefinition" {
            continue;
        }
        for label in RELEASE_LABELS {
            assert!(
                object["metadata"]["labels"].get(label).is_some(),
                "{label} missing on {} {}",
                object["kind"],
                object["metadata"]["name"]
            );
        }
    }
}
