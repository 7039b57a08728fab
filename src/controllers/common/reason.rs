//! Every reason a condition of ours can give, as a type: a branch on a reason is checked
//! by the compiler, and the documentation test reads the names from here. Each is written
//! in the status exactly as its variant is named.

/// Declares the reasons; each variant's text is its name.
macro_rules! reasons {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// A condition's CamelCase reason.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Reason {
            $($(#[doc = $doc])+ $name,)+
            /// Why the source could not be read, as the source engine names it
            /// (`FetchError::reason`: one name per error variant, `AuthFailed`, `Timeout`, …).
            Fetch(&'static str),
        }

        impl Reason {
            /// The reason as written in the status.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$name => stringify!($name),)+
                    Reason::Fetch(reason) => reason,
                }
            }
        }
    };
}

reasons! {
    // Validated: the spec and the definition (APIMock), the spec (MonitoredService).
    /// The spec breaks a rule of its own (a field's value, a combination).
    InvalidSpec,
    /// A name derived from the parent's is not a valid Kubernetes name.
    InvalidName,
    /// The spec asks for something this server's policy does not allow.
    NotAllowed,
    /// More than one definition source is set.
    AmbiguousDefinition,
    /// More than one config source is set.
    AmbiguousSource,
    /// The definition is not YAML or JSON.
    InvalidSyntax,
    /// The definition parses but is not an OpenAPI or Swagger document.
    InvalidDocument,
    /// The document declares a version we cannot serve.
    UnsupportedVersion,
    /// The definition (with its referenced files) is over the size limit.
    DefinitionTooLarge,
    /// A `$ref` names a file that is not there, or a part of it that is not.
    InvalidReference,
    /// A `$ref` leaves the definition's folder or names a remote.
    ReferenceRefused,
    /// A file of the definition has a name a ConfigMap key cannot hold.
    UnsupportedFileName,
    /// The source holds files, but not the one the root document is read from.
    NoRootDocument,
    /// The OpenAPI meta-schema the check needs failed to load (a build defect).
    ValidatorUnavailable,
    /// The definition passed every check.
    ValidDefinition,
    /// No definition has been read yet.
    NoDefinition,
    // Fetched: reading the source.
    /// The source was read.
    Fetched,
    /// The commit (and tag) rolled is signed by a key the verify Secret trusts.
    Verified,
    /// The first fetch has not finished yet.
    FetchPending,
    /// A named ConfigMap does not exist.
    ConfigMapNotFound,
    /// The named ConfigMap has no such key.
    KeyNotFound,
    /// A named Secret does not exist.
    SecretNotFound,
    /// A named Secret's contents cannot be used (no credential, bad known_hosts, …).
    SecretInvalid,
    // ConfigValid: the fetched config as a ConfigMap (MonitoredService).
    /// The config fits a ConfigMap and its format.
    Valid,
    /// The config does not fit a ConfigMap.
    TooLarge,
    /// An env-format config is not `KEY=value` lines.
    InvalidEnvFile,
    /// An env-format config names a folder of several files.
    EnvNeedsOneFile,
    /// No config has been fetched yet.
    NoConfig,
    /// The config breaks its schema (`spec.configSchema`).
    SchemaViolation,
    /// The schema cannot be used (too large, not a schema, a pattern or `$ref` refused).
    SchemaInvalid,
    // Ready and Available.
    /// The mock runs the served definition on every pod.
    MockReady,
    /// No definition is served, so no mock runs.
    NoMock,
    /// The served definition does not validate.
    DefinitionInvalid,
    /// Pods are moving to the newest template.
    RolloutInProgress,
    /// The Deployment made no progress within its progress deadline (its `Progressing`
    /// condition is `False` with this reason).
    ProgressDeadlineExceeded,
    /// The Deployment cannot create or delete pods (its `ReplicaFailure` condition: a
    /// quota, or Pod Security forbidding the pods).
    ReplicaFailure,
    /// The service runs its newest config on every pod.
    Ready,
    /// No config source is set.
    NoSource,
    /// The source was never read.
    NotFetched,
    /// The source cannot be read now (the last good config keeps running).
    FetchFailing,
    /// The fetched config cannot be used (the last good config keeps running).
    ConfigInvalid,
    /// The Deployment does not exist yet.
    DeploymentMissing,
    // Exposed.
    /// The Ingress the spec asks for is made.
    IngressAdmitted,
    /// A child's name is held by an object this parent does not own.
    NameTaken,
    /// The Deployment says enough replicas are available.
    MinimumReplicasAvailable,
    /// The Deployment says too few replicas are available.
    MinimumReplicasUnavailable,
    // FitsClientSideApply.
    /// A child is too large for the last-applied annotation of client-side apply.
    LastAppliedTooLarge,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
