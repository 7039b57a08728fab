//! Text from outside (a remote's error message, a URL from a CR) made safe to write
//! where an operator reads it: a log line, a metric label. The engine handles most of
//! it, so it lives here; the server's telemetry re-exports it.

/// Text from a CR (a source URL) as a metric label or log field: whole when short, else a
/// prefix and a hash of the whole, so that two long values stay apart and neither a
/// scrape nor a log line grows with what a CR author wrote.
pub fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    const KEPT: usize = 120;
    if text.len() <= KEPT + 16 {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = KEPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let digest = metahooks_hash::digest_hex(text.as_bytes(), 12);
    std::borrow::Cow::Owned(format!("{}…#{digest}", &text[..end]))
}

/// Text from outside (a remote's error message, a URL from a CR) as a log field: written
/// whole, with control characters escaped (`\n`, `\u{1b}`), so that it cannot end the
/// line early, forge another line or drive the terminal of whoever reads text logs.
pub struct Escaped<'a, T: std::fmt::Display + ?Sized>(pub &'a T);

impl<T: std::fmt::Display + ?Sized> std::fmt::Display for Escaped<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Escaping<'f, 'g>(&'f mut std::fmt::Formatter<'g>);
        impl std::fmt::Write for Escaping<'_, '_> {
            fn write_str(&mut self, text: &str) -> std::fmt::Result {
                for c in text.chars() {
                    if c.is_control() {
                        write!(self.0, "{}", c.escape_default())?;
                    } else {
                        self.0.write_char(c)?;
                    }
                }
                Ok(())
            }
        }
        std::fmt::Write::write_fmt(&mut Escaping(f), format_args!("{}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_keep_a_prefix_and_a_hash() {
        assert_eq!(
            bounded("https://git.example/r.git"),
            "https://git.example/r.git"
        );
        let long = format!("https://git.example/{}", "é".repeat(200_000));
        let other = format!("{long}x");
        let (a, b) = (bounded(&long), bounded(&other));
        assert!(a.len() < 200, "{}", a.len());
        assert!(a.starts_with("https://git.example/é"));
        assert_ne!(a, b, "two long values stay apart");
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let forged = "refused\n{\"level\":\"INFO\"} \u{1b}[31mred\u{7} ünïcode";
        assert_eq!(
            Escaped(forged).to_string(),
            "refused\\n{\"level\":\"INFO\"} \\u{1b}[31mred\\u{7} ünïcode"
        );
    }
}
