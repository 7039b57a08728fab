//! OpenPGP signatures: an armored detached signature over the commit or tag, checked
//! against the armored public keys of the parent's Secret (primary keys and their
//! bound subkeys; a revoked key or subkey trusts nothing).

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::packet::SignatureType;
use pgp::types::KeyDetails;

use super::Refusal;

/// Every key in one armored text, each with its bindings checked.
///
/// # Errors
/// The text holds no key, or a key does not parse or its self-signatures do not verify.
pub(super) fn keys(text: &str) -> Result<Vec<SignedPublicKey>, String> {
    let (found, _) = SignedPublicKey::from_armor_many(text.as_bytes())
        .map_err(|e| format!("not an armored OpenPGP public key: {e}"))?;
    let mut keys = Vec::new();
    for key in found {
        let key = key.map_err(|e| format!("an OpenPGP key does not parse: {e}"))?;
        key.verify_bindings().map_err(|e| {
            format!(
                "the key {:X} does not verify its own signatures: {e}",
                key.primary_key.fingerprint()
            )
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err("no OpenPGP public key in it".to_owned());
    }
    Ok(keys)
}

/// (method, fingerprint, user ID) of the trusted key that made `armored` over `payload`.
pub(super) fn verify(
    armored: &str,
    payload: &[u8],
    texts: &[(String, String)],
) -> Result<(&'static str, String, String), Refusal> {
    let (signature, _) = DetachedSignature::from_string(armored)
        .map_err(|e| Refusal::Invalid(format!("the OpenPGP signature does not parse: {e}")))?;
    let packet = &signature.signature;
    let fingerprints = packet.issuer_fingerprint();
    let key_ids = packet.issuer_key_id();
    let issuer = fingerprints
        .first()
        .map(|f| format!("{f:X}"))
        .or_else(|| key_ids.first().map(|k| hex::encode_upper(k.as_ref())))
        .unwrap_or_else(|| "(no issuer named)".to_owned());
    let named = |fingerprint: pgp::types::Fingerprint, key_id: pgp::types::KeyId| {
        fingerprints.iter().any(|f| **f == fingerprint) || key_ids.iter().any(|k| **k == key_id)
    };
    for (_, text) in texts {
        let Ok(keys) = keys(text) else { continue };
        for key in &keys {
            let primary = &key.primary_key;
            let identity = key
                .details
                .users
                .first()
                .map(|u| String::from_utf8_lossy(u.id.id()).into_owned())
                .unwrap_or_default();
            let shown = format!("{:X}", primary.fingerprint());
            let revoked = !key.details.revocation_signatures.is_empty();
            if named(primary.fingerprint(), primary.legacy_key_id()) {
                if revoked {
                    return Err(Refusal::Untrusted(format!("the key {shown} is revoked")));
                }
                return checked(signature.verify(primary, payload), shown, identity);
            }
            for subkey in &key.public_subkeys {
                if !named(subkey.key.fingerprint(), subkey.key.legacy_key_id()) {
                    continue;
                }
                let subkey_revoked = subkey
                    .signatures
                    .iter()
                    .any(|s| s.typ() == Some(SignatureType::SubkeyRevocation));
                if revoked || subkey_revoked {
                    return Err(Refusal::Untrusted(format!(
                        "the key {shown} (subkey {:X}) is revoked",
                        subkey.key.fingerprint()
                    )));
                }
                return checked(signature.verify(&subkey.key, payload), shown, identity);
            }
        }
    }
    Err(Refusal::Untrusted(format!(
        "the key {issuer} is not among the trusted OpenPGP keys"
    )))
}

fn checked(
    outcome: pgp::errors::Result<()>,
    fingerprint: String,
    identity: String,
) -> Result<(&'static str, String, String), Refusal> {
    match outcome {
        Ok(()) => Ok(("openpgp", fingerprint, identity)),
        Err(e) => Err(Refusal::Invalid(format!(
            "made by the trusted key {fingerprint} ({identity}), but it does not match what was signed: {e}"
        ))),
    }
}
