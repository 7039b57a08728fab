//! A configuration as a ConfigMap holds it: made from a source snapshot (env file or
//! files), and read back from an observed ConfigMap when the source cannot be used.
//! Shared by MonitoredService and configsync.

use std::collections::BTreeMap;
use std::ops::Deref;

use base64::Engine;
use k8s_openapi::ByteString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::held_files::{self, CONFIG, Record};
use super::problem::Problem;
use super::{envfile, file_keys};
use crate::controllers::common::reason::Reason;
use crate::hash::sha256_hex;
use crate::source::{Content, Revision, Snapshot};

// How a configuration reaches the pods: KEY=VALUE lines become container environment,
// files are mounted. No doc comments: on a CRD enum they would replace the field's own
// description and drop `null` from the enum's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[allow(missing_docs)]
pub enum ConfigFormat {
    Env,
    Files,
}

/// The format's name as annotations and messages show it (`none` when unset).
pub fn format_name(format: Option<ConfigFormat>) -> &'static str {
    match format {
        Some(ConfigFormat::Env) => "env",
        Some(ConfigFormat::Files) => "files",
        None => "none",
    }
}

/// What a configuration is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigContent {
    /// How the config reaches the pods.
    pub format: Option<ConfigFormat>,
    /// Text files, by ConfigMap key.
    pub data: BTreeMap<String, String>,
    /// Other files, by ConfigMap key.
    pub binary: BTreeMap<String, Vec<u8>>,
    /// ConfigMap key → file path under the mount (files format, nested paths only).
    pub paths: BTreeMap<String, String>,
    /// The source's revision of this content: None for a ConfigMap read back without
    /// its revision annotation (an older writer, or someone edited it away).
    pub revision: Option<Revision>,
    /// When the source made `revision` (seconds since the epoch); not part of the hash.
    pub source_time: Option<i64>,
}

/// A configuration and its content hash, computed once when it is made. It cannot be
/// changed afterwards, so the hash can never describe other content; its parts are read
/// through `Deref`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    content: ConfigContent,
    hash: String,
}

impl ConfigContent {
    /// The revision as messages name it.
    pub fn shown_revision(&self) -> &str {
        self.revision
            .as_deref()
            .unwrap_or("a config of unknown revision")
    }
}

impl Deref for Config {
    type Target = ConfigContent;

    fn deref(&self) -> &ConfigContent {
        &self.content
    }
}

impl Config {
    /// A config of `content`, its hash computed now.
    pub fn new(content: ConfigContent) -> Config {
        let binary: BTreeMap<&String, String> = content
            .binary
            .iter()
            .map(|(k, v)| (k, hex::encode(v)))
            .collect();
        let canonical = serde_json::json!({"data": content.data, "binary": binary, "paths": content.paths, "format": format_name(content.format)});
        let hash = sha256_hex(canonical.to_string().as_bytes());
        Config { content, hash }
    }

    /// Content hash over everything that reaches the pods.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// Bytes of content held (for sizing memos and the ConfigMap limit).
    pub fn content_bytes(&self) -> usize {
        let text: usize = self.data.iter().map(|(k, v)| k.len() + v.len()).sum();
        let binary: usize = self.binary.iter().map(|(k, v)| k.len() + v.len()).sum();
        text + binary
    }

    /// What a ConfigMap records about the config it holds, so it can be read back
    /// (revision, format, and nested paths when they differ from the keys).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        Record {
            revision: self.revision.clone(),
            source_time: self.source_time,
            paths: self.paths.clone(),
            root: None,
            format: Some(format_name(self.format).to_owned()),
        }
        .annotations(&CONFIG)
    }

    /// ConfigMap `binaryData`, absent when empty.
    pub fn binary_data(&self) -> Option<BTreeMap<String, ByteString>> {
        Some(
            self.binary
                .iter()
                .map(|(k, v)| (k.clone(), ByteString(v.clone())))
                .collect::<BTreeMap<_, _>>(),
        )
        .filter(|b| !b.is_empty())
    }

    /// Snapshot → ConfigMap content in the wanted format (default: env for one file,
    /// files for a directory).
    ///
    /// # Errors
    /// A directory asked for as env, a file that is not a valid env file, a path that
    /// cannot be a ConfigMap key, or more than a ConfigMap holds.
    pub fn from_snapshot(
        snapshot: &Snapshot,
        format: Option<ConfigFormat>,
    ) -> Result<Config, Problem> {
        let format = format.unwrap_or(if snapshot.single_file {
            ConfigFormat::Env
        } else {
            ConfigFormat::Files
        });
        let mut content = ConfigContent {
            format: Some(format),
            revision: Some(snapshot.revision.clone()),
            source_time: snapshot.made_at,
            ..ConfigContent::default()
        };
        match format {
            ConfigFormat::Env => content.data = env_data(snapshot)?,
            ConfigFormat::Files => files_data(snapshot, &mut content)?,
        }
        let config = Config::new(content);
        if config.content_bytes() > crate::apiserver::CONFIG_MAP_CONTENT_BYTES {
            return Err(Problem::new(
                Reason::TooLarge,
                format!(
                    "the config is {} bytes; a ConfigMap holds at most about 1 MiB",
                    config.content_bytes()
                ),
            ));
        }
        Ok(config)
    }

    /// The config an observed ConfigMap holds, read back through its annotations.
    pub fn from_config_map(config_map: &Value) -> Config {
        let record = Record::read(config_map, &CONFIG);
        let binary = held_files::strings(config_map, "binaryData")
            .into_iter()
            .filter_map(|(key, text)| {
                let bytes = base64::engine::general_purpose::STANDARD.decode(text);
                Some((key, bytes.ok()?))
            })
            .collect();
        Config::new(ConfigContent {
            format: match record.format.as_deref() {
                Some("env") => Some(ConfigFormat::Env),
                Some("files") => Some(ConfigFormat::Files),
                _ => None,
            },
            data: held_files::strings(config_map, "data"),
            binary,
            paths: record.paths,
            revision: record.revision,
            source_time: record.source_time,
        })
    }
}

/// The KEY=VALUE pairs of a snapshot that names one env file.
fn env_data(snapshot: &Snapshot) -> Result<BTreeMap<String, String>, Problem> {
    let (name, content) = match (snapshot.single_file, snapshot.files.iter().next()) {
        (true, Some(file)) => file,
        _ => {
            return Err(Problem::new(
                Reason::EnvNeedsOneFile,
                "format env needs the source to name a single KEY=VALUE file, not a directory"
                    .to_owned(),
            ));
        }
    };
    let Content::Text(text) = content else {
        return Err(Problem::new(
            Reason::InvalidEnvFile,
            format!("{name} is not text"),
        ));
    };
    envfile::parse(text).map_err(|e| Problem::new(Reason::InvalidEnvFile, format!("{name} {e}")))
}

/// Every file of a snapshot under a ConfigMap key (`a/b.conf` → `a__b.conf`).
fn files_data(snapshot: &Snapshot, content: &mut ConfigContent) -> Result<(), Problem> {
    let keys = file_keys::config_map_keys(snapshot.files.keys().map(String::as_str))
        .map_err(|error| Problem::new(Reason::UnsupportedFileName, error.to_string()))?;
    for (key, path) in keys {
        let Some(file) = snapshot.files.get(path) else {
            continue;
        };
        if key != path {
            content.paths.insert(key.clone(), path.to_owned());
        }
        match file {
            Content::Text(text) => {
                content.data.insert(key, text.clone());
            }
            Content::Binary(bytes) => {
                content.binary.insert(key, bytes.clone());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::fake::snapshot;

    #[test]
    fn the_hash_follows_content_not_revision_or_time() {
        let one = Config::from_snapshot(
            &snapshot("main@sha1:a", &[("a.env", "A=1\n")], true, Some(1)),
            None,
        );
        let same = Config::from_snapshot(
            &snapshot("main@sha1:b", &[("a.env", "A=1\n")], true, Some(2)),
            None,
        );
        let other = Config::from_snapshot(
            &snapshot("main@sha1:c", &[("a.env", "A=2\n")], true, Some(3)),
            None,
        );
        let (Ok(one), Ok(same), Ok(other)) = (one, same, other) else {
            panic!("valid env files");
        };
        assert_eq!(one.hash(), same.hash());
        assert_ne!(one.hash(), other.hash());
    }

    #[test]
    fn a_config_map_reads_back_as_the_config_it_was_made_from() {
        let made = Config::from_snapshot(
            &snapshot(
                "main@sha1:a",
                &[("app.yaml", "a: 1\n"), ("nested/db.ini", "[db]\n")],
                false,
                Some(1_700_000_000),
            ),
            None,
        );
        let Ok(made) = made else {
            panic!("valid files");
        };
        let config_map = serde_json::json!({
            "metadata": {"annotations": made.annotations()},
            "data": made.data,
        });
        assert_eq!(Config::from_config_map(&config_map), made);
    }

    #[test]
    fn unusable_snapshots_say_why() {
        let directory_as_env = Config::from_snapshot(
            &snapshot("r", &[("a", "A=1")], false, None),
            Some(ConfigFormat::Env),
        );
        assert_eq!(
            directory_as_env.err().map(|e| e.reason.as_str()),
            Some("EnvNeedsOneFile")
        );
        let bad_key =
            Config::from_snapshot(&snapshot("r", &[("a b.conf", "x")], false, None), None);
        assert_eq!(
            bad_key.err().map(|e| e.reason.as_str()),
            Some("UnsupportedFileName")
        );
    }
}
