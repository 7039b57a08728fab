//! Hook API version (v1 vs v2), read from the controller object in the request.

use serde_json::Value;

use super::Hook;

/// The key format of object maps: v1 keys are `name` (or `namespace/name` under a
/// cluster-scoped parent), v2 keys are always `namespace/name` for namespaced objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HookVersion {
    /// Children keyed by name.
    #[default]
    V1,
    /// Children keyed by `namespace/name`.
    V2,
}

impl HookVersion {
    /// Reads `controller.spec.hooks.<hook>.version`; the CRD defaults it to `v1`, so an
    /// absent or unrecognised value is treated as v1 (the lenient reading).
    pub fn of(controller: &Value, hook: Hook) -> HookVersion {
        let version = controller
            .pointer(&format!("/spec/hooks/{}/version", hook.as_str()))
            .and_then(Value::as_str);
        match version {
            Some("v2") => HookVersion::V2,
            _ => HookVersion::V1,
        }
    }

    /// `v1` or `v2`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookVersion::V1 => "v1",
            HookVersion::V2 => "v2",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_version_of_the_called_hook() {
        let controller = json!({"spec": {"hooks": {"sync": {"version": "v2"}, "finalize": {}}}});
        assert_eq!(HookVersion::of(&controller, Hook::Sync), HookVersion::V2);
        assert_eq!(
            HookVersion::of(&controller, Hook::Finalize),
            HookVersion::V1
        );
        assert_eq!(
            HookVersion::of(&json!(null), Hook::Customize),
            HookVersion::V1
        );
    }
}
