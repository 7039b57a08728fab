//! How long a string from a CR may be, checked where it enters (the CRD says the same
//! with `maxLength`, but a cluster may hold a CRD older than the server). A string is
//! held many times over once it names a source (keys, logs, metric labels, status), so
//! an unbounded one is a way to make every replica hold megabytes per parent.

use super::problem::Problem;
use super::reason::Reason;

/// A source URL (git or HTTP).
pub const URL_BYTES: usize = 2048;
/// A git branch, tag or commit.
pub const REF_BYTES: usize = 255;
/// A file or directory inside a repository.
pub const PATH_BYTES: usize = 1024;
/// A container image reference.
pub const IMAGE_BYTES: usize = 1024;
/// A Kubernetes object name (a Secret, a ConfigMap, a ConfigMap key).
pub const NAME_BYTES: usize = 253;

/// An OpenAPI definition's `info.title` as status shows it.
pub const TITLE_CHARS: usize = 200;
/// An OpenAPI definition's `info.version` (and its `openapi`/`swagger` field).
pub const VERSION_CHARS: usize = 64;

/// `text` as status may show it: at most `max_chars` characters, and when cut, a note
/// of how long it was (so a reader knows it was cut, and by how much).
pub fn shown(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_owned(),
        Some((cut, _)) => format!(
            "{}… (cut: {} characters in all)",
            &text[..cut],
            text.chars().count()
        ),
    }
}

/// Refuses `value` of the field `field` when it is longer than `max` bytes, naming the
/// field and the limit.
///
/// # Errors
/// The value is over the limit (reason `InvalidSpec`).
pub fn check(field: &str, value: &str, max: usize) -> Result<(), Problem> {
    if value.len() <= max {
        return Ok(());
    }
    Err(Problem::new(
        Reason::InvalidSpec,
        format!(
            "{field} is {} bytes long; at most {max} are allowed",
            value.len()
        ),
    ))
}

/// As [`check`] for an optional value.
///
/// # Errors
/// As [`check`].
pub fn check_optional(field: &str, value: Option<&str>, max: usize) -> Result<(), Problem> {
    value.map_or(Ok(()), |value| check(field, value, max))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_over_its_limit_is_refused_with_the_field_and_the_limit() {
        assert!(check("spec.x", &"a".repeat(10), 10).is_ok());
        let refused = check("spec.x", &"a".repeat(11), 10).err();
        assert_eq!(
            refused.map(|p| p.message),
            Some("spec.x is 11 bytes long; at most 10 are allowed".to_owned())
        );
        assert!(check_optional("spec.y", None, 0).is_ok());
    }

    #[test]
    fn a_shown_string_is_cut_on_a_character_and_says_so() {
        assert_eq!(shown("Pets", 4), "Pets");
        assert_eq!(shown("Petsé", 4), "Pets… (cut: 5 characters in all)");
        assert_eq!(shown("éééé", 2), "éé… (cut: 4 characters in all)");
    }
}
