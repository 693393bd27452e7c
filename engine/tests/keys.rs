//! Step and write keys: the encoding pinned byte for byte, invariance under every spelling of the same inputs (key
//! order, whitespace, number spelling, escapes), sensitivity to any change of run, step or value, and the volatile
//! path rule.

use engine::canonical::{canonicalize_bytes, to_vec, to_vec_without};
use engine::doc::Doc;
use engine::key::{
    Key, STEP_DOMAIN_TAG, WRITE_DOMAIN_TAG, step_key, step_key_and_inputs_hash, step_key_canonical, step_key_without,
    without_volatile, write_key, write_key_canonical,
};
use proptest::prelude::*;
use serde_json::{Value, json};

fn key_of_text(run: &str, step: &str, text: &str) -> Key {
    step_key_canonical(run, step, &canonicalize_bytes(text.as_bytes()).expect("canonicalisable"))
}

/// The encoding written out by hand from `DESIGN.md`: tag, then each part as a little-endian u64 length and bytes.
#[test]
fn step_key_encoding_is_pinned() {
    let inputs = json!({"currency": "eur", "amount": 4500});
    let canonical = br#"{"amount":4500,"currency":"eur"}"#;
    let mut expected = STEP_DOMAIN_TAG.to_vec();
    for part in [&b"run-1"[..], &b"charge"[..], &canonical[..]] {
        expected.extend_from_slice(&(part.len() as u64).to_le_bytes());
        expected.extend_from_slice(part);
    }
    let expected = Key(*blake3::hash(&expected).as_bytes());
    assert_eq!(step_key("run-1", "charge", &inputs).unwrap(), expected);
    assert_eq!(step_key_canonical("run-1", "charge", canonical), expected);
    let inputs_hash = *blake3::hash(canonical).as_bytes();
    assert_eq!(step_key_and_inputs_hash("run-1", "charge", &inputs, &[]).unwrap(), (expected, inputs_hash));
    // A golden value: changing the tag or the layout changes every key in every ledger, so it must be deliberate.
    assert_eq!(expected.to_hex(), "6da9c3172c50803e5ac5f2995042dbe3eb916e56e882be207b8fd2787ca9977a");
}

#[test]
fn write_key_encoding_is_pinned() {
    let step = step_key("run-1", "charge", &json!({})).unwrap();
    let canonical = br#"{"to":"a@example.com"}"#;
    let mut expected = WRITE_DOMAIN_TAG.to_vec();
    expected.extend_from_slice(&step.0);
    expected.extend_from_slice(&7u32.to_le_bytes());
    expected.extend_from_slice(&(canonical.len() as u64).to_le_bytes());
    expected.extend_from_slice(canonical);
    let expected = Key(*blake3::hash(&expected).as_bytes());
    assert_eq!(write_key(&step, 7, &json!({"to": "a@example.com"})).unwrap(), expected);
    assert_eq!(write_key_canonical(&step, 7, canonical), expected);
}

/// Spellings of one document: each row's texts must give one key.
const SAME_INPUTS: &[&[&str]] = &[
    &[r#"{"a":1,"b":2}"#, r#"{"b":2,"a":1}"#, "{ \"a\" : 1 ,\n\t\"b\" : 2 }"],
    &["[1]", "[1.0]", "[1e0]", "[10E-1]", "[0.1e1]", "[ 1.000 ]"],
    &["-0", "0", "0.0", "0e5"],
    &[r#""é""#, r#""\u00e9""#, r#""\u00E9""#],
    &[r#""a/b""#, r#""a\/b""#],
    &[r#""😀""#, r#""\ud83d\ude00""#],
    &[r#"{"x":{"z":[true,null],"y":"s"}}"#, r#"{"x":{"y":"s","z":[true,null]}}"#],
    &["1e+30", "1E30", "10e29", "0.1e31"],
    // 2^60: its exact digits and its ECMAScript spelling are one double.
    &["1152921504606846976", "1152921504606847000", "1.152921504606846976e18"],
];

#[test]
fn key_is_invariant_under_spelling() {
    for row in SAME_INPUTS {
        let first = key_of_text("run", "step", row[0]);
        for text in &row[1..] {
            assert_eq!(key_of_text("run", "step", text), first, "{} vs {}", row[0], text);
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(step_key("run", "step", &value).unwrap(), first, "Value of {text}");
        }
    }
}

#[test]
fn key_changes_with_run_step_and_value() {
    let base = key_of_text("run", "step", r#"{"a":1}"#);
    let different = [
        ("run2", "step", r#"{"a":1}"#),
        ("run", "step2", r#"{"a":1}"#),
        ("step", "run", r#"{"a":1}"#),
        ("run", "step", r#"{"a":2}"#),
        ("run", "step", r#"{"a":1.5}"#),
        ("run", "step", r#"{"a":"1"}"#),
        ("run", "step", r#"{"a":[1]}"#),
        ("run", "step", r#"{"A":1}"#),
        ("run", "step", r#"{"a":1,"b":null}"#),
        ("run", "step", r#"{}"#),
        ("", "runstep", r#"{"a":1}"#),
        ("runstep", "", r#"{"a":1}"#),
    ];
    let mut seen = std::collections::BTreeSet::from([base]);
    for (run, step, text) in different {
        assert!(seen.insert(key_of_text(run, step, text)), "({run}, {step}, {text}) collides");
    }
}

/// The length prefixes keep part boundaries: moving bytes between run id, step id and inputs changes the key.
#[test]
fn parts_cannot_be_shifted() {
    let cases: &[[(&str, &str, &[u8]); 2]] = &[
        [("ab", "c", b"1"), ("a", "bc", b"1")],
        [("a", "b1", b""), ("a", "b", b"1")],
        [("", "", b"x"), ("x", "", b"")],
    ];
    for [a, b] in cases {
        assert_ne!(step_key_canonical(a.0, a.1, a.2), step_key_canonical(b.0, b.1, b.2), "{a:?} vs {b:?}");
    }
}

#[test]
fn write_key_changes_with_step_index_and_inputs() {
    let step = step_key("run", "step", &json!({})).unwrap();
    let other_step = step_key("run", "step2", &json!({})).unwrap();
    let inputs = json!({"to": "a"});
    let base = write_key(&step, 0, &inputs).unwrap();
    assert_ne!(write_key(&step, 1, &inputs).unwrap(), base);
    assert_ne!(write_key(&other_step, 0, &inputs).unwrap(), base);
    assert_ne!(write_key(&step, 0, &json!({"to": "b"})).unwrap(), base);
    assert_ne!(base, step, "write keys and step keys live in different domains");
    assert_eq!(write_key(&step, 0, &json!({"to": "a"})).unwrap(), base);
}

#[test]
fn keys_reject_what_cannot_be_canonicalised() {
    let too_big = json!({"id": u64::MAX});
    assert!(matches!(step_key("r", "s", &too_big), Err(engine::canonical::Error::NumberOutOfRange { .. })));
    let step = step_key("r", "s", &json!(null)).unwrap();
    assert!(write_key(&step, 0, &too_big).is_err());
}

/// Volatile paths: (inputs, paths, inputs differing only in volatile fields, whether keys must match).
#[test]
fn volatile_paths() {
    let paths = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let cases: Vec<(Value, Vec<String>, Value, bool)> = vec![
        // A refreshed timestamp and trace id leave the key alone.
        (
            json!({"amount": 1, "sent_at": "10:00", "meta": {"trace_id": "t1", "run": "r"}}),
            paths(&["sent_at", "meta.trace_id"]),
            json!({"amount": 1, "sent_at": "10:05", "meta": {"trace_id": "t2", "run": "r"}}),
            true,
        ),
        // A volatile field that appears or disappears does not matter either.
        (json!({"amount": 1}), paths(&["sent_at"]), json!({"amount": 1, "sent_at": "10:05"}), true),
        // Any other change still changes the key.
        (
            json!({"amount": 1, "sent_at": "10:00"}),
            paths(&["sent_at"]),
            json!({"amount": 2, "sent_at": "10:00"}),
            false,
        ),
        (
            json!({"meta": {"trace_id": "t1", "run": "r"}}),
            paths(&["meta.trace_id"]),
            json!({"meta": {"trace_id": "t1", "run": "r2"}}),
            false,
        ),
        // Paths name object members only: arrays are not traversed, so an element's field stays in the key.
        (json!({"items": [{"t": 1}]}), paths(&["items.t"]), json!({"items": [{"t": 2}]}), false),
        // A path through a non-object, or one that does not exist, is ignored.
        (json!({"a": 5, "b": 1}), paths(&["a.x", "c", "c.d"]), json!({"a": 5, "b": 2}), false),
    ];
    for (a, volatile, b, same) in cases {
        let key_a = step_key("run", "step", &*without_volatile(&a, &volatile)).unwrap();
        let key_b = step_key("run", "step", &*without_volatile(&b, &volatile)).unwrap();
        assert_eq!(key_a == key_b, same, "{a} vs {b} with volatile {volatile:?}");
        // The engine keys without copying the inputs: the same key.
        assert_eq!(step_key_without("run", "step", &a, &volatile).unwrap(), key_a, "{a} with volatile {volatile:?}");
        let (key, _) = step_key_and_inputs_hash("run", "step", &b, &volatile).unwrap();
        assert_eq!(key, key_b, "{b} with volatile {volatile:?}");
    }
    // Without the volatile list, a refreshed timestamp is a new key.
    let a = json!({"amount": 1, "sent_at": "10:00"});
    let b = json!({"amount": 1, "sent_at": "10:05"});
    assert_ne!(step_key("run", "step", &a).unwrap(), step_key("run", "step", &b).unwrap());
    // The original inputs are untouched (they are still sent to the connector).
    assert_eq!(without_volatile(&a, &paths(&["sent_at"])).into_owned(), json!({"amount": 1}));
    assert_eq!(a, json!({"amount": 1, "sent_at": "10:00"}));
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-1_000_000i64..1_000_000).prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[a-z\u{e9}\u{1F600}\u{e000}\"\\\\\n]{0,6}".prop_map(Value::from),
    ]
}

fn value_strategy() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map("[a-d\u{e000}\u{1F600}]{1,3}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Objects nested up to four deep whose member names are `a`, `b`, `aa`, ..., so that volatile paths over the same
/// names reach members at every depth.
fn narrow_value_strategy() -> impl Strategy<Value = Value> {
    let object = |inner| proptest::collection::btree_map("[ab]{1,2}", inner, 1..4);
    let value = leaf().prop_recursive(4, 48, 4, move |inner| {
        prop_oneof![
            1 => proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            3 => object(inner).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    object(value.boxed()).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// Replaces the first leaf (in document order) of `value` with a different leaf; false if there is no leaf.
fn change_first_leaf(value: &mut Value) -> bool {
    match value {
        Value::Array(items) => items.iter_mut().any(change_first_leaf),
        Value::Object(map) => map.values_mut().any(change_first_leaf),
        leaf => {
            *leaf = match leaf {
                Value::Null => Value::from(false),
                Value::Bool(b) => Value::from(!*b),
                Value::Number(n) => Value::from(format!("{n}")),
                Value::String(s) => Value::from(format!("{s}!")),
                _ => unreachable!("containers are handled above"),
            };
            true
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Pretty or compact text, parsed or built: one key; the key from text equals the key from the Value.
    #[test]
    fn key_invariant_under_formatting(value in value_strategy(), run in "[a-z0-9-]{0,12}", step in "[a-z.]{0,8}") {
        let compact = serde_json::to_string(&value).unwrap();
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        let key = step_key(&run, &step, &value).unwrap();
        prop_assert_eq!(key_of_text(&run, &step, &compact), key);
        prop_assert_eq!(key_of_text(&run, &step, &pretty), key);
        // The engine's own document, converted or parsed, keys the same.
        let doc = Doc::from(&value);
        prop_assert_eq!(step_key(&run, &step, &doc).unwrap(), key);
        prop_assert_eq!(step_key(&run, &step, &serde_json::from_str::<Doc>(&pretty).unwrap()).unwrap(), key);
        prop_assert_eq!(write_key(&key, 3, &doc).unwrap(), write_key(&key, 3, &value).unwrap());
        prop_assert_eq!(Value::from(&doc), value);
    }

    /// Writing the canonical form without the volatile members gives the bytes of the copy with them removed, for
    /// any value and any paths (names drawn from the values' own alphabet, so paths often hit, at any depth).
    #[test]
    fn without_volatile_written_in_place_matches_the_copy(
        value in prop_oneof![value_strategy(), narrow_value_strategy()],
        volatile in proptest::collection::vec("[ab]{0,2}(\\.[ab]{0,2}){0,3}", 0..4),
    ) {
        let expected = to_vec(&*without_volatile(&value, &volatile)).unwrap();
        let written = to_vec_without(&value, &volatile).unwrap();
        prop_assert_eq!(written, expected.clone(), "{} without {:?}", value, volatile);
        let doc = Doc::from(&value);
        let written = to_vec_without(&doc, &volatile).unwrap();
        prop_assert_eq!(written, expected, "the document {} without {:?}", doc, volatile);
        let (doc_key, doc_hash) = step_key_and_inputs_hash("run", "step", &doc, &volatile).unwrap();
        prop_assert_eq!((doc_key, doc_hash), step_key_and_inputs_hash("run", "step", &value, &volatile).unwrap());
    }

    /// Any change of run, step or one value changes the key.
    #[test]
    fn key_sensitive_to_every_part(value in value_strategy(), run in "[a-z0-9-]{1,12}", step in "[a-z.]{1,8}") {
        let key = step_key(&run, &step, &value).unwrap();
        prop_assert_ne!(step_key(&format!("{run}x"), &step, &value).unwrap(), key);
        prop_assert_ne!(step_key(&run, &format!("{step}x"), &value).unwrap(), key);
        let mut changed = value.clone();
        if change_first_leaf(&mut changed) {
            prop_assert_ne!(step_key(&run, &step, &changed).unwrap(), key, "{} vs {}", value, changed);
        }
    }
}
