//! `metahooks render`: run a controller's sync on a parent from a file, with optional
//! observed objects, and print the exact hook response — "what will this CR create?"
//! without a cluster. File reading happens here; the answer comes from the same
//! registry the server uses.

use std::collections::BTreeMap;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::cli::config::{controller_settings, source_fetcher};
use crate::cli::{OutputFormat, RenderArgs};
use crate::controllers::Registry;
use crate::protocol::Hook;

/// The answer of the hook the flags name, for the parent in the given file.
///
/// # Errors
/// An unreadable file, a document that is not a parent of that controller, or a hook
/// that cannot answer.
pub fn render(args: &RenderArgs) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(render_async(args))
}

async fn render_async(args: &RenderArgs) -> anyhow::Result<String> {
    let fetcher = source_fetcher(&args.controllers)?;
    let registry = Registry::standard(controller_settings(&args.controllers))
        .with_sources(std::sync::Arc::new(fetcher.clone()));
    if !registry.contains(&args.controller) {
        let known: Vec<&str> = registry.names().collect();
        bail!(
            "unknown controller {:?}; known: {}",
            args.controller,
            known.join(", ")
        );
    }
    let (parent, mut related) = split_parent(
        &registry,
        &args.controller,
        read_many(&args.file)?,
        &args.file,
    )?;
    for path in &args.related {
        related.extend(read_many(path)?);
    }
    let (related, left_out) =
        super::related::selected(&registry, &args.controller, &parent, related)?;
    for note in left_out {
        eprintln!("{note}");
    }
    let observed = match &args.observed {
        Some(path) => read_many(path)?,
        None => Vec::new(),
    };
    let request = request_for(&args.controller, parent, &observed, &related);
    let body = serde_json::to_vec(&request)?;
    // The first call starts any fetch the parent needs; the answer printed is the one
    // given once those fetches are done.
    let _ = registry.call(
        &args.controller,
        Hook::Sync,
        &body,
        &registry.context(jiff::Timestamp::now()),
    );
    fetcher.idle().await;
    let outcome = registry.call(
        &args.controller,
        Hook::Sync,
        &body,
        &registry.context(jiff::Timestamp::now()),
    );
    let bytes = outcome.result.map_err(|e| anyhow::anyhow!("{e}"))?;
    let response: Value = serde_json::from_slice(&bytes)?;
    Ok(match args.output {
        OutputFormat::Json => format!("{}\n", serde_json::to_string_pretty(&response)?),
        OutputFormat::Yaml => crate::yaml::to_string(&response)?,
    })
}

/// Refuses a file that holds another kind of object, naming what it holds and which
/// controller takes it, instead of rendering a confusing "missing field" status.
fn check_parent_type(
    registry: &Registry,
    controller: &str,
    parent: &Value,
    file: &std::path::Path,
) -> anyhow::Result<()> {
    let text = |field: &str| parent.get(field).and_then(Value::as_str).unwrap_or("");
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let accepted = registry.parent_types(controller);
    if accepted.is_empty() || accepted.contains(&(api_version, kind)) {
        return Ok(());
    }
    let wanted: Vec<String> = accepted.iter().map(|(v, k)| format!("{v} {k}")).collect();
    let holds = if kind.is_empty() {
        "an object without apiVersion/kind".to_owned()
    } else {
        let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {api_version} {kind}")
    };
    let hint = registry
        .names()
        .find(|name| registry.parent_types(name).contains(&(api_version, kind)))
        .map(|name| format!(" (use `metahooks render {name}`)"))
        .unwrap_or_default();
    bail!(
        "{} holds {holds}; `render {controller}` takes {}{hint}",
        file.display(),
        wanted.join(" or ")
    )
}

/// The parent among a file's objects, and the others (related objects the parent reads,
/// such as the ConfigMap an APIMock's `configMapKeyRef` names).
///
/// # Errors
/// No object, or several, of the controller's parent type; a single object of another
/// type is named as such.
fn split_parent(
    registry: &Registry,
    controller: &str,
    objects: Vec<Value>,
    file: &std::path::Path,
) -> anyhow::Result<(Value, Vec<Value>)> {
    let is_parent = |object: &Value| check_parent_type(registry, controller, object, file).is_ok();
    if let [only] = objects.as_slice() {
        // One object of another type: say what it is and which controller takes it.
        check_parent_type(registry, controller, only, file)?;
    }
    match objects.iter().filter(|o| is_parent(o)).count() {
        0 if objects.is_empty() => bail!("{} holds no object", file.display()),
        0 => bail!(
            "{} holds {} objects and none is a parent of `render {controller}`",
            file.display(),
            objects.len()
        ),
        1 => {
            let (mut parent, others): (Vec<Value>, Vec<Value>) =
                objects.into_iter().partition(|o| is_parent(o));
            Ok((parent.remove(0), others))
        }
        many => bail!(
            "{} holds {many} parents; render takes one (the other objects of the file are passed as related objects)",
            file.display()
        ),
    }
}

/// Objects grouped as Metacontroller sends them: `Kind.apiVersion` → key → object, the key
/// being the name (children) or `namespace/name` (related; `namespace` defaults to the
/// parent's, as `kubectl apply -n` would place them).
fn grouped(
    objects: &[Value],
    namespaced_keys: Option<&str>,
) -> BTreeMap<String, BTreeMap<String, Value>> {
    let mut groups: BTreeMap<String, BTreeMap<String, Value>> = BTreeMap::new();
    for object in objects {
        let text = |pointer: &str| {
            object
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let name = text("/metadata/name");
        let mut object = object.clone();
        let key = match namespaced_keys {
            Some(default_namespace) => {
                let namespace = match text("/metadata/namespace") {
                    "" => default_namespace.to_owned(),
                    given => given.to_owned(),
                };
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("namespace".to_owned(), Value::String(namespace.clone()));
                }
                format!("{namespace}/{name}")
            }
            None => name.to_owned(),
        };
        groups
            .entry(format!("{}.{}", text("/kind"), text("/apiVersion")))
            .or_default()
            .insert(key, object);
    }
    groups
}

/// A v1 request as Metacontroller would send it: observed objects keyed by name under
/// `Kind.apiVersion`, related objects by `namespace/name`.
fn request_for(controller: &str, parent: Value, observed: &[Value], related: &[Value]) -> Value {
    let namespace = parent
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_owned();
    let related = grouped(related, Some(&namespace));
    let observed = grouped(observed, None);
    let controller_object =
        json!({"metadata": {"name": controller}, "spec": {"hooks": {"sync": {"version": "v1"}}}});
    let root = if controller == "configsync" {
        "object"
    } else {
        "parent"
    };
    let observed_key = if controller == "configsync" {
        "attachments"
    } else {
        "children"
    };
    json!({
        "controller": controller_object,
        root: parent,
        observed_key: observed,
        "related": related,
        "finalizing": false,
    })
}

fn read_text(path: &std::path::Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// YAML (or JSON) documents; a `kind: List` is unpacked into its items.
fn read_many(path: &std::path::Path) -> anyhow::Result<Vec<Value>> {
    let text = read_text(path)?;
    let documents: Vec<Value> = crate::yaml::manifests(&text)
        .with_context(|| format!("cannot read the objects in {}", path.display()))?;
    let mut objects = Vec::new();
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        match document.get("items").and_then(Value::as_array) {
            Some(items)
                if document
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| k.ends_with("List")) =>
            {
                objects.extend(items.iter().cloned());
            }
            _ => objects.push(document),
        }
    }
    Ok(objects)
}
