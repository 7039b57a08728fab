//! Signed commits and tags (`source.git.verify`) against a real `git daemon`, signed by
//! git itself with keys made by `ssh-keygen` and GnuPG: what is signed by a trusted key
//! rolls and status names the signer; what is not keeps the running config, with the
//! reason of its own; a key added to or removed from the Secret counts at the next sync.

use crate::support;

use serde_json::{Value, json};
use support::emulator::Emulator;
use support::servers::{GitDaemon, Repo};
use support::signing::Signer;

type Harness = support::SourceHarness;

fn service(name: &str, git: Value) -> Value {
    json!({"apiVersion": "services.example.com/v1alpha1", "kind": "MonitoredService",
           "metadata": {"name": name, "namespace": "team-a"},
           "spec": {"image": "web:1", "port": 8080, "format": "env", "source": {"git": git}}})
}

fn keys_secret(trusted: &[&Signer]) -> Value {
    let data: serde_json::Map<String, Value> = trusted
        .iter()
        .map(|s| (s.trusted.0.clone(), json!(s.trusted.1)))
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": "signers", "namespace": "team-a"}, "stringData": data})
}

fn parent<'a>(emulator: &'a Emulator, name: &str) -> &'a Value {
    emulator
        .get(
            "services.example.com/v1alpha1",
            "MonitoredService",
            "team-a",
            name,
        )
        .unwrap()
}

/// (status, reason, message) of a condition, if the parent has it.
fn condition(emulator: &Emulator, name: &str, type_: &str) -> Option<(String, String, String)> {
    support::condition(parent(emulator, name), type_)
}

fn greeting(emulator: &Emulator, name: &str) -> Value {
    emulator
        .get("v1", "ConfigMap", "team-a", &format!("{name}-config"))
        .map_or(Value::Null, |c| c["data"]["GREETING"].clone())
}

fn head(repo: &Repo) -> String {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "main"])
        .current_dir(repo.bare())
        .output()
        .unwrap();
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

async fn settle(h: &mut Harness, what: &str, done: impl Fn(&Emulator) -> bool) {
    support::emulator::settle(&mut h.emulator, &h.fetcher, "MonitoredService", what, done).await;
}

async fn refused_with(h: &mut Harness, repo: &Repo, name: &str, reason: &str) -> String {
    let commit = head(repo);
    h.fetcher.expire().await;
    settle(h, reason, |e| {
        condition(e, name, "Verified").is_some_and(|c| c.1 == reason && c.2.contains(&commit))
    })
    .await;
    let (status, _, message) = condition(&h.emulator, name, "Verified").unwrap();
    assert_eq!(status, "False", "{message}");
    assert!(message.contains("still running"), "{message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_commits_signed_by_a_trusted_key_roll() {
    let alice = Signer::ssh("alice@example.com");
    let mallory = Signer::ssh("mallory@example.com");
    let carol = Signer::openpgp("Carol <carol@example.com>");
    let repo = Repo::new();
    repo.commit_signed(&[("app.env", "GREETING=one\n")], &alice);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&alice, &carol]));
    h.emulator.apply(service(
        "web",
        json!({"url": daemon.url(), "ref": "main", "path": "app.env",
               "verify": {"mode": "HEAD", "secretRef": {"name": "signers"}}}),
    ));
    settle(&mut h, "the signed commit", |e| greeting(e, "web") == "one").await;
    let (status, reason, message) = condition(&h.emulator, "web", "Verified").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Verified"));
    assert!(
        message.contains("alice@example.com") && message.contains("SHA256:"),
        "{message}"
    );
    assert!(
        message.contains(&head(&repo)),
        "names the commit: {message}"
    );

    // Unsigned: not rolled.
    repo.commit(&[("app.env", "GREETING=unsigned\n")]);
    let message = refused_with(&mut h, &repo, "web", "SignatureMissing").await;
    assert!(message.contains("not signed"), "{message}");
    assert_eq!(greeting(&h.emulator, "web"), "one");

    // Signed by a key nobody trusts.
    repo.commit_signed(&[("app.env", "GREETING=mallory\n")], &mallory);
    let message = refused_with(&mut h, &repo, "web", "SignatureUntrusted").await;
    assert!(message.contains("not in allowed_signers"), "{message}");
    assert_eq!(greeting(&h.emulator, "web"), "one");

    // OpenPGP, by GnuPG: rolls, and status gives the user ID and fingerprint.
    repo.commit_signed(&[("app.env", "GREETING=carol\n")], &carol);
    h.fetcher.expire().await;
    settle(&mut h, "the OpenPGP commit", |e| {
        greeting(e, "web") == "carol"
    })
    .await;
    let (_, _, message) = condition(&h.emulator, "web", "Verified").unwrap();
    assert!(
        message.contains("Carol <carol@example.com>") && message.contains("openpgp"),
        "{message}"
    );

    // Mallory's key added to the Secret: the commit already fetched rolls at the next
    // sync (the same commit is read again from the cache; no poll is due).
    repo.commit_signed(&[("app.env", "GREETING=mallory again\n")], &mallory);
    let _ = refused_with(&mut h, &repo, "web", "SignatureUntrusted").await;
    let listed_before = h.fetcher.network_fetches();
    h.emulator.apply(keys_secret(&[&alice, &carol, &mallory]));
    settle(&mut h, "the key added", |e| {
        greeting(e, "web") == "mallory again"
    })
    .await;
    assert_eq!(
        h.fetcher.network_fetches(),
        listed_before,
        "no refetch for a key change"
    );

    // And removed: what runs is refused at the next sync, and stays running.
    h.emulator.apply(keys_secret(&[&alice, &carol]));
    settle(&mut h, "the key removed", |e| {
        condition(e, "web", "Verified").is_some_and(|c| c.1 == "SignatureUntrusted")
    })
    .await;
    assert_eq!(greeting(&h.emulator, "web"), "mallory again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_revoked_by_gnupg_trusts_nothing() {
    let mut carol = Signer::openpgp("Carol <carol@example.com>");
    let repo = Repo::new();
    repo.commit_signed(&[("app.env", "GREETING=carol\n")], &carol);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&carol]));
    h.emulator.apply(service(
        "web",
        json!({"url": daemon.url(), "ref": "main", "path": "app.env",
               "verify": {"mode": "HEAD", "secretRef": {"name": "signers"}}}),
    ));
    settle(&mut h, "the signed commit", |e| {
        greeting(e, "web") == "carol"
    })
    .await;

    // The owner revokes the key and the Secret gets the key as published after that.
    carol.revoke();
    h.emulator.apply(keys_secret(&[&carol]));
    settle(&mut h, "the revocation", |e| {
        condition(e, "web", "Verified").is_some_and(|c| c.1 == "SignatureUntrusted")
    })
    .await;
    let (status, _, message) = condition(&h.emulator, "web", "Verified").unwrap();
    assert_eq!(status, "False");
    assert!(message.contains("revoked"), "{message}");
    assert_eq!(greeting(&h.emulator, "web"), "carol", "what runs stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_signature_is_invalid() {
    let alice = Signer::ssh("alice@example.com");
    let repo = Repo::new();
    repo.commit_signed(&[("app.env", "GREETING=one\n")], &alice);
    // The same tree and signature under another message: a commit whose signature was
    // made over other bytes.
    let work = repo.root.path().join("work");
    let raw = std::process::Command::new("git")
        .args(["cat-file", "commit", "HEAD"])
        .current_dir(&work)
        .output()
        .unwrap()
        .stdout;
    let tampered = String::from_utf8(raw)
        .unwrap()
        .replace("signed change", "tampered change");
    let mut write = std::process::Command::new("git")
        .args(["hash-object", "-t", "commit", "-w", "--stdin"])
        .current_dir(&work)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut write.stdin.take().unwrap(), tampered.as_bytes()).unwrap();
    let forged = String::from_utf8(write.wait_with_output().unwrap().stdout).unwrap();
    let pushed = std::process::Command::new("git")
        .args([
            "push",
            "-q",
            "-f",
            "origin",
            &format!("{}:refs/heads/forged", forged.trim()),
        ])
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&alice]));
    h.emulator.apply(service(
        "web",
        json!({"url": daemon.url(), "ref": "forged", "path": "app.env",
               "verify": {"secretRef": {"name": "signers"}}}),
    ));
    settle(&mut h, "the forged commit", |e| {
        condition(e, "web", "Verified").is_some_and(|c| c.1 == "SignatureInvalid")
    })
    .await;
    let (_, _, message) = condition(&h.emulator, "web", "Verified").unwrap();
    assert!(
        message.contains(forged.trim()),
        "names the commit: {message}"
    );
    assert!(greeting(&h.emulator, "web").is_null(), "nothing rolled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_mode_rolls_only_a_signed_annotated_tag() {
    let alice = Signer::ssh("alice@example.com");
    let repo = Repo::new();
    repo.commit(&[("app.env", "GREETING=released\n")]);
    repo.tag_signed("v1.0.0", &alice);
    repo.commit(&[("app.env", "GREETING=unsigned release\n")]);
    repo.tag_annotated("v1.1.0");
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&alice]));
    let verify = json!({"mode": "Tag", "secretRef": {"name": "signers"}});
    h.emulator.apply(service(
        "signed",
        json!({"url": daemon.url(), "ref": "v1.0.0", "path": "app.env", "verify": verify}),
    ));
    h.emulator.apply(service(
        "unsigned",
        json!({"url": daemon.url(), "ref": "v1.1.0", "path": "app.env", "verify": verify}),
    ));
    h.emulator.apply(service(
        "branch",
        json!({"url": daemon.url(), "ref": "main", "path": "app.env", "verify": verify}),
    ));
    settle(&mut h, "the three verdicts", |e| {
        ["signed", "unsigned", "branch"]
            .iter()
            .all(|name| condition(e, name, "Verified").is_some())
    })
    .await;
    assert_eq!(greeting(&h.emulator, "signed"), "released");
    let (status, _, message) = condition(&h.emulator, "signed", "Verified").unwrap();
    assert_eq!(status, "True");
    assert!(
        message.starts_with("tag ") && message.contains("alice@example.com"),
        "{message}"
    );
    for name in ["unsigned", "branch"] {
        let (status, reason, message) = condition(&h.emulator, name, "Verified").unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "SignatureMissing"),
            "{name}: {message}"
        );
        assert!(greeting(&h.emulator, name).is_null(), "{name}");
    }
}

/// APIMock's git definitions take the same `verify` block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apimock_serves_only_a_signed_definition() {
    const DEFINITION: &str = "openapi: 3.0.3\ninfo: {title: shop, version: '1'}\npaths:\n  /items:\n    get:\n      responses:\n        '200': {description: ok}\n";
    let carol = Signer::openpgp("Carol <carol@example.com>");
    let repo = Repo::new();
    repo.commit(&[("api/openapi.yaml", DEFINITION)]);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&carol]));
    h.emulator.apply(json!({
        "apiVersion": "apirator.io/v1alpha1", "kind": "APIMock",
        "metadata": {"name": "shop", "namespace": "team-a"},
        "spec": {"definitionFrom": {"git": {"url": daemon.url(), "ref": "main", "path": "api",
                  "verify": {"secretRef": {"name": "signers"}}}}},
    }));
    let verified = |e: &Emulator| {
        e.get("apirator.io/v1alpha1", "APIMock", "team-a", "shop")
            .and_then(|m| {
                m["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Verified")
                    .map(|c| (c["status"].clone(), c["reason"].clone()))
            })
    };
    settle_mock(&mut h, "the unsigned definition", |e| {
        verified(e) == Some((json!("False"), json!("SignatureMissing")))
    })
    .await;
    assert!(
        h.emulator
            .get("v1", "ConfigMap", "team-a", "shop")
            .is_none()
    );

    repo.commit_signed(
        &[("api/openapi.yaml", &DEFINITION.replace("'1'", "'2'"))],
        &carol,
    );
    h.fetcher.expire().await;
    settle_mock(&mut h, "the signed definition", |e| {
        verified(e) == Some((json!("True"), json!("Verified")))
            && e.get("v1", "ConfigMap", "team-a", "shop").is_some()
    })
    .await;
}

async fn settle_mock(h: &mut Harness, what: &str, done: impl Fn(&Emulator) -> bool) {
    support::emulator::settle(&mut h.emulator, &h.fetcher, "APIMock", what, done).await;
}

/// A range with `verify: {mode: Tag}`: the highest release tag is picked, and it rolls
/// only when it is signed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semver_range_with_tag_mode_rolls_only_a_signed_release() {
    let alice = Signer::ssh("alice@example.com");
    let repo = Repo::new();
    repo.commit(&[("app.env", "GREETING=one\n")]);
    repo.tag_signed("v1.0.0", &alice);
    let daemon = GitDaemon::start(&repo);
    let mut h = support::source_harness(support::loopback_policy(&["git"])).await;
    h.emulator.apply(keys_secret(&[&alice]));
    h.emulator.apply(service(
        "web",
        json!({"url": daemon.url(), "semver": "^1", "path": "app.env",
               "verify": {"mode": "Tag", "secretRef": {"name": "signers"}}}),
    ));
    settle(&mut h, "the signed release", |e| {
        greeting(e, "web") == "one"
    })
    .await;

    // A newer release tag that is annotated but unsigned: picked, refused, not rolled.
    repo.commit(&[("app.env", "GREETING=two\n")]);
    repo.tag_annotated("v1.1.0");
    h.fetcher.expire().await;
    settle(&mut h, "the unsigned release", |e| {
        condition(e, "web", "Verified").is_some_and(|c| c.1 == "SignatureMissing")
    })
    .await;
    let (_, _, message) = condition(&h.emulator, "web", "Verified").unwrap();
    assert!(message.contains("tag v1.1.0"), "{message}");
    assert_eq!(greeting(&h.emulator, "web"), "one");

    // Signed as v1.2.0: it rolls.
    repo.tag_signed("v1.2.0", &alice);
    h.fetcher.expire().await;
    settle(&mut h, "the next signed release", |e| {
        greeting(e, "web") == "two"
    })
    .await;
}
