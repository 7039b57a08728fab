//! YAML in and out for trusted text (manifests, and inputs the user gave the command
//! line), through one crate (`serde_norway`, a maintained libyaml-based fork of
//! serde_yaml; not `serde_yml`, which is unsound), so the choice can change in one place.
//! Text from a request or a remote is read with the server's bounded reader instead.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// What reading or writing YAML can fail with.
pub type Error = serde_norway::Error;

/// Parses trusted YAML.
///
/// # Errors
/// The text is not YAML, or not the shape of `T`.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_norway::from_str(text)
}

/// Every document of a multi-document stream.
///
/// # Errors
/// A document is not YAML, or not the shape of `T`.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_norway::Deserializer::from_str(text)
        .map(T::deserialize)
        .collect()
}

/// Why a file of manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is JSON (it opens with `{` or `[`) and does not parse as JSON.
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The text is YAML and does not parse.
    #[error("not YAML: {0}")]
    Yaml(#[from] Error),
}

/// The documents of a file of manifests, split where YAML splits a stream (a line that
/// starts with `---`): a document whose first character other than white space is `{` or
/// `[` is read as JSON values (several may follow one another), any other as YAML. So a
/// JSON file, a YAML stream, and JSON objects separated by `---` (as some tools write
/// them) all read as YAML would read them. JSON is read as JSON because YAML's reading of
/// it differs where people notice: `"\ud83d\ude00"`, how JSON writers escape an emoji, is
/// a surrogate pair to JSON and an invalid escape to YAML.
///
/// # Errors
/// A document does not parse, or is not the shape of `T`.
pub fn manifests<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, ManifestError> {
    Ok(manifests_with_lines(text)?
        .into_iter()
        .map(|(_, value)| value)
        .collect())
}

/// As [`manifests`], each document with the line it starts on (1-based: its first line
/// that is neither blank nor a comment), so a report can point at it.
///
/// # Errors
/// A document does not parse, or is not the shape of `T`.
pub fn manifests_with_lines<T: DeserializeOwned>(
    text: &str,
) -> Result<Vec<(usize, T)>, ManifestError> {
    let mut all = Vec::new();
    for (first_line, document) in stream_documents(text) {
        if document.trim_start().starts_with(['{', '[']) {
            let mut values = serde_json::Deserializer::from_str(&document).into_iter::<T>();
            let mut start = 0;
            while let Some(value) = values.next() {
                let value = value?;
                let skipped = document[start..].len() - document[start..].trim_start().len();
                let line = first_line + document[..start + skipped].matches('\n').count();
                all.push((line, value));
                start = values.byte_offset();
            }
        } else if !document.trim().is_empty() {
            let line = first_line + content_offset(&document);
            all.extend(documents::<T>(&document)?.into_iter().map(|v| (line, v)));
        }
    }
    Ok(all)
}

/// Lines before the first one with YAML content (blank lines and comments).
fn content_offset(document: &str) -> usize {
    document
        .lines()
        .take_while(|line| {
            let line = line.trim();
            line.is_empty() || line.starts_with('#')
        })
        .count()
}

/// `text` cut at YAML's document markers: a line that is `---`, or starts with `---` and
/// white space (what follows belongs to the next document), each part with the line it
/// starts on. A marker is one at the start of a line only, as YAML has it, so `---`
/// inside a quoted string or an indented block does not cut.
fn stream_documents(text: &str) -> Vec<(usize, String)> {
    let mut out = vec![(1, String::new())];
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let marker = line
            .strip_prefix("---")
            .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace));
        match marker {
            Some(rest) => {
                // What follows the marker on its line starts the next part on that line.
                let rest = rest.trim_start_matches([' ', '\t']);
                let line_number = if rest.trim().is_empty() {
                    index + 2
                } else {
                    index + 1
                };
                let text = if rest.trim().is_empty() { "" } else { rest };
                out.push((line_number, text.to_owned()));
            }
            None => {
                if let Some((_, current)) = out.last_mut() {
                    current.push_str(line);
                }
            }
        }
    }
    out
}

/// Writes `value` as YAML.
///
/// # Errors
/// The value cannot be represented in YAML.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_norway::to_string(value)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    #[test]
    fn each_document_knows_its_first_line() {
        let text = "# objects\n\napiVersion: v1\nkind: A\n---\n# b\nkind: B\n--- {\"kind\": \"C\"}\n---\n\n{\"kind\": \"D\"}\n  {\"kind\": \"E\"}\n";
        let found: Vec<(usize, Value)> = manifests_with_lines(text).unwrap_or_default();
        let lines: Vec<(usize, &str)> = found
            .iter()
            .map(|(line, v)| (*line, v["kind"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!(lines, [(3, "A"), (7, "B"), (8, "C"), (11, "D"), (12, "E")]);
    }

    #[test]
    fn json_files_are_read_as_json_and_yaml_files_as_yaml() {
        let emoji: Vec<Value> =
            manifests(r#"{"kind": "APIMock", "title": "\ud83d\ude00"}"#).unwrap_or_default();
        assert_eq!(
            emoji,
            vec![json!({"kind": "APIMock", "title": "\u{1F600}"})]
        );
        let stream: Vec<Value> = manifests("  {\"a\": 1}\n{\"a\": 2}\n").unwrap_or_default();
        assert_eq!(stream, vec![json!({"a": 1}), json!({"a": 2})]);
        let yaml: Vec<Value> = manifests("a: 1\n---\nb: 2\n").unwrap_or_default();
        assert_eq!(yaml, vec![json!({"a": 1}), json!({"b": 2})]);
        let broken = manifests::<Value>("{\"a\": ").map(|_| ());
        assert!(matches!(broken, Err(ManifestError::Json(_))), "{broken:?}");
        // JSON objects separated by document markers, as some tools write them.
        let marked: Vec<Value> =
            manifests("{\"a\": 1}\n---\n{\"b\": \"\\ud83d\\ude00\"}\n---\nc: 3\n--- {\"d\": 4}\n")
                .unwrap_or_default();
        assert_eq!(
            marked,
            vec![
                json!({"a": 1}),
                json!({"b": "\u{1F600}"}),
                json!({"c": 3}),
                json!({"d": 4})
            ]
        );
        // A marker only at the start of a line.
        let quoted: Vec<Value> = manifests("a: |\n  x\n  ---\n  y\n").unwrap_or_default();
        assert_eq!(quoted, vec![json!({"a": "x\n---\ny\n"})]);
    }
}
