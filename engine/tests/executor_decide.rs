//! The pure decision core as a table: (class, policy, record as read, last call, now) in, decision out.

use engine::connector::{ActionSpec, GuaranteeClass};
use engine::decide::{
    self, Decision, Input, KEY_REUSED_MARK, LOOKUP_REFUSED_MARK, LastCall, PERMANENT_MARK, Policy, RetryPolicy,
    UNSTORABLE_MARK,
};
use engine::key::Key;
use engine::ledger::{Status, StepRecord};

const KEY: Key = Key([7; 32]);
const RETRY: RetryPolicy =
    RetryPolicy { attempt_count_max: 3, backoff_ms_base: 100, backoff_ms_max: 1_000, request_transit_ms_max: 0 };

fn spec(class: GuaranteeClass, has_lookup: bool) -> ActionSpec {
    ActionSpec { name: "act".to_string(), class, has_lookup, lookup_lag_bound_ms: 0 }
}

fn record(status: Status, attempt_count: u32, last_attempt_ms: u64, lease_expiry_ms: u64, error: &str) -> StepRecord {
    StepRecord {
        key: KEY,
        run_id: "r".into(),
        step_id: "s".into(),
        action: "c.act".into(),
        inputs_hash: [0; 32],
        attempt_count,
        status,
        owner: "w".into(),
        lease_expiry_ms,
        fence: attempt_count as u64,
        last_attempt_ms,
        output: (status == Status::Succeeded).then(|| b"{}".to_vec()),
        error: (!error.is_empty()).then(|| error.to_string()),
    }
}

#[derive(Debug, PartialEq)]
enum Kind {
    Replay,
    Attempt { lookup_first: bool },
    WaitUntil(u64),
    Backoff,
    Pause,
    Fail,
}

fn kind(d: &Decision) -> Kind {
    match d {
        Decision::Replay => Kind::Replay,
        Decision::Attempt { lookup_first, .. } => Kind::Attempt { lookup_first: *lookup_first },
        Decision::WaitUntil { until_ms } => Kind::WaitUntil(*until_ms),
        Decision::Backoff { .. } => Kind::Backoff,
        Decision::Pause(_) => Kind::Pause,
        Decision::Fail(_) => Kind::Fail,
    }
}

#[test]
fn decisions_as_a_table() {
    let keyed = spec(GuaranteeClass::Keyed { retention_ms: 1_000 }, false);
    let keyed_lookup = spec(GuaranteeClass::Keyed { retention_ms: 1_000 }, true);
    let lookup = spec(GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 500 }, true);
    let amo = spec(GuaranteeClass::AtMostOnce, false);
    let permanent = format!("{PERMANENT_MARK}400");
    let reused = format!("{KEY_REUSED_MARK}idempotency_error");
    let lookup_refused = format!("{LOOKUP_REFUSED_MARK}lookup failed, nothing sent: 400");
    let lookup_refused_unknown = format!("{LOOKUP_REFUSED_MARK}timeout; lookup failed: 400");
    // A call's permanent refusal after an attempt that may have applied: unknown, and the run pauses at once.
    let permanent_unknown = format!("{PERMANENT_MARK}400 (an earlier attempt under this key may have applied)");
    // The API said the step applied, with an output that cannot be canonicalised: unknown, and the run pauses at once.
    let unstorable = format!("{UNSTORABLE_MARK}applied, but the output cannot be canonicalised: 18446744073709551615");
    let reused_unknown =
        format!("{KEY_REUSED_MARK}idempotency_error (an earlier attempt under this key may have applied)");
    let now = 10_000;
    let last = Some(LastCall { ended_ms: now, retry_after_ms: None });
    use Kind::*;
    use Status::*;
    // (name, spec, policy, record, last, first attempt ms, person retry, want)
    #[allow(clippy::type_complexity, reason = "a test table")]
    let table: Vec<(&str, &ActionSpec, Policy, Option<StepRecord>, Option<LastCall>, Option<u64>, bool, Kind)> = vec![
        ("keyed, new: call", &keyed, Policy::Rules, None, None, None, false, Attempt { lookup_first: false }),
        ("lookup, new: look first", &lookup, Policy::Rules, None, None, None, false, Attempt { lookup_first: true }),
        (
            "naive lookup, new: no look",
            &lookup,
            Policy::Naive,
            None,
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        ("succeeded: replay", &amo, Policy::Rules, Some(record(Succeeded, 1, 0, 0, "")), None, None, false, Replay),
        (
            "leased elsewhere: wait for the lease",
            &keyed,
            Policy::Rules,
            Some(record(Started, 1, now, now + 50, "")),
            None,
            None,
            false,
            WaitUntil(now + 50),
        ),
        (
            "leased, even for a person's retry",
            &amo,
            Policy::Rules,
            Some(record(Started, 1, now, now + 50, "")),
            None,
            None,
            true,
            WaitUntil(now + 50),
        ),
        (
            "keyed unknown in retention, just called: back off",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 1, now - 10, 0, "timeout")),
            last,
            None,
            false,
            Backoff,
        ),
        (
            "keyed unknown in retention, resumed long after: resend",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 1, now - 900, 0, "timeout")),
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        (
            "keyed unknown past retention, no lookup: pause",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 1, now - 1_000, 0, "timeout")),
            None,
            None,
            false,
            Pause,
        ),
        (
            "keyed unknown past retention, lookup: look",
            &keyed_lookup,
            Policy::Rules,
            Some(record(Unknown, 1, now - 1_000, 0, "timeout")),
            None,
            None,
            false,
            Attempt { lookup_first: true },
        ),
        (
            "keyed unknown past retention, its lookup refused for good: pause",
            &keyed_lookup,
            Policy::Rules,
            Some(record(Unknown, 2, now - 1_000, now - 990, &lookup_refused_unknown)),
            None,
            None,
            false,
            Pause,
        ),
        (
            "keyed unknown after a permanent refusal, in retention: pause at once, a resend gets the same answer",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 2, now - 200, 0, &permanent_unknown)),
            None,
            Some(now - 300),
            false,
            Pause,
        ),
        (
            "lookup unknown after a permanent refusal: pause at once, no lookup",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, 0, &permanent_unknown)),
            None,
            None,
            false,
            Pause,
        ),
        (
            "keyed unknown after the key was found reused, in retention: pause at once",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 2, now - 200, 0, &reused_unknown)),
            None,
            Some(now - 300),
            false,
            Pause,
        ),
        (
            "keyed applied with an unstorable output, in retention: pause at once",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 1, now - 200, 0, &unstorable)),
            last,
            Some(now - 200),
            false,
            Pause,
        ),
        (
            "lookup found an unstorable record: pause at once, no second lookup",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, 0, &unstorable)),
            None,
            None,
            false,
            Pause,
        ),
        (
            "keyed applied with an unstorable output, a person's retry: one attempt",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 1, now - 200, 0, &unstorable)),
            None,
            Some(now - 200),
            true,
            Attempt { lookup_first: false },
        ),
        (
            "naive, applied with an unstorable output: retried while attempts remain",
            &keyed,
            Policy::Naive,
            Some(record(Unknown, 1, now - 900, 0, &unstorable)),
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        (
            "keyed unknown after a permanent refusal, a person's retry: one attempt",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 2, now - 200, 0, &permanent_unknown)),
            None,
            Some(now - 300),
            true,
            Attempt { lookup_first: false },
        ),
        (
            "naive, unknown after a permanent refusal: retried while attempts remain",
            &keyed,
            Policy::Naive,
            Some(record(Unknown, 2, now - 900, 0, &permanent_unknown)),
            None,
            Some(now - 1_000),
            false,
            Attempt { lookup_first: false },
        ),
        (
            "keyed, retention from the first attempt",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, 0, "timeout")),
            None,
            Some(now - 1_500),
            false,
            Pause,
        ),
        (
            "keyed, first attempt unknown after retries: assume past",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, 0, "timeout")),
            None,
            None,
            false,
            Pause,
        ),
        (
            "keyed crash (lease expired) in retention: resend",
            &keyed,
            Policy::Rules,
            Some(record(Started, 1, now - 900, now - 1, "")),
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        (
            "keyed unknown, attempts exhausted: pause",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 3, now - 900, 0, "timeout")),
            None,
            Some(now - 950),
            false,
            Pause,
        ),
        (
            "keyed failed retryable, resumed: retry",
            &keyed,
            Policy::Rules,
            Some(record(Failed, 1, now - 900, 0, "503")),
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        (
            "keyed failed, attempts exhausted: fail",
            &keyed,
            Policy::Rules,
            Some(record(Failed, 3, now - 900, 0, "503")),
            None,
            None,
            false,
            Fail,
        ),
        (
            "permanent failure: fail",
            &keyed,
            Policy::Rules,
            Some(record(Failed, 1, now, 0, &permanent)),
            None,
            None,
            false,
            Fail,
        ),
        (
            "key reused: pause, never a new key",
            &keyed,
            Policy::Rules,
            Some(record(Failed, 1, now, 0, &reused)),
            None,
            None,
            false,
            Pause,
        ),
        (
            "naive key reused: fail",
            &keyed,
            Policy::Naive,
            Some(record(Failed, 1, now, 0, &reused)),
            None,
            None,
            false,
            Fail,
        ),
        (
            "lookup unknown inside the lag bound: wait it out",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 1, now - 100, now - 50, "timeout")),
            None,
            None,
            false,
            WaitUntil(now + 450),
        ),
        (
            "lookup unknown past the lag bound: look",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 1, now - 600, now - 550, "timeout")),
            None,
            None,
            false,
            Attempt { lookup_first: true },
        ),
        (
            "lookup crash: wait out the lag from the lease expiry",
            &lookup,
            Policy::Rules,
            Some(record(Started, 1, now - 100, now - 1, "")),
            None,
            None,
            false,
            WaitUntil(now + 499),
        ),
        (
            "lookup failed retryable: look again first",
            &lookup,
            Policy::Rules,
            Some(record(Failed, 1, now - 900, 0, "503")),
            None,
            None,
            false,
            Attempt { lookup_first: true },
        ),
        (
            "lookup failed, its lookup refused for good: fail, not retried",
            &lookup,
            Policy::Rules,
            Some(record(Failed, 1, now - 900, 0, &lookup_refused)),
            None,
            None,
            false,
            Fail,
        ),
        (
            "lookup unknown past the lag bound, its lookup refused for good: pause, not retried",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, now - 890, &lookup_refused_unknown)),
            None,
            None,
            false,
            Pause,
        ),
        (
            "lookup unknown, its lookup refused for good, a person's retry: one attempt, no lookup",
            &lookup,
            Policy::Rules,
            Some(record(Unknown, 2, now - 900, now - 890, &lookup_refused_unknown)),
            None,
            None,
            true,
            Attempt { lookup_first: false },
        ),
        (
            "at-most-once unknown: pause",
            &amo,
            Policy::Rules,
            Some(record(Unknown, 1, now - 900, 0, "timeout")),
            None,
            None,
            false,
            Pause,
        ),
        (
            "at-most-once crash: pause",
            &amo,
            Policy::Rules,
            Some(record(Started, 1, now - 900, now - 1, "")),
            None,
            None,
            false,
            Pause,
        ),
        (
            "at-most-once retryable failure: pause",
            &amo,
            Policy::Rules,
            Some(record(Failed, 1, now - 900, 0, "503")),
            None,
            None,
            false,
            Pause,
        ),
        (
            "at-most-once, a person's retry: one attempt",
            &amo,
            Policy::Rules,
            Some(record(Unknown, 1, now - 900, 0, "timeout")),
            None,
            None,
            true,
            Attempt { lookup_first: false },
        ),
        (
            "a person's retry past the attempt bound",
            &keyed,
            Policy::Rules,
            Some(record(Unknown, 3, now, 0, "timeout")),
            None,
            None,
            true,
            Attempt { lookup_first: false },
        ),
        (
            "naive at-most-once unknown: retry",
            &amo,
            Policy::Naive,
            Some(record(Unknown, 1, now - 900, 0, "timeout")),
            None,
            None,
            false,
            Attempt { lookup_first: false },
        ),
        (
            "naive exhausted after unknown: fail",
            &amo,
            Policy::Naive,
            Some(record(Unknown, 3, now - 900, 0, "timeout")),
            None,
            None,
            false,
            Fail,
        ),
    ];
    for (name, spec, policy, record, last, first_attempt_ms, person_retry, want) in table {
        let input = Input {
            spec,
            policy,
            retry: &RETRY,
            seed: 1,
            key: &KEY,
            record: record.as_ref(),
            last,
            first_attempt_ms,
            now_ms: now,
            person_retry,
        };
        let decision = decide::decide(&input);
        assert_eq!(kind(&decision), want, "{name}: {decision:?}");
        if let (Decision::Attempt { expected_fence, .. }, Some(r)) = (&decision, &record) {
            assert_eq!(*expected_fence, r.fence, "{name}: claims carry the fence read");
        }
        if let Decision::Pause(reason) = &decision {
            // The evidence: attempt, time, error.
            assert!(reason.contains("attempt") && reason.contains(" ms"), "{name}: {reason}");
        }
    }
}

#[test]
fn backoff_is_bounded_exponential_with_deterministic_jitter() {
    let retry =
        RetryPolicy { attempt_count_max: 10, backoff_ms_base: 100, backoff_ms_max: 1_000, request_transit_ms_max: 0 };
    for attempt in 2..12 {
        let ceiling = (100u64 << (attempt - 2)).min(1_000);
        let delay = decide::backoff_ms(&retry, 42, &KEY, attempt);
        assert!(
            delay >= ceiling / 2 && delay <= ceiling,
            "attempt {attempt}: {delay} outside [{}, {ceiling}]",
            ceiling / 2
        );
        assert_eq!(delay, decide::backoff_ms(&retry, 42, &KEY, attempt), "a pure function of (seed, key, attempt)");
    }
    let draws: std::collections::BTreeSet<u64> =
        (0..20).map(|seed| decide::backoff_ms(&retry, seed, &KEY, 5)).collect();
    assert!(draws.len() > 5, "the seed moves the jitter: {draws:?}");
}

#[test]
fn retry_after_is_respected() {
    let keyed = spec(GuaranteeClass::Keyed { retention_ms: 60_000 }, false);
    let rec = record(Status::Failed, 1, 9_990, 0, "429");
    let input = Input {
        spec: &keyed,
        policy: Policy::Rules,
        retry: &RETRY,
        seed: 1,
        key: &KEY,
        record: Some(&rec),
        last: Some(LastCall { ended_ms: 10_000, retry_after_ms: Some(5_000) }),
        first_attempt_ms: None,
        now_ms: 10_000,
        person_retry: false,
    };
    assert_eq!(decide::decide(&input), Decision::Backoff { delay_ms: 5_000 });
}

#[test]
fn the_lag_is_waited_out_from_the_end_of_the_call_this_drive_made() {
    let lookup = spec(GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 500 }, true);
    // The call started at 9_000 and took until 9_800 (a slow commit): visible from 10_300 at the latest.
    let rec = record(Status::Unknown, 1, 9_000, 39_000, "timeout");
    let input = Input {
        spec: &lookup,
        policy: Policy::Rules,
        retry: &RETRY,
        seed: 1,
        key: &KEY,
        record: Some(&rec),
        last: Some(LastCall { ended_ms: 9_800, retry_after_ms: None }),
        first_attempt_ms: None,
        now_ms: 10_000,
        person_retry: false,
    };
    assert_eq!(decide::decide(&input), Decision::WaitUntil { until_ms: 10_300 });
}

/// A keyed resend must reach the API while it still keeps the key: past `retention - request_transit_ms_max` the key
/// counts as expired. (The simulator found a resend sent 14 ms before a 2 s window closed that arrived after it.)
#[test]
fn a_keyed_resend_must_arrive_inside_the_retention_window() {
    let retry =
        RetryPolicy { attempt_count_max: 5, backoff_ms_base: 100, backoff_ms_max: 1_000, request_transit_ms_max: 200 };
    let keyed = spec(GuaranteeClass::Keyed { retention_ms: 1_000 }, false);
    let keyed_lookup = spec(GuaranteeClass::Keyed { retention_ms: 1_000 }, true);
    let now = 10_000;
    // (first attempt at, spec, what is decided): the window ends at first + 1000, a resend arrives by now + 200.
    let table: &[(u64, &ActionSpec, Kind)] = &[
        (now - 700, &keyed, Kind::Attempt { lookup_first: false }),
        (now - 799, &keyed, Kind::Attempt { lookup_first: false }),
        (now - 800, &keyed, Kind::Pause),
        (now - 900, &keyed, Kind::Pause),
        (now - 800, &keyed_lookup, Kind::Attempt { lookup_first: true }),
    ];
    for (first, spec, want) in table {
        let rec = record(Status::Unknown, 1, *first, 0, "timeout");
        let input = Input {
            spec,
            policy: Policy::Rules,
            retry: &retry,
            seed: 1,
            key: &KEY,
            record: Some(&rec),
            last: None,
            first_attempt_ms: None,
            now_ms: now,
            person_retry: false,
        };
        assert_eq!(kind(&decide::decide(&input)), *want, "first attempt {} ms ago", now - first);
    }
    assert!(RetryPolicy::default().request_transit_ms_max >= 30_000, "the default covers a client timeout");
}

/// A key is derived from (run id, step id, inputs), not the action: a record that names another action than the step
/// now does (the workflow was edited) pauses for a person, whatever the class, policy and record, instead of
/// replaying the old action's output or sending the new action under the old one's key. A lease held on the key is
/// waited out first, and a person's retry is an attempt; a succeeded key stays final even then. The same record
/// under its own action is decided by `decide` alone.
#[test]
fn a_record_of_another_action_pauses_for_a_person() {
    let now = 10_000;
    let classes = [
        spec(GuaranteeClass::Keyed { retention_ms: 60_000 }, false),
        spec(GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 0 }, true),
        spec(GuaranteeClass::AtMostOnce, false),
    ];
    use Kind::*;
    use Status::*;
    // (record, person retry, decided under another action)
    let table = [
        (record(Succeeded, 1, now - 500, now - 400, ""), false, Pause),
        (record(Succeeded, 1, now - 500, now - 400, ""), true, Pause),
        (record(Started, 1, now - 10, now + 100, ""), false, WaitUntil(now + 100)),
        (record(Started, 1, now - 900, now - 100, ""), false, Pause),
        (record(Unknown, 1, now - 900, now - 800, "timeout"), false, Pause),
        (record(Failed, 1, now - 900, now - 800, "503"), false, Pause),
        (record(Unknown, 1, now - 900, now - 800, "timeout"), true, Attempt { lookup_first: false }),
        (record(Failed, 1, now - 900, now - 800, "503"), true, Attempt { lookup_first: false }),
    ];
    for spec in &classes {
        for policy in [Policy::Rules, Policy::Naive] {
            for (rec, person_retry, want) in &table {
                let input = Input {
                    spec,
                    policy,
                    retry: &RETRY,
                    seed: 1,
                    key: &KEY,
                    record: Some(rec),
                    last: None,
                    first_attempt_ms: Some(now - 900),
                    now_ms: now,
                    person_retry: *person_retry,
                };
                let name = format!("{} {policy:?} {:?} person_retry={person_retry}", spec.class.name(), rec.status);
                let decision = decide::decide_for_action(&input, "c.other");
                assert_eq!(kind(&decision), *want, "{name}: {decision:?}");
                if let Decision::Pause(reason) = &decision {
                    for says in ["step s", "c.act", "c.other", "a person must decide"] {
                        assert!(reason.contains(says), "{name}: {says}: {reason}");
                    }
                }
                // Under the action it records, the record is decided as always.
                assert_eq!(decide::decide_for_action(&input, "c.act"), decide::decide(&input), "{name}");
            }
        }
    }
    // No record: nothing to compare, a new key.
    let input = Input {
        spec: &classes[0],
        policy: Policy::Rules,
        retry: &RETRY,
        seed: 1,
        key: &KEY,
        record: None,
        last: None,
        first_attempt_ms: None,
        now_ms: now,
        person_retry: false,
    };
    assert_eq!(
        decide::decide_for_action(&input, "c.other"),
        Decision::Attempt { expected_fence: 0, lookup_first: false }
    );
}
