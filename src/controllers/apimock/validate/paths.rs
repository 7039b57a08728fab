//! Paths and operations: path template parameters are declared, operation ids are
//! unique, and no parameter is declared twice.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Checker, METHODS};

impl<'a> Checker<'a> {
    pub(super) fn paths(&mut self) -> Result<(), String> {
        let Some(paths) = self.root.get("paths").and_then(Value::as_object) else {
            return Ok(());
        };
        for (template, item) in paths {
            let template = template.as_str();
            let item = self.deref(item);
            let Some(item) = item.as_object() else {
                continue;
            };
            let shared = item.get("parameters");
            if let Some(shared) = shared {
                self.unique_parameters(shared, template, "path item")?;
            }
            let in_template = template_parameters(template);
            for method in METHODS {
                let Some(operation) = item.get(method) else {
                    continue;
                };
                self.operation(template, method, operation, shared, &in_template)?;
            }
        }
        Ok(())
    }

    fn operation(
        &mut self,
        template: &str,
        method: &str,
        operation: &'a Value,
        shared: Option<&'a Value>,
        in_template: &BTreeSet<&str>,
    ) -> Result<(), String> {
        if let Some(id) = operation.get("operationId").and_then(Value::as_str)
            && !self.operation_ids.insert(id)
        {
            return Err(format!(
                "operationId '{id}' of {method} {template} is used by another operation too"
            ));
        }
        let own = operation.get("parameters");
        if let Some(own) = own {
            self.unique_parameters(own, template, method)?;
        }
        let mut declared = BTreeSet::new();
        // A parameter kept in another file is not known here: it may declare any of them.
        let mut unknown = false;
        for list in [own, shared].into_iter().flatten() {
            for parameter in list.as_array().into_iter().flatten() {
                let parameter = self.deref(parameter);
                unknown |= parameter.get("in").is_none();
                if parameter.get("in").and_then(Value::as_str) == Some("path")
                    && let Some(name) = parameter.get("name").and_then(Value::as_str)
                {
                    declared.insert(name);
                }
            }
        }
        if !unknown && let Some(missing) = in_template.difference(&declared).next() {
            return Err(format!(
                "{method} {template}: path parameter '{missing}' appears in the path but is not declared with `in: path`"
            ));
        }
        if let Some(extra) = declared.difference(in_template).next() {
            return Err(format!(
                "{method} {template}: path parameter '{extra}' is declared but does not appear in the path"
            ));
        }
        Ok(())
    }

    fn unique_parameters(
        &self,
        list: &'a Value,
        template: &str,
        owner: &str,
    ) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for parameter in list.as_array().into_iter().flatten() {
            let parameter = self.deref(parameter);
            // Parameters kept in another file (or malformed ones, which the meta-schema
            // reports) have no name and place to compare.
            let (Some(name), Some(location)) = (
                parameter.get("name").and_then(Value::as_str),
                parameter.get("in").and_then(Value::as_str),
            ) else {
                continue;
            };
            if !seen.insert((name, location)) {
                return Err(format!(
                    "{owner} of {template}: parameter '{name}' in {location} is declared twice"
                ));
            }
        }
        Ok(())
    }
}

/// The names between braces in a path template: `/pets/{id}` → `{"id"}`.
pub(super) fn template_parameters(template: &str) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        if close > 0 {
            names.insert(&after[..close]);
        }
        rest = &after[close + 1..];
    }
    names
}
