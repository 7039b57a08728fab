//! One fetch's way to the remote: http(s) through the engine's HTTP client, git:// and ssh through the
//! connect guard; what it may present and trust, the callbacks that bound it, and its
//! errors in words.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::Instant;

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, ErrorClass, ErrorCode,
    FetchOptions, Oid, ProxyOptions, RemoteCallbacks, Repository,
};

use super::smart_http::SmartHttp;
use super::{LOCAL_ALL, LOCAL_REF, is_disk_full, worker_home};
use crate::connect_guard::{ConnectGuard, Phase};
use crate::known_hosts::KnownHosts;
use crate::policy::Policy;
use crate::tls::TlsMaterial;
use crate::{Credentials, FetchError};

/// What an ssh fetch trusts: the Secret's known_hosts, for the host and port the URL
/// names (not the guard's loopback address libgit2 connects to).
pub(super) struct SshTrust {
    pub(super) known: KnownHosts,
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) secret: String,
}

impl SshTrust {
    /// None for other schemes; for ssh, the Secret's known_hosts or why there is none.
    pub(super) fn for_url(
        parsed: &url::Url,
        raw_url: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Option<SshTrust>, FetchError> {
        if parsed.scheme() != "ssh" {
            return Ok(None);
        }
        let shown = crate::redact_url(raw_url);
        let Some((credentials, text)) =
            credentials.and_then(|c| c.known_hosts.as_deref().map(|text| (c, text)))
        else {
            return Err(FetchError::KnownHostsMissing { url: shown });
        };
        let known = KnownHosts::parse(text).map_err(|detail| FetchError::HostKeyMismatch {
            url: shown.clone(),
            detail: format!("Secret {:?}: {detail}", credentials.secret),
        })?;
        Ok(Some(SshTrust {
            known,
            host: parsed.host_str().unwrap_or_default().to_owned(),
            port: parsed.port().unwrap_or(22),
            secret: credentials.secret.clone(),
        }))
    }
}

/// What a fetch may present or trust beyond the defaults.
pub(super) struct Secrets<'a> {
    pub(super) credentials: Option<&'a Credentials>,
    pub(super) tls: Option<&'a TlsMaterial>,
    pub(super) ssh: Option<SshTrust>,
}

/// One fetch's way to the remote: the transport or guard each network scheme goes
/// through, the URL libgit2 is given, credentials and bounds.
pub(super) struct Session<'a> {
    /// The URL as people see it (conditions, events, logs): without user-info.
    pub(super) shown: String,
    pub(super) remote_url: String,
    pub(super) http: Option<SmartHttp>,
    pub(super) guard: Option<ConnectGuard>,
    pub(super) credentials: Option<&'a Credentials>,
    pub(super) ssh: Option<SshTrust>,
    pub(super) policy: &'a Policy,
    pub(super) deadline: Instant,
    pub(super) outcome: Outcome,
}

impl<'a> Session<'a> {
    pub(super) fn connect(
        parsed: &url::Url,
        raw_url: &str,
        secrets: Secrets<'a>,
        policy: &'a Policy,
        deadline: Instant,
    ) -> Result<Session<'a>, FetchError> {
        let Secrets {
            credentials,
            tls,
            ssh,
        } = secrets;
        // http and https are spoken by the engine's HTTP client as libgit2's transport; git:// and ssh
        // are relayed by a guard that connects only to checked addresses and counts what
        // the remote sends.
        let (http, guard) = match parsed.scheme() {
            "http" | "https" => {
                let shown = crate::redact_url(raw_url);
                let http = SmartHttp::install(&shown, credentials, tls, policy, deadline)?;
                (Some(http), None)
            }
            "git" | "ssh" => (None, Some(ConnectGuard::start(policy, parsed, deadline)?)),
            _ => (None, None),
        };
        let remote_url = match &guard {
            Some(guard) => guard.remote_url(parsed, raw_url),
            None => raw_url.to_owned(),
        };
        Ok(Session {
            shown: crate::redact_url(raw_url),
            remote_url,
            http,
            guard,
            credentials,
            ssh,
            policy,
            deadline,
            outcome: Outcome::default(),
        })
    }

    /// libssh2 asks the server for the host-key types it finds in `~/.ssh/known_hosts`
    /// for the address it connects to (the guard's). A worker's HOME is a folder of its
    /// repository's own ([`worker_home`]); the trusted keys are written there under the
    /// guard's address, so a server with several keys shows one the Secret lists. Who
    /// decides trust is still the certificate callback, against the original host name.
    pub(super) fn teach_libssh2(&self, repo_dir: &Path) {
        let (Some(trust), Some(guard)) = (&self.ssh, &self.guard) else {
            return;
        };
        let home = worker_home(repo_dir);
        if std::env::var_os("HOME").map(PathBuf::from) != Some(home.clone()) {
            return; // not in a worker (the engine's in-process tests): leave HOME alone
        }
        let alias = format!("[{}]:{}", guard.address().ip(), guard.address().port());
        let lines = trust.known.lines_for(&trust.host, trust.port, &alias);
        let ssh_dir = home.join(".ssh");
        let _ = std::fs::create_dir_all(&ssh_dir)
            .and_then(|()| std::fs::write(ssh_dir.join("known_hosts"), lines));
    }

    pub(super) fn enter(&self, phase: Phase) {
        if let Some(guard) = &self.guard {
            guard.enter(phase);
        }
    }

    /// No proxy of libgit2's own, ever: environment proxies would connect past the
    /// address policy (http(s) goes through the engine's egress proxy, in its HTTP client).
    pub(super) fn proxy(&self) -> ProxyOptions<'static> {
        ProxyOptions::new()
    }

    /// What went wrong: the transport's or guard's refusal when one refused or cut a
    /// connection, else what libgit2 and the transfer bounds say.
    pub(super) fn fail(&self, error: git2::Error) -> FetchError {
        self.http
            .as_ref()
            .and_then(SmartHttp::refusal)
            .or_else(|| self.guard.as_ref().and_then(ConnectGuard::refusal))
            .unwrap_or_else(|| map_error(error, &self.shown, &self.outcome, self.policy))
    }

    /// The remote's refs: (name, commit, symbolic target).
    pub(super) fn list_heads(
        &self,
        repo: &Repository,
    ) -> Result<Vec<(String, Oid, Option<String>)>, FetchError> {
        let mut remote = repo
            .remote_anonymous(&self.remote_url)
            .map_err(|e| self.fail(e))?;
        let connection = remote
            .connect_auth(Direction::Fetch, Some(callbacks(self)), Some(self.proxy()))
            .map_err(|e| self.fail(e))?;
        let heads = connection
            .list()
            .map_err(|e| self.fail(e))?
            .iter()
            .map(|h| {
                (
                    h.name().to_owned(),
                    h.oid(),
                    h.symref_target().map(str::to_owned),
                )
            })
            .collect();
        Ok(heads)
    }

    /// Downloads the wanted ref (shallow where the transport allows), or every branch
    /// when a commit was asked for that no ref advertises.
    pub(super) fn download(
        &self,
        repo: &Repository,
        remote_ref: Option<&str>,
        shallow: bool,
    ) -> Result<(), FetchError> {
        let mut remote = repo
            .remote_anonymous(&self.remote_url)
            .map_err(|e| self.fail(e))?;
        let mut options = FetchOptions::new();
        options.remote_callbacks(callbacks(self));
        options.proxy_options(self.proxy());
        options.download_tags(AutotagOption::None);
        let refspec = match remote_ref {
            Some(name) => format!("+{name}:{LOCAL_REF}"),
            None => format!("+refs/heads/*:{LOCAL_ALL}/*"),
        };
        if remote_ref.is_some() && shallow {
            options.depth(1);
        } else if remote_ref.is_none() && repo.is_shallow() {
            // A commit no ref advertises lies somewhere in history, and an earlier
            // shallow fetch for a branch cut that history off: ask for all of it.
            options.depth(i32::MAX);
        }
        remote
            .fetch(&[refspec.as_str()], Some(&mut options), None)
            .map_err(|e| self.fail(e))
    }
}

#[derive(Default)]
pub(super) struct Outcome {
    pub(super) received: Cell<u64>,
    pub(super) too_large: Cell<bool>,
    pub(super) timed_out: Cell<bool>,
    /// Our credentials were offered and the server still asked again.
    pub(super) auth_rejected: Cell<bool>,
    /// Why the ssh host key was not trusted.
    pub(super) distrust: RefCell<Option<String>>,
}

pub(super) fn callbacks<'a>(session: &'a Session<'a>) -> RemoteCallbacks<'a> {
    let (credentials, deadline, policy, outcome) = (
        session.credentials,
        session.deadline,
        session.policy,
        &session.outcome,
    );
    let mut callbacks = RemoteCallbacks::new();
    let ssh = session.ssh.as_ref();
    callbacks.certificate_check(move |cert, _| check_host_key(ssh, cert, outcome));
    let limit = policy.limits.download_bytes;
    callbacks.transfer_progress(move |progress| {
        let received = u64::try_from(progress.received_bytes()).unwrap_or(u64::MAX);
        outcome.received.set(received);
        if received > limit {
            outcome.too_large.set(true);
            return false;
        }
        if Instant::now() > deadline {
            outcome.timed_out.set(true);
            return false;
        }
        true
    });
    // libgit2 asks again after every rejection; offering once per connection avoids a loop.
    let attempts = Cell::new(0_u32);
    callbacks.credentials(move |_url, user_from_url, allowed| {
        let user = user_from_url.unwrap_or("git");
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(user);
        }
        attempts.set(attempts.get() + 1);
        let offered = match credentials {
            Some(credentials) if attempts.get() == 1 => offer(credentials, user, allowed),
            _ => None,
        };
        offered.unwrap_or_else(|| {
            outcome.auth_rejected.set(true);
            Err(git2::Error::new(
                ErrorCode::Auth,
                ErrorClass::Http,
                "authentication failed",
            ))
        })
    });
    callbacks
}

/// ssh: the server's host key must be one the Secret's known_hosts holds for the host
/// and port the URL names (why not is kept for the error). https: libgit2's own
/// verification decides (TLS is end to end).
fn check_host_key(
    ssh: Option<&SshTrust>,
    cert: &git2::cert::Cert<'_>,
    outcome: &Outcome,
) -> Result<CertificateCheckStatus, git2::Error> {
    let Some(trust) = ssh else {
        return Ok(CertificateCheckStatus::CertificatePassthrough);
    };
    let verdict = match cert.as_hostkey().and_then(|key| key.hostkey()) {
        Some(key) => trust
            .known
            .check(&trust.host, trust.port, key)
            .map_err(|distrust| distrust.explain(&trust.host, trust.port, &trust.secret)),
        None => Err("the server's host key could not be read".to_owned()),
    };
    verdict
        .map(|()| CertificateCheckStatus::CertificateOk)
        .map_err(|why| {
            outcome.distrust.replace(Some(why));
            git2::Error::new(
                ErrorCode::Certificate,
                ErrorClass::Ssh,
                "host key not trusted",
            )
        })
}

/// The credential the server's `allowed` kinds take: an SSH key (ssh), else user and
/// password (https, or ssh password authentication).
pub(super) fn offer(
    credentials: &Credentials,
    user: &str,
    allowed: CredentialType,
) -> Option<Result<Cred, git2::Error>> {
    if allowed.contains(CredentialType::SSH_KEY)
        && let Some(identity) = &credentials.identity
    {
        // Secret values lose their trailing newline when read; PEM parsers want it back.
        let key = format!("{}\n", identity.trim_end());
        return Some(Cred::ssh_key_from_memory(
            user,
            None,
            &key,
            credentials.password.as_deref(),
        ));
    }
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        let (user, secret) = credentials.userpass()?;
        return Some(Cred::userpass_plaintext(&user, &secret));
    }
    None
}

/// Why the fetch failed when our own callbacks stopped it (an untrusted host key, the
/// download cap, the deadline): libgit2's error then only says "user cancelled".
fn stopped_by_us(url: &str, outcome: &Outcome, policy: &Policy) -> Option<FetchError> {
    if let Some(detail) = outcome.distrust.borrow().clone() {
        return Some(FetchError::HostKeyMismatch {
            url: url.to_owned(),
            detail,
        });
    }
    if outcome.too_large.get() {
        return Some(FetchError::TooLarge {
            what: format!("the download from {url}"),
            limit: policy.limits.download_bytes,
        });
    }
    outcome.timed_out.get().then(|| FetchError::Timeout {
        url: url.to_owned(),
        seconds: policy.limits.timeout_seconds,
    })
}

pub(super) fn map_error(
    error: git2::Error,
    url: &str,
    outcome: &Outcome,
    policy: &Policy,
) -> FetchError {
    if let Some(stopped) = stopped_by_us(url, outcome, policy) {
        return stopped;
    }
    let message = error.message().to_owned();
    if is_disk_full(&message) {
        return FetchError::CacheFull {
            url: url.to_owned(),
            detail: message,
        };
    }
    if error.class() == ErrorClass::NoMemory {
        // The worker's address-space limit; the worker names its size.
        return FetchError::MemoryLimit {
            url: url.to_owned(),
            limit_mib: 0,
        };
    }
    if error.class() == ErrorClass::Ssh && message.contains("private key") {
        return FetchError::IdentityInvalid {
            url: url.to_owned(),
            detail: message,
        };
    }
    if error.code() == ErrorCode::Auth || outcome.auth_rejected.get() {
        return FetchError::AuthFailed {
            url: url.to_owned(),
        };
    }
    match error.class() {
        ErrorClass::Net | ErrorClass::Http | ErrorClass::Ssl | ErrorClass::Os | ErrorClass::Ssh => {
            FetchError::Unreachable {
                url: url.to_owned(),
                detail: message,
            }
        }
        _ => FetchError::GitFailed {
            url: url.to_owned(),
            detail: message,
        },
    }
}
