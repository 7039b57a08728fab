//! Real signing keys for the signature tests: an SSH key made by `ssh-keygen` (git signs
//! with `ssh-keygen -Y sign` when `gpg.format=ssh`) and an OpenPGP key made by GnuPG in
//! a keyring of its own. Each signs through git itself.

use std::path::{Path, PathBuf};
use std::process::Command;

/// One signing identity and how git is told to use it.
pub struct Signer {
    _dir: tempfile::TempDir,
    /// `git -c …` settings that make `commit -S` and `tag -s` sign with this key.
    config: Vec<String>,
    /// GNUPGHOME, for OpenPGP keys.
    gnupg_home: Option<PathBuf>,
    /// What a verify Secret holds to trust this key: (key name, text).
    pub trusted: (String, String),
    /// The principal (SSH) or user ID (OpenPGP) status should name.
    pub identity: String,
}

impl Signer {
    /// An ed25519 SSH key trusted for `principal` in the `git` namespace.
    pub fn ssh(principal: &str) -> Signer {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id_ed25519");
        run(Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", principal, "-f"])
            .arg(&key));
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let line = format!("{principal} namespaces=\"git\" {}", public.trim());
        Signer {
            config: vec![
                "gpg.format=ssh".to_owned(),
                format!("user.signingkey={}", key.display()),
            ],
            gnupg_home: None,
            trusted: ("allowed_signers".to_owned(), line + "\n"),
            identity: principal.to_owned(),
            _dir: dir,
        }
    }

    /// An ed25519 OpenPGP key for `user_id` ("Name <mail>") in a fresh GnuPG keyring.
    pub fn openpgp(user_id: &str) -> Signer {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("gnupg");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
        run(Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args(["--batch", "--quiet", "--passphrase", "", "--quick-gen-key"])
            .args([user_id, "ed25519", "sign", "never"]));
        let exported = Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args(["--batch", "--armor", "--export", user_id])
            .output()
            .unwrap();
        assert!(exported.status.success());
        let armored = String::from_utf8(exported.stdout).unwrap();
        assert!(armored.contains("BEGIN PGP PUBLIC KEY BLOCK"), "{armored}");
        Signer {
            config: vec![
                "gpg.format=openpgp".to_owned(),
                format!("user.signingkey={user_id}"),
            ],
            gnupg_home: Some(home),
            trusted: ("team.asc".to_owned(), armored),
            identity: user_id.to_owned(),
            _dir: dir,
        }
    }

    /// Revokes this OpenPGP key the way its owner would: GnuPG's own revocation
    /// certificate (made with the key) is imported, and the trusted text becomes the
    /// key as exported after that, revocation included.
    pub fn revoke(&mut self) {
        let home = self.gnupg_home.clone().expect("an OpenPGP signer");
        let certificates: Vec<PathBuf> = std::fs::read_dir(home.join("openpgp-revocs.d"))
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .collect();
        assert_eq!(certificates.len(), 1, "{certificates:?}");
        // GnuPG guards the certificate against an accidental import with a leading ':'.
        let text = std::fs::read_to_string(&certificates[0]).unwrap();
        let armored = text.replace(
            ":-----BEGIN PGP PUBLIC KEY BLOCK-----",
            "-----BEGIN PGP PUBLIC KEY BLOCK-----",
        );
        let certificate = home.join("revocation.asc");
        std::fs::write(&certificate, armored).unwrap();
        run(Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args(["--batch", "--quiet", "--import"])
            .arg(&certificate));
        let exported = Command::new("gpg")
            .env("GNUPGHOME", &home)
            .args(["--batch", "--armor", "--export", &self.identity])
            .output()
            .unwrap();
        assert!(exported.status.success());
        let armored = String::from_utf8(exported.stdout).unwrap();
        assert_ne!(
            armored, self.trusted.1,
            "the export now carries the revocation"
        );
        self.trusted.1 = armored;
    }

    /// `git` in `dir` with this key's settings (and author/committer names).
    pub fn git(&self, dir: &Path) -> Command {
        let mut command = Command::new("git");
        for setting in &self.config {
            command.arg("-c").arg(setting);
        }
        command
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com");
        if let Some(home) = &self.gnupg_home {
            command.env("GNUPGHOME", home);
        }
        command
    }
}

impl Drop for Signer {
    fn drop(&mut self) {
        // GnuPG started an agent for the keyring; it would outlive the test.
        if let Some(home) = &self.gnupg_home {
            let _ = Command::new("gpgconf")
                .env("GNUPGHOME", home)
                .args(["--kill", "gpg-agent"])
                .output();
        }
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("the tool runs");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}
