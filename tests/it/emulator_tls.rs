//! What a real cluster sends a hook over TLS: the webhook's `caBundle` (inline, or from
//! a Secret or ConfigMap), a client certificate from `clientTLS` (mutual TLS), and Go's
//! certificate rule that a server certificate found in the trusted pool is trusted as
//! it is (crypto/x509 `Verify`: `opts.Roots.contains(c)`), names still checked.

use std::sync::Arc;

use base64::Engine;
use metahooks::emulate::{Emulator, Kinds, Registration, Rule};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::servers::Pki;

/// An https hook on loopback answering every call with an empty, ready answer, with this
/// server configuration (a client certificate required or not). Returns its base URL.
async fn https_hook(config: Arc<rustls::ServerConfig>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut stream) = acceptor.accept(tcp).await else {
                    return;
                };
                // One request per connection: the head, then Content-Length bytes.
                let mut seen = Vec::new();
                let mut buffer = [0u8; 8192];
                let body_starts = loop {
                    let Ok(read) = stream.read(&mut buffer).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buffer[..read]);
                    if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                };
                let head = String::from_utf8_lossy(&seen[..body_starts]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while seen.len() < body_starts + length {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => seen.extend_from_slice(&buffer[..read]),
                    }
                }
                let body = br#"{"status": {"ok": true}, "children": []}"#;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("https://localhost:{port}")
}

fn things() -> Kinds {
    let mut kinds = Kinds::default();
    kinds.learn(
        &json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": "x"}}),
    );
    kinds
}

/// A registration whose sync webhook has these extra fields, an emulator calling `base`,
/// and a Thing; `objects` (Secrets, ConfigMaps) applied first.
fn tls_emulator(base: &str, webhook: Value, objects: &[Value]) -> Emulator {
    endpoint_emulator(base, webhook, json!([]), objects)
}

/// As [`tls_emulator`], with these `spec.endpointConfigs`.
fn endpoint_emulator(base: &str, webhook: Value, endpoints: Value, objects: &[Value]) -> Emulator {
    let mut hook = json!({"url": "https://hooks.example/sync"});
    for (field, value) in webhook.as_object().unwrap() {
        hook[field] = value.clone();
    }
    let registration = Registration::parse(
        json!({"apiVersion": "metacontroller.k8s.io/v1alpha1", "kind": "CompositeController",
               "metadata": {"name": "things"},
               "spec": {"generateSelector": true,
                        "parentResource": {"apiVersion": "example.com/v1", "resource": "things"},
                        "childResources": [{"apiVersion": "v1", "resource": "configmaps"}],
                        "endpointConfigs": endpoints,
                        "hooks": {"sync": {"version": "v2", "webhook": hook}}}}),
        &things(),
    )
    .unwrap();
    let mut emulator = Emulator::new(base, vec![registration]);
    emulator.kinds = things();
    emulator.stop_at_first = false;
    for object in objects {
        emulator.apply(object.clone());
    }
    emulator.apply(json!({"apiVersion": "example.com/v1", "kind": "Thing",
                          "metadata": {"name": "one", "namespace": "team"}, "spec": {}}));
    emulator
}

fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    let data: serde_json::Map<String, Value> = data
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                json!(base64::engine::general_purpose::STANDARD.encode(v)),
            )
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "metacontroller"}, "data": data})
}

async fn ends_ready(emulator: &mut Emulator) -> bool {
    emulator.converge(4).await.unwrap();
    emulator
        .get("example.com/v1", "Thing", "team", "one")
        .is_some_and(|t| t["status"]["ok"] == true)
}

#[tokio::test]
async fn client_tls_and_a_ca_bundle_reach_a_hook_that_requires_a_client_certificate() {
    let pki = Pki::new(true);
    let base = https_hook(pki.server_files().server_config().unwrap()).await;
    let client = secret(
        "hook-client",
        &[
            ("tls.crt", &pki.client_cert_pem),
            ("tls.key", &pki.client_key_pem),
        ],
    );
    let bundle = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "hook-ca", "namespace": "metacontroller"}, "data": {"ca.crt": pki.ca_pem}});
    let client_tls = json!({"secretRef": {"name": "hook-client", "namespace": "metacontroller"}});
    let cases = [
        json!({"caBundle": {"inline": pki.ca_pem}, "clientTLS": client_tls}),
        json!({"caBundle": {"configMapRef": {"name": "hook-ca", "namespace": "metacontroller"}},
               "clientTLS": client_tls}),
    ];
    for webhook in cases {
        let mut emulator = tls_emulator(&base, webhook.clone(), &[client.clone(), bundle.clone()]);
        assert!(
            ends_ready(&mut emulator).await,
            "{webhook}: {:?}",
            emulator.findings
        );
    }
    // Without the client certificate the server ends the handshake: no answer.
    let mut emulator = tls_emulator(&base, json!({"caBundle": {"inline": pki.ca_pem}}), &[]);
    assert!(!ends_ready(&mut emulator).await);
    assert!(
        emulator
            .findings
            .iter()
            .any(|f| f.rule == Rule::NonOkAnswer),
        "{:?}",
        emulator.findings
    );
    // A Secret that is not there: Metacontroller cannot create the webhook.
    let mut emulator = tls_emulator(
        &base,
        json!({"caBundle": {"inline": pki.ca_pem}, "clientTLS": client_tls}),
        &[],
    );
    assert!(!ends_ready(&mut emulator).await);
    assert!(
        emulator.findings.iter().any(|f| f
            .message
            .contains("can't get clientTLS secret metacontroller/hook-client: secrets \"hook-client\" not found")),
        "{:?}",
        emulator.findings
    );
}

/// A self-signed server certificate marked as a CA (what `openssl req -x509` makes),
/// given as the CA bundle: Go trusts it as it is, for its own names only.
#[tokio::test]
async fn a_self_signed_certificate_given_as_the_ca_is_trusted_as_go_trusts_it() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    for (name, trusted) in [("localhost", true), ("elsewhere.example", false)] {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("tls.key"), key.serialize_pem()).unwrap();
        let files = metahooks::server::TlsFiles {
            cert: dir.path().join("tls.crt"),
            key: dir.path().join("tls.key"),
            client_ca: None,
        };
        let base = https_hook(files.server_config().unwrap()).await;
        let mut emulator = tls_emulator(&base, json!({"caBundle": {"inline": cert.pem()}}), &[]);
        assert_eq!(
            ends_ready(&mut emulator).await,
            trusted,
            "{name}: {:?}",
            emulator.findings
        );
    }
}

/// ResolveEndpointConfig and matchEndpointConfig (pkg/hooks/endpoint_config.go): a
/// webhook with no TLS or auth settings of its own takes those of the first entry whose
/// host is its URL's (`hooks.example` matches `https://hooks.example/…`, port 443 or not);
/// one with settings of its own ignores the entries.
#[tokio::test]
async fn endpoint_configs_apply_by_host_unless_the_webhook_has_settings_of_its_own() {
    let pki = Pki::new(true);
    let base = https_hook(pki.server_files().server_config().unwrap()).await;
    let client = secret(
        "hook-client",
        &[
            ("tls.crt", &pki.client_cert_pem),
            ("tls.key", &pki.client_key_pem),
        ],
    );
    let entry = |host: &str| {
        json!([{"host": host, "caBundle": {"inline": pki.ca_pem},
                "clientTLS": {"secretRef": {"name": "hook-client", "namespace": "metacontroller"}}}])
    };
    for (host, reaches) in [
        ("hooks.example", true),
        ("HOOKS.example:443", true),
        ("hooks.example:8443", false),
        ("other.example", false),
    ] {
        let mut emulator =
            endpoint_emulator(&base, json!({}), entry(host), std::slice::from_ref(&client));
        assert_eq!(
            ends_ready(&mut emulator).await,
            reaches,
            "{host}: {:?}",
            emulator.findings
        );
    }
    // A caBundle on the webhook itself: the entry's client certificate is not used.
    let mut emulator = endpoint_emulator(
        &base,
        json!({"caBundle": {"inline": pki.ca_pem}}),
        entry("hooks.example"),
        &[client],
    );
    assert!(!ends_ready(&mut emulator).await);
}
