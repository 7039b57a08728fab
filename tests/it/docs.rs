//! Docs that cannot drift: every flag of `serve`, `render` and `emulate` is documented,
//! every condition reason the controllers can emit is on their CRD page, and every
//! `cargo run -- …` command shown in README.md or docs/ with its output prints that
//! output (timings and timestamps aside; a block may end with `…` to show a prefix).

use crate::support;

use clap::CommandFactory;

fn doc(name: &str) -> String {
    std::fs::read_to_string(support::repo_dir().join(name)).unwrap()
}

/// The long flags of a subcommand (hidden ones and `--help` aside).
fn flags(cli: &clap::Command, subcommand: &str) -> Vec<String> {
    cli.find_subcommand(subcommand)
        .unwrap_or_else(|| panic!("no {subcommand} subcommand"))
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long())
        .filter(|long| *long != "help")
        .map(|long| format!("--{long}"))
        .collect()
}

/// Whether `text` names `flag` as a whole word (`--cache-dir`, not `--cache-dir-x`).
fn names(text: &str, flag: &str) -> bool {
    text.match_indices(flag).any(|(at, _)| {
        let next = text[at + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[test]
fn every_flag_is_documented() {
    let cli = metahooks::cli::Cli::command();
    let pages = |names: &[&str]| names.iter().map(|n| doc(n)).collect::<Vec<_>>().join("\n");
    // serve's flags (the controller flags among them, which render and emulate share) on
    // the operations and sources pages; each other command's own flags on its page.
    let serve = flags(&cli, "serve");
    for (subcommand, documented_in) in [
        ("serve", pages(&["docs/operations.md", "docs/sources.md"])),
        ("render", pages(&["docs/hooks.md"])),
        ("emulate", pages(&["docs/emulate.md"])),
    ] {
        let own: Vec<String> = flags(&cli, subcommand)
            .into_iter()
            .filter(|flag| subcommand == "serve" || !serve.contains(flag))
            .collect();
        assert!(!own.is_empty(), "{subcommand} has flags of its own");
        let missing: Vec<&String> = own
            .iter()
            .filter(|flag| !names(&documented_in, flag))
            .collect();
        assert!(
            missing.is_empty(),
            "{subcommand} flags missing from its docs: {missing:?}"
        );
    }
}

/// The condition reasons (`Reason::X`) a controller's code names, read from its source
/// files; `Reason::Fetch` carries the source engine's, which are read apart.
fn reasons_in(dirs: &[&str]) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for dir in dirs {
        let path = support::repo_dir().join(dir);
        let files: Vec<std::path::PathBuf> = if path.is_dir() {
            std::fs::read_dir(&path)
                .unwrap()
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "rs"))
                .filter(|p| !p.to_string_lossy().contains("test"))
                .collect()
        } else {
            vec![path]
        };
        for file in files {
            let whole = std::fs::read_to_string(&file).unwrap();
            // A file's own unit tests use reasons of their own.
            let text = whole.split("#[cfg(test)]").next().unwrap_or_default();
            for piece in text.split("Reason::").skip(1) {
                let name: String = piece
                    .chars()
                    .take_while(char::is_ascii_alphanumeric)
                    .collect();
                if name.starts_with(|c: char| c.is_ascii_uppercase()) && name != "Fetch" {
                    found.insert(name);
                }
            }
        }
    }
    found
}

/// Every variant the `reasons!` list in `common/reason.rs` declares.
fn declared_reasons() -> std::collections::BTreeSet<String> {
    let text = doc("src/controllers/common/reason.rs");
    let list = text.split("reasons! {\n").nth(1).unwrap_or_default();
    let list = list.split("\n}").next().unwrap_or_default();
    list.lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("//"))
        .filter_map(|line| line.strip_suffix(','))
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_declared_reason_is_used_by_a_controller() {
    let declared = declared_reasons();
    let used = reasons_in(&[
        "src/controllers/apimock",
        "src/controllers/apimock/validate",
        "src/controllers/monitoredservice",
        "src/controllers/configsync",
        "src/controllers/common",
        "src/controllers/common/config_schema",
    ]);
    assert!(declared.len() > 30, "{declared:?}");
    let unused: Vec<&String> = declared.difference(&used).collect();
    assert!(unused.is_empty(), "declared but never given: {unused:?}");
}

#[test]
fn every_condition_reason_is_on_its_crd_page() {
    let source_reasons: Vec<String> = doc("crates/source/src/error.rs")
        .lines()
        .filter_map(|line| line.split("=> \"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .filter(|reason| {
            reason
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_uppercase())
        })
        .map(str::to_owned)
        .collect();
    assert!(source_reasons.len() > 20, "{source_reasons:?}");
    let mut checked = 0;
    for (page, dirs) in [
        (
            "docs/apimock.md",
            &[
                "src/controllers/apimock",
                "src/controllers/common/polling.rs",
                "src/controllers/common/rollout.rs",
                "src/controllers/common/secrets.rs",
            ][..],
        ),
        (
            "docs/monitoredservice.md",
            &[
                "src/controllers/monitoredservice",
                "src/controllers/common/config.rs",
                "src/controllers/common/envfile.rs",
                "src/controllers/common/polling.rs",
                "src/controllers/common/rollout.rs",
                "src/controllers/common/secrets.rs",
            ][..],
        ),
    ] {
        let text = doc(page) + &doc("docs/sources.md");
        let mut reasons = reasons_in(dirs);
        reasons.extend(source_reasons.iter().cloned());
        let missing: Vec<&String> = reasons
            .iter()
            .filter(|reason| !text.contains(&format!("`{reason}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "{page} (with sources.md) does not name {missing:?}"
        );
        checked += reasons.len();
    }
    assert!(checked > 60, "{checked} reasons checked");
}

/// Output as a page shows it: timings and timestamps replaced.
fn normalise(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut normal = String::new();
        let mut words = line.split(' ').peekable();
        while let Some(word) = words.next() {
            let number = word.trim_start_matches('(').parse::<f64>().is_ok();
            if number && words.peek().is_some_and(|next| next.starts_with("ms")) {
                normal.push_str(if word.starts_with('(') { "(N" } else { "N" });
            } else if word.len() >= 20
                && word.chars().nth(4) == Some('-')
                && word.contains('T')
                && word.ends_with('Z')
            {
                normal.push_str("TIME");
            } else {
                normal.push_str(word);
            }
            normal.push(' ');
        }
        out.push_str(normal.trim_end());
        out.push('\n');
    }
    out
}

#[test]
fn documented_commands_print_what_the_page_shows() {
    let mut checked = 0;
    let mut pages: Vec<std::path::PathBuf> = vec![support::repo_dir().join("README.md")];
    pages.extend(
        std::fs::read_dir(support::repo_dir().join("docs"))
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path()),
    );
    for page in pages {
        let text = std::fs::read_to_string(&page).unwrap();
        let blocks: Vec<&str> = text.split("```").collect();
        // blocks[odd] are fenced blocks: "sh\n…" followed (after prose-free gap) by "text\n…".
        for pair in (1..blocks.len().saturating_sub(2)).step_by(2) {
            let (command, gap, shown) = (blocks[pair], blocks[pair + 1], blocks[pair + 2]);
            let (Some(command), Some(shown)) =
                (command.strip_prefix("sh\n"), shown.strip_prefix("text\n"))
            else {
                continue;
            };
            let lines: Vec<&str> = command.lines().collect();
            let [line] = lines.as_slice() else { continue };
            let Some(args) = line.strip_prefix("cargo run -- ") else {
                continue;
            };
            if !gap.trim().is_empty() {
                continue;
            }
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_metahooks"))
                .args(args.split_whitespace())
                .current_dir(support::repo_dir())
                .output()
                .unwrap();
            let printed = normalise(&String::from_utf8_lossy(&output.stdout));
            let shown = normalise(shown);
            let expected = match shown.find("…\n") {
                Some(cut) => shown[..cut].trim_end().to_owned(),
                None => shown.trim_end().to_owned(),
            };
            assert!(
                printed.starts_with(&expected) || printed.trim_end() == expected,
                "{}: `{line}` printed\n{printed}\nbut the page shows\n{expected}",
                page.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "no documented command was checked");
}

/// The fenced block of `page` that follows the line `after` (its language tag dropped).
fn block_after(page: &str, after: &str) -> String {
    let start = page
        .find(after)
        .unwrap_or_else(|| panic!("the page no longer has {after:?}"));
    let rest = &page[start..];
    let open = rest.find("```").expect("a fenced block follows");
    let body = &rest[open + 3..];
    let body = &body[body.find('\n').expect("a tagged block") + 1..];
    body[..body.find("```").expect("the block ends")].to_owned()
}

/// The worked example's hook server: a ConfigMap per Thing, a status that says which
/// hook answered, and a finalize hook that never lets go.
async fn worked_example_hooks() -> String {
    use axum::Json;
    use serde_json::{Value, json};
    let app = axum::Router::new().route(
        "/things/sync",
        axum::routing::post(|Json(request): Json<Value>| async move {
            let parent = &request["parent"];
            if request["finalizing"] == json!(true) {
                return Json(
                    json!({"status": {"phase": "Finalizing"}, "children": [], "finalized": false}),
                );
            }
            Json(json!({"status": {"phase": "Ready"}, "children": [{
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": parent["metadata"]["name"]},
                "data": {"size": parent["spec"]["size"].to_string()}}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_runs_as_written() {
    let page = doc("docs/emulate.md");
    let files = tempfile::tempdir().unwrap();
    std::fs::write(
        files.path().join("things.yaml"),
        block_after(&page, "cluster-scoped, and it is read for both):"),
    )
    .unwrap();
    let command = block_after(&page, "Start your server on your laptop");
    let base = worked_example_hooks().await;
    let args: Vec<String> = command
        .trim()
        .strip_prefix("metahooks ")
        .expect("a metahooks command")
        .split_whitespace()
        .map(|arg| arg.replace("http://127.0.0.1:8000", &base))
        .collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_metahooks"))
            .args(&args)
            .current_dir(files.path())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let shown = block_after(&page, "answers `finalized: false` gets:");
    assert_eq!(
        normalise(&String::from_utf8_lossy(&output.stdout)),
        normalise(&shown),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        output.status.code(),
        Some(1),
        "the page says the exit code is 1"
    );
}

/// docs/operations.md lists every flag of `serve` in one table (a blank line inside it
/// would end the table, and Markdown would show the rest as text).
#[test]
fn every_serve_flag_is_a_row_of_the_one_flags_table() {
    let docs = std::fs::read_to_string(support::repo_dir().join("docs/operations.md")).unwrap();
    let section = docs
        .split("\n## Flags\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/operations.md has a Flags section");
    let tables: Vec<Vec<&str>> = section
        .split("\n\n")
        .map(|block| {
            block
                .lines()
                .filter(|l| l.starts_with('|'))
                .collect::<Vec<_>>()
        })
        .filter(|rows| !rows.is_empty())
        .collect();
    assert_eq!(tables.len(), 1, "the flags are in one table: {tables:#?}");
    let cli = <metahooks::cli::Cli as clap::CommandFactory>::command();
    let serve = cli.find_subcommand("serve").unwrap();
    for argument in serve.get_arguments() {
        let Some(long) = argument.get_long() else {
            continue;
        };
        if matches!(long, "help" | "version") {
            continue;
        }
        let flag = format!("`--{long}`");
        assert!(
            tables[0].iter().any(|row| row
                .split('|')
                .nth(1)
                .is_some_and(|cell| cell.contains(&flag))),
            "{flag} has no row in docs/operations.md's Flags table"
        );
    }
}

/// The served versions docs/emulate.md lists are the ones the emulator serves.
#[test]
fn the_emulators_served_api_versions_are_documented() {
    let page = doc("docs/emulate.md");
    for (kind, versions) in metahooks::emulate::Kinds::builtin_versions() {
        let shown: Vec<String> = versions.iter().map(|v| format!("`{v}`")).collect();
        let row = format!("| {kind} | {} |", shown.join(", "));
        assert!(page.contains(&row), "docs/emulate.md lacks the row {row}");
    }
}
