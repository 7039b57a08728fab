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
    let mut all = Vec::new();
    for document in stream_documents(text) {
        if document.trim_start().starts_with(['{', '[']) {
            let values: Result<Vec<T>, serde_json::Error> =
                serde_json::Deserializer::from_str(&document)
                    .into_iter::<T>()
                    .collect();
            all.extend(values?);
        } else if !document.trim().is_empty() {
            all.extend(documents::<T>(&document)?);
        }
    }
    Ok(all)
}

/// `text` cut at YAML's document markers: a line that is `---`, or starts with `---` and
/// white space (what follows belongs to the next document). A marker is one at the start
/// of a line only, as YAML has it, so `---` inside a quoted string or an indented block
/// does not cut.
fn stream_documents(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for line in text.split_inclusive('\n') {
        let marker = line
            .strip_prefix("---")
            .filter(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace));
        match marker {
            Some(rest) => out.push(rest.to_owned()),
            None => {
                if let Some(current) = out.last_mut() {
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
