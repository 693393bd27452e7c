//! Step keys (rule 1 of `DESIGN.md`).
//!
//! `key = blake3(DOMAIN_TAG, len(run id), run id, len(step id), step id, len(canonical inputs), canonical inputs)`,
//! each length a little-endian `u64`, so no two distinct (run, step, inputs) triples share an encoding.
//! The inputs are canonicalised with [`crate::canonical`] (RFC 8785) first, so key order, whitespace and number
//! spelling (`1.0` vs `1`) do not change the key.
//!
//! Write keys (one write of a multi-write or agent step) are derived from the step key, the write's index and the
//! write's canonical inputs with their own domain tag.
//!
//! Volatile inputs: a step may name input paths that are sent to the connector but left out of its key (a request
//! timestamp, a trace id), so that a retry which refreshes them still finds the earlier attempt. [`step_key_without`]
//! leaves them out while writing; [`without_volatile`] is the same rule as a copy, and spells it out. Leaving out a
//! field that changes what the call does would merge two different calls under one key, so the list belongs to the
//! step's definition and should name only fields the external system does not act on.
//!
//! Inputs that cannot be canonicalised (see [`crate::canonical`]) have no key: [`step_key`] returns the error rather
//! than hashing some approximation.
//!
//! OWNER: canonical/key work stream. The signatures below are the contract other crates build on.

use crate::canonical::Tree;
use std::fmt;

/// A 32-byte blake3 idempotency key. Displays as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Key(pub [u8; 32]);

/// The bytes' lexicographic order, as the derived `Ord` gives, compared a word at a time: the derived comparison is a
/// `memcmp` call, and keys are compared on every lookup in the checker's sorted maps. Keys are uniformly spread, so
/// the first word almost always decides.
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.words().cmp(&other.words())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Hashes the key's first eight bytes as one word. A key is a blake3 output, so those bytes are already uniformly
/// distributed: feeding all 32 through a hasher (as a length and a byte slice, which is what the derived `Hash` does)
/// costs about 90 instructions per lookup and spreads keys no better. Equal keys have equal first words, so this
/// agrees with `Eq`.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.words()[0]);
    }
}

impl Key {
    /// The key as four big-endian words: they order as the bytes do, and compare without a `memcmp` call.
    pub fn words(&self) -> [u64; 4] {
        std::array::from_fn(|i| u64::from_be_bytes(self.0[i * 8..i * 8 + 8].try_into().expect("8 bytes")))
    }

    pub fn to_hex(&self) -> String {
        self.hex().as_str().to_owned()
    }

    /// The key as lowercase hex on the stack: for a lookup or a copy into a string of the caller's choosing, without
    /// a heap block of its own.
    pub fn hex(&self) -> KeyHex {
        let mut digits = [0u8; 64];
        write_hex_digits(&self.0, &mut digits);
        KeyHex(digits)
    }
}

/// A [`Key`] spelled in lowercase hex (64 ASCII digits), held inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyHex([u8; 64]);

impl KeyHex {
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("hex digits are ASCII")
    }
}

impl std::ops::Deref for KeyHex {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for KeyHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for KeyHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Appends `bytes` as lowercase hex, two digits per byte (keys, webhook run ids).
pub fn push_hex(bytes: &[u8], out: &mut String) {
    // Through a stack buffer, a chunk at a time: `String::push` checks capacity and encodes a `char` per digit.
    let mut digits = [0u8; 64];
    for chunk in bytes.chunks(digits.len() / 2) {
        let hex = &mut digits[..chunk.len() * 2];
        write_hex_digits(chunk, hex);
        out.push_str(std::str::from_utf8(hex).expect("hex digits are ASCII"));
    }
}

/// Which hex digits [`decode_hex`] takes: lowercase only (what [`push_hex`] writes, for text that must read back to
/// itself), or either case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HexCase {
    Lower,
    Either,
}

/// `text` as `N` bytes: exactly `2 * N` hex digits of `case`, nothing else (no sign, no space), decoded on the stack.
/// The one reading of hex in the engine: a pause reason's key, a webhook signature's tag, an inbox row's run id
/// (`u8::from_str_radix`, which it replaces, also took a `+` before a digit).
pub fn decode_hex<const N: usize>(text: &str, case: HexCase) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' if case == HexCase::Either => Some(c - b'A' + 10),
        _ => None,
    };
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(bytes)
}

/// Writes `bytes` as lowercase hex into the first `2 * bytes.len()` bytes of `out`.
fn write_hex_digits(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0x0f)];
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", &self.hex()[..16])
    }
}

/// The domain tag of step keys; changing it changes every key.
pub const STEP_DOMAIN_TAG: &[u8] = b"flow/step-key/v1";
/// The domain tag of write keys.
pub const WRITE_DOMAIN_TAG: &[u8] = b"flow/write-key/v1";

/// Runs `f` on this thread's scratch buffer, empty: a key's encoding is hashed and dropped at once, so every key
/// would otherwise write its encoding into a fresh (and, with mimalloc's free lists, usually cold) heap block. A
/// nested call (none today) gets a buffer of its own. The buffer holds nothing between calls that anything reads.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    /// Kept at most this large between uses, so one huge document does not pin its buffer.
    const KEPT_BYTES_MAX: usize = 64 * 1024;
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(1024));
    }
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.clear();
            let out = f(&mut buf);
            if buf.capacity() > KEPT_BYTES_MAX {
                *buf = Vec::with_capacity(1024);
            }
            out
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// The key of step `step_id` of run `run_id` with `inputs`.
///
/// The encoding is built in one buffer and hashed with one call: streaming many small writes into the hasher was
/// measured slower. The canonical inputs are written straight after the header and their length patched in after.
pub fn step_key<T: Tree>(run_id: &str, step_id: &str, inputs: &T) -> Result<Key, crate::canonical::Error> {
    step_key_without(run_id, step_id, inputs, &[])
}

/// [`step_key`] of `inputs` without the members `volatile_paths` name: the key of
/// [`without_volatile`]`(inputs, volatile_paths)`, written without copying the inputs.
pub fn step_key_without<T: Tree>(
    run_id: &str,
    step_id: &str,
    inputs: &T,
    volatile_paths: &[String],
) -> Result<Key, crate::canonical::Error> {
    with_scratch(|buf| {
        step_key_encoding(buf, run_id, step_id, inputs, volatile_paths)?;
        Ok(Key(*blake3::hash(buf).as_bytes()))
    })
}

/// [`step_key_without`], and blake3 of the canonical inputs it keys (what the ledger records as `inputs_hash`), from
/// one canonical write: the inputs' canonical bytes are the tail of the key's encoding.
pub fn step_key_and_inputs_hash<T: Tree>(
    run_id: &str,
    step_id: &str,
    inputs: &T,
    volatile_paths: &[String],
) -> Result<(Key, [u8; 32]), crate::canonical::Error> {
    with_scratch(|buf| {
        let inputs_at = step_key_encoding(buf, run_id, step_id, inputs, volatile_paths)?;
        Ok((Key(*blake3::hash(buf).as_bytes()), *blake3::hash(&buf[inputs_at..]).as_bytes()))
    })
}

/// blake3 of the canonical inputs without the members `volatile_paths` name: the inputs hash
/// [`step_key_and_inputs_hash`] gives with its key, alone.
pub fn inputs_hash_without<T: Tree>(
    inputs: &T,
    volatile_paths: &[String],
) -> Result<[u8; 32], crate::canonical::Error> {
    with_scratch(|buf| {
        crate::canonical::write_value_without(inputs, volatile_paths, buf)?;
        Ok(*blake3::hash(buf).as_bytes())
    })
}

/// Writes the encoding a step key hashes into `buf` (empty), and returns where the canonical inputs start in it.
fn step_key_encoding<T: Tree>(
    buf: &mut Vec<u8>,
    run_id: &str,
    step_id: &str,
    inputs: &T,
    volatile_paths: &[String],
) -> Result<usize, crate::canonical::Error> {
    write_header(buf, run_id, step_id);
    write_length_prefixed(buf, |buf| crate::canonical::write_value_without(inputs, volatile_paths, buf))
}

/// Appends what `write` writes, preceded by its length (8 bytes, little-endian, as the `_canonical` key functions
/// write the length of bytes they already hold); returns where the written bytes start.
fn write_length_prefixed(
    buf: &mut Vec<u8>,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), crate::canonical::Error>,
) -> Result<usize, crate::canonical::Error> {
    let length_at = buf.len();
    buf.extend_from_slice(&[0; 8]);
    write(buf)?;
    let written = (buf.len() - length_at - 8) as u64;
    buf[length_at..length_at + 8].copy_from_slice(&written.to_le_bytes());
    Ok(length_at + 8)
}

/// The key of a step whose inputs are already canonical bytes (the output of [`crate::canonical`]; passing any other
/// bytes gives a key that no other spelling of the same inputs shares).
pub fn step_key_canonical(run_id: &str, step_id: &str, canonical_inputs: &[u8]) -> Key {
    with_scratch(|buf| {
        write_header(buf, run_id, step_id);
        buf.extend_from_slice(&(canonical_inputs.len() as u64).to_le_bytes());
        buf.extend_from_slice(canonical_inputs);
        Key(*blake3::hash(buf).as_bytes())
    })
}

fn write_header(buf: &mut Vec<u8>, run_id: &str, step_id: &str) {
    buf.extend_from_slice(STEP_DOMAIN_TAG);
    for part in [run_id.as_bytes(), step_id.as_bytes()] {
        buf.extend_from_slice(&(part.len() as u64).to_le_bytes());
        buf.extend_from_slice(part);
    }
}

/// The key of write number `index` of the step keyed `step`, with `inputs`.
pub fn write_key<T: Tree>(step: &Key, index: u32, inputs: &T) -> Result<Key, crate::canonical::Error> {
    with_scratch(|buf| {
        buf.extend_from_slice(WRITE_DOMAIN_TAG);
        buf.extend_from_slice(&step.0);
        buf.extend_from_slice(&index.to_le_bytes());
        write_length_prefixed(buf, |buf| crate::canonical::write_value(inputs, buf))?;
        Ok(Key(*blake3::hash(buf).as_bytes()))
    })
}

/// The key of write number `index` of the step keyed `step`, whose inputs are already canonical bytes: equal to
/// [`write_key`] of the inputs those bytes are the canonical form of.
pub fn write_key_canonical(step: &Key, index: u32, canonical_inputs: &[u8]) -> Key {
    with_scratch(|buf| {
        buf.extend_from_slice(WRITE_DOMAIN_TAG);
        buf.extend_from_slice(&step.0);
        buf.extend_from_slice(&index.to_le_bytes());
        buf.extend_from_slice(&(canonical_inputs.len() as u64).to_le_bytes());
        buf.extend_from_slice(canonical_inputs);
        Key(*blake3::hash(buf).as_bytes())
    })
}

/// `inputs` with each volatile path removed (a request timestamp, a trace id): such fields are sent to the connector
/// but left out of the key, so a retry that refreshes them still finds the earlier attempt.
///
/// The path rule:
/// - a path is a list of object member names from the root object, separated by `.` (`meta.trace_id`);
/// - only objects are walked: arrays are not traversed and there is no wildcard, so `items.t` removes nothing from
///   `{"items":[{"t":1}]}`; a member whose name contains `.` cannot be named;
/// - a path that does not exist, or that passes through a non-object, is ignored (a volatile field may come and go);
/// - the last name is removed with its value, whatever that value is (an object is removed whole).
///
/// The input is not changed: the full inputs still go to the connector. With no volatile paths the inputs are
/// borrowed, not copied.
pub fn without_volatile<'a>(
    inputs: &'a serde_json::Value,
    volatile_paths: &[String],
) -> std::borrow::Cow<'a, serde_json::Value> {
    if volatile_paths.is_empty() {
        return std::borrow::Cow::Borrowed(inputs);
    }
    let mut out = inputs.clone();
    for path in volatile_paths {
        let parts: Vec<&str> = path.split('.').collect();
        remove_path(&mut out, &parts);
    }
    std::borrow::Cow::Owned(out)
}

fn remove_path(value: &mut serde_json::Value, parts: &[&str]) {
    let Some((first, rest)) = parts.split_first() else { return };
    let Some(map) = value.as_object_mut() else { return };
    if rest.is_empty() {
        map.remove(*first);
    } else if let Some(child) = map.get_mut(*first) {
        remove_path(child, rest);
    }
}

#[cfg(test)]
mod tests {
    use super::{HexCase, Key, decode_hex, push_hex};

    /// Exactly `2 * N` digits of the case asked for, and nothing else: `push_hex`'s text reads back to its bytes.
    #[test]
    fn hex_is_read_back_exactly() {
        let bytes = [0x00, 0x7f, 0xab, 0xff];
        let mut text = String::new();
        push_hex(&bytes, &mut text);
        assert_eq!(decode_hex::<4>(&text, HexCase::Lower), Some(bytes));
        assert_eq!(decode_hex::<4>("007FABFF", HexCase::Either), Some(bytes));
        assert_eq!(decode_hex::<4>("007FABFF", HexCase::Lower), None);
        for wrong in ["007fab", "007fabff00", "+07fabff", "007fab f", "007fabfg", "007fabé"] {
            assert_eq!(decode_hex::<4>(wrong, HexCase::Either), None, "{wrong:?}");
        }
    }

    #[test]
    fn push_hex_spells_every_byte_of_every_length_after_what_is_there() {
        // Lengths around the 32-byte chunk, and every byte value.
        let bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
        for len in [0, 1, 2, 31, 32, 33, 63, 64, 65, 100, 512] {
            let mut out = String::from("x:");
            push_hex(&bytes[..len], &mut out);
            let expected: String =
                std::iter::once("x:".to_string()).chain(bytes[..len].iter().map(|b| format!("{b:02x}"))).collect();
            assert_eq!(out, expected, "length {len}");
        }
    }

    #[test]
    fn a_keys_hex_on_the_stack_is_push_hex_of_its_bytes() {
        for seed in 0..=255u8 {
            let key = Key(std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8 * 7)));
            let mut expected = String::new();
            push_hex(&key.0, &mut expected);
            assert_eq!(key.hex().as_str(), expected);
            assert_eq!(key.to_hex(), expected);
            assert_eq!(key.to_string(), expected);
        }
    }

    #[test]
    fn the_inputs_hash_alone_is_the_one_given_with_the_key() {
        let inputs = serde_json::json!({"b": [1, 2.5, "x"], "a": {"at": 17, "keep": true}, "c": null});
        for volatile in [vec![], vec!["a.at".to_string()], vec!["c".to_string(), "b".to_string()]] {
            let (key, hash) = super::step_key_and_inputs_hash("run-1", "s", &inputs, &volatile).expect("canonical");
            assert_eq!(super::inputs_hash_without(&inputs, &volatile).expect("canonical"), hash, "{volatile:?}");
            assert_eq!(super::step_key_without("run-1", "s", &inputs, &volatile).expect("canonical"), key);
            let without = crate::canonical::to_vec_without(&inputs, &volatile).expect("canonical");
            assert_eq!(hash, *blake3::hash(&without).as_bytes());
        }
    }

    #[test]
    fn keys_order_and_hash_as_their_bytes_do() {
        use std::hash::BuildHasher;
        // Pairs that differ in each word, at the word's first and last byte, and equal keys.
        let base = Key(std::array::from_fn(|i| (i as u8).wrapping_mul(37)));
        let mut keys = vec![base, Key([0; 32]), Key([255; 32])];
        for at in [0, 7, 8, 15, 16, 23, 24, 31] {
            for delta in [1u8, 128, 255] {
                let mut k = base;
                k.0[at] = k.0[at].wrapping_add(delta);
                keys.push(k);
            }
        }
        let state = foldhash::fast::FixedState::default();
        for a in &keys {
            for b in &keys {
                assert_eq!(a.cmp(b), a.0.cmp(&b.0), "{a} vs {b}");
                assert_eq!(a.partial_cmp(b), Some(a.0.cmp(&b.0)));
                if a == b {
                    assert_eq!(state.hash_one(a), state.hash_one(b));
                }
            }
        }
    }
}
