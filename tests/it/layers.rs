//! Every arrow one way: the server crate's top-level modules import only modules of a
//! lower layer, and no controller imports another (only `controllers::common`). Read from
//! the sources (non-test code), so a new import that points up fails here, naming it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::support;

/// Layers, top first: a module may import only modules of a later entry. The crates
/// (`protocol`, `apiserver`, `emulate`, `hash`, `source`) are below everything; Cargo
/// keeps their own arrows one way.
const LAYERS: &[&[&str]] = &[
    &["cli", "fuzz_surfaces"],
    &["crds", "receivers"],
    &["server"],
    &["controllers"],
    &["memo"],
    &["error", "http_error", "yaml", "telemetry"],
    &["hash", "source", "protocol", "apiserver", "emulate"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_owned()];
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(path).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs")
            && !path.to_string_lossy().contains("test")
            && !path.ends_with("fixtures.rs")
        {
            found.push(path);
        }
    }
    found
}

/// The `crate::<name>` paths `path` (a file or folder) names outside its unit tests,
/// each with where it is named.
fn imports_of(path: &Path, prefix: &str) -> BTreeSet<(String, String)> {
    let mut found = BTreeSet::new();
    for file in rust_files(path) {
        let whole = std::fs::read_to_string(&file).unwrap();
        let text = whole.split("#[cfg(test)]").next().unwrap_or_default();
        for piece in text.split(prefix).skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.insert((name, file.display().to_string()));
            }
        }
    }
    found
}

#[test]
fn top_level_modules_import_only_lower_layers() {
    let src = support::repo_dir().join("src");
    let mut checked = 0;
    for entry in std::fs::read_dir(&src).unwrap().filter_map(Result::ok) {
        let path = entry.path();
        let module = path.file_stem().unwrap().to_string_lossy().into_owned();
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let own = layer_of(&module)
            .unwrap_or_else(|| panic!("src/{module} is in no layer of tests/it/layers.rs"));
        for (imported, at) in imports_of(&path, "crate::") {
            if imported == module {
                continue;
            }
            let theirs = layer_of(&imported)
                .unwrap_or_else(|| panic!("{at} imports crate::{imported}, which is in no layer"));
            assert!(
                theirs > own,
                "{at}: {module} imports crate::{imported}, which is not below it"
            );
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} imports seen");
}

#[test]
fn controllers_share_only_common() {
    let controllers = support::repo_dir().join("src/controllers");
    for name in ["apimock", "monitoredservice", "configsync"] {
        for (imported, at) in imports_of(&controllers.join(name), "crate::controllers::") {
            assert!(
                imported == name || imported == "common",
                "{at}: {name} imports crate::controllers::{imported}; controllers share code only through controllers::common"
            );
        }
    }
}
