//! What the observed ConfigMap holds: the definition that runs, served again whenever
//! the wanted one cannot be (invalid, not fetched yet, its source failing).

use std::sync::Arc;

use serde_json::Value;

use super::bundle::Bundle;
use super::definition::Format;
use super::origin::Candidate;
use crate::controllers::common::held_files::{self, APIMOCK, Record};
use crate::protocol::ObjectMap;
use crate::source::Revision;

/// What the ConfigMap records beside the definition (revision, source time, root).
pub fn record(config_map: &Value) -> Record {
    Record::read(config_map, &APIMOCK)
}

/// The source's revision of the definition the observed ConfigMap of APIMock `name`
/// holds, if it came from a source (and the annotation holds text a revision can be).
pub fn running(children: &ObjectMap, name: &str) -> Option<Revision> {
    let config_map = children.find("ConfigMap", "v1", None, name)?;
    held_files::annotation(config_map, APIMOCK.revision).and_then(Revision::read)
}

/// The held definition: one document under `openapi.yaml`/`openapi.json`, or the root
/// and files of a multi-file definition (recorded in annotations).
pub fn candidate(config_map: &Value) -> Option<Candidate<'_>> {
    let data = config_map.get("data")?.as_object()?;
    let record = record(config_map);
    let Some(root) = record.root else {
        return [Format::Yaml, Format::Json]
            .iter()
            .find_map(|format| data.get(format.file_name()).and_then(Value::as_str))
            .map(Candidate::Text);
    };
    let files = held_files::strings(config_map, "data")
        .into_iter()
        .map(|(key, text)| (record.paths.get(&key).cloned().unwrap_or(key), text))
        .collect();
    Some(Candidate::Bundle(Arc::new(Bundle { root, files })))
}
