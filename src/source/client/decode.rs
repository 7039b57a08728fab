//! Content codings of an answer, undone as the body arrives: one layer of gzip (`x-gzip`
//! too) or deflate (zlib), compared without regard to case as RFC 9110 has it; any
//! other coding is refused by name, never taken for the content.
//!
//! A decoder that takes bytes and gives nothing back (a gzip header whose name never
//! ends, endless empty blocks) is cut off after [`STALL_BYTES`] in a row: honest
//! compressed data never goes that long without a byte of output.

use std::io::Write;

/// Compressed bytes in a row that may decode to nothing.
pub const STALL_BYTES: u64 = 1024 * 1024;

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
    /// Input that gives no output, past [`STALL_BYTES`].
    #[error(
        "the answer's {coding} data decodes to nothing: {consumed} compressed bytes in a row gave no output"
    )]
    Stalled {
        /// `gzip` or `deflate`.
        coding: &'static str,
        /// Bytes taken with no output.
        consumed: u64,
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
        /// Bytes taken since the last byte of output.
        since_output: u64,
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
            since_output: 0,
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
                since_output,
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
                if output.is_empty() {
                    *since_output += input.len() as u64;
                    if *since_output > STALL_BYTES {
                        return Err(CodingError::Stalled {
                            coding,
                            consumed: *since_output,
                        });
                    }
                } else {
                    *since_output = 0;
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
            assert!(pushed < 4 * STALL_BYTES, "never cut off");
        };
        // flate2 bounds a header field itself; else the stall rule would.
        assert!(
            matches!(error, CodingError::Stalled { consumed, .. } if consumed > STALL_BYTES)
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
            assert!(pushed < 4 * STALL_BYTES, "never cut off");
        };
        assert!(matches!(error, CodingError::Stalled { .. }), "{error}");
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
