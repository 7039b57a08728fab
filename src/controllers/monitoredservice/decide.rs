//! What a MonitoredService serves: the fresh config, unless what runs is a newer copy of
//! the same ref; the last good config when the fresh one cannot be used.

use crate::controllers::common::conditions::{ConditionType, Decided, Reason};
use crate::controllers::common::config::{Config, format_name};
use crate::controllers::common::problem::Problem;
use crate::controllers::common::revisions::running_is_newer;

/// What to serve, and the `ConfigValid` verdict.
pub(super) struct Decision {
    pub(super) served: Option<Config>,
    pub(super) config_valid: Decided,
    /// What runs is newer than this server's copy of the source.
    pub(super) behind: bool,
}

/// A valid fresh config wins unless what runs may be a newer copy of the same ref (the
/// engine's copy was fetched before it heard of what runs: `after_running` false); an
/// invalid or missing one leaves what runs (if anything) in place.
pub(super) fn decide(
    fresh: Option<&Result<Config, Problem>>,
    running: Option<&Config>,
    after_running: bool,
    nothing_runs: bool,
) -> Decision {
    match fresh {
        Some(Ok(config)) => {
            let (config, behind) = newest_of(config, running, after_running);
            let config_valid = Decided::new(
                ConditionType::ConfigValid,
                true,
                Reason::Valid,
                format!(
                    "{} is a valid {} config",
                    config.shown_revision(),
                    format_name(config.format)
                ),
            );
            Decision {
                served: Some(config),
                config_valid,
                behind,
            }
        }
        Some(Err(Problem { reason, message })) => {
            let keeping = running.map_or(String::new(), |c| {
                format!("; still running {}", c.shown_revision())
            });
            Decision {
                served: running.cloned(),
                config_valid: Decided::new(
                    ConditionType::ConfigValid,
                    false,
                    *reason,
                    format!("{message}{keeping}"),
                ),
                behind: false,
            }
        }
        None => Decision {
            served: running.cloned(),
            config_valid: nothing_fresh(running, nothing_runs),
            behind: false,
        },
    }
}

/// `ConfigValid` while no fresh config has been read: what runs stays valid.
fn nothing_fresh(running: Option<&Config>, nothing_runs: bool) -> Decided {
    match running {
        Some(config) => Decided::new(
            ConditionType::ConfigValid,
            true,
            Reason::Valid,
            format!(
                "running {} until the source answers",
                config.shown_revision()
            ),
        ),
        None if nothing_runs => Decided::new(
            ConditionType::ConfigValid,
            false,
            Reason::NoConfig,
            "no configuration has been fetched yet",
        ),
        None => Decided::new(
            ConditionType::ConfigValid,
            false,
            Reason::NoConfig,
            "no configuration has been fetched yet; the running children are kept as they are until one is",
        ),
    }
}

/// Which config to serve when this server has a valid `fresh` one: the running config
/// (read from the observed ConfigMap) when it may be a newer copy of the same ref
/// ([`running_is_newer`]); this server is then behind.
pub(super) fn newest_of(
    fresh: &Config,
    running: Option<&Config>,
    after_running: bool,
) -> (Config, bool) {
    match running {
        Some(running)
            if fresh
                .revision
                .as_deref()
                .zip(running.revision.as_deref())
                .is_some_and(|(fresh, running)| {
                    running_is_newer(fresh, running, after_running)
                }) =>
        {
            (running.clone(), true)
        }
        _ => (fresh.clone(), false),
    }
}
