//! Helpers shared by every controller: conditions, child names and labels, hashes.

pub mod bounds;
pub mod conditions;
pub mod config;
pub mod config_schema;
pub mod envfile;
pub mod file_keys;
pub mod held_files;
pub mod keep;
pub mod names;
pub mod policy;
pub mod polling;
pub mod problem;
pub mod reading;
pub mod reason;
pub mod refresh;
pub mod restricted;
pub mod revisions;
pub mod rollout;
pub mod secrets;
pub mod source_spec;
pub mod source_sync;
pub mod spec;
pub mod taken;
