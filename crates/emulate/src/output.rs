//! How an emulation is shown: for people (the default) or as JSON for scripts.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use super::cluster::{Emulator, describe};
use super::objects::owner_uid;
use super::story::Summary;
use super::{Key, key_of};

/// Options for the human-readable report.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextOptions {
    /// Leave out answer times, so two runs print the same text (golden files, diffs).
    pub no_timing: bool,
}

/// The whole run as JSON: summary, findings, the final objects and the timeline.
pub fn json_report(emulator: &Emulator, summary: &Summary) -> Value {
    let timeline: Vec<Value> = emulator
        .timeline
        .iter()
        .map(|(round, report)| {
            let names = |keys: &[Key]| keys.iter().map(describe).collect::<Vec<_>>();
            let calls: Vec<&super::CallRecord> = emulator
                .calls
                .iter()
                .filter(|c| c.round == *round)
                .collect();
            json!({
                "round": round,
                "calls": calls,
                "created": names(&report.created),
                "updated": names(&report.updated),
                "deleted": names(&report.deleted),
                "statusChanged": names(&report.status_changed),
                "finalizersRemoved": names(&report.finalizers_removed),
            })
        })
        .collect();
    json!({
        "summary": summary,
        "hookCalls": emulator.calls.len(),
        "findings": emulator.findings,
        "notModelled": not_modelled(emulator),
        "objects": emulator.objects.values().collect::<Vec<_>>(),
        "timeline": timeline,
    })
}

/// The run for a person: parents with their children and conditions, the timeline,
/// then the findings.
pub fn text_report(emulator: &Emulator, summary: &Summary, options: TextOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "converged in {} round{}; {} rounds, {} hook calls, {} simulated seconds; {} finding{}",
        summary.rounds_to_converge,
        plural(summary.rounds_to_converge),
        summary.rounds,
        emulator.calls.len(),
        summary.simulated_seconds,
        emulator.findings.len(),
        plural(emulator.findings.len()),
    );
    for line in not_modelled(emulator) {
        let _ = writeln!(out, "not modelled: {line}");
    }
    write_objects(&mut out, emulator);
    write_timeline(&mut out, emulator, options);
    if !emulator.findings.is_empty() {
        let _ = writeln!(out, "\nfindings:");
        for finding in &emulator.findings {
            let _ = writeln!(out, "  {finding}");
        }
    }
    out
}

/// What the registrations ask of Metacontroller that the emulator does not do.
fn not_modelled(emulator: &Emulator) -> Vec<String> {
    emulator
        .registrations
        .iter()
        .flat_map(|r| {
            r.not_modelled
                .iter()
                .map(move |line| format!("{}: {line}", r.name))
        })
        .collect()
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn write_objects(out: &mut String, emulator: &Emulator) {
    let mut children: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for object in emulator.objects.values() {
        if let Some(owner) = owner_uid(object) {
            children.entry(owner).or_default().push(object);
        }
    }
    let _ = writeln!(out, "\nobjects:");
    for object in emulator.objects.values() {
        if owner_uid(object).is_some() {
            continue;
        }
        let _ = writeln!(out, "  {}", headline(object));
        // What a decorator set on this target (configsync's revision and error among them).
        for (name, value) in emulator
            .decorated
            .get(&key_of(object))
            .into_iter()
            .flatten()
        {
            let shown: String = value.chars().take(120).collect();
            let more = if value.chars().count() > 120 {
                "…"
            } else {
                ""
            };
            let _ = writeln!(out, "    set by decorator: {name}={shown}{more}");
        }
        let uid = object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default();
        for child in children.get(uid).into_iter().flatten() {
            let _ = writeln!(out, "    └ {}", headline(child));
        }
    }
}

/// `Kind ns/name  Cond=True(Reason) …` or, for workloads, their ready replicas.
fn headline(object: &Value) -> String {
    let mut line = describe(&key_of(object));
    if let Some(conditions) = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
    {
        let shown: Vec<String> = conditions
            .iter()
            .map(|c| {
                format!(
                    "{}={}({})",
                    c.get("type").and_then(Value::as_str).unwrap_or("?"),
                    c.get("status").and_then(Value::as_str).unwrap_or("?"),
                    c.get("reason").and_then(Value::as_str).unwrap_or("")
                )
            })
            .collect();
        let is_workload = matches!(
            object.get("kind").and_then(Value::as_str),
            Some("Deployment" | "StatefulSet")
        );
        if is_workload {
            let ready = object
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64);
            let wanted = object.pointer("/spec/replicas").and_then(Value::as_i64);
            let _ = write!(
                line,
                "  ready {}/{}",
                ready.unwrap_or(0),
                wanted.unwrap_or(1)
            );
        } else {
            let _ = write!(line, "  {}", shown.join(" "));
        }
    }
    if object.pointer("/metadata/deletionTimestamp").is_some() {
        line.push_str("  (terminating)");
    }
    line
}

fn write_timeline(out: &mut String, emulator: &Emulator, options: TextOptions) {
    let _ = writeln!(out, "\ntimeline:");
    for (round, report) in &emulator.timeline {
        let mut calls: BTreeMap<(String, &str, String, u16), (usize, f64)> = BTreeMap::new();
        for call in emulator.calls.iter().filter(|c| c.round == *round) {
            let entry = calls
                .entry((
                    call.controller.clone(),
                    call.hook,
                    call.parent.clone(),
                    call.status,
                ))
                .or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(call.millis);
        }
        let quiet = !report.changed() && report.finalizers_removed.is_empty();
        let _ = writeln!(
            out,
            "  round {round}:{}",
            if quiet { " nothing changed" } else { "" }
        );
        for ((controller, hook, parent, status), (count, slowest)) in calls {
            let times = if count > 1 {
                format!(" ×{count}")
            } else {
                String::new()
            };
            let timing = if options.no_timing {
                String::new()
            } else {
                format!(" (slowest {slowest:.1} ms)")
            };
            let _ = writeln!(
                out,
                "    {controller} {hook} {parent} → {status}{times}{timing}"
            );
        }
        for (label, keys) in [
            ("created", &report.created),
            ("updated", &report.updated),
            ("deleted", &report.deleted),
            ("status changed", &report.status_changed),
            ("finalizer removed", &report.finalizers_removed),
        ] {
            if !keys.is_empty() {
                let names: Vec<String> = keys.iter().map(describe).collect();
                let _ = writeln!(out, "    {label}: {}", names.join(", "));
            }
        }
    }
}
