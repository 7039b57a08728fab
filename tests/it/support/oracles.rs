//! External programs the tests compare against (kubernetes-validate, Prism). The test
//! command (`scripts/test.sh`) installs pinned versions and sets `MHTEST_REQUIRE_ORACLES=1`;
//! then a missing tool fails the test. A plain `cargo test` skips those checks loudly.

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn required() -> bool {
    std::env::var("MHTEST_REQUIRE_ORACLES").is_ok_and(|v| v == "1")
}

/// The path of a tool named by an environment variable, or `None` (with a note) when
/// it is absent and not required.
pub fn tool(variable: &str) -> Option<PathBuf> {
    match std::env::var_os(variable).map(PathBuf::from) {
        Some(path) if path.exists() => Some(path),
        _ if required() => {
            panic!("{variable} must name an installed tool (scripts/test.sh sets it up)")
        }
        _ => {
            say_skipped(variable);
            None
        }
    }
}

/// Tells the person running `cargo test` that oracle checks were skipped. Written to the
/// process's stderr directly (not through `eprintln!`, which the test harness captures and
/// hides for passing tests), once per tool per test binary.
fn say_skipped(variable: &str) {
    use std::io::Write;
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.iter().any(|v| v == variable) {
        return;
    }
    said.push(variable.to_owned());
    let _ = writeln!(
        std::io::stderr(),
        "note: oracle checks that need {variable} were SKIPPED; ./scripts/test.sh installs the pinned tools and runs them"
    );
}

/// Validates Kubernetes objects with `kubernetes-validate --strict` for each version.
/// Returns the tool's complaints, or `None` when the tool is unavailable.
pub fn kubernetes_validate(
    objects: &[serde_json::Value],
    versions: &[&str],
) -> Option<Vec<String>> {
    let tool = tool("MHTEST_KUBERNETES_VALIDATE")?;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut files = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        let path = dir.path().join(format!("{index:04}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(object).expect("json")).expect("write");
        files.push(path);
    }
    let mut problems = Vec::new();
    for version in versions {
        for chunk in files.chunks(200) {
            let output = Command::new(&tool)
                .arg("--strict")
                .arg("-k")
                .arg(version)
                .arg("--quiet")
                .args(chunk)
                .output()
                .expect("kubernetes-validate runs");
            if !output.status.success() {
                problems.push(format!(
                    "k8s {version}: {}{}",
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
        }
    }
    Some(problems)
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
