//! What checking a config against a schema costs, worked out before anything is checked.
//!
//! A schema is a graph. Some keywords apply subschemas to the value being checked
//! (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`, `dependentSchemas`, `$ref`);
//! others apply them to values inside it (`properties`, `items`, `contains`, …). The
//! `jsonschema` crate walks every path of that graph and has no budget of its own, so a
//! few hundred bytes of schema (a chain of `allOf`s that each name the next one twice)
//! ask for 2^n steps. So the graph is read here first:
//! - when the schema compiles: a subschema that comes back to itself without looking
//!   inside the value is refused (it would never end), and so is any draft but 2020-12;
//! - before a config is checked: the steps are counted, per value of the config, by
//!   counting the paths that reach each subschema (no subschema is evaluated). Past the
//!   budget, nothing is evaluated and the schema is refused for this config.
//!
//! The count is an upper bound: both branches of `if` count, every `patternProperties`
//! entry counts as if it matched, and a subschema that reads the whole value (`pattern`,
//! `format`, `enum`, `const`, `uniqueItems`) counts once more per 256 bytes or elements,
//! and a subschema that looks inside a value counts one step per field or element.

use std::collections::HashMap;
use std::rc::Rc;

use referencing::{Draft, Registry, Resolver, ResourceRef};
use serde_json::Value;

/// Where the schema sits in the registry when it has no `$id` of its own.
const ROOT_URI: &str = "urn:metahooks:config-schema";
/// The meta-schema a `$schema` keyword may name.
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";
/// Bytes (or elements) of a value that a whole-value keyword reads for one more step.
const BYTES_PER_STEP: usize = 256;
/// Deeper than this, a config is refused rather than walked (its parsers stop well before).
const MAX_DEPTH: usize = 512;

/// Why a schema is refused by its cost; each message is written for the CR's author.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the subschema at {at} applies itself again to the same value it is checking (a cycle of $ref, allOf, anyOf, oneOf, not or if that never looks inside the value): checking would never end"
    )]
    Cycle { at: String },
    #[error(
        "$schema at {at} names {named:?}; a configSchema is JSON Schema 2020-12 ({DRAFT_2020_12})"
    )]
    OtherDraft { at: String, named: String },
    #[error("$dynamicRef at {at} is not supported in a configSchema; use $ref")]
    DynamicRef { at: String },
    #[error("the $ref at {at} cannot be followed: {problem}")]
    Reference { at: String, problem: String },
    #[error(
        "checking {file} against it would take more than {budget} steps (at {pointer}, {visits} subschemas apply to that one value): a schema that names the same subschema more than once at each level (allOf or anyOf of the same $ref, nested) multiplies its work; name each once"
    )]
    TooCostly {
        file: String,
        budget: u64,
        pointer: String,
        visits: u64,
    },
}

/// The schema's graph, as indices: what each subschema applies, and to what.
#[derive(Debug)]
pub struct Plan {
    nodes: Vec<Node>,
}

/// One subschema. A boolean schema is a node with nothing to apply.
#[derive(Debug, Default)]
struct Node {
    /// Where it is, as a JSON pointer from the schema's root, for messages.
    at: String,
    /// Subschemas applied to the same value.
    same: Vec<usize>,
    /// `properties`, by name.
    properties: HashMap<String, usize>,
    /// `additionalProperties`: counted for every name `properties` does not list.
    additional: Option<usize>,
    /// `patternProperties` (as if every pattern matched) and `unevaluatedProperties`.
    every_property: Vec<usize>,
    /// `propertyNames`: applied to each name, a string.
    names: Vec<usize>,
    /// `prefixItems`, by index.
    prefix_items: Vec<usize>,
    /// `items`: the elements after the prefix.
    items: Option<usize>,
    /// `contains` and `unevaluatedItems`: every element.
    every_item: Vec<usize>,
    /// A keyword that reads the whole value, so costs more on a longer one.
    reads_whole: bool,
}

impl Node {
    fn looks_inside(&self) -> bool {
        !self.properties.is_empty()
            || self.additional.is_some()
            || !self.every_property.is_empty()
            || !self.names.is_empty()
            || !self.prefix_items.is_empty()
            || self.items.is_some()
            || !self.every_item.is_empty()
    }
}

/// Same-value applicators whose value is one schema.
const SAME_ONE: [&str; 4] = ["not", "if", "then", "else"];
/// Same-value applicators whose value is an array of schemas.
const SAME_MANY: [&str; 3] = ["allOf", "anyOf", "oneOf"];
/// Keywords whose work grows with the value they read.
const READS_WHOLE: [&str; 5] = ["pattern", "format", "enum", "const", "uniqueItems"];

impl Plan {
    /// Reads the graph of `schema` (already compiled by `jsonschema`, so its references
    /// resolve), refusing cycles on one value, other drafts and `$dynamicRef`.
    ///
    /// # Errors
    /// A [`Refusal`] naming where in the schema.
    pub fn of(schema: &Value) -> Result<Self, Refusal> {
        let unreadable = |problem: String| Refusal::Reference {
            at: "/".to_owned(),
            problem,
        };
        let registry = Registry::new()
            .draft(Draft::Draft202012)
            .retrieve_known_draft_meta_schemas(false)
            .add(ROOT_URI, ResourceRef::new(schema, Draft::Draft202012))
            .and_then(referencing::RegistryBuilder::prepare)
            .map_err(|e| unreadable(e.to_string()))?;
        let base = referencing::uri::from_str(ROOT_URI).map_err(|e| unreadable(e.to_string()))?;
        let mut walk = Walk {
            nodes: Vec::new(),
            seen: HashMap::new(),
            queue: Vec::new(),
        };
        walk.intern(schema, registry.resolver(base), String::new());
        while let Some((id, value, resolver)) = walk.queue.pop() {
            walk.read(id, value, &resolver)?;
        }
        let plan = Plan { nodes: walk.nodes };
        plan.refuse_cycles()?;
        Ok(plan)
    }

    /// The root subschema is the first one read.
    const ROOT: usize = 0;

    /// A cycle among same-value edges never ends; one that goes through `properties` or
    /// `items` ends with the value's depth, and is how recursive structures are written.
    fn refuse_cycles(&self) -> Result<(), Refusal> {
        #[derive(Clone, Copy, PartialEq)]
        enum Mark {
            New,
            Open,
            Done,
        }
        let mut marks = vec![Mark::New; self.nodes.len()];
        for start in 0..self.nodes.len() {
            if marks[start] != Mark::New {
                continue;
            }
            let mut stack = vec![(start, 0usize)];
            marks[start] = Mark::Open;
            while let Some((node, next)) = stack.last_mut() {
                let node = *node;
                if let Some(&child) = self.nodes[node].same.get(*next) {
                    *next += 1;
                    match marks[child] {
                        Mark::Open => {
                            return Err(Refusal::Cycle {
                                at: display(&self.nodes[child].at),
                            });
                        }
                        Mark::New => {
                            marks[child] = Mark::Open;
                            stack.push((child, 0));
                        }
                        Mark::Done => {}
                    }
                } else {
                    marks[node] = Mark::Done;
                    stack.pop();
                }
            }
        }
        Ok(())
    }

    /// Counts the steps of checking `config` (called `file` in messages), stopping at
    /// `budget`; returns the steps taken, which the caller subtracts for the next file.
    ///
    /// # Errors
    /// [`Refusal::TooCostly`] past the budget.
    pub fn steps(&self, config: &Value, file: &str, budget: u64) -> Result<u64, Refusal> {
        let mut count = Count {
            plan: self,
            expansions: HashMap::new(),
            steps: 0,
            budget,
            path: Vec::new(),
            file,
        };
        let start = count.expansion(Self::ROOT);
        let at_root: Vec<(usize, u64)> = start.to_vec();
        count.value(config, &at_root)?;
        Ok(count.steps)
    }
}

/// The graph as it is read: each subschema once, by address.
struct Walk<'r> {
    nodes: Vec<Node>,
    seen: HashMap<*const Value, usize>,
    queue: Vec<(usize, &'r Value, Resolver<'r>)>,
}

impl<'r> Walk<'r> {
    fn intern(&mut self, value: &'r Value, resolver: Resolver<'r>, at: String) -> usize {
        let key: *const Value = value;
        if let Some(&id) = self.seen.get(&key) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            at,
            ..Node::default()
        });
        self.seen.insert(key, id);
        self.queue.push((id, value, resolver));
        id
    }

    fn read(
        &mut self,
        id: usize,
        value: &'r Value,
        resolver: &Resolver<'r>,
    ) -> Result<(), Refusal> {
        let Value::Object(keywords) = value else {
            return Ok(());
        };
        let at = self.nodes[id].at.clone();
        let here = |keyword: &str| format!("{at}/{}", escape(keyword));
        let resolver = resolver
            .in_subresource(ResourceRef::new(value, Draft::Draft202012))
            .map_err(|e| Refusal::Reference {
                at: display(&here("$id")),
                problem: e.to_string(),
            })?;
        if let Some(named) = keywords.get("$schema") {
            let named = named.as_str().unwrap_or_default();
            if named.trim_end_matches('#') != DRAFT_2020_12 {
                return Err(Refusal::OtherDraft {
                    at: display(&here("$schema")),
                    named: named.to_owned(),
                });
            }
        }
        if keywords.contains_key("$dynamicRef") {
            return Err(Refusal::DynamicRef {
                at: display(&here("$dynamicRef")),
            });
        }
        let mut node = Node {
            reads_whole: READS_WHOLE.iter().any(|k| keywords.contains_key(*k)),
            ..Node::default()
        };
        if let Some(Value::String(reference)) = keywords.get("$ref") {
            let resolved = resolver.lookup(reference).map_err(|e| Refusal::Reference {
                at: display(&here("$ref")),
                problem: e.to_string(),
            })?;
            let (target, target_resolver, _) = resolved.into_inner();
            let target_at = match reference.strip_prefix('#') {
                Some(pointer) if pointer.is_empty() || pointer.starts_with('/') => {
                    pointer.to_owned()
                }
                _ => here("$ref"),
            };
            node.same
                .push(self.intern(target, target_resolver, target_at));
        }
        for keyword in SAME_ONE {
            if let Some(sub) = keywords.get(keyword) {
                node.same
                    .push(self.intern(sub, resolver.clone(), here(keyword)));
            }
        }
        for keyword in SAME_MANY {
            for (i, sub) in array(keywords.get(keyword)) {
                let at = format!("{}/{i}", here(keyword));
                node.same.push(self.intern(sub, resolver.clone(), at));
            }
        }
        for (name, sub) in object(keywords.get("dependentSchemas")) {
            let at = format!("{}/{}", here("dependentSchemas"), escape(name));
            node.same.push(self.intern(sub, resolver.clone(), at));
        }
        for (name, sub) in object(keywords.get("properties")) {
            let at = format!("{}/{}", here("properties"), escape(name));
            let child = self.intern(sub, resolver.clone(), at);
            node.properties.insert(name.clone(), child);
        }
        for (name, sub) in object(keywords.get("patternProperties")) {
            let at = format!("{}/{}", here("patternProperties"), escape(name));
            node.every_property
                .push(self.intern(sub, resolver.clone(), at));
        }
        let one = |walk: &mut Self, keyword: &str| {
            keywords
                .get(keyword)
                .map(|sub| walk.intern(sub, resolver.clone(), here(keyword)))
        };
        node.additional = one(self, "additionalProperties");
        node.every_property
            .extend(one(self, "unevaluatedProperties"));
        node.names.extend(one(self, "propertyNames"));
        for (i, sub) in array(keywords.get("prefixItems")) {
            let at = format!("{}/{i}", here("prefixItems"));
            node.prefix_items
                .push(self.intern(sub, resolver.clone(), at));
        }
        node.items = one(self, "items");
        node.every_item.extend(one(self, "contains"));
        node.every_item.extend(one(self, "unevaluatedItems"));
        node.at = at;
        self.nodes[id] = node;
        Ok(())
    }
}

fn array(value: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn object(value: Option<&Value>) -> impl Iterator<Item = (&String, &Value)> {
    value.and_then(Value::as_object).into_iter().flatten()
}

/// A JSON pointer segment (RFC 6901).
fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The root's pointer is empty; messages say `/`.
fn display(pointer: &str) -> String {
    if pointer.is_empty() {
        "/".to_owned()
    } else {
        pointer.to_owned()
    }
}

/// How many times subschemas apply to one value.
fn visits_of(applied: &[(usize, u64)]) -> u64 {
    applied
        .iter()
        .map(|(_, paths)| *paths)
        .fold(0, u64::saturating_add)
}

/// The count over one config.
struct Count<'p> {
    plan: &'p Plan,
    /// For a subschema: every subschema it reaches on the same value, with the number of
    /// paths that reach it (saturating).
    expansions: HashMap<usize, Rc<[(usize, u64)]>>,
    steps: u64,
    budget: u64,
    /// Where in the config the count is, for the message.
    path: Vec<String>,
    file: &'p str,
}

impl Count<'_> {
    /// What applying `seed` to a value visits on that same value. The same-value edges
    /// have no cycle, so a reverse post-order is a topological order.
    fn expansion(&mut self, seed: usize) -> Rc<[(usize, u64)]> {
        if let Some(known) = self.expansions.get(&seed) {
            return Rc::clone(known);
        }
        let nodes = &self.plan.nodes;
        let mut order = Vec::new();
        let mut seen = std::collections::HashSet::from([seed]);
        let mut stack = vec![(seed, 0usize)];
        while let Some((node, next)) = stack.last_mut() {
            let node = *node;
            if let Some(&child) = nodes[node].same.get(*next) {
                *next += 1;
                if seen.insert(child) {
                    stack.push((child, 0));
                }
            } else {
                order.push(node);
                stack.pop();
            }
        }
        let mut paths: HashMap<usize, u64> = HashMap::from([(seed, 1)]);
        for &node in order.iter().rev() {
            let here = paths.get(&node).copied().unwrap_or(0);
            for &child in &nodes[node].same {
                let entry = paths.entry(child).or_insert(0);
                *entry = entry.saturating_add(here);
            }
        }
        let expansion: Rc<[(usize, u64)]> = order
            .iter()
            .rev()
            .map(|node| (*node, paths.get(node).copied().unwrap_or(0)))
            .collect();
        self.expansions.insert(seed, Rc::clone(&expansion));
        expansion
    }

    /// Counts the steps at `value`, where `applied` (subschema, paths) apply, then in
    /// what it holds.
    fn value(&mut self, value: &Value, applied: &[(usize, u64)]) -> Result<(), Refusal> {
        if applied.is_empty() {
            return Ok(());
        }
        let length = match value {
            Value::String(text) => text.len(),
            Value::Array(items) => items.len(),
            Value::Object(fields) => fields.len(),
            _ => 0,
        };
        self.charge(applied, length)?;
        if self.path.len() >= MAX_DEPTH {
            // Not counted, so not evaluated either: deeper than any parser here lets through.
            self.steps = u64::MAX;
            return self.within_budget(visits_of(applied));
        }
        let plan = self.plan;
        let inside: Vec<(&Node, u64)> = applied
            .iter()
            .map(|&(node, paths)| (&plan.nodes[node], paths))
            .filter(|(node, _)| node.looks_inside())
            .collect();
        if inside.is_empty() {
            return Ok(());
        }
        // Each subschema that looks inside goes over every field or element once, even
        // where none of its keywords applies: counted, so that neither the check nor
        // this count can take longer than the budget.
        let passes = inside
            .iter()
            .map(|(_, paths)| *paths)
            .fold(0, u64::saturating_add);
        self.steps = self
            .steps
            .saturating_add(passes.saturating_mul(length as u64));
        self.within_budget(visits_of(applied))?;
        match value {
            Value::Object(fields) => {
                for (name, field) in fields {
                    let mut seeds = Vec::new();
                    for &(node, paths) in &inside {
                        for &names in &node.names {
                            seeds.push((names, paths, true));
                        }
                        let listed = node.properties.get(name);
                        if let Some(&sub) = listed.or(node.additional.as_ref()) {
                            seeds.push((sub, paths, false));
                        }
                        seeds.extend(node.every_property.iter().map(|&sub| (sub, paths, false)));
                    }
                    self.path.push(escape(name));
                    self.child(field, Some(name.len()), &seeds)?;
                    self.path.pop();
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let mut seeds = Vec::new();
                    for &(node, paths) in &inside {
                        let positional = match node.prefix_items.get(i) {
                            Some(&sub) => Some(sub),
                            None => node.items,
                        };
                        seeds.extend(positional.map(|sub| (sub, paths, false)));
                        seeds.extend(node.every_item.iter().map(|&sub| (sub, paths, false)));
                    }
                    self.path.push(i.to_string());
                    self.child(item, None, &seeds)?;
                    self.path.pop();
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies `seeds` (subschema, paths, applied to the name rather than the value) to
    /// one field or element.
    fn child(
        &mut self,
        value: &Value,
        name_length: Option<usize>,
        seeds: &[(usize, u64, bool)],
    ) -> Result<(), Refusal> {
        let mut applied: HashMap<usize, u64> = HashMap::new();
        let mut on_name: HashMap<usize, u64> = HashMap::new();
        for &(seed, paths, to_name) in seeds {
            let target = if to_name { &mut on_name } else { &mut applied };
            for &(node, reached) in self.expansion(seed).iter() {
                let entry = target.entry(node).or_insert(0);
                *entry = entry.saturating_add(paths.saturating_mul(reached));
            }
        }
        if let Some(length) = name_length {
            let on_name: Vec<(usize, u64)> = on_name.into_iter().collect();
            self.charge(&on_name, length)?;
        }
        let applied: Vec<(usize, u64)> = applied.into_iter().collect();
        self.value(value, &applied)
    }

    /// Adds the steps of `applied` on one value of `length`.
    fn charge(&mut self, applied: &[(usize, u64)], length: usize) -> Result<(), Refusal> {
        let mut visits = 0u64;
        for &(node, paths) in applied {
            let per_visit = if self.plan.nodes[node].reads_whole {
                1 + (length / BYTES_PER_STEP) as u64
            } else {
                1
            };
            visits = visits.saturating_add(paths);
            self.steps = self.steps.saturating_add(paths.saturating_mul(per_visit));
        }
        self.within_budget(visits)
    }

    /// Refuses once the steps counted so far pass the budget; `visits` (the subschemas
    /// applied to the value the count is at) goes into the message.
    fn within_budget(&self, visits: u64) -> Result<(), Refusal> {
        if self.steps <= self.budget {
            return Ok(());
        }
        let pointer = self
            .path
            .iter()
            .fold(String::new(), |mut pointer, segment| {
                pointer.push('/');
                pointer.push_str(segment);
                pointer
            });
        Err(Refusal::TooCostly {
            file: self.file.to_owned(),
            budget: self.budget,
            pointer: display(&pointer),
            visits,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `a0` is `allOf: [a1, a1]`, `a1` is `allOf: [a2, a2]`, …: 2^n paths in n lines.
    fn doubling_chain(n: usize) -> Value {
        let mut defs = serde_json::Map::new();
        for i in 0..n {
            let next = json!({"$ref": format!("#/$defs/a{}", i + 1)});
            defs.insert(format!("a{i}"), json!({"allOf": [next.clone(), next]}));
        }
        defs.insert(format!("a{n}"), json!({"type": "object"}));
        json!({"$defs": defs, "$ref": "#/$defs/a0"})
    }

    #[test]
    fn steps_count_every_path_to_every_subschema() {
        let plan = Plan::of(&doubling_chain(10)).unwrap();
        // root, then 1 + 2 + 4 + … + 1024 visits of a0…a10, and each `$ref` is a visit of its own.
        let steps = plan.steps(&json!({}), "c.json", u64::MAX).unwrap();
        assert_eq!(steps, 1 + (2u64.pow(11) - 1) + (2u64.pow(11) - 2));

        let plan = Plan::of(&json!({
            "properties": {"a": {"type": "string"}, "b": {"not": {"type": "string"}}},
            "additionalProperties": false,
        }))
        .unwrap();
        let config = json!({"a": "x", "b": 1, "c": 2, "d": 3});
        // root and its pass over 4 fields; a; b and its not; c and d each meet
        // additionalProperties.
        assert_eq!(
            plan.steps(&config, "c.json", u64::MAX).unwrap(),
            1 + 4 + 1 + 2 + 2
        );
    }

    #[test]
    fn a_doubling_chain_is_refused_before_it_is_evaluated() {
        let plan = Plan::of(&doubling_chain(64)).unwrap();
        let refused = plan.steps(&json!({"port": 80}), "app.json", 1_000_000);
        let Err(Refusal::TooCostly {
            file,
            pointer,
            budget,
            visits,
        }) = refused
        else {
            panic!("{refused:?}");
        };
        assert_eq!(
            (file.as_str(), pointer.as_str(), budget),
            ("app.json", "/", 1_000_000)
        );
        assert!(visits > 1_000_000, "{visits}");
    }

    #[test]
    fn a_recursive_structure_costs_what_the_config_holds_not_what_the_schema_could_reach() {
        // A binary tree: two recursive properties. Counting every property at every level
        // would double per level; only the names present in the config count.
        let schema = json!({
            "type": "object",
            "properties": {"left": {"$ref": "#"}, "right": {"$ref": "#"}, "value": {"type": "integer"}},
        });
        let mut tree = json!({"value": 0});
        for depth in 1..100 {
            tree = json!({"value": depth, "left": tree});
        }
        let plan = Plan::of(&schema).unwrap();
        let steps = plan.steps(&tree, "tree.json", u64::MAX).unwrap();
        // 100 objects meet the root schema, 100 `value`s their subschema, and 99 `left`s
        // the `{"$ref": "#"}` that leads to the root; the root goes over each object's
        // fields (two, the innermost's one).
        assert_eq!(steps, 100 + 100 + 99 + (99 * 2 + 1));
    }

    #[test]
    fn a_subschema_applied_to_its_own_value_forever_is_refused_where_it_is() {
        let schema = json!({
            "$defs": {"loop": {"anyOf": [{"$ref": "#/$defs/loop"}, {"type": "string"}]}},
            "properties": {"name": {"$ref": "#/$defs/loop"}},
        });
        let refused = Plan::of(&schema).unwrap_err();
        assert!(
            matches!(&refused, Refusal::Cycle { at } if at.starts_with("/$defs/loop")),
            "{refused}"
        );
        // Through `items`, the same reference ends with the config's depth.
        let nested = json!({"type": "array", "items": {"$ref": "#"}});
        assert!(Plan::of(&nested).is_ok());
    }

    #[test]
    fn other_drafts_and_dynamic_references_are_refused_by_name() {
        let draft7 = json!({"$schema": "http://json-schema.org/draft-07/schema#"});
        let refused = Plan::of(&draft7).unwrap_err();
        assert!(refused.to_string().contains("draft-07"), "{refused}");
        let dynamic = json!({"$dynamicAnchor": "node", "items": {"$dynamicRef": "#node"}});
        assert_eq!(
            Plan::of(&dynamic).unwrap_err(),
            Refusal::DynamicRef {
                at: "/items/$dynamicRef".to_owned()
            }
        );
        let current = json!({"$schema": "https://json-schema.org/draft/2020-12/schema"});
        assert!(Plan::of(&current).is_ok());
    }

    #[test]
    fn many_subschemas_looking_into_a_wide_object_are_counted_even_where_none_applies() {
        // 2^12 paths to a subschema with one property, over an object of 1000 other
        // fields: no field meets a subschema, yet each path goes over every field.
        let mut schema = doubling_chain(12);
        schema["$defs"]["a12"] = json!({"properties": {"only": {"type": "string"}}});
        let plan = Plan::of(&schema).unwrap();
        let wide: serde_json::Map<String, Value> =
            (0..1000).map(|i| (format!("f{i}"), json!(i))).collect();
        let refused = plan.steps(&Value::Object(wide), "wide.json", 1_000_000);
        assert!(
            matches!(refused, Err(Refusal::TooCostly { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_long_string_costs_more_where_a_keyword_reads_all_of_it() {
        let plan = Plan::of(&json!({"pattern": "^a+$"})).unwrap();
        let long = json!("a".repeat(BYTES_PER_STEP * 10));
        assert_eq!(plan.steps(&long, "c.json", u64::MAX).unwrap(), 11);
        let plan = Plan::of(&json!({"minLength": 1})).unwrap();
        assert_eq!(plan.steps(&long, "c.json", u64::MAX).unwrap(), 1);
    }

    #[test]
    fn references_follow_ids_as_the_validator_does() {
        let schema = json!({
            "$id": "https://example.com/app.json",
            "properties": {"port": {"$ref": "defs.json#/$defs/port"}},
            "$defs": {"bundled": {"$id": "defs.json", "$defs": {"port": {"type": "integer"}}}},
        });
        let plan = Plan::of(&schema).unwrap();
        // root, its pass over one field, `port` and the target of its `$ref`.
        let steps = plan.steps(&json!({"port": 80}), "c.json", u64::MAX);
        assert_eq!(steps.unwrap(), 4);
    }
}
