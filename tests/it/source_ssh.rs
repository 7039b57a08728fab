//! git over ssh against a real OpenSSH `sshd` on loopback: deploy keys (plain and
//! encrypted) from a Secret in Flux's format, and host keys checked against the Secret's
//! `known_hosts` for the host the URL names, never trusted on first use.

use crate::support;

use metahooks::source::binding::Binding;
use metahooks::source::fetcher::Fetcher;
use metahooks::source::{Content, Credentials, Location, SourceRequest};
use support::servers::{Repo, SshServer, sshd_program};

use crate::source_hardening::settled;

fn ssh_policy() -> metahooks::source::policy::Policy {
    support::loopback_policy(&["ssh"])
}

pub(crate) fn credentials(
    server: &SshServer,
    known_hosts: Option<String>,
    password: Option<&str>,
) -> Credentials {
    Credentials {
        secret: "deploy-key".to_owned(),
        binding: Binding::read(
            "deploy-key",
            None,
            Some(&format!("ssh://127.0.0.1:{}/", server.port)),
        ),
        identity: Some(server.identity.clone()),
        password: password.map(str::to_owned),
        known_hosts,
        ..Credentials::default()
    }
}

fn request(url: &str, credentials: Credentials) -> SourceRequest {
    SourceRequest {
        tls: None,
        location: Location::Git {
            url: url.to_owned(),
            reference: Some("main".to_owned()),
            semver: None,
            verify: None,
            path: "app.env".to_owned(),
        },
        namespace: "team-a".to_owned(),
        credentials: Some(credentials),
    }
}

struct Setup {
    repo: Repo,
    server: SshServer,
    fetcher: Fetcher,
    _cache: tempfile::TempDir,
}

fn setup(key_type: &str, passphrase: &str) -> Option<Setup> {
    let program = sshd_program()?;
    let repo = Repo::new();
    repo.commit(&[("app.env", "COLOUR=blue\n")]);
    let server = SshServer::start(&program, key_type, passphrase);
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(ssh_policy(), cache.path());
    Some(Setup {
        repo,
        server,
        fetcher,
        _cache: cache,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_key_fetches_when_known_hosts_lists_the_host_key() {
    let Some(s) = setup("ed25519", "") else {
        return;
    };
    let url = s.server.url(&s.repo);
    let good = request(
        &url,
        credentials(&s.server, Some(s.server.known_hosts.clone()), None),
    );
    let state = settled(&s.fetcher, &good).await;
    assert!(state.error.is_none(), "{:?}", state.error);
    let snapshot = state.snapshot.expect("fetched over ssh");
    assert_eq!(
        snapshot.files["app.env"],
        Content::Text("COLOUR=blue\n".to_owned())
    );
    assert!(
        snapshot.revision.starts_with("main@sha1:"),
        "{}",
        snapshot.revision
    );

    // A Secret listing only one of the server's two host keys still works, whichever it
    // is: the client asks for the key types the Secret lists.
    for wanted in ["ssh-ed25519", "ecdsa-sha2-nistp256"] {
        let one: String = s
            .server
            .known_hosts
            .lines()
            .filter(|line| line.contains(wanted))
            .map(|line| format!("{line}\n"))
            .collect();
        assert_eq!(
            one.lines().count(),
            1,
            "{wanted} in {}",
            s.server.known_hosts
        );
        let mut only = request(&url, credentials(&s.server, Some(one), None));
        // Another path, so this is a fetch of its own rather than a cache hit.
        if let Location::Git { path, .. } = &mut only.location {
            path.clear();
        }
        only.credentials.as_mut().unwrap().secret = format!("only-{wanted}");
        let state = settled(&s.fetcher, &only).await;
        assert!(state.error.is_none(), "{wanted}: {:?}", state.error);
    }
}

/// The server is a git host, not a shell: OpenSSH's own client gets git's refs through it
/// and nothing else, so the fetches here pass through git-shell as they would at a forge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_test_server_runs_git_shell_in_front_of_every_session() {
    let Some(s) = setup("ed25519", "") else {
        return;
    };
    let shell = s.server.ssh("echo reached-a-shell");
    let said = String::from_utf8_lossy(&shell.stderr);
    assert!(!shell.status.success(), "a shell command ran: {said}");
    assert!(
        !String::from_utf8_lossy(&shell.stdout).contains("reached-a-shell"),
        "{said}"
    );
    assert!(said.contains("unrecognized command"), "{said}");

    let git = s
        .server
        .ssh(&format!("git-upload-pack '{}'", s.repo.bare().display()));
    let advertised = String::from_utf8_lossy(&git.stdout);
    assert!(advertised.contains("refs/heads/main"), "{advertised}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_key_known_hosts_does_not_list_is_refused() {
    let Some(s) = setup("ed25519", "") else {
        return;
    };
    let url = s.server.url(&s.repo);
    let stranger = s.server.stranger_known_hosts();
    let wrong = request(&url, credentials(&s.server, Some(stranger), None));
    let state = settled(&s.fetcher, &wrong).await;
    let error = state
        .error
        .expect("a key the Secret does not list is refused");
    assert_eq!(error.reason(), "HostKeyMismatch", "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("[127.0.0.1]:{}", s.server.port))
            && message.contains("deploy-key"),
        "{message}"
    );
    assert!(state.snapshot.is_none());

    // known_hosts for another host entirely: the host is unlisted.
    let elsewhere = s
        .server
        .known_hosts
        .replace(&format!("[127.0.0.1]:{}", s.server.port), "git.example.com");
    let unlisted = request(&url, credentials(&s.server, Some(elsewhere), None));
    let error = settled(&s.fetcher, &unlisted).await.error.expect("refused");
    assert_eq!(error.reason(), "HostKeyMismatch", "{error}");
    assert!(error.to_string().contains("lists no key"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_without_known_hosts_is_refused_before_connecting() {
    let Some(s) = setup("ed25519", "") else {
        return;
    };
    let url = s.server.url(&s.repo);
    let missing = request(&url, credentials(&s.server, None, None));
    let error = settled(&s.fetcher, &missing).await.error.expect("refused");
    assert_eq!(error.reason(), "KnownHostsMissing", "{error}");
    assert!(error.to_string().contains("known_hosts"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_key_is_unlocked_with_the_secrets_password() {
    let Some(s) = setup("ecdsa", "open sesame") else {
        return;
    };
    let url = s.server.url(&s.repo);
    let known = Some(s.server.known_hosts.clone());
    let unlocked = request(
        &url,
        credentials(&s.server, known.clone(), Some("open sesame")),
    );
    let state = settled(&s.fetcher, &unlocked).await;
    assert!(state.error.is_none(), "{:?}", state.error);
    let mut wrong = request(&url, credentials(&s.server, known, Some("wrong")));
    wrong.credentials.as_mut().unwrap().secret = "other".to_owned();
    let error = settled(&s.fetcher, &wrong)
        .await
        .error
        .expect("a wrong passphrase fails");
    assert_eq!(error.reason(), "IdentityInvalid", "{error}");
    assert!(error.to_string().contains("password"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_needs_its_scheme_allowed_and_the_secret_bound_to_the_url() {
    let Some(s) = setup("ed25519", "") else {
        return;
    };
    let url = s.server.url(&s.repo);
    let cache = tempfile::tempdir().unwrap();
    let strict = support::fetcher(support::loopback_policy(&["git"]), cache.path());
    let good = request(
        &url,
        credentials(&s.server, Some(s.server.known_hosts.clone()), None),
    );
    let error = settled(&strict, &good)
        .await
        .error
        .expect("ssh not allowed");
    assert_eq!(error.reason(), "SchemeRefused", "{error}");
    assert!(error.to_string().contains("--allow-scheme ssh"), "{error}");

    let mut unbound = credentials(&s.server, Some(s.server.known_hosts.clone()), None);
    unbound.binding = Binding::read("deploy-key", None, Some("ssh://127.0.0.1:1/"));
    let error = settled(&s.fetcher, &request(&url, unbound))
        .await
        .error
        .expect("refused");
    assert_eq!(error.reason(), "CredentialsNotAllowed", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_scp_like_address_reaches_port_22() {
    let Some(program) = sshd_program() else {
        return;
    };
    // scp-like addresses name no port: this needs port 22, which only root may bind and
    // which may be taken; the test says so and passes when it cannot have it.
    if std::net::TcpListener::bind("127.0.0.1:22").is_err() {
        eprintln!("port 22 is not available: scp-like addresses are covered by unit tests only");
        return;
    }
    let repo = Repo::new();
    repo.commit(&[("app.env", "COLOUR=blue\n")]);
    let server = SshServer::start_on(&program, 22, "ed25519", "");
    let cache = tempfile::tempdir().unwrap();
    let fetcher = support::fetcher(ssh_policy(), cache.path());
    let url = format!("{}@127.0.0.1:{}", server.user, repo.bare().display());
    let mut creds = credentials(&server, Some(server.known_hosts.clone()), None);
    creds.binding = Binding::read("deploy-key", None, Some("ssh://127.0.0.1/"));
    let state = settled(&fetcher, &request(&url, creds)).await;
    assert!(state.error.is_none(), "{url}: {:?}", state.error);
    assert_eq!(
        state.snapshot.unwrap().files["app.env"],
        Content::Text("COLOUR=blue\n".to_owned())
    );
}
