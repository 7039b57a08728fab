//! Why something from a CR cannot be used, as a status condition shows it: a CamelCase
//! reason and a sentence for the person who reads `kubectl describe`.

use super::reason::Reason;

/// A reason (`SecretNotFound`, `InvalidReference`, …) and a message naming the field or
/// the file and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// CamelCase condition reason.
    pub reason: Reason,
    /// A sentence naming the field or file and the problem.
    pub message: String,
}

impl Problem {
    /// A problem with `reason` and `message`.
    pub fn new(reason: Reason, message: impl Into<String>) -> Problem {
        Problem {
            reason,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}
