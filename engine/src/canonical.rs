//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! Contract (other crates build on these signatures):
//! - [`canonicalize_bytes`] parses JSON text strictly and returns its canonical bytes, rejecting what cannot be
//!   canonicalised (duplicate object keys, lone surrogates, numbers no IEEE-754 double holds (see "Numbers"), invalid
//!   UTF-8, nesting deeper than [`DEPTH_MAX`]) with a specific [`Error`] that names the problem and its byte offset.
//! - [`write_value`] canonicalises an already parsed document: a `serde_json::Value` (whatever serde_json's
//!   `preserve_order`) or the engine's [`crate::doc::Doc`] (see [`Tree`]).
//!
//! The canonical form (RFC 8785 section 3.2):
//! - no whitespace between tokens;
//! - object members sorted by the UTF-16 code units of their (unescaped) names, which differs from UTF-8 byte order
//!   when a name holds a character above U+FFFF (a surrogate pair, `D800..DBFF`) and another one a character in
//!   `U+E000..U+FFFF` at the same position. We never rely on serde_json's map order: it is UTF-8 byte order by default
//!   and insertion order under `preserve_order`;
//! - strings escaped minimally, as ECMAScript `JSON.stringify` does: `\"`, `\\`, `\b \t \n \f \r`, other controls
//!   below U+0020 as `\u00xx` (lowercase hex), everything else (including `/`, U+007F, U+2028) as raw UTF-8;
//! - numbers as IEEE-754 doubles printed by ECMAScript `Number.prototype.toString` (`1e+30`, `4.5`, `0.002`,
//!   `1e-27`, `-0` as `0`), via the `ryu-js` crate.
//!
//! Numbers: JSON text is read as doubles, rounded to nearest as RFC 8785 requires, except in three cases that are
//! rejected with [`Error::NumberOutOfRange`] because rounding would silently merge distinct inputs into one key:
//! a literal whose magnitude overflows to infinity (`1e400`), a literal with a non-zero digit that underflows to zero
//! (`1e-400`), and a literal whose value is an integer that does not stand for its double. An integer stands for the
//! double it rounds to when it is
//! - that double's exact value (`99999999999999991611392`, `1152921504606846976`);
//! - the value of that double's canonical spelling, so that canonical output reads back to itself (ECMAScript prints
//!   the double 99999999999999991611392 as `1e+23`, so `1e23` and `100000000000000000000000` are accepted);
//! - or that double rounded to the integer's own precision: its significant digits, trailing zeros dropped, number at
//!   most 17 and are what rounding the double's exact value at the place of the last of them gives. That is what C's
//!   `%.17g` (or `%.15g`, ...) prints for the double, so `9.9999999999999992e+22` is accepted.
//!
//! Put otherwise, an integer is refused when its double, printed to the integer's own precision, prints other digits:
//! the double of `9007199254740993` prints as `9007199254740992` at 16 digits, so reading the literal as a double would
//! change a digit it states, while the double of `9.9999999999999992e+22` prints as that literal at 17 digits. A
//! literal of more than 17 significant digits states more than a double holds and must be exact. Below 2^53 every
//! integer is a double's exact value, so the rule costs one comparison there. The rule reads the literal's value, not
//! its notation: `9007199254740993.0` and `9.007199254740993e15` are that same integer and rejected too. A literal that
//! is not an integer (`0.1`, `0.30000000000000004`, `5e-324`, `9007199254740993.5`) always rounds to nearest, at any
//! length, as RFC 8785 requires: most fractions (`0.1`) have no exact double, so every reader of JSON rounds them,
//! while an integer is often an identifier or an amount in cents that must not silently change. Every accepted literal
//! canonicalises to its double's canonical spelling: the rule decides only what is refused. The same rule holds for a
//! parsed `serde_json::Value`: a `u64`/`i64` that does not stand for its double is rejected rather than rounded (so
//! `u64::MAX` is rejected, `2^60` and `1152921504606847000` are accepted). A parsed `Value` has lost the notation of
//! its text (serde_json reads `9007199254740993.0` as the double `...992`), so text is held to this rule only by
//! [`canonicalize_bytes`].
//!
//! Depth: an array or object opens one level; a document whose nesting exceeds [`DEPTH_MAX`] levels is rejected with
//! [`Error::TooDeep`] (the parser recurses once per level, so this bound also bounds its stack use).

use std::cmp::Ordering;

/// The deepest nesting of arrays and objects accepted.
pub const DEPTH_MAX: usize = 128;

/// Why a document cannot be canonicalised. Offsets are byte offsets into the input text; for [`write_value`], which
/// has no input text, they are the byte offsets in the canonical output at which the offending value would start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Syntax {
        message: String,
        offset: usize,
    },
    InvalidUtf8 {
        offset: usize,
    },
    DuplicateKey {
        key: String,
        offset: usize,
    },
    LoneSurrogate {
        offset: usize,
    },
    /// A number no IEEE-754 double stands for without merging it with another input: overflow, underflow of a
    /// non-zero literal, or an integer (in any notation) that is neither exactly a double nor a double rounded to
    /// its own precision (see the module docs).
    NumberOutOfRange {
        text: String,
        offset: usize,
    },
    TooDeep {
        depth_max: usize,
        offset: usize,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Syntax { message, offset } => write!(f, "invalid JSON at byte {offset}: {message}"),
            Error::InvalidUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            Error::DuplicateKey { key, offset } => write!(f, "duplicate object key {key:?} at byte {offset}"),
            Error::LoneSurrogate { offset } => write!(f, "lone UTF-16 surrogate in a string at byte {offset}"),
            Error::NumberOutOfRange { text, offset } => {
                // The text alone tells the cases apart: a literal whose double is finite and not zero was rejected
                // as an integer that no double holds exactly. Every number is printed shortened (a double near its
                // largest has 309 integer digits, a literal may have thousands), so the message stays readable.
                let nearest = parse_f64(text).filter(|d| d.is_finite() && *d != 0.0);
                let shown = shorten_digits(text);
                match (nearest, Decimal::parse(text).integer_text()) {
                    (Some(nearest), Some(integer)) => write!(
                        f,
                        "number {shown} at byte {offset}: the integer {} cannot be represented exactly as an \
                         IEEE-754 double (the nearest is {}); send it as a string",
                        shorten_digits(&integer),
                        shorten_digits(&format!("{nearest:.0}"))
                    ),
                    _ => write!(f, "number {shown} at byte {offset} is outside the range of IEEE-754 doubles"),
                }
            }
            Error::TooDeep { depth_max, offset } => {
                write!(f, "nesting deeper than {depth_max} levels at byte {offset}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// The offset of the first array or object in JSON text `json` that opens more than `max` levels deep, if any (a
/// scan of the bytes, strings skipped; for text known to be JSON, such as a stored document).
pub fn deeper_than(json: &[u8], max: usize) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (offset, &byte) in json.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return Some(offset);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Most digits in a row that an error message prints whole; a longer run is shortened by [`shorten_digits`].
const MESSAGE_DIGITS_MAX: usize = 40;

/// `text` with every run of more than [`MESSAGE_DIGITS_MAX`] decimal digits shortened to its leading digits (up to 36,
/// without the run's trailing zeros), `…`, its last three digits and its length: the integer 17976931348623158 x
/// 10^292 is `17976931348623158…000 (309 digits)`. For error messages only: what a number is stays recognisable and
/// the message stays one short line.
pub fn shorten_digits(text: &str) -> String {
    const HEAD_MAX: usize = MESSAGE_DIGITS_MAX - 4;
    const TAIL: usize = 3;
    let mut out = String::with_capacity(text.len().min(2 * MESSAGE_DIGITS_MAX));
    let mut rest = text;
    while !rest.is_empty() {
        let run_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        if run_len == 0 {
            let other = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
            out.push_str(&rest[..other]);
            rest = &rest[other..];
            continue;
        }
        let run = &rest[..run_len];
        if run_len <= MESSAGE_DIGITS_MAX {
            out.push_str(run);
        } else {
            let head = run.trim_end_matches('0').len().clamp(1, HEAD_MAX);
            out.push_str(&format!("{}…{} ({run_len} digits)", &run[..head], &run[run_len - TAIL..]));
        }
        rest = &rest[run_len..];
    }
    out
}

/// Parses `bytes` as JSON and returns its RFC 8785 canonical form.
pub fn canonicalize_bytes(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let text = std::str::from_utf8(bytes).map_err(|e| Error::InvalidUtf8 { offset: e.valid_up_to() })?;
    let mut parser = Parser { text, bytes, pos: 0 };
    let mut out = Vec::with_capacity(bytes.len());
    parser.skip_whitespace();
    parser.value(&mut out, 0)?;
    parser.skip_whitespace();
    if parser.pos != bytes.len() {
        return Err(parser.syntax("trailing characters after the JSON value"));
    }
    Ok(out)
}

/// A parsed document the canonical writer takes: a `serde_json::Value` (whatever its map order) or the engine's own
/// [`Doc`], whose objects are already in canonical order.
pub trait Tree: Sized {
    /// What this node is.
    #[doc(hidden)]
    fn node(&self) -> Node<'_, Self>;
    /// Whether this is an object, and if so, calls `f` on each member in canonical order.
    #[doc(hidden)]
    fn for_each_member_of<'m>(
        &'m self,
        f: impl FnMut(&'m str, &'m Self) -> Result<(), Error>,
    ) -> Option<Result<(), Error>>;
}

/// One node of a [`Tree`] as the writer sees it (an object's members through [`Tree::for_each_member_of`]).
#[doc(hidden)]
pub enum Node<'a, T> {
    Null,
    Bool(bool),
    Number(&'a serde_json::Number),
    String(&'a str),
    Array(&'a [T]),
    Object,
}

impl Tree for serde_json::Value {
    fn node(&self) -> Node<'_, Self> {
        use serde_json::Value;
        match self {
            Value::Null => Node::Null,
            Value::Bool(b) => Node::Bool(*b),
            Value::Number(n) => Node::Number(n),
            Value::String(s) => Node::String(s),
            Value::Array(items) => Node::Array(items),
            Value::Object(_) => Node::Object,
        }
    }

    fn for_each_member_of<'m>(
        &'m self,
        f: impl FnMut(&'m str, &'m Self) -> Result<(), Error>,
    ) -> Option<Result<(), Error>> {
        self.as_object().map(|map| for_each_member(map, f))
    }
}

impl Tree for crate::doc::Doc {
    fn node(&self) -> Node<'_, Self> {
        use crate::doc::Doc;
        match self {
            Doc::Null => Node::Null,
            Doc::Bool(b) => Node::Bool(*b),
            Doc::Number(n) => Node::Number(n),
            Doc::String(s) => Node::String(s),
            Doc::Array(items) => Node::Array(items),
            Doc::Object(_) => Node::Object,
        }
    }

    fn for_each_member_of<'m>(
        &'m self,
        mut f: impl FnMut(&'m str, &'m Self) -> Result<(), Error>,
    ) -> Option<Result<(), Error>> {
        // Already in canonical order, each name once.
        let obj = self.as_object()?;
        Some(obj.iter().try_for_each(|(name, item)| f(name, item)))
    }
}

/// Appends the canonical form of `value` to `out`. On error `out` may hold a partial document.
pub fn write_value<T: Tree>(value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
    write_value_at(value, out, 0)
}

/// Room a new buffer starts with: a step's inputs, outputs and triggers are mostly 100 to 250 bytes, and a buffer that
/// starts smaller is reallocated while it is written.
const BUFFER_CAPACITY: usize = 256;

/// The canonical form of `value` as a new buffer.
pub fn to_vec<T: Tree>(value: &T) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(BUFFER_CAPACITY);
    write_value(value, &mut out)?;
    Ok(out)
}

/// Appends the canonical form of `value` without the members that `volatile_paths` name: the same bytes as
/// [`write_value`] of [`crate::key::without_volatile`]`(value, volatile_paths)` (the path rule is documented there),
/// written without copying the value to remove them. Allocates only where a path goes deeper than one member.
pub fn write_value_without<T: Tree>(value: &T, volatile_paths: &[String], out: &mut Vec<u8>) -> Result<(), Error> {
    write_without_at(value, volatile_paths, out, 0)
}

/// [`write_value_without`] into a new buffer.
pub fn to_vec_without<T: Tree>(value: &T, volatile_paths: &[String]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(BUFFER_CAPACITY);
    write_value_without(value, volatile_paths, &mut out)?;
    Ok(out)
}

/// `paths` are what is left of the volatile paths at this level (each `name` or `name.rest`).
fn write_without_at<T: Tree, P: AsRef<str>>(
    value: &T,
    paths: &[P],
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), Error> {
    // Only objects are walked: a path through anything else removes nothing.
    if paths.is_empty() || !matches!(value.node(), Node::Object) {
        return write_value_at(value, out, depth);
    }
    if depth >= DEPTH_MAX {
        return Err(Error::TooDeep { depth_max: DEPTH_MAX, offset: out.len() });
    }
    out.push(b'{');
    let mut written = 0;
    value
        .for_each_member_of(|name, item| {
            let mut removed = false;
            let mut deeper: Vec<&str> = Vec::new();
            for path in paths {
                match path.as_ref().split_once('.') {
                    None => removed |= path.as_ref() == name,
                    Some((first, rest)) if first == name => deeper.push(rest),
                    Some(_) => {}
                }
            }
            if removed {
                return Ok(());
            }
            if written > 0 {
                out.push(b',');
            }
            written += 1;
            write_string(name, out);
            out.push(b':');
            write_without_at(item, &deeper, out, depth + 1)
        })
        .expect("an object node has members")?;
    out.push(b'}');
    Ok(())
}

/// Orders two strings by their UTF-16 code units, as RFC 8785 sorts object member names.
///
/// UTF-8 byte order is code point order, and UTF-16 code unit order differs from it only where a character in
/// `U+E000..=U+FFFF` (UTF-8 lead byte `0xEE`/`0xEF`) meets a character above U+FFFF (lead byte `0xF0..=0xF4`, a
/// surrogate `0xD800..` in UTF-16): there UTF-16 puts the supplementary character first. At the first differing byte
/// both strings are at the same position inside the same-length prefix, so both bytes are lead bytes or both are
/// continuation bytes (`0x80..=0xBF`, which the remapping below leaves alone); lifting `0xEE`/`0xEF` above `0xF4`
/// therefore gives UTF-16 order without transcoding.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let common = a.iter().zip(b).position(|(x, y)| x != y);
    match common {
        None => a.len().cmp(&b.len()),
        Some(i) => utf16_rank(a[i]).cmp(&utf16_rank(b[i])),
    }
}

fn utf16_rank(byte: u8) -> u16 {
    match byte {
        0xEE | 0xEF => u16::from(byte) + 0x10,
        _ => u16::from(byte),
    }
}

/// 2^53: every integer of at most this magnitude is an exact double.
const EXACT_INTEGER_MAX: u64 = 1 << 53;

/// Appends `f` as ECMAScript `Number.prototype.toString` prints it. `f` must be finite.
fn write_f64(f: f64, out: &mut Vec<u8>) {
    assert!(f.is_finite(), "write_f64 called with a non-finite number {f}");
    if f == 0.0 {
        // Both zeros print as `0` (ECMAScript prints -0 as "0").
        out.push(b'0');
    } else if f.fract() == 0.0 && f.abs() <= EXACT_INTEGER_MAX as f64 {
        // Small integers print as their digits in both algorithms; this path skips the shortest-digits search.
        write_i64(f as i64, out);
    } else {
        let mut buffer = ryu_js::Buffer::new();
        out.extend_from_slice(buffer.format_finite(f).as_bytes());
    }
}

fn write_i64(n: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// For each byte, the escape it needs in a canonical string: 0 none, `u` the `\u00xx` form, else the letter after `\`.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Whether any byte of `word` is below 0x20, `"` or `\\` (the SWAR zero-byte test: exact for "any", which is all
/// this answers; the byte loop then finds which).
fn needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS != 0;
    below_space || has_zero(word ^ (ONES * u64::from(b'"'))) || has_zero(word ^ (ONES * u64::from(b'\\')))
}

/// Whether any byte of `bytes` is below 0x20, `"` or `\\`: eight bytes at a time. The bytes after the last whole
/// word are looked at again with the words that overlap them (an "any" question may look at a byte twice), so no
/// string is copied to pad it: a padded copy of the last few bytes was a `memcpy` call per string, and most strings
/// written are member names shorter than a word.
fn any_needs_escape(bytes: &[u8]) -> bool {
    let word = |eight: &[u8]| u64::from_le_bytes(eight.try_into().expect("8 bytes"));
    let n = bytes.len();
    if n >= 8 {
        let mut chunks = bytes.chunks_exact(8);
        if chunks.by_ref().any(|chunk| needs_escape(word(chunk))) {
            return true;
        }
        return !chunks.remainder().is_empty() && needs_escape(word(&bytes[n - 8..]));
    }
    let half = |at: usize| u64::from(u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")));
    let packed = if n >= 4 {
        // The first four and the last four: together every byte of 4 to 7.
        half(0) | half(n - 4) << 32
    } else if n > 0 {
        // The first, middle and last byte: together every byte of 1 to 3; the rest spaces.
        u64::from_le_bytes([bytes[0], bytes[n / 2], bytes[n - 1], b' ', b' ', b' ', b' ', b' '])
    } else {
        return false;
    };
    needs_escape(packed)
}

/// Appends `s` as a canonical JSON string literal.
fn write_string(s: &str, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Almost every string needs no escape: one scan, one copy. The loop below finds the bytes that do.
    if !any_needs_escape(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut run_start = 0;
    let mut i = 0;
    // Bounded by the string's length: every iteration advances `i` by 8 or by 1.
    while i < bytes.len() {
        // Most strings need no escape: skip 8 bytes at a time while none of them is a control, `"` or `\`.
        if let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().expect("an 8-byte slice"));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        i += 1;
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        let i = i - 1;
        out.extend_from_slice(&bytes[run_start..i]);
        if escape == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
        run_start = i + 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

fn write_number(n: &serde_json::Number, out: &mut Vec<u8>) -> Result<(), Error> {
    let out_of_range = |out: &Vec<u8>| Error::NumberOutOfRange { text: n.to_string(), offset: out.len() };
    if let Some(u) = n.as_u64() {
        if u <= EXACT_INTEGER_MAX {
            write_i64(u as i64, out);
            return Ok(());
        }
        return write_rounded(&u.to_string(), u as f64, out).map_err(|()| out_of_range(out));
    }
    if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= EXACT_INTEGER_MAX {
            write_i64(i, out);
            return Ok(());
        }
        return write_rounded(&i.to_string(), i as f64, out).map_err(|()| out_of_range(out));
    }
    match n.as_f64() {
        Some(f) if f.is_finite() => {
            write_f64(f, out);
            Ok(())
        }
        // Only reachable with serde_json's `arbitrary_precision`, which can hold `1e400`.
        _ => Err(out_of_range(out)),
    }
}

/// Appends `f`, the double the number literal `text` rounds to, if `text` may stand for it (see
/// [`large_literal_stands_for`]); otherwise leaves `out` as it was. The one rule for parsed text and for a parsed
/// `serde_json::Value`'s integers alike.
fn write_rounded(text: &str, f: f64, out: &mut Vec<u8>) -> Result<(), ()> {
    let start = out.len();
    write_f64(f, out);
    if f.abs() < EXACT_INTEGER_MAX as f64 || large_literal_stands_for(text, f, &out[start..]) {
        Ok(())
    } else {
        out.truncate(start);
        Err(())
    }
}

fn write_value_at<T: Tree>(value: &T, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
    match value.node() {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Bool(true) => out.extend_from_slice(b"true"),
        Node::Bool(false) => out.extend_from_slice(b"false"),
        Node::Number(n) => write_number(n, out)?,
        Node::String(s) => write_string(s, out),
        Node::Array(items) => {
            if depth >= DEPTH_MAX {
                return Err(Error::TooDeep { depth_max: DEPTH_MAX, offset: out.len() });
            }
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value_at(item, out, depth + 1)?;
            }
            out.push(b']');
        }
        Node::Object => {
            if depth >= DEPTH_MAX {
                return Err(Error::TooDeep { depth_max: DEPTH_MAX, offset: out.len() });
            }
            out.push(b'{');
            let mut written = 0;
            value
                .for_each_member_of(|name, item| {
                    if written > 0 {
                        out.push(b',');
                    }
                    written += 1;
                    write_string(name, out);
                    out.push(b':');
                    write_value_at(item, out, depth + 1)
                })
                .expect("an object node has members")?;
            out.push(b'}');
        }
    }
    Ok(())
}

/// Calls `f` on each member of `map` in RFC 8785 order (names by UTF-16 code units).
fn for_each_member<'m>(
    map: &'m serde_json::Map<String, serde_json::Value>,
    mut f: impl FnMut(&'m str, &'m serde_json::Value) -> Result<(), Error>,
) -> Result<(), Error> {
    // The common case (default serde_json, names without characters above U+FFFF) is already in UTF-16 order; check
    // that before paying for a sort. A map cannot hold duplicate names.
    let mut names = map.keys();
    let mut sorted = true;
    if let Some(mut previous) = names.next() {
        for name in names {
            if cmp_utf16(previous, name) != Ordering::Less {
                sorted = false;
                break;
            }
            previous = name;
        }
    }
    if sorted {
        for (name, item) in map {
            f(name, item)?;
        }
    } else {
        let mut members: Vec<(&String, &serde_json::Value)> = map.iter().collect();
        members.sort_unstable_by(|a, b| cmp_utf16(a.0, b.0));
        for (name, item) in members {
            f(name, item)?;
        }
    }
    Ok(())
}

/// A strict JSON (RFC 8259) parser that writes the canonical form as it goes.
struct Parser<'a> {
    /// The whole input, already checked to be UTF-8.
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

/// One object member already written to the output, at `start..end` (without its separating comma).
struct Member<'a> {
    name: std::borrow::Cow<'a, str>,
    name_offset: usize,
    start: usize,
    end: usize,
}

impl<'a> Parser<'a> {
    fn syntax(&self, message: &str) -> Error {
        Error::Syntax { message: message.to_string(), offset: self.pos }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn expect_literal(&mut self, literal: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        if self.bytes[self.pos..].starts_with(literal) {
            self.pos += literal.len();
            out.extend_from_slice(literal);
            Ok(())
        } else {
            Err(self.syntax("expected a JSON value"))
        }
    }

    /// Parses one value at `depth` levels of nesting and appends its canonical form.
    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
        match self.peek() {
            None => Err(self.syntax("expected a JSON value, found the end of the input")),
            Some(b'n') => self.expect_literal(b"null", out),
            Some(b't') => self.expect_literal(b"true", out),
            Some(b'f') => self.expect_literal(b"false", out),
            Some(b'"') => {
                let s = self.string()?;
                write_string(&s, out);
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => self.number(out),
            Some(b'[') => self.array(out, depth),
            Some(b'{') => self.object(out, depth),
            Some(0xEF) if self.bytes[self.pos..].starts_with(b"\xEF\xBB\xBF") => {
                Err(self
                    .syntax("expected a JSON value, found a UTF-8 byte order mark (JSON text has none, RFC 8259 8.1)"))
            }
            Some(_) => Err(self.syntax("expected a JSON value")),
        }
    }

    fn open(&mut self, depth: usize) -> Result<(), Error> {
        if depth >= DEPTH_MAX {
            return Err(Error::TooDeep { depth_max: DEPTH_MAX, offset: self.pos });
        }
        self.pos += 1;
        self.skip_whitespace();
        Ok(())
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
        self.open(depth)?;
        out.push(b'[');
        if self.peek() == Some(b']') {
            self.pos += 1;
            out.push(b']');
            return Ok(());
        }
        // Bounded by the input length: every iteration consumes at least one byte.
        loop {
            self.value(out, depth + 1)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_whitespace();
                    out.push(b',');
                }
                Some(b']') => {
                    self.pos += 1;
                    out.push(b']');
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']' in an array")),
            }
        }
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), Error> {
        self.open(depth)?;
        out.push(b'{');
        let region_start = out.len();
        let mut members: Vec<Member<'a>> = Vec::new();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            out.push(b'}');
            return Ok(());
        }
        // Members are written in input order, then reordered below if needed; bounded by the input length.
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a string as an object member name"));
            }
            let name_offset = self.pos;
            let name = self.string()?;
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':' after an object member name"));
            }
            self.pos += 1;
            self.skip_whitespace();
            if !members.is_empty() {
                out.push(b',');
            }
            let start = out.len();
            write_string(&name, out);
            out.push(b':');
            self.value(out, depth + 1)?;
            members.push(Member { name, name_offset, start, end: out.len() });
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.skip_whitespace();
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
        let in_order = members.windows(2).all(|w| cmp_utf16(&w[0].name, &w[1].name) == Ordering::Less);
        if !in_order {
            // Stable sort keeps duplicates in input order, so the second of a pair is the repeated one; report the
            // repeat that comes first in the input.
            members.sort_by(|a, b| cmp_utf16(&a.name, &b.name));
            let duplicate =
                members.windows(2).filter(|w| w[0].name == w[1].name).map(|w| &w[1]).min_by_key(|m| m.name_offset);
            if let Some(m) = duplicate {
                return Err(Error::DuplicateKey { key: m.name.to_string(), offset: m.name_offset });
            }
            let written = out.split_off(region_start);
            for (i, m) in members.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(&written[m.start - region_start..m.end - region_start]);
            }
        }
        out.push(b'}');
        Ok(())
    }

    /// Parses a string literal at `self.pos` (an opening quote) and returns its value: borrowed from the input when
    /// it holds no escape, as almost every string does.
    fn string(&mut self) -> Result<std::borrow::Cow<'a, str>, Error> {
        self.pos += 1;
        let mut value = String::new();
        let mut escaped = false;
        let mut run_start = self.pos;
        // Bounded by the input length: every iteration consumes at least one byte.
        loop {
            let Some(b) = self.peek() else {
                return Err(self.syntax("unterminated string"));
            };
            match b {
                b'"' => {
                    let run = &self.text[run_start..self.pos];
                    self.pos += 1;
                    if !escaped {
                        return Ok(std::borrow::Cow::Borrowed(run));
                    }
                    value.push_str(run);
                    return Ok(std::borrow::Cow::Owned(value));
                }
                b'\\' => {
                    escaped = true;
                    value.push_str(&self.text[run_start..self.pos]);
                    self.escape(&mut value)?;
                    run_start = self.pos;
                }
                0x00..=0x1f => return Err(self.syntax("unescaped control character in a string")),
                _ => self.pos += 1,
            }
        }
    }

    /// Decodes the escape at `self.pos` (a backslash) onto `value`.
    fn escape(&mut self, value: &mut String) -> Result<(), Error> {
        let escape_offset = self.pos;
        let simple = match self.bytes.get(self.pos + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\x08',
            Some(b'f') => '\x0c',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                let high = self.hex4(escape_offset)?;
                let code = match high {
                    0xD800..=0xDBFF => {
                        // A high surrogate must be followed at once by a `\u` low surrogate.
                        if self.bytes.get(self.pos) != Some(&b'\\') || self.bytes.get(self.pos + 1) != Some(&b'u') {
                            return Err(Error::LoneSurrogate { offset: escape_offset });
                        }
                        let low_offset = self.pos;
                        let low = self.hex4(low_offset)?;
                        if !(0xDC00..=0xDFFF).contains(&low) {
                            return Err(Error::LoneSurrogate { offset: escape_offset });
                        }
                        0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(Error::LoneSurrogate { offset: escape_offset }),
                    _ => high,
                };
                let c = char::from_u32(code).expect("a non-surrogate code point below 0x110000 is a char");
                value.push(c);
                return Ok(());
            }
            _ => return Err(self.syntax("invalid escape in a string")),
        };
        value.push(simple);
        self.pos += 2;
        Ok(())
    }

    /// Reads `\uXXXX` at `offset` and leaves `self.pos` after it.
    fn hex4(&mut self, offset: usize) -> Result<u32, Error> {
        let digits = self.bytes.get(offset + 2..offset + 6);
        let parsed =
            digits.and_then(|d| d.iter().try_fold(0u32, |acc, &b| Some(acc * 16 + char::from(b).to_digit(16)?)));
        match parsed {
            Some(code) => {
                self.pos = offset + 6;
                Ok(code)
            }
            None => Err(Error::Syntax { message: "invalid \\u escape in a string".to_string(), offset }),
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self, out: &mut Vec<u8>) -> Result<(), Error> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.syntax("expected a digit in a number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.syntax("expected a digit after the decimal point"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("expected a digit in the exponent"));
            }
        }
        let text = &self.text[start..self.pos];
        let out_of_range = || Error::NumberOutOfRange { text: text.to_string(), offset: start };
        let f = parse_f64(text).expect("a JSON number is a valid Rust float literal");
        if f.is_infinite() {
            return Err(out_of_range());
        }
        if f == 0.0 {
            // Only the mantissa's digits decide whether the literal meant zero (`0e999` is zero, `1e-400` is not).
            let mantissa_end = text.find(['e', 'E']).unwrap_or(text.len());
            if text[..mantissa_end].bytes().any(|b| matches!(b, b'1'..=b'9')) {
                return Err(out_of_range());
            }
        }
        // Every integer of magnitude up to 2^53 is a double, and rounding is monotonic, so a literal whose double is
        // below 2^53 in magnitude is such an integer or no integer at all: nothing to check, one comparison on the
        // hot path. Larger doubles take the exact check, which reads the literal's value (digits, fraction and
        // exponent), never its notation: `9007199254740993`, `9007199254740993.0` and `9.007199254740993e15` get one
        // verdict.
        write_rounded(text, f, out).map_err(|()| out_of_range())
    }
}

/// Literals up to this length are read by Rust's `f64` parser as they are, longer ones shortened first (see
/// [`parse_f64`]). A number that long is no one's amount; the bound keeps the common path one call.
const LONG_LITERAL: usize = 1024;

/// The double nearest the JSON number literal `text` (`None` if it is not one), correctly rounded.
///
/// Rust's parser (the grammar of JSON numbers is a subset of what it accepts) rounds correctly but saturates an
/// explicit exponent beyond about 655 359 in magnitude, which is wrong when hundreds of thousands of digits make up
/// for it: `1`, 2^20 zeros, `e-1048576` is 1, which it reads as infinity. A literal longer than [`LONG_LITERAL`] is
/// therefore first reduced to its first 800 significant digits, a `1` after them if a non-zero digit was dropped
/// (no double, nor any point halfway between two, needs more than 767 digits, so that keeps the rounding) and one
/// exponent; an exponent that then saturates is far beyond the range of doubles either way. Linear in the length.
fn parse_f64(text: &str) -> Option<f64> {
    if text.len() <= LONG_LITERAL {
        return text.parse().ok();
    }
    let value = Decimal::parse(text);
    let sign = if value.negative { "-" } else { "" };
    let kept = &value.digits[..value.digits.len().min(800)];
    // `digits` has no trailing zeros: a dropped tail holds a non-zero digit.
    let sticky = if kept.len() < value.digits.len() { "1" } else { "" };
    let exponent = value.exponent.saturating_add(i64::try_from(value.digits.len()).unwrap_or(i64::MAX));
    format!("{sign}0.{kept}{sticky}0e{exponent}").parse().ok()
}

/// Most significant digits a literal that is not its double's exact value may have and still stand for it: 17
/// digits tell every two doubles apart (C's `%.17g` reads back to the double it printed), so a literal with more
/// claims a precision no double has.
const FAITHFUL_DIGITS_MAX: usize = 17;

/// Whether the literal `text`, whose double `f` is at least 2^53 in magnitude and is written `canonical`, may stand
/// for `f` (see the module docs on numbers): a literal that is not an integer rounds, as RFC 8785 requires; an integer
/// must be `f`'s exact value, the value of `f`'s canonical spelling, or `f` rounded to the literal's own precision
/// (at most [`FAITHFUL_DIGITS_MAX`] significant digits, see [`Decimal::is_rounding_of`]): `9.9999999999999992e+22`
/// (C's `%.17g` of 99999999999999991611392) is accepted, `9007199254740993` (whose double, 9007199254740992, has 16
/// digits of its own) is not. The spelling is accepted so that canonical output parses back to the double it came
/// from: `1152921504606847000` (2^60 + 24, the spelling of 2^60) and `1e+23` (the spelling of
/// 99999999999999991611392) are themselves canonical output; ECMAScript's shortest spelling is nearly always also
/// the rounding at its precision, but not where a power of two has a closer neighbour below than above.
fn large_literal_stands_for(text: &str, f: f64, canonical: &[u8]) -> bool {
    let literal = Decimal::parse(text);
    if !literal.is_integer() {
        return true;
    }
    let canonical = std::str::from_utf8(canonical).expect("the canonical writer writes ASCII");
    if literal == Decimal::parse(canonical) {
        return true;
    }
    // Rust's fixed-precision formatting is exact; a finite double has at most 309 integer digits, and one of at least
    // 2^53 has no fraction.
    let exact = format!("{f:.0}");
    literal == Decimal::parse(&exact) || literal.is_rounding_of(exact.trim_start_matches('-'))
}

/// A number literal's exact value: `digits` x 10^`exponent`, with `digits` free of leading and trailing zeros (empty
/// for zero, whose sign and exponent then do not matter), so that equal values compare equal whatever their notation.
#[derive(Debug)]
struct Decimal {
    negative: bool,
    digits: String,
    exponent: i64,
}

impl PartialEq for Decimal {
    fn eq(&self, other: &Decimal) -> bool {
        if self.digits.is_empty() || other.digits.is_empty() {
            return self.digits.is_empty() && other.digits.is_empty();
        }
        (self.negative, &self.digits, self.exponent) == (other.negative, &other.digits, other.exponent)
    }
}

impl Decimal {
    /// Reads a JSON number literal or an ECMAScript spelling of a number (`1e+23`, `-5e-324`). An exponent too large
    /// for an `i64` saturates, which still compares unequal to every finite double's value.
    fn parse(text: &str) -> Decimal {
        let digit = |b: u8| i64::from(b.wrapping_sub(b'0'));
        let negative = text.starts_with('-');
        let unsigned = text.strip_prefix('-').unwrap_or(text);
        let (mantissa, exponent) = unsigned.split_once(['e', 'E']).unwrap_or((unsigned, "0"));
        let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let magnitude = exponent
            .bytes()
            .filter(u8::is_ascii_digit)
            .fold(0i64, |acc, b| acc.saturating_mul(10).saturating_add(digit(b)));
        let exponent = if exponent.starts_with('-') { -magnitude } else { magnitude };
        let all: String = integer.chars().chain(fraction.chars()).filter(char::is_ascii_digit).collect();
        let significant = all.trim_start_matches('0');
        let digits = significant.trim_end_matches('0');
        let trailing_zeros = (significant.len() - digits.len()) as i64;
        let exponent = exponent.saturating_sub(fraction.len() as i64).saturating_add(trailing_zeros);
        Decimal { negative, digits: digits.to_string(), exponent }
    }

    /// Whether the value is a whole number.
    fn is_integer(&self) -> bool {
        self.digits.is_empty() || self.exponent >= 0
    }

    /// Whether this integer (its magnitude) is the positive integer whose decimal digits are `exact`, rounded to the
    /// place of this integer's last significant digit, with at most [`FAITHFUL_DIGITS_MAX`] significant digits: what
    /// C's `%.Ng` prints for N of at most 17, trailing zeros dropped (they add no precision: `1.0000000000000000e23`
    /// is the value `1e23` and is judged as it).
    fn is_rounding_of(&self, exact: &str) -> bool {
        if self.digits.is_empty() || self.digits.len() > FAITHFUL_DIGITS_MAX {
            return false;
        }
        // `place` is the exponent of the last significant digit; an integer's is not negative.
        let Ok(place) = usize::try_from(self.exponent) else { return false };
        if place > exact.len() {
            // At least 10^place, while `exact` is below 10^(place - 1): more than half a unit away.
            return false;
        }
        // `exact` is `head` x 10^place + `tail`; the candidates are `head` and `head` + 1.
        let (head, tail) = exact.split_at(exact.len() - place);
        if head.len() > FAITHFUL_DIGITS_MAX {
            return false;
        }
        let head: u64 = if head.is_empty() { 0 } else { head.parse().expect("at most 17 decimal digits") };
        let digits: u64 = self.digits.parse().expect("at most 17 decimal digits");
        // `tail` against half a unit, 5 x 10^(place - 1): the same number of digits, so text order is numeric order.
        let against_half = match tail.as_bytes().split_first() {
            None => Ordering::Less,
            Some((first, rest)) => {
                first.cmp(&b'5').then(if rest.iter().all(|&b| b == b'0') { Ordering::Equal } else { Ordering::Greater })
            }
        };
        match against_half {
            Ordering::Less => digits == head,
            // Printers break this tie differently (C to even, ECMAScript's `toPrecision` up), so either is a rounding.
            // An integer that reads as the double `exact` is never halfway: that double is a multiple of 2^place.
            Ordering::Equal => digits == head || digits == head + 1,
            Ordering::Greater => digits == head + 1,
        }
    }

    /// The whole number in plain digits (with its sign), for an error message; `None` unless the value is an integer
    /// of at most 400 digits (a finite double has at most 309).
    fn integer_text(&self) -> Option<String> {
        if self.digits.is_empty() {
            return Some("0".to_string());
        }
        let zeros = usize::try_from(self.exponent).ok().filter(|&n| self.digits.len() + n <= 400)?;
        let sign = if self.negative { "-" } else { "" };
        Some(format!("{sign}{}{}", self.digits, "0".repeat(zeros)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_needs_escape_looks_at_every_byte_of_every_length() {
        for len in 0..=20 {
            assert!(!any_needs_escape(&vec![b'a'; len]), "length {len}");
            for position in 0..len {
                for b in [0x00, 0x1f, b'"', b'\\'] {
                    let mut bytes = vec![b'a'; len];
                    bytes[position] = b;
                    assert!(any_needs_escape(&bytes), "byte {b:#04x} at {position} of {len}");
                }
            }
        }
    }

    #[test]
    fn needs_escape_finds_every_byte_that_needs_one() {
        for fill in [b'a', 0xff, 0x80, b' '] {
            for b in 0..=255u8 {
                for position in 0..8 {
                    let mut word = [fill; 8];
                    word[position] = b;
                    let expected = b < 0x20 || b == b'"' || b == b'\\';
                    assert_eq!(needs_escape(u64::from_le_bytes(word)), expected, "byte {b:#04x} at {position}");
                }
            }
        }
    }

    /// A number past [`MESSAGE_DIGITS_MAX`] digits is shortened in an error message (a QA report: the largest
    /// double's literal gave a message of about 600 characters, its integer and nearest double in full), on one line
    /// that still names the nearest double; the rule itself is unchanged, the literal is refused.
    #[test]
    fn long_integers_are_shortened_in_the_out_of_range_message() {
        let message = canonicalize_bytes(b"[1.7976931348623158e308]").unwrap_err().to_string();
        assert_eq!(
            message,
            "number 1.7976931348623158e308 at byte 1: the integer 17976931348623158…000 (309 digits) cannot be \
             represented exactly as an IEEE-754 double (the nearest is 179769313486231570814527423731704356…368 \
             (309 digits)); send it as a string"
        );
        // A literal written out in digits is shortened too, in both messages; 40 digits are printed whole.
        let written_out = format!("-1{}1", "0".repeat(307));
        let message = canonicalize_bytes(written_out.as_bytes()).unwrap_err().to_string();
        assert!(message.chars().count() < 300 && !message.contains('\n'), "{message}");
        let shown = "-100000000000000000000000000000000000…001 (309 digits)";
        assert!(message.starts_with(&format!("number {shown} at byte 0: the integer {shown} cannot")), "{message}");
        let overflow = format!("1{}", "0".repeat(400));
        let message = canonicalize_bytes(overflow.as_bytes()).unwrap_err().to_string();
        assert_eq!(message, "number 1…000 (401 digits) at byte 0 is outside the range of IEEE-754 doubles");
        assert_eq!(shorten_digits(&"9".repeat(40)), "9".repeat(40));
        assert_eq!(shorten_digits("0.5e7"), "0.5e7");
        assert_eq!(shorten_digits(&format!("{}.0", "0".repeat(41))), "0…000 (41 digits).0");
    }

    /// ECMAScript spells a double with the fewest digits that read back to it, the closest such digits if several:
    /// where a power of two has a neighbour below it twice as close as the one above, those can be digits that are
    /// not the double rounded to their length (2^89, 618970019642690137449562112, is spelled `6.189700196426902e+26`,
    /// while rounded to 16 digits it is ...901, which reads as the double below). Canonical output must read back
    /// to itself, so the spelling is accepted by a clause of its own.
    #[test]
    fn the_spelling_clause_accepts_spellings_that_are_not_roundings() {
        let mut not_roundings = Vec::new();
        for e in 53..=1023 {
            let f = 2f64.powi(e);
            let mut out = Vec::new();
            write_f64(f, &mut out);
            let spelled = std::str::from_utf8(&out).unwrap();
            assert!(large_literal_stands_for(spelled, f, &out), "2^{e} spelled {spelled}");
            if !Decimal::parse(spelled).is_rounding_of(&format!("{f:.0}")) {
                not_roundings.push(e);
            }
        }
        assert!(not_roundings.contains(&89), "{not_roundings:?}");
    }

    /// Rounding at the literal's last significant place, against exact digits, at the edges: a new leading digit
    /// (`1e23` for 99999999999999991611392), a place beyond the exact value's digits, more than 17 digits.
    #[test]
    fn is_rounding_of_rounds_at_the_literal_s_own_place() {
        let exact = "99999999999999991611392";
        let cases: &[(&str, bool)] = &[
            ("1e23", true),
            ("9.9999999999999992e22", true),
            ("9.999999999999999e22", true),
            ("9.9999999999999993e22", false),
            ("9.9999999999999991e22", false),
            ("9.99999999999999916e22", false),
            ("99999999999999991611392", false),
            ("1e24", false),
            ("2e23", false),
            ("0", false),
        ];
        for &(literal, expected) in cases {
            assert_eq!(Decimal::parse(literal).is_rounding_of(exact), expected, "{literal}");
        }
        // Halfway: either neighbour (no double is halfway, so only this function sees it).
        assert!(Decimal::parse("1e3").is_rounding_of("1500"));
        assert!(Decimal::parse("2e3").is_rounding_of("1500"));
        assert!(!Decimal::parse("2e3").is_rounding_of("1499"));
        assert!(Decimal::parse("1e3").is_rounding_of("500"));
        assert!(!Decimal::parse("1e3").is_rounding_of("499"));
    }

    #[test]
    fn utf16_order_puts_supplementary_before_private_use() {
        // U+1F600 is D83D DE00 in UTF-16, below U+E000; in UTF-8 it is F0.. and above EE...
        let cases: &[(&str, &str, Ordering)] = &[
            ("\u{1F600}", "\u{E000}", Ordering::Less),
            ("\u{FFFF}", "\u{10000}", Ordering::Greater),
            ("a", "b", Ordering::Less),
            ("a", "ab", Ordering::Less),
            ("\u{D7FF}", "\u{10000}", Ordering::Less),
            ("x\u{1F600}", "x\u{FB01}", Ordering::Less),
            ("same", "same", Ordering::Equal),
        ];
        for &(a, b, expected) in cases {
            let reference = a.encode_utf16().cmp(b.encode_utf16());
            assert_eq!(reference, expected, "reference order of {a:?} and {b:?}");
            assert_eq!(cmp_utf16(a, b), expected, "cmp_utf16({a:?}, {b:?})");
        }
    }
}
