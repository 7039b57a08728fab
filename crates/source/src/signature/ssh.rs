//! SSH signatures (git's `gpg.format=ssh`): an armored SSHSIG in the `git` namespace,
//! checked against the keys of the parent's `allowed_signers`.

use ssh_key::{HashAlg, SshSig};

use super::Refusal;
use super::allowed_signers;

/// The namespace git signs commits and tags in.
const GIT_NAMESPACE: &str = "git";

/// (method, fingerprint, principal) of the trusted key that made `armored` over
/// `payload`.
pub(super) fn verify(
    armored: &str,
    payload: &[u8],
    files: &[(String, String)],
) -> Result<(&'static str, String, String), Refusal> {
    let signature = SshSig::from_pem(armored)
        .map_err(|e| Refusal::Invalid(format!("the SSH signature does not parse: {e}")))?;
    let signing_key = signature.public_key();
    let fingerprint = ssh_key::PublicKey::from(signing_key.clone())
        .fingerprint(HashAlg::Sha256)
        .to_string();
    if signature.namespace() != GIT_NAMESPACE {
        return Err(Refusal::Invalid(format!(
            "signed in namespace {:?}, not {GIT_NAMESPACE:?}",
            signature.namespace()
        )));
    }
    let mut listed_elsewhere = false;
    for (_, text) in files {
        // Checked where the Secret was read; a file that no longer parses trusts nothing.
        let Ok(signers) = allowed_signers::parse(text) else {
            continue;
        };
        for signer in signers.iter().filter(|s| s.key.key_data() == signing_key) {
            if signer
                .namespaces
                .as_ref()
                .is_some_and(|n| !n.iter().any(|n| n == GIT_NAMESPACE))
            {
                listed_elsewhere = true;
                continue;
            }
            return match signer.key.verify(GIT_NAMESPACE, payload, &signature) {
                Ok(()) => Ok(("ssh", fingerprint, signer.principals.clone())),
                Err(e) => Err(Refusal::Invalid(format!(
                    "made by the trusted key {fingerprint} ({}), but it does not match what was signed: {e}",
                    signer.principals
                ))),
            };
        }
    }
    Err(Refusal::Untrusted(if listed_elsewhere {
        format!("the key {fingerprint} is trusted only for other namespaces than git")
    } else {
        format!("the key {fingerprint} is not in allowed_signers")
    }))
}
