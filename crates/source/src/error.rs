//! Why a fetch failed, each with the CamelCase reason its `Fetched` condition carries.

/// Why a fetch failed; each has a CamelCase reason for status conditions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[allow(missing_docs)] // each variant is described by its #[error] message
pub enum FetchError {
    #[error("URL {url:?} is not valid: {problem}")]
    InvalidUrl { url: String, problem: String },
    #[error("scheme {scheme:?} is not allowed (https is; others need --allow-scheme {scheme})")]
    SchemeRefused { scheme: String },
    #[error("host {host} is refused: {why}")]
    HostRefused { host: String, why: String },
    #[error("the credentials of Secret {secret:?} are not sent to {url}: {why}")]
    CredentialsNotAllowed {
        secret: String,
        url: String,
        why: super::binding::NotCovered,
    },
    #[error("authentication failed for {url}")]
    AuthFailed { url: String },
    #[error(
        "{url} is reached over ssh, which needs a Secret (secretRef) with `identity` and `known_hosts`: host keys are never trusted on first use"
    )]
    KnownHostsMissing { url: String },
    #[error(
        "the ssh key in `identity` could not be used for {url} (a wrong `password` for an encrypted key, or a key format libssh2 does not read): {detail}"
    )]
    IdentityInvalid { url: String, detail: String },
    #[error("the host key of {url} is not trusted: {detail}")]
    HostKeyMismatch { url: String, detail: String },
    #[error("the TLS certificate of {url} is not valid: {detail}")]
    CertificateInvalid { url: String, detail: String },
    #[error("ref {reference:?} does not exist in {url}")]
    RefNotFound { url: String, reference: String },
    #[error("no tag of {url} is a version in the range {range:?}")]
    NoMatchingTag { url: String, range: String },
    #[error("the semver range {range:?} does not parse: {problem}")]
    RangeInvalid { range: String, problem: String },
    #[error("{object} is not signed as source.git.verify requires: {detail}")]
    SignatureMissing { object: String, detail: String },
    #[error("{object} is not signed by a trusted key: {detail}")]
    SignatureUntrusted { object: String, detail: String },
    #[error("the signature of {object} does not verify: {detail}")]
    SignatureInvalid { object: String, detail: String },
    #[error(
        "{object} carries {kind} signature, which is not supported (OpenPGP and SSH signatures are)"
    )]
    UnsupportedSignature { object: String, kind: String },
    #[error("path {path:?} does not exist at {revision}")]
    PathNotFound { path: String, revision: String },
    #[error("path {path:?} is not allowed: {why}")]
    PathRefused { path: String, why: String },
    #[error("{path:?} is a symbolic link; links are not followed")]
    SymlinkRefused { path: String },
    #[error(
        "{path:?} is a submodule; submodules are not read (copy the files into the repository, or point at the submodule's own repository)"
    )]
    UnsupportedEntry { path: String },
    #[error("{what} is larger than the limit of {limit} bytes")]
    TooLarge { what: String, limit: u64 },
    #[error("more than {limit} files under the requested path")]
    TooManyFiles { limit: usize },
    #[error(
        "the repository tree under the requested path has more than {limit} entries (directories included)"
    )]
    TooManyEntries { limit: usize },
    #[error(
        "{from} redirected to {to}, another origin; the redirect was not followed (credentials never leave their origin, and a plain-http source never leaves its checked address)"
    )]
    RedirectRefused { from: String, to: String },
    #[error("{url} answered HTTP {status}")]
    HttpStatus { url: String, status: u16 },
    #[error("fetching {url} took longer than {seconds} s")]
    Timeout { url: String, seconds: u64 },
    #[error("cannot reach {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error(
        "the fetch of {url} needed more than the fetch worker's memory limit of {limit_mib} MiB"
    )]
    MemoryLimit { url: String, limit_mib: u64 },
    #[error("the fetch of {url} used more than its CPU time limit of {seconds} s")]
    CpuLimit { url: String, seconds: u64 },
    #[error(
        "{url} answered in content coding {coding:?}, which is not read (gzip, x-gzip and deflate are, one layer)"
    )]
    UnsupportedEncoding { url: String, coding: String },
    #[error("the fetch worker for {url} failed: {detail}")]
    WorkerCrashed { url: String, detail: String },
    #[error("the source cache has no space left for {url}: {detail}")]
    CacheFull { url: String, detail: String },
    #[error("the source cache cannot be read: {detail}")]
    CacheUnreadable { detail: String },
    #[error("git failed for {url}: {detail}")]
    GitFailed { url: String, detail: String },
    #[error("{whence} is not usable TLS material: {detail}")]
    TlsMaterialInvalid { whence: String, detail: String },
    #[error("the source engine cannot run fetches: {detail}")]
    EngineFailed { detail: String },
    #[error("this server has no source engine")]
    NoSourceEngine,
}

impl FetchError {
    /// Whether the commit or tag was fetched but its signature is not accepted
    /// (`source.git.verify`).
    pub fn is_signature(&self) -> bool {
        matches!(
            self,
            FetchError::SignatureMissing { .. }
                | FetchError::SignatureUntrusted { .. }
                | FetchError::SignatureInvalid { .. }
                | FetchError::UnsupportedSignature { .. }
        )
    }

    /// The condition reason of this error (CamelCase).
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl { .. } => "InvalidURL",
            FetchError::SchemeRefused { .. } => "SchemeRefused",
            FetchError::HostRefused { .. } => "HostRefused",
            FetchError::CredentialsNotAllowed { .. } => "CredentialsNotAllowed",
            FetchError::AuthFailed { .. } => "AuthFailed",
            FetchError::KnownHostsMissing { .. } => "KnownHostsMissing",
            FetchError::HostKeyMismatch { .. } => "HostKeyMismatch",
            FetchError::IdentityInvalid { .. } => "IdentityInvalid",
            FetchError::CertificateInvalid { .. } => "CertificateInvalid",
            FetchError::RefNotFound { .. } => "RefNotFound",
            FetchError::NoMatchingTag { .. } => "NoMatchingTag",
            FetchError::RangeInvalid { .. } => "RangeInvalid",
            FetchError::SignatureMissing { .. } => "SignatureMissing",
            FetchError::SignatureUntrusted { .. } => "SignatureUntrusted",
            FetchError::SignatureInvalid { .. } => "SignatureInvalid",
            FetchError::UnsupportedSignature { .. } => "UnsupportedSignature",
            FetchError::PathNotFound { .. } => "PathNotFound",
            FetchError::PathRefused { .. } => "PathRefused",
            FetchError::SymlinkRefused { .. } => "SymlinkRefused",
            FetchError::UnsupportedEntry { .. } => "UnsupportedEntry",
            FetchError::TooLarge { .. } => "TooLarge",
            FetchError::TooManyFiles { .. } => "TooManyFiles",
            FetchError::TooManyEntries { .. } => "TooManyEntries",
            FetchError::RedirectRefused { .. } => "RedirectRefused",
            FetchError::HttpStatus { .. } => "HTTPError",
            FetchError::Timeout { .. } => "Timeout",
            FetchError::Unreachable { .. } => "Unreachable",
            FetchError::MemoryLimit { .. } => "MemoryLimit",
            FetchError::CpuLimit { .. } => "CPULimit",
            FetchError::UnsupportedEncoding { .. } => "UnsupportedEncoding",
            FetchError::WorkerCrashed { .. } => "WorkerCrashed",
            FetchError::CacheFull { .. } => "CacheFull",
            FetchError::CacheUnreadable { .. } => "CacheUnreadable",
            FetchError::GitFailed { .. } => "GitFailed",
            FetchError::TlsMaterialInvalid { .. } => "TLSMaterialInvalid",
            FetchError::EngineFailed { .. } => "EngineFailed",
            FetchError::NoSourceEngine => "NoSourceEngine",
        }
    }
}
