//! A source's revision as the engine names it: `<ref>@sha1:<commit>` for git,
//! `sha256:<hash>` for HTTP. Made by the engine, or read back from a child's annotation,
//! where anyone who can edit the child may have written anything: [`Revision::read`]
//! checks such text once.

use serde::{Deserialize, Serialize};

/// Most bytes a revision read back from an annotation may have (a ref of 255 bytes, `@`,
/// the algorithm and a SHA-256 in hex fit).
pub const MAX_BYTES: usize = 512;

/// A source's revision (empty by default: none known).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(String);

impl Revision {
    /// A revision the engine made.
    pub fn new(text: impl Into<String>) -> Revision {
        Revision(text.into())
    }

    /// A revision written in a child (an annotation): `None` for text no revision of
    /// ours can be (empty, longer than [`MAX_BYTES`], or with control characters).
    pub fn read(text: &str) -> Option<Revision> {
        let usable =
            !text.is_empty() && text.len() <= MAX_BYTES && !text.chars().any(char::is_control);
        usable.then(|| Revision(text.to_owned()))
    }

    /// The revision's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Read as text wherever a revision is shown or compared with text from a child.
impl std::ops::Deref for Revision {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PartialEq<str> for Revision {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<String> for Revision {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<&str> for Revision {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_text_a_revision_can_be_is_read_back() {
        let made = Revision::new("main@sha1:0123abcd");
        assert_eq!(Revision::read(made.as_str()), Some(made));
        for bad in ["", "a\nb", "\u{7f}", &"r".repeat(MAX_BYTES + 1)] {
            assert_eq!(Revision::read(bad), None, "{bad:?}");
        }
    }
}
