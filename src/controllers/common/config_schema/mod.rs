//! A config checked against a JSON Schema before it rolls (`spec.configSchema`): each
//! JSON and YAML file of the config (files format), or the env file as an object of
//! strings (env format). A config that fails never rolls; what runs stays.
//!
//! The schema is the team's (inline, or a file in the same commit as the config), so it
//! is bounded where it is compiled: its size, patterns compiled by the `regex` crate
//! (linear time; a pattern that needs backtracking, such as a back-reference or
//! look-around, does not compile and the schema is refused), a cap on each compiled
//! pattern's size, and no remote `$ref` (nothing is fetched while a schema compiles).
//! Evaluation is bounded before it starts: [`cost`] refuses a schema that would apply
//! itself to one value forever, and counts the steps a config would take, refusing past
//! [`MAX_STEPS`] without evaluating; at most a few errors are kept.

mod cost;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::{Config, ConfigFormat};
use super::problem::Problem;
use super::reason::Reason;

/// The largest schema accepted, in bytes of JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Violations named in a message; the rest are counted.
pub const MAX_REPORTED: usize = 5;
/// The most errors looked at in one config: past it, the count is "at least".
const MAX_COUNTED: usize = 1000;
/// The most a compiled pattern may take (bytes, approximate), and its lazy DFA's cache.
const PATTERN_BYTES: usize = 256 * 1024;
/// The most steps (a subschema applied to a value) one config's check may take, over
/// all its files. Measured with `cargo bench --bench config_schema`.
pub const MAX_STEPS: u64 = 1_000_000;

/// Where a config's schema is (`spec.configSchema`): exactly one of the two.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSchemaSpec {
    /// The schema itself (JSON Schema 2020-12), as YAML or JSON in the CR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub inline: Option<Value>,
    /// A schema file in the same repository and commit as the config, from the
    /// repository's root (git sources only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
}

fn any_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "x-kubernetes-preserve-unknown-fields": true,
        "description": "The schema itself (JSON Schema 2020-12), as YAML or JSON in the CR."
    })
}

/// A compiled schema.
pub struct Checker {
    validator: jsonschema::Validator,
    plan: cost::Plan,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checker")
    }
}

/// Compiles `schema` (from `origin`, for messages).
///
/// # Errors
/// `SchemaInvalid`: the schema is too large, is not a schema, has a pattern the linear
/// engine cannot run or that is too large, a `$ref` outside itself, a subschema that
/// applies itself to the same value forever, or another draft than 2020-12.
pub fn compile(schema: &Value, origin: &str) -> Result<Checker, Problem> {
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(too_large(origin, size));
    }
    let patterns = jsonschema::PatternOptions::regex()
        .size_limit(PATTERN_BYTES)
        .dfa_size_limit(PATTERN_BYTES);
    let validator = jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_pattern_options(patterns)
        .build(schema)
        .map_err(|e| refused(origin, e))?;
    let plan = cost::Plan::of(schema).map_err(|e| refused(origin, e))?;
    Ok(Checker { validator, plan })
}

fn too_large(origin: &str, size: usize) -> Problem {
    Problem::new(
        Reason::SchemaInvalid,
        format!("the schema ({origin}) is {size} bytes; at most {MAX_SCHEMA_BYTES} are accepted"),
    )
}

fn refused(origin: &str, why: impl std::fmt::Display) -> Problem {
    Problem::new(
        Reason::SchemaInvalid,
        format!("the schema ({origin}) is refused: {why}"),
    )
}

/// Reads a schema file's text (JSON or YAML).
///
/// # Errors
/// `SchemaInvalid`: the file is too large or not JSON/YAML.
pub fn parse_file(text: &str, origin: &str) -> Result<Value, Problem> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(too_large(origin, text.len()));
    }
    crate::yaml::value_bounded(text, crate::yaml::Expansion::for_input(text.len())).map_err(|e| {
        Problem::new(
            Reason::SchemaInvalid,
            format!("the schema ({origin}) is not JSON or YAML: {e}"),
        )
    })
}

/// Checks every file of `config` the schema applies to.
///
/// # Errors
/// `SchemaViolation`: where the first violations are (file, JSON pointer, rule), and how
/// many more there are; or a JSON/YAML file that does not parse. `SchemaInvalid`:
/// checking this config would take more than [`MAX_STEPS`] (nothing is evaluated).
pub fn check(checker: &Checker, config: &Config, origin: &str) -> Result<(), Problem> {
    let instances = instances(config)?;
    let mut left = MAX_STEPS;
    for (file, instance) in &instances {
        let steps = checker
            .plan
            .steps(instance, file, left)
            .map_err(|e| refused(origin, e))?;
        left -= steps;
    }
    let mut shown = Vec::new();
    let mut total = 0usize;
    for (file, instance) in instances {
        for error in checker.validator.iter_errors(&instance) {
            if total == MAX_COUNTED {
                break;
            }
            total += 1;
            if shown.len() < MAX_REPORTED {
                let pointer = error.instance_path().to_string();
                let at = if pointer.is_empty() {
                    "/"
                } else {
                    pointer.as_str()
                };
                shown.push(format!(
                    "{file} at {at}: {error} (rule {})",
                    error.schema_path()
                ));
            }
        }
    }
    if total == 0 {
        return Ok(());
    }
    let more = total - shown.len();
    let mut message = format!("the config breaks its schema: {}", shown.join("; "));
    if more > 0 {
        let at_least = if total == MAX_COUNTED {
            "at least "
        } else {
            ""
        };
        message.push_str(&format!("; and {at_least}{more} more"));
    }
    Err(Problem::new(Reason::SchemaViolation, message))
}

/// What the schema is applied to, by the name messages use: the env file as one object
/// of strings; each `.json`, `.yaml` or `.yml` file of a files config.
fn instances(config: &Config) -> Result<Vec<(String, Value)>, Problem> {
    if config.format == Some(ConfigFormat::Env) {
        let object = config
            .data
            .iter()
            .map(|(key, value)| (key.clone(), Value::String(value.clone())))
            .collect();
        return Ok(vec![("the env file".to_owned(), Value::Object(object))]);
    }
    let mut found = Vec::new();
    for (key, text) in &config.data {
        let name = config.paths.get(key).unwrap_or(key);
        let lower = name.to_ascii_lowercase();
        let parsed = if lower.ends_with(".json") {
            serde_json::from_str(text).map_err(|e| e.to_string())
        } else if lower.ends_with(".yaml") || lower.ends_with(".yml") {
            crate::yaml::value_bounded(text, crate::yaml::Expansion::for_input(text.len()))
                .map_err(|e| e.to_string())
        } else {
            continue;
        };
        let value = parsed.map_err(|e| {
            Problem::new(
                Reason::SchemaViolation,
                format!("{name} cannot be checked against the schema: it does not parse: {e}"),
            )
        })?;
        found.push((name.clone(), value));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "required": ["PORT"],
               "properties": {"PORT": {"type": "string", "pattern": "^[0-9]+$"}}})
    }

    #[test]
    fn catastrophic_and_remote_schemas_are_refused_before_any_evaluation() {
        let backreference = json!({"type": "string", "pattern": "^(a+)\\1$"});
        let refused = compile(&backreference, "inline").unwrap_err();
        assert_eq!(refused.reason, Reason::SchemaInvalid);
        let huge = json!({"type": "string", "pattern": "^(a{1000}){1000}$"});
        assert_eq!(
            compile(&huge, "inline").unwrap_err().reason,
            Reason::SchemaInvalid
        );
        let remote = json!({"$ref": "https://schemas.example.com/app.json"});
        let refused = compile(&remote, "inline").unwrap_err();
        assert!(
            refused.message.contains("schemas.example.com"),
            "{}",
            refused.message
        );
        let big = json!({"description": "x".repeat(MAX_SCHEMA_BYTES)});
        assert!(
            compile(&big, "inline")
                .unwrap_err()
                .message
                .contains("at most")
        );
        assert!(compile(&schema(), "inline").is_ok());
    }

    #[test]
    fn a_nested_quantifier_runs_in_linear_time_instead_of_being_refused() {
        // `(a+)+$` is catastrophic for a backtracking engine; the regex crate runs it.
        let checker = compile(&json!({"type": "string", "pattern": "^(a+)+$"}), "inline").unwrap();
        let long = format!("{}!", "a".repeat(100_000));
        assert!(!checker.validator.is_valid(&json!(long)));
    }
}
