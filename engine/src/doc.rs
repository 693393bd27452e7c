//! The engine's JSON document: an immutable tree, cheap to clone and to share.
//!
//! Everything the engine hands across the connector boundary or keeps between steps is a [`Doc`]: a step's rendered
//! inputs, a trigger, an applied call's answer, a lookup's find, a step's output. A `serde_json::Value` is a tree of
//! owned nodes: an object is a B-tree whose every leaf is some 600 bytes however few members it holds, every member
//! name and string is a heap block of its own, and a copy of any part copies all of it. A `Doc` instead shares:
//! - a string is a [`Str`]: a `&'static str` (the member names and constant values a program spells), up to 23 bytes
//!   held inline, or a longer one as an `Arc<str>`, so cloning one never copies more than its 24 bytes;
//! - an array is an `Arc<[Doc]>` and an object an [`Obj`], one `Arc` slice of its members, so cloning either is a
//!   reference count;
//! - an object's members are kept sorted by the UTF-16 code units of their names, as RFC 8785 orders them, with no
//!   name twice, so the canonical writer walks them as they are.
//!
//! So rendering a step's inputs allocates one block per object or array it builds and one per interpolated string
//! longer than 23 bytes, and nothing for the names and values it takes from a template, the trigger or an earlier
//! output. Nothing is changed in place: [`Obj::with`] and [`Obj::without`] build a new object.
//!
//! `serde_json::Value` stays at the edges (profiles, results, the command lines), converted with `From` either way;
//! `Doc` implements `Serialize` and `Deserialize`, so `serde_json::from_slice::<Doc>` parses straight into one. A
//! repeated member name in parsed text keeps the last value, as `serde_json::Value` does; [`crate::canonical`] is the
//! strict parser that rejects it.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, Index};
use std::sync::{Arc, LazyLock};

pub use serde_json::Number;
use serde_json::Value;
use smol_str::SmolStr;

use crate::canonical::cmp_utf16;

/// A [`Doc`] written in JSON, as `serde_json::json!` writes a `Value` (through one, so for tests and set-up rather
/// than hot paths): `doc!({"id": "ch_1", "amount": n})`.
#[macro_export]
macro_rules! doc {
    ($($json:tt)+) => {
        $crate::doc::Doc::from($crate::doc::__json!($($json)+))
    };
}

#[doc(hidden)]
pub use serde_json::json as __json;

/// A string in a document: a `&'static str` the program spells, up to 23 bytes held inline, or a longer one shared
/// (`Arc<str>`). Cloning one never copies more than its 24 bytes, and dropping one touches memory elsewhere only for a
/// shared string (its reference count).
#[derive(Clone)]
pub struct Str(SmolStr);

impl Str {
    /// A string the program spells: never copied.
    pub const fn from_static(s: &'static str) -> Str {
        Str(SmolStr::new_static(s))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl Deref for Str {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Str {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl Borrow<str> for Str {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Str {
    fn eq(&self, other: &Str) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Str {}

impl PartialEq<str> for Str {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Str {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Hash for Str {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl PartialOrd for Str {
    fn partial_cmp(&self, other: &Str) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// UTF-8 byte order, as `str` orders (not the canonical member order: see [`cmp_utf16`]).
impl Ord for Str {
    fn cmp(&self, other: &Str) -> Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl fmt::Debug for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Str {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Str {
    fn from(s: &str) -> Str {
        Str(SmolStr::new(s))
    }
}

impl From<String> for Str {
    fn from(s: String) -> Str {
        Str(SmolStr::from(s))
    }
}

impl From<&String> for Str {
    fn from(s: &String) -> Str {
        Str(SmolStr::new(s))
    }
}

/// Shares `s` if it is too long to hold inline.
impl From<Arc<str>> for Str {
    fn from(s: Arc<str>) -> Str {
        Str(SmolStr::from(s))
    }
}

/// Parses JSON text, as `serde_json::from_slice` does, but checks that the bytes are UTF-8 once, for the whole text:
/// parsing a byte slice, serde_json checks every string it reads on its own (some 95 instructions each, 2.8 strings
/// per simulated step). Text that is not UTF-8 is refused with the position of the first bad byte.
/// Nested as deep as the canonical writer accepts ([`crate::canonical::DEPTH_MAX`]) it is read, where serde_json
/// alone stops one level short: see [`from_str_deep`].
pub fn from_slice<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    let text = std::str::from_utf8(bytes).map_err(<serde_json::Error as serde::de::Error>::custom)?;
    from_str_deep(text, crate::canonical::DEPTH_MAX)
}

/// Parses JSON text nested at most `depth_max` levels, as `serde_json::from_str` does. serde_json alone reads at
/// most 127 levels, one short of what the canonical writer accepts, so a document stored canonical (an API's answer,
/// a trigger, a plan) could be written and then never read back, failing every drive that needs it; and a ledger
/// files a person's decision two levels below its output. Text nested deeper than `depth_max` is refused before it is
/// parsed, so the parse's recursion has that bound however the text was damaged. Text shorter than 256 bytes cannot
/// nest 128 levels, and is parsed at once.
pub fn from_str_deep<T: serde::de::DeserializeOwned>(text: &str, depth_max: usize) -> Result<T, serde_json::Error> {
    if text.len() < 256 {
        return serde_json::from_str(text);
    }
    if let Some(offset) = crate::canonical::deeper_than(text.as_bytes(), depth_max) {
        return Err(<serde_json::Error as serde::de::Error>::custom(format!(
            "nesting deeper than {depth_max} levels at byte {offset}"
        )));
    }
    let mut parser = serde_json::Deserializer::from_str(text);
    parser.disable_recursion_limit();
    let value = T::deserialize(&mut parser)?;
    parser.end()?;
    Ok(value)
}

// A member is a name and a value in 48 bytes: a string held inline leaves a document no larger than a shared one.
const _: () = assert!(std::mem::size_of::<Str>() == 24 && std::mem::size_of::<Doc>() == 24);

type Members = Arc<[(Str, Doc)]>;

/// The one empty member list and the one empty array every empty object and array shares (an `Arc` of nothing is
/// still a heap block of its counts).
static NO_MEMBERS: LazyLock<Members> = LazyLock::new(|| Arc::from(Vec::new()));
static NO_ITEMS: LazyLock<Arc<[Doc]>> = LazyLock::new(|| Arc::from(Vec::new()));

/// A JSON object: its members sorted by the UTF-16 code units of their names (RFC 8785's order), each name once.
#[derive(Clone, PartialEq)]
pub struct Obj(Members);

impl Obj {
    /// The empty object.
    pub fn empty() -> Obj {
        Obj(NO_MEMBERS.clone())
    }

    /// The object with `members` in any order; of a repeated name the last value is kept.
    pub fn new(mut members: Vec<(Str, Doc)>) -> Obj {
        if members.is_empty() {
            return Obj::empty();
        }
        if !is_sorted_and_unique(&members) {
            members.sort_by(|a, b| cmp_utf16(&a.0, &b.0));
            // The sort is stable, so of equal names the last given is the last in its run: keep that one.
            let mut kept: Vec<(Str, Doc)> = Vec::with_capacity(members.len());
            for member in members {
                match kept.last_mut() {
                    Some(last) if last.0 == member.0 => *last = member,
                    _ => kept.push(member),
                }
            }
            members = kept;
        }
        Obj(Arc::from(members))
    }

    /// The object with `members`, which are already in canonical order with each name once (checked in debug builds):
    /// a rendered template's members, collected straight into their one heap block.
    pub fn from_sorted(members: Members) -> Obj {
        debug_assert!(is_sorted_and_unique(&members), "members out of canonical order");
        Obj(members)
    }

    /// The object with `members` named by the program: the names are never copied.
    pub fn from_static<const N: usize>(mut members: [(&'static str, Doc); N]) -> Obj {
        if N == 0 {
            return Obj::empty();
        }
        let ordered = members.windows(2).all(|pair| cmp_utf16(pair[0].0, pair[1].0) == Ordering::Less);
        if !ordered {
            members.sort_by(|a, b| cmp_utf16(a.0, b.0));
            if members.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return Obj::new(members.into_iter().map(|(name, value)| (Str::from_static(name), value)).collect());
            }
        }
        Obj(members.into_iter().map(|(name, value)| (Str::from_static(name), value)).collect())
    }

    pub fn get(&self, name: &str) -> Option<&Doc> {
        self.0.iter().find(|(n, _)| n.as_str() == name).map(|(_, value)| value)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The members in canonical order.
    pub fn members(&self) -> &[(Str, Doc)] {
        &self.0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, (Str, Doc)> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This object with `name` set to `value` (added, or replacing its value).
    pub fn with(&self, name: impl Into<Str>, value: Doc) -> Obj {
        let name = name.into();
        let at = self.0.partition_point(|(n, _)| cmp_utf16(n, &name) == Ordering::Less);
        let replaces = self.0.get(at).is_some_and(|(n, _)| *n == name);
        let mut members: Vec<(Str, Doc)> = Vec::with_capacity(self.len() + 1);
        members.extend_from_slice(&self.0[..at]);
        members.push((name, value));
        members.extend_from_slice(&self.0[at + usize::from(replaces)..]);
        Obj(Arc::from(members))
    }

    /// This object without the member `name` (the same object, shared, if it has none).
    pub fn without(&self, name: &str) -> Obj {
        if !self.contains_key(name) {
            return self.clone();
        }
        Obj::new(self.iter().filter(|(n, _)| n.as_str() != name).cloned().collect())
    }
}

fn is_sorted_and_unique(members: &[(Str, Doc)]) -> bool {
    members.windows(2).all(|pair| cmp_utf16(&pair[0].0, &pair[1].0) == Ordering::Less)
}

impl<'a> IntoIterator for &'a Obj {
    type Item = &'a (Str, Doc);
    type IntoIter = std::slice::Iter<'a, (Str, Doc)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl fmt::Debug for Obj {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(name, value)| (name, value))).finish()
    }
}

/// A JSON document (see the module docs).
#[derive(Clone, PartialEq, Default)]
pub enum Doc {
    #[default]
    Null,
    Bool(bool),
    Number(Number),
    String(Str),
    Array(Arc<[Doc]>),
    Object(Obj),
}

static NULL: Doc = Doc::Null;

impl Doc {
    /// The object with `members` named by the program (a repeated name keeps the last value).
    pub fn object<const N: usize>(members: [(&'static str, Doc); N]) -> Doc {
        Doc::Object(Obj::from_static(members))
    }

    /// A string the program spells: never copied.
    pub const fn from_static(s: &'static str) -> Doc {
        Doc::String(Str::from_static(s))
    }

    pub fn array(items: Vec<Doc>) -> Doc {
        if items.is_empty() { Doc::Array(NO_ITEMS.clone()) } else { Doc::Array(Arc::from(items)) }
    }

    /// The member `name` of an object (`None` for a missing member or a document that is not an object).
    pub fn get(&self, name: &str) -> Option<&Doc> {
        match self {
            Doc::Object(obj) => obj.get(name),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Doc::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Doc::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Doc::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Doc::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Doc::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Doc]> {
        match self {
            Doc::Array(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_object(&self) -> Option<&Obj> {
        match self {
            Doc::Object(obj) => Some(obj),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Doc::Null)
    }

    pub fn is_object(&self) -> bool {
        matches!(self, Doc::Object(_))
    }

    pub fn is_array(&self) -> bool {
        matches!(self, Doc::Array(_))
    }

    pub fn is_string(&self) -> bool {
        matches!(self, Doc::String(_))
    }

    pub fn is_number(&self) -> bool {
        matches!(self, Doc::Number(_))
    }

    /// The same document as a `serde_json::Value` (a deep copy: for the edges).
    pub fn to_value(&self) -> Value {
        Value::from(self)
    }
}

impl Index<&str> for Doc {
    type Output = Doc;
    /// The member `name`, or null (as `serde_json::Value` indexes).
    fn index(&self, name: &str) -> &Doc {
        self.get(name).unwrap_or(&NULL)
    }
}

impl Index<usize> for Doc {
    type Output = Doc;
    /// Item `index` of an array, or null.
    fn index(&self, index: usize) -> &Doc {
        self.as_array().and_then(|items| items.get(index)).unwrap_or(&NULL)
    }
}

impl From<bool> for Doc {
    fn from(b: bool) -> Doc {
        Doc::Bool(b)
    }
}

macro_rules! from_integer {
    ($($t:ty),*) => {$(
        impl From<$t> for Doc {
            fn from(n: $t) -> Doc {
                Doc::Number(Number::from(n))
            }
        }
    )*};
}
from_integer!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl From<f64> for Doc {
    /// A finite double, or null for NaN and the infinities (as `serde_json::Value::from` does).
    fn from(f: f64) -> Doc {
        Number::from_f64(f).map_or(Doc::Null, Doc::Number)
    }
}

impl From<Number> for Doc {
    fn from(n: Number) -> Doc {
        Doc::Number(n)
    }
}

impl From<&str> for Doc {
    fn from(s: &str) -> Doc {
        Doc::String(Str::from(s))
    }
}

impl From<String> for Doc {
    fn from(s: String) -> Doc {
        Doc::String(Str::from(s))
    }
}

impl From<Str> for Doc {
    fn from(s: Str) -> Doc {
        Doc::String(s)
    }
}

impl From<Arc<str>> for Doc {
    fn from(s: Arc<str>) -> Doc {
        Doc::String(Str::from(s))
    }
}

impl From<Obj> for Doc {
    fn from(obj: Obj) -> Doc {
        Doc::Object(obj)
    }
}

impl From<Vec<Doc>> for Doc {
    fn from(items: Vec<Doc>) -> Doc {
        Doc::array(items)
    }
}

impl<T: Into<Doc>> From<Option<T>> for Doc {
    fn from(value: Option<T>) -> Doc {
        value.map_or(Doc::Null, Into::into)
    }
}

impl From<&Value> for Doc {
    fn from(value: &Value) -> Doc {
        match value {
            Value::Null => Doc::Null,
            Value::Bool(b) => Doc::Bool(*b),
            Value::Number(n) => Doc::Number(n.clone()),
            Value::String(s) => Doc::from(s.as_str()),
            Value::Array(items) => Doc::array(items.iter().map(Doc::from).collect()),
            Value::Object(map) => {
                Doc::Object(Obj::new(map.iter().map(|(k, v)| (Str::from(k), Doc::from(v))).collect()))
            }
        }
    }
}

impl From<Value> for Doc {
    fn from(value: Value) -> Doc {
        Doc::from(&value)
    }
}

impl From<&Doc> for Value {
    fn from(doc: &Doc) -> Value {
        match doc {
            Doc::Null => Value::Null,
            Doc::Bool(b) => Value::Bool(*b),
            Doc::Number(n) => Value::Number(n.clone()),
            Doc::String(s) => Value::String(s.to_string()),
            Doc::Array(items) => Value::Array(items.iter().map(Value::from).collect()),
            Doc::Object(obj) => Value::Object(obj.iter().map(|(k, v)| (k.to_string(), Value::from(v))).collect()),
        }
    }
}

impl From<Doc> for Value {
    fn from(doc: Doc) -> Value {
        Value::from(&doc)
    }
}

/// The same document, member for member (for tests and the edges: no copy is made).
impl PartialEq<Value> for Doc {
    fn eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Doc::Null, Value::Null) => true,
            (Doc::Bool(a), Value::Bool(b)) => a == b,
            (Doc::Number(a), Value::Number(b)) => a == b,
            (Doc::String(a), Value::String(b)) => a.as_str() == b,
            (Doc::Array(a), Value::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y),
            (Doc::Object(a), Value::Object(b)) => {
                a.len() == b.len() && a.iter().all(|(name, x)| b.get(name.as_str()).is_some_and(|y| x == y))
            }
            _ => false,
        }
    }
}

impl PartialEq<Doc> for Value {
    fn eq(&self, other: &Doc) -> bool {
        other == self
    }
}

/// Comparisons with plain values, as `serde_json::Value` has them (`doc["email"] == "a@example.com"`).
macro_rules! eq_plain {
    ($($t:ty => |$doc:ident, $other:ident| $eq:expr;)*) => {$(
        impl PartialEq<$t> for Doc {
            fn eq(&self, other: &$t) -> bool {
                let ($doc, $other) = (self, other);
                $eq
            }
        }
    )*};
}
eq_plain! {
    str => |doc, other| doc.as_str() == Some(other);
    &str => |doc, other| doc.as_str() == Some(*other);
    String => |doc, other| doc.as_str() == Some(other.as_str());
    bool => |doc, other| doc.as_bool() == Some(*other);
    i64 => |doc, other| doc.as_i64() == Some(*other);
    u64 => |doc, other| doc.as_u64() == Some(*other);
    i32 => |doc, other| doc.as_i64() == Some(i64::from(*other));
    u32 => |doc, other| doc.as_u64() == Some(u64::from(*other));
    f64 => |doc, other| doc.as_f64() == Some(*other);
}

/// Compact JSON text, exactly as `serde_json::Value` prints the same document.
impl fmt::Display for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Value::from(self), f)
    }
}

impl fmt::Debug for Doc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Doc::Null => f.write_str("null"),
            Doc::Bool(b) => write!(f, "{b}"),
            Doc::Number(n) => write!(f, "{n}"),
            Doc::String(s) => fmt::Debug::fmt(s.as_str(), f),
            Doc::Array(items) => f.debug_list().entries(items.iter()).finish(),
            Doc::Object(obj) => fmt::Debug::fmt(obj, f),
        }
    }
}

impl serde::Serialize for Doc {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Doc::Null => serializer.serialize_unit(),
            Doc::Bool(b) => serializer.serialize_bool(*b),
            Doc::Number(n) => n.serialize(serializer),
            Doc::String(s) => serializer.serialize_str(s),
            Doc::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items.iter() {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Doc::Object(obj) => {
                let mut map = serializer.serialize_map(Some(obj.len()))?;
                for (name, value) in obj {
                    map.serialize_entry(name.as_str(), value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Doc {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Doc, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

/// Room for the items of an array or the members of an object whose parser gives no count (serde_json gives none): a
/// trigger or an output has some two to eight, and a list that starts empty is reallocated twice on the way to six.
/// The list is copied into the document's own block when it is complete, so the room costs nothing after.
const GUESSED_LEN: usize = 8;

impl<'de> serde::de::Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Doc, E> {
        Ok(Doc::Number(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Doc, E> {
        Ok(Doc::Number(n.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Doc, E> {
        Ok(Doc::from(f))
    }

    fn visit_str<E>(self, s: &str) -> Result<Doc, E> {
        Ok(Doc::from(s))
    }

    fn visit_string<E>(self, s: String) -> Result<Doc, E> {
        Ok(Doc::from(s.as_str()))
    }

    fn visit_none<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_unit<E>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Doc, D::Error> {
        serde::Deserialize::deserialize(deserializer)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(GUESSED_LEN).min(64));
        while let Some(item) = seq.next_element::<Doc>()? {
            items.push(item);
        }
        Ok(Doc::array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(GUESSED_LEN).min(64));
        while let Some(name) = map.next_key_seed(StrSeed)? {
            members.push((name, map.next_value::<Doc>()?));
        }
        Ok(Doc::Object(Obj::new(members)))
    }
}

/// A member name read straight into its shared block (one copy of the text, not two).
struct StrSeed;

impl<'de> serde::de::DeserializeSeed<'de> for StrSeed {
    type Value = Str;
    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Str, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> serde::de::Visitor<'de> for StrSeed {
    type Value = Str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, s: &str) -> Result<Str, E> {
        Ok(Str::from(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn from_slice_parses_as_serde_json_and_refuses_text_that_is_not_utf8() {
        let text = b"{\"b\":[1,\"x\\u00e9\"],\"a\":{\"c\":null},\"d\":\"caf\xc3\xa9\"}";
        let ours: Doc = from_slice(text).expect("valid JSON");
        let theirs: Doc = serde_json::from_slice(text).expect("valid JSON");
        assert!(ours == theirs);
        let bad = from_slice::<Doc>(b"{\"a\":\"\xff\"}").expect_err("not UTF-8");
        assert!(bad.to_string().contains("utf-8"), "{bad}");
        assert!(from_slice::<Doc>(b"{\"a\":").is_err());
    }

    #[test]
    fn objects_keep_canonical_order_and_the_last_of_a_repeated_name() {
        let obj = Obj::new(vec![
            (Str::from("b"), Doc::from(1)),
            (Str::from("a"), Doc::from(2)),
            (Str::from("b"), Doc::from(3)),
            (Str::from("\u{10000}"), Doc::from(4)),
            (Str::from("\u{e000}"), Doc::from(5)),
        ]);
        let names: Vec<&str> = obj.iter().map(|(n, _)| n.as_str()).collect();
        // UTF-16 order puts the surrogate pair of U+10000 before U+E000, unlike UTF-8 byte order.
        assert_eq!(names, ["a", "b", "\u{10000}", "\u{e000}"]);
        assert_eq!(obj.get("b"), Some(&Doc::from(3)));
        assert_eq!(
            Doc::object([("z", Doc::from(1)), ("a", Doc::Null), ("z", Doc::from(2))]),
            json!({"a": null, "z": 2})
        );
    }

    #[test]
    fn with_and_without_build_new_objects_in_order() {
        let obj = Obj::from_static([("b", Doc::from(1)), ("d", Doc::from(2))]);
        assert_eq!(Doc::from(obj.with("c", Doc::from(3))), json!({"b": 1, "c": 3, "d": 2}));
        assert_eq!(Doc::from(obj.with("a", Doc::from(3))), json!({"a": 3, "b": 1, "d": 2}));
        assert_eq!(Doc::from(obj.with("e", Doc::from(3))), json!({"b": 1, "d": 2, "e": 3}));
        assert_eq!(Doc::from(obj.with("b", Doc::from(3))), json!({"b": 3, "d": 2}));
        assert_eq!(Doc::from(obj.without("b")), json!({"d": 2}));
        assert_eq!(Doc::from(obj.without("x")), json!({"b": 1, "d": 2}));
        assert_eq!(Doc::from(obj), json!({"b": 1, "d": 2}), "the original is unchanged");
    }

    #[test]
    fn converts_to_and_from_values_and_parses_and_prints_as_they_do() {
        let value = json!({"n": [1, -2, 2.5, 1e300], "s": "x\"y", "o": {"\u{e000}": true, "\u{10000}": null}, "e": {}});
        let doc = Doc::from(&value);
        assert_eq!(doc, value);
        assert_eq!(Value::from(&doc), value);
        let text = value.to_string();
        let parsed: Doc = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, doc);
        assert_eq!(doc.to_string(), text, "Display prints what serde_json prints");
        assert_eq!(serde_json::from_str::<Doc>(r#"{"a":1,"a":2}"#).unwrap(), json!({"a": 2}));
        assert_eq!(doc["s"].as_str(), Some("x\"y"));
        assert_eq!(doc["n"][1].as_i64(), Some(-2));
        assert!(doc["missing"].is_null());
        assert_ne!(doc, json!({"n": []}));
    }
}
