//! The monitoring component (`manifests/monitoring/`) against a running server: the
//! server's `/metrics` passes `promtool check metrics`, the PrometheusRule's groups pass
//! `promtool check rules`, and every metric an alert or a dashboard panel uses is one the
//! server exposes (scraped after a hook call and a fetch, so every family has series).

use crate::support;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;
use support::servers::{GitDaemon, Repo};

/// promtool from `MHTEST_PROMTOOL` or PATH; required when oracles are.
fn promtool() -> Option<String> {
    let program = std::env::var("MHTEST_PROMTOOL").unwrap_or_else(|_| "promtool".to_owned());
    let found = Command::new(&program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("MHTEST_REQUIRE_ORACLES").is_none(),
            "promtool is required: scripts/test.sh installs it (Debian's prometheus package)"
        );
        return None;
    }
    Some(program)
}

fn promtool_stdin(program: &str, args: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

/// The metric names a PromQL expression mentions (ours and the process ones).
fn metric_names(expr: &str) -> Vec<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|token| token.starts_with("metahooks_") || token.starts_with("process_"))
        .map(str::to_owned)
        .collect()
}

/// Metric references in `expr` not scoped to the dashboard's `job` and `namespace`
/// variables (with two metahooks installs, or another process_* exporter, in one
/// Prometheus, an unscoped panel sums them all).
fn unscoped(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find(|c: char| c.is_ascii_alphabetic()) {
        rest = &rest[at..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        let (token, after) = rest.split_at(end);
        if (token.starts_with("metahooks_") || token.starts_with("process_"))
            && !after.starts_with(r#"{job=~"$job",namespace=~"$namespace""#)
        {
            found.push(token.to_owned());
        }
        rest = after;
    }
    found
}

/// The families a scrape declares (`# TYPE name type`), with their types.
fn families(scraped: &str) -> Vec<(String, String)> {
    scraped
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let (name, kind) = rest.split_once(' ')?;
            Some((name.to_owned(), kind.to_owned()))
        })
        .collect()
}

fn exposed(families: &[(String, String)], name: &str) -> bool {
    families.iter().any(|(family, kind)| {
        family == name
            || (kind == "histogram"
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name.strip_suffix(suffix) == Some(family.as_str())))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_panels_use_only_metrics_the_server_exposes() {
    let program = promtool();
    let repo = Repo::new();
    repo.commit(&[("app.env", "A=1\n")]);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(serde_json::json!({
        "apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "web", "namespace": "team-a"},
        "spec": {"image": "web:1", "format": "env",
            "source": {"git": {"url": daemon.url(), "ref": "main", "path": "app.env"}}}}));
    // And one whose source a safety rule refuses (plain http is not allowed here).
    h.emulator.apply(serde_json::json!({
        "apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
        "metadata": {"name": "refused", "namespace": "team-a"},
        "spec": {"image": "web:1", "source": {"http": {"url": "http://127.0.0.1:9/app.env"}}}}));
    let refused = |e: &support::emulator::Emulator| {
        e.get(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "team-a",
            "refused",
        )
        .and_then(|p| p["status"]["conditions"].as_array().cloned())
        .is_some_and(|c| c.iter().any(|c| c["reason"] == "SchemeRefused"))
    };
    support::emulator::settle(
        &mut h.emulator,
        &h.fetcher,
        "MonitoredService",
        "fetched",
        |e| e.get("v1", "ConfigMap", "team-a", "web-config").is_some() && refused(e),
    )
    .await;
    let scraped = reqwest::get(format!("http://{}/metrics", h.server.probe_addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let families = families(&scraped);
    for required in [
        "metahooks_build_info",
        "metahooks_source_fetches_total",
        "metahooks_source_refusals_total",
        "metahooks_source_last_success_timestamp_seconds",
        "metahooks_source_snapshot_bytes",
        "metahooks_source_snapshot_reserved_bytes",
        "metahooks_source_jobs_waiting_for_room",
        "process_resident_memory_bytes",
    ] {
        assert!(
            exposed(&families, required),
            "{required} missing:\n{scraped}"
        );
    }

    // Each refusal reason's series is there before its first refusal, at 0.
    assert!(
        scraped.contains("metahooks_source_refusals_total{reason=\"PathRefused\"} 0"),
        "{scraped}"
    );
    let rule = support::read_yaml_documents(
        &support::repo_dir().join("manifests/monitoring/prometheusrule.yaml"),
    )
    .remove(0);
    let groups = &rule["spec"]["groups"];
    let dashboard =
        support::read_json(&support::repo_dir().join("manifests/monitoring/dashboard.json"));
    let mut used = BTreeSet::new();
    for rule in groups
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
    {
        used.extend(metric_names(rule["expr"].as_str().unwrap()));
    }
    let rule_names = used.len();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            used.extend(metric_names(expr));
            assert_eq!(unscoped(expr), Vec::<String>::new(), "{expr}");
        }
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "job", "namespace"]);
    assert_eq!(
        unscoped("sum(process_open_fds) + metahooks_x{job=~\"$job\"}"),
        ["process_open_fds", "metahooks_x"],
        "the check itself finds unscoped references"
    );
    assert!(rule_names >= 4 && used.len() > rule_names, "{used:?}");
    let missing: Vec<&String> = used
        .iter()
        .filter(|name| !exposed(&families, name))
        .collect();
    assert!(
        missing.is_empty(),
        "used but not exposed: {missing:?}\n{scraped}"
    );

    let Some(program) = program else { return };
    let (ok, report) = promtool_stdin(&program, &["check", "metrics"], &scraped);
    assert!(ok, "promtool check metrics:\n{report}\n{scraped}");
    let rules_file = tempfile::NamedTempFile::new().unwrap();
    let groups_only = serde_json::json!({"groups": groups});
    std::fs::write(
        rules_file.path(),
        serde_json::to_string(&groups_only).unwrap(),
    )
    .unwrap();
    let output = Command::new(&program)
        .args(["check", "rules"])
        .arg(rules_file.path())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let _: Value = groups_only;
}

/// `promtool test rules` runs the unit tests of `manifests/monitoring/tests/`, which test
/// every alert (each fires when it should, once per deployment however many replicas
/// report, and not before); every alert links its runbook.
#[test]
fn every_alert_passes_its_promtool_unit_tests() {
    let Some(program) = promtool() else { return };
    let rule = support::read_yaml_documents(
        &support::repo_dir().join("manifests/monitoring/prometheusrule.yaml"),
    )
    .remove(0);
    let groups = &rule["spec"]["groups"];
    let rules: Vec<&Value> = groups
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    for rule in &rules {
        let runbook = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        let anchor = rule["alert"].as_str().unwrap().to_lowercase();
        assert!(
            runbook.ends_with(&format!("docs/operations.md#{anchor}")),
            "{rule}"
        );
        let docs = std::fs::read_to_string(support::repo_dir().join("docs/operations.md")).unwrap();
        assert!(
            docs.contains(&format!("### {}", rule["alert"].as_str().unwrap())),
            "docs/operations.md has no section for {anchor}"
        );
    }
    let tests = std::fs::read_to_string(
        support::repo_dir().join("manifests/monitoring/tests/alerts.test.yaml"),
    )
    .unwrap();
    for rule in &rules {
        let alert = rule["alert"].as_str().unwrap();
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "manifests/monitoring/tests/alerts.test.yaml has no test of {alert}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.yaml"),
        serde_json::json!({"groups": groups}).to_string(),
    )
    .unwrap();
    std::fs::write(dir.path().join("alerts.test.yaml"), tests).unwrap();
    let output = Command::new(&program)
        .current_dir(dir.path())
        .args(["test", "rules", "alerts.test.yaml"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
