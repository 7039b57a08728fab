//! What a real cluster sends a hook over TLS: the webhook's `caBundle` (inline, or from
//! a Secret or ConfigMap), a client certificate from `clientTLS` (mutual TLS), and Go's
//! certificate rule that a server certificate found in the trusted pool is trusted as
//! it is (crypto/x509 `Verify`: `opts.Roots.contains(c)`), names still checked.

use base64::Engine;
use metahooks::emulate::{Emulator, Kinds, Registration, Rule};
use serde_json::{Value, json};

use crate::support::servers::{Pki, serve_app};

/// An https hook on loopback (with the PKI's server certificate, asking for a client
/// certificate when the PKI says so) answering every call with an empty, ready answer.
async fn https_hook(pki: &Pki) -> String {
    let app = axum::Router::new().route(
        "/sync",
        axum::routing::post(|| async {
            axum::Json(json!({"status": {"ok": true}, "children": []}))
        }),
    );
    let port = serve_app(app, Some(pki)).await;
    format!("https://localhost:{port}")
}

/// The client certificate Secret `hook-client` of `pki`.
fn client_secret(pki: &Pki) -> Value {
    secret(
        "hook-client",
        &[
            ("tls.crt", &pki.client_cert_pem),
            ("tls.key", &pki.client_key_pem),
        ],
    )
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
    let base = https_hook(&pki).await;
    let client = client_secret(&pki);
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
        let pki = Pki {
            dir,
            ca_pem: cert.pem(),
            client_cert_pem: String::new(),
            client_key_pem: String::new(),
            require_client_cert: false,
        };
        let base = https_hook(&pki).await;
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
    let base = https_hook(&pki).await;
    let client = client_secret(&pki);
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
