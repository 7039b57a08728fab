//! `$ref`s: every local reference must point at something, and a chain of references
//! must end in a value (the mock gets one self-contained file).

use std::borrow::Cow;
use std::collections::BTreeSet;

use serde_json::Value;

use super::problem::{Problem, ReferenceProblem};
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
    ) -> Result<(), Problem> {
        match value {
            Value::Object(object) => {
                if let Some(Value::String(target)) = object.get("$ref") {
                    self.reaches_a_value(target)
                        .map_err(|problem| Problem::Reference {
                            at: render(path),
                            target: target.clone(),
                            problem,
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
    pub(super) fn reaches_a_value(&self, first: &'a str) -> Result<(), ReferenceProblem> {
        let mut chain: Vec<&'a str> = Vec::new();
        // The chain's links as a set too: a chain thousands of links long must not cost a
        // scan of itself per link.
        let mut on_chain: BTreeSet<&'a str> = BTreeSet::new();
        let mut target = first;
        loop {
            if self.reaching.borrow().contains(target) {
                break;
            }
            if !on_chain.insert(target) {
                return Err(ReferenceProblem::Cycle {
                    chain: chain.iter().map(|&link| link.to_owned()).collect(),
                    back_to: target.to_owned(),
                });
            }
            chain.push(target);
            let value = self.resolve(target).map_err(|problem| {
                if chain.len() == 1 {
                    problem
                } else {
                    ReferenceProblem::LeadsToNothing {
                        target: target.to_owned(),
                    }
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

    fn resolve(&self, target: &str) -> Result<&'a Value, ReferenceProblem> {
        let Some(fragment) = target.strip_prefix('#') else {
            // Another file or URL: the mock server resolves it at start-up (Prism fetches
            // URLs; a bundle's files are checked by `bundle`), so it is not ours to judge
            // here. It stands for an object we know nothing about, never for this
            // document's root (whose fields would be read as a parameter's or a schema's).
            return Ok(&UNKNOWN);
        };
        let decoded = if fragment.contains('%') {
            Cow::Owned(percent_decode(fragment))
        } else {
            Cow::Borrowed(fragment)
        };
        pointer(self.root, &decoded).ok_or(ReferenceProblem::PointsAtNothing)
    }

    /// Follows a `$ref` chain to the object it names: the end, or the last link that
    /// resolves, or where a cycle closes (`references` refuses both before anything else
    /// asks). The end is remembered for every link on the way, so thousands of schemas
    /// naming one chain, or the links of one long chain, cost one walk of it in all.
    pub(super) fn deref(&self, value: &'a Value) -> &'a Value {
        let mut current = value;
        let mut links: Vec<&'a str> = Vec::new();
        let mut on_chain: BTreeSet<&'a str> = BTreeSet::new();
        let end = loop {
            let Some(target) = current.get("$ref").and_then(Value::as_str) else {
                break current;
            };
            if let Some(end) = self.chain_ends.borrow().get(target) {
                break *end;
            }
            if !on_chain.insert(target) {
                // Where a cycle closes depends on where it was entered: nothing to remember.
                return current;
            }
            match self.resolve(target) {
                Ok(next) => {
                    links.push(target);
                    current = next;
                }
                // The links before this one end here, whoever holds the broken one.
                Err(_) => break current,
            }
        };
        self.chain_ends
            .borrow_mut()
            .extend(links.into_iter().map(|link| (link, end)));
        end
    }
}

/// What `serde_json::Value::pointer` finds at `pointer`, without its allocation per
/// segment: a document is resolved thousands of times over while it is checked.
fn pointer<'v>(root: &'v Value, pointer: &str) -> Option<&'v Value> {
    if pointer.is_empty() {
        return Some(root);
    }
    let rest = pointer.strip_prefix('/')?;
    rest.split('/').try_fold(root, |at, token| {
        let unescaped = if token.contains('~') {
            Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(token)
        };
        match at {
            Value::Object(fields) => fields.get(unescaped.as_ref()),
            Value::Array(items) => array_index(&unescaped).and_then(|index| items.get(index)),
            _ => None,
        }
    })
}

/// An array index as JSON Pointer writes it: digits, without a sign or a leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() > 1) {
        return None;
    }
    token.parse().ok()
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::controllers::apimock::verdict::Generation;

    #[test]
    fn pointers_resolve_as_serde_json_resolves_them() {
        let document = json!({
            "a": {"b/c": 1, "d~e": 2, "": 3, "~1": 4, "0": 5},
            "list": [10, [20, 21], {"x": 30}],
            "%25": 6,
        });
        let pointers = [
            "",
            "/",
            "/a",
            "/a/",
            "/a/b~1c",
            "/a/d~0e",
            "/a/",
            "/a/~01",
            "/a/0",
            "/a/b/c",
            "/list/0",
            "/list/1/1",
            "/list/2/x",
            "/list/01",
            "/list/+1",
            "/list/-1",
            "/list/3",
            "/list/ 1",
            "/list/1e0",
            "a",
            "#/a",
            "/%25",
            "/nothing",
            "/a/~2",
            "/list/18446744073709551616",
        ];
        for text in pointers {
            assert_eq!(
                pointer(&document, text),
                document.pointer(text),
                "pointer {text:?}"
            );
        }
    }

    #[test]
    fn a_broken_reference_is_named_where_it_stands() {
        // Good references around the broken one, which is read before a good one that
        // sorts first; a hop that is walked only after it. The landmarks find it, the
        // walk names its place.
        let document = |broken: &str| {
            json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
                   "paths": {"/z": {"get": {"responses": {"200": {"description": "d",
                       "content": {"application/json": {"schema": {"$ref": broken}}}}}}},
                             "/a": {"get": {"responses": {"200": {"$ref": "#/components/responses/R"}}}}},
                   "components": {"responses": {"R": {"description": "r"}}},
                   "x-hops": {"Hop": {"$ref": "#/components/schemas/Gone"}}})
        };
        let at = "paths → /z → get → responses → 200 → content → application/json → schema";
        for (target, says) in [
            ("#/components/schemas/Missing", "points at nothing"),
            ("#/x-hops/Hop", "which points at nothing"),
        ] {
            let error = super::super::tests::validate(&document(target), Generation::OpenApi30)
                .unwrap_err()
                .message;
            assert!(error.contains(at) && error.contains(says), "{error}");
        }
    }

    #[test]
    fn long_reference_chains_are_followed_and_long_cycles_refused() {
        let chain = |links: usize, last: Value| {
            let mut schemas = serde_json::Map::new();
            for i in 0..links {
                schemas.insert(
                    format!("s{i}"),
                    json!({"$ref": format!("#/components/schemas/s{}", i + 1)}),
                );
            }
            schemas.insert(format!("s{links}"), last);
            json!({"openapi": "3.0.3", "info": {"title": "t", "version": "1"},
                   "paths": {"/a": {"get": {"responses": {"200": {"description": "d",
                       "content": {"application/json": {"schema": {"$ref": "#/components/schemas/s0"}}}}}}}},
                   "components": {"schemas": schemas}})
        };
        super::super::tests::validate(
            &chain(3000, json!({"type": "string"})),
            Generation::OpenApi30,
        )
        .unwrap();
        let cycle = chain(3000, json!({"$ref": "#/components/schemas/s0"}));
        let error = super::super::tests::validate(&cycle, Generation::OpenApi30)
            .unwrap_err()
            .message;
        assert!(error.contains("is a cycle of references"), "{error}");
    }

    #[test]
    fn deref_follows_a_chain_to_its_end_however_it_is_entered() {
        let mut schemas = serde_json::Map::new();
        for i in 0..40 {
            schemas.insert(
                format!("s{i}"),
                json!({"$ref": format!("#/components/schemas/s{}", i + 1)}),
            );
        }
        schemas.insert("s40".to_owned(), json!({"type": "string"}));
        schemas.insert("c0".to_owned(), json!({"$ref": "#/components/schemas/c1"}));
        schemas.insert("c1".to_owned(), json!({"$ref": "#/components/schemas/c0"}));
        schemas.insert(
            "gap".to_owned(),
            json!({"$ref": "#/components/schemas/none"}),
        );
        let document = json!({"components": {"schemas": schemas},
            "a": {"$ref": "#/components/schemas/s0"}, "b": {"$ref": "#/components/schemas/s0"}});
        let checker = Checker {
            root: &document,
            generation: Generation::OpenApi30,
            operation_ids: BTreeSet::new(),
            reaching: std::cell::RefCell::new(BTreeSet::new()),
            chain_ends: std::cell::RefCell::new(std::collections::HashMap::new()),
        };
        let schemas = &document["components"]["schemas"];
        let end = &schemas["s40"];
        assert!(std::ptr::eq(checker.deref(&schemas["s20"]), end));
        // Entered before the links already walked, and again through a remembered link.
        assert!(std::ptr::eq(checker.deref(&document["a"]), end));
        assert!(std::ptr::eq(checker.deref(&document["b"]), end));
        assert!(std::ptr::eq(checker.deref(&schemas["s39"]), end));
        assert!(std::ptr::eq(checker.deref(end), end));
        // A cycle or a link to nothing stops the walk where it closes or breaks.
        assert!(checker.deref(&schemas["c0"]).get("$ref").is_some());
        assert!(std::ptr::eq(
            checker.deref(&schemas["gap"]),
            &schemas["gap"]
        ));
    }
}
