//! RFC 8785 canonical JSON: the RFC's own examples, the rejected inputs as a table, and two cross-checks on generated
//! documents — against a second implementation written here from the RFC's text (UTF-16 sort by transcoding, numbers
//! from Rust's shortest round-trip digits laid out by the ECMAScript rules), and against the Python `rfc8785` package
//! (installed by the test itself under the target directory; the test fails, never skips, if it cannot).

use engine::canonical::{DEPTH_MAX, Error, canonicalize_bytes, cmp_utf16, to_vec};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::Value;
use std::fmt::Write as _;

fn canon_str(text: &str) -> Result<String, Error> {
    canonicalize_bytes(text.as_bytes()).map(|b| String::from_utf8(b).expect("canonical output is UTF-8"))
}

// ---------------------------------------------------------------------------------------------------------------
// The RFC's examples.

/// RFC 8785 section 3.2.2, the sample input and its canonical output.
#[test]
fn rfc_section_3_2_2_sample() {
    let input = r#"{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}"#;
    let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\
                    \"string\":\"\u{20ac}$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
    assert_eq!(canon_str(input).unwrap(), expected);
    let value: Value = serde_json::from_str(input).unwrap();
    assert_eq!(String::from_utf8(to_vec(&value).unwrap()).unwrap(), expected);
}

/// RFC 8785 section 3.2.3, sorting by UTF-16 code units (the emoji sorts before U+FB33).
#[test]
fn rfc_section_3_2_3_sorting() {
    let input = r#"{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}"#;
    let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
                    \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
                    \"\u{1F600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
    assert_eq!(canon_str(input).unwrap(), expected);
    // serde_json's map is in UTF-8 byte order (U+FB33 before the emoji): write_value must re-sort.
    let value: Value = serde_json::from_str(input).unwrap();
    assert_eq!(String::from_utf8(to_vec(&value).unwrap()).unwrap(), expected);
}

/// RFC 8785 appendix B: IEEE-754 bit patterns and their ECMAScript serialisation; `None` for NaN and Infinity, which
/// cannot be expressed in JSON text nor held by a `serde_json::Value`.
const APPENDIX_B: &[(u64, Option<&str>)] = &[
    (0x0000000000000000, Some("0")),
    (0x8000000000000000, Some("0")),
    (0x0000000000000001, Some("5e-324")),
    (0x8000000000000001, Some("-5e-324")),
    (0x7fefffffffffffff, Some("1.7976931348623157e+308")),
    (0xffefffffffffffff, Some("-1.7976931348623157e+308")),
    (0x4340000000000000, Some("9007199254740992")),
    (0xc340000000000000, Some("-9007199254740992")),
    (0x4430000000000000, Some("295147905179352830000")),
    (0x7fffffffffffffff, None),
    (0x7ff0000000000000, None),
    (0x44b52d02c7e14af5, Some("9.999999999999997e+22")),
    (0x44b52d02c7e14af6, Some("1e+23")),
    (0x44b52d02c7e14af7, Some("1.0000000000000001e+23")),
    (0x444b1ae4d6e2ef4e, Some("999999999999999700000")),
    (0x444b1ae4d6e2ef4f, Some("999999999999999900000")),
    (0x444b1ae4d6e2ef50, Some("1e+21")),
    (0x3eb0c6f7a0b5ed8c, Some("9.999999999999997e-7")),
    (0x3eb0c6f7a0b5ed8d, Some("0.000001")),
    (0x41b3de4355555553, Some("333333333.3333332")),
    (0x41b3de4355555554, Some("333333333.33333325")),
    (0x41b3de4355555555, Some("333333333.3333333")),
    (0x41b3de4355555556, Some("333333333.3333334")),
    (0x41b3de4355555557, Some("333333333.33333343")),
    (0xbecbf647612f3696, Some("-0.0000033333333333333333")),
    (0x43143ff3c1cb0959, Some("1424953923781206.2")),
];

#[test]
fn rfc_appendix_b_numbers() {
    for &(bits, expected) in APPENDIX_B {
        let f = f64::from_bits(bits);
        let Some(expected) = expected else {
            assert!(!f.is_finite(), "{bits:#018x}");
            assert!(serde_json::Number::from_f64(f).is_none(), "a Value cannot hold {f}");
            continue;
        };
        // Through a Value holding the double.
        let value = Value::from(f);
        assert_eq!(String::from_utf8(to_vec(&value).unwrap()).unwrap(), expected, "Value {bits:#018x}");
        // Through JSON text, in three spellings of the same double.
        for text in [format!("{f:?}"), format!("{f:e}"), format!("{f:E}")] {
            assert_eq!(canon_str(&text).unwrap(), expected, "text {text} ({bits:#018x})");
        }
        // The canonical text is itself canonical and names the same double.
        assert_eq!(canon_str(expected).unwrap(), expected);
        assert_eq!(expected.parse::<f64>().unwrap(), f);
        // And the second implementation agrees.
        assert_eq!(reference::number(f), expected, "reference {bits:#018x}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Accepted inputs whose canonical form is worth pinning, and rejected inputs, as tables.

const ACCEPTED: &[(&str, &str)] = &[
    ("  [ 1 , 2 ]\n", "[1,2]"),
    ("1.0", "1"),
    ("-0", "0"),
    ("-0.0e5", "0"),
    ("0e999", "0"),
    ("1E+2", "100"),
    ("4.50", "4.5"),
    ("2e-3", "0.002"),
    ("1e21", "1e+21"),
    ("123456789012345678901234567890e-10", "12345678901234567000"),
    ("5e-324", "5e-324"),
    ("9007199254740992", "9007199254740992"),
    ("-9007199254740992", "-9007199254740992"),
    // 2^60 and 2^64 are exact doubles: accepted, printed the ECMAScript way.
    ("1152921504606846976", "1152921504606847000"),
    ("18446744073709551616", "18446744073709552000"),
    // Integer literals that are not exact but are their double's ECMAScript spelling (so output is a fixed point).
    ("295147905179352830000", "295147905179352830000"),
    ("1.0000000000000003e23", "1.0000000000000003e+23"),
    ("100000000000000030000000.0", "1.0000000000000003e+23"),
    ("-1152921504606847000", "-1152921504606847000"),
    (r#""\/\u00e9\u2028\u007f""#, "\"/\u{e9}\u{2028}\u{7f}\""),
    (r#""\u0000\u001f\b\f""#, r#""\u0000\u001f\b\f""#),
    (r#"{"b":1,"a":{"d":[],"c":{}}}"#, r#"{"a":{"c":{},"d":[]},"b":1}"#),
    (r#"{"":0," ":1}"#, r#"{"":0," ":1}"#),
    (r#""\ud83d\ude00""#, "\"\u{1F600}\""),
];

#[test]
fn accepted_inputs() {
    for &(input, expected) in ACCEPTED {
        assert_eq!(canon_str(input).as_deref(), Ok(expected), "input {input}");
    }
}

fn syntax(offset: usize) -> Error {
    Error::Syntax { message: String::new(), offset }
}

fn number(text: &str, offset: usize) -> Error {
    Error::NumberOutOfRange { text: text.to_string(), offset }
}

/// Rejected inputs and the error each must produce (`Syntax` is compared by offset only).
fn rejected() -> Vec<(Vec<u8>, Error)> {
    let text = |s: &str| s.as_bytes().to_vec();
    let mut cases = vec![
        (text(r#"{"a":1,"a":2}"#), Error::DuplicateKey { key: "a".into(), offset: 7 }),
        (text(r#"{"a":1,"\u0061":2}"#), Error::DuplicateKey { key: "a".into(), offset: 7 }),
        (text(r#"{"b":{"x":1,"y":2,"x":3}}"#), Error::DuplicateKey { key: "x".into(), offset: 18 }),
        (text(r#"{"z":1,"y":1,"z":2,"y":2}"#), Error::DuplicateKey { key: "z".into(), offset: 13 }),
        (text(r#""\ud800""#), Error::LoneSurrogate { offset: 1 }),
        (text(r#""\udc00""#), Error::LoneSurrogate { offset: 1 }),
        (text(r#""ab\ud800\u0041""#), Error::LoneSurrogate { offset: 3 }),
        (text(r#""\ud800x""#), Error::LoneSurrogate { offset: 1 }),
        (text(r#"{"\ud83d":1}"#), Error::LoneSurrogate { offset: 2 }),
        (text("[1e400]"), number("1e400", 1)),
        (text("-1e400"), number("-1e400", 0)),
        (text("1e-400"), number("1e-400", 0)),
        (text("[0, 9007199254740993]"), number("9007199254740993", 4)),
        (text("-9007199254740993"), number("-9007199254740993", 0)),
        (text("18446744073709551615"), number("18446744073709551615", 0)),
        (text("[9007199254740993.0]"), number("9007199254740993.0", 1)),
        (text("9.007199254740993e15"), number("9.007199254740993e15", 0)),
        (text("90071992547409930e-1"), number("90071992547409930e-1", 0)),
        (text("-9007199254740993.000"), number("-9007199254740993.000", 0)),
        (text("1152921504606846977.0"), number("1152921504606846977.0", 0)),
        (text("100000000000000025165825e0"), number("100000000000000025165825e0", 0)),
        (b"\"\xff\"".to_vec(), Error::InvalidUtf8 { offset: 1 }),
        (b"[\"ok\",\"\xc3\"]".to_vec(), Error::InvalidUtf8 { offset: 7 }),
        (b"\"\xed\xa0\x80\"".to_vec(), Error::InvalidUtf8 { offset: 1 }),
        (
            text(&format!("{}{}", r#"{"a":"#.repeat(DEPTH_MAX + 1), "}".repeat(DEPTH_MAX + 1))),
            Error::TooDeep { depth_max: DEPTH_MAX, offset: 5 * DEPTH_MAX },
        ),
        (text(""), syntax(0)),
        (text("   "), syntax(3)),
        (text("{"), syntax(1)),
        (text("[1,]"), syntax(3)),
        (text(r#"{"a" 1}"#), syntax(5)),
        (text(r#"{"a":1,}"#), syntax(7)),
        (text("{'a':1}"), syntax(1)),
        (text("01"), syntax(1)),
        (text("1."), syntax(2)),
        (text(".5"), syntax(0)),
        (text("+1"), syntax(0)),
        (text("-"), syntax(1)),
        (text("1e"), syntax(2)),
        (text("NaN"), syntax(0)),
        (text("Infinity"), syntax(0)),
        (text("tru"), syntax(0)),
        (text("\"\t\""), syntax(1)),
        (text(r#""\x""#), syntax(1)),
        (text(r#""\u12""#), syntax(1)),
        (text(r#""abc"#), syntax(4)),
        (text("[1] x"), syntax(4)),
        (text("1 2"), syntax(2)),
        (b"\xef\xbb\xbf{}".to_vec(), syntax(0)),
    ];
    cases.push((
        text(&format!("{}{}", "[".repeat(DEPTH_MAX + 1), "]".repeat(DEPTH_MAX + 1))),
        Error::TooDeep { depth_max: DEPTH_MAX, offset: DEPTH_MAX },
    ));
    cases
}

#[test]
fn rejected_inputs() {
    for (input, expected) in rejected() {
        let got = canonicalize_bytes(&input);
        let shown = String::from_utf8_lossy(&input);
        match (&got, &expected) {
            (Err(Error::Syntax { offset, message }), Error::Syntax { offset: want, .. }) => {
                assert_eq!(offset, want, "offset of the syntax error in {shown:?} ({message})");
                assert!(!message.is_empty());
            }
            _ => assert_eq!(got, Err(expected), "input {shown:?}"),
        }
        // The message names the problem and its position.
        let message = got.unwrap_err().to_string();
        assert!(message.contains("at byte"), "{message}");
    }
}

#[test]
fn depth_max_levels_are_accepted() {
    let text = format!("{}{}", "[".repeat(DEPTH_MAX), "]".repeat(DEPTH_MAX));
    assert_eq!(canon_str(&text).unwrap(), text);
    let mut value = Value::Array(vec![]);
    for _ in 1..DEPTH_MAX {
        value = Value::Array(vec![value]);
    }
    assert_eq!(to_vec(&value).unwrap(), text.as_bytes());
    let value = Value::Array(vec![value]);
    assert_eq!(to_vec(&value), Err(Error::TooDeep { depth_max: DEPTH_MAX, offset: DEPTH_MAX }));
}

#[test]
fn error_messages_name_the_problem() {
    let cases: &[(&[u8], &str)] = &[
        (br#"{"id":1,"id":2}"#, r#"duplicate object key "id" at byte 8"#),
        (br#""\udc00""#, "lone UTF-16 surrogate in a string at byte 1"),
        (b"1e400", "number 1e400 at byte 0 is outside the range of IEEE-754 doubles"),
        (
            b"9007199254740993",
            "the integer 9007199254740993 cannot be represented exactly as an IEEE-754 double \
             (the nearest is 9007199254740992); send it as a string",
        ),
        (b"9.007199254740993e15", "the integer 9007199254740993 cannot be represented exactly"),
        (b"-9007199254740993.0", "the integer -9007199254740993 cannot be represented exactly"),
        (b"1e-400", "number 1e-400 at byte 0 is outside the range of IEEE-754 doubles"),
        (b"\"\x80\"", "invalid UTF-8 at byte 1"),
        (b"[1,]", "invalid JSON at byte 3"),
        (b"\xEF\xBB\xBF{}", "found a UTF-8 byte order mark"),
    ];
    for &(input, needle) in cases {
        let message = canonicalize_bytes(input).unwrap_err().to_string();
        assert!(message.contains(needle), "{message:?} should contain {needle:?}");
    }
}

/// The integer rule reads a literal's value, not its notation: the same amount spelled as an integer, with a fraction
/// or with an exponent gets one verdict (a QA report: `9007199254740993.0` was accepted as `...992` while
/// `9007199254740993` was rejected).
#[test]
fn integer_rule_reads_the_value_not_the_notation() {
    // (spellings of one value, its canonical form or None if rejected)
    let cases: &[(&[&str], Option<&str>)] = &[
        (&["9007199254740993", "9007199254740993.0", "9.007199254740993e15", "9007199254740993E0"], None),
        (&["-9007199254740993", "-9007199254740993.00", "-0.9007199254740993e16"], None),
        (
            &["9007199254740992", "9007199254740992.0", "9.007199254740992e15", "90071992547409920e-1"],
            Some("9007199254740992"),
        ),
        (&["9007199254740994", "9.007199254740994e15"], Some("9007199254740994")),
        // 10^22 is a double (5^22 < 2^53), the largest power of ten that is.
        (&["1e22", "10000000000000000000000", "1.0e22", "100000000000000000000000e-1"], Some("1e+22")),
        // 2^60, written out: exact.
        (&["1152921504606846976", "1152921504606846976.0", "1.152921504606846976e18"], Some("1152921504606847000")),
        (&["1152921504606846977", "1152921504606846977.0", "1.152921504606846977e18"], None),
        // 10^23 is not a double, but it is the value of `1e+23`, the canonical spelling of the double
        // 99999999999999991611392, so it is accepted in every notation: rejecting it would reject canonical output.
        (&["1e23", "1E+23", "100000000000000000000000", "1.0e23"], Some("1e+23")),
        (&["99999999999999991611392", "9.9999999999999991611392e22"], Some("1e+23")),
        (&["99999999999999991611393", "9.9999999999999991611393e22"], None),
        // Not integers: rounded to the nearest double, as RFC 8785 requires.
        (&["0.1", "1e-1", "0.10"], Some("0.1")),
        (&["1.5e-7", "0.00000015"], Some("1.5e-7")),
        (&["9007199254740993.5", "9.0071992547409935e15"], Some("9007199254740994")),
        (&["1e400", "10e399", "1.0e400"], None),
        (&["1e-400", "0.1e-399"], None),
    ];
    for &(spellings, expected) in cases {
        for &text in spellings {
            match expected {
                Some(canonical) => assert_eq!(canon_str(text).as_deref(), Ok(canonical), "{text}"),
                None => assert_eq!(canon_str(text), Err(number(text, 0)), "{text}"),
            }
        }
    }
    // A rejected number inside a document is named at its own offset.
    assert_eq!(canon_str(r#"{"a":[1,9.007199254740993e15]}"#), Err(number("9.007199254740993e15", 8)));
    // Huge exponents that cancel out are still read exactly.
    assert_eq!(
        canon_str(&format!("9007199254740993{}e-400", "0".repeat(400))),
        Err(number(&format!("9007199254740993{}e-400", "0".repeat(400)), 0))
    );
}

/// An integer literal that is its double rounded to its own precision, at most 17 significant digits, stands for that
/// double, as a double printed with C's `%.17g` (or fewer digits) must: `9.9999999999999992e+22` was refused although
/// it is `%.17g` of the double printed `1e+23`. A literal whose digits the double would change, or one of more than
/// 17 digits that is not exact, is still refused, and the message names it.
#[test]
fn roundings_to_their_own_precision_stand_for_their_double() {
    // (literal, its canonical form)
    let accepted: &[(&str, &str)] = &[
        // `%.17g` and `%.16g` of 99999999999999991611392, its exact value, its spelling and the RFC's samples.
        ("9.9999999999999992e+22", "1e+23"),
        ("9.9999999999999992E22", "1e+23"),
        ("-9.9999999999999992e+22", "-1e+23"),
        ("99999999999999992000000", "1e+23"),
        ("9.999999999999999e22", "1e+23"),
        ("99999999999999991611392", "1e+23"),
        ("1e23", "1e+23"),
        ("100000000000000000000000", "1e+23"),
        ("1E30", "1e+30"),
        // `%.17g` of other doubles whose ECMAScript spelling has fewer digits.
        ("7.0000000000000004e+22", "7e+22"),
        ("1.5000000000000001e+300", "1.5e+300"),
        ("9.2233720368547758e+18", "9223372036854776000"),
        ("9223372036854775800", "9223372036854776000"),
        ("-9.2233720368547758e18", "-9223372036854776000"),
        // 2^89: `%.17g`, and its spelling, which is not its rounding to 16 digits (...901 reads as the double below).
        ("6.1897001964269014e+26", "6.189700196426902e+26"),
        ("6.189700196426902e26", "6.189700196426902e+26"),
        ("6.189700196426901e26", "6.189700196426901e+26"),
        ("1.7976931348623157e308", "1.7976931348623157e+308"),
        ("-1.7976931348623157e308", "-1.7976931348623157e+308"),
        ("1.0000000000000001e+23", "1.0000000000000001e+23"),
        // Not integers: rounded, at any length.
        ("0.1", "0.1"),
        ("0.30000000000000004", "0.30000000000000004"),
        ("0.1000000000000000055511151231257827", "0.1"),
        ("5e-324", "5e-324"),
        ("9007199254740993.5", "9007199254740994"),
    ];
    for &(literal, canonical) in accepted {
        assert_eq!(canon_str(literal).as_deref(), Ok(canonical), "{literal}");
        assert_eq!(canon_str(&format!("[true,{literal}]")), Ok(format!("[true,{canonical}]")), "{literal}");
    }
    let refused: &[&str] = &[
        // A double turns each into another integer of as many digits.
        "9007199254740993",
        "-9007199254740993",
        "9.9999999999999993e22",
        "99999999999999993000000",
        "9.9999999999999991e22",
        "6.1897001964269015e26",
        "1.7976931348623158e308",
        "1.8446744073709551e19",
        "9223372036854775900",
        // More than 17 digits and not exact: a precision no double has.
        "9.99999999999999916e22",
        "18446744073709551615",
        "12345678901234567890",
        "-99999999999999991611393",
    ];
    for &literal in refused {
        let text = format!("[true,{literal}]");
        let got = canon_str(&text);
        assert_eq!(got, Err(number(literal, 6)), "{literal}");
        let message = got.unwrap_err().to_string();
        assert!(message.starts_with(&format!("number {literal} at byte 6: the integer ")), "{message}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every rounding of every double to 1 to 17 significant digits (what `%.Ng` prints, here Rust's exact `{:.*e}`)
    /// is accepted and canonicalises to the double it reads as, integer or not: reading it as a double changes none
    /// of its digits.
    #[test]
    fn every_rounding_to_17_digits_or_fewer_is_accepted(f in float_strategy()) {
        for precision in 0..17 {
            let literal = format!("{f:.precision$e}");
            let double: f64 = literal.parse().unwrap();
            if double.is_infinite() {
                // The largest doubles rounded up to few digits: out of range, as refused elsewhere.
                continue;
            }
            prop_assert_eq!(canon_str(&literal), Ok(reference::number(double)), "{}", literal);
        }
    }
}

/// Values built in Rust (not parsed) follow the same number rule: integers that are neither exactly a double nor a
/// double rounded to their own precision are rejected rather than rounded into another input's key.
#[test]
fn value_numbers() {
    let cases: &[(Value, Result<&str, &str>)] = &[
        (Value::from(0u64), Ok("0")),
        (Value::from(-1i64), Ok("-1")),
        (Value::from(9_007_199_254_740_992u64), Ok("9007199254740992")),
        (Value::from(9_007_199_254_740_993u64), Err("9007199254740993")),
        (Value::from(1u64 << 60), Ok("1152921504606847000")),
        (Value::from(1_152_921_504_606_847_000u64), Ok("1152921504606847000")),
        (Value::from(1_152_921_504_606_847_001u64), Err("1152921504606847001")),
        (Value::from(-1_152_921_504_606_847_000i64), Ok("-1152921504606847000")),
        // 2^63 rounded to 17 digits (`%.17g`), and a neighbour a double would change.
        (Value::from(9_223_372_036_854_775_800u64), Ok("9223372036854776000")),
        (Value::from(-9_223_372_036_854_775_800i64), Ok("-9223372036854776000")),
        (Value::from(9_223_372_036_854_775_900u64), Err("9223372036854775900")),
        (Value::from(u64::MAX), Err("18446744073709551615")),
        (Value::from(i64::MIN), Ok("-9223372036854776000")),
        (Value::from(i64::MIN + 1), Err("-9223372036854775807")),
        (Value::from(-9_007_199_254_740_993i64), Err("-9007199254740993")),
        (Value::from(-0.0f64), Ok("0")),
        (Value::from(1e30f64), Ok("1e+30")),
        (Value::from(0.1f64), Ok("0.1")),
    ];
    for (value, expected) in cases {
        let got = to_vec(value).map(|b| String::from_utf8(b).unwrap());
        match expected {
            Ok(text) => assert_eq!(got.as_deref(), Ok(*text), "{value}"),
            Err(text) => assert_eq!(got, Err(number(text, 0)), "{value}"),
        }
    }
    // The offset of a Value error is where the number would start in the output.
    let nested = serde_json::json!({"a": [true, u64::MAX]});
    assert_eq!(to_vec(&nested), Err(number("18446744073709551615", 11)));
}

// ---------------------------------------------------------------------------------------------------------------
// The second implementation, written from the RFC's text with none of the crate's code.

mod reference {
    use serde_json::Value;

    /// ECMAScript Number::toString (ECMA-262 section 6.1.6.1.20) from Rust's shortest round-trip digits. Where the
    /// exact value lies halfway between two shortest candidates, Rust's digits round half up while ECMAScript picks
    /// the even one (RFC 8785 appendix B's `1424953923781206.2`); that case is decided here from the exact expansion.
    pub fn number(f: f64) -> String {
        if f == 0.0 {
            return "0".to_string();
        }
        let sci = format!("{:e}", f.abs());
        let (mantissa, exponent) = sci.split_once('e').unwrap();
        let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
        let k = digits.len();
        let n = exponent.parse::<i32>().unwrap() + 1;
        // Exact decimal expansion (Rust's fixed-precision formatting is exact; 800 digits cover every double).
        let exact = format!("{:.800e}", f.abs());
        let (exact_mantissa, exact_exponent) = exact.split_once('e').unwrap();
        let exact_digits: String = exact_mantissa.chars().filter(|c| *c != '.').collect();
        let tail = &exact_digits[k..];
        if exact_exponent == exponent && tail.starts_with('5') && tail[1..].bytes().all(|b| b == b'0') {
            let truncated = &exact_digits[..k];
            let last = truncated.as_bytes()[k - 1] - b'0';
            let parses_back = |d: &str| format!("{}.{}e{}", &d[..1], &d[1..], n - 1).parse::<f64>().unwrap() == f.abs();
            if last.is_multiple_of(2) && parses_back(truncated) {
                digits = truncated.to_string();
            }
        }
        let digits = digits.trim_end_matches('0');
        let k = digits.len() as i32;
        let body = if k <= n && n <= 21 {
            format!("{digits}{}", "0".repeat((n - k) as usize))
        } else if 0 < n && n <= 21 {
            format!("{}.{}", &digits[..n as usize], &digits[n as usize..])
        } else if -6 < n && n <= 0 {
            format!("0.{}{digits}", "0".repeat((-n) as usize))
        } else {
            let sign = if n - 1 < 0 { '-' } else { '+' };
            let fraction = if k == 1 { String::new() } else { format!(".{}", &digits[1..]) };
            format!("{}{fraction}e{sign}{}", &digits[..1], (n - 1).abs())
        };
        if f < 0.0 { format!("-{body}") } else { body }
    }

    fn string(s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\t' => out.push_str("\\t"),
                '\n' => out.push_str("\\n"),
                '\u{c}' => out.push_str("\\f"),
                '\r' => out.push_str("\\r"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c => out.push(c),
            }
        }
        out.push('"');
    }

    pub fn canonical(value: &Value) -> String {
        let mut out = String::new();
        write(value, &mut out);
        out
    }

    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&number(n.as_f64().unwrap())),
            Value::String(s) => string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(item, out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut members: Vec<(Vec<u16>, &String, &Value)> =
                    map.iter().map(|(k, v)| (k.encode_utf16().collect(), k, v)).collect();
                members.sort_by(|a, b| a.0.cmp(&b.0));
                out.push('{');
                for (i, (_, k, v)) in members.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    string(k, out);
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Generated documents, written as JSON text in many spellings.

#[derive(Debug, Clone)]
enum Doc {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

/// How a document is spelled as text: all spellings of one document have one canonical form.
#[derive(Debug, Clone, Copy)]
struct Spelling {
    whitespace: bool,
    escape_non_ascii: bool,
    reverse_members: bool,
    number_style: u8,
}

/// Characters that stress escaping and UTF-16 ordering, mixed with arbitrary ones.
fn char_strategy() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => proptest::char::range('\0', '\u{7f}'),
        1 => proptest::sample::select(vec![
            '\u{80}', '\u{e9}', '\u{2028}', '\u{d7ff}', '\u{e000}', '\u{fb33}', '\u{ffff}', '\u{10000}', '\u{1f600}',
            '\u{10ffff}', '"', '\\', '/',
        ]),
        1 => any::<char>(),
    ]
}

fn string_strategy() -> impl Strategy<Value = String> {
    proptest::collection::vec(char_strategy(), 0..6).prop_map(|cs| cs.into_iter().collect())
}

/// The largest integer the Python package accepts is 2^53 - 1.
const SAFE_INTEGER_MAX: i64 = (1 << 53) - 1;

fn float_strategy() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits).prop_filter("finite", |f| f.is_finite()),
        proptest::sample::select(vec![0.0, -0.0, 0.1, 4.5, 1e21, 1e-7, 1e-6, 123e-20, 5e-324, f64::MAX, 1.5e300]),
        (-1_000_000i64..1_000_000, -30i32..30).prop_map(|(m, e)| m as f64 * 10f64.powi(e)),
    ]
}

fn doc_strategy() -> impl Strategy<Value = Doc> {
    let leaf = prop_oneof![
        Just(Doc::Null),
        any::<bool>().prop_map(Doc::Bool),
        (-SAFE_INTEGER_MAX..=SAFE_INTEGER_MAX).prop_map(Doc::Int),
        (-1000i64..1000).prop_map(Doc::Int),
        float_strategy().prop_map(Doc::Float),
        string_strategy().prop_map(Doc::Str),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
            proptest::collection::vec((string_strategy(), inner), 0..6).prop_map(|members| {
                // Distinct names only: duplicates are the rejected case, tested above.
                let mut seen = std::collections::BTreeSet::new();
                Doc::Object(members.into_iter().filter(|(k, _)| seen.insert(k.clone())).collect())
            }),
        ]
    })
}

fn spelling_strategy() -> impl Strategy<Value = Spelling> {
    (any::<bool>(), any::<bool>(), any::<bool>(), 0u8..4).prop_map(
        |(whitespace, escape_non_ascii, reverse_members, number_style)| Spelling {
            whitespace,
            escape_non_ascii,
            reverse_members,
            number_style,
        },
    )
}

fn spell_string(s: &str, spelling: Spelling, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '/' if spelling.escape_non_ascii => out.push_str("\\/"),
            c if (c as u32) < 0x20 || (spelling.escape_non_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04X}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn spell(doc: &Doc, spelling: Spelling, out: &mut String) {
    let gap = if spelling.whitespace { " \n\t" } else { "" };
    match doc {
        Doc::Null => out.push_str("null"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Int(n) => match spelling.number_style {
            0 => write!(out, "{n}").unwrap(),
            1 => write!(out, "{n}.0").unwrap(),
            2 => write!(out, "{n}.000e0").unwrap(),
            _ => write!(out, "{n}E+0").unwrap(),
        },
        Doc::Float(f) => match spelling.number_style {
            0 => write!(out, "{f:?}").unwrap(),
            1 => write!(out, "{f:e}").unwrap(),
            2 => write!(out, "{f:E}").unwrap(),
            _ => write!(out, "{}", reference::number(*f)).unwrap(),
        },
        Doc::Str(s) => spell_string(s, spelling, out),
        Doc::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                spell(item, spelling, out);
            }
            out.push_str(gap);
            out.push(']');
        }
        Doc::Object(members) => {
            out.push('{');
            let order: Vec<&(String, Doc)> =
                if spelling.reverse_members { members.iter().rev().collect() } else { members.iter().collect() };
            for (i, (name, item)) in order.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(gap);
                spell_string(name, spelling, out);
                out.push_str(gap);
                out.push(':');
                out.push_str(gap);
                spell(item, spelling, out);
            }
            out.push_str(gap);
            out.push('}');
        }
    }
}

fn spelled(doc: &Doc, spelling: Spelling) -> String {
    let mut out = String::new();
    spell(doc, spelling, &mut out);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    /// The parser, the Value writer and the second implementation agree on every generated document, in every
    /// spelling; the canonical form is a fixed point.
    #[test]
    fn agrees_with_the_reference(doc in doc_strategy(), spelling in spelling_strategy()) {
        let text = spelled(&doc, spelling);
        let value: Value = serde_json::from_str(&text).expect("generated text is JSON");
        let expected = reference::canonical(&value);
        let from_text = canon_str(&text).expect("generated documents are canonicalisable");
        prop_assert_eq!(&from_text, &expected, "text {}", text);
        let from_value = String::from_utf8(to_vec(&value).unwrap()).unwrap();
        prop_assert_eq!(&from_value, &expected);
        prop_assert_eq!(canon_str(&from_text).unwrap(), from_text.clone());
    }

    #[test]
    fn utf16_order_matches_transcoding(a in string_strategy(), b in string_strategy()) {
        prop_assert_eq!(cmp_utf16(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// The Python `rfc8785` package as an independent oracle.

/// Documents sent to Python: enough to cover the generator's shapes, few enough to run in a few seconds.
const PYTHON_DOCUMENT_COUNT: usize = 400;

const PYTHON_ORACLE: &str = r#"
import json, sys, rfc8785
for line in sys.stdin:
    print(rfc8785.dumps(json.loads(line)).hex())
"#;

/// Installs `rfc8785` from PyPI under the target directory once; panics (fails the test) if it cannot.
fn python_with_rfc8785() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-rfc8785");
    let importable = |dir: &std::path::Path| {
        std::process::Command::new("python3")
            .args(["-c", "import rfc8785"])
            .env("PYTHONPATH", dir)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !importable(&dir) {
        let status = std::process::Command::new("python3")
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target"])
            .arg(&dir)
            .arg("rfc8785==0.1.4")
            .status()
            .expect("python3 must be installed to run the rfc8785 cross-check");
        assert!(status.success(), "pip could not install rfc8785 into {}", dir.display());
        assert!(importable(&dir), "rfc8785 installed into {} but does not import", dir.display());
    }
    dir
}

#[test]
fn agrees_with_python_rfc8785() {
    use std::io::Write as _;
    let dir = python_with_rfc8785();
    let mut runner = TestRunner::deterministic();
    let strategy = (doc_strategy(), spelling_strategy());
    let mut texts = Vec::with_capacity(PYTHON_DOCUMENT_COUNT);
    for _ in 0..PYTHON_DOCUMENT_COUNT {
        let (doc, mut spelling) = strategy.new_tree(&mut runner).unwrap().current();
        // One line per document, and Python reads `1.0` as a float but `1` as an int, which it bounds by 2^53 - 1.
        spelling.whitespace = false;
        // Style 3 spells a float like 1e20 as an integer literal, which Python would read as an int beyond 2^53.
        spelling.number_style %= 3;
        texts.push(spelled(&doc, spelling));
    }
    let mut child = std::process::Command::new("python3")
        .args(["-c", PYTHON_ORACLE])
        .env("PYTHONPATH", &dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    {
        let mut stdin = child.stdin.take().unwrap();
        for text in &texts {
            writeln!(stdin, "{text}").unwrap();
        }
    }
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the Python oracle failed");
    let lines: Vec<&str> = std::str::from_utf8(&output.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), texts.len());
    for (text, hex) in texts.iter().zip(lines) {
        let ours = canonicalize_bytes(text.as_bytes()).unwrap();
        let ours_hex: String = ours.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(ours_hex, hex, "document {text}\nours:   {}", String::from_utf8_lossy(&ours));
    }
}

/// Literals of a megabyte are read exactly, even where their digits make up for an exponent beyond what Rust's float
/// parser reads (it saturated `1`, 2^20 zeros, `e-1048576`, which is 1, to infinity and refused it as out of range).
#[test]
fn long_number_literals_are_read_exactly() {
    const MB: usize = 1 << 20;
    let zeros = "0".repeat(MB);
    let cases: Vec<(String, Option<&str>)> = vec![
        (format!("1{zeros}e-{MB}"), Some("1")),
        (format!("-25{zeros}e-{}", MB + 1), Some("-2.5")),
        (format!("9007199254740993{zeros}e-{MB}"), None),
        (format!("9007199254740992{zeros}e-{MB}"), Some("9007199254740992")),
        (format!("99999999999999991611392.{zeros}"), Some("1e+23")),
        (format!("1{zeros}"), None),
        (format!("1e{zeros}22"), Some("1e+22")),
        (format!("1.{}", "1".repeat(MB)), Some("1.1111111111111112")),
        (format!("0.{zeros}1"), None),
        (format!("{}e-{MB}", "7".repeat(MB)), Some("0.7777777777777778")),
        (format!("{}e-{}", "7".repeat(MB), MB - 31), Some("7.777777777777777e+30")),
    ];
    for (text, expected) in cases {
        let got = canon_str(&text);
        match expected {
            Some(canonical) => assert_eq!(got.as_deref(), Ok(canonical), "{}...", &text[..40]),
            None => assert_eq!(got, Err(number(&text, 0)), "{}...", &text[..40]),
        }
    }
}
