//! git's `allowed_signers` file (ssh-keygen(1), "ALLOWED SIGNERS"): one key per line,
//! `principals [options] keytype base64-key [comment]`. The options read are
//! `namespaces="…"` (the key signs git objects only when the list names `git`);
//! `cert-authority`, `valid-after` and `valid-before` are refused by name rather than
//! ignored, since ignoring them would trust more than the file says.

use ssh_key::PublicKey;

/// One trusted key.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    /// The principals (comma-separated patterns), as written.
    pub principals: String,
    /// The namespaces it may sign for (None: any).
    pub namespaces: Option<Vec<String>>,
    /// The key.
    pub key: PublicKey,
}

/// The lines most read from one Secret key: a file, not a directory of the world.
const MAX_LINES: usize = 1024;

/// Reads a file's keys.
///
/// # Errors
/// A line does not parse, uses an option that is not supported, or the file holds
/// more than 1024 keys; the message names the line.
pub fn parse(text: &str) -> Result<Vec<AllowedSigner>, String> {
    let mut signers = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if signers.len() == MAX_LINES {
            return Err(format!("more than {MAX_LINES} keys"));
        }
        signers.push(parse_line(line).map_err(|e| format!("line {}: {e}", number + 1))?);
    }
    Ok(signers)
}

fn parse_line(line: &str) -> Result<AllowedSigner, String> {
    let mut fields = Fields(line);
    let principals = fields.next().ok_or("no principals")?;
    let mut namespaces = None;
    let mut rest = fields.0;
    // Options come before the key type; a key type never holds '=' or a quote.
    if let Some(options) = fields.next().filter(|f| !is_key_type(f)) {
        for option in split_options(&options) {
            let (name, value) = option.split_once('=').unwrap_or((option.as_str(), ""));
            let value = value.trim_matches('"');
            match name.to_ascii_lowercase().as_str() {
                "namespaces" => {
                    namespaces = Some(value.split(',').map(|n| n.trim().to_owned()).collect());
                }
                "cert-authority" | "valid-after" | "valid-before" => {
                    return Err(format!(
                        "option {name} is not supported (list the signing keys themselves, without validity windows)"
                    ));
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        rest = fields.0;
    }
    let key =
        PublicKey::from_openssh(rest.trim()).map_err(|e| format!("the key does not parse: {e}"))?;
    Ok(AllowedSigner {
        principals: principals.trim_matches('"').to_owned(),
        namespaces,
        key,
    })
}

fn is_key_type(field: &str) -> bool {
    field.starts_with("ssh-") || field.starts_with("ecdsa-") || field.starts_with("sk-")
}

/// Options are comma-separated; a quoted value may hold commas.
fn split_options(options: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in options.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Whitespace-separated fields, a double-quoted field kept whole; the rest of the line
/// stays in `.0`.
struct Fields<'a>(&'a str);

impl Fields<'_> {
    fn next(&mut self) -> Option<String> {
        let text = self.0.trim_start();
        if text.is_empty() {
            return None;
        }
        let mut quoted = false;
        let end = text
            .char_indices()
            .find(|&(_, c)| {
                if c == '"' {
                    quoted = !quoted;
                }
                c.is_whitespace() && !quoted
            })
            .map_or(text.len(), |(i, _)| i);
        self.0 = &text[end..];
        Some(text[..end].to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIONewB3YotHxts5G/xhsCX2jD/qffRAaFXegdabPlbeO";

    #[test]
    fn lines_with_and_without_options_and_comments() {
        let text = format!(
            "# team keys\n\nalice@example.com {KEY} laptop\n\"bob@example.com,ci@example.com\" namespaces=\"git,file\" {KEY}\n"
        );
        let signers = parse(&text).unwrap();
        assert_eq!(signers.len(), 2);
        assert_eq!(signers[0].principals, "alice@example.com");
        assert_eq!(signers[0].namespaces, None);
        assert_eq!(signers[1].principals, "bob@example.com,ci@example.com");
        assert_eq!(
            signers[1].namespaces,
            Some(vec!["git".to_owned(), "file".to_owned()])
        );
    }

    #[test]
    fn what_would_widen_trust_is_refused_by_name() {
        for option in ["cert-authority", "valid-before=\"20300101\""] {
            let error = parse(&format!("a@b {option} {KEY}")).unwrap_err();
            assert!(error.starts_with("line 1: option "), "{error}");
            assert!(error.contains("not supported"), "{error}");
        }
        let error = parse("a@b ssh-ed25519 not-base64").unwrap_err();
        assert!(error.contains("does not parse"), "{error}");
    }
}
