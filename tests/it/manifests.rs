//! The kustomize manifests as a platform team uses them: rendered by `kubectl kustomize`
//! (when kubectl is installed; the test command runs it too), with the CRDs apart from
//! the server, and an overlay that moves the server whose hook registrations and
//! NetworkPolicies follow. Every rendered object of a built-in kind passes
//! `kubernetes-validate --strict`.

use crate::support;

use serde_json::{Value, json};

/// `kubectl kustomize dir`, or None (with a note) when kubectl is not installed.
pub(crate) fn render(dir: &std::path::Path) -> Option<Vec<Value>> {
    let kubectl = support::oracles::tool("MHTEST_KUBECTL")?;
    let output = std::process::Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    Some(support::yaml_documents(&text, "the kustomize output"))
}

/// Every webhook `service.namespace` of the hook registrations.
pub(crate) fn hook_namespaces(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| o["apiVersion"] == "metacontroller.k8s.io/v1alpha1")
        .flat_map(|o| {
            ["sync", "finalize", "customize"]
                .into_iter()
                .filter_map(move |hook| {
                    o["spec"]["hooks"][hook]["webhook"]["service"]["namespace"].as_str()
                })
        })
        .map(str::to_owned)
        .collect()
}

/// The namespace a NetworkPolicy's `index`-th ingress rule admits.
fn admitted(objects: &[Value], policy: &str, index: usize) -> Option<String> {
    objects
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy" && o["metadata"]["name"] == policy)?
        ["spec"]["ingress"][index]["from"][0]["namespaceSelector"]["matchLabels"]
        ["kubernetes.io/metadata.name"]
        .as_str()
        .map(str::to_owned)
}

pub(crate) fn validate_built_in(objects: &[Value]) {
    let built_in: Vec<Value> = objects
        .iter()
        .filter(|o| {
            let api = o["apiVersion"].as_str().unwrap_or("");
            !api.starts_with("metacontroller.k8s.io/") && !api.starts_with("monitoring.coreos.com/")
        })
        .cloned()
        .collect();
    if let Some(problems) = support::oracles::kubernetes_validate(&built_in, &["1.30", "1.33"]) {
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}

#[test]
fn the_base_leaves_the_crds_alone_and_the_crds_bring_their_roles() {
    let Some(base) = render(&support::repo_dir().join("manifests")) else {
        return;
    };
    assert!(
        !base.iter().any(|o| o["kind"] == "CustomResourceDefinition"),
        "deleting the server must not delete the CRDs"
    );
    assert!(
        !base.iter().any(|o| o["kind"] == "ConfigMap"),
        "the settings object is never applied"
    );
    assert_eq!(hook_namespaces(&base), vec!["metahooks"; 9]);
    validate_built_in(&base);
    let crds = render(&support::repo_dir().join("manifests/crds")).unwrap_or_default();
    let kinds: Vec<&str> = crds.iter().filter_map(|o| o["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        [
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRole"
        ]
    );
    let aggregated: Vec<&Value> = crds
        .iter()
        .filter(|o| o["kind"] == "ClusterRole")
        .flat_map(|o| o["metadata"]["labels"].as_object().into_iter().flatten())
        .filter(|(key, _)| key.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
        .map(|(_, value)| value)
        .collect();
    assert_eq!(aggregated.len(), 3, "admin, edit and view");
    validate_built_in(&crds);
}

#[test]
fn an_overlay_in_another_namespace_takes_the_hooks_and_policies_along() {
    let Some(production) = render(&support::repo_dir().join("overlays/production")) else {
        return;
    };
    assert_eq!(hook_namespaces(&production), vec!["platform-metahooks"; 9]);
    let service = production
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "metahooks")
        .unwrap();
    assert_eq!(service["metadata"]["namespace"], "platform-metahooks");
    assert_eq!(
        admitted(&production, "metahooks", 0).as_deref(),
        Some("metacontroller")
    );
    assert_eq!(
        admitted(&production, "metahooks", 1).as_deref(),
        Some("monitoring")
    );
    let env: Vec<&str> = production
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|e| e["name"].as_str())
        .collect();
    for flag in [
        "METAHOOKS_INGRESS_HOST",
        "METAHOOKS_INGRESS_CLASS",
        "METAHOOKS_CHILD_ANNOTATION",
        "METAHOOKS_SERVICE_TYPE",
        "METAHOOKS_DENY_SECRET_ENV",
    ] {
        assert!(env.contains(&flag), "{flag} missing from {env:?}");
    }
    assert!(production.iter().any(|o| o["kind"] == "PrometheusRule"));
    validate_built_in(&production);

    // An overlay of its own: another namespace, Metacontroller and the ingress controller
    // elsewhere, the receivers component; one settings patch and the retarget transformer.
    let dir = tempfile::tempdir().unwrap();
    // kustomize takes only relative paths to other kustomizations.
    let up = "../".repeat(dir.path().components().count() - 1);
    let repo = support::repo_dir();
    let base = format!(
        "{up}{}",
        repo.join("manifests")
            .to_string_lossy()
            .trim_start_matches('/')
    );
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "namespace: hooks-elsewhere\nresources: [{base}]\ncomponents: [{base}/receivers]\n\
             patches:\n  - target: {{kind: ConfigMap, name: metahooks-settings}}\n    patch: |-\n\
             \x20     - {{op: replace, path: /data/metacontrollerNamespace, value: mc-system}}\n\
             \x20     - {{op: replace, path: /data/ingressNamespace, value: gateways}}\n\
             transformers: [{base}/retarget]\n"
        ),
    )
    .unwrap();
    let Some(elsewhere) = render(dir.path()) else {
        return;
    };
    assert_eq!(hook_namespaces(&elsewhere), vec!["hooks-elsewhere"; 9]);
    assert_eq!(
        admitted(&elsewhere, "metahooks", 0).as_deref(),
        Some("mc-system")
    );
    assert_eq!(
        admitted(&elsewhere, "metahooks-receivers", 0).as_deref(),
        Some("gateways")
    );
}

/// An overlay as a platform team writes one, with only `resources:`, `namespace:` and
/// `namePrefix:` (and the hook-auth component): every hook calls the renamed Service in
/// the new namespace, with the token Secret in that namespace, and the server reads it.
#[test]
fn an_overlay_with_only_namespace_and_name_prefix_keeps_every_hook_on_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let up = "../".repeat(dir.path().components().count() - 1);
    let base = format!(
        "{up}{}",
        support::repo_dir()
            .join("manifests")
            .to_string_lossy()
            .trim_start_matches('/')
    );
    let write = |extra: &str| {
        std::fs::write(
            dir.path().join("kustomization.yaml"),
            format!("namespace: platform-tools\nnamePrefix: acme-\nresources: [{base}]\n{extra}"),
        )
        .unwrap();
        render(dir.path())
    };
    let Some(plain) = write("") else {
        return;
    };
    let Some(with_auth) = write(&format!("components: [{base}/components/hook-auth]\n")) else {
        return;
    };
    for objects in [&plain, &with_auth] {
        let service = objects.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(service["metadata"]["name"], "acme-metahooks");
        assert_eq!(hook_namespaces(objects), vec!["platform-tools"; 9]);
        let names: Vec<&Value> = objects
            .iter()
            .filter(|o| o["apiVersion"] == "metacontroller.k8s.io/v1alpha1")
            .flat_map(|o| {
                ["sync", "finalize", "customize"]
                    .into_iter()
                    .map(move |hook| &o["spec"]["hooks"][hook]["webhook"]["service"]["name"])
            })
            .collect();
        assert_eq!(names.len(), 9);
        assert!(names.iter().all(|n| *n == "acme-metahooks"), "{names:?}");
        validate_built_in(objects);
    }
    for registration in with_auth
        .iter()
        .filter(|o| o["apiVersion"] == "metacontroller.k8s.io/v1alpha1")
    {
        for hook in ["sync", "finalize", "customize"] {
            let secret =
                &registration["spec"]["hooks"][hook]["webhook"]["authorization"]["secretRef"];
            assert_eq!(
                (&secret["name"], &secret["namespace"], &secret["key"]),
                (
                    &json!("metahooks-hook-token"),
                    &json!("platform-tools"),
                    &json!("token")
                )
            );
        }
    }
    let deployment = with_auth
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
    assert!(
        env.as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "METAHOOKS_AUTH_TOKEN_FILE"
                && e["value"] == "/etc/metahooks/hook-auth/token"),
        "{env}"
    );
}

/// The Metacontroller release that introduced each registration field the shipped
/// registrations use, read from metacontroller/metacontroller's history: the first
/// commit adding the field's `json:"…"` tag to pkg/apis/metacontroller/v1alpha1/types.go
/// (`git log -S`), and the first tag containing it (`git tag --contains`).
const INTRODUCED: &[(&str, (u32, u32, u32))] = &[
    ("spec.parentResource.apiVersion", (0, 2, 0)),
    ("spec.parentResource.resource", (0, 2, 0)),
    ("spec.childResources[].apiVersion", (0, 2, 0)),
    ("spec.childResources[].resource", (0, 2, 0)),
    ("spec.childResources[].updateStrategy.method", (0, 2, 0)),
    ("spec.resources[].apiVersion", (0, 2, 0)),
    ("spec.resources[].resource", (0, 2, 0)),
    ("spec.resources[].annotationSelector", (0, 2, 0)),
    ("spec.resources[].labelSelector", (0, 2, 0)),
    ("spec.resources[].ignoreStatusChanges", (4, 11, 16)),
    ("spec.attachments[].apiVersion", (0, 2, 0)),
    ("spec.attachments[].resource", (0, 2, 0)),
    ("spec.attachments[].updateStrategy.method", (0, 2, 0)),
    ("spec.generateSelector", (0, 2, 0)),
    ("spec.hooks.*.version", (4, 4, 0)),
    ("spec.hooks.*.webhook.path", (0, 2, 0)),
    ("spec.hooks.*.webhook.service.name", (0, 2, 0)),
    ("spec.hooks.*.webhook.service.namespace", (0, 2, 0)),
    ("spec.hooks.*.webhook.service.port", (0, 2, 0)),
    ("spec.hooks.*.webhook.service.protocol", (0, 2, 0)),
    ("spec.hooks.*.webhook.timeout", (0, 3, 0)),
    ("spec.hooks.*.webhook.etag.enabled", (4, 3, 0)),
    ("spec.hooks.*.webhook.etag.cacheTimeoutSeconds", (4, 3, 0)),
    ("spec.hooks.*.webhook.etag.cacheCleanupSeconds", (4, 3, 0)),
    ("spec.hooks.*.webhook.responseUnMarshallMode", (4, 5, 0)),
    ("spec.hooks.*.webhook.authorization", (4, 16, 0)),
];

/// Every field path under `value` (list items as `[]`, hook names as `*`, selectors
/// whole).
fn field_paths(value: &Value, at: &str, out: &mut std::collections::BTreeSet<String>) {
    let whole = at.ends_with("Selector");
    match value {
        Value::Object(map) if !whole => {
            for (key, inner) in map {
                let key = if at == "spec.hooks" {
                    "*"
                } else {
                    key.as_str()
                };
                field_paths(inner, &format!("{at}.{key}"), out);
            }
        }
        Value::Array(items) if !whole => {
            for item in items {
                field_paths(item, &format!("{at}[]"), out);
            }
        }
        _ => {
            out.insert(at.to_owned());
        }
    }
}

#[test]
fn the_stated_minimum_metacontroller_has_every_field_the_registrations_use() {
    let mut used = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(support::repo_dir().join("manifests/controllers")).unwrap() {
        for document in support::read_yaml_documents(&entry.unwrap().path()) {
            if matches!(
                document["kind"].as_str(),
                Some("CompositeController" | "DecoratorController")
            ) {
                field_paths(&document["spec"], "spec", &mut used);
            }
        }
    }
    assert!(used.len() > 10, "{used:?}");
    let needed = used
        .iter()
        .map(|path| {
            INTRODUCED
                .iter()
                .find(|(field, _)| field == path)
                .map(|(_, version)| *version)
                .unwrap_or_else(|| {
                    panic!(
                        "{path}: which Metacontroller release introduced it? add it to INTRODUCED"
                    )
                })
        })
        .max()
        .unwrap();
    let readme = std::fs::read_to_string(support::repo_dir().join("README.md")).unwrap();
    let stated = readme
        .split("**Metacontroller v")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .expect("README states the minimum as **Metacontroller vX.Y.Z or later**");
    let parts: Vec<u32> = stated.split('.').map(|p| p.parse().unwrap()).collect();
    let stated = (parts[0], parts[1], parts[2]);
    assert!(
        needed <= stated,
        "the registrations need Metacontroller {needed:?}, the README says {stated:?}"
    );
    assert_eq!(
        needed, stated,
        "the README's minimum is higher than the fields need"
    );
    let changelog = std::fs::read_to_string(support::repo_dir().join("CHANGELOG.md")).unwrap();
    let (major, minor, patch) = stated;
    assert!(changelog.contains(&format!("Metacontroller v{major}.{minor}.{patch} or later")));
}

#[test]
fn config_monitors_group_is_an_opt_in_that_follows_the_server() {
    let repo = support::repo_dir();
    let base = render(&repo.join("manifests")).unwrap_or_default();
    let groups: Vec<&str> = base
        .iter()
        .filter(|o| o["kind"] == "CompositeController")
        .filter_map(|o| o["spec"]["parentResource"]["apiVersion"].as_str())
        .collect();
    if base.is_empty() {
        return;
    }
    assert!(groups.contains(&"metahooks.io/v1alpha1"), "{groups:?}");
    assert!(
        !groups.contains(&"services.example.com/v1alpha1"),
        "off by default"
    );
    // An overlay as docs/operations.md describes it: another namespace, the component,
    // and the retarget transformers.
    // kustomize takes only relative paths: the overlays live in the repository, briefly.
    let overlay_in_repo = || {
        tempfile::Builder::new()
            .prefix(".kustomize-test-")
            .tempdir_in(&repo)
            .unwrap()
    };
    let overlay = overlay_in_repo();
    let manifests = "../manifests";
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: platform\nresources: [{m}]\ncomponents: [{m}/config-monitor]\ntransformers: [{m}/retarget]\n",
            m = manifests
        ),
    )
    .unwrap();
    let with_compat = render(overlay.path()).unwrap();
    assert_eq!(hook_namespaces(&with_compat), vec!["platform"; 12]);
    let crds = overlay_in_repo();
    std::fs::write(
        crds.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{m}/crds]\ncomponents: [{m}/crds/config-monitor]\n",
            m = manifests
        ),
    )
    .unwrap();
    let names: Vec<String> = render(crds.path())
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        names,
        [
            "apimocks.apirator.io",
            "monitoredservices.metahooks.io",
            "monitoredservices.services.example.com"
        ]
    );
}

/// The release workflow refuses a tag that the repository does not carry everywhere; on
/// the version in Cargo.toml, everything agrees.
#[test]
fn every_file_that_names_the_version_names_cargos() {
    let script = support::repo_dir().join("scripts/release-check.sh");
    let run = |version: &str| {
        std::process::Command::new(&script)
            .arg(version)
            .output()
            .unwrap()
    };
    let current = run(env!("CARGO_PKG_VERSION"));
    assert!(
        current.status.success(),
        "{}",
        String::from_utf8_lossy(&current.stderr)
    );
    let other = run("99.0.0");
    assert!(!other.status.success());
    let said = String::from_utf8_lossy(&other.stderr);
    for file in [
        "Cargo.toml",
        "Chart.yaml's version",
        "Chart.yaml's appVersion",
        "manifests/server/deployment.yaml",
        "CHANGELOG.md",
    ] {
        assert!(said.contains(file), "{file} not checked: {said}");
    }
    let workflow =
        std::fs::read_to_string(support::repo_dir().join(".github/workflows/release.yaml"))
            .unwrap();
    assert!(workflow.contains("./scripts/release-check.sh"));
    // Every action is pinned by a full commit, its version in a comment.
    for line in workflow
        .lines()
        .filter(|l| l.trim_start().starts_with("- uses:") || l.trim_start().starts_with("uses:"))
    {
        let reference = line.split('@').nth(1).unwrap_or_default();
        let (commit, comment) = reference.split_once(" # v").unwrap_or((reference, ""));
        assert!(
            commit.len() == 40
                && commit.chars().all(|c| c.is_ascii_hexdigit())
                && !comment.is_empty(),
            "not pinned by commit with its version: {line}"
        );
    }
}
