//! `metahooks emulate`: reads the files, builds the hooks' transport (our controllers
//! in-process, or a server over HTTP), plays the story and renders the report. The
//! emulation itself is in [`crate::emulate`]; this is its I/O edge.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::in_process::OwnReplica;
use crate::cli::config::{controller_settings, source_fetcher};
use crate::cli::{ApplyStrategy, EmulateArgs, EmulateOutput};
use crate::controllers::Registry;
use crate::emulate::Origin;
use crate::emulate::ci::{Run, junit_report, sarif_report};
use crate::emulate::output::{TextOptions, json_report, text_report};
use crate::emulate::registration::{Kinds, Registration};
use crate::emulate::story::{Input, Plan, play, read_story, sort_documents};
use crate::emulate::{Emulator, InProcess, Transport};

/// Files read at most, and bytes per file: an emulation is for a handful of objects.
const MAX_FILES: usize = 10_000;
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Runs the emulation; returns the report and whether it found nothing.
///
/// # Errors
/// Unreadable or malformed input files, or a transport that cannot be built.
pub fn emulate(args: &EmulateArgs) -> anyhow::Result<(String, bool)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(emulate_async(args))
}

async fn emulate_async(args: &EmulateArgs) -> anyhow::Result<(String, bool)> {
    let documents = read_inputs(&args.files)?;
    let mut input = sort_documents(documents).map_err(|e| anyhow::anyhow!(e))?;
    if input.registrations.is_empty() {
        input.registrations = built_in_registrations(&input.kinds)?;
    }
    let stories = stories(args)?;
    let mut runs = Vec::with_capacity(stories.len());
    for (name, plan) in stories {
        let (emulator, summary) = run_once(args, &input, &plan).await?;
        runs.push(Played {
            name,
            emulator,
            summary,
        });
    }
    let mut clean = true;
    let mut tails = Vec::new();
    for run in &runs {
        let unmet = unmet_requirements(&run.emulator, &args.require);
        let pending = pending_lines(&run.emulator, args);
        clean &= run.emulator.findings.is_empty() && unmet.is_empty();
        tails.push(unmet.into_iter().chain(pending).collect::<Vec<_>>());
    }
    let ci_runs: Vec<Run<'_>> = runs
        .iter()
        .map(|run| Run {
            name: run.name.clone().unwrap_or_else(|| "emulate".to_owned()),
            emulator: &run.emulator,
        })
        .collect();
    let report = match args.output {
        EmulateOutput::Junit => junit_report(&ci_runs),
        EmulateOutput::Sarif => format!(
            "{}\n",
            serde_json::to_string_pretty(&sarif_report(&ci_runs, env!("CARGO_PKG_VERSION")))?
        ),
        EmulateOutput::Json => {
            let mut reports = Vec::new();
            for (run, tail) in runs.iter().zip(&tails) {
                let mut report = json_report(&run.emulator, &run.summary);
                if let Some(name) = &run.name {
                    report["story"] = Value::from(name.clone());
                }
                if !tail.is_empty() {
                    report["unmet"] = Value::from(tail.clone());
                }
                reports.push(report);
            }
            let whole = match reports.len() {
                1 => reports.remove(0),
                _ => serde_json::json!({"stories": reports}),
            };
            format!("{}\n", serde_json::to_string_pretty(&whole)?)
        }
        EmulateOutput::Text => {
            let several = runs.len() > 1;
            let mut text = String::new();
            for (run, tail) in runs.iter().zip(&tails) {
                if several {
                    text.push_str(&format!(
                        "== story {}\n",
                        run.name.as_deref().unwrap_or("(unnamed)")
                    ));
                }
                text.push_str(&text_report(
                    &run.emulator,
                    &run.summary,
                    TextOptions {
                        no_timing: args.no_timing,
                    },
                ));
                for line in tail {
                    text.push_str(line);
                    text.push('\n');
                }
                if several {
                    text.push('\n');
                }
            }
            text
        }
    };
    Ok((report, clean))
}

/// One story played: its name and the cluster it left.
struct Played {
    name: Option<String>,
    emulator: Emulator,
    summary: crate::emulate::story::Summary,
}

/// One emulation on a fresh cluster (and fresh hook caches in-process) from the inputs.
async fn run_once(
    args: &EmulateArgs,
    input: &Input,
    plan: &Plan,
) -> anyhow::Result<(Emulator, crate::emulate::story::Summary)> {
    let transport = transport(args)?;
    let mut emulator = Emulator::with_transport(transport, input.registrations.clone());
    emulator.kinds = input.kinds.clone();
    emulator.stop_at_first = false;
    emulator.hold_unready = args.hold_unready;
    emulator.nodes = usize::from(args.nodes);
    emulator.server_side_apply = args.apply_strategy == ApplyStrategy::ServerSide;
    emulator.strict_everywhere = args.strict;
    emulator.workers = usize::from(args.workers);
    emulator.recheck_after = std::time::Duration::from_millis(args.recheck_after_ms);
    for (origin, object) in &input.objects {
        emulator.apply_from(object.clone(), origin.clone());
    }
    let summary = play(&mut emulator, Vec::new(), plan)
        .await
        .map_err(|e| anyhow::anyhow!(e))?;
    // A parent refused before any call (no selector, one Metacontroller cannot compile)
    // is a finding, not "nothing was reconciled".
    if emulator.calls.is_empty() && emulator.findings.is_empty() {
        bail!(
            "nothing was reconciled: no object in the input is a parent of {} (check each object's apiVersion and kind against the registration's parentResource)",
            describe_parents(&emulator)
        );
    }
    Ok((emulator, summary))
}

/// The plans the flags ask for: one per story (named by its `name:` or its file), or
/// one without steps.
fn stories(args: &EmulateArgs) -> anyhow::Result<Vec<(Option<String>, Plan)>> {
    let base = |steps| Plan {
        max_rounds: usize::from(args.max_rounds),
        run_for: std::time::Duration::from_secs(args.for_seconds),
        delete_parents: args.delete,
        steps,
        wait_for_sources: std::time::Duration::from_secs(args.wait_for_sources),
    };
    if args.story.is_empty() {
        return Ok(vec![(None, base(Vec::new()))]);
    }
    let mut plans: Vec<(Option<String>, Plan)> = Vec::new();
    for path in &args.story {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let story = read_story(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let name = story
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| path.display().to_string());
        if plans
            .iter()
            .any(|(n, _)| n.as_deref() == Some(name.as_str()))
        {
            bail!(
                "{}: another story is already named {name:?}; give each story its own name",
                path.display()
            );
        }
        plans.push((Some(name), base(story.steps)));
    }
    Ok(plans)
}

/// A `pending:` line for each parent whose source a server over HTTP was still fetching
/// (in-process fetches are waited for after every round, so only HTTP can end so).
fn pending_lines(emulator: &Emulator, args: &EmulateArgs) -> Vec<String> {
    if args.hooks_url.is_empty() {
        return Vec::new();
    }
    crate::emulate::story::pending_sources(emulator)
        .into_iter()
        .map(|parent| {
            format!(
                "pending: {parent}: its source was still being fetched when the run ended (after --wait-for-sources {} s); the objects shown are from before it arrived",
                args.wait_for_sources
            )
        })
        .collect()
}

/// The registrations metahooks ships (manifests/controllers), used when the input has none.
/// config-monitor's group is among them: emulating its CRs needs no component.
pub const BUILT_IN_REGISTRATIONS: [&str; 4] = [
    include_str!("../../manifests/controllers/apimock.yaml"),
    include_str!("../../manifests/controllers/monitoredservice.yaml"),
    include_str!("../../manifests/config-monitor/monitoredservice-config-monitor.yaml"),
    include_str!("../../manifests/controllers/configsync.yaml"),
];

/// The shipped registrations, read with `kinds`.
///
/// # Errors
/// Only if a shipped manifest is broken (a build defect).
pub fn built_in_registrations(kinds: &Kinds) -> anyhow::Result<Vec<Registration>> {
    let mut found = Vec::new();
    for text in BUILT_IN_REGISTRATIONS {
        let documents: Vec<Value> =
            crate::yaml::documents(text).context("built-in registration")?;
        for document in documents.into_iter().filter(|d| !d.is_null()) {
            found.push(Registration::parse(document, kinds).map_err(anyhow::Error::msg)?);
        }
    }
    Ok(found)
}

/// The parent types the registrations name, for the "nothing was reconciled" message.
fn describe_parents(emulator: &Emulator) -> String {
    let names: Vec<String> = emulator
        .registrations
        .iter()
        .flat_map(|r| {
            r.parents
                .iter()
                .map(move |(api_version, kind, _)| format!("{} ({kind} {api_version})", r.name))
        })
        .collect();
    if names.is_empty() {
        "any registration (none was given)".to_owned()
    } else {
        names.join(", ")
    }
}

/// One line per parent that does not end with a required condition True.
fn unmet_requirements(emulator: &Emulator, required: &[String]) -> Vec<String> {
    let mut unmet = Vec::new();
    if required.is_empty() {
        return unmet;
    }
    for (key, object) in &emulator.objects {
        let is_parent = emulator.registrations.iter().any(|r| {
            r.type_ == crate::emulate::registration::ControllerType::Composite
                && r.parents.iter().any(|(v, k, _)| *v == key.0 && *k == key.1)
        });
        if !is_parent {
            continue;
        }
        for kind in required {
            let condition = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == kind.as_str()));
            let status = condition
                .and_then(|c| c["status"].as_str())
                .unwrap_or("absent");
            if status != "True" {
                let reason = condition
                    .and_then(|c| c["reason"].as_str())
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                unmet.push(format!(
                    "required: {} {} ends with {kind}={status}{reason}, not True",
                    key.1,
                    crate::emulate::describe(key)
                        .split_once(' ')
                        .map_or(key.3.clone(), |(_, name)| name.to_owned())
                ));
            }
        }
    }
    unmet
}

fn transport(args: &EmulateArgs) -> anyhow::Result<Transport> {
    if !args.hooks_url.is_empty() {
        for url in &args.hooks_url {
            let parsed = url::Url::parse(url).map_err(|e| {
                let problem = match e {
                    url::ParseError::RelativeUrlWithoutBase => {
                        "it has no scheme: write it as http://host:port or https://host:port"
                            .to_owned()
                    }
                    other => other.to_string(),
                };
                anyhow::anyhow!("--hooks-url {url}: {problem}")
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                bail!("--hooks-url {url}: only http and https URLs can be called");
            }
        }
        return match &args.hooks_ca_file {
            None => Ok(Transport::http(args.hooks_url.clone())),
            Some(path) => {
                let pem = std::fs::read(path)
                    .with_context(|| format!("--hooks-ca-file: cannot read {}", path.display()))?;
                Transport::https_with_ca(args.hooks_url.clone(), &pem)
                    .map_err(|e| anyhow::anyhow!("--hooks-ca-file {}: {e}", path.display()))
            }
        };
    }
    let mut replicas: Vec<Box<dyn InProcess>> = Vec::new();
    for index in 0..args.replicas {
        let mut controllers = args.controllers.clone();
        // Each replica keeps its own source cache, as separate pods would.
        let base = controllers
            .cache_dir
            .clone()
            .unwrap_or_else(|| std::env::temp_dir().join("metahooks-emulate"));
        controllers.cache_dir = Some(base.join(format!("replica-{index}")));
        let fetcher = source_fetcher(&controllers)?;
        let registry = Registry::standard(controller_settings(&controllers))
            .with_sources(std::sync::Arc::new(fetcher.clone()));
        replicas.push(Box::new(OwnReplica {
            registry,
            fetcher: Some(fetcher),
        }));
    }
    Ok(Transport::InProcess(replicas))
}

/// Every document of every file, with the file it came from.
fn read_inputs(paths: &[PathBuf]) -> anyhow::Result<Vec<(Origin, Value)>> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    let mut documents = Vec::new();
    for file in files {
        let size = std::fs::metadata(&file)
            .with_context(|| format!("cannot read {}", file.display()))?
            .len();
        if size > MAX_FILE_BYTES {
            bail!(
                "{} is {size} bytes; emulate reads files of at most {MAX_FILE_BYTES} bytes",
                file.display()
            );
        }
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("cannot read {}", file.display()))?;
        let parsed: Vec<(usize, Value)> = crate::yaml::manifests_with_lines(&text)
            .with_context(|| format!("cannot read the objects in {}", file.display()))?;
        let source = file.display().to_string();
        documents.extend(parsed.into_iter().map(|(line, d)| {
            let origin = Origin {
                file: source.clone(),
                line,
            };
            (origin, d)
        }));
    }
    Ok(documents)
}

fn collect_files(path: &Path, into: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let metadata =
        std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if !metadata.is_dir() {
        into.push(path.to_owned());
        return check_count(into);
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot list {}", path.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|p| {
            p.is_file()
                && p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    entries.sort();
    into.extend(entries);
    check_count(into)
}

fn check_count(files: &[PathBuf]) -> anyhow::Result<()> {
    if files.len() > MAX_FILES {
        bail!("more than {MAX_FILES} input files");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_registrations_parse() {
        let registrations = built_in_registrations(&Kinds::default()).unwrap_or_default();
        let names: Vec<&str> = registrations.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "apimock",
                "monitoredservice",
                "monitoredservice-config-monitor",
                "configsync"
            ]
        );
    }
}
