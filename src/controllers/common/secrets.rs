//! Source credentials from a Secret that the customize hook asked Metacontroller for,
//! in Flux's key names so teams can reuse their Secrets: `username`/`password` or
//! `token` for https, `identity` (+ `password` when encrypted) and `known_hosts` for ssh.

use base64::Engine;
use serde_json::Value;

use crate::protocol::ObjectMap;
use crate::source::Credentials;
use crate::source::binding::{ALLOWED_URLS, Binding};
use crate::source::known_hosts::KnownHosts;
use crate::source::signature::{TrustedKeys, VerifyMode};
use crate::source::tls::TlsMaterial;

use super::problem::Problem;
use crate::controllers::common::reason::Reason;

/// The CA (`ca.crt`) and client certificate (`tls.crt`, `tls.key`: a Secret of type
/// `kubernetes.io/tls` has them) in the related Secret `name` in `namespace`.
///
/// # Errors
/// The Secret is missing, or a part of it does not parse.
pub fn tls_material(
    related: &ObjectMap,
    namespace: &str,
    name: &str,
) -> Result<TlsMaterial, Problem> {
    let object = find(related, namespace, name)?;
    let material = TlsMaterial {
        secret: name.to_owned(),
        binding: binding(name, object),
        ca_pem: field(object, "ca.crt"),
        cert_pem: field(object, "tls.crt"),
        key_pem: field(object, "tls.key"),
    };
    material.validate().map_err(|problem| {
        Problem::new(Reason::SecretInvalid, format!("Secret {name:?}: {problem}"))
    })?;
    Ok(material)
}

fn find<'a>(related: &'a ObjectMap, namespace: &str, name: &str) -> Result<&'a Value, Problem> {
    related
        .find("Secret", "v1", Some(namespace), name)
        .ok_or_else(|| {
            Problem::new(
                Reason::SecretNotFound,
                format!("the Secret {name:?} does not exist in namespace {namespace:?}"),
            )
        })
}

/// Where the Secret's owner lets its contents go; checked against the URL by the source
/// engine, before any request is made.
fn binding(name: &str, object: &Value) -> Binding {
    Binding::read(
        name,
        object.get("type").and_then(Value::as_str),
        object
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(ALLOWED_URLS))
            .and_then(Value::as_str),
    )
}

/// The credentials in the related Secret `name` in `namespace` (the parent's). Metacontroller may send related objects from other namespaces; a Secret of
/// the same name there is never used.
pub fn credentials(
    related: &ObjectMap,
    namespace: &str,
    name: &str,
) -> Result<Credentials, Problem> {
    let object = find(related, namespace, name).map_err(|problem| Problem {
        message: problem
            .message
            .replace("the Secret", "the credentials Secret"),
        ..problem
    })?;
    let credentials = Credentials {
        secret: name.to_owned(),
        binding: binding(name, object),
        username: field(object, "username"),
        password: field(object, "password"),
        token: field(object, "token"),
        identity: field(object, "identity"),
        known_hosts: field(object, "known_hosts"),
    };
    if let Some(known_hosts) = &credentials.known_hosts
        && let Err(problem) = KnownHosts::parse(known_hosts)
    {
        return Err(Problem::new(
            Reason::SecretInvalid,
            format!("Secret {name:?}: {problem}"),
        ));
    }
    if credentials.userpass().is_none() && credentials.identity.is_none() {
        return Err(Problem::new(
            Reason::SecretInvalid,
            format!(
                "Secret {name:?} needs `username` and `password`, or `token` (https), or `identity` and `known_hosts` (ssh)"
            ),
        ));
    }
    Ok(credentials)
}

/// The keys a `verify` block trusts, from the related Secret `name` in `namespace`:
/// armored OpenPGP public keys under any key name ending in `.asc`, SSH keys in git's
/// `allowed_signers` format under `allowed_signers` (or a name ending in it).
///
/// # Errors
/// The Secret is missing, holds no keys, or a key does not parse (named).
pub fn trusted_keys(
    related: &ObjectMap,
    namespace: &str,
    name: &str,
    mode: VerifyMode,
) -> Result<TrustedKeys, Problem> {
    let object = find(related, namespace, name).map_err(|problem| Problem {
        message: problem.message.replace("the Secret", "the verify Secret"),
        ..problem
    })?;
    let mut keys = TrustedKeys {
        secret: name.to_owned(),
        mode,
        openpgp: Vec::new(),
        allowed_signers: Vec::new(),
    };
    let names = ["data", "stringData"]
        .iter()
        .filter_map(|part| object.get(part).and_then(Value::as_object))
        .flat_map(|map| map.keys().cloned())
        .collect::<std::collections::BTreeSet<String>>();
    for key in names {
        let Some(text) = field(object, &key) else {
            continue;
        };
        if key.ends_with(".asc") {
            keys.openpgp.push((key, text));
        } else if key.ends_with("allowed_signers") {
            keys.allowed_signers.push((key, text));
        }
    }
    keys.check().map_err(|problem| {
        Problem::new(Reason::SecretInvalid, format!("Secret {name:?}: {problem}"))
    })?;
    Ok(keys)
}

/// A Secret value; `stringData` only appears in objects that never reached the API
/// server (render input), `data` is base64. Trailing newlines from `echo` are dropped.
fn field(secret: &Value, key: &str) -> Option<String> {
    if let Some(text) = secret
        .pointer(&format!("/stringData/{key}"))
        .and_then(Value::as_str)
    {
        return Some(text.to_owned());
    }
    let encoded = secret
        .pointer(&format!("/data/{key}"))
        .and_then(Value::as_str)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes)
        .ok()
        .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
}
