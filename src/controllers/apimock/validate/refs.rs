//! `$ref`s: every local reference must point at something, and a chain of references
//! must end in a value (the mock gets one self-contained file).

use serde_json::Value;

use super::{Checker, Segment, render};

/// What an external `$ref` resolves to here: an object with no known fields.
static UNKNOWN: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::Object(serde_json::Map::new()));

impl<'a> Checker<'a> {
    /// Every local `$ref` must point at something: the mock gets one self-contained file.
    /// The path is a stack of borrowed keys, turned into text only for the error.
    pub(super) fn references(
        &self,
        value: &'a Value,
        path: &mut Vec<Segment<'a>>,
    ) -> Result<(), String> {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(target)) = object.get("$ref") {
                    self.reaches_a_value(target).map_err(|problem| {
                        format!("at {}: $ref '{target}' {problem}", render(path))
                    })?;
                }
                for (key, child) in object {
                    path.push(Segment::Key(key));
                    let result = self.references(child, path);
                    path.pop();
                    result?;
                }
                Ok(())
            }
            Value::Array(items) => {
                for (index, child) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    let result = self.references(child, path);
                    path.pop();
                    result?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Follows a `$ref` chain to the end: every link must resolve, and the chain must end
    /// in something that is not itself a `$ref` (`P0: {$ref: P1}`, `P1: {$ref: P0}` names
    /// nothing). A schema that refers to itself *inside* `properties` or `items` is fine:
    /// only the `$ref` at the top of each target is followed.
    fn reaches_a_value(&self, first: &'a str) -> Result<(), String> {
        let mut chain: Vec<&'a str> = Vec::new();
        let mut target = first;
        loop {
            if self.reaching.borrow().contains(target) {
                break;
            }
            if chain.contains(&target) {
                return Err(format!(
                    "is a cycle of references that never reaches a value ({} → {target})",
                    chain.join(" → ")
                ));
            }
            chain.push(target);
            let value = self.resolve(target).map_err(|problem| {
                if chain.len() == 1 {
                    problem
                } else {
                    format!("leads to '{target}', which {problem}")
                }
            })?;
            match value.get("$ref") {
                Some(Value::String(next)) if target.starts_with('#') => target = next,
                _ => break,
            }
        }
        self.reaching.borrow_mut().extend(chain);
        Ok(())
    }

    fn resolve(&self, target: &str) -> Result<&'a Value, String> {
        let Some(fragment) = target.strip_prefix('#') else {
            // Another file or URL: the mock server resolves it at start-up (Prism fetches
            // URLs; a bundle's files are checked by `bundle`), so it is not ours to judge
            // here. It stands for an object we know nothing about, never for this
            // document's root (whose fields would be read as a parameter's or a schema's).
            return Ok(&UNKNOWN);
        };
        let decoded = percent_decode(fragment);
        self.root
            .pointer(&decoded)
            .ok_or_else(|| "points at nothing in this document".to_owned())
    }

    /// Follows a `$ref` chain (bounded) to the object it names.
    pub(super) fn deref(&self, value: &'a Value) -> &'a Value {
        let mut current = value;
        for _ in 0..32 {
            match current.get("$ref").and_then(Value::as_str) {
                Some(target) => match self.resolve(target) {
                    Ok(next) => current = next,
                    Err(_) => return current,
                },
                None => return current,
            }
        }
        current
    }
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
