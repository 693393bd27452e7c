//! The contract suite: one set of promises, checked against every fake on its synchronous core with explicit times
//! (these run in the normal and the simulation build), plus async tests of the adapter (`async_adapter` below).
//!
//! Promises: every knob at zero gives a perfectly behaved API; keyed replay returns the stored response and commits
//! nothing; lookups eventually see every committed create; at-most-once never deduplicates; each fault at
//! probability one produces exactly its documented behaviour; the canary duplicates; memory stays bounded.

use connectors_fake::FakeKind;
use connectors_fake::profile::{Draws, Fault, FaultProfile};
use connectors_fake::rng::Rng;
use connectors_fake::server::{
    DynServer, ERROR_AFTER_COMMIT, FAIL_BEFORE_COMMIT, Handled, RATE_LIMITED, RESET_BEFORE_SEND, TIMEOUT,
};
use engine::connector::{GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request};
use engine::key::Key;
use serde_json::{Value, json};

const T0_MS: u64 = 1_700_000_000_000;

fn key(n: u64) -> Key {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    bytes[31] = 0xAB;
    Key(bytes)
}

/// Inputs every fake accepts (an object with an email unique to `n` and a positive amount).
fn inputs(n: u64) -> Value {
    json!({ "email": format!("user{n}@example.com"), "amount": 1200, "name": "Ada" })
}

struct Call {
    action: &'static str,
    inputs: engine::doc::Doc,
    key: Key,
    run_id: String,
}

impl Call {
    fn new(kind: FakeKind, n: u64) -> Self {
        Call { action: kind.create_action(), inputs: inputs(n).into(), key: key(n), run_id: format!("run-{n}") }
    }

    fn request(&self, attempt: u32) -> Request<'_> {
        Request { action: self.action, inputs: &self.inputs, key: &self.key, run_id: &self.run_id, attempt }
    }
}

fn server(kind: FakeKind, profile: FaultProfile) -> Box<dyn DynServer> {
    kind.server(&format!("{kind:?}").to_lowercase(), profile)
}

fn has_lookup(s: &dyn DynServer, action: &str) -> bool {
    s.actions().iter().find(|a| a.name == action).expect("action declared").has_lookup
}

fn is_keyed_for_real(kind: FakeKind) -> bool {
    kind == FakeKind::Payments
}

fn applied_id(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Applied(v) => v["id"].as_str().expect("applied output has an id").to_string(),
        other => panic!("expected Applied, got {other:?}"),
    }
}

#[test]
fn every_knob_at_zero_is_a_perfect_api() {
    for kind in FakeKind::ALL {
        let mut s = server(kind, FaultProfile::default());
        for n in 0..20 {
            let call = Call::new(kind, n);
            let now_ms = T0_MS + n * 10;
            let handled = s.handle(now_ms, &call.request(1), &Draws::CLEAN);
            let id = applied_id(&handled.outcome);
            let effect = handled.effect.expect("a perfect create commits one effect");
            assert_eq!(
                (effect.object_id.as_str(), effect.key, effect.run_id.as_str()),
                (id.as_str(), call.key, call.run_id.as_str())
            );
            assert_eq!((effect.committed_ms, effect.visible_ms), (now_ms, now_ms), "{kind:?}: no lag at zero");
            assert_eq!(&*effect.action, call.action);
            if has_lookup(s.as_ref(), call.action) {
                match s.lookup(now_ms, &call.request(1), &Draws::CLEAN) {
                    LookupOutcome::Found(v) => assert_eq!(v["id"], json!(id), "{kind:?}"),
                    other => panic!("{kind:?}: lookup at zero lag must find the create, got {other:?}"),
                }
            }
        }
    }
}

#[test]
fn an_unknown_action_is_a_definite_404_that_commits_and_keeps_nothing() {
    for kind in FakeKind::ALL {
        let mut s = server(kind, FaultProfile::default());
        let call = Call { action: "no_such_action", ..Call::new(kind, 1) };
        let handled = s.handle(T0_MS, &call.request(1), &Draws::CLEAN);
        let expected = NotApplied {
            error: "404 unknown action `no_such_action`".to_string(),
            retryable: false,
            retry_after_ms: None,
        };
        assert_eq!(handled.outcome, Outcome::NotApplied(expected), "{kind:?}");
        assert!(handled.effect.is_none() && handled.event.is_none(), "{kind:?}: nothing committed");
        assert_eq!(s.record_count(), 0, "{kind:?}: nothing kept");
    }
}

#[test]
fn declared_classes_match_the_fault_model() {
    let profile = FaultProfile { lag_ms_median: 10, lag_ms_tail_max: 500, ..Default::default() };
    let cases: &[(FakeKind, &str, GuaranteeClass, bool)] = &[
        (FakeKind::Payments, "create_customer", GuaranteeClass::Keyed { retention_ms: 86_400_000 }, true),
        (FakeKind::Payments, "charge", GuaranteeClass::Keyed { retention_ms: 86_400_000 }, false),
        (FakeKind::Contacts, "create_contact", GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 500 }, true),
        (FakeKind::Ledgerly, "record_entry", GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 500 }, true),
        (FakeKind::Payouts, "send_payout", GuaranteeClass::AtMostOnce, false),
        (FakeKind::Email, "send_email", GuaranteeClass::AtMostOnce, false),
        (FakeKind::Canary, "create", GuaranteeClass::Keyed { retention_ms: 86_400_000 }, false),
    ];
    for &(kind, action, class, has_lookup) in cases {
        let s = server(kind, profile.clone());
        let spec = s.actions().iter().find(|a| a.name == action).unwrap_or_else(|| panic!("{kind:?} lacks {action}"));
        assert_eq!((spec.class, spec.has_lookup), (class, has_lookup), "{kind:?}.{action}");
    }
}

#[test]
fn keyed_replay_returns_the_stored_response_and_commits_nothing() {
    for action in ["create_customer", "charge"] {
        let mut s = server(FakeKind::Payments, FaultProfile::default());
        let call = Call { action, ..Call::new(FakeKind::Payments, 1) };
        let first = s.handle(T0_MS, &call.request(1), &Draws::CLEAN);
        assert!(first.effect.is_some() && first.event.is_some());
        for attempt in 2..5 {
            let again = s.handle(T0_MS + u64::from(attempt) * 1_000, &call.request(attempt), &Draws::CLEAN);
            assert_eq!(again.outcome, first.outcome, "{action}: replay must return the stored response");
            assert_eq!((again.effect, again.event), (None, None), "{action}: a replay commits nothing");
        }
    }
}

#[test]
fn canary_duplicates_and_at_most_once_never_deduplicates() {
    for kind in [FakeKind::Canary, FakeKind::Payouts, FakeKind::Email] {
        let mut s = server(kind, FaultProfile::default());
        let call = Call::new(kind, 1);
        let ids: Vec<String> = (1..=3)
            .map(|attempt| {
                let h = s.handle(T0_MS + u64::from(attempt), &call.request(attempt), &Draws::CLEAN);
                assert_eq!(h.effect.as_ref().map(|e| e.key), Some(call.key), "{kind:?}: every call commits");
                applied_id(&h.outcome)
            })
            .collect();
        let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), 3, "{kind:?}: same key three times must give three effects: {ids:?}");
    }
}

/// What a call suffering `fault` must do, and what a clean retry with the same key must then do.
struct FaultCase {
    knob: fn(&mut FaultProfile),
    fault: Fault,
    outcome: fn(&FaultProfile) -> Outcome,
    commits: bool,
}

fn fault_cases() -> Vec<FaultCase> {
    vec![
        FaultCase {
            knob: |p| p.reset_before_send_p = 1.0,
            fault: Fault::ResetBeforeSend,
            outcome: |_| {
                Outcome::NotApplied(NotApplied {
                    error: RESET_BEFORE_SEND.into(),
                    retryable: true,
                    retry_after_ms: None,
                })
            },
            commits: false,
        },
        FaultCase {
            knob: |p| {
                p.rate_limit_p = 1.0;
                p.retry_after_ms = 2_500;
            },
            fault: Fault::RateLimited,
            outcome: |p| {
                Outcome::NotApplied(NotApplied {
                    error: RATE_LIMITED.into(),
                    retryable: true,
                    retry_after_ms: Some(p.retry_after_ms),
                })
            },
            commits: false,
        },
        FaultCase {
            knob: |p| p.fail_before_commit_p = 1.0,
            fault: Fault::FailBeforeCommit,
            outcome: |_| {
                Outcome::NotApplied(NotApplied {
                    error: FAIL_BEFORE_COMMIT.into(),
                    retryable: true,
                    retry_after_ms: None,
                })
            },
            commits: false,
        },
        FaultCase {
            knob: |p| p.timeout_after_commit_p = 1.0,
            fault: Fault::TimeoutAfterCommit,
            outcome: |_| Outcome::Indeterminate(TIMEOUT.into()),
            commits: true,
        },
        FaultCase {
            knob: |p| p.error_after_commit_p = 1.0,
            fault: Fault::ErrorAfterCommit,
            outcome: |_| Outcome::Indeterminate(ERROR_AFTER_COMMIT.into()),
            commits: true,
        },
    ]
}

#[test]
fn each_fault_at_probability_one_does_exactly_its_documented_thing() {
    for kind in FakeKind::ALL {
        for case in fault_cases() {
            let mut profile = FaultProfile::default();
            (case.knob)(&mut profile);
            let expected = (case.outcome)(&profile);
            let mut s = server(kind, profile.clone());
            let mut rng = Rng::new(7);
            let call = Call::new(kind, 1);
            let draws = profile.sample_draws(&mut rng);
            assert_eq!(draws.fault, case.fault);
            let h = s.handle(T0_MS, &call.request(1), &draws);
            let label = format!("{kind:?} with {:?}", case.fault);
            assert_eq!(h.outcome, expected, "{label}");
            assert_eq!(h.effect.is_some(), case.commits, "{label}: commits?");

            // A clean retry (same key, a minute later): what the fault left behind shows.
            let retry = s.handle(T0_MS + 60_000, &call.request(2), &Draws::CLEAN);
            match (is_keyed_for_real(kind), case.fault) {
                // Keyed: the committed success is replayed, the stored 500 is replayed; nothing new commits.
                (true, Fault::TimeoutAfterCommit) => {
                    assert!(matches!(retry.outcome, Outcome::Applied(_)), "{label}: {:?}", retry.outcome);
                    assert_eq!(retry.effect, None, "{label}");
                }
                (true, Fault::ErrorAfterCommit) => {
                    assert_eq!(retry.outcome, Outcome::Indeterminate(ERROR_AFTER_COMMIT.into()), "{label}");
                    assert_eq!(retry.effect, None, "{label}");
                }
                // Contacts: the email exists, so the retry is answered with the existing contact (409 adopted).
                (false, Fault::TimeoutAfterCommit | Fault::ErrorAfterCommit) if kind == FakeKind::Contacts => {
                    assert!(matches!(&retry.outcome, Outcome::Applied(v) if v["conflict"] == json!(true)), "{label}");
                    assert_eq!(retry.effect, None, "{label}");
                    assert_eq!(applied_id(&retry.outcome), h.effect.as_ref().unwrap().object_id, "{label}");
                }
                // Nothing was stored or committed before: the retry executes. Without real keys (ledgerly,
                // at-most-once, canary) a blind retry after a commit is a second effect: a duplicate.
                _ => {
                    assert!(matches!(retry.outcome, Outcome::Applied(_)), "{label}: {:?}", retry.outcome);
                    assert!(retry.effect.is_some(), "{label}: the retry must execute");
                }
            }
        }
    }
}

/// Every fault makes a lookup fail, retryably: the fakes' search failures are transient.
#[test]
fn lookups_fail_under_every_fault() {
    for kind in [FakeKind::Payments, FakeKind::Contacts, FakeKind::Ledgerly] {
        let mut s = server(kind, FaultProfile::default());
        let call = Call::new(kind, 1);
        s.handle(T0_MS, &call.request(1), &Draws::CLEAN);
        for fault in [
            Fault::ResetBeforeSend,
            Fault::RateLimited,
            Fault::FailBeforeCommit,
            Fault::TimeoutAfterCommit,
            Fault::ErrorAfterCommit,
        ] {
            let found = s.lookup(T0_MS + 1, &call.request(2), &Draws::with_fault(fault));
            // Transient, with no retry-after: the simulation models search failures that pass.
            assert!(
                matches!(&found, LookupOutcome::Failed(n) if n.retryable && n.retry_after_ms.is_none()),
                "{kind:?} {fault:?}: {found:?}"
            );
        }
        assert!(matches!(s.lookup(T0_MS + 1, &call.request(2), &Draws::CLEAN), LookupOutcome::Found(_)));
    }
}

#[test]
fn lookups_eventually_see_every_committed_create_and_not_before_visible() {
    let profile = FaultProfile {
        lag_ms_median: 2_000,
        lag_tail_p: 0.1,
        lag_ms_tail_max: 60_000,
        incident_p: 0.01,
        incident_lag_ms_max: 3_600_000,
        ..Default::default()
    };
    for kind in [FakeKind::Payments, FakeKind::Contacts, FakeKind::Ledgerly] {
        let mut s = server(kind, profile.clone());
        let mut rng = Rng::new(21);
        let mut created = Vec::new();
        for n in 0..300 {
            let call = Call::new(kind, n);
            let draws = profile.sample_draws(&mut rng);
            let h = s.handle(T0_MS + n, &call.request(1), &draws);
            let effect = h.effect.expect("clean create commits");
            assert_eq!(effect.visible_ms, effect.committed_ms + draws.lag_ms);
            created.push((call, effect));
        }
        let mut lagged = 0;
        for (call, effect) in &created {
            if effect.visible_ms > effect.committed_ms {
                lagged += 1;
                let early = s.lookup(effect.visible_ms - 1, &call.request(2), &Draws::CLEAN);
                assert_eq!(early, LookupOutcome::NotFound, "{kind:?}: seen before visible_ms");
            }
            match s.lookup(effect.visible_ms, &call.request(2), &Draws::CLEAN) {
                LookupOutcome::Found(v) => assert_eq!(v["id"], json!(effect.object_id.as_str())),
                other => panic!("{kind:?}: not found at visible_ms: {other:?}"),
            }
        }
        assert!(lagged > 250, "{kind:?}: the lag distribution was not applied ({lagged})");
    }
}

#[test]
fn payments_key_rules() {
    let profile = FaultProfile { key_retention_ms: 10_000, ..Default::default() };
    let mut s = server(FakeKind::Payments, profile);
    let call = Call { action: "charge", ..Call::new(FakeKind::Payments, 1) };
    let in_flight = Draws { response_ms: 500, ..Draws::CLEAN };
    let first = s.handle(T0_MS, &call.request(1), &in_flight);
    assert!(first.effect.is_some());

    // Same key while the first request is still executing: 409, not stored.
    let concurrent = s.handle(T0_MS + 499, &call.request(2), &Draws::CLEAN);
    assert_eq!((concurrent.outcome, concurrent.effect), (Outcome::KeyInFlight, None));
    assert_eq!(s.handle(T0_MS + 500, &call.request(3), &Draws::CLEAN).outcome, first.outcome);

    // Same key, other parameters, or the other action: idempotency_error.
    let changed = Call { inputs: engine::doc!({ "amount": 999 }), ..Call::new(FakeKind::Payments, 1) };
    let changed = Call { action: "charge", ..changed };
    let h = s.handle(T0_MS + 1_000, &changed.request(1), &Draws::CLEAN);
    assert!(matches!(h.outcome, Outcome::KeyReusedWithDifferentPayload(_)), "{:?}", h.outcome);
    let other_action = Call { action: "create_customer", ..Call::new(FakeKind::Payments, 1) };
    let h = s.handle(T0_MS + 1_000, &other_action.request(1), &Draws::CLEAN);
    assert!(matches!(h.outcome, Outcome::KeyReusedWithDifferentPayload(_)), "{:?}", h.outcome);

    // Past retention the key is forgotten: the same request executes again (a second effect).
    let late = s.handle(T0_MS + 10_000, &call.request(4), &Draws::CLEAN);
    assert!(late.effect.is_some(), "expired key must execute again");
    assert_ne!(applied_id(&late.outcome), applied_id(&first.outcome));
}

#[test]
fn validation_errors_and_rate_limits_are_not_stored() {
    let mut s = server(FakeKind::Payments, FaultProfile::default());
    let bad = Call { action: "charge", inputs: engine::doc!({ "amount": 0 }), ..Call::new(FakeKind::Payments, 1) };
    let h = s.handle(T0_MS, &bad.request(1), &Draws::CLEAN);
    assert!(
        matches!(&h.outcome, Outcome::NotApplied(n) if !n.retryable && n.error.starts_with("400")),
        "{:?}",
        h.outcome
    );
    let good = Call { action: "charge", ..Call::new(FakeKind::Payments, 1) };
    for (fault, at_ms) in [(Fault::RateLimited, 1), (Fault::FailBeforeCommit, 2), (Fault::ResetBeforeSend, 3)] {
        let h = s.handle(T0_MS + at_ms, &good.request(2), &Draws::with_fault(fault));
        assert!(matches!(h.outcome, Outcome::NotApplied(_)));
    }
    let h = s.handle(T0_MS + 10, &good.request(3), &Draws::CLEAN);
    assert!(h.effect.is_some(), "nothing was stored under the key before: {:?}", h.outcome);
}

#[test]
fn payments_rejects_keys_over_255_chars() {
    use connectors_fake::payments::Payments;
    use connectors_fake::server::Context;
    let profile = FaultProfile::default();
    let mut api = Payments::new("payments", &profile);
    let call = Call::new(FakeKind::Payments, 1);
    let cx = Context { now_ms: T0_MS, lag_ms: 0, response_ms: 0, error_after_commit: false };
    let cases: &[(usize, bool)] = &[(1, true), (64, true), (255, true), (256, false), (0, false)];
    for &(len, accepted) in cases {
        let k = "k".repeat(len);
        let h: Handled = api.execute_with_idempotency_key(cx, &call.request(1), &k);
        assert_eq!(matches!(h.outcome, Outcome::Applied(_)), accepted, "key of {len} chars: {:?}", h.outcome);
    }
}

#[test]
fn contacts_conflict_answers_the_existing_contact() {
    let mut s = server(FakeKind::Contacts, FaultProfile::default());
    let first = Call::new(FakeKind::Contacts, 1);
    let h = s.handle(T0_MS, &first.request(1), &Draws { lag_ms: 5_000, ..Draws::CLEAN });
    let id = applied_id(&h.outcome);
    // Another write (another key) for the same email, in other case, before the search can see the first.
    let second = Call {
        inputs: engine::doc!({ "email": "USER1@example.com" }),
        key: key(99),
        ..Call::new(FakeKind::Contacts, 2)
    };
    let h2 = s.handle(T0_MS + 1, &second.request(1), &Draws::CLEAN);
    assert_eq!(applied_id(&h2.outcome), id);
    assert!(matches!(&h2.outcome, Outcome::Applied(v) if v["conflict"] == json!(true)));
    assert_eq!(h2.effect, None);
    let missing = Call { inputs: engine::doc!({ "name": "no email" }), ..Call::new(FakeKind::Contacts, 3) };
    assert!(matches!(s.handle(T0_MS, &missing.request(1), &Draws::CLEAN).outcome, Outcome::NotApplied(_)));
}

#[test]
fn rate_limit_per_second_admits_a_window_then_answers_429_until_it_ends() {
    for kind in FakeKind::ALL {
        let mut s = server(kind, FaultProfile { rate_limit_per_s: 3, ..Default::default() });
        let outcomes: Vec<Outcome> =
            (0..4).map(|n| s.handle(T0_MS + 200 + n, &Call::new(kind, n).request(1), &Draws::CLEAN).outcome).collect();
        assert!(outcomes[..3].iter().all(|o| matches!(o, Outcome::Applied(_))), "{kind:?}: {outcomes:?}");
        let expected =
            Outcome::NotApplied(NotApplied { error: RATE_LIMITED.into(), retryable: true, retry_after_ms: Some(797) });
        assert_eq!(outcomes[3], expected, "{kind:?}");
        let next = s.handle(T0_MS + 1_000, &Call::new(kind, 9).request(1), &Draws::CLEAN);
        assert!(matches!(next.outcome, Outcome::Applied(_)), "{kind:?}: a new window admits");
    }
}

#[test]
fn webhook_event_per_change() {
    for kind in [FakeKind::Payments, FakeKind::Contacts, FakeKind::Ledgerly, FakeKind::Payouts, FakeKind::Email] {
        let mut s = server(kind, FaultProfile::default());
        let events: Vec<_> =
            (0..3).filter_map(|n| s.handle(T0_MS + n, &Call::new(kind, n).request(1), &Draws::CLEAN).event).collect();
        assert_eq!(events.len(), 3, "{kind:?}");
        let ids: std::collections::BTreeSet<&str> = events.iter().map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids.len(), 3, "{kind:?}: distinct event ids");
        assert!(events.iter().all(|e| &*e.source == s.name()));
    }
}

#[test]
fn forget_run_and_key_expiry_keep_memory_bounded() {
    for kind in FakeKind::ALL {
        let mut s = server(kind, FaultProfile { key_retention_ms: 1_000, ..Default::default() });
        for n in 0..1_000 {
            let call = Call::new(kind, n);
            s.handle(T0_MS + n, &call.request(1), &Draws::CLEAN);
            if n >= 10 {
                s.forget_run(&format!("run-{}", n - 10));
            }
        }
        assert!(s.record_count() <= 2 * 11, "{kind:?}: {} records held", s.record_count());
        for n in 990..1_000 {
            s.forget_run(&format!("run-{n}"));
        }
        assert_eq!(s.record_count(), 0, "{kind:?}");
    }
    // Keys expire by themselves after retention (objects stay until their run is forgotten, as in the real API).
    let mut s = server(FakeKind::Payments, FaultProfile { key_retention_ms: 1_000, ..Default::default() });
    for n in 0..100 {
        let call = Call { action: "charge", ..Call::new(FakeKind::Payments, n) };
        s.handle(T0_MS + n * 100, &call.request(1), &Draws::CLEAN);
    }
    let held = s.record_count();
    assert!(held < 100 + 15, "expired keys must be dropped: {held}");
}

#[test]
fn same_seed_same_outcomes() {
    let profile = FaultProfile {
        latency_ms_median: 40,
        latency_ms_p99: 400,
        timeout_after_commit_p: 0.1,
        error_after_commit_p: 0.1,
        rate_limit_p: 0.1,
        lag_ms_median: 100,
        lag_ms_tail_max: 1_000,
        ..Default::default()
    };
    let run = |seed| {
        let mut s = server(FakeKind::Ledgerly, profile.clone());
        let mut rng = Rng::new(seed);
        (0..200)
            .map(|n| {
                format!(
                    "{:?}",
                    s.handle(T0_MS + n, &Call::new(FakeKind::Ledgerly, n).request(1), &profile.sample_draws(&mut rng))
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}

#[test]
fn key_hex_matches_the_engine_spelling() {
    for n in [0, 1, 0xDEAD_BEEF, u64::MAX] {
        assert_eq!(connectors_fake::server::key_hex(&key(n)).as_str(), key(n).to_hex());
    }
}

#[test]
fn contacts_match_emails_whatever_their_case() {
    use connectors_fake::contacts::{CREATE_CONTACT, Contacts};
    use connectors_fake::server::{Api, Context};
    let mut api = Contacts::new("contacts", &FaultProfile::default());
    let cx = Context { now_ms: T0_MS, lag_ms: 0, response_ms: 0, error_after_commit: false };
    let inputs = |email: &str| engine::doc!({ "email": email });
    let (first, second, lower) = (inputs("Ada@Example.COM"), inputs("ADA@example.com"), inputs("ada@example.com"));
    let (key, run_id) = (Key([1; 32]), "run-1");
    let request = |inputs| Request { action: CREATE_CONTACT, inputs, key: &key, run_id, attempt: 1 };
    let created = api.execute(cx, &request(&first));
    let Outcome::Applied(record) = &created.outcome else { panic!("created: {:?}", created.outcome) };
    assert_eq!(record["email"], "ada@example.com");
    // Another spelling of the same address finds the contact and creates nothing.
    let again = api.execute(cx, &request(&second));
    assert!(again.effect.is_none());
    assert!(matches!(&again.outcome, Outcome::Applied(r) if r["conflict"] == true), "{:?}", again.outcome);
    for spelling in [&first, &second, &lower] {
        assert!(matches!(api.search(T0_MS, &request(spelling)), LookupOutcome::Found(_)), "{spelling}");
    }
}
