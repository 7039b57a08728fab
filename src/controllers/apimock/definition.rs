//! Reading an APIMock definition: size check, YAML/JSON parse, version detection,
//! validation and a short summary, memoised by content hash.
//!
//! Metacontroller calls sync on every resync and child change with an unchanged
//! definition, so the expensive part runs once per distinct document; the memo is
//! bounded and holds summaries, never parsed documents.

use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::Value;

use super::validate;
pub use super::verdict::{Generation, Invalid};
use crate::controllers::common::memo::Memo;
use crate::controllers::common::reason::Reason;
use crate::hash::sha256_hex;

/// A definition is held in a ConfigMap, so it can be no larger than one's content.
pub const MAX_DEFINITION_BYTES: usize = crate::apiserver::CONFIG_MAP_CONTENT_BYTES;

/// Memo capacity: distinct definitions remembered.
const MEMO_ENTRIES: u64 = 256;

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

/// Parses and validates a definition. Pure; callers normally go through [`AnalysisMemo`].
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
    let document = parse(text, format)?;
    let generation = detect(&document)?;
    validate::validate(&document, generation)?;
    Ok(summarize(&document, generation))
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
    parse(text, sniff_format(text))
}

pub(super) fn sniff_format(text: &str) -> Format {
    match text.trim_start().as_bytes().first() {
        Some(b'{' | b'[') => Format::Json,
        _ => Format::Yaml,
    }
}

fn parse(text: &str, format: Format) -> Result<Value, Invalid> {
    match format {
        Format::Json => serde_json::from_str(text).map_err(|e| {
            Invalid::new(
                Reason::InvalidSyntax,
                format!("the definition is not valid JSON: {e}"),
            )
        }),
        Format::Yaml => {
            let bound = crate::yaml::Expansion::for_input(text.len());
            crate::yaml::value_bounded(text, bound).map_err(|e| match e {
                crate::yaml::BoundedError::Syntax(e) => Invalid::new(
                    Reason::InvalidSyntax,
                    format!("the definition is not valid YAML: {e}"),
                ),
                too_large @ crate::yaml::BoundedError::TooLarge { .. } => Invalid::new(
                    Reason::DefinitionTooLarge,
                    format!("the definition is refused: {too_large}"),
                ),
            })
        }
    }
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

fn summarize(document: &Value, generation: Generation) -> Summary {
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
    Summary {
        openapi: document
            .get(version_field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        version: info
            .as_ref()
            .map(|info| info.version.clone())
            .unwrap_or_default(),
        title: info.map(|info| info.title).unwrap_or_default(),
        operations: u32::try_from(operations).unwrap_or(u32::MAX),
    }
}

/// Bounded memo of analyses. Keyed by BLAKE3 (several GB/s, collision-resistant)
/// rather than SHA-256, because the key is computed on every sync of every parent while
/// the SHA-256 shown to users is only needed once per distinct document.
pub struct AnalysisMemo {
    analyses: Memo<MemoKey, Arc<Analysis>>,
    heavy: Arc<HeavySlots>,
}

impl Default for AnalysisMemo {
    fn default() -> AnalysisMemo {
        AnalysisMemo::with_heavy_slots(0)
    }
}

/// The key of a memoised analysis (a BLAKE3 hash).
pub type MemoKey = [u8; 32];

/// Definitions above this size are validated in one of a few "heavy" slots: validating a
/// near-limit document takes ~170 MiB for a moment, so peak memory follows the number of
/// cores, not the number of calls in flight.
const HEAVY_BYTES: usize = 64 * 1024;

/// A counting gate over the heavy slots.
struct HeavySlots {
    used: Mutex<usize>,
    freed: std::sync::Condvar,
    capacity: usize,
}

/// A heavy slot, given back when dropped.
struct HeavySlot(Arc<HeavySlots>);

impl HeavySlots {
    /// Waits for a slot until `deadline` (forever without one); None when it passed.
    fn take(self: &Arc<Self>, deadline: Option<std::time::Instant>) -> Option<HeavySlot> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used >= self.capacity {
            used = match deadline {
                None => self.freed.wait(used).unwrap_or_else(|e| e.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.freed
                        .wait_timeout(used, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
        *used += 1;
        Some(HeavySlot(self.clone()))
    }
}

impl Drop for HeavySlot {
    fn drop(&mut self) {
        let slots = &self.0;
        let mut used = slots.used.lock().unwrap_or_else(|e| e.into_inner());
        *used = used.saturating_sub(1);
        slots.freed.notify_one();
    }
}

impl AnalysisMemo {
    /// A memo whose large definitions are validated `slots` at a time (0: one per core,
    /// at most 8). The server passes its compute-thread count: more could not run at once.
    pub fn with_heavy_slots(slots: usize) -> AnalysisMemo {
        let capacity = match slots {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8)),
            n => n,
        };
        AnalysisMemo {
            analyses: Memo::entries(MEMO_ENTRIES),
            heavy: Arc::new(HeavySlots {
                used: Mutex::new(0),
                freed: std::sync::Condvar::new(),
                capacity,
            }),
        }
    }

    /// The analysis of `text`, waiting for a heavy slot as long as it takes.
    pub fn analyze(&self, text: &str) -> Arc<Analysis> {
        // Without a deadline the slot is always had (waiting as long as it takes).
        match self.analyze_by(text, None) {
            Some(analysis) => analysis,
            None => Arc::new(analyze(text)),
        }
    }

    /// The analysis of `text` if it was made before; never validates.
    pub fn lookup(&self, text: &str) -> Option<Arc<Analysis>> {
        let key: MemoKey = *blake3::hash(text.as_bytes()).as_bytes();
        self.analyses.get(&key)
    }

    /// Like [`AnalysisMemo::analyze`], but a large document that cannot get a heavy slot before
    /// `deadline` is not validated at all (None).
    pub fn analyze_by(
        &self,
        text: &str,
        deadline: Option<std::time::Instant>,
    ) -> Option<Arc<Analysis>> {
        let key: MemoKey = *blake3::hash(text.as_bytes()).as_bytes();
        if let Some(hit) = self.analyses.get(&key) {
            return Some(hit);
        }
        let _slot = if text.len() > HEAVY_BYTES {
            Some(self.heavy.take(deadline)?)
        } else {
            None
        };
        let sha256 = sha256_hex(text.as_bytes());
        // Computed outside the lock: a slow document must not block other parents.
        let format = sniff_format(text);
        let analysis = Arc::new(Analysis {
            outcome: check(text, format),
            sha256: sha256.clone(),
            format,
        });
        self.analyses.insert(key, analysis.clone());
        Some(analysis)
    }

    /// An analysis remembered under `key` (a caller's own hash of what it analysed).
    pub fn remembered(&self, key: &MemoKey) -> Option<Arc<Analysis>> {
        self.analyses.get(key)
    }

    /// Remembers `analysis` under `key`.
    pub fn remember(&self, key: MemoKey, analysis: Analysis) -> Arc<Analysis> {
        let analysis = Arc::new(analysis);
        self.analyses.insert(key, analysis.clone());
        analysis
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.analyses.len()
    }
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
    fn large_definitions_wait_for_a_heavy_slot_until_the_deadline() {
        // A memo of its own: no other test can take or free these slots.
        let memo = AnalysisMemo::with_heavy_slots(2);
        let held: Vec<HeavySlot> = (0..2)
            .map(|_| {
                memo.heavy
                    .take(None)
                    .unwrap_or_else(|| panic!("a slot without deadline"))
            })
            .collect();
        let now = std::time::Instant::now();
        assert!(
            memo.heavy.take(Some(now)).is_none(),
            "all slots busy: no work after the deadline"
        );
        let big = format!(
            "openapi: 3.0.0\ninfo: {{title: t, version: '1'}}\npaths: {{}}\nx-pad: '{}'\n",
            "a".repeat(HEAVY_BYTES)
        );
        assert!(memo.analyze_by(&big, Some(now)).is_none());
        let small = "openapi: 3.0.0\ninfo: {title: t, version: '1'}\npaths: {}\n";
        assert!(
            memo.analyze_by(small, Some(now)).is_some(),
            "a small definition needs no slot"
        );
        drop(held);
        let analysis = memo
            .analyze_by(&big, Some(now + std::time::Duration::from_secs(60)))
            .unwrap_or_else(|| panic!("a slot came free"));
        assert!(analysis.outcome.is_ok(), "{:?}", analysis.outcome);
    }

    #[test]
    fn memo_returns_the_same_analysis_and_stays_bounded() {
        let memo = AnalysisMemo::default();
        let first = memo.analyze(PETS);
        let second = memo.analyze(PETS);
        assert!(Arc::ptr_eq(&first, &second));
        for i in 0..(MEMO_ENTRIES + 10) {
            memo.analyze(&format!(
                "openapi: 3.0.0\ninfo: {{title: t{i}, version: '1'}}\npaths: {{}}\n"
            ));
        }
        let held = memo.len() as u64;
        assert!(
            held <= MEMO_ENTRIES && held > MEMO_ENTRIES / 2,
            "{held} held"
        );
    }
}
