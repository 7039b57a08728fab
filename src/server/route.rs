//! The hooks this server has, each resolved once when the router is built.

use super::answers::{RouteKey, route_key};
use crate::controllers::Registry;
use crate::protocol::Hook;

/// A hook this server has, resolved once when the router is built: each gets a path of
/// its own, so a call finds its controller, its labels and its memo key without parsing
/// the path.
#[derive(Debug, Clone, Copy)]
pub struct HookRoute {
    /// The controller's name, which is also its metrics label.
    pub controller: &'static str,
    /// The hook.
    pub hook: Hook,
    /// The key its calls are hashed under (answers are remembered by the request's bytes).
    pub(super) key: RouteKey,
}

impl HookRoute {
    /// Every hook of every registered controller.
    pub fn all(registry: &Registry) -> Vec<HookRoute> {
        let mut routes = Vec::new();
        for name in registry.names() {
            for hook in Hook::ALL {
                routes.push(HookRoute {
                    controller: super::metrics::label(name),
                    hook,
                    key: route_key(name, hook),
                });
            }
        }
        routes
    }

    /// The path it is served on.
    pub fn path(&self) -> String {
        format!("/{}/{}", self.controller, self.hook.as_str())
    }
}
