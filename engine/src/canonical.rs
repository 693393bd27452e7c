//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! OWNER: canonical/key work stream. Contract (other crates build on these signatures):
//! - [`canonicalize_bytes`] parses JSON text strictly and returns its canonical bytes, rejecting what cannot be
//!   canonicalised (duplicate object keys, lone surrogates, numbers outside IEEE-754 doubles, invalid UTF-8, nesting
//!   deeper than [`DEPTH_MAX`]) with a specific [`Error`] that names the problem and its byte offset.
//! - [`write_value`] canonicalises an already parsed `serde_json::Value` (whatever serde_json's `preserve_order`).

/// The deepest nesting of arrays and objects accepted.
pub const DEPTH_MAX: usize = 128;

/// Why a document cannot be canonicalised. Offsets are byte offsets into the input text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Syntax { message: String, offset: usize },
    InvalidUtf8 { offset: usize },
    DuplicateKey { key: String, offset: usize },
    LoneSurrogate { offset: usize },
    NumberOutOfRange { text: String, offset: usize },
    TooDeep { depth_max: usize, offset: usize },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Syntax { message, offset } => write!(f, "invalid JSON at byte {offset}: {message}"),
            Error::InvalidUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            Error::DuplicateKey { key, offset } => write!(f, "duplicate object key {key:?} at byte {offset}"),
            Error::LoneSurrogate { offset } => write!(f, "lone UTF-16 surrogate in a string at byte {offset}"),
            Error::NumberOutOfRange { text, offset } => {
                write!(f, "number {text} at byte {offset} is outside the range of IEEE-754 doubles")
            }
            Error::TooDeep { depth_max, offset } => {
                write!(f, "nesting deeper than {depth_max} levels at byte {offset}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Parses `bytes` as JSON and returns its RFC 8785 canonical form.
pub fn canonicalize_bytes(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Error::Syntax { message: e.to_string(), offset: 0 })?;
    let mut out = Vec::new();
    write_value(&value, &mut out)?;
    Ok(out)
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(value: &serde_json::Value, out: &mut Vec<u8>) -> Result<(), Error> {
    // Placeholder until the canonical work stream lands: not RFC 8785 for numbers or key order.
    serde_json::to_writer(out, value).map_err(|e| Error::Syntax { message: e.to_string(), offset: 0 })
}

/// The canonical form of `value` as a new buffer.
pub fn to_vec(value: &serde_json::Value) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(128);
    write_value(value, &mut out)?;
    Ok(out)
}
