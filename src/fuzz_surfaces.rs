//! The surfaces that take untrusted bytes, as plain functions for the fuzz targets
//! (`fuzz/`) and for the test that replays their corpus (`tests/it/fuzz_replay.rs`). Each
//! must return for any input, never panic, and stay within the bounds the rest of the
//! code documents.

use std::sync::LazyLock;

use crate::controllers::{ControllerSettings, Registry};
use crate::protocol::Hook;

static REGISTRY: LazyLock<Registry> =
    LazyLock::new(|| Registry::standard(ControllerSettings::default()));

/// A hook request body for any controller and hook (the first byte picks which).
pub fn hook_request(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let controller = ["apimock", "monitoredservice", "configsync"][usize::from(selector % 3)];
    let hook = [Hook::Sync, Hook::Finalize, Hook::Customize][usize::from(selector / 3 % 3)];
    let ctx = REGISTRY.context(jiff::Timestamp::UNIX_EPOCH);
    let outcome = REGISTRY.call(controller, hook, body, &ctx);
    if let Ok(answer) = outcome.result {
        // A 200 is always JSON.
        assert!(serde_json::from_slice::<serde_json::Value>(&answer).is_ok());
    }
}

/// An APIMock definition (YAML or JSON text).
pub fn definition(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let analysis = crate::controllers::apimock::definition::analyze(&text);
    if let Err(invalid) = &analysis.outcome {
        assert!(!invalid.message.is_empty());
    }
}

/// A `KEY=VALUE` config file.
pub fn env_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::controllers::common::envfile::parse(&text);
}

/// Source URLs and repository paths through the safety policy.
pub fn url_policy(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let policy = crate::source::policy::Policy::default();
    if let Ok(url) = policy.check_url(&text) {
        assert_eq!(url.scheme(), "https");
    }
    if let Ok(path) = crate::source::policy::check_repo_path(&text) {
        assert!(!path.split('/').any(|part| part == ".."));
        assert!(!path.starts_with('/'));
    }
    let shown = crate::source::redact_url(&text);
    if let Ok(parsed) = url::Url::parse(&shown) {
        assert!(parsed.password().is_none());
    }
    if let Ok(address) = text.trim().parse::<std::net::IpAddr>() {
        let _ = crate::source::policy::refusal(address);
    }
}

/// What a Secret or a forge hands the source engine: `known_hosts` text, scp-like
/// addresses and push payloads. The first byte picks which.
pub fn source_inputs(data: &[u8]) {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    match selector % 3 {
        0 => {
            if let Ok(known) = crate::source::known_hosts::KnownHosts::parse(&text) {
                // Checking a key and rewriting the lines terminate for any host.
                let _ = known.check("git.example.com", 22, rest);
                let _ = known.check(&text, 2222, rest);
                let lines = known.lines_for("git.example.com", 22, "[127.0.0.1]:1");
                assert!(lines.len() <= text.len() * 2 + 64 * lines.lines().count());
            }
        }
        1 => {
            if let Some(scp) = crate::source::policy::ScpUrl::parse(&text) {
                assert!(!scp.host.is_empty() && !scp.path.is_empty());
            }
            if let Some(name) = crate::source::repository::normalise(&text) {
                assert!(name.contains('/') && name == name.to_ascii_lowercase());
            }
        }
        _ => {
            if let Ok(payload) = serde_json::from_slice::<serde_json::Value>(rest) {
                assert!(crate::receivers::repository::named_in(&payload).len() <= 16);
            }
        }
    }
}
