//! How a ConfigMap records the files it holds, so they can be read back when their
//! source cannot be used: one codec for every controller. Each controller keeps its own
//! annotation names (ConfigMaps made by earlier versions must still read, and changing
//! them would change every stored child); the names follow one pattern,
//! `<group>/revision`, `<group>/source-time`, `<group>/paths` and, where used,
//! `<group>/root` and `<group>/format`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::source::Revision;

/// The annotation names of one controller's ConfigMaps.
#[derive(Debug, Clone, Copy)]
pub struct AnnotationSet {
    /// The source's revision of what is held.
    pub revision: &'static str,
    /// When the source made that revision (RFC 3339).
    pub source_time: &'static str,
    /// ConfigMap key → path, for the keys that differ (JSON).
    pub paths: &'static str,
    /// The root document of several files.
    pub root: &'static str,
    /// How the files reach the pods (`env`, `files`), where a controller records it.
    pub format: Option<&'static str>,
}

/// APIMock's definition ConfigMaps.
pub const APIMOCK: AnnotationSet = AnnotationSet {
    revision: "apimock.metahooks.io/revision",
    source_time: "apimock.metahooks.io/source-time",
    paths: "apimock.metahooks.io/paths",
    root: "apimock.metahooks.io/root",
    format: None,
};

/// MonitoredService's and configsync's config ConfigMaps.
pub const CONFIG: AnnotationSet = AnnotationSet {
    revision: "config.metahooks.io/revision",
    source_time: "config.metahooks.io/source-time",
    paths: "config.metahooks.io/paths",
    root: "config.metahooks.io/root",
    format: Some("config.metahooks.io/format"),
};

/// What a ConfigMap records beside its files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The source's revision of the files.
    pub revision: Option<Revision>,
    /// When the source made it (seconds since the epoch).
    pub source_time: Option<i64>,
    /// ConfigMap key → path under the mount, for the keys that differ.
    pub paths: BTreeMap<String, String>,
    /// The root document, for several files that make one definition.
    pub root: Option<String>,
    /// The format's name, where the set records one.
    pub format: Option<String>,
}

impl Record {
    /// The annotations of `set` that record this.
    pub fn annotations(&self, set: &AnnotationSet) -> BTreeMap<String, String> {
        let mut annotations = BTreeMap::new();
        let mut put = |name: &str, value: String| annotations.insert(name.to_owned(), value);
        if let Some(revision) = &self.revision {
            put(set.revision, revision.to_string());
        }
        if let (Some(name), Some(format)) = (set.format, &self.format) {
            put(name, format.clone());
        }
        if let Some(at) = self
            .source_time
            .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        {
            put(set.source_time, at.to_string());
        }
        if let Some(root) = &self.root {
            put(set.root, root.clone());
        }
        if !self.paths.is_empty() {
            // A map of strings always serialises.
            put(
                set.paths,
                serde_json::to_string(&self.paths).unwrap_or_default(),
            );
        }
        annotations
    }

    /// What `config_map` records through the annotations of `set` (an annotation that
    /// does not read counts as absent).
    pub fn read(config_map: &Value, set: &AnnotationSet) -> Record {
        let annotation = |name: &str| annotation(config_map, name).map(str::to_owned);
        Record {
            revision: annotation(set.revision).and_then(|text| Revision::read(&text)),
            source_time: annotation(set.source_time)
                .and_then(|at| at.parse::<jiff::Timestamp>().ok())
                .map(|at| at.as_second()),
            paths: annotation(set.paths)
                .and_then(|paths| serde_json::from_str(&paths).ok())
                .unwrap_or_default(),
            root: annotation(set.root),
            format: set.format.and_then(annotation),
        }
    }
}

/// The annotation `name` of an object.
pub fn annotation<'a>(object: &'a Value, name: &str) -> Option<&'a str> {
    object.pointer("/metadata/annotations")?.get(name)?.as_str()
}

/// The string values of `field` (`data`, `binaryData`) of a ConfigMap, by key.
pub fn strings(config_map: &Value, field: &str) -> BTreeMap<String, String> {
    config_map
        .get(field)
        .and_then(Value::as_object)
        .map(|fields| {
            fields
                .iter()
                .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_record_reads_back_through_each_set() {
        let record = Record {
            revision: Some(Revision::new("main@sha1:abc")),
            source_time: Some(1_700_000_000),
            paths: BTreeMap::from([("a__b.yaml".to_owned(), "a/b.yaml".to_owned())]),
            root: Some("root.yaml".to_owned()),
            format: Some("files".to_owned()),
        };
        for set in [APIMOCK, CONFIG] {
            let config_map = json!({"metadata": {"annotations": record.annotations(&set)}});
            let read = Record::read(&config_map, &set);
            let expected = Record {
                format: set.format.and(record.format.clone()),
                ..record.clone()
            };
            assert_eq!(read, expected, "{set:?}");
        }
    }

    /// The names ConfigMaps written by earlier versions carry: they must keep reading.
    #[test]
    fn stored_children_keep_their_names() {
        let config_map = json!({"metadata": {"annotations": {
            "apimock.metahooks.io/revision": "r1",
            "apimock.metahooks.io/root": "api.yaml",
            "apimock.metahooks.io/source-time": "2023-11-14T22:13:20Z",
            "config.metahooks.io/revision": "r2",
            "config.metahooks.io/format": "env",
            "config.metahooks.io/paths": "{\"k\":\"p/k\"}",
        }}});
        let apimock = Record::read(&config_map, &APIMOCK);
        assert_eq!(apimock.revision.as_deref(), Some("r1"));
        assert_eq!(apimock.root.as_deref(), Some("api.yaml"));
        assert_eq!(apimock.source_time, Some(1_700_000_000));
        let config = Record::read(&config_map, &CONFIG);
        assert_eq!(config.revision.as_deref(), Some("r2"));
        assert_eq!(config.format.as_deref(), Some("env"));
        assert_eq!(config.paths.get("k").map(String::as_str), Some("p/k"));
    }
}
