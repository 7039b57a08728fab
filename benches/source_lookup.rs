//! MonitoredService sync with a warm source cache (the hook path: a cache lookup and the
//! children built from the snapshot, no network), for a small and a ~900 KB config;
//! and the cost of an unchanged-repository poll (one ref listing, no pack).
//!
//! Run: cargo bench --bench source_lookup

#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmark harness

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use metahooks::controllers::{ControllerSettings, Registry};
use metahooks::protocol::Hook;
use metahooks::source::fetcher::{Fetcher, FetcherSettings};
use metahooks::source::policy::Policy;
use metahooks::source::worker::spawn::Isolation;
use serde_json::json;

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@example.com")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@example.com")
        .status()
        .unwrap();
    assert!(status.success());
}

/// A repository with a small env file and a directory of 200 files (~900 KB).
fn repository(root: &Path) -> String {
    let work = root.join("work");
    std::fs::create_dir_all(work.join("big")).unwrap();
    git(&work, &["init", "-q", "--initial-branch=main"]);
    std::fs::write(work.join("app.env"), "A=1\nB=2\nGREETING=hello\n").unwrap();
    for i in 0..200 {
        std::fs::write(
            work.join("big").join(format!("f{i}.conf")),
            format!("{i}\n").repeat(1100),
        )
        .unwrap();
    }
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-q", "-m", "init"]);
    format!("file://{}", work.display())
}

fn request(url: &str, path: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "controller": {"spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
                   "metadata": {"name": "bench", "namespace": "default", "generation": 1},
                   "spec": {"image": "app:1", "port": 8080, "source": {"git": {"url": url, "ref": "main", "path": path}}}},
        "children": {"ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}},
        "related": {}, "finalizing": false
    }))
    .unwrap()
}

fn bench(c: &mut Criterion) {
    let root = tempfile::tempdir().unwrap();
    let url = repository(root.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let policy = Policy {
        extra_schemes: ["file".to_owned()].into(),
        ..Policy::default()
    };
    let cache = tempfile::tempdir().unwrap();
    let worker = Isolation::Process(env!("CARGO_BIN_EXE_metahooks").into());
    let fetcher = runtime.block_on(async {
        Fetcher::start(
            FetcherSettings::builder(policy.clone(), cache.path().to_owned(), worker).build(),
        )
        .unwrap()
    });
    let registry =
        Registry::standard(ControllerSettings::default()).with_sources(Arc::new(fetcher.clone()));
    let mut group = c.benchmark_group("monitoredservice_sync_warm");
    for (label, path) in [("env file", "app.env"), ("200 files, 900 KB", "big")] {
        let body = request(&url, path);
        let now = "2026-01-01T00:00:00Z".parse().unwrap();
        // Warm the cache: the first call starts the fetch, the next ones read it.
        let _guard = runtime.enter();
        registry.call(
            "monitoredservice",
            Hook::Sync,
            &body,
            &registry.context(now),
        );
        runtime.block_on(fetcher.idle());
        let warm = registry
            .call(
                "monitoredservice",
                Hook::Sync,
                &body,
                &registry.context(now),
            )
            .result
            .unwrap();
        assert!(
            String::from_utf8_lossy(&warm).contains("config-hash"),
            "cache is warm"
        );
        group.bench_function(label, |b| {
            b.iter(|| {
                registry
                    .call(
                        "monitoredservice",
                        Hook::Sync,
                        &body,
                        &registry.context(now),
                    )
                    .result
                    .unwrap()
            })
        });
    }
    group.finish();

    let mut poll = c.benchmark_group("git_poll");
    poll.sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let poll_cache = tempfile::tempdir().unwrap();
    // One poll of `main`, as a fetch job makes it.
    let fetch_main = || {
        metahooks::source::git::fetch(
            poll_cache.path(),
            &url,
            metahooks::source::git::Pick::Named("main"),
            None,
            None,
            &policy,
            metahooks::source::git::deadline(&policy),
        )
        .unwrap()
    };
    let first = fetch_main();
    assert!(first.downloaded);
    poll.bench_function("unchanged repository (ref listing only)", |b| {
        b.iter(|| {
            let again = fetch_main();
            assert!(!again.downloaded);
        })
    });
    poll.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
