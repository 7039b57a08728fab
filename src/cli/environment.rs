//! Configuration mistakes refused before anything starts: a `METAHOOKS_*` environment
//! variable `serve` does not read (a typo in a chart value or a manifest would otherwise
//! switch a hardening off without a word) and a log level that is not one.
//!
//! The variables `serve` reads are taken from its own flag definitions (clap's `env =`),
//! so a new flag is known here the moment it exists.

use clap::CommandFactory;

use super::Cli;

/// The prefix of the variables `serve` reads.
const PREFIX: &str = "METAHOOKS_";

/// A variable `serve` does not read, and the nearest one it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown {
    /// The variable as set.
    pub name: String,
    /// The known variable closest to it, when one is close.
    pub nearest: Option<String>,
}

/// Why `serve` refuses its environment.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "{}; `metahooks serve --help` lists every variable it reads",
    describe(.0)
)]
pub struct UnknownVariables(pub Vec<Unknown>);

fn describe(unknown: &[Unknown]) -> String {
    unknown
        .iter()
        .map(|u| match &u.nearest {
            Some(nearest) => format!(
                "unknown environment variable {} (did you mean {nearest}?)",
                u.name
            ),
            None => format!("unknown environment variable {}", u.name),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every `METAHOOKS_*` variable `serve` reads.
pub fn serve_variables() -> Vec<String> {
    let command = Cli::command();
    let mut names: Vec<String> = command
        .find_subcommand("serve")
        .into_iter()
        .flat_map(|serve| serve.get_arguments())
        .filter_map(|argument| argument.get_env())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with(PREFIX))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Refuses any `METAHOOKS_*` name among `names` that is not in `known`.
///
/// # Errors
/// Every unknown one, each with the nearest known name when one is close.
pub fn check<I, S>(names: I, known: &[String]) -> Result<(), UnknownVariables>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let mut unknown: Vec<Unknown> = names
        .into_iter()
        .filter(|name| name.as_ref().starts_with(PREFIX))
        .filter(|name| !known.iter().any(|k| k == name.as_ref()))
        .map(|name| Unknown {
            name: name.as_ref().to_owned(),
            nearest: nearest(name.as_ref(), known),
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(UnknownVariables(unknown))
    }
}

/// The known name closest to `name`, if the two are close enough to be a typo.
fn nearest(name: &str, known: &[String]) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(name, k), k))
        .filter(|(distance, k)| *distance <= 3.max(k.len() / 6))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k.clone())
}

/// The process environment's variable names (a name that is not Unicode cannot be one
/// of ours, and is still checked by its lossy spelling).
pub fn process_names() -> Vec<String> {
    std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect()
}

/// The level names `--log-level` takes.
const LEVELS: &[&str] = &["trace", "debug", "info", "warn", "error", "off"];

/// Why a log level is refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "--log-level {given:?} is not a level ({}) or a filter such as info,metahooks::source=debug: {problem}",
    LEVELS.join(", ")
)]
pub struct BadLogLevel {
    /// The value as given.
    pub given: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Checks `--log-level`: a level, or comma-separated directives each of which is a level
/// or `target=level` (tracing's `EnvFilter` takes a bare word as a target to log at every
/// level, so `debugg` would silence every line; that is refused here).
///
/// # Errors
/// A directive that is neither.
pub fn check_log_level(given: &str) -> Result<(), BadLogLevel> {
    let refuse = |problem: String| BadLogLevel {
        given: given.to_owned(),
        problem,
    };
    let is_level = |word: &str| LEVELS.iter().any(|l| l.eq_ignore_ascii_case(word.trim()));
    if given.trim().is_empty() {
        return Err(refuse("it is empty".to_owned()));
    }
    for directive in given.split(',').map(str::trim) {
        match directive.rsplit_once('=') {
            Some((target, level)) if !target.trim().is_empty() && is_level(level) => {}
            Some((_, level)) if !is_level(level) => {
                return Err(refuse(format!("{level:?} in {directive:?} is not a level")));
            }
            Some(_) => return Err(refuse(format!("{directive:?} names no target"))),
            None if is_level(directive) => {}
            None => {
                let hint = LEVELS
                    .iter()
                    .map(|l| {
                        (
                            strsim::damerau_levenshtein(&directive.to_ascii_lowercase(), l),
                            l,
                        )
                    })
                    .filter(|(distance, _)| *distance <= 2)
                    .min_by_key(|(distance, _)| *distance)
                    .map(|(_, l)| format!(" (did you mean {l}?)"))
                    .unwrap_or_default();
                return Err(refuse(format!(
                    "{directive:?} is neither a level nor target=level{hint}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_serve_reads_come_from_its_flags() {
        let known = serve_variables();
        for name in [
            "METAHOOKS_LISTEN",
            "METAHOOKS_INGRESS_HOST",
            "METAHOOKS_LOG_LEVEL",
            "METAHOOKS_ALLOW_CIDR",
            "METAHOOKS_MAX_CONNECTIONS_PER_PEER",
        ] {
            assert!(known.iter().any(|k| k == name), "{name}: {known:?}");
        }
        assert!(known.len() > 40, "{known:?}");
    }

    #[test]
    fn an_unknown_variable_is_refused_with_the_nearest_known_one() {
        let known = serve_variables();
        let refused = check(
            [
                "PATH",
                "METAHOOKS_INGRES_HOST",
                "METAHOOKS_LISTEN",
                "METAHOOKS_ZZZ",
            ],
            &known,
        )
        .unwrap_err();
        assert_eq!(
            refused.0,
            vec![
                Unknown {
                    name: "METAHOOKS_INGRES_HOST".to_owned(),
                    nearest: Some("METAHOOKS_INGRESS_HOST".to_owned()),
                },
                Unknown {
                    name: "METAHOOKS_ZZZ".to_owned(),
                    nearest: None,
                },
            ]
        );
        let message = refused.to_string();
        assert!(
            message.contains("METAHOOKS_INGRES_HOST (did you mean METAHOOKS_INGRESS_HOST?)"),
            "{message}"
        );
        assert!(check(["METAHOOKS_LISTEN", "HOME"], &known).is_ok());
    }

    #[test]
    fn log_levels_are_levels_or_target_directives() {
        for good in [
            "info",
            "DEBUG",
            "warn",
            "info,metahooks::source=debug",
            "metahooks=trace, warn",
            "off",
        ] {
            assert!(check_log_level(good).is_ok(), "{good}");
        }
        for (bad, says) in [
            ("debugg", "did you mean debug?"),
            ("verbose", "neither a level nor target=level"),
            (
                "info,metahooks=loud",
                "\"loud\" in \"metahooks=loud\" is not a level",
            ),
            ("=debug", "names no target"),
            ("", "it is empty"),
        ] {
            let refused = check_log_level(bad).unwrap_err().to_string();
            assert!(refused.contains(says), "{bad}: {refused}");
        }
    }
}
