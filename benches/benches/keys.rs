//! Key derivation speed (target: at most 400 ns for a ~120-byte canonical input on the project's 2-core machine).
//!
//! Measures `step_key` from a parsed `serde_json::Value` (canonicalise into the key buffer, one blake3 hash),
//! `step_key_canonical` from bytes that are already canonical (the blake3 share alone), and `canonicalize_bytes` of
//! the JSON text (the strict parser used by the CLI). `blake3_only` hashes a buffer of the key encoding's length and
//! is the floor: on a shared, loaded machine compare the others with it rather than with the absolute target.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

/// A typical connector input: 124 canonical bytes.
const INPUTS: &str = r#"{"amount":4500,"currency":"eur","customer":"cus_9s6XKzkNRiz8i3","description":"Invoice 2026-0042","metadata":{"run":"r-17"}}"#;

fn bench_keys(c: &mut Criterion) {
    let value: serde_json::Value = serde_json::from_str(INPUTS).expect("the bench input is JSON");
    let canonical = engine::canonical::to_vec(&value).expect("the bench input is canonicalisable");
    assert_eq!(canonical.len(), 124, "the bench input should stay about 120 canonical bytes");
    c.bench_function("step_key/value_124B", |b| {
        b.iter(|| engine::key::step_key(black_box("run-0001"), black_box("charge"), black_box(&value)))
    });
    c.bench_function("step_key_canonical/124B", |b| {
        b.iter(|| engine::key::step_key_canonical(black_box("run-0001"), black_box("charge"), black_box(&canonical)))
    });
    let encoding_len = 16 + 3 * 8 + "run-0001".len() + "charge".len() + canonical.len();
    let encoding = vec![7u8; encoding_len];
    c.bench_function("blake3_only/178B", |b| b.iter(|| blake3::hash(black_box(&encoding))));
    c.bench_function("canonicalize_bytes/124B", |b| {
        b.iter(|| engine::canonical::canonicalize_bytes(black_box(INPUTS.as_bytes())))
    });
}

criterion_group!(benches, bench_keys);
criterion_main!(benches);
