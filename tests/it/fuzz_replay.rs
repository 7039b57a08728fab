//! Replays the committed fuzz corpora (`fuzz/corpus/<target>/`: seeds plus the inputs the
//! fuzzers found interesting) through the same functions the fuzz targets call, so CI
//! guards against regressions without running a fuzzer.

use crate::support;

use metahooks::fuzz_surfaces;

fn replay(target: &str, surface: fn(&[u8])) {
    let dir = support::repo_dir().join("fuzz/corpus").join(target);
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the {target} corpus is missing at {}: {e}", dir.display()));
    let mut count = 0;
    for entry in entries.filter_map(Result::ok) {
        let data = std::fs::read(entry.path())
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", entry.path().display()));
        let outcome = std::panic::catch_unwind(|| surface(&data));
        assert!(
            outcome.is_ok(),
            "{target}: {} panics (run `cargo fuzz run {target} {}` to reproduce)",
            entry.path().display(),
            entry.path().display()
        );
        count += 1;
    }
    assert!(count > 0, "the {target} corpus is empty");
}

#[test]
fn hook_request_corpus() {
    replay("hook_request", fuzz_surfaces::hook_request);
}

#[test]
fn definition_corpus() {
    replay("definition", fuzz_surfaces::definition);
}

#[test]
fn env_file_corpus() {
    replay("env_file", fuzz_surfaces::env_file);
}

#[test]
fn url_policy_corpus() {
    replay("url_policy", fuzz_surfaces::url_policy);
}

#[test]
fn source_inputs_corpus() {
    replay("source_inputs", fuzz_surfaces::source_inputs);
}
