//! Release tags picked by a semver range (`source.git.semver`), read as Flux and npm
//! write one: comparators apart by spaces or commas all hold (`>=1.2.0 <2.0.0`), `||`
//! between alternatives, an operator may stand apart from its version (`>= 1.2`), and a
//! tag may carry a leading `v`. Matching is the `semver` crate's: a pre-release matches
//! only when a comparator names a pre-release of the same major.minor.patch.

use semver::{Version, VersionReq};

/// The longest range accepted, in bytes: a spec field, not a document.
pub const MAX_RANGE_BYTES: usize = 256;

/// A parsed range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagRange {
    alternatives: Vec<VersionReq>,
}

/// Why a range does not parse, in words for the field's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RangeError(String);

impl TagRange {
    /// Reads `text`.
    ///
    /// # Errors
    /// The range is empty, too long, or an alternative is not a semver requirement.
    pub fn parse(text: &str) -> Result<TagRange, RangeError> {
        if text.len() > MAX_RANGE_BYTES {
            return Err(RangeError(format!(
                "the range is {} bytes; at most {MAX_RANGE_BYTES} are accepted",
                text.len()
            )));
        }
        let mut alternatives = Vec::new();
        for alternative in text.split("||") {
            let comparators = comparators(alternative);
            if comparators.is_empty() {
                return Err(RangeError(if text.trim().is_empty() {
                    "the range is empty".to_owned()
                } else {
                    format!("{text:?} has an empty alternative around \"||\"")
                }));
            }
            let joined = comparators.join(", ");
            let requirement = VersionReq::parse(&joined).map_err(|e| {
                RangeError(format!(
                    "{:?} is not a semver range: {e}",
                    alternative.trim()
                ))
            })?;
            alternatives.push(requirement);
        }
        Ok(TagRange { alternatives })
    }

    /// Whether `version` is in the range.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|r| r.matches(version))
    }

    /// The tag of the highest version in the range among `tags` (names without
    /// `refs/tags/`). Of two tags of one version (`1.2.0` and `v1.2.0`) the one that
    /// sorts first by name, so every replica picks the same.
    pub fn highest<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        tags.into_iter()
            .filter_map(|tag| version_of(tag).map(|version| (version, tag)))
            .filter(|(version, _)| self.matches(version))
            .max_by(|(a, a_tag), (b, b_tag)| a.cmp(b).then_with(|| b_tag.cmp(a_tag)))
            .map(|(_, tag)| tag)
    }
}

/// The version a tag names: `1.2.3` or `v1.2.3` (pre-release and build parts allowed).
pub fn version_of(tag: &str) -> Option<Version> {
    let bare = tag
        .strip_prefix('v')
        .or_else(|| tag.strip_prefix('V'))
        .unwrap_or(tag);
    Version::parse(bare).ok()
}

/// The comparators of one alternative, each an operator joined to its version.
fn comparators(alternative: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut operator_waiting = false;
    for token in alternative
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
    {
        match out.last_mut() {
            Some(last) if operator_waiting => last.push_str(token),
            _ => out.push(token.to_owned()),
        }
        operator_waiting = token.chars().all(|c| "<>=~^".contains(c));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick<'a>(range: &str, tags: &[&'a str]) -> Option<&'a str> {
        TagRange::parse(range)
            .unwrap()
            .highest(tags.iter().copied())
    }

    #[test]
    fn the_highest_tag_in_the_range_is_picked() {
        let tags = [
            "v1.1.0",
            "v1.2.0",
            "v1.9.3",
            "v2.0.0",
            "latest",
            "1.10.0-rc.1",
        ];
        assert_eq!(pick(">=1.2.0 <2.0.0", &tags), Some("v1.9.3"));
        assert_eq!(pick(">=1.2.0, <2.0.0", &tags), Some("v1.9.3"));
        assert_eq!(pick(">= 1.2.0 < 2.0.0", &tags), Some("v1.9.3"));
        assert_eq!(pick("^2", &tags), Some("v2.0.0"));
        assert_eq!(pick("<1.2.0 || >=2", &tags), Some("v2.0.0"));
        assert_eq!(pick("~1.1", &tags), Some("v1.1.0"));
        assert_eq!(pick(">=3", &tags), None);
    }

    #[test]
    fn pre_releases_only_when_the_range_names_one() {
        let tags = ["1.9.0", "1.10.0-rc.1"];
        assert_eq!(pick(">=1.0.0", &tags), Some("1.9.0"));
        assert_eq!(pick(">=1.10.0-rc.0", &tags), Some("1.10.0-rc.1"));
    }

    #[test]
    fn two_tags_of_one_version_pick_the_same_one_whatever_their_order() {
        assert_eq!(pick("*", &["v1.0.0", "1.0.0"]), Some("1.0.0"));
        assert_eq!(pick("*", &["1.0.0", "v1.0.0"]), Some("1.0.0"));
    }

    #[test]
    fn a_range_that_is_not_one_is_refused_with_the_crates_words() {
        for bad in ["", "  ", "not-a-range", ">=1.0 ||", "1.2 - 1.4"] {
            assert!(TagRange::parse(bad).is_err(), "{bad:?} parsed");
        }
        let long = format!(">={}", "1".repeat(MAX_RANGE_BYTES));
        let error = TagRange::parse(&long).unwrap_err().to_string();
        assert!(error.contains("at most 256"), "{error}");
    }
}
