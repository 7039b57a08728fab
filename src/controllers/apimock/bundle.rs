//! Definitions made of several files: a root document whose relative `$ref`s name other
//! files of the same directory (the usual layout of API repositories). Only the files
//! the root reaches are kept. Every reference must stay inside the directory and point
//! at something, so the mock server can resolve them all from its volume.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::definition::{Invalid, MAX_DEFINITION_BYTES, parse_document};
use super::validate::percent_decode;

use crate::controllers::common::conditions::quoted;
use crate::controllers::common::file_keys;
use crate::controllers::common::reason::Reason;
use crate::hash::sha256_hex;
use crate::source::Content;

/// Root documents looked for, in this order, when `root` is not given.
pub const ROOT_CANDIDATES: [&str; 6] = [
    "openapi.yaml",
    "openapi.yml",
    "openapi.json",
    "swagger.yaml",
    "swagger.yml",
    "swagger.json",
];

/// A root document and the files it reaches, by path relative to their directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The root document's path.
    pub root: String,
    /// Text of every file, by path.
    pub files: BTreeMap<String, String>,
}

impl Bundle {
    /// One document under `root`.
    pub fn single(root: &str, text: &str) -> Bundle {
        Bundle {
            root: root.to_owned(),
            files: BTreeMap::from([(root.to_owned(), text.to_owned())]),
        }
    }

    /// True when the root refers to no other file: it is then served like an inline
    /// definition.
    pub fn is_single(&self) -> bool {
        self.files.len() == 1
    }

    /// The root document's text.
    pub fn root_text(&self) -> &str {
        self.files.get(&self.root).map_or("", String::as_str)
    }

    /// Bytes of paths and texts (for sizing memos).
    pub fn bytes(&self) -> usize {
        self.files
            .iter()
            .map(|(path, text)| path.len() + text.len())
            .sum()
    }

    /// The hash shown in status and put on the pod template: the root text's own for a
    /// single file (as for an inline definition), else over every path and text.
    pub fn sha256(&self) -> String {
        if self.is_single() {
            return sha256_hex(self.root_text().as_bytes());
        }
        crate::hash::sha256_hex_of(|write| self.for_each_part(write))
    }

    /// Every path and text, length-prefixed so no two bundles read alike, handed to
    /// `write` piece by piece (hashed without copying the files).
    pub fn for_each_part(&self, mut write: impl FnMut(&[u8])) {
        for part in std::iter::once(&self.root)
            .chain(self.files.iter().flat_map(|(path, text)| [path, text]))
        {
            write(&(part.len() as u64).to_le_bytes());
            write(part.as_bytes());
        }
    }

    /// ConfigMap keys and the paths they are mounted at (`schemas/pet.yaml` is kept
    /// under `schemas__pet.yaml`: keys cannot hold a slash).
    pub fn keys(&self) -> impl Iterator<Item = (String, &str)> {
        self.files
            .keys()
            .map(|path| (config_key(path), path.as_str()))
    }
}

/// The ConfigMap key of a path (`/` cannot be in a key); a path [`gather`] kept
/// always has one.
fn config_key(path: &str) -> String {
    file_keys::config_map_key(path).unwrap_or_else(|_| path.replace('/', "__"))
}

/// The root of a directory: `root` when given, else the first conventional name present.
///
/// # Errors
/// `NoRootDocument`, naming what was looked for.
pub fn choose_root<'a>(
    files: &'a BTreeMap<String, Content>,
    root: Option<&str>,
) -> Result<&'a str, Invalid> {
    let found = match root {
        Some(root) => files.get_key_value(root.trim_start_matches("./")),
        None => ROOT_CANDIDATES
            .iter()
            .find_map(|name| files.get_key_value(*name)),
    };
    found.map(|(path, _)| path.as_str()).ok_or_else(|| {
        let wanted = match root {
            Some(root) => format!("the root document {root:?}"),
            None => format!("a root document ({})", ROOT_CANDIDATES.join(", ")),
        };
        Invalid::new(
            Reason::NoRootDocument,
            format!(
                "the directory has no {wanted}; set definitionFrom.git.root to the document's path inside it"
            ),
        )
    })
}

/// The root and every file it reaches through relative `$ref`s, each reference checked.
/// Also counts the operations of path items kept in other files (`paths: {/a: {$ref:
/// paths/a.yaml}}`), which a summary of the root alone cannot see.
///
/// # Errors
/// A reference that leaves the directory, names a missing file or a missing place in
/// one, a file that is not text or not YAML/JSON, or more than a ConfigMap holds.
pub fn gather(files: &BTreeMap<String, Content>, root: &str) -> Result<(Bundle, u32), Invalid> {
    let mut gathered = Gathering {
        available: files,
        texts: BTreeMap::new(),
        parsed: BTreeMap::new(),
        bytes: 0,
    };
    gathered.load(root, None)?;
    let mut pending = vec![root.to_owned()];
    let mut walked = BTreeSet::new();
    while let Some(path) = pending.pop() {
        if !walked.insert(path.clone()) {
            continue;
        }
        for reference in references(gathered.document(&path)) {
            let (file, fragment) = reference.split_once('#').unwrap_or((&reference, ""));
            let target = if file.is_empty() {
                path.clone()
            } else {
                relative_target(&path, file).map_err(|why| {
                    Invalid::new(
                        Reason::ReferenceRefused,
                        format!("{path}: $ref {} {why}", quoted(&reference)),
                    )
                })?
            };
            gathered.load(&target, Some((&path, &reference)))?;
            if !fragment.is_empty() && (target != path || path != root) {
                // The root's own local references are the validator's to check.
                let pointer = percent_decode(fragment);
                if gathered.document(&target).pointer(&pointer).is_none() {
                    return Err(Invalid::new(
                        Reason::InvalidReference,
                        format!(
                            "{path}: $ref {} points at nothing in {target}",
                            quoted(&reference)
                        ),
                    ));
                }
            }
            if target != path {
                pending.push(target);
            }
        }
    }
    let operations = operations_elsewhere(&gathered, root);
    let bundle = Bundle {
        root: root.to_owned(),
        files: gathered.texts,
    };
    file_keys::config_map_keys(bundle.files.keys().map(String::as_str))
        .map_err(|error| Invalid::new(Reason::UnsupportedFileName, error.to_string()))?;
    Ok((bundle, operations))
}

/// Checks a bundle again from its own files (one held in a ConfigMap may have been
/// edited by hand): the operations kept in other files, or what is wrong.
///
/// # Errors
/// As [`gather`].
pub fn recheck(bundle: &Bundle) -> Result<u32, Invalid> {
    let files: BTreeMap<String, Content> = bundle
        .files
        .iter()
        .map(|(path, text)| (path.clone(), Content::Text(text.clone())))
        .collect();
    let (gathered, operations) = gather(&files, &bundle.root)?;
    if gathered.files.len() != bundle.files.len() {
        // Files nothing refers to: harmless, but not what this server would have built.
        return Err(Invalid::new(
            Reason::InvalidDocument,
            "the held definition carries files its root does not refer to",
        ));
    }
    Ok(operations)
}

struct Gathering<'a> {
    available: &'a BTreeMap<String, Content>,
    texts: BTreeMap<String, String>,
    parsed: BTreeMap<String, Value>,
    bytes: usize,
}

impl Gathering<'_> {
    /// Reads and parses `path` once; `from` is the file and reference that named it.
    fn load(&mut self, path: &str, from: Option<(&str, &str)>) -> Result<(), Invalid> {
        if self.parsed.contains_key(path) {
            return Ok(());
        }
        let named = || match from {
            Some((file, reference)) => format!(
                "{file}: $ref {} names {}, which",
                quoted(reference),
                quoted(path)
            ),
            None => quoted(path),
        };
        let text = match self.available.get(path) {
            Some(Content::Text(text)) => text,
            Some(Content::Binary(_)) => {
                return Err(Invalid::new(
                    Reason::InvalidDocument,
                    format!("{} is not UTF-8 text", named()),
                ));
            }
            None => {
                return Err(Invalid::new(
                    Reason::InvalidReference,
                    format!("{} is not in the directory", named()),
                ));
            }
        };
        // A path that cannot be a ConfigMap key is refused before its references are
        // walked: each reference inside a file copies and compares that file's path, so a
        // path of 100 KB named by 50,000 references cost half a second before the keys
        // were checked at the end.
        file_keys::config_map_key(path).map_err(|why| {
            Invalid::new(
                Reason::UnsupportedFileName,
                match from {
                    Some((file, reference)) => format!("{file}: $ref {}: {why}", quoted(reference)),
                    None => why.to_string(),
                },
            )
        })?;
        self.bytes += path.len() + text.len();
        if self.bytes > MAX_DEFINITION_BYTES {
            return Err(Invalid::new(
                Reason::DefinitionTooLarge,
                format!(
                    "the root document and the files it refers to hold more than {MAX_DEFINITION_BYTES} bytes, more than one ConfigMap can carry"
                ),
            ));
        }
        let document = parse_document(text).map_err(|invalid| Invalid {
            reason: invalid.reason,
            message: format!("{path}: {}", invalid.message),
        })?;
        self.texts.insert(path.to_owned(), text.clone());
        self.parsed.insert(path.to_owned(), document);
        Ok(())
    }

    fn document(&self, path: &str) -> &Value {
        self.parsed.get(path).unwrap_or(&Value::Null)
    }
}

/// Every `$ref` string in a document, walked without recursion (the parser bounds the
/// depth, but an explicit stack costs nothing).
fn references(document: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![document];
    while let Some(value) = stack.pop() {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(target)) = object.get("$ref") {
                    found.push(target.clone());
                }
                stack.extend(object.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    found
}

/// `file` relative to the directory of `from`, normalised; refused when it is absolute,
/// a URL, or climbs out of the directory.
fn relative_target(from: &str, file: &str) -> Result<String, &'static str> {
    if file.starts_with('/') || file.contains('\\') {
        return Err("is an absolute path; only paths relative to the referring file are bundled");
    }
    if file.contains("://") || file.split('/').next().is_some_and(|s| s.contains(':')) {
        return Err(
            "names a URL; a definition read from a source may only refer to files beside it",
        );
    }
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("leaves the definition's directory");
                }
            }
            name => parts.push(name),
        }
    }
    Ok(parts.join("/"))
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Operations of the root's path items that are references to other files.
fn operations_elsewhere(gathered: &Gathering<'_>, root: &str) -> u32 {
    let Some(paths) = gathered
        .document(root)
        .get("paths")
        .and_then(Value::as_object)
    else {
        return 0;
    };
    let count: usize = paths
        .values()
        .filter_map(|item| item.get("$ref").and_then(Value::as_str))
        .filter_map(|reference| {
            let (file, fragment) = reference.split_once('#').unwrap_or((reference, ""));
            if file.is_empty() {
                return None;
            }
            let target = relative_target(root, file).ok()?;
            gathered
                .document(&target)
                .pointer(&percent_decode(fragment))?
                .as_object()
                .map(|item| METHODS.iter().filter(|m| item.contains_key(**m)).count())
        })
        .sum();
    u32::try_from(count).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> BTreeMap<String, Content> {
        entries
            .iter()
            .map(|(path, text)| ((*path).to_owned(), Content::Text((*text).to_owned())))
            .collect()
    }

    const ROOT: &str = "openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200':\n          description: ok\n          content:\n            application/json:\n              schema: {$ref: 'schemas/pet.yaml#/Pet'}\n  /owners:\n    $ref: paths/owners.yaml\n";
    const PET: &str =
        "Pet:\n  type: object\n  properties:\n    owner: {$ref: '../schemas/owner.yaml'}\n";
    const OWNER: &str = "type: object\nproperties:\n  name: {type: string}\n";
    const OWNERS: &str = "get:\n  responses:\n    '200': {description: ok}\npost:\n  responses:\n    '201': {description: made}\n";

    fn api() -> BTreeMap<String, Content> {
        files(&[
            ("openapi.yaml", ROOT),
            ("schemas/pet.yaml", PET),
            ("schemas/owner.yaml", OWNER),
            ("paths/owners.yaml", OWNERS),
            ("README.md", "not part of the API"),
            ("schemas/unused.yaml", "{"),
        ])
    }

    #[test]
    fn keeps_exactly_the_files_the_root_reaches() {
        let available = api();
        let root = choose_root(&available, None).unwrap_or_default();
        let (bundle, operations) = gather(&available, root).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(
            bundle.files.keys().collect::<Vec<_>>(),
            [
                "openapi.yaml",
                "paths/owners.yaml",
                "schemas/owner.yaml",
                "schemas/pet.yaml"
            ]
        );
        assert_eq!(
            operations, 2,
            "get and post of /owners live in another file"
        );
        assert_eq!(
            bundle.keys().collect::<Vec<_>>(),
            [
                ("openapi.yaml".to_owned(), "openapi.yaml"),
                ("paths__owners.yaml".to_owned(), "paths/owners.yaml"),
                ("schemas__owner.yaml".to_owned(), "schemas/owner.yaml"),
                ("schemas__pet.yaml".to_owned(), "schemas/pet.yaml"),
            ]
        );
        assert!(!bundle.is_single());
    }

    #[test]
    fn the_hash_follows_every_reached_file_and_nothing_else() {
        let (before, _) = gather(&api(), "openapi.yaml").unwrap_or_else(|e| panic!("{e:?}"));
        let mut unrelated = api();
        unrelated.insert("README.md".to_owned(), Content::Text("edited".to_owned()));
        let (same, _) = gather(&unrelated, "openapi.yaml").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(before.sha256(), same.sha256());
        let mut edited = api();
        edited.insert(
            "schemas/owner.yaml".to_owned(),
            Content::Text(format!("{OWNER}  age: {{type: integer}}\n")),
        );
        let (changed, _) = gather(&edited, "openapi.yaml").unwrap_or_else(|e| panic!("{e:?}"));
        assert_ne!(before.sha256(), changed.sha256());
        // A single file hashes like the same text given inline.
        let single = Bundle::single("openapi.yaml", ROOT);
        assert_eq!(single.sha256(), sha256_hex(ROOT.as_bytes()));
    }

    #[test]
    fn references_that_leave_the_directory_or_name_nothing_are_refused() {
        let cases = [
            ("{$ref: '../secrets.yaml'}", "ReferenceRefused", "leaves"),
            ("{$ref: '/etc/passwd'}", "ReferenceRefused", "absolute"),
            (
                "{$ref: 'https://example.com/x.yaml'}",
                "ReferenceRefused",
                "URL",
            ),
            ("{$ref: 'file:x.yaml'}", "ReferenceRefused", "URL"),
            ("{$ref: 'schemas/gone.yaml'}", "InvalidReference", "gone"),
            (
                "{$ref: 'schemas/owner.yaml#/nothing'}",
                "InvalidReference",
                "points at nothing",
            ),
            ("{$ref: 'schemas/unused.yaml'}", "InvalidSyntax", "unused"),
        ];
        for (schema, reason, says) in cases {
            let mut available = api();
            available.insert(
                "openapi.yaml".to_owned(),
                Content::Text(format!(
                    "openapi: 3.0.3\ninfo: {{title: T, version: '1'}}\npaths: {{}}\ncomponents: {{schemas: {{X: {schema}}}}}\n"
                )),
            );
            let invalid = gather(&available, "openapi.yaml").err();
            let invalid = invalid.unwrap_or_else(|| panic!("{schema} should be refused"));
            assert_eq!(
                invalid.reason.as_str(),
                reason,
                "{schema}: {}",
                invalid.message
            );
            assert!(
                invalid.message.contains(says),
                "{schema}: {}",
                invalid.message
            );
        }
    }

    #[test]
    fn climbing_inside_the_directory_is_fine() {
        assert_eq!(
            relative_target("a/b/c.yaml", "../d.yaml").as_deref(),
            Ok("a/d.yaml")
        );
        assert_eq!(
            relative_target("a/c.yaml", "./x/../y.yaml").as_deref(),
            Ok("a/y.yaml")
        );
        assert!(relative_target("a/c.yaml", "../../y.yaml").is_err());
    }

    #[test]
    fn no_reference_resolves_outside_the_directory() {
        // Every combination of up to four hostile or ordinary segments, from files at
        // several depths: a target is either refused or a plain relative path below the
        // directory.
        let segments = ["..", ".", "", "a", "b.yaml", "c:d", "%2e%2e", "\\x"];
        let mut combos: Vec<String> = vec![String::new()];
        for _ in 0..4 {
            combos = combos
                .iter()
                .flat_map(|prefix| {
                    segments.iter().map(move |segment| {
                        if prefix.is_empty() {
                            (*segment).to_owned()
                        } else {
                            format!("{prefix}/{segment}")
                        }
                    })
                })
                .collect();
            for from in ["root.yaml", "x/root.yaml", "x/y/root.yaml"] {
                for file in &combos {
                    if let Ok(target) = relative_target(from, file) {
                        assert!(
                            !target.starts_with('/')
                                && !target.split('/').any(|part| part == ".." || part == "."),
                            "{from} + {file:?} resolved to {target:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_percent_encoded_path_is_never_bundled() {
        // A repository may hold a directory literally named `%2e%2e`; the mock server
        // would decode it to `..` and read outside its volume. Such paths cannot be keys.
        let mut available = api();
        available.insert(
            "openapi.yaml".to_owned(),
            Content::Text("paths: {/a: {$ref: '%2e%2e/x.yaml'}}\n".to_owned()),
        );
        available.insert("%2e%2e/x.yaml".to_owned(), Content::Text("{}".to_owned()));
        let refused = gather(&available, "openapi.yaml").err();
        assert!(refused.is_some_and(|e| e.reason.as_str() == "UnsupportedFileName"));
    }

    #[test]
    fn the_root_is_named_or_found_by_convention() {
        let available = files(&[("swagger.json", "{}"), ("api.yaml", "{}")]);
        assert_eq!(choose_root(&available, None).ok(), Some("swagger.json"));
        assert_eq!(
            choose_root(&available, Some("api.yaml")).ok(),
            Some("api.yaml")
        );
        let missing = choose_root(&available, Some("gone.yaml")).err();
        assert!(missing.is_some_and(
            |e| e.reason.as_str() == "NoRootDocument" && e.message.contains("gone.yaml")
        ));
        let none = choose_root(&files(&[("README.md", "")]), None).err();
        assert!(none.is_some_and(|e| e.message.contains("openapi.yaml")));
    }

    #[test]
    fn colliding_keys_and_binary_files_are_refused() {
        let mut available = api();
        available.insert(
            "openapi.yaml".to_owned(),
            Content::Text("paths: {a: {$ref: 'x/y.yaml'}, b: {$ref: 'x__y.yaml'}}\n".to_owned()),
        );
        available.insert("x/y.yaml".to_owned(), Content::Text("{}".to_owned()));
        available.insert("x__y.yaml".to_owned(), Content::Text("{}".to_owned()));
        let collision = gather(&available, "openapi.yaml").err();
        assert!(collision.is_some_and(|e| e.message.contains("share a ConfigMap key")));
        available.insert("x/y.yaml".to_owned(), Content::Binary(vec![0xff, 0xfe]));
        let binary = gather(&available, "openapi.yaml").err();
        assert!(binary.is_some_and(|e| e.message.contains("not UTF-8")));
    }

    #[test]
    fn a_path_that_cannot_be_a_key_is_refused_before_its_references_are_walked() {
        // Walking a file's references copies and compares its path once per reference:
        // a 100 KB path named by 50,000 of them cost half a second. The file below also
        // names a file that does not exist; walked, that would be the refusal.
        let deep = format!("{}x.yaml", "d".repeat(250).repeat(2) + "/");
        let root = format!(
            "openapi: 3.0.3\ninfo: {{title: t, version: '1'}}\npaths: {{}}\ncomponents:\n  schemas:\n    A: {{$ref: '{deep}#/a'}}\n"
        );
        let files = files(&[
            ("openapi.yaml", &root),
            (&deep, "a: {$ref: 'missing.yaml'}\n"),
        ]);
        let Err(refused) = gather(&files, "openapi.yaml") else {
            panic!(
                "a path of {} characters cannot be a ConfigMap key",
                deep.len()
            );
        };
        assert_eq!(
            refused.reason,
            Reason::UnsupportedFileName,
            "{}",
            refused.message
        );
        assert!(
            refused.message.starts_with("openapi.yaml: $ref "),
            "{}",
            refused.message
        );
        // The path is named, in part: a message has room for what is wrong, not for the
        // whole of what an attacker wrote.
        assert!(refused.message.len() < 1_000, "{}", refused.message);
        assert!(
            refused.message.contains("characters in all"),
            "{}",
            refused.message
        );
    }
}
