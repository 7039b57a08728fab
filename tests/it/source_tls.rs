//! https sources signed by a private CA, and sources that ask for a client certificate,
//! for git (libgit2 through the connection guard, which speaks TLS with rustls) and for
//! HTTP files alike: a CA from `--source-ca-file` or a source's `certSecretRef`, and a
//! certificate problem reported as `CertificateInvalid` in rustls' words.

use crate::support;

use axum::http::StatusCode;
use metahooks::source::binding::Binding;
use metahooks::source::fetcher::Fetcher;
use metahooks::source::policy::Policy;
use metahooks::source::tls::TlsMaterial;
use metahooks::source::{Content, Credentials, Location, SourceRequest};
use support::servers::{Files, Pki, Repo, serve_files_tls, serve_git_https};

use crate::source_hardening::settled;

fn policy(server_ca: Option<&Pki>) -> Policy {
    Policy {
        source_ca_pem: server_ca.map(|pki| pki.ca_pem.clone()),
        ..support::loopback_policy(&[])
    }
}

fn material(pki: &Pki, ca: bool, client: bool, allowed: &str) -> TlsMaterial {
    TlsMaterial {
        secret: "source-tls".to_owned(),
        binding: Binding::read("source-tls", None, Some(allowed)),
        ca_pem: ca.then(|| pki.ca_pem.clone()),
        cert_pem: client.then(|| pki.client_cert_pem.clone()),
        key_pem: client.then(|| pki.client_key_pem.clone()),
    }
}

pub fn basic_auth(allowed: &str) -> Credentials {
    Credentials {
        secret: "reader".to_owned(),
        binding: Binding::read("reader", None, Some(allowed)),
        username: Some("reader".to_owned()),
        password: Some("s3cret".to_owned()),
        ..Credentials::default()
    }
}

fn request(
    location: Location,
    credentials: Option<Credentials>,
    tls: Option<TlsMaterial>,
) -> SourceRequest {
    SourceRequest {
        location,
        namespace: "team-a".to_owned(),
        credentials,
        tls,
    }
}

struct GitOverHttps {
    _repo: Repo,
    url: String,
    origin: String,
}

async fn git_over_https(pki: &Pki) -> GitOverHttps {
    let repo = Repo::new();
    repo.commit(&[("app.env", "TIER=gold\n")]);
    let port = serve_git_https(repo.root.path().to_owned(), "reader", "s3cret", pki).await;
    GitOverHttps {
        url: format!("https://localhost:{port}/config.git"),
        origin: format!("https://localhost:{port}/"),
        _repo: repo,
    }
}

fn git_at(url: &str) -> Location {
    Location::Git {
        url: url.to_owned(),
        reference: Some("main".to_owned()),
        semver: None,
        verify: None,
        path: "app.env".to_owned(),
    }
}

fn engine(policy: Policy) -> (Fetcher, tempfile::TempDir) {
    let cache = tempfile::tempdir().unwrap();
    (support::fetcher(policy, cache.path()), cache)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_over_https_trusts_a_private_ca_from_the_source_or_the_server() {
    let pki = Pki::new(false);
    let git = git_over_https(&pki).await;
    let creds = Some(basic_auth(&git.origin));

    let (plain, _c1) = engine(policy(None));
    let untrusted = request(git_at(&git.url), creds.clone(), None);
    let error = settled(&plain, &untrusted)
        .await
        .error
        .expect("an unknown CA is refused");
    assert_eq!(error.reason(), "CertificateInvalid", "{error}");
    assert!(error.to_string().contains("UnknownIssuer"), "{error}");

    let with_ca = request(
        git_at(&git.url),
        creds.clone(),
        Some(material(&pki, true, false, &git.origin)),
    );
    let state = settled(&plain, &with_ca).await;
    assert!(state.error.is_none(), "{:?}", state.error);
    let snapshot = state.snapshot.expect("fetched");
    assert_eq!(
        snapshot.files["app.env"],
        Content::Text("TIER=gold\n".to_owned())
    );

    let (server_wide, _c2) = engine(policy(Some(&pki)));
    let state = settled(&server_wide, &untrusted).await;
    assert!(
        state.error.is_none(),
        "--source-ca-file is trusted: {:?}",
        state.error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_over_https_presents_the_sources_client_certificate() {
    let pki = Pki::new(true);
    let git = git_over_https(&pki).await;
    let creds = Some(basic_auth(&git.origin));
    let (fetcher, _cache) = engine(policy(None));
    let mutual = request(
        git_at(&git.url),
        creds.clone(),
        Some(material(&pki, true, true, &git.origin)),
    );
    let state = settled(&fetcher, &mutual).await;
    assert!(state.error.is_none(), "{:?}", state.error);

    let ca_only = request(
        git_at(&git.url),
        creds,
        Some(material(&pki, true, false, &git.origin)),
    );
    let error = settled(&fetcher, &ca_only)
        .await
        .error
        .expect("no client certificate, no access");
    assert_eq!(error.reason(), "CertificateInvalid", "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_sources_trust_the_same_cas_and_present_the_same_certificates() {
    for require_client_cert in [false, true] {
        let pki = Pki::new(require_client_cert);
        let files = Files::default();
        files.set("/app.env", StatusCode::OK, "MODE=tls\n");
        let port = serve_files_tls(files, &pki).await;
        let url = format!("https://localhost:{port}/app.env");
        let origin = format!("https://localhost:{port}/");
        let at = || Location::Http { url: url.clone() };
        let (fetcher, _cache) = engine(policy(None));

        let error = settled(&fetcher, &request(at(), None, None))
            .await
            .error
            .expect("an unknown CA is refused");
        assert_eq!(error.reason(), "CertificateInvalid", "{error}");

        let trusted = request(
            at(),
            None,
            Some(material(&pki, true, require_client_cert, &origin)),
        );
        let state = settled(&fetcher, &trusted).await;
        assert!(
            state.error.is_none(),
            "client cert {require_client_cert}: {:?}",
            state.error
        );
        assert_eq!(
            state.snapshot.expect("fetched").files["app.env"],
            Content::Text("MODE=tls\n".to_owned())
        );

        if require_client_cert {
            let ca_only = request(at(), None, Some(material(&pki, true, false, &origin)));
            let error = settled(&fetcher, &ca_only).await.error.expect("refused");
            assert_eq!(error.reason(), "CertificateInvalid", "{error}");
        } else {
            let (server_wide, _c) = engine(policy(Some(&pki)));
            let state = settled(&server_wide, &request(at(), None, None)).await;
            assert!(state.error.is_none(), "--source-ca-file: {:?}", state.error);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_secret_is_used_only_where_its_owner_allows() {
    let pki = Pki::new(true);
    let git = git_over_https(&pki).await;
    let (fetcher, _cache) = engine(policy(None));
    let elsewhere = material(&pki, true, true, "https://git.example.com/");
    let state = settled(
        &fetcher,
        &request(
            git_at(&git.url),
            Some(basic_auth(&git.origin)),
            Some(elsewhere),
        ),
    )
    .await;
    let error = state.error.expect("refused");
    assert_eq!(error.reason(), "CredentialsNotAllowed", "{error}");
    assert!(error.to_string().contains("source-tls"), "{error}");
}
