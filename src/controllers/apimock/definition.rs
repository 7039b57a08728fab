//! Reading an APIMock definition: size check, YAML/JSON parse, version detection,
//! validation and a short summary, remembered by content hash in the server's step memo.
//!
//! Metacontroller calls sync on every resync and child change with an unchanged
//! definition, so the expensive part runs once per distinct document; what is remembered
//! is a summary, never a parsed document.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use super::validate::{self, Landmarks};
pub use super::verdict::{Generation, Invalid};
use crate::controllers::common::reason::Reason;
use crate::hash::sha256_hex;
use crate::memo::steps::{Step, StepKey, Steps};

/// A definition is held in a ConfigMap, so it can be no larger than one's content.
pub const MAX_DEFINITION_BYTES: usize = crate::apiserver::CONFIG_MAP_CONTENT_BYTES;

/// How the definition text is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// JSON (its first character is `{` or `[`).
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// Name of the file in the ConfigMap and under the mount path.
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Json => "openapi.json",
            Format::Yaml => "openapi.yaml",
        }
    }
}

/// What a valid definition is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// The `openapi` or `swagger` version it declares.
    pub openapi: String,
    /// `info.version`: the version of the API it describes.
    pub version: String,
    /// `info.title`.
    pub title: String,
    /// Method + path pairs.
    pub operations: u32,
    /// What validation let pass but a client may trip over, for the status message.
    pub warning: Option<String>,
}

/// What one definition text is, memoised by its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// Hash shown in status and on the pod template.
    pub sha256: String,
    /// How it is written.
    pub format: Format,
    /// Its summary, or why it cannot be served.
    pub outcome: Result<Summary, Invalid>,
}

/// Parses and validates a definition. Pure; callers normally go through
/// [`remembered_analysis`].
pub fn analyze(text: &str) -> Analysis {
    let sha256 = sha256_hex(text.as_bytes());
    let format = sniff_format(text);
    let outcome = check(text, format);
    Analysis {
        sha256,
        format,
        outcome,
    }
}

fn check(text: &str, format: Format) -> Result<Summary, Invalid> {
    if text.len() > MAX_DEFINITION_BYTES {
        return Err(Invalid::new(
            Reason::DefinitionTooLarge,
            format!(
                "the definition is {} bytes; a ConfigMap can hold at most {MAX_DEFINITION_BYTES} bytes of it",
                text.len()
            ),
        ));
    }
    if text.trim().is_empty() {
        return Err(Invalid::new(
            Reason::InvalidDocument,
            "the definition is empty",
        ));
    }
    check_nesting(text)?;
    let (document, landmarks) = parse(text, format)?;
    let generation = detect(&document)?;
    let warning = validate::validate(&document, generation, Some(&landmarks))?;
    Ok(summarize(&document, generation, warning))
}

/// Deepest bracket nesting we hand to a parser. Both parsers stop at 128 levels anyway,
/// but libyaml spends time quadratic in the depth before it gets there (100,000 open
/// brackets took 44 s), so hostile nesting is refused by a linear scan first. Brackets
/// inside quoted text count too; no real document opens 128 of them without closing.
const MAX_NESTING: usize = 128;

fn check_nesting(text: &str) -> Result<(), Invalid> {
    // This runs on every new definition. Most 64-byte stretches of a YAML document hold
    // no bracket at all; a branch-free test finds those so only the rest is walked byte
    // by byte (the line is counted only for the message).
    let bytes = text.as_bytes();
    let mut depth: usize = 0;
    for (index, chunk) in bytes.chunks(64).enumerate() {
        let brackets = chunk.iter().fold(false, |seen, &b| {
            seen | matches!(b, b'[' | b'{' | b']' | b'}')
        });
        if !brackets {
            continue;
        }
        for (offset, &byte) in chunk.iter().enumerate() {
            match byte {
                b'[' | b'{' => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        let at = index * 64 + offset;
                        let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
                        return Err(Invalid::new(
                            Reason::InvalidSyntax,
                            format!(
                                "the definition nests brackets deeper than {MAX_NESTING} levels (line {line})"
                            ),
                        ));
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Any document of a definition (a referenced file too) parsed as YAML or JSON by its
/// first character, within the same bounds as the root document.
pub(super) fn parse_document(text: &str) -> Result<Value, Invalid> {
    check_nesting(text)?;
    parse(text, sniff_format(text)).map(|(document, _)| document)
}

pub(super) fn sniff_format(text: &str) -> Format {
    match text.trim_start().as_bytes().first() {
        Some(b'{' | b'[') => Format::Json,
        _ => Format::Yaml,
    }
}

/// The document, with its landmarks as the reader noted them.
fn parse(text: &str, format: Format) -> Result<(Value, Landmarks), Invalid> {
    let (document, seen) = match format {
        Format::Json => crate::yaml::json_value_watching(text, &Landmarks::KEYS).map_err(|e| {
            Invalid::new(
                Reason::InvalidSyntax,
                format!("the definition is not valid JSON: {e}"),
            )
        })?,
        Format::Yaml => {
            let bound = crate::yaml::Expansion::for_input(text.len());
            crate::yaml::value_bounded_watching(text, bound, &Landmarks::KEYS).map_err(
                |e| match e {
                    crate::yaml::BoundedError::Syntax(e) => Invalid::new(
                        Reason::InvalidSyntax,
                        format!("the definition is not valid YAML: {e}"),
                    ),
                    too_large @ crate::yaml::BoundedError::TooLarge { .. } => Invalid::new(
                        Reason::DefinitionTooLarge,
                        format!("the definition is refused: {too_large}"),
                    ),
                },
            )?
        }
    };
    Ok((document, Landmarks::from_sightings(seen)))
}

fn detect(document: &Value) -> Result<Generation, Invalid> {
    let Some(object) = document.as_object() else {
        return Err(Invalid::new(
            Reason::InvalidDocument,
            format!(
                "the definition is {}, not an OpenAPI document object",
                kind_of(document)
            ),
        ));
    };
    let declared = |field: &str| {
        object.get(field).map(|v| {
            v.as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string())
        })
    };
    if let Some(version) = declared("openapi") {
        return if is_version(&version, "3.0") {
            Ok(Generation::OpenApi30)
        } else if is_version(&version, "3.1") {
            Ok(Generation::OpenApi31)
        } else {
            Err(Invalid::new(
                Reason::UnsupportedVersion,
                format!(
                    "openapi: {version} is not supported; use Swagger 2.0, OpenAPI 3.0.x or 3.1.x"
                ),
            ))
        };
    }
    if let Some(version) = declared("swagger") {
        return if version == "2.0" {
            Ok(Generation::Swagger2)
        } else {
            Err(Invalid::new(
                Reason::UnsupportedVersion,
                format!("swagger: {version} is not supported; only swagger: \"2.0\" is"),
            ))
        };
    }
    Err(Invalid::new(
        Reason::InvalidDocument,
        "the definition has neither an `openapi` nor a `swagger` field, so its version is unknown",
    ))
}

fn is_version(declared: &str, minor: &str) -> bool {
    declared.strip_prefix(minor).is_some_and(|rest| {
        rest.starts_with('.') && rest[1..].starts_with(|c: char| c.is_ascii_digit())
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "empty (null)",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn summarize(document: &Value, generation: Generation, warning: Option<String>) -> Summary {
    let version_field = if generation == Generation::Swagger2 {
        "swagger"
    } else {
        "openapi"
    };
    let operations = document
        .get("paths")
        .and_then(Value::as_object)
        .map(|paths| {
            paths
                .values()
                .filter_map(Value::as_object)
                .map(|item| METHODS.iter().filter(|m| item.contains_key(**m)).count())
                .sum::<usize>()
        })
        .unwrap_or(0);
    // Read through the typed OpenAPI model: `info` has the same shape in every version,
    // and the meta-schema has made sure it is there.
    let info = document
        .get("info")
        .and_then(|info| openapiv3::Info::deserialize(info).ok());
    // What reaches status is bounded: a title can be most of a 1 MiB definition, and
    // status holds it twice (the summary and the Validated message).
    let shown = crate::controllers::common::bounds::shown;
    use crate::controllers::common::bounds::{TITLE_CHARS, VERSION_CHARS};
    Summary {
        openapi: shown(
            document
                .get(version_field)
                .and_then(Value::as_str)
                .unwrap_or_default(),
            VERSION_CHARS,
        ),
        version: shown(
            info.as_ref().map_or("", |info| info.version.as_str()),
            VERSION_CHARS,
        ),
        title: shown(
            info.as_ref().map_or("", |info| info.title.as_str()),
            TITLE_CHARS,
        ),
        operations: u32::try_from(operations).unwrap_or(u32::MAX),
        warning,
    }
}

/// The analysis of `text`, remembered by the server's step memo (keyed by BLAKE3, several
/// GB/s, rather than the SHA-256 shown to users, which is only computed once per
/// distinct document). A large definition is validated in a heavy slot taken before
/// `deadline` (None when none came free: nobody waits for the answer any more).
pub fn remembered_analysis(
    steps: &Steps,
    text: &str,
    deadline: Option<std::time::Instant>,
) -> Option<Arc<Analysis>> {
    let key = StepKey {
        step: Step::Analysis,
        input: crate::hash::digest(text.as_bytes()),
    };
    if let Some(hit) = steps.get(&key) {
        return Some(hit);
    }
    let _turn = steps.heavy_turn(text.len(), deadline)?;
    Some(steps.keep(key, analyze(text), analysis_weight))
}

/// What an analysis holds: its summary's strings (a title can be most of a 1 MiB
/// document) or its error's message.
pub fn analysis_weight(analysis: &Analysis) -> u64 {
    let held = match &analysis.outcome {
        Ok(summary) => summary.openapi.len() + summary.version.len() + summary.title.len(),
        Err(invalid) => invalid.message.len(),
    };
    (analysis.sha256.len() + held) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const PETS: &str = "openapi: 3.0.3\ninfo: {title: Pets, version: '1'}\npaths:\n  /pets:\n    get:\n      responses:\n        '200': {description: ok}\n    post:\n      responses:\n        200: {description: ok}\n";

    #[test]
    fn summarises_a_valid_yaml_document() {
        let analysis = analyze(PETS);
        assert_eq!(analysis.format, Format::Yaml);
        let summary = analysis.outcome.unwrap();
        assert_eq!(summary.openapi, "3.0.3");
        assert_eq!(summary.version, "1", "info.version, the API's own version");
        assert_eq!(summary.title, "Pets");
        assert_eq!(summary.operations, 2);
    }

    #[test]
    fn a_default_the_oracle_does_not_check_is_a_warning_not_a_refusal() {
        let fixture = |name: &str| {
            let path = format!(
                "{}/tests/fixtures/openapi/{name}",
                env!("CARGO_MANIFEST_DIR")
            );
            analyze(&std::fs::read_to_string(path).unwrap())
        };
        let body = fixture("default-mismatch-request-body.yaml")
            .outcome
            .unwrap();
        let warning = body.warning.unwrap_or_default();
        assert!(
            warning.contains("requestBody") && warning.contains("default \"one\""),
            "{warning}"
        );
        let component = fixture("default-mismatch-component-schema.yaml");
        let refused = component.outcome.unwrap_err();
        assert!(
            refused.message.contains("components → schemas → Order"),
            "{}",
            refused.message
        );
        assert_eq!(analyze(PETS).outcome.unwrap().warning, None);
    }

    #[test]
    fn detects_versions_and_refuses_unknown_ones() {
        let swagger = r#"{"swagger": "2.0", "info": {"title": "t", "version": "1"}, "paths": {}}"#;
        assert_eq!(analyze(swagger).format, Format::Json);
        assert!(analyze(swagger).outcome.is_ok());
        let four = analyze("openapi: 4.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n");
        assert_eq!(
            four.outcome.unwrap_err().reason.as_str(),
            "UnsupportedVersion"
        );
        let none = analyze("info: {title: t}\n");
        assert_eq!(none.outcome.unwrap_err().reason.as_str(), "InvalidDocument");
        let list = analyze("- a\n- b\n");
        assert!(list.outcome.unwrap_err().message.contains("a list"));
        assert!(!is_version("3.10", "3.1"));
        assert!(is_version("3.1.0", "3.1"));
    }

    #[test]
    fn syntax_errors_say_where() {
        let broken = analyze("openapi: 3.0.0\ninfo:\n  version: [1\n");
        let invalid = broken.outcome.unwrap_err();
        assert_eq!(invalid.reason.as_str(), "InvalidSyntax");
        assert!(invalid.message.contains("line"), "{}", invalid.message);
    }

    #[test]
    fn too_large_is_refused_before_parsing() {
        let huge = format!("openapi: 3.0.0\n#{}\n", "x".repeat(MAX_DEFINITION_BYTES));
        assert_eq!(
            analyze(&huge).outcome.unwrap_err().reason.as_str(),
            "DefinitionTooLarge"
        );
    }

    /// The chunked scan against the plain byte-by-byte walk it replaced, on texts whose
    /// brackets fall on both sides of the 64-byte boundaries.
    #[test]
    fn nesting_scan_agrees_with_a_plain_walk() {
        fn plain(text: &str) -> Option<usize> {
            let mut depth = 0usize;
            for (index, line) in text.lines().enumerate() {
                for byte in line.bytes() {
                    match byte {
                        b'[' | b'{' => {
                            depth += 1;
                            if depth > MAX_NESTING {
                                return Some(index + 1);
                            }
                        }
                        b']' | b'}' => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                }
            }
            None
        }
        let mut seed = 0x2545_f491_u32;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        };
        let mut refused = 0;
        for case in 0..400 {
            let length = 1 + (next() % 700) as usize;
            let text: String = (0..length)
                .map(|_| match next() % 8 {
                    0 | 1 | 4 if case % 2 == 0 => '[',
                    0 => '{',
                    2 => '}',
                    3 => '\n',
                    _ => 'a',
                })
                .collect();
            let verdict = check_nesting(&text).err().map(|invalid| invalid.message);
            let expected = plain(&text).map(|line| {
                format!(
                    "the definition nests brackets deeper than {MAX_NESTING} levels (line {line})"
                )
            });
            refused += usize::from(expected.is_some());
            assert_eq!(verdict, expected, "case {case}: {text:?}");
        }
        // Both verdicts were exercised.
        assert!((40..360).contains(&refused), "{refused} of 400 refused");
        let exactly = format!("{}{}", "[".repeat(MAX_NESTING), "]".repeat(MAX_NESTING));
        assert!(check_nesting(&exactly).is_ok());
        let over = format!("x\n{}", "{".repeat(MAX_NESTING + 1));
        assert!(check_nesting(&over).is_err_and(|e| e.message.ends_with("(line 2)")));
    }

    #[test]
    fn alias_bombs_and_deep_nesting_fail_fast() {
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        let mut previous = 'a';
        for name in 'b'..='p' {
            bomb.push_str(&format!("{name}: &{name} [*{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}, *{previous}]\n"));
            previous = name;
        }
        let refused = analyze(&bomb).outcome.unwrap_err();
        assert!(
            ["InvalidSyntax", "DefinitionTooLarge"].contains(&refused.reason.as_str()),
            "{refused:?}"
        );
        // An anchor of anchors that stays under the parser's alias-jump limit but names
        // millions of nodes: refused for what it expands to.
        let mut nested = String::from(
            "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\nx-l0: &l0 [aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa, aaaaaaaaaaaaaaaa]\n",
        );
        for level in 1..8 {
            let refs = vec![format!("*l{}", level - 1); 8].join(", ");
            nested.push_str(&format!("x-l{level}: &l{level} [{refs}]\n"));
        }
        let refused = analyze(&nested).outcome.unwrap_err();
        assert_eq!(refused.reason.as_str(), "DefinitionTooLarge", "{refused:?}");
        assert!(refused.message.contains("aliases"), "{}", refused.message);
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(analyze(&deep).outcome.is_err());
        let deep_yaml = format!("a: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
        assert!(analyze(&deep_yaml).outcome.is_err());
    }

    #[test]
    fn an_analysis_is_remembered_and_weighs_what_it_holds() {
        let steps = Steps::default();
        let first = remembered_analysis(&steps, PETS, None);
        let again = remembered_analysis(&steps, PETS, None);
        assert!(matches!((&first, &again), (Some(a), Some(b)) if Arc::ptr_eq(a, b)));
        let long_title = format!(
            "openapi: 3.0.3\ninfo: {{title: '{}', version: '1'}}\npaths: {{}}\n",
            "t".repeat(100_000)
        );
        let analysis = analyze(&long_title);
        let Ok(summary) = &analysis.outcome else {
            panic!("valid: {:?}", analysis.outcome);
        };
        // Only what status shows of the title is kept, and weighed.
        assert!(
            summary.title.ends_with("(cut: 100000 characters in all)"),
            "{}",
            summary.title
        );
        let weight = analysis_weight(&analysis);
        assert!(
            weight >= summary.title.len() as u64 && weight < 1_000,
            "the title is counted: {weight}"
        );
    }
}
