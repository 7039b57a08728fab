//! `KEY=VALUE` config files, read the way people expect an env file to be read:
//! blank lines and `#` comments are ignored, a leading `export ` is allowed, and one pair
//! of matching surrounding quotes is removed. Any other line is an error naming its line
//! number, and then nothing is rolled out (config-monitor silently skipped such lines and
//! kept quotes in values).

use std::collections::BTreeMap;

use super::conditions::quoted;

/// Why an env file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {problem}")]
pub struct EnvLineError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong with it.
    pub problem: LineProblem,
}

/// What is wrong with a line of an env file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineProblem {
    /// Neither blank, a comment nor `KEY=VALUE`.
    #[error("expected KEY=VALUE, found {:?}", shorten(.line))]
    NotAPair {
        /// The line as written.
        line: String,
    },
    /// The name cannot be an environment variable's.
    #[error(
        "{} is not a usable variable name (letters, digits and '_', not starting with a digit)",
        quoted(.name)
    )]
    BadName {
        /// The name as written.
        name: String,
    },
    /// The value cannot be given to a container.
    #[error("the value of {} {problem}", quoted(.name))]
    BadValue {
        /// The variable's name.
        name: String,
        /// What the value holds.
        problem: ControlCharacter,
    },
}

/// A value holds a control character (tab aside), which a container cannot be given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "holds the control character U+{:04X}, which a container cannot be given",
    u32::from(*.0)
)]
pub struct ControlCharacter(pub char);

/// The variables of an env file, in name order (later definitions win, as in a shell).
pub fn parse(text: &str) -> Result<BTreeMap<String, String>, EnvLineError> {
    let mut vars = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line_number = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line
            .strip_prefix("export ")
            .map(str::trim_start)
            .unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err(EnvLineError {
                line: line_number,
                problem: LineProblem::NotAPair {
                    line: raw.to_owned(),
                },
            });
        };
        let name = name.trim_end();
        if !is_env_name(name) {
            return Err(EnvLineError {
                line: line_number,
                problem: LineProblem::BadName {
                    name: name.to_owned(),
                },
            });
        }
        let value = unquote(value.trim());
        if let Err(problem) = check_env_value(&value) {
            return Err(EnvLineError {
                line: line_number,
                problem: LineProblem::BadValue {
                    name: name.to_owned(),
                    problem,
                },
            });
        }
        vars.insert(name.to_owned(), value);
    }
    Ok(vars)
}

/// A container runtime passes environment values as C strings: a NUL ends them, and
/// other control characters (tab aside) are refused by runtimes or garble logs.
///
/// # Errors
/// The first control character the value holds.
pub fn check_env_value(value: &str) -> Result<(), ControlCharacter> {
    match value.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(ControlCharacter(c)),
        None => Ok(()),
    }
}

fn is_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if value.len() >= 2 && value.starts_with(quote) && value.ends_with(quote) {
            return value[1..value.len() - 1].to_owned();
        }
    }
    value.to_owned()
}

fn shorten(line: &str) -> String {
    line.chars().take(60).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_an_env_file_holds() {
        let vars = parse("# comment\n\nexport A=1\nB = \"two words\"\nC='x=y'\nRESPONSE_TEXT=\"Hello world!\"\nEMPTY=\n").unwrap();
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two words");
        assert_eq!(vars["C"], "x=y");
        assert_eq!(vars["RESPONSE_TEXT"], "Hello world!");
        assert_eq!(vars["EMPTY"], "");
    }

    #[test]
    fn mismatched_quotes_stay() {
        assert_eq!(parse("A=\"open\n").unwrap()["A"], "\"open");
        assert_eq!(parse("A='mixed\"\n").unwrap()["A"], "'mixed\"");
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        let error = parse("A=1\nthis is not a pair\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.to_string().starts_with("line 2: expected KEY=VALUE"));
        assert_eq!(parse("1A=x\n").unwrap_err().line, 1);
        assert_eq!(parse("A-B=x\n").unwrap_err().line, 1);
    }

    #[test]
    fn control_characters_in_values_are_refused() {
        let error = parse("A=1\nB=x\u{0}y\n").unwrap_err();
        assert_eq!(error.line, 2);
        assert_eq!(
            error.problem,
            LineProblem::BadValue {
                name: "B".to_owned(),
                problem: ControlCharacter('\u{0}')
            }
        );
        assert!(error.to_string().contains("U+0000"), "{error}");
        assert!(parse("C=\u{1b}[31m\n").is_err());
        assert_eq!(parse("T=a\tb\n").unwrap()["T"], "a\tb");
    }

    #[test]
    fn a_long_name_is_quoted_in_part() {
        // A fetched file is an attacker's: a name can be as long as the file.
        for (text, length) in [
            (format!("{}-x=1\n", "N".repeat(100_000)), 100_002),
            (format!("{}=a\u{1}b\n", "N".repeat(100_000)), 100_000),
        ] {
            let Err(error) = parse(&text) else {
                panic!("refused");
            };
            let problem = error.problem.to_string();
            assert!(problem.len() < 500, "{problem}");
            let note = format!("… ({length} characters in all)");
            assert!(problem.contains(&note), "{problem}");
        }
    }
}
