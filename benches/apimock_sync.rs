//! APIMock sync cost next to the unavoidable JSON work, for a ~10 KB and a ~900 KB
//! definition in YAML and JSON. "steady" is an unchanged definition (memo hit), "changed"
//! a definition seen for the first time, "json only" parses the same request and writes a
//! response carrying the definition, which every hook server has to do, and "json + yaml"
//! also reads the definition into a tree once: the work of `scripts/load.sh`'s anchor for
//! edited definitions, here without the serving around it. "edited" sends one registry a
//! definition it has not seen on every call, as the load script does, so "edited" against
//! "json + yaml" is the ratio of the computation alone (the load script's adds serving).
//!
//! Run: cargo bench --bench apimock_sync

#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmark harness

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use metahooks::controllers::{Context, ControllerSettings, Registry};
use metahooks::protocol::Hook;
use serde_json::{Value, json};

// The shipped binary's allocator, so that allocation weighs here what it weighs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A valid OpenAPI 3.0 document with `paths` operations, as YAML.
fn definition_yaml(paths: usize) -> String {
    let mut text =
        String::from("openapi: 3.0.3\ninfo:\n  title: Bench\n  version: 1.0.0\npaths:\n");
    for i in 0..paths {
        text.push_str(&format!(
            "  /items{i}/{{id}}:\n    get:\n      operationId: getItem{i}\n      parameters:\n        - name: id\n          in: path\n          required: true\n          schema:\n            type: integer\n      responses:\n        '200':\n          description: item {i}\n          content:\n            application/json:\n              schema:\n                type: object\n                properties:\n                  id: {{type: integer}}\n                  name: {{type: string}}\n              example: {{id: {i}, name: item-{i}}}\n"
        ));
    }
    text
}

fn definition_json(paths: usize) -> String {
    let value: Value = metahooks::yaml::from_str(&definition_yaml(paths)).unwrap();
    serde_json::to_string(&value).unwrap()
}

fn request(definition: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "controller": {"metadata": {"name": "apimock"}, "spec": {"hooks": {"sync": {"version": "v2"}}}},
        "parent": {"apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
                   "metadata": {"name": "bench", "namespace": "default", "generation": 1, "uid": "u"},
                   "spec": {"definition": definition}},
        "children": {"ConfigMap.v1": {}, "Deployment.apps/v1": {}, "Service.v1": {}, "Ingress.networking.k8s.io/v1": {}},
        "related": {},
        "finalizing": false
    }))
    .unwrap()
}

fn json_only(body: &[u8]) -> Vec<u8> {
    answer_carrying(body, |_| ())
}

/// Parses the request, hands its definition to `read`, and writes a response carrying
/// the definition.
fn answer_carrying(body: &[u8], read: impl Fn(&str)) -> Vec<u8> {
    let request: Value = serde_json::from_slice(body).unwrap();
    let definition = request["parent"]["spec"]["definition"].as_str().unwrap();
    read(definition);
    serde_json::to_vec(
        &json!({"status": {}, "children": [{"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "bench"}, "data": {"openapi.yaml": definition}}]}),
    )
    .unwrap()
}

/// `json_only` plus one read of the definition into a tree, as the load anchor does.
fn json_and_yaml(body: &[u8]) -> Vec<u8> {
    answer_carrying(body, |definition| {
        let tree: Value = metahooks::yaml::from_str(definition).unwrap();
        std::hint::black_box(tree);
    })
}

fn bench(c: &mut Criterion) {
    let ctx = Context::at("2026-01-01T00:00:00Z".parse().unwrap());
    let mut group = c.benchmark_group("apimock_sync");
    group.sample_size(20);
    for (label, definition) in [
        ("yaml-10k", definition_yaml(20)),
        ("json-10k", definition_json(26)),
        ("yaml-900k", definition_yaml(1800)),
        ("json-900k", definition_json(2400)),
    ] {
        let body = request(&definition);
        group.throughput(Throughput::Bytes(body.len() as u64));
        let id = format!("{label} ({} KB request)", body.len() / 1024);
        group.bench_with_input(BenchmarkId::new("json only", &id), &body, |b, body| {
            b.iter(|| json_only(body))
        });
        group.bench_with_input(BenchmarkId::new("json + yaml", &id), &body, |b, body| {
            b.iter(|| json_and_yaml(body))
        });
        let registry = Registry::standard(ControllerSettings::default());
        assert!(
            registry
                .call("apimock", Hook::Sync, &body, &ctx)
                .result
                .is_ok()
        );
        group.bench_with_input(BenchmarkId::new("steady", &id), &body, |b, body| {
            b.iter(|| {
                registry
                    .call("apimock", Hook::Sync, body, &ctx)
                    .result
                    .unwrap()
            })
        });
        // A fresh registry and context per call: neither the answer nor the validated
        // definition is remembered, as for a definition the server has not seen.
        group.bench_with_input(BenchmarkId::new("changed", &id), &body, |b, body| {
            b.iter_batched(
                || {
                    (
                        Registry::standard(ControllerSettings::default()),
                        Context::at(ctx.now),
                    )
                },
                |(fresh, unseen)| {
                    fresh
                        .call("apimock", Hook::Sync, body, &unseen)
                        .result
                        .unwrap()
                },
                criterion::BatchSize::LargeInput,
            )
        });
        // One registry, as in a server, and a definition it has not seen on every call
        // (its title counts up), as `scripts/load.sh` edits them: against "json + yaml",
        // the cost of a new definition without the serving.
        let unseen = std::cell::Cell::new(0_u64);
        group.bench_with_input(BenchmarkId::new("edited", &id), &definition, |b, text| {
            b.iter_batched(
                || {
                    unseen.set(unseen.get() + 1);
                    request(&text.replacen("Bench", &format!("Bench {}", unseen.get()), 1))
                },
                |body| {
                    registry
                        .call("apimock", Hook::Sync, &body, &ctx)
                        .result
                        .unwrap()
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
