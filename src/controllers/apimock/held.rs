//! What the observed ConfigMap holds: the definition that runs, served again whenever
//! the wanted one cannot be (invalid, not fetched yet, its source failing).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::bundle::Bundle;
use super::children::{PATHS_ANNOTATION, ROOT_ANNOTATION, SOURCE_TIME_ANNOTATION};
use super::definition::Format;
use super::origin::Candidate;

pub fn annotation<'a>(config_map: &'a Value, key: &str) -> Option<&'a str> {
    config_map
        .pointer("/metadata/annotations")?
        .get(key)?
        .as_str()
}

/// When the source made the held definition (seconds since the epoch), if recorded.
pub fn made_at(config_map: &Value) -> Option<i64> {
    annotation(config_map, SOURCE_TIME_ANNOTATION)
        .and_then(|at| at.parse::<jiff::Timestamp>().ok())
        .map(|at| at.as_second())
}

/// The held definition: one document under `openapi.yaml`/`openapi.json`, or the root
/// and files of a multi-file definition (recorded in annotations).
pub fn candidate(config_map: &Value) -> Option<Candidate<'_>> {
    let data = config_map.get("data")?.as_object()?;
    let Some(root) = annotation(config_map, ROOT_ANNOTATION) else {
        return [Format::Yaml, Format::Json]
            .iter()
            .find_map(|format| data.get(format.file_name()).and_then(Value::as_str))
            .map(Candidate::Text);
    };
    let renamed: BTreeMap<String, String> = annotation(config_map, PATHS_ANNOTATION)
        .and_then(|paths| serde_json::from_str(paths).ok())
        .unwrap_or_default();
    let files = data
        .iter()
        .filter_map(|(key, text)| {
            let path = renamed.get(key).unwrap_or(key);
            Some((path.clone(), text.as_str()?.to_owned()))
        })
        .collect();
    Some(Candidate::Bundle(Arc::new(Bundle {
        root: root.to_owned(),
        files,
    })))
}
