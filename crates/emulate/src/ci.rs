//! Reports for CI systems: JUnit XML (one test case per parent, failed by its findings)
//! and SARIF 2.1.0 (one result per finding, located at the file and line the object was
//! written on), so a pipeline can annotate the offending object and field.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::cluster::{Emulator, describe};
use crate::findings::{Finding, Rule};
use crate::{Key, key_of};

/// One emulation of a run: the story it played (if named) and the emulator after it.
pub struct Run<'a> {
    /// The story's name (or its file), or `emulate` for a run without a story.
    pub name: String,
    /// The emulator after the run.
    pub emulator: &'a Emulator,
}

/// A test case: a parent (by controller) or a subject with no parent, and its findings.
struct Case<'a> {
    classname: String,
    name: String,
    origin: Option<crate::findings::Origin>,
    findings: Vec<&'a Finding>,
}

/// The test cases of one run: every parent of every registration (passing unless a
/// finding names it), then a case per other subject that has findings.
fn cases<'a>(emulator: &'a Emulator) -> Vec<Case<'a>> {
    let mut cases: BTreeMap<(String, Key), Case<'a>> = BTreeMap::new();
    for object in emulator.objects.values() {
        for registration in &emulator.registrations {
            if emulator.selects(registration, object) {
                let key = key_of(object);
                cases.insert(
                    (registration.name.clone(), key.clone()),
                    Case {
                        classname: registration.name.clone(),
                        name: describe(&key),
                        origin: emulator.origins.get(&key).cloned(),
                        findings: Vec::new(),
                    },
                );
            }
        }
    }
    let mut others: BTreeMap<String, Case<'a>> = BTreeMap::new();
    for finding in &emulator.findings {
        let parent = finding.about.as_ref().and_then(|about| {
            let key = (
                about.api_version.clone(),
                about.kind.clone(),
                about.namespace.clone(),
                about.name.clone(),
            );
            let controller = about.controller.clone().or_else(|| {
                cases
                    .keys()
                    .find(|(_, k)| *k == key)
                    .map(|(controller, _)| controller.clone())
            })?;
            Some((controller, key))
        });
        match parent.and_then(|p| cases.get_mut(&p)) {
            Some(case) => case.findings.push(finding),
            None => {
                let name = if finding.subject.is_empty() {
                    "cluster".to_owned()
                } else {
                    finding.subject.clone()
                };
                others
                    .entry(name.clone())
                    .or_insert_with(|| Case {
                        classname: "emulate".to_owned(),
                        name,
                        origin: finding.about.as_ref().and_then(|a| a.origin.clone()),
                        findings: Vec::new(),
                    })
                    .findings
                    .push(finding);
            }
        }
    }
    cases.into_values().chain(others.into_values()).collect()
}

/// The runs as JUnit XML: a `testsuite` per run, a `testcase` per parent, a `failure` per
/// finding (its rule as the type, its message, and the field where one is known).
pub fn junit_report(runs: &[Run<'_>]) -> String {
    let suites: Vec<(&Run<'_>, Vec<Case<'_>>)> =
        runs.iter().map(|run| (run, cases(run.emulator))).collect();
    let tests: usize = suites.iter().map(|(_, cases)| cases.len()).sum();
    let failures: usize = suites
        .iter()
        .map(|(_, cases)| cases.iter().filter(|c| !c.findings.is_empty()).count())
        .sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"metahooks emulate\" tests=\"{tests}\" failures=\"{failures}\" errors=\"0\">"
    );
    for (run, cases) in &suites {
        let failed = cases.iter().filter(|c| !c.findings.is_empty()).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failed}\" errors=\"0\" skipped=\"0\">",
            xml(&run.name),
            cases.len()
        );
        for case in cases {
            let location = case
                .origin
                .as_ref()
                .map(|o| format!(" file=\"{}\" line=\"{}\"", xml(&o.file), o.line))
                .unwrap_or_default();
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"{}\"{location}",
                xml(&case.classname),
                xml(&case.name)
            );
            if case.findings.is_empty() {
                out.push_str("/>\n");
                continue;
            }
            out.push_str(">\n");
            for finding in &case.findings {
                let field = finding
                    .about
                    .as_ref()
                    .and_then(|a| a.field.as_deref())
                    .map(|f| format!("\nfield: {f}"))
                    .unwrap_or_default();
                let _ = writeln!(
                    out,
                    "      <failure type=\"{}\" message=\"{}\">{} (round {}): {}{}</failure>",
                    finding.rule,
                    xml(&finding.message),
                    xml(&finding.subject),
                    finding.round,
                    xml(&finding.message),
                    xml(&field)
                );
            }
            out.push_str("    </testcase>\n");
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// Text as XML 1.0 character data or an attribute value: markup escaped, and the
/// control characters XML 1.0 cannot carry at all replaced.
fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => {
                let _ = write!(out, "&#{};", u32::from(c));
            }
            c if c < ' ' || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The runs as one SARIF 2.1.0 log: the rules, then a result per finding with the file
/// and line its object was written on and the object (and field) as a logical location.
pub fn sarif_report(runs: &[Run<'_>], version: &str) -> Value {
    let rules: Vec<Value> = Rule::ALL
        .iter()
        .map(|rule| {
            json!({
                "id": rule.as_str(),
                "name": rule.as_str(),
                "shortDescription": {"text": rule.summary()},
                "defaultConfiguration": {"level": "error"},
            })
        })
        .collect();
    let mut results = Vec::new();
    for run in runs {
        for finding in &run.emulator.findings {
            results.push(sarif_result(finding, &run.name));
        }
    }
    json!({
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "metahooks emulate",
                "version": version,
                "rules": rules,
            }},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    })
}

fn sarif_result(finding: &Finding, story: &str) -> Value {
    let rule_index = Rule::ALL.iter().position(|r| *r == finding.rule);
    let mut result = json!({
        "ruleId": finding.rule.as_str(),
        "level": "error",
        "message": {"text": format!("{}: {}", finding.subject, finding.message)},
        "properties": {"round": finding.round, "story": story},
    });
    if let Some(index) = rule_index {
        result["ruleIndex"] = json!(index);
    }
    if let Some(about) = &finding.about {
        let mut object = format!("{}/{}", about.kind, about.name);
        if !about.namespace.is_empty() {
            object = format!("{}/{}/{}", about.kind, about.namespace, about.name);
        }
        let mut logical = vec![json!({"fullyQualifiedName": object, "kind": "object"})];
        if let Some(field) = &about.field {
            logical.push(json!({"fullyQualifiedName": format!("{object}#{field}"), "name": field, "kind": "member"}));
            result["properties"]["field"] = json!(field);
        }
        let mut location = json!({"logicalLocations": logical});
        if let Some(origin) = &about.origin {
            location["physicalLocation"] = json!({
                "artifactLocation": {"uri": uri_reference(&origin.file)},
                "region": {"startLine": origin.line},
            });
        }
        result["locations"] = json!([location]);
    }
    result
}

/// A file path as a URI reference SARIF readers resolve against the checkout: relative
/// paths stay relative (with `/` separators), and characters outside a URI's escaped.
fn uri_reference(path: &str) -> String {
    let path = path.replace('\\', "/");
    let path = path.strip_prefix("./").unwrap_or(&path);
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/!$&'()*+,;=:@".contains(&byte) {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    if out.starts_with('/') {
        format!("file://{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_is_escaped_and_control_characters_replaced() {
        assert_eq!(
            xml("a<b & \"c\"\n\u{1}"),
            "a&lt;b &amp; &quot;c&quot;&#10;\u{fffd}"
        );
    }

    #[test]
    fn file_paths_become_uri_references() {
        assert_eq!(
            uri_reference("./hooks/my thing.yaml"),
            "hooks/my%20thing.yaml"
        );
        assert_eq!(uri_reference("/abs/x.yaml"), "file:///abs/x.yaml");
    }
}
