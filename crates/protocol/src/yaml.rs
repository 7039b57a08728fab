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

/// Writes `value` as YAML.
///
/// # Errors
/// The value cannot be represented in YAML.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_norway::to_string(value)
}
