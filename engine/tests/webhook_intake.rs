//! Webhook intake as a table: deliveries in (new, duplicate, forged, unsigned, stale, tampered, second event for
//! one object), intake results, recorded rejections and started runs out; the signature's coverage; ids refused at
//! the edge.

#![allow(clippy::cloned_ref_to_slice_refs, reason = "the clone coerces Arc<Scripted> to Arc<dyn Connector>")]

mod common;

use common::*;
use engine::clock::{Clock, RuntimeClock};
use engine::event::CrashPoint;
use engine::ledger::{Intake, Ledger, RunStatus};
use engine::webhook::{self, BodyIds, Error, Incoming, Source};
use serde_json::{Value, json};
use std::sync::Arc;

const SECRET: &[u8] = b"whsec_test";

fn source(dedup_by_object: bool) -> Source {
    Source {
        name: "stripe".to_string(),
        secret: Some(SECRET.to_vec()),
        tolerance_ms: webhook::TOLERANCE_MS_DEFAULT,
        dedup_by_object,
        workflow: "wf".to_string(),
        body_ids: None,
    }
}

fn delivery(event_id: &str, body: &str, at_ms: u64, object: Option<&str>) -> Incoming {
    let mut incoming = Incoming {
        event_id: event_id.to_string(),
        body: body.as_bytes().to_vec(),
        signature: None,
        timestamp_ms: at_ms,
        object_id: object.map(str::to_string),
        event_type: object.map(|_| "customer.updated".to_string()),
    };
    incoming.signature = Some(webhook::sign(SECRET, &incoming));
    incoming
}

#[derive(Debug)]
enum Want {
    Started,
    Duplicate,
    Refused(fn(&Error) -> bool),
}

#[tokio::test]
async fn deliveries_as_a_table() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let ledger = memory_ledger();
    let recorder = Recorder::new();
    let engine = engine(
        config("w1"),
        ledger.clone(),
        recorder.clone(),
        &[connector.clone()],
        &[],
        &[one_step("wf", "api.charge")],
    );
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let body = r#"{"email":"a@example.com","amount":5}"#;
    let forged = Incoming {
        signature: Some(webhook::sign(b"not the secret", &delivery("evt_f", body, now_ms, None))),
        ..delivery("evt_f", body, now_ms, None)
    };
    let tampered = Incoming {
        body: br#"{"email":"a@example.com","amount":5000}"#.to_vec(),
        ..delivery("evt_t", body, now_ms, None)
    };
    let unsigned = Incoming { signature: None, ..delivery("evt_u", body, now_ms, None) };
    let stale = delivery("evt_s", body, now_ms - webhook::TOLERANCE_MS_DEFAULT - 2_000, None);
    let retimed = Incoming { timestamp_ms: now_ms + 10_000, ..delivery("evt_r", body, now_ms, None) };
    let garbled = Incoming { signature: Some("t=abc,v1=00".to_string()), ..delivery("evt_g", body, now_ms, None) };
    let not_json = delivery("evt_j", "{not json", now_ms, None);
    let table: Vec<(&str, Source, Incoming, Want)> = vec![
        ("new event starts a run", source(false), delivery("evt_1", body, now_ms, None), Want::Started),
        ("the same event again starts nothing", source(false), delivery("evt_1", body, now_ms, None), Want::Duplicate),
        (
            "the same event re-signed later starts nothing",
            source(false),
            delivery("evt_1", body, now_ms + 1_000, None),
            Want::Duplicate,
        ),
        ("a forged signature is refused", source(false), forged, Want::Refused(|e| *e == Error::Forged)),
        ("a tampered body is refused", source(false), tampered, Want::Refused(|e| *e == Error::Forged)),
        ("unsigned with a secret set is refused", source(false), unsigned, Want::Refused(|e| *e == Error::Unsigned)),
        ("a stale signature is refused", source(false), stale, Want::Refused(|e| matches!(e, Error::Stale { .. }))),
        (
            "a timestamp that disagrees with the signed one",
            source(false),
            retimed,
            Want::Refused(|e| matches!(e, Error::TimestampMismatch { .. })),
        ),
        ("a garbled header", source(false), garbled, Want::Refused(|e| matches!(e, Error::MalformedSignature(_)))),
        ("a body that is not JSON", source(false), not_json, Want::Refused(|e| matches!(e, Error::InvalidBody(_)))),
        ("first event for an object", source(true), delivery("evt_o1", body, now_ms, Some("cus_1")), Want::Started),
        (
            "a second event for the same object and type",
            source(true),
            delivery("evt_o2", body, now_ms, Some("cus_1")),
            Want::Duplicate,
        ),
        ("another object", source(true), delivery("evt_o3", body, now_ms, Some("cus_2")), Want::Started),
    ];
    let mut started = Vec::new();
    for (name, source, incoming, want) in table {
        let run_id = webhook::run_id(&source.name, &incoming.event_id);
        match (engine.intake_webhook(&source, &incoming), want) {
            (Ok(Intake::Started { run_id: got }), Want::Started) => {
                assert_eq!(got, run_id, "{name}");
                started.push(got);
            }
            (Ok(Intake::Duplicate { .. }), Want::Duplicate) => {}
            (Err(e), Want::Refused(check)) => {
                assert!(check(&e), "{name}: {e}");
                assert!(e.is_rejection(), "{name}");
                assert!(ledger.get_run(&run_id).unwrap().is_none(), "{name}: a refused delivery created a run");
                assert!(recorder.lines().contains(&format!("webhook-rejected {}", incoming.event_id)), "{name}");
            }
            (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    assert_eq!(started.len(), 3);
    assert_eq!(recorder.count("webhook-duplicate "), 3);
    // Each started run runs once; duplicates started nothing.
    for run_id in &started {
        assert_eq!(engine.drive(run_id).await.unwrap(), RunStatus::Succeeded);
    }
    assert_eq!(connector.effects().len(), 3);
    assert_eq!(ledger.unfinished_runs().unwrap(), Vec::<String>::new());
    // Retention: the default covers at least 30 days, and expiring now drops nothing recent.
    assert!(engine.config().webhook_retention_ms >= 30 * 24 * 3600 * 1000);
    engine.expire_webhooks().unwrap();
    assert!(matches!(
        engine.intake_webhook(&source(false), &delivery("evt_1", body, now_ms, None)),
        Ok(Intake::Duplicate { .. })
    ));
}

#[tokio::test]
async fn unsigned_sources_and_a_crash_during_intake() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let ledger = memory_ledger();
    let crashing = Recorder::halting_at(CrashPoint::DuringWebhookIntake, 1);
    let open = Source { secret: None, ..source(false) };
    let incoming = Incoming { signature: None, ..delivery("evt_1", r#"{"amount":1}"#, 0, None) };
    let first =
        engine(config("w1"), ledger.clone(), crashing, &[connector.clone()], &[], &[one_step("wf", "api.charge")]);
    assert_eq!(first.intake_webhook(&open, &incoming), Err(Error::Halted));
    assert!(ledger.unfinished_runs().unwrap().is_empty(), "a crash before the inbox write leaves nothing");
    // The sender retries: the delivery is taken in once.
    let second =
        engine(config("w2"), ledger.clone(), Recorder::new(), &[connector], &[], &[one_step("wf", "api.charge")]);
    assert!(matches!(second.intake_webhook(&open, &incoming), Ok(Intake::Started { .. })));
    assert!(matches!(second.intake_webhook(&open, &incoming), Ok(Intake::Duplicate { .. })));
    let unknown = Source { workflow: "nope".to_string(), ..open };
    assert_eq!(second.intake_webhook(&unknown, &incoming), Err(Error::UnknownWorkflow("nope".to_string())));
}

#[test]
fn run_ids_are_derived_from_source_and_event() {
    assert_eq!(webhook::run_id("stripe", "evt_1"), webhook::run_id("stripe", "evt_1"));
    assert_ne!(webhook::run_id("stripe", "evt_1"), webhook::run_id("stripe", "evt_2"));
    // Length-prefixed: shifting a character between the parts changes the id.
    assert_ne!(webhook::run_id("ab", "c"), webhook::run_id("a", "bc"));
    assert!(webhook::run_id("s", "e").starts_with("wh-"));
}

/// The header a sender attaches is Stripe's: the timestamp in whole seconds, then the HMAC-SHA256 of
/// `"<seconds>.<body>"` in lowercase hex. The tag was computed apart from this crate (Python's `hmac` module).
#[test]
fn a_signature_header_is_stripes_t_and_v1() {
    let incoming = delivery("evt_1", r#"{"a":1}"#, 1_700_000_000_123, Some("cus_1"));
    let mut content = Vec::new();
    webhook::signed_content("1700000000", &incoming, |part| content.extend_from_slice(part));
    assert_eq!(content, br#"1700000000.{"a":1}"#);
    let header = webhook::sign(SECRET, &incoming);
    assert_eq!(header, "t=1700000000,v1=38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789");
    assert_eq!(webhook::sign(SECRET, &delivery("e", "", 999, None)).split(',').next(), Some("t=0"));
}

/// What the signature covers is the timestamp and the body only (Stripe's scheme): a genuine delivery given another
/// event id verifies. That is why the module doc says to take the event id from the signed body: this pins the
/// behaviour the doc warns of, so that a change to it is a decision.
#[test]
fn the_signature_covers_the_body_not_the_ids_beside_it() {
    let at_ms = 1_700_000_000_123;
    let genuine = delivery("evt_1", r#"{"a":1}"#, at_ms, Some("cus_1"));
    assert_eq!(webhook::verify(&source(true), &genuine, at_ms), Ok(()));
    let elsewhere = Incoming { event_id: "evt_2".into(), object_id: Some("cus_2".into()), ..genuine.clone() };
    assert_eq!(webhook::verify(&source(true), &elsewhere, at_ms), Ok(()));
    let tampered = Incoming { body: br#"{"a":2}"#.to_vec(), ..genuine };
    assert_eq!(webhook::verify(&source(true), &tampered, at_ms), Err(Error::Forged));
}

/// A `v1=` tag is 64 hex digits of either case, and nothing else: a tag that differs only in spelling (a `+` before a
/// digit, a dropped leading zero, a stray character) does not verify, and a header may carry several candidates
/// (Stripe's rolled secrets), of which one verifying is enough.
#[test]
fn a_tag_is_exactly_its_hex_digits() {
    let at_ms = 1_700_000_000_123;
    let body = br#"{"a":1}"#;
    let tag = "38877139021993b830af32feea6e18a8da83eb2f6e49ee50bd9e4cf4ca4d3789";
    let verify = |header: String| {
        let incoming = Incoming { signature: Some(header), ..delivery("evt", "{\"a\":1}", at_ms, None) };
        assert_eq!(incoming.body, body);
        webhook::verify(&source(false), &incoming, at_ms)
    };
    assert_eq!(verify(format!("t=1700000000,v1={tag}")), Ok(()));
    assert_eq!(verify(format!("t=1700000000,v1={}", tag.to_uppercase())), Ok(()));
    assert_eq!(verify(format!("v1={tag},t=1700000000")), Ok(()), "the items in any order");
    assert_eq!(verify(format!("t=1700000000,v1={},v1={tag}", "0".repeat(64))), Ok(()), "one candidate verifies");
    assert_eq!(verify(format!("t=1700000000,v0=x,v1={tag}")), Ok(()), "other schemes are ignored");
    // Its fifth byte is 0x02: spelt `+2`, that pair was read as 2 before (`u8::from_str_radix` takes a sign), so this
    // spelling of the tag verified.
    assert_eq!(&tag[8..10], "02");
    let signed = format!("{}+2{}", &tag[..8], &tag[10..]);
    for (why, bad) in [
        ("a changed digit", tag.replacen("38", "08", 1)),
        ("a sign in place of a leading zero", signed),
        ("one digit short", tag[1..].to_string()),
        ("one digit more", format!("{tag}0")),
        ("a non-digit", tag.replacen('3', "g", 1)),
        ("empty", String::new()),
    ] {
        assert_eq!(verify(format!("t=1700000000,v1={bad}")), Err(Error::Forged), "{why}");
    }
    assert!(matches!(verify("t=1700000000".to_string()), Err(Error::MalformedSignature(_))), "no v1=");
}

/// Under `--cfg madsim` the tests above really run inside madsim's runtime (the workspace `tokio::test` is madsim's).
#[cfg(madsim)]
#[tokio::test]
async fn tests_run_inside_madsim() {
    assert!(madsim::runtime::Handle::try_current().is_ok());
}

/// An event id, object id or event type that is blank or longer than `ID_LEN_MAX` is refused by name before anything
/// else is checked (a blank id names nothing a person could find again; a huge one is junk), and a refused delivery's
/// event id is recorded cut to `ID_LEN_MAX` bytes, so that forged deliveries cannot fill the ledger. A source with a
/// blank name is a configuration error, not a refusal. A blank object id or event type is refused only where the
/// source deduplicates by them.
#[tokio::test]
async fn blank_and_huge_ids_are_refused_and_recorded_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let (ledger, engine, _) = on_file(&path, 5_000);
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let body = r#"{"amount":5}"#;
    let huge = "e".repeat(webhook::ID_LEN_MAX + 1);
    let cases: Vec<(&str, Incoming, &str)> = vec![
        (
            "a blank event id",
            delivery(" \u{200b}\t", body, now_ms, None),
            "the delivery's event id \" \\u{200b}\\t\" is blank",
        ),
        (
            "a huge event id",
            delivery(&huge, body, now_ms, None),
            "the delivery's event id is 256 bytes long, longer than 255",
        ),
        ("a blank object id", delivery("evt_o", body, now_ms, Some(" ")), "the delivery's object id \" \" is blank"),
        (
            "a huge event type",
            Incoming { event_type: Some("t".repeat(300)), ..delivery("evt_t", body, now_ms, Some("cus_1")) },
            "the delivery's event type is 300 bytes long, longer than 255",
        ),
    ];
    for (why, incoming, says) in cases {
        let refused = engine.intake_webhook(&source(true), &incoming).unwrap_err();
        assert_eq!(refused.to_string(), says, "{why}");
        assert!(matches!(refused, Error::InvalidId { .. }) && refused.is_rejection(), "{why}");
        assert!(ledger.get_run(&webhook::run_id("stripe", &incoming.event_id)).unwrap().is_none(), "{why}");
    }
    // A forged delivery with a megabyte of event id: refused as too long, recorded cut.
    let forged = delivery(&"f".repeat(1 << 20), body, now_ms, None);
    let forged = Incoming { signature: Some(webhook::sign(b"not the secret", &forged)), ..forged };
    assert!(matches!(engine.intake_webhook(&source(false), &forged), Err(Error::InvalidId { .. })));
    ledger.flush().unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let recorded: Vec<String> = conn
        .prepare("SELECT event_id FROM rejected ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(recorded.len(), 5);
    assert!(recorded.iter().all(|id| id.len() <= webhook::ID_LEN_MAX + "…".len()), "{recorded:?}");
    assert_eq!(recorded[4], format!("{}…", "f".repeat(webhook::ID_LEN_MAX)));
    assert_eq!(webhook::recorded_event_id("é".repeat(200).as_str()).len(), 254 + "…".len(), "cut at a character");
    let blank = Source { name: " ".into(), ..source(false) };
    let refused = engine.intake_webhook(&blank, &delivery("evt_b", body, now_ms, None)).unwrap_err();
    assert_eq!((refused.clone(), refused.is_rejection()), (Error::BlankSource, false));
    // A source that does not deduplicate by object does not use the object id or event type: blank ones are taken
    // (an embedder that passes "" for none), not refused, which would lose a genuine event. Huge ones are refused.
    let unused = Incoming { event_type: Some(String::new()), ..delivery("evt_u", body, now_ms, Some("")) };
    assert!(matches!(engine.intake_webhook(&source(false), &unused), Ok(Intake::Started { .. })));
    let huge = Incoming { object_id: Some("o".repeat(300)), ..delivery("evt_h", body, now_ms, None) };
    assert!(matches!(engine.intake_webhook(&source(false), &huge), Err(Error::InvalidId { field: "object id", .. })));
}

/// A refused delivery is answered as refused even when its record cannot be written (the ledger locked by another
/// connection past the busy timeout): a sender told of a ledger error would send it again, where the delivery itself
/// is refused for good (the observer's reason then says the refusal was not recorded).
#[tokio::test]
async fn a_refusal_stands_when_its_record_cannot_be_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let (ledger, engine, recorder) = on_file(&path, 50);
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let genuine = delivery("evt_1", r#"{"amount":5}"#, now_ms, None);
    let forged = Incoming { signature: Some(webhook::sign(b"not the secret", &genuine)), ..genuine.clone() };
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert_eq!(engine.intake_webhook(&source(false), &forged), Err(Error::Forged));
    assert!(matches!(engine.intake_webhook(&source(false), &genuine), Err(Error::Ledger(_))), "a real ledger error");
    holder.execute_batch("COMMIT").unwrap();
    assert!(matches!(engine.intake_webhook(&source(false), &genuine), Ok(Intake::Started { .. })), "nothing lost");
    assert_eq!(recorder.count("webhook-rejected evt_1"), 1, "{:?}", recorder.lines());
    ledger.flush().unwrap();
    let recorded: i64 = holder.query_row("SELECT count(*) FROM rejected", [], |r| r.get(0)).unwrap();
    assert_eq!(recorded, 0, "the refusal could not be recorded, and was answered all the same");
}

/// An engine on a SQLite ledger file at `path` (whose lock is waited for `busy_timeout_ms`), with one keyed action.
fn on_file(
    path: &std::path::Path,
    busy_timeout_ms: u64,
) -> (Arc<dyn engine::ledger::Ledger>, engine::executor::Engine, Arc<Recorder>) {
    let options = engine::ledger::sqlite::Options {
        synchronous: engine::ledger::sqlite::Synchronous::Normal,
        busy_timeout_ms,
        ..Default::default()
    };
    let ledger: Arc<dyn engine::ledger::Ledger> =
        Arc::new(engine::ledger::sqlite::SqliteLedger::open(path, options).unwrap());
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let recorder = Recorder::new();
    let engine =
        engine(config("w1"), ledger.clone(), recorder.clone(), &[connector], &[], &[one_step("wf", "api.charge")]);
    (ledger, engine, recorder)
}

/// An engine whose one workflow, `wf`, charges once per run; its recorder and its connector.
fn charging_engine() -> (engine::executor::Engine, Arc<Recorder>, Arc<Scripted>) {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let recorder = Recorder::new();
    let engine = engine(
        config("w1"),
        memory_ledger(),
        recorder.clone(),
        &[connector.clone()],
        &[],
        &[one_step("wf", "api.charge")],
    );
    (engine, recorder, connector)
}

/// The test source, checking its bodies' ids where Stripe's envelope holds them.
fn stripe() -> Source {
    Source { body_ids: Some(BodyIds::stripe()), ..source(false) }
}

/// A body in Stripe's envelope, with the trigger fields `one_step` renders beside it.
fn enveloped(event_id: &str, object_id: &str) -> String {
    let data = serde_json::json!({"object": {"id": object_id}});
    serde_json::json!({"id": event_id, "type": "customer.updated", "data": data, "email": "a@example.com", "amount": 5})
        .to_string()
}

/// A source that names where its bodies hold the ids ([`webhook::BodyIds::stripe`]) refuses a delivery whose ids are
/// not its signed body's. The attack this closes: one genuine signed delivery, resent within the tolerance under new
/// event ids, started a run (and a payment) for each (QA, stop 49); with the body's ids checked it starts one run.
#[tokio::test]
async fn a_source_naming_its_body_ids_refuses_ids_its_body_does_not_hold() {
    let (engine, recorder, connector) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let stripe = Source { body_ids: Some(webhook::BodyIds::stripe()), ..source(false) };
    let genuine = delivery("evt_1", &enveloped("evt_1", "cus_1"), now_ms, Some("cus_1"));
    let Ok(Intake::Started { run_id }) = engine.intake_webhook(&stripe, &genuine) else { panic!("genuine refused") };
    let refused = |incoming: &Incoming| match engine.intake_webhook(&stripe, incoming) {
        Err(e @ Error::IdNotInBody { .. }) => {
            assert!(e.is_rejection(), "{e}");
            assert!(recorder.lines().contains(&format!("webhook-rejected {}", incoming.event_id)), "{e}");
            e.to_string()
        }
        other => panic!("{:?} was not refused: {other:?}", incoming.event_id),
    };
    // The same signed body under other event ids: each verifies, and each is refused.
    for event_id in ["evt_2", "evt_3", "evt_1 "] {
        let replayed = Incoming { event_id: event_id.into(), ..genuine.clone() };
        assert_eq!(webhook::verify(&stripe, &replayed, now_ms), Ok(()));
        let why = refused(&replayed);
        assert!(why.contains(r#"at "/id""#) && why.contains("evt_1"), "{why}");
    }
    let other_object = Incoming { object_id: Some("cus_2".into()), ..genuine.clone() };
    assert!(refused(&other_object).contains("object id"));
    // An object id not given is taken from the body: here the same event again, a duplicate.
    let no_object = Incoming { object_id: None, ..genuine.clone() };
    assert!(matches!(engine.intake_webhook(&stripe, &no_object), Ok(Intake::Duplicate { .. })));
    let other_type = Incoming { event_type: Some("charge.refunded".into()), ..genuine.clone() };
    assert!(refused(&other_type).contains("event type"));
    let bare = delivery("evt_4", r#"{"email":"a@example.com","amount":5}"#, now_ms, Some("cus_1"));
    assert!(refused(&bare).contains("the body holds nothing there"), "{}", refused(&bare));
    let numbered = delivery("evt_5", r#"{"id":{"n":5},"type":"customer.updated"}"#, now_ms, None);
    let why = refused(&numbered);
    assert!(why.contains("holds an object there, not an id"), "{why}");
    // An integer id is compared as its decimal text.
    let integer = Source {
        body_ids: Some(webhook::BodyIds { event_id: "/n".into(), object_id: None, event_type: None }),
        ..source(false)
    };
    let counted = delivery("42", r#"{"n":42,"email":"a@example.com","amount":5}"#, now_ms, None);
    assert!(matches!(engine.intake_webhook(&integer, &counted), Ok(Intake::Started { .. })));
    // One run from all of it, one charge.
    assert_eq!(engine.drive(&run_id).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.effects().len(), 1);
    // A pointer that is not one is the source's fault: an error, not a refusal of the delivery, and nothing recorded.
    let misconfigured = Source {
        body_ids: Some(webhook::BodyIds { event_id: "id".into(), object_id: None, event_type: None }),
        ..source(false)
    };
    let next = delivery("evt_6", &enveloped("evt_6", "cus_6"), now_ms, None);
    match engine.intake_webhook(&misconfigured, &next) {
        Err(e @ Error::BadBodyIds(_)) => {
            assert!(!e.is_rejection());
            assert!(e.to_string().contains(r#"pointer "id" is not a JSON pointer"#), "{e}");
        }
        other => panic!("a bad pointer: {other:?}"),
    }
    assert!(!recorder.lines().contains(&"webhook-rejected evt_6".to_string()));
}

/// A source with `body_ids` takes what one without them takes: a genuine body nested as deep as the canonical parser
/// reads (128 levels; serde_json's own parser stops at 127). (Found by QA, stop 50: refused as not JSON.)
#[test]
fn body_ids_are_read_from_a_body_nested_as_deep_as_a_trigger_may_be() {
    let (engine, _, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let deep = |event_id: &str| {
        let nested = format!("{}{}", "[".repeat(127), "]".repeat(127));
        let envelope = enveloped(event_id, "cus_d");
        format!(r#"{{"deep":{nested},{}"#, &envelope[1..])
    };
    for (source, event_id) in [(source(false), "evt_d1"), (stripe(), "evt_d2")] {
        let incoming = delivery(event_id, &deep(event_id), now_ms, Some("cus_d"));
        let got = engine.intake_webhook(&source, &incoming);
        assert!(matches!(got, Ok(Intake::Started { .. })), "{event_id}: {got:?}");
    }
}

/// A number where an id belongs is compared as its RFC 8785 text, the one spelling the stored trigger holds: `1e2`
/// and `100.0` are `100`, and an integer too large for plain digits is `1e+23`. Another spelling of the same number is
/// refused, so that one signed body cannot start a run under each spelling. (Found by QA, stop 50: an integral number
/// not written in plain digits was refused as "not an integer".)
#[test]
fn a_number_in_the_body_is_an_id_in_its_canonical_spelling_only() {
    let (engine, _, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let at_n = Source {
        body_ids: Some(BodyIds { event_id: "/n".into(), object_id: None, event_type: None }),
        ..source(false)
    };
    let intake = |event_id: &str, literal: &str| {
        let body = format!(r#"{{"n":{literal},"email":"a@example.com","amount":5}}"#);
        engine.intake_webhook(&at_n, &delivery(event_id, &body, now_ms, None))
    };
    for (event_id, literal) in [("100", "1e2"), ("200", "200.0"), ("-7", "-7"), ("1e+23", "100000000000000000000000")] {
        assert!(matches!(intake(event_id, literal), Ok(Intake::Started { .. })), "{literal} as {event_id:?}");
    }
    for (event_id, literal, held) in
        [("300.0", "300", "300"), ("1e2", "1e2", "100"), ("100000000000000000000000", "1e23", "1e+23")]
    {
        match intake(event_id, literal) {
            Err(e @ Error::IdNotInBody { .. }) => {
                assert!(e.to_string().contains(&format!("{event_id:?} given, {held:?} in the body")), "{e}")
            }
            other => panic!("{literal} as {event_id:?}: {other:?}"),
        }
    }
}

/// A pointer with a `~` that is not `~0` or `~1` is not a JSON pointer: a configuration error, with nothing recorded,
/// not a refusal of every genuine delivery. (Found by QA, stop 50: it passed the check, and every delivery was refused
/// and recorded.) `~0` and `~1` escapes, and the empty pointer (the whole body), work.
#[test]
fn a_pointer_with_a_bad_escape_is_the_sources_error() {
    let (engine, recorder, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let at = |pointer: &str| Source {
        body_ids: Some(BodyIds { event_id: pointer.into(), object_id: None, event_type: None }),
        ..source(false)
    };
    let body = r#"{"id~":"evt_x","a/b":{"m~n":"evt_y"},"email":"a@example.com","amount":5}"#;
    for bad in ["/id~", "/id~2", "/a~1b/m~n"] {
        match engine.intake_webhook(&at(bad), &delivery("evt_x", body, now_ms, None)) {
            Err(e @ Error::BadBodyIds(_)) => assert!(e.to_string().contains("'~0' (for '~') or '~1'"), "{e}"),
            other => panic!("{bad}: {other:?}"),
        }
    }
    assert!(!recorder.lines().iter().any(|l| l.contains("webhook-rejected")), "{:?}", recorder.lines());
    assert!(matches!(
        engine.intake_webhook(&at("/id~0"), &delivery("evt_x", body, now_ms, None)),
        Ok(Intake::Started { .. })
    ));
    assert!(matches!(
        engine.intake_webhook(&at("/a~1b/m~0n"), &delivery("evt_y", body, now_ms, None)),
        Ok(Intake::Started { .. })
    ));
    let whole = delivery("evt_z", r#""evt_z""#, now_ms, None);
    // A bare string is no trigger the workflow can render, but intake takes it: the id check passes.
    assert!(matches!(engine.intake_webhook(&at(""), &whole), Ok(Intake::Started { .. })));
}

/// At a source that names its body's ids, an object id or event type not given is taken from the body, so a source
/// that deduplicates by object still does (a second event for the same object and type is a duplicate); a blank one
/// at a source that does not deduplicate by them is taken as none, as without body ids. (Found by QA, stop 50: both
/// were refused, "none given" and `"" given, "cus_1" in the body`, and the genuine event lost.)
#[test]
fn object_ids_not_given_are_the_bodys() {
    let (engine, recorder, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let given_none = |event_id: &str, object_id: &str| Incoming {
        event_type: None,
        ..delivery(event_id, &enveloped(event_id, object_id), now_ms, None)
    };
    let dedup = Source { dedup_by_object: true, ..stripe() };
    let first = engine.intake_webhook(&dedup, &given_none("evt_1", "cus_1"));
    let Ok(Intake::Started { run_id }) = first else { panic!("{first:?}") };
    match engine.intake_webhook(&dedup, &given_none("evt_2", "cus_1")) {
        Ok(Intake::Duplicate { run_id: of }) => assert_eq!(of, run_id),
        other => panic!("the same object and type, from the body: {other:?}"),
    }
    assert!(matches!(engine.intake_webhook(&dedup, &given_none("evt_3", "cus_2")), Ok(Intake::Started { .. })));
    // Blank at a source that does not deduplicate by object: none given.
    let blank =
        Incoming { object_id: Some(String::new()), ..delivery("evt_4", &enveloped("evt_4", "cus_4"), now_ms, None) };
    let blank = Incoming { event_type: Some(" ".into()), ..blank };
    assert!(matches!(engine.intake_webhook(&stripe(), &blank), Ok(Intake::Started { .. })));
    // Given and not the body's: refused, as always.
    let other = delivery("evt_5", &enveloped("evt_5", "cus_5"), now_ms, Some("cus_6"));
    assert!(matches!(engine.intake_webhook(&stripe(), &other), Err(Error::IdNotInBody { field: "object id", .. })));
    assert_eq!(recorder.count("webhook-rejected "), 1, "{:?}", recorder.lines());
}

/// At a source that deduplicates by object, an object id not given is taken from the body, but a blank one there names
/// no object: the event is not deduplicated by object, rather than taken for a duplicate of every other event whose
/// body holds a blank id. `null` at the pointer is no id either, and a delivery that gives none is taken. (Found by QA,
/// stop 50: a second blank was dropped as a duplicate of the first, and `null` was refused, "the body holds null
/// there, not an id", though nothing was given.)
#[test]
fn a_blank_or_null_id_in_the_body_is_no_id() {
    let (engine, recorder, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let with_object = |event_id: &str, object_id: Value| {
        let data = json!({"object": {"id": object_id}});
        let body =
            json!({"id": event_id, "type": "customer.updated", "data": data, "email": "a@example.com", "amount": 5});
        Incoming { event_type: None, ..delivery(event_id, &body.to_string(), now_ms, None) }
    };
    let dedup = Source { dedup_by_object: true, ..stripe() };
    for (event_id, object_id) in
        [("evt_1", json!("")), ("evt_2", json!(" ")), ("evt_3", json!("")), ("evt_4", Value::Null)]
    {
        let got = engine.intake_webhook(&dedup, &with_object(event_id, object_id.clone()));
        assert!(matches!(got, Ok(Intake::Started { .. })), "{object_id} in the body: {got:?}");
    }
    assert!(matches!(engine.intake_webhook(&stripe(), &with_object("evt_5", Value::Null)), Ok(Intake::Started { .. })));
    // A blank given at such a source is still refused, and an id given over a `null` is not the body's.
    let given_blank = delivery("evt_6", &enveloped("evt_6", ""), now_ms, Some(""));
    assert!(matches!(engine.intake_webhook(&dedup, &given_blank), Err(Error::InvalidId { .. })));
    let over_null = Incoming { object_id: Some("cus_7".into()), ..with_object("evt_7", Value::Null) };
    let refused = engine.intake_webhook(&stripe(), &over_null).unwrap_err();
    assert!(refused.to_string().contains("\"cus_7\" given, and the body holds nothing there"), "{refused}");
    assert_eq!(recorder.count("webhook-rejected "), 2);
}

/// An object id or event type taken from the body is held to `ID_LEN_MAX`, as one given beside it is, where the source
/// uses it (deduplicates by object): an id that long is refused, naming where it was taken from. A source that does
/// not use the body's object ids takes the event. (Left open in stop 50: only a given id was held to the bound.)
#[test]
fn an_id_taken_from_the_body_is_held_to_the_length_bound() {
    let (engine, recorder, _) = charging_engine();
    let now_ms = RuntimeClock::new(1_000_000).now_ms();
    let long = "c".repeat(webhook::ID_LEN_MAX + 1);
    let from_body = |event_id: &str, object_id: &str| Incoming {
        event_type: None,
        ..delivery(event_id, &enveloped(event_id, object_id), now_ms, None)
    };
    let dedup = Source { dedup_by_object: true, ..stripe() };
    let refused = engine.intake_webhook(&dedup, &from_body("evt_1", &long)).unwrap_err();
    assert!(matches!(refused, Error::InvalidId { field: "object id", .. }), "{refused:?}");
    let said = refused.to_string();
    assert!(said.contains("taken from the body at \"/data/object/id\" is 256 bytes long, longer than 255"), "{said}");
    assert_eq!(recorder.count("webhook-rejected "), 1);
    let at_the_bound = "c".repeat(webhook::ID_LEN_MAX);
    assert!(matches!(engine.intake_webhook(&dedup, &from_body("evt_2", &at_the_bound)), Ok(Intake::Started { .. })));
    assert!(matches!(engine.intake_webhook(&stripe(), &from_body("evt_3", &long)), Ok(Intake::Started { .. })));
    assert_eq!(recorder.count("webhook-rejected "), 1, "{:?}", recorder.lines());
}
