//! What the emulator reports about a hook: each finding names the rule it breaks, the
//! object it is about, and what happened, in words a hook author can act on.

use serde::Serialize;

/// The rules a hook can break, as Metacontroller enforces or suffers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Rule {
    /// Anything but 200 (or no answer): Metacontroller logs it and retries with backoff;
    /// nothing is applied for that parent.
    NonOkAnswer,
    /// An answer that is not a JSON object of the right shape (a field of the wrong
    /// type, label values not strings): Metacontroller applies none of it.
    InvalidAnswer,
    /// The answer was `null`: Metacontroller decodes it as an empty answer and deletes
    /// every child.
    AllChildrenDeleted,
    /// A field the response type does not have, under strict decoding (v2 hooks, or
    /// `responseUnMarshallMode: strict`): Metacontroller rejects the whole answer.
    StrictDecoding,
    /// A child Metacontroller cannot apply: no name, another namespace than its
    /// namespaced parent's, labels outside the parent's selector (which fails the whole
    /// sync), a last-applied annotation that is not JSON.
    InvalidChild,
    /// 429 with Retry-After: Metacontroller requeues the parent after that delay, with
    /// no error. Only a hook that keeps answering it becomes a finding (as NonOkAnswer).
    Throttled,
    /// A parent Metacontroller refuses before any hook call (no `spec.selector` without
    /// `generateSelector`).
    InvalidParent,
    /// A child write the API server refuses (a name, label or annotation size it does not
    /// accept, an immutable field changed), in its words.
    APIServerRefused,
    /// A desired child of a type the registration does not list, whose change the answer
    /// asks for: Metacontroller created it once and never updates or deletes it.
    UnlistedChild,
    /// A desired child that exists and is owned by another parent.
    OwnershipConflict,
    /// A child answered at another served version than its `childResources` rule lists:
    /// Metacontroller matches children by exact group, version and kind, so it deletes
    /// the observed one and creates it again on every sync.
    ChildAtAnotherVersion,
    /// Two identical requests got different answers (nondeterminism, or state that
    /// differs between replicas).
    UnstableAnswer,
    /// A child deleted because an answer left it out while its parent had not changed
    /// since the child was last asked for, and asked for again later: the usual cause of
    /// "my Deployment keeps disappearing".
    ChildDropped,
    /// Children still created, updated or deleted after the round limit: the answers
    /// fight what the API server or the last round made of them.
    HotLoop,
    /// The parent's status still changed in every round at the round limit.
    StatusNeverSettles,
    /// A parent being deleted still carries the controller's finalizer at the end.
    FinalizeNeverCompletes,
    /// An answer asks to be called again in under a second, in a steady state.
    ResyncStorm,
    /// A customize answer Metacontroller would reject (names together with selectors,
    /// a namespace outside the parent's for v1).
    InvalidCustomize,
    /// Something the emulator cannot simulate faithfully (it says what).
    NotEmulated,
    /// A story step's expectation did not hold (or the object it edits is gone).
    ExpectationFailed,
    /// Pod Security admission refuses the Pods of a child workload in a namespace
    /// labelled `pod-security.kubernetes.io/enforce` (the workload itself is admitted).
    PodSecurity,
}

impl Rule {
    /// The rule's name as reports show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::NonOkAnswer => "NonOkAnswer",
            Rule::InvalidAnswer => "InvalidAnswer",
            Rule::AllChildrenDeleted => "AllChildrenDeleted",
            Rule::InvalidParent => "InvalidParent",
            Rule::APIServerRefused => "APIServerRefused",
            Rule::Throttled => "Throttled",
            Rule::ExpectationFailed => "ExpectationFailed",
            Rule::PodSecurity => "PodSecurity",
            Rule::StrictDecoding => "StrictDecoding",
            Rule::InvalidChild => "InvalidChild",
            Rule::OwnershipConflict => "OwnershipConflict",
            Rule::ChildAtAnotherVersion => "ChildAtAnotherVersion",
            Rule::UnlistedChild => "UnlistedChild",
            Rule::UnstableAnswer => "UnstableAnswer",
            Rule::ChildDropped => "ChildDropped",
            Rule::HotLoop => "HotLoop",
            Rule::StatusNeverSettles => "StatusNeverSettles",
            Rule::FinalizeNeverCompletes => "FinalizeNeverCompletes",
            Rule::ResyncStorm => "ResyncStorm",
            Rule::InvalidCustomize => "InvalidCustomize",
            Rule::NotEmulated => "NotEmulated",
        }
    }
}

impl Rule {
    /// Every rule, in the order reports list them.
    pub const ALL: [Rule; 21] = [
        Rule::NonOkAnswer,
        Rule::InvalidAnswer,
        Rule::AllChildrenDeleted,
        Rule::StrictDecoding,
        Rule::InvalidChild,
        Rule::Throttled,
        Rule::InvalidParent,
        Rule::APIServerRefused,
        Rule::UnlistedChild,
        Rule::OwnershipConflict,
        Rule::ChildAtAnotherVersion,
        Rule::UnstableAnswer,
        Rule::ChildDropped,
        Rule::HotLoop,
        Rule::StatusNeverSettles,
        Rule::FinalizeNeverCompletes,
        Rule::ResyncStorm,
        Rule::InvalidCustomize,
        Rule::NotEmulated,
        Rule::ExpectationFailed,
        Rule::PodSecurity,
    ];

    /// One line on what the rule is about, for SARIF's rule list.
    pub fn summary(self) -> &'static str {
        match self {
            Rule::NonOkAnswer => {
                "The hook answered anything but 200, or not at all: Metacontroller applies nothing and retries."
            }
            Rule::InvalidAnswer => {
                "The answer is not a JSON object of the response's shape: nothing of it is applied."
            }
            Rule::AllChildrenDeleted => {
                "The answer was null: Metacontroller reads an empty answer and deletes every child."
            }
            Rule::StrictDecoding => {
                "A field the response type does not have, or a key twice, under strict decoding."
            }
            Rule::InvalidChild => {
                "A child Metacontroller cannot apply (no name, another namespace, labels outside the selector)."
            }
            Rule::Throttled => "The hook kept answering 429.",
            Rule::InvalidParent => "A parent Metacontroller refuses before calling any hook.",
            Rule::APIServerRefused => "The API server refuses a child write, in its words.",
            Rule::UnlistedChild => {
                "The answer changes a child Metacontroller never observes, so the change is never applied."
            }
            Rule::OwnershipConflict => "A desired child exists and belongs to another owner.",
            Rule::ChildAtAnotherVersion => {
                "A child answered at another version than the registration lists: deleted and created again on every sync."
            }
            Rule::UnstableAnswer => {
                "Two identical requests got answers that differ where the cluster acts on them."
            }
            Rule::ChildDropped => {
                "A child was left out while its parent had not changed (and deleted), then asked for again."
            }
            Rule::HotLoop => "Objects still changed after the round limit.",
            Rule::StatusNeverSettles => "The parent's status changed in every round.",
            Rule::FinalizeNeverCompletes => {
                "A deleted parent still carried the finalizer when the cluster stopped changing."
            }
            Rule::ResyncStorm => {
                "In a steady state the answer asks to be called again in under a second."
            }
            Rule::InvalidCustomize => "A customize answer Metacontroller would reject.",
            Rule::NotEmulated => "Something the emulator cannot simulate faithfully.",
            Rule::ExpectationFailed => "A story step's expectation did not hold.",
            Rule::PodSecurity => "Pod Security admission refuses the Pods of a child workload.",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A rule and what broke it, before the emulator knows which parent it was about.
pub type Problem = (Rule, String);

/// Where an input object was written: the file and the line its document starts on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The file, as given on the command line (or found in a directory given).
    pub file: String,
    /// The 1-based line its document starts on.
    pub line: usize,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// The object a finding is about, as a CI annotation names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Subject {
    /// The controller (registration name) whose hook is concerned, if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// The object's apiVersion.
    pub api_version: String,
    /// The object's kind.
    pub kind: String,
    /// Its namespace ("" when cluster-scoped).
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The JSON pointer of the field concerned, where one is known (what differed
    /// between two answers, what kept changing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Where the object (or, for a child, its parent) was written in the input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
}

/// A problem the emulator saw, and which rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The rule broken.
    pub rule: Rule,
    /// The controller and object concerned, e.g. `apimock APIMock default/users`.
    pub subject: String,
    /// What happened, naming the objects involved.
    pub message: String,
    /// The round it was seen in (1-based).
    pub round: usize,
    /// The same subject, field by field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub about: Option<Subject>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}] {} (round {}): {}",
            self.rule, self.subject, self.round, self.message
        )
    }
}
