//! `engine::doc::Doc` against `serde_json::Value` as the model: the same document converted either way, parsed, printed,
//! canonicalised, and changed member by member.

use engine::canonical::to_vec;
use engine::doc::{Doc, Obj, Str};
use proptest::prelude::*;
use serde_json::Value;

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        "[a-z\u{e9}\u{1F600}\u{e000}\"\\\\\n]{0,6}".prop_map(Value::from),
    ]
}

/// Member names from a small alphabet with characters on both sides of the UTF-16/UTF-8 order difference, so objects
/// often share names and their order matters.
fn name() -> impl Strategy<Value = String> {
    "[ab\u{e000}\u{1F600}]{1,2}"
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(name(), inner, 0..5).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Converted, parsed from either spelling, or printed: the same document as the `Value`, with the same canonical
    /// bytes, and members in canonical order.
    #[test]
    fn a_doc_is_the_value_it_was_made_from(value in value()) {
        let doc = Doc::from(&value);
        prop_assert_eq!(&doc, &value);
        prop_assert_eq!(Value::from(&doc), value.clone());
        // The same bytes, or the same refusal (an integer no double stands for).
        prop_assert_eq!(to_vec(&doc), to_vec(&value));
        prop_assert_eq!(doc.to_string(), value.to_string());
        let pretty = serde_json::to_string_pretty(&value).unwrap();
        prop_assert_eq!(serde_json::from_str::<Doc>(&pretty).unwrap(), doc.clone());
        prop_assert_eq!(serde_json::from_str::<Value>(&serde_json::to_string(&doc).unwrap()).unwrap(), value);
        assert_canonical_order(&doc);
    }

    /// `with` and `without` give what inserting and removing the member of a map gives, and leave the original as it
    /// was.
    #[test]
    fn with_and_without_are_insert_and_remove(
        members in proptest::collection::btree_map(name(), leaf(), 0..6),
        name in name(),
        item in leaf(),
    ) {
        let model: serde_json::Map<String, Value> = members.into_iter().collect();
        let Doc::Object(obj) = Doc::from(&Value::Object(model.clone())) else { unreachable!("an object") };

        let mut inserted = model.clone();
        inserted.insert(name.clone(), item.clone());
        let with = Doc::Object(obj.with(Str::from(name.as_str()), Doc::from(&item)));
        prop_assert_eq!(&with, &Value::Object(inserted));
        assert_canonical_order(&with);

        let mut removed = model.clone();
        removed.remove(&name);
        let without = Doc::Object(obj.without(&name));
        prop_assert_eq!(&without, &Value::Object(removed));
        assert_canonical_order(&without);

        prop_assert_eq!(&Doc::Object(obj), &Value::Object(model));
    }

    /// An object made of members in any order, names repeated, keeps the last value of each name, as a map does.
    #[test]
    fn a_repeated_name_keeps_its_last_value(pairs in proptest::collection::vec((name(), leaf()), 0..8)) {
        let mut model = serde_json::Map::new();
        for (name, item) in &pairs {
            model.insert(name.clone(), item.clone());
        }
        let obj = Obj::new(pairs.iter().map(|(n, v)| (Str::from(n.as_str()), Doc::from(v))).collect());
        let doc = Doc::Object(obj);
        prop_assert_eq!(&doc, &Value::Object(model));
        assert_canonical_order(&doc);
    }
}

/// Every object in `doc` has its members in RFC 8785 order (UTF-16 code units), each name once.
fn assert_canonical_order(doc: &Doc) {
    match doc {
        Doc::Object(obj) => {
            for pair in obj.members().windows(2) {
                assert_eq!(
                    engine::canonical::cmp_utf16(&pair[0].0, &pair[1].0),
                    std::cmp::Ordering::Less,
                    "{:?} before {:?}",
                    pair[0].0,
                    pair[1].0
                );
            }
            obj.iter().for_each(|(_, item)| assert_canonical_order(item));
        }
        Doc::Array(items) => items.iter().for_each(assert_canonical_order),
        _ => {}
    }
}
