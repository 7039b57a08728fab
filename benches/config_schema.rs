//! The cost of checking a config against its schema (`spec.configSchema`), once per
//! revision: the worst schema the step budget lets through, the refusal of one past it,
//! and a large ordinary config.
//!
//! Run: cargo bench --bench config_schema

#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmark harness

use std::collections::BTreeMap;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use metahooks::controllers::common::config::{Config, ConfigContent, ConfigFormat};
use metahooks::controllers::common::config_schema::{check, compile};
use serde_json::{Value, json};

/// `l0` is `allOf: [l1, l1]`, and so on: 2^n paths in n lines.
fn doubling(n: usize) -> Value {
    let mut defs = serde_json::Map::new();
    for i in 0..n {
        let next = json!({"$ref": format!("#/$defs/l{}", i + 1)});
        defs.insert(format!("l{i}"), json!({"allOf": [next.clone(), next]}));
    }
    defs.insert(format!("l{n}"), json!({"type": "object"}));
    json!({"$defs": defs, "$ref": "#/$defs/l0"})
}

fn files(name: &str, text: String) -> Config {
    Config::new(ConfigContent {
        format: Some(ConfigFormat::Files),
        data: BTreeMap::from([(name.to_owned(), text)]),
        ..ConfigContent::default()
    })
}

fn schema_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("config_schema");
    group
        .measurement_time(Duration::from_secs(20))
        .sample_size(10);

    // 2^17 paths, about 524k steps: under the budget, so it is evaluated.
    let small = files("app.json", "{}".to_owned());
    let worst = doubling(17);
    check(&compile(&worst, "bench").unwrap(), &small, "bench").unwrap();
    group.bench_function("worst accepted (doubling x17, ~524k steps)", |b| {
        b.iter(|| check(&compile(&worst, "bench").unwrap(), &small, "bench").unwrap());
    });

    // The same, on a config that fails at every leaf: errors are made as they are met.
    let failing = files("app.json", "1".to_owned());
    assert!(check(&compile(&worst, "bench").unwrap(), &failing, "bench").is_err());
    group.bench_function("worst accepted, failing config", |b| {
        b.iter(|| check(&compile(&worst, "bench").unwrap(), &failing, "bench").unwrap_err());
    });

    // 2^60 paths: refused by the count, never evaluated.
    let refused = doubling(60);
    assert!(check(&compile(&refused, "bench").unwrap(), &small, "bench").is_err());
    group.bench_function("refused (doubling x60)", |b| {
        b.iter(|| check(&compile(&refused, "bench").unwrap(), &small, "bench").unwrap_err());
    });

    // ~1 MB: 10,000 entries of an ordinary schema (140,000 steps).
    let entries: Vec<Value> = (0..10_000)
        .map(|i| {
            json!({"name": format!("route-{i}"), "port": 8000 + i % 1000,
                        "hosts": ["a.example.com", "b.example.com"], "weight": 50})
        })
        .collect();
    let big = files("routes.json", serde_json::to_string(&entries).unwrap());
    let ordinary = json!({
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name", "port"],
            "properties": {
                "name": {"type": "string", "pattern": "^[a-z0-9-]+$"},
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "hosts": {"type": "array", "items": {"type": "string", "format": "hostname"}},
                "weight": {"type": "integer"}
            },
            "additionalProperties": false
        }
    });
    check(&compile(&ordinary, "bench").unwrap(), &big, "bench").unwrap();
    group.bench_function("ordinary, 10k entries (~1 MB)", |b| {
        b.iter(|| check(&compile(&ordinary, "bench").unwrap(), &big, "bench").unwrap());
    });
    group.finish();
}

criterion_group!(benches, schema_check);
criterion_main!(benches);
