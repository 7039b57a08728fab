//! YAML in and out, through one crate (`serde_norway`, a maintained libyaml-based fork of
//! serde_yaml; `serde_yml` is unsound, see peers.md), so the choice can change in one place.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub type Error = serde_norway::Error;

pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_norway::from_str(text)
}

/// Every document of a multi-document stream.
pub fn documents<T: DeserializeOwned>(text: &str) -> Result<Vec<T>, Error> {
    serde_norway::Deserializer::from_str(text)
        .map(T::deserialize)
        .collect()
}

pub fn to_string<T: Serialize>(value: &T) -> Result<String, Error> {
    serde_norway::to_string(value)
}
