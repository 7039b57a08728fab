//! Content codings of an answer, undone as the body arrives: one layer of gzip (`x-gzip`
//! too) or deflate (zlib), compared without regard to case as RFC 9110 has it; any
//! other coding is refused by name, never taken for the content.
//!
//! A decoder that takes bytes and gives little or nothing back (a gzip header whose name
//! never ends, endless empty blocks, empty blocks with a byte between them) is cut off
//! once what it took passes [`SLACK_BYTES`] plus [`BYTES_IN_PER_BYTE_OUT`] times what it
//! gave: honest compressed data gives more than it takes, and stored data as much.

use std::io::Write;

/// Compressed bytes that may be taken before output must keep pace (a gzip header with
/// its optional fields, a first block's tables).
pub const SLACK_BYTES: u64 = 64 * 1024;
/// Compressed bytes taken per byte given, at most, past the slack.
pub const BYTES_IN_PER_BYTE_OUT: u64 = 4;

/// Why an answer's coding cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodingError {
    /// A coding this client does not decode (or more than one layer).
    #[error(
        "the answer is in content coding {0:?}, which is not read (gzip and deflate are, one layer)"
    )]
    Unsupported(String),
    /// The compressed bytes are not valid.
    #[error("the answer's {coding} data is not valid: {detail}")]
    Invalid {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// The decoder's words.
        detail: String,
    },
    /// Input that gives (almost) no output (see the module docs).
    #[error(
        "the answer's {coding} data decodes to nothing: {consumed} compressed bytes gave {produced} bytes"
    )]
    Stalled {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// Bytes taken.
        consumed: u64,
        /// Bytes given.
        produced: u64,
    },
}

/// An answer's body decoder.
pub enum Decoder {
    /// No coding: bytes pass as they are.
    Identity,
    /// gzip or deflate, decoding into the vector it writes to.
    Inflate {
        /// `gzip` or `deflate`, as messages name it.
        coding: &'static str,
        /// The decoder.
        inner: Box<Inflater>,
        /// Bytes taken so far.
        consumed: u64,
        /// Bytes given so far.
        produced: u64,
    },
}

/// flate2's streaming decoders, which parse their headers as bytes arrive.
pub enum Inflater {
    /// `gzip`, `x-gzip`.
    Gzip(flate2::write::GzDecoder<Vec<u8>>),
    /// `deflate`: zlib-wrapped, as RFC 9110 defines it.
    Zlib(flate2::write::ZlibDecoder<Vec<u8>>),
}

impl Decoder {
    /// The decoder for a `Content-Encoding` header's value (absent: none).
    ///
    /// # Errors
    /// A coding that is not read, or more than one.
    pub fn for_coding(header: Option<&str>) -> Result<Decoder, CodingError> {
        let coding = header.map(str::trim).unwrap_or_default();
        let named = coding.to_ascii_lowercase();
        match named.as_str() {
            "" | "identity" => Ok(Decoder::Identity),
            "gzip" | "x-gzip" => Ok(Decoder::inflate(
                "gzip",
                Inflater::Gzip(flate2::write::GzDecoder::new(Vec::new())),
            )),
            "deflate" => Ok(Decoder::inflate(
                "deflate",
                Inflater::Zlib(flate2::write::ZlibDecoder::new(Vec::new())),
            )),
            _ => Err(CodingError::Unsupported(shown(coding))),
        }
    }

    fn inflate(coding: &'static str, inner: Inflater) -> Decoder {
        Decoder::Inflate {
            coding,
            inner: Box::new(inner),
            consumed: 0,
            produced: 0,
        }
    }

    /// What `input` decodes to (possibly nothing yet).
    ///
    /// # Errors
    /// Invalid data, or input that has given no output for too long.
    pub fn push(&mut self, input: &[u8]) -> Result<Vec<u8>, CodingError> {
        match self {
            Decoder::Identity => Ok(input.to_vec()),
            Decoder::Inflate {
                coding,
                inner,
                consumed,
                produced,
            } => {
                let coding = *coding;
                let invalid = |e: std::io::Error| CodingError::Invalid {
                    coding,
                    detail: e.to_string(),
                };
                let output = match inner.as_mut() {
                    Inflater::Gzip(decoder) => {
                        decoder.write_all(input).map_err(invalid)?;
                        std::mem::take(decoder.get_mut())
                    }
                    Inflater::Zlib(decoder) => {
                        decoder.write_all(input).map_err(invalid)?;
                        std::mem::take(decoder.get_mut())
                    }
                };
                *consumed += input.len() as u64;
                *produced += output.len() as u64;
                let allowed =
                    SLACK_BYTES.saturating_add(produced.saturating_mul(BYTES_IN_PER_BYTE_OUT));
                if *consumed > allowed {
                    return Err(CodingError::Stalled {
                        coding,
                        consumed: *consumed,
                        produced: *produced,
                    });
                }
                Ok(output)
            }
        }
    }

    /// The rest once the body has ended.
    ///
    /// # Errors
    /// The compressed data ended before its end.
    pub fn finish(self) -> Result<Vec<u8>, CodingError> {
        match self {
            Decoder::Identity => Ok(Vec::new()),
            Decoder::Inflate { coding, inner, .. } => {
                let invalid = |e: std::io::Error| CodingError::Invalid {
                    coding,
                    detail: e.to_string(),
                };
                match *inner {
                    Inflater::Gzip(decoder) => decoder.finish().map_err(invalid),
                    Inflater::Zlib(decoder) => decoder.finish().map_err(invalid),
                }
            }
        }
    }
}

/// A coding as a message may quote it: short, printable.
fn shown(coding: &str) -> String {
    const MAX_CHARS: usize = 64;
    let printable: String = coding
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .take(MAX_CHARS)
        .collect();
    if coding.chars().count() > MAX_CHARS {
        format!("{printable}… (cut at {MAX_CHARS} characters)")
    } else {
        printable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn decode(coding: &str, input: &[u8]) -> Result<Vec<u8>, CodingError> {
        let mut decoder = Decoder::for_coding(Some(coding))?;
        let mut out = Vec::new();
        for piece in input.chunks(7) {
            out.extend(decoder.push(piece)?);
        }
        out.extend(decoder.finish()?);
        Ok(out)
    }

    #[test]
    fn gzip_is_read_under_any_case_and_as_x_gzip() {
        let text = b"KEY=value\n".repeat(100);
        for coding in ["gzip", "GZIP", "x-gzip", " Gzip "] {
            assert_eq!(decode(coding, &gzip(&text)).unwrap(), text, "{coding}");
        }
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        zlib.write_all(&text).unwrap();
        assert_eq!(decode("Deflate", &zlib.finish().unwrap()).unwrap(), text);
        assert_eq!(decode("identity", b"plain").unwrap(), b"plain");
    }

    #[test]
    fn other_codings_and_layers_are_refused_by_name() {
        for coding in ["br", "zstd", "gzip, gzip", "compress", "gzip,identity"] {
            let refused = Decoder::for_coding(Some(coding)).err();
            assert_eq!(
                refused,
                Some(CodingError::Unsupported(coding.to_owned())),
                "{coding}"
            );
        }
    }

    #[test]
    fn a_gzip_header_that_never_ends_is_cut_off() {
        // FLG.FNAME set, and a name that goes on for ever.
        let mut decoder = Decoder::for_coding(Some("gzip")).unwrap();
        let head = [0x1f, 0x8b, 8, 0x08, 0, 0, 0, 0, 0, 0xff];
        assert!(decoder.push(&head).unwrap().is_empty());
        let name = vec![b'a'; 64 * 1024];
        let mut pushed = head.len() as u64;
        let error = loop {
            match decoder.push(&name) {
                Ok(out) => assert!(out.is_empty()),
                Err(error) => break error,
            }
            pushed += name.len() as u64;
            assert!(pushed < 4 * SLACK_BYTES, "never cut off");
        };
        // flate2 bounds a header field itself; else the pace rule would.
        assert!(
            matches!(error, CodingError::Stalled { consumed, .. } if consumed > SLACK_BYTES)
                || error.to_string().contains("header field too long"),
            "{error}"
        );
    }

    #[test]
    fn endless_empty_deflate_blocks_are_cut_off() {
        // A zlib header, then stored blocks of length 0 (not final), again and again.
        let mut decoder = Decoder::for_coding(Some("deflate")).unwrap();
        assert!(decoder.push(&[0x78, 0x01]).unwrap().is_empty());
        let empty_block = [0x00, 0x00, 0x00, 0xff, 0xff];
        let blocks = empty_block.repeat(16 * 1024);
        let mut pushed = 0u64;
        let error = loop {
            match decoder.push(&blocks) {
                Ok(out) => assert!(out.is_empty()),
                Err(error) => break error,
            }
            pushed += blocks.len() as u64;
            assert!(pushed < 4 * SLACK_BYTES, "never cut off");
        };
        assert!(matches!(error, CodingError::Stalled { .. }), "{error}");
    }

    #[test]
    fn empty_blocks_with_a_byte_between_them_are_cut_off_too() {
        // A zlib header, then again and again: 64 empty stored blocks and a stored block
        // of one byte. Output never stops, but falls ever further behind.
        let mut decoder = Decoder::for_coding(Some("deflate")).unwrap();
        assert!(decoder.push(&[0x78, 0x01]).unwrap().is_empty());
        let mut round = [0x00u8, 0x00, 0x00, 0xff, 0xff].repeat(64);
        round.extend_from_slice(&[0x00, 0x01, 0x00, 0xfe, 0xff, b'x']);
        let mut pushed = 0u64;
        let error = loop {
            match decoder.push(&round) {
                Ok(_) => {}
                Err(error) => break error,
            }
            pushed += round.len() as u64;
            assert!(pushed < 4 * SLACK_BYTES, "never cut off");
        };
        assert!(
            matches!(error, CodingError::Stalled { produced, .. } if produced > 0),
            "{error}"
        );
    }

    #[test]
    fn stored_data_is_given_as_fast_as_it_is_taken() {
        // Incompressible data is stored: about as many bytes out as in.
        let mut noise = Vec::with_capacity(1 << 20);
        let mut state = 0x2545_f491_u32;
        for _ in 0..(1 << 20) {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            noise.push(state as u8);
        }
        assert_eq!(decode("gzip", &gzip(&noise)).unwrap(), noise);
    }

    #[test]
    fn honest_data_that_compresses_well_is_never_taken_for_a_stall() {
        let text = vec![b'x'; 8 * 1024 * 1024];
        assert_eq!(decode("gzip", &gzip(&text)).unwrap().len(), text.len());
    }

    #[test]
    fn a_long_or_odd_coding_is_quoted_short() {
        let coding = format!("x{}", "\u{7}".repeat(100));
        let Err(CodingError::Unsupported(shown)) = Decoder::for_coding(Some(&coding)) else {
            panic!("refused");
        };
        assert!(shown.len() < 100 && !shown.contains('\u{7}'), "{shown}");
    }
}
