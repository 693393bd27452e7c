//! The readable trace (`flowsim run --trace FILE`): what it marks, names and explains. No simulation runs here: the
//! checker and the trace are driven by hand, as the world drives them.

use engine::event::Event;
use sim::checker::{ActionInfo, Checker};
use sim::trace::{Field, Trace, run_named};
use std::collections::BTreeMap;

fn checker() -> Checker {
    let info = ActionInfo { class: "keyed".into(), lag_bound_ms: None, at_most_once: false };
    let actions = BTreeMap::from([("api.a".to_string(), info)]);
    Checker::new(&actions, Default::default(), 2, 1_000)
}

/// What the world does after each event: a violation the checker found is marked in the trace.
fn note(checker: &mut Checker, trace: &mut Trace) {
    if let Some(v) = checker.new_violation.take() {
        trace.violation(&v);
    }
}

/// Runs left unfinished after the heal phase break I8, found only by `Checker::finish`: when nothing broke before,
/// that is the first violation, marked in the trace as any other is (the events before it kept, a `!!!` line with
/// the results' description), and the mark changes no hash.
#[test]
fn runs_unfinished_at_the_end_are_the_first_violation_when_nothing_broke_before() {
    let mut checker = checker();
    let (mut trace, mut hashed_only) = (Trace::new(true), Trace::new(false));
    for (i, run_id) in ["run-7", "run-3"].into_iter().enumerate() {
        checker.on_event(0, i as u64, &Event::RunStarted { run_id, workflow: "wf" }, None);
        for t in [&mut trace, &mut hashed_only] {
            t.record(i as u64, "run-started", &[Field::U64(0), Field::Str(run_id), Field::Str("wf")]);
        }
        note(&mut checker, &mut trace);
    }
    checker.finish();
    note(&mut checker, &mut trace);
    trace.record(9, "stuck-run", &[Field::Str("run-3"), Field::Str("status running, no reason; drivers: none")]);
    hashed_only.record(9, "stuck-run", &[Field::Str("run-3"), Field::Str("status running, no reason; drivers: none")]);
    let i8 = &checker.invariants(false)["I8"];
    assert_eq!(i8.violations, 2);
    let first = i8.first_violation.as_deref().expect("I8 is broken");
    assert_eq!(first, "2 runs neither finished nor paused after the heal phase (e.g. run-3, run-7)");
    let text = trace.readable_text().expect("kept");
    assert!(text.starts_with("# the 2 events before the first violation (event #2)"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("# ")).collect();
    assert!(lines[0].contains("run-started") && lines[1].contains("run-started"), "{text}");
    assert_eq!(lines[2], format!("!!! first violation: I8: {first}"), "{text}");
    assert!(lines[3].contains("stuck-run"), "{text}");
    assert_eq!(trace.first_violation_run(), Some("run-3"), "the first of its examples");
    assert_eq!(trace.hash_hex(), hashed_only.hash_hex(), "the mark is not an event");
}

/// An earlier violation stays the first: I8 at the end does not move the mark.
#[test]
fn an_earlier_violation_stays_the_first() {
    let mut checker = checker();
    let mut trace = Trace::new(true);
    checker.on_event(0, 1, &Event::RunStarted { run_id: "run-1", workflow: "wf" }, None);
    trace.record(1, "tick", &[]);
    checker.external_violation("I6", "event evt_1 started 2 runs".into());
    note(&mut checker, &mut trace);
    trace.record(2, "tick", &[]);
    checker.finish();
    note(&mut checker, &mut trace);
    let text = trace.readable_text().expect("kept");
    let marks: Vec<&str> = text.lines().filter(|l| l.starts_with("!!!")).collect();
    assert_eq!(marks, ["!!! first violation: I6: event evt_1 started 2 runs"], "{text}");
    assert!(!checker.invariants(false)["I8"].holds);
}

/// The legend at the top of the readable trace explains every kind of event the world records: each tag that
/// `world.rs` passes to `record` or `world_event` has a line of its own, and every line is a heading (`# `), which
/// `flowsim run` tells from the events (`#N`).
#[test]
fn the_legend_explains_every_event_the_world_records() {
    let world = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/world.rs")).expect("world.rs");
    let mut tags = Vec::new();
    for call in ["record(", "world_event("] {
        for (at, _) in world.match_indices(call) {
            // The tag is the call's first string literal, within its first three arguments.
            let rest = &world[at + call.len()..];
            let head = &rest[..rest.find(['[', ';']).unwrap_or(rest.len())];
            if let Some(tag) = head.split('"').nth(1) {
                tags.push(tag.to_owned());
            }
        }
    }
    tags.sort();
    tags.dedup();
    assert!(tags.len() >= 30, "too few tags found, the scan is broken: {tags:?}");
    let mut trace = Trace::with_options(true, None, 1_767_225_600_000);
    trace.record(1_767_225_600_250, "tick", &[]);
    let text = trace.readable_text().expect("kept");
    let legend: Vec<&str> = text.lines().filter(|l| l.starts_with("#   ")).collect();
    for tag in &tags {
        assert!(
            legend.iter().any(|l| l
                .strip_prefix("#   ")
                .and_then(|l| l.strip_prefix(tag.as_str()))
                .is_some_and(|fields| fields.starts_with(' ') && !fields.trim().is_empty())),
            "the legend does not explain {tag:?}:\n{text}"
        );
    }
    assert!(text.contains("# legend: #N t=S.mmms TAG FIELDS"), "{text}");
    assert!(text.contains("reads 1767225600000 at t=0"), "{text}");
    assert!(legend.iter().any(|l| l.contains("effect") && l.contains("VISIBLE_AT")), "{text}");
    let events: Vec<&str> = text.lines().filter(|l| !l.starts_with("# ")).collect();
    assert!(events.len() == 1 && events[0].starts_with("#1 ") && events[0].contains(" t=0.250s tick"), "{text}");
}

#[test]
fn a_violation_names_its_run() {
    let cases = [
        ("I1: run run-53 step canary: key 75 of canary.create (canary) has 2 effects", Some("run-53")),
        ("I3: run wh-1f2e: an effect committed after the run finished", Some("wh-1f2e")),
        ("I6: forged delivery evt_4_forged started run wh-9a", Some("wh-9a")),
        ("I8: 1 runs neither finished nor paused after the heal phase (e.g. run-12)", Some("run-12")),
        ("I8: engine error: drive run-5: the ledger is gone", None),
        ("I6: event evt_1 started 2 runs", None),
    ];
    for (description, run) in cases {
        assert_eq!(run_named(description), run, "{description}");
    }
    let mut trace = Trace::new(true);
    assert_eq!(trace.first_violation_run(), None);
    trace.violation(cases[0].0);
    trace.violation(cases[1].0);
    assert_eq!(trace.first_violation_run(), Some("run-53"), "the first violation's");
    let mut filtered = Trace::with_options(true, Some("run-53".into()), 0);
    filtered.violation(cases[0].0);
    assert_eq!(filtered.first_violation_run(), None, "a trace of one run marks no violation");
}

/// A field can be hashed as one text and shown as another (an event whose text was made readable after passing runs
/// had the old one in their trace hash).
#[test]
fn a_shown_field_is_hashed_as_its_hashed_text() {
    let mut shown = Trace::new(true);
    shown.record(5, "e", &[Field::Str("run-1"), Field::Shown { hashed: "drivers [(1, 0)]", shown: "worker 1" }]);
    let mut plain = Trace::new(false);
    plain.record(5, "e", &[Field::Str("run-1"), Field::Str("drivers [(1, 0)]")]);
    assert_eq!(shown.hash_hex(), plain.hash_hex());
    let text = shown.readable_text().expect("kept");
    assert!(text.contains(" run-1 worker 1\n") && !text.contains("[("), "{text}");
}
