//! YAML from attackers: requests' and remotes' text is read through a bounded reader
//! that counts what aliases expand to. Trusted YAML (manifests, command-line inputs) goes
//! through the protocol crate's codec, re-exported here so there is one path to each.
//! JSON, which has no aliases, is read by serde_json into the same tree when a caller
//! wants the keys it watches noted ([`json_value_watching`]).

pub use crate::protocol::yaml::{
    Error, ManifestError, documents, from_str, manifests, manifests_with_lines, to_string,
};

/// How much a YAML text may expand to once its aliases are replayed. Aliases let a few
/// kilobytes name gigabytes (an anchor of anchors of anchors); the parser's own limit
/// counts alias jumps, not what they produce, so the tree is counted as it is built.
#[derive(Debug, Clone, Copy)]
pub struct Expansion {
    /// Nodes (scalars, sequences, mappings and keys) the tree may hold.
    pub max_nodes: usize,
    /// Bytes of text (scalars and keys) the tree may hold.
    pub max_text_bytes: usize,
}

impl Expansion {
    /// A bound relative to the input, within absolute caps: without aliases a text of n
    /// bytes holds fewer than n nodes and n bytes of scalars, so this leaves room for
    /// moderate honest reuse (`<<: *defaults`) and none for amplification.
    pub fn for_input(len: usize) -> Expansion {
        Expansion {
            max_nodes: len.saturating_add(10_000).min(2_000_000),
            max_text_bytes: len.saturating_mul(2).saturating_add(64 * 1024).min(8 << 20),
        }
    }
}

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum BoundedError {
    /// The text is not YAML.
    #[error("{0}")]
    Syntax(Error),
    /// The text is YAML but expands (through aliases) past the bound.
    #[error(
        "it expands to more than {limit} {what} once its aliases (*name) are replaced by what they refer to; a definition may not amplify itself"
    )]
    TooLarge {
        /// `nodes` or `bytes of text`.
        what: &'static str,
        /// The bound that was crossed.
        limit: usize,
    },
}

/// Reads one YAML document into a JSON value, counting what alias replay produces and
/// stopping as soon as `bound` is crossed (before the memory is spent).
///
/// # Errors
/// [`BoundedError::Syntax`] for text that is not YAML, [`BoundedError::TooLarge`] when
/// the document expands past `bound`.
pub fn value_bounded(text: &str, bound: Expansion) -> Result<serde_json::Value, BoundedError> {
    value_bounded_watching(text, bound, &[]).map(|(value, _)| value)
}

/// What a read saw under one watched key, anywhere in the document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sighting {
    /// How many mappings hold the key.
    pub times: usize,
    /// The values that were strings, in the order read.
    pub strings: Vec<String>,
}

/// [`value_bounded`], noting for each of `watch` where it is a key. The read visits every
/// node anyway, so a caller that looks for a few keys in the whole tree (a document's
/// `$ref`s) learns them here instead of walking the tree again.
///
/// # Errors
/// As [`value_bounded`].
pub fn value_bounded_watching(
    text: &str,
    bound: Expansion,
    watch: &[&str],
) -> Result<(serde_json::Value, Vec<Sighting>), BoundedError> {
    let budget = budget::Budget::new(bound, watch);
    let deserializer = serde_norway::Deserializer::from_str(text);
    let result = serde::de::DeserializeSeed::deserialize(budget::Node(&budget), deserializer);
    match (result, budget.exceeded()) {
        (_, Some((what, limit))) => Err(BoundedError::TooLarge { what, limit }),
        (Ok(value), None) => Ok((value, budget.into_sightings())),
        (Err(e), None) => Err(BoundedError::Syntax(e)),
    }
}

/// [`value_bounded_watching`] for JSON text: serde_json reads it (trailing characters
/// refused, its nesting limit kept) into the same tree, with no bound to count since JSON
/// has no aliases.
///
/// # Errors
/// The text is not one JSON value.
pub fn json_value_watching(
    text: &str,
    watch: &[&str],
) -> Result<(serde_json::Value, Vec<Sighting>), serde_json::Error> {
    let unbounded = Expansion {
        max_nodes: usize::MAX,
        max_text_bytes: usize::MAX,
    };
    let budget = budget::Budget::new(unbounded, watch);
    let mut reader = serde_json::Deserializer::from_str(text);
    let value = serde::de::DeserializeSeed::deserialize(budget::Node(&budget), &mut reader)?;
    reader.end()?;
    Ok((value, budget.into_sightings()))
}

mod budget {
    //! A serde visitor that builds a `serde_json::Value` the way serde_json's own does,
    //! charging every node and every byte of text to a budget.

    use std::cell::{Cell, RefCell};
    use std::fmt;

    use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Number, Value};

    use super::{Expansion, Sighting};

    pub struct Budget<'w> {
        nodes: Cell<usize>,
        bytes: Cell<usize>,
        bound: Expansion,
        exceeded: Cell<Option<(&'static str, usize)>>,
        watch: &'w [&'w str],
        sightings: RefCell<Vec<Sighting>>,
    }

    impl<'w> Budget<'w> {
        pub fn new(bound: Expansion, watch: &'w [&'w str]) -> Budget<'w> {
            Budget {
                nodes: Cell::new(0),
                bytes: Cell::new(0),
                bound,
                exceeded: Cell::new(None),
                watch,
                sightings: RefCell::new(vec![Sighting::default(); watch.len()]),
            }
        }

        pub fn into_sightings(self) -> Vec<Sighting> {
            self.sightings.into_inner()
        }

        fn note(&self, key: &str, value: &Value) {
            let Some(at) = self.watch.iter().position(|watched| *watched == key) else {
                return;
            };
            let sightings = &mut self.sightings.borrow_mut()[at];
            sightings.times += 1;
            if let Value::String(text) = value {
                sightings.strings.push(text.clone());
            }
        }

        pub fn exceeded(&self) -> Option<(&'static str, usize)> {
            self.exceeded.get()
        }

        fn charge<E: de::Error>(&self, text_bytes: usize) -> Result<(), E> {
            let nodes = self.nodes.get() + 1;
            let bytes = self.bytes.get().saturating_add(text_bytes);
            self.nodes.set(nodes);
            self.bytes.set(bytes);
            let crossed = if nodes > self.bound.max_nodes {
                Some(("nodes", self.bound.max_nodes))
            } else if bytes > self.bound.max_text_bytes {
                Some(("bytes of text", self.bound.max_text_bytes))
            } else {
                None
            };
            match crossed {
                Some(crossed) => {
                    self.exceeded.set(Some(crossed));
                    Err(E::custom("expansion limit"))
                }
                None => Ok(()),
            }
        }
    }

    #[derive(Clone, Copy)]
    pub struct Node<'b>(pub &'b Budget<'b>);

    impl<'de> DeserializeSeed<'de> for Node<'_> {
        type Value = Value;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    struct Key<'b>(&'b Budget<'b>);

    impl<'de> DeserializeSeed<'de> for Key<'_> {
        type Value = String;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
            let key = <String as serde::Deserialize>::deserialize(d)?;
            self.0.charge(key.len())?;
            Ok(key)
        }
    }

    impl<'de> Visitor<'de> for Node<'_> {
        type Value = Value;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("any YAML value")
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Value::Bool(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Value::Number(v.into()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Value::Number(v.into()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
            self.0.charge(v.len())?;
            Ok(Value::String(v.to_owned()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
            self.0.charge(v.len())?;
            Ok(Value::String(v))
        }
        fn visit_none<E: de::Error>(self) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Value::Null)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
            self.0.charge(0)?;
            Ok(Value::Null)
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            self.0.charge(0)?;
            let mut items = Vec::new();
            while let Some(item) = seq.next_element_seed(self)? {
                items.push(item);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            self.0.charge(0)?;
            let mut object = Map::new();
            while let Some(key) = map.next_key_seed(Key(self.0))? {
                let value = map.next_value_seed(self)?;
                self.0.note(&key, &value);
                object.insert(key, value);
            }
            Ok(Value::Object(object))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bomb(levels: usize, fan_out: usize) -> String {
        let mut text = format!("l0: &l0 [{}]\n", vec!["xxxxxxxx"; fan_out].join(", "));
        for level in 1..levels {
            let refs = vec![format!("*l{}", level - 1); fan_out].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        }
        text
    }

    #[test]
    fn reads_like_serde_json_values() {
        let text = "a: 1\nb: [true, null, 2.5, -3, x]\n200: {c: 'd'}\nbase: &b {k: v}\nuse: *b\n";
        let bounded = value_bounded(text, Expansion::for_input(text.len())).unwrap();
        let plain: serde_json::Value = from_str(text).unwrap();
        assert_eq!(bounded, plain);
    }

    /// Every mapping holding `key` in the built tree, by a walk of the tree itself.
    fn walked(value: &serde_json::Value, key: &str, seen: &mut Sighting) {
        match value {
            serde_json::Value::Object(object) => {
                if let Some(found) = object.get(key) {
                    seen.times += 1;
                    if let Some(text) = found.as_str() {
                        seen.strings.push(text.to_owned());
                    }
                }
                object.values().for_each(|child| walked(child, key, seen));
            }
            serde_json::Value::Array(items) => {
                items.iter().for_each(|child| walked(child, key, seen));
            }
            _ => {}
        }
    }

    #[test]
    fn json_reads_as_serde_json_reads_it() {
        let text = r##"{"a": [1, -2, 2.5, 1e300, 18446744073709551615, true, null],
                       "s": "\u00e9\n", "$ref": "#/a", "o": {"$ref": 3, "default": {}}}"##;
        let (value, seen) = json_value_watching(text, &["$ref", "default"]).unwrap();
        assert_eq!(
            value,
            serde_json::from_str::<serde_json::Value>(text).unwrap()
        );
        assert_eq!(seen[0].times, 2);
        assert_eq!(seen[0].strings, ["#/a"]);
        assert_eq!(seen[1].times, 1);
        for broken in ["{\"a\": 1} x", "[1,", &"[".repeat(200)] {
            let error = json_value_watching(broken, &[]).unwrap_err();
            let expected = serde_json::from_str::<serde_json::Value>(broken).unwrap_err();
            assert_eq!(error.to_string(), expected.to_string());
        }
    }

    #[test]
    fn watched_keys_are_seen_wherever_the_tree_holds_them() {
        // Nested, in sequences, behind an alias (replayed, so seen twice), and once with a
        // value that is not a string.
        let text = "a: {$ref: '#/x', b: [{$ref: '#/y'}, {default: 3}]}\n\
                    base: &b {$ref: '#/z', default: [1]}\nuse: *b\n\
                    odd: {$ref: {not: text}}\nx: 1\n";
        let (value, seen) =
            value_bounded_watching(text, Expansion::for_input(text.len()), &["$ref", "default"])
                .unwrap();
        assert_eq!(value, from_str::<serde_json::Value>(text).unwrap());
        for (key, seen) in ["$ref", "default"].iter().zip(&seen) {
            let mut expected = Sighting::default();
            walked(&value, key, &mut expected);
            let mut strings = seen.strings.clone();
            strings.sort();
            expected.strings.sort();
            assert_eq!((seen.times, strings), (expected.times, expected.strings));
        }
        assert_eq!(seen[0].times, 5);
        assert_eq!(seen[1].times, 3);
    }

    #[test]
    fn alias_amplification_is_stopped_by_its_size() {
        // 6 levels of 9 references each: a few hundred bytes that name 9^6 ≈ 531,441
        // scalars; the parser's own alias limit lets this through.
        let text = bomb(6, 9);
        let error = value_bounded(&text, Expansion::for_input(text.len())).unwrap_err();
        assert!(matches!(error, BoundedError::TooLarge { .. }), "{error}");
        // A long scalar named many times is counted by its bytes.
        let long = format!(
            "s: &s {}\nlist: [{}]\n",
            "y".repeat(10_000),
            vec!["*s"; 50].join(", ")
        );
        let error = value_bounded(&long, Expansion::for_input(long.len())).unwrap_err();
        assert!(
            matches!(
                error,
                BoundedError::TooLarge {
                    what: "bytes of text",
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn honest_reuse_fits() {
        let text = "defaults: &d {type: string, maxLength: 10}\na: *d\nb: *d\nc: *d\n";
        assert!(value_bounded(text, Expansion::for_input(text.len())).is_ok());
    }

    #[test]
    fn syntax_errors_stay_syntax_errors() {
        let error = value_bounded("a: [1, 2\n", Expansion::for_input(9)).unwrap_err();
        assert!(matches!(error, BoundedError::Syntax(_)), "{error}");
    }
}
