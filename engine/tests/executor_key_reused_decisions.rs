//! A `[key-reused]` failure (the API holds the step's key with another payload) says an earlier request under the key
//! may have applied, though the record is `failed`: a person's mark-done over it is applied, not refused as if the
//! step definitely did not apply. (Found by QA, stop 50: the rule that re-pauses a mark-done over a definite failure
//! took every `failed` record for one, and told the person "definitely not applied"; a person's retry after it, and an
//! edited action over it, took it for one too.)
#![cfg(not(madsim))]

mod common;

use common::*;
use engine::connector::{ActionSpec, Connector, GuaranteeClass};
use engine::decide::{self, Decision, Input, KEY_REUSED_MARK, Policy, RetryPolicy};
use engine::event::CrashPoint;
use engine::executor::record_resolution;
use engine::key::Key;
use engine::ledger::{Completion, Ledger, Resolution, ResolutionRecord, RunStatus, Status, StepRecord, paused_key};
use serde_json::json;
use std::sync::Arc;

fn reason_of(ledger: &dyn Ledger, run_id: &str) -> String {
    ledger.get_run(run_id).unwrap().unwrap().reason.unwrap_or_default()
}

/// Drives run `r` of a one-step workflow on `ledger` until it pauses at the API's `[key-reused]` answer (`fates` the
/// API's answers, the first `KeyReused`): the engine, the API and the key the run paused at.
async fn paused_at_key_reused(
    name: &str,
    ledger: &Arc<dyn Ledger>,
    spec: engine::connector::ActionSpec,
    fates: &[Fate],
) -> (engine::executor::Engine, Arc<Scripted>, Key) {
    let api = Scripted::new("api", vec![spec], fates);
    let e = engine(
        config("w1"),
        ledger.clone(),
        Recorder::new(),
        &[api.clone() as Arc<dyn Connector>],
        &[],
        &[one_step("wf", "api.charge")],
    );
    e.create_run("wf", "r", &engine::doc!({"email": "a@example.com", "amount": 5})).unwrap();
    assert_eq!(e.drive("r").await.unwrap(), RunStatus::Paused, "{name}");
    let reason = reason_of(ledger.as_ref(), "r");
    assert!(reason.contains("the key was reused with a different payload"), "{name}: {reason}");
    (e, api, paused_key(&reason).expect("a key"))
}

/// An at-most-once step whose call the API answers "this key is held with another payload" (`[key-reused]`): the
/// record is `failed`, and the run pauses for a person because the earlier request under the key may have applied. A
/// person who knows it did marks the step done, the decision filed by an older build (no `seen`). It is applied: the
/// step succeeds with the person's output. (Before: refused, "the step is recorded as definitely not applied".)
#[tokio::test]
async fn an_older_builds_mark_done_over_a_key_reused_pause_is_applied() {
    for (name, ledger) in ledgers() {
        let (e, _, key) = paused_at_key_reused(name, &ledger, at_most_once("charge"), &[Fate::KeyReused]).await;
        let record = ledger.get(&key).unwrap().unwrap();
        assert_eq!(record.status, Status::Failed, "{name}");
        let older = ResolutionRecord {
            run_id: "r".into(),
            key,
            resolution: Resolution::MarkDone { output: json!({"id": "ch_1"}) },
            by: "ann".into(),
            at_ms: record.last_attempt_ms + 1,
            seen: None,
        };
        ledger.record_resolution(&older, RunStatus::Running, None).unwrap();
        let status = e.drive("r").await.unwrap();
        let reason = reason_of(ledger.as_ref(), "r");
        assert!(
            !reason.contains("definitely not applied"),
            "{name}: {status:?}: the record says the earlier request may have applied, the reason says: {reason}"
        );
        assert_eq!(status, RunStatus::Succeeded, "{name}: the mark-done applies: {reason}");
        assert_eq!(ledger.get(&key).unwrap().unwrap().output.as_deref(), Some(&br#"{"id":"ch_1"}"#[..]), "{name}");
    }
}

/// A person marks done an at-most-once attempt in doubt (`started`, its lease expired); the attempt's late answer is
/// `[key-reused]`. The decision still applies: the answer says an earlier request under the key may have applied, not
/// that the step did not. (Before: the run paused again, "says it definitely did not apply".)
#[tokio::test]
async fn a_mark_done_over_a_late_key_reused_answer_is_applied() {
    for (name, ledger) in ledgers() {
        let api = Scripted::new("api", vec![at_most_once("charge")], &[]);
        let connectors = [api.clone() as Arc<dyn Connector>];
        let clock = Arc::new(engine::clock::RuntimeClock::new(1_000_000));
        // A: claims, calls, and dies before recording (its lease is short).
        let halting = Recorder::halting_at(CrashPoint::AfterCallBeforeRecord, 1);
        let a = engine_on(
            clock.clone(),
            short_lease("wA"),
            ledger.clone(),
            halting.clone(),
            &connectors,
            &[],
            &[one_step("wf", "api.charge")],
        );
        a.create_run("wf", "r", &engine::doc!({"email": "a@example.com", "amount": 5})).unwrap();
        assert_eq!(drive_until_halt(&a, &halting, "r").await, None, "{name}: A halted");
        // B waits A's lease out and pauses (at-most-once, may have applied).
        let b = engine_on(
            clock.clone(),
            config("wB"),
            ledger.clone(),
            Recorder::new(),
            &connectors,
            &[],
            &[one_step("wf", "api.charge")],
        );
        assert_eq!(b.drive("r").await.unwrap(), RunStatus::Paused, "{name}");
        let key = paused_key(&reason_of(ledger.as_ref(), "r")).unwrap();
        assert_eq!(ledger.get(&key).unwrap().unwrap().status, Status::Started, "{name}");
        record_resolution(
            ledger.as_ref(),
            "r",
            &Resolution::MarkDone { output: json!({"id": "ch_1"}) },
            "ann",
            engine::clock::Clock::now_ms(clock.as_ref()),
        )
        .unwrap();
        // A's late answer: the key is held with another payload.
        let error = format!("{}idempotency_error", engine::decide::KEY_REUSED_MARK);
        ledger.complete(&key, 1, Completion::Failed { error }, engine::clock::Clock::now_ms(clock.as_ref())).unwrap();
        let status = b.drive("r").await.unwrap();
        let reason = reason_of(ledger.as_ref(), "r");
        assert!(
            !reason.contains("definitely did not apply"),
            "{name}: {status:?}: a key-reused answer says an earlier request may have applied; reason: {reason}"
        );
        assert_eq!(status, RunStatus::Succeeded, "{name}: the mark-done applies: {reason}");
        assert_eq!(api.calls().len(), 1, "{name}: nothing sent again");
    }
}

/// A keyed step: the API answers `[key-reused]` (it holds the key with another payload: the earlier request under the
/// key may have applied), and the run pauses for a person. The person retries; the retry is refused for good (a 400).
/// A failed record now would say every attempt under the key definitely did not apply, which the key-reused answer
/// contradicts (an `unknown` record followed by the same retry and refusal pauses: "(an earlier attempt under this key
/// may have applied)"). The run must not fail carrying a possible effect (I3; a failed run may be replayed with an
/// edited trigger, sending the step again under a new key). (Found by QA, stop 50: the retry's refusal was recorded
/// `failed`, and the run failed, "the call was refused and cannot be retried".) The record and the pause keep the API's
/// key-reused answer, once, through a second refused retry. (Left open in stop 50: they said only "may have applied".)
#[tokio::test]
async fn a_refused_retry_after_a_key_reused_pause_pauses_the_run() {
    for (name, ledger) in ledgers() {
        let keyed = keyed("charge", 24 * 3600 * 1000, false);
        let fates = [Fate::KeyReused, Fate::FailPermanent, Fate::FailPermanent];
        let (e, api, key) = paused_at_key_reused(name, &ledger, keyed, &fates).await;
        let status = e.resolve("r", Resolution::Retry, "ann").await.unwrap();
        let reason = reason_of(ledger.as_ref(), "r");
        let record = ledger.get(&key).unwrap().unwrap();
        assert_eq!(api.calls().len(), 2, "{name}: the person's retry sent once");
        assert_eq!(
            status,
            RunStatus::Paused,
            "{name}: the API said an earlier request under the key may have applied, so the run must not fail: {reason}"
        );
        assert!(
            !decide::definitely_not_applied(&record),
            "{name}: the key is recorded as definitely not applied after a key-reused answer: {:?} {:?}",
            record.status,
            record.error
        );
        let answered = "[key-reused] idempotency_error";
        for round in ["first", "second"] {
            let reason = reason_of(ledger.as_ref(), "r");
            let error = ledger.get(&key).unwrap().unwrap().error.unwrap_or_default();
            assert_eq!(error.matches(answered).count(), 1, "{name}, {round} refusal: the record keeps why: {error}");
            assert_eq!(reason.matches(answered).count(), 1, "{name}, {round} refusal: the pause says why: {reason}");
            if round == "first" {
                assert_eq!(e.resolve("r", Resolution::Retry, "bo").await.unwrap(), RunStatus::Paused, "{name}");
                assert_eq!(api.calls().len(), 3, "{name}: bo's retry sent once");
            }
        }
    }
}

/// The same at a step whose action was edited: `decide_for_action` over a `[key-reused]` failed record says the old
/// action "may have applied" and offers every decision. (Found by QA, stop 50: it said "did not apply", and asked only
/// whether to send the new one.)
#[test]
fn an_edited_action_over_a_key_reused_failure_may_have_applied() {
    let key = Key([7; 32]);
    let record = StepRecord {
        key,
        run_id: "r".into(),
        step_id: "s".into(),
        action: "c.old".into(),
        inputs_hash: [0; 32],
        attempt_count: 1,
        status: Status::Failed,
        owner: "w".into(),
        lease_expiry_ms: 1_000,
        fence: 1,
        last_attempt_ms: 500,
        output: None,
        error: Some(format!("{KEY_REUSED_MARK}idempotency_error")),
    };
    assert!(!decide::definitely_not_applied(&record));
    let spec = ActionSpec {
        name: "new".into(),
        class: GuaranteeClass::Keyed { retention_ms: 1_000_000 },
        has_lookup: false,
        lookup_lag_bound_ms: 0,
    };
    let retry = RetryPolicy::default();
    let input = Input {
        spec: &spec,
        policy: Policy::Rules,
        retry: &retry,
        seed: 1,
        key: &key,
        record: Some(&record),
        last: None,
        first_attempt_ms: Some(500),
        now_ms: 10_000,
        person_retry: false,
    };
    let Decision::Pause(reason) = decide::decide_for_action(&input, "c.new") else { panic!("a pause") };
    assert!(reason.contains("recorded as action c.old, which may have applied"), "{reason}");
}

/// The naive baseline keeps its behaviour. A step's old action was answered `[key-reused]`, and naive failed the run.
/// The workflow is edited to give the step another action (same id and inputs, so the same key); a replay pauses at
/// the key, a person retries, and the API refuses the new action for good (a 400): one call for the person's one retry,
/// and the run fails. (Found by QA, stop 50: with the Rules' judgement of a `[key-reused]` record, the 400 was recorded
/// `unknown`, and naive, which resends whatever is unknown, sent the refund twice more on no one's decision.)
#[tokio::test]
async fn naive_a_refused_retry_after_an_edited_key_reused_step_is_not_resent() {
    for (name, ledger) in ledgers() {
        let step = |action: &str| {
            json!({"name": "wf", "steps": [
                {"id": "only", "action": action, "inputs": {"email": "{{trigger.email}}"}}
            ]})
        };
        let trigger = engine::doc!({"email": "a@example.com"});
        let api = Scripted::new(
            "api",
            vec![keyed("charge", 24 * 3600 * 1000, false), keyed("refund", 24 * 3600 * 1000, false)],
            &[Fate::KeyReused, Fate::FailPermanent],
        );
        let mut naive = config("w1");
        naive.policy = Policy::Naive;
        let connectors = [api.clone() as Arc<dyn Connector>];
        let old = engine(naive.clone(), ledger.clone(), Recorder::new(), &connectors, &[], &[step("api.charge")]);
        assert_eq!(old.start_run("wf", "r", &trigger).await.unwrap(), RunStatus::Failed, "{name}: naive fails");
        let edited = engine(naive, ledger.clone(), Recorder::new(), &connectors, &[], &[step("api.refund")]);
        assert_eq!(edited.replay("r", &trigger).await.unwrap(), RunStatus::Paused, "{name}: edited action pauses");
        let status = edited.resolve("r", Resolution::Retry, "ann").await.unwrap();
        let calls = api.calls();
        let reason = ledger.get_run("r").unwrap().unwrap().reason.unwrap_or_default();
        assert_eq!(
            calls.len(),
            2,
            "{name}: the person's one retry was refused for good (400); naive sent the refund again without a \
             decision: {:?} (status {status:?}, reason {reason})",
            calls.iter().map(|c| (c.action.as_str(), c.attempt)).collect::<Vec<_>>()
        );
        assert_eq!(status, RunStatus::Failed, "{name}: naive fails a step refused for good: {reason}");
    }
}

/// Each person's retry of a keyed step answered `[key-reused]` is answered `[key-reused]` again: the record and the
/// pause say so once, however many refusals follow. (Found by QA, stop 51: the first fix kept the earlier reason from
/// its first mark onward, so each refusal added a copy.)
#[tokio::test]
async fn repeated_key_reused_refusals_do_not_pile_up_in_the_reason() {
    for (name, ledger) in ledgers() {
        let keyed = keyed("charge", 24 * 3600 * 1000, false);
        let (e, api, key) = paused_at_key_reused(name, &ledger, keyed, &[Fate::KeyReused; 6]).await;
        for round in 1..=4 {
            assert_eq!(e.resolve("r", Resolution::Retry, "ann").await.unwrap(), RunStatus::Paused, "{name}");
            assert_eq!(api.calls().len(), round + 1, "{name}: one call per retry");
            let error = ledger.get(&key).unwrap().unwrap().error.unwrap_or_default();
            let reason = reason_of(ledger.as_ref(), "r");
            assert_eq!(error.matches(KEY_REUSED_MARK).count(), 1, "{name}, round {round}: {error}");
            assert_eq!(reason.matches(KEY_REUSED_MARK).count(), 1, "{name}, round {round}: {reason}");
        }
    }
}
