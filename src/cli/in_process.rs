//! `metahooks emulate` without a running server: each simulated replica is this
//! process's own controllers (a [`Registry`] with its own memos and source cache),
//! called through the emulator's [`InProcess`] seam.

use futures_util::future::BoxFuture;

use crate::controllers::Registry;
use crate::emulate::InProcess;
use crate::protocol::Hook;
use crate::source::fetcher::Fetcher;

/// One replica served in this process.
pub struct OwnReplica {
    /// The replica's controllers.
    pub registry: Registry,
    /// The replica's source engine, if its controllers fetch anything.
    pub fetcher: Option<Fetcher>,
}

impl InProcess for OwnReplica {
    fn post<'a>(
        &'a self,
        path: &'a str,
        body: Vec<u8>,
        now: jiff::Timestamp,
    ) -> BoxFuture<'a, Result<(u16, Vec<u8>), String>> {
        Box::pin(async move {
            let (controller, hook) = hook_of(path).map_err(|e| e.to_string())?;
            let ctx = self.registry.context(now);
            let outcome = self.registry.call(controller, hook, &body, &ctx);
            Ok(match outcome.result {
                Ok(bytes) => (200, bytes),
                Err(error) => (
                    error.status_code().as_u16(),
                    crate::http_error::body(&error),
                ),
            })
        })
    }

    fn settle(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(fetcher) = &self.fetcher {
                fetcher.idle().await;
            }
        })
    }
}

/// A hook path this server does not serve.
#[derive(Debug, thiserror::Error)]
enum BadHookPath {
    #[error("hook path {0:?} is not /<controller>/<hook>")]
    NoHook(String),
    #[error("hook path {0:?} does not end in sync, finalize or customize")]
    UnknownHook(String),
}

/// `/apimock/sync` → ("apimock", Sync).
fn hook_of(path: &str) -> Result<(&str, Hook), BadHookPath> {
    let trimmed = path.trim_matches('/');
    let (controller, hook) = trimmed
        .rsplit_once('/')
        .map(|(prefix, hook)| (prefix.rsplit('/').next().unwrap_or(prefix), hook))
        .ok_or_else(|| BadHookPath::NoHook(path.to_owned()))?;
    let hook = Hook::from_segment(hook).ok_or_else(|| BadHookPath::UnknownHook(path.to_owned()))?;
    Ok((controller, hook))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_name_a_controller_and_a_hook() {
        assert_eq!(hook_of("/apimock/sync").ok(), Some(("apimock", Hook::Sync)));
        assert_eq!(
            hook_of("/prefix/configsync/finalize").ok(),
            Some(("configsync", Hook::Finalize))
        );
        assert!(hook_of("/apimock").is_err());
        assert!(hook_of("/apimock/other").is_err());
    }
}
