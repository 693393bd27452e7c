//! Building JSON objects on hot paths.
//!
//! `serde_json::json!` turns every interpolated expression into a `Value` with `serde_json::to_value(&expr)`, which
//! for an expression that is already a `Value` rebuilds the whole tree through the serializer instead of moving it:
//! several allocations per node, where a move costs none and a clone one per node. [`object`] takes the members as
//! values and moves them in.

use serde_json::{Map, Value};

/// The object with `members` (a repeated name keeps the last value, as in `json!`).
pub fn object<const N: usize>(members: [(&str, Value); N]) -> Value {
    let mut map = Map::new();
    for (name, value) in members {
        map.insert(name.to_owned(), value);
    }
    Value::Object(map)
}

#[cfg(test)]
mod tests {
    use super::object;
    use serde_json::{Value, json};

    #[test]
    fn builds_what_json_builds() {
        let inputs = json!({"amount": 5, "tags": ["a", {"b": null}]});
        assert_eq!(
            object([("id", Value::from("ch_1")), ("params", inputs.clone()), ("n", Value::from(3))]),
            json!({"id": "ch_1", "params": inputs, "n": 3})
        );
        assert_eq!(object([]), json!({}));
        assert_eq!(object([("a", Value::from(1)), ("a", Value::from(2))]), json!({"a": 2}));
    }
}
