//! Paths and operations: path template parameters are declared, operation ids are
//! unique, and no parameter is declared twice.

use std::collections::BTreeSet;

use serde_json::Value;

use super::problem::Problem;
use super::{Checker, PathItem};

impl<'a> Checker<'a> {
    pub(super) fn paths(&mut self) -> Result<(), Problem> {
        let Some(paths) = self.root.get("paths").and_then(Value::as_object) else {
            return Ok(());
        };
        for (template, item) in paths {
            let template = template.as_str();
            let item = self.deref(item);
            if !item.is_object() {
                continue;
            }
            let item = PathItem::of(item);
            if let Some(shared) = item.shared {
                self.unique_parameters(shared, template, "path item")?;
            }
            let in_template = template_parameters(template);
            for (method, operation) in item.operations() {
                self.operation(template, method, operation, item.shared, &in_template)?;
            }
        }
        Ok(())
    }

    fn operation(
        &mut self,
        template: &str,
        method: &'static str,
        operation: &'a Value,
        shared: Option<&'a Value>,
        in_template: &BTreeSet<&str>,
    ) -> Result<(), Problem> {
        if let Some(id) = operation.get("operationId").and_then(Value::as_str)
            && !self.operation_ids.insert(id)
        {
            return Err(Problem::RepeatedOperationId {
                id: id.to_owned(),
                method,
                template: template.to_owned(),
            });
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
            return Err(Problem::UndeclaredPathParameter {
                method,
                template: template.to_owned(),
                name: (*missing).to_owned(),
            });
        }
        if let Some(extra) = declared.difference(in_template).next() {
            return Err(Problem::PathParameterNotInPath {
                method,
                template: template.to_owned(),
                name: (*extra).to_owned(),
            });
        }
        Ok(())
    }

    fn unique_parameters(
        &self,
        list: &'a Value,
        template: &str,
        owner: &'static str,
    ) -> Result<(), Problem> {
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
                return Err(Problem::RepeatedParameter {
                    owner,
                    template: template.to_owned(),
                    name: name.to_owned(),
                    location: location.to_owned(),
                });
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
