//! The executor's rules, as tables: a guarantee class and a scripted sequence of outcomes in; the run's status, the
//! calls and lookups made, the effects committed and the key's final ledger record out. Runs under real tokio
//! (`cargo test -p engine`) and under madsim (`cargo sim-test -p engine`).

#![allow(clippy::cloned_ref_to_slice_refs, reason = "the clone coerces Arc<Scripted> to Arc<dyn Connector>")]

mod common;

use common::*;
use engine::connector::{ActionSpec, Connector};
use engine::event::CrashPoint;
use engine::executor::{Engine, Error, KnownTrigger, Policy};
use engine::key;
use engine::ledger::{Ledger, Resolution, ResolutionRecord, RunStatus, Status, paused_key};
use serde_json::json;
use std::sync::Arc;

struct Case {
    name: &'static str,
    spec: ActionSpec,
    policy: Policy,
    /// The connector's visibility lag (lookups see a commit this long after it).
    lag_ms: u64,
    script: &'static [Fate],
    status: RunStatus,
    calls: usize,
    lookups: usize,
    effects: usize,
    record: Status,
}

fn cases() -> Vec<Case> {
    use Fate::*;
    let k = || keyed("charge", 60_000, false);
    let rules = Policy::Rules;
    let c = |name, spec, script, status, calls, lookups, effects, record| Case {
        name,
        spec,
        policy: rules,
        lag_ms: 0,
        script,
        status,
        calls,
        lookups,
        effects,
        record,
    };
    use RunStatus::{Failed, Paused, Succeeded};
    vec![
        c("keyed: applies once", k(), &[], Succeeded, 1, 0, 1, Status::Succeeded),
        c(
            "keyed: commit then timeout resends the same key, one effect",
            k(),
            &[ApplyThenTimeout],
            Succeeded,
            2,
            0,
            1,
            Status::Succeeded,
        ),
        c("keyed: timeout before commit resends", k(), &[TimeoutBefore], Succeeded, 2, 0, 1, Status::Succeeded),
        c(
            "keyed: retryable failures back off and retry",
            k(),
            &[FailRetryable, FailRetryable],
            Succeeded,
            3,
            0,
            1,
            Status::Succeeded,
        ),
        c("keyed: a permanent failure fails the step", k(), &[FailPermanent], Failed, 1, 0, 0, Status::Failed),
        // The resend a timeout calls for is refused for good: a further resend would get the same answer, and the
        // earlier attempt may have applied, so the run pauses at once instead of spending its attempts.
        c(
            "keyed: a permanent refusal after a timeout pauses at once",
            k(),
            &[TimeoutBefore, FailPermanent],
            Paused,
            2,
            0,
            0,
            Status::Unknown,
        ),
        c(
            "keyed: a permanent refusal after a commit then timeout pauses at once",
            k(),
            &[ApplyThenTimeout, FailPermanent],
            Paused,
            2,
            0,
            1,
            Status::Unknown,
        ),
        c(
            "keyed: the key found reused after a timeout pauses at once",
            k(),
            &[TimeoutBefore, KeyReused],
            Paused,
            2,
            0,
            0,
            Status::Unknown,
        ),
        // The API says the step applied, but its output cannot be stored (a number no double holds): a resend would
        // fetch the same output again, so the run pauses at once for a person to mark it done or abort.
        c(
            "keyed: applied with an output that cannot be stored pauses at once",
            k(),
            &[ApplyUnstorable],
            Paused,
            1,
            0,
            1,
            Status::Unknown,
        ),
        c(
            "lookup: a found record that cannot be stored pauses at once",
            lookup("contact", 0),
            &[ApplyUnstorableThenTimeout],
            Paused,
            1,
            2,
            1,
            Status::Unknown,
        ),
        c("keyed: attempts exhausted, none applied: failed", k(), &[FailRetryable; 4], Failed, 4, 0, 0, Status::Failed),
        c(
            "keyed: attempts exhausted after indeterminate: paused",
            k(),
            &[TimeoutBefore; 4],
            Paused,
            4,
            0,
            0,
            Status::Unknown,
        ),
        c(
            "keyed: key reused with another payload pauses, no new key",
            k(),
            &[KeyReused],
            Paused,
            1,
            0,
            0,
            Status::Failed,
        ),
        c(
            "keyed: 409 in flight waits and resends the same key",
            k(),
            &[InFlight, InFlight],
            Succeeded,
            3,
            0,
            1,
            Status::Succeeded,
        ),
        c(
            "keyed: past retention without lookup pauses",
            keyed("charge", 0, false),
            &[ApplyThenTimeout],
            Paused,
            1,
            0,
            1,
            Status::Unknown,
        ),
        c(
            "keyed: past retention with lookup adopts",
            keyed("charge", 0, true),
            &[ApplyThenTimeout],
            Succeeded,
            1,
            1,
            1,
            Status::Succeeded,
        ),
        c(
            "keyed: past retention with lookup, nothing found, creates",
            keyed("charge", 0, true),
            &[TimeoutBefore],
            Succeeded,
            2,
            1,
            1,
            Status::Succeeded,
        ),
        Case {
            lag_ms: 10,
            ..c(
                "lookup: looks first even on the first attempt",
                lookup("contact", 20),
                &[],
                Succeeded,
                1,
                1,
                1,
                Status::Succeeded,
            )
        },
        Case {
            lag_ms: 10,
            ..c(
                "lookup: commit then timeout, lag under the bound: adopts, no duplicate",
                lookup("contact", 20),
                &[ApplyThenTimeout],
                Succeeded,
                1,
                2,
                1,
                Status::Succeeded,
            )
        },
        Case {
            lag_ms: 10,
            ..c(
                "lookup: timeout before commit: looks, creates",
                lookup("contact", 20),
                &[TimeoutBefore],
                Succeeded,
                2,
                2,
                1,
                Status::Succeeded,
            )
        },
        Case {
            lag_ms: 10,
            ..c(
                "lookup: retryable failure retries with a lookup",
                lookup("contact", 20),
                &[FailRetryable],
                Succeeded,
                2,
                2,
                1,
                Status::Succeeded,
            )
        },
        Case {
            lag_ms: 10_000,
            ..c(
                "lookup: lag over the bound: the residual duplicate",
                lookup("contact", 20),
                &[ApplyThenTimeout],
                Succeeded,
                2,
                2,
                2,
                Status::Succeeded,
            )
        },
        c("at-most-once: applies", at_most_once("payout"), &[], Succeeded, 1, 0, 1, Status::Succeeded),
        c(
            "at-most-once: commit then timeout pauses, zero resends",
            at_most_once("payout"),
            &[ApplyThenTimeout],
            Paused,
            1,
            0,
            1,
            Status::Unknown,
        ),
        c(
            "at-most-once: timeout before commit pauses too",
            at_most_once("payout"),
            &[TimeoutBefore],
            Paused,
            1,
            0,
            0,
            Status::Unknown,
        ),
        c(
            "at-most-once: a retryable failure is not retried: paused",
            at_most_once("payout"),
            &[FailRetryable],
            Paused,
            1,
            0,
            0,
            Status::Failed,
        ),
        c(
            "at-most-once: a permanent failure fails",
            at_most_once("payout"),
            &[FailPermanent],
            Failed,
            1,
            0,
            0,
            Status::Failed,
        ),
        Case {
            policy: Policy::Naive,
            ..c(
                "naive: keyed commit then timeout duplicates (fresh key)",
                k(),
                &[ApplyThenTimeout],
                Succeeded,
                2,
                0,
                2,
                Status::Succeeded,
            )
        },
        Case {
            policy: Policy::Naive,
            ..c(
                "naive: at-most-once timeout is resent",
                at_most_once("payout"),
                &[ApplyThenTimeout],
                Succeeded,
                2,
                0,
                2,
                Status::Succeeded,
            )
        },
        Case {
            policy: Policy::Naive,
            lag_ms: 10,
            ..c(
                "naive: lookup action never looks",
                lookup("contact", 20),
                &[ApplyThenTimeout],
                Succeeded,
                2,
                0,
                2,
                Status::Succeeded,
            )
        },
    ]
}

#[tokio::test]
async fn each_rule_as_a_table() {
    for (ledger_index, mut case) in (0..ledgers().len()).flat_map(|i| cases().into_iter().map(move |c| (i, c))) {
        let (ledger_name, ledger) = ledgers().swap_remove(ledger_index);
        let name = format!("{ledger_name}: {}", case.name);
        case.name = name.leak();
        let connector = Scripted::with_lag("api", vec![case.spec.clone()], case.script, case.lag_ms);
        let recorder = Recorder::new();
        let mut config = config("w1");
        config.policy = case.policy;
        let action = format!("api.{}", case.spec.name);
        let engine =
            engine(config, ledger.clone(), recorder.clone(), &[connector.clone()], &[], &[one_step("wf", &action)]);
        let trigger = engine::doc!({"email": "a@example.com", "amount": 5});
        let status = engine.start_run("wf", "r1", &trigger).await.expect(case.name);
        let key = key::step_key("r1", "only", &json!({"email": "a@example.com", "amount": 5})).unwrap();
        let record = ledger.get(&key).unwrap().expect(case.name);
        let got =
            (status, connector.calls().len(), connector.lookups().len(), connector.effects().len(), record.status);
        let want = (case.status, case.calls, case.lookups, case.effects, case.record);
        assert_eq!(got, want, "{}: events {:?}", case.name, recorder.lines());
        let run = ledger.get_run("r1").unwrap().unwrap();
        assert_eq!(run.status, case.status, "{}", case.name);
        assert_eq!(run.reason.is_some(), case.status == RunStatus::Paused || case.status == RunStatus::Failed);
        if case.policy == Policy::Rules {
            // Every call carried the step key.
            assert!(connector.calls().iter().all(|c| c.key == key), "{}", case.name);
        }
        // Events: one CallStarted and one CallEnded per call, in pairs.
        assert_eq!(recorder.count("call "), case.calls, "{}", case.name);
        assert_eq!(recorder.count("ended "), case.calls, "{}", case.name);
        // Driving a finished or paused run again does nothing.
        assert_eq!(engine.drive("r1").await.unwrap(), case.status);
        assert_eq!(connector.calls().len(), case.calls, "{}: a second drive called again", case.name);
    }
}

#[tokio::test]
async fn a_succeeded_step_replays_without_a_call_and_changed_inputs_run_once() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false), keyed("email", 60_000, false)], &[]);
    let ledger = memory_ledger();
    let recorder = Recorder::new();
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "email", "action": "api.email", "inputs": {"to": "{{trigger.email}}", "charge": "{{steps.charge.output.id}}"}}
    ]});
    let engine = engine(config("w1"), ledger.clone(), recorder.clone(), &[connector.clone()], &[], &[wf]);
    let trigger = engine::doc!({"email": "a@example.com", "amount": 5});
    assert_eq!(engine.start_run("wf", "r1", &trigger).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.effects().len(), 2);

    // Same trigger: every step replays, byte-identical, no call.
    assert_eq!(engine.replay("r1", &trigger).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 2);
    assert_eq!(recorder.count("replayed "), 2);

    // Edited email: the charge replays (same key), the email runs once under a new key.
    let edited = engine::doc!({"email": "b@example.com", "amount": 5});
    assert_eq!(engine.replay("r1", &edited).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(engine.replay("r1", &edited).await.unwrap(), RunStatus::Succeeded);
    let effects = connector.effects();
    assert_eq!(effects.len(), 3, "{effects:?}");
    assert_eq!(effects[2].inputs["to"], "b@example.com");
    assert_eq!(connector.calls().len(), 3);
    // The charge's effect is the one from the first run: its key did not change.
    assert_eq!(effects.iter().filter(|e| e.action == "charge").count(), 1);
}

#[tokio::test]
async fn a_drive_uses_the_callers_trigger_only_when_it_is_the_stored_one() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}}
    ]});
    let engine = engine(config("w1"), memory_ledger(), Recorder::new(), &[connector.clone()], &[], &[wf]);
    // Another document than the run was created with: the stored trigger is used.
    engine.create_run("wf", "r1", &engine::doc!({"amount": 5})).unwrap();
    assert_eq!(engine.drive_known("r1", &engine::doc!({"amount": 6})).await.unwrap(), RunStatus::Succeeded);
    // A float with an integral value is stored as an integer: the drive sends what a parse of the ledger gives.
    engine.create_run("wf", "r2", &engine::doc!({"amount": 2.0})).unwrap();
    assert_eq!(engine.drive_known("r2", &engine::doc!({"amount": 2.0})).await.unwrap(), RunStatus::Succeeded);
    // The same document: sent as it is, as a drive from the ledger would send it.
    assert_eq!(engine.start_run("wf", "r3", &engine::doc!({"amount": 7})).await.unwrap(), RunStatus::Succeeded);
    let sent: Vec<serde_json::Value> = connector.effects().iter().map(|e| e.inputs["amount"].clone()).collect();
    assert_eq!(sent, [json!(5), json!(2), json!(7)]);
    assert!(sent[1].is_u64(), "the stored `2`, not the caller's 2.0");
    // A finished run is returned as it is, whatever trigger the caller holds.
    assert_eq!(engine.drive_known("r3", &engine::doc!({"amount": 8})).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 3);
}

#[tokio::test]
async fn a_known_trigger_is_stored_as_written_and_used_only_when_it_is_the_stored_one() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}}
    ]});
    let ledger = memory_ledger();
    let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
    let known = |v: serde_json::Value| KnownTrigger::new(v.into()).expect("a canonical form");
    let seven = known(json!({"amount": 7, "note": "é"}));
    assert!(engine.create_run_known("wf", "r1", &seven).unwrap());
    assert!(!engine.create_run_known("wf", "r1", &seven).unwrap(), "create_run_known is idempotent");
    assert!(matches!(engine.create_run_known("missing", "r", &seven), Err(Error::UnknownWorkflow(_))));
    // The run is stored exactly as `create_run` stores the same document.
    engine.create_run("wf", "twin", &engine::doc!({"amount": 7, "note": "é"})).unwrap();
    let stored = |run: &str| ledger.get_run(run).unwrap().expect("the run").trigger;
    assert_eq!(stored("r1"), stored("twin"));
    assert_eq!(stored("r1"), seven.canonical());
    assert_eq!(engine.drive_known_trigger("r1", &seven).await.unwrap(), RunStatus::Succeeded);
    // Another document than the run was created with: the stored trigger is used.
    engine.create_run("wf", "r2", &engine::doc!({"amount": 5})).unwrap();
    assert_eq!(engine.drive_known_trigger("r2", &known(json!({"amount": 6}))).await.unwrap(), RunStatus::Succeeded);
    // A float with an integral value is stored as an integer: the drive sends what a parse of the ledger gives.
    let two = known(json!({"amount": 2.0}));
    engine.create_run_known("wf", "r3", &two).unwrap();
    assert_eq!(engine.drive_known_trigger("r3", &two).await.unwrap(), RunStatus::Succeeded);
    // `start_run` writes its trigger once, for both: a run that existed with another trigger runs with its own.
    engine.create_run("wf", "r4", &engine::doc!({"amount": 9})).unwrap();
    assert_eq!(engine.start_run("wf", "r4", &engine::doc!({"amount": 10})).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(engine.start_run("wf", "r5", &engine::doc!({"amount": 3.0})).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(stored("r5"), b"{\"amount\":3}");
    let sent: Vec<serde_json::Value> = connector.effects().iter().map(|e| e.inputs["amount"].clone()).collect();
    assert_eq!(sent, [json!(7), json!(5), json!(2), json!(9), json!(3)]);
    assert!(sent[2].is_u64() && sent[4].is_u64(), "the stored integers, not the callers' floats");
    // A finished run is returned as it is, whatever trigger the caller holds.
    assert_eq!(engine.drive_known_trigger("r1", &known(json!({"amount": 8}))).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 5);
}

#[tokio::test]
async fn volatile_fields_are_sent_but_not_keyed() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let ledger = memory_ledger();
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "volatile": ["requested_at"],
         "inputs": {"amount": "{{trigger.amount}}", "requested_at": "{{trigger.at}}"}}
    ]});
    let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
    engine.start_run("wf", "r1", &engine::doc!({"amount": 5, "at": 1})).await.unwrap();
    engine.replay("r1", &engine::doc!({"amount": 5, "at": 2})).await.unwrap();
    assert_eq!(connector.calls().len(), 1, "a changed volatile field must not mint a new key");
    assert_eq!(connector.effects()[0].inputs["requested_at"], 1);
}

#[tokio::test]
async fn volatile_fields_of_a_writes_step_are_sent_but_not_keyed() {
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let ledger = memory_ledger();
    let wf = json!({"name": "wf", "steps": [
        {"id": "pay", "volatile": ["requested_at", "meta.trace"],
         "writes": [{"action": "api.charge",
                     "inputs": {"amount": "{{trigger.amount}}", "requested_at": "{{trigger.at}}",
                                "meta": {"trace": "{{trigger.at}}", "note": "x"}}}]}
    ]});
    let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
    engine.start_run("wf", "r1", &engine::doc!({"amount": 5, "at": 1})).await.unwrap();
    engine.replay("r1", &engine::doc!({"amount": 5, "at": 2})).await.unwrap();
    assert_eq!(connector.calls().len(), 1, "changed volatile fields (top-level and nested) must not mint a new key");
    assert_eq!(connector.effects()[0].inputs["requested_at"], 1);
    engine.replay("r1", &engine::doc!({"amount": 6, "at": 2})).await.unwrap();
    assert_eq!(connector.calls().len(), 2, "a changed keyed field is a new plan and a new write");
}

async fn paused_payout() -> (Arc<Scripted>, Arc<engine::ledger::memory::MemoryLedger>, Engine, Arc<Recorder>) {
    let connector = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout]);
    let ledger = memory_ledger();
    let recorder = Recorder::new();
    let engine = engine(
        config("w1"),
        ledger.clone(),
        recorder.clone(),
        &[connector.clone()],
        &[],
        &[one_step("wf", "bank.payout")],
    );
    let status = engine.start_run("wf", "r1", &engine::doc!({"email": "a@example.com", "amount": 5})).await.unwrap();
    assert_eq!(status, RunStatus::Paused);
    let run = ledger.get_run("r1").unwrap().unwrap();
    let reason = run.reason.unwrap();
    assert!(reason.contains("at-most-once") && reason.contains("attempt 1") && reason.contains("timeout"), "{reason}");
    assert_eq!(ledger.paused_runs().unwrap(), vec!["r1".to_string()]);
    (connector, ledger, engine, recorder)
}

#[tokio::test]
async fn each_resolution_of_a_paused_at_most_once_step() {
    // Mark done: the person's output is adopted, no call.
    let (connector, ledger, engine, recorder) = paused_payout().await;
    let output = json!({"id": "manual-42"});
    let status = engine.resolve("r1", Resolution::MarkDone { output: output.clone() }, "alice").await.unwrap();
    assert_eq!(status, RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 1);
    let resolutions = ledger.resolutions("r1").unwrap();
    assert_eq!(resolutions.len(), 1);
    assert_eq!((resolutions[0].by.as_str(), &resolutions[0].resolution), ("alice", &Resolution::MarkDone { output }));
    assert_eq!(recorder.count("resolved mark-done"), 1);
    assert!(matches!(
        engine.resolve("r1", Resolution::Retry, "bob").await,
        Err(Error::NotPaused { status: RunStatus::Succeeded, .. })
    ));

    // Retry: exactly one new attempt, by a person's decision.
    let (connector, ledger, engine, _) = paused_payout().await;
    assert_eq!(engine.resolve("r1", Resolution::Retry, "bob").await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 2);
    assert_eq!(ledger.resolutions("r1").unwrap().len(), 1);

    // Retry that is indeterminate again: paused again, one more call only.
    let (connector, _ledger, engine, _) = paused_payout().await;
    connector.push_script(&[Fate::TimeoutBefore]);
    assert_eq!(engine.resolve("r1", Resolution::Retry, "bob").await.unwrap(), RunStatus::Paused);
    assert_eq!(connector.calls().len(), 2);

    // Abort: the run fails with the person's name.
    let (connector, ledger, engine, _) = paused_payout().await;
    assert_eq!(engine.resolve("r1", Resolution::Abort, "carol").await.unwrap(), RunStatus::Failed);
    assert_eq!(ledger.get_run("r1").unwrap().unwrap().reason.as_deref(), Some("aborted by carol"));
    assert_eq!(connector.calls().len(), 1);
}

/// Runs `r1`, one step of `spec` (action `api.<name>`), on each ledger with the connector's calls and lookups
/// scripted: the connector, the ledger, the engine, the recorder and the run's status, one set per ledger.
async fn run_scripted_lookups(
    spec: &ActionSpec,
    script: &[Fate],
    lookups: &[LookupFate],
) -> Vec<(Arc<Scripted>, Arc<dyn Ledger>, Engine, Arc<Recorder>, RunStatus)> {
    let mut out = Vec::new();
    for (_, ledger) in ledgers() {
        let connector = Scripted::new("api", vec![spec.clone()], script);
        connector.push_lookup_script(lookups);
        let recorder = Recorder::new();
        let action = format!("api.{}", spec.name);
        let engine = engine(
            config("w1"),
            ledger.clone(),
            recorder.clone(),
            &[connector.clone()],
            &[],
            &[one_step("wf", &action)],
        );
        let status =
            engine.start_run("wf", "r1", &engine::doc!({"email": "a@example.com", "amount": 5})).await.unwrap();
        out.push((connector, ledger, engine, recorder, status));
    }
    out
}

fn only_key() -> key::Key {
    key::step_key("r1", "only", &json!({"email": "a@example.com", "amount": 5})).unwrap()
}

/// A lookup the API refuses for good (a 400: the query can never succeed), with every earlier attempt definitely
/// not applied: the step and the run fail at once, naming the lookup's failure, with no retry and nothing sent. On
/// the first attempt (no earlier one), and on the retry after a definite call failure.
#[tokio::test]
async fn a_lookup_refused_for_good_after_definite_failures_fails_at_once() {
    // (name, call script, lookup script, lookups, calls, attempts, retries scheduled)
    #[allow(clippy::type_complexity, reason = "a test table")]
    let cases: [(&str, &[Fate], &[LookupFate], usize, usize, u32, usize); 2] = [
        ("first attempt", &[], &[LookupFate::FailPermanent], 1, 0, 1, 0),
        (
            "after a retryable call failure",
            &[Fate::FailRetryable],
            &[LookupFate::Search, LookupFate::FailPermanent],
            2,
            1,
            2,
            1,
        ),
    ];
    for (name, script, lookups, lookup_count, call_count, attempt_count, retry_count) in cases {
        for (connector, ledger, engine, recorder, status) in
            run_scripted_lookups(&lookup("contact", 20), script, lookups).await
        {
            let events = recorder.lines();
            assert_eq!(status, RunStatus::Failed, "{name}: {events:?}");
            assert_eq!(connector.lookups().len(), lookup_count, "{name}: {events:?}");
            assert_eq!(connector.calls().len(), call_count, "{name}: {events:?}");
            assert!(connector.effects().is_empty(), "{name}");
            assert_eq!(recorder.count("retry #"), retry_count, "{name}: {events:?}");
            let record = ledger.get(&only_key()).unwrap().unwrap();
            assert_eq!((record.status, record.attempt_count), (Status::Failed, attempt_count), "{name}");
            let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
            assert!(
                reason.contains("lookup")
                    && reason.contains("cannot be retried")
                    && reason.contains("400 search query refused"),
                "{name}: {reason}"
            );
            assert_eq!(recorder.count("run-failed "), 1, "{name}: {events:?}");
            // Driving it again does nothing.
            assert_eq!(engine.drive("r1").await.unwrap(), RunStatus::Failed);
            assert_eq!((connector.lookups().len(), connector.calls().len()), (lookup_count, call_count), "{name}");
        }
    }
}

/// A retryable lookup failure is retried (with a lookup first), as any definite failure is; a retry-after the API
/// gave with it is waited out from the lookup's end before the next attempt.
#[tokio::test]
async fn a_retryable_lookup_failure_is_retried_after_its_retry_after() {
    for (fate, wait_ms) in [(LookupFate::FailRetryable, 0), (LookupFate::FailRetryAfter(50), 50)] {
        for (connector, ledger, _, recorder, status) in run_scripted_lookups(&lookup("contact", 20), &[], &[fate]).await
        {
            let events = recorder.lines();
            assert_eq!(status, RunStatus::Succeeded, "{fate:?}: {events:?}");
            let lookups = connector.lookups();
            assert_eq!((lookups.len(), connector.calls().len(), connector.effects().len()), (2, 1, 1), "{fate:?}");
            // The second attempt, after the backoff (already over by then when it is this short) or the retry-after.
            assert_eq!((lookups[0].attempt, lookups[1].attempt), (1, 2), "{fate:?}: {events:?}");
            assert!(lookups[1].at_ms >= lookups[0].at_ms + wait_ms, "{fate:?}: {lookups:?}");
            let record = ledger.get(&only_key()).unwrap().unwrap();
            assert_eq!((record.status, record.attempt_count), (Status::Succeeded, 2), "{fate:?}");
        }
    }
}

/// After an attempt that may have applied, a failed lookup leaves the step unknown whatever the failure: nothing can
/// be concluded about the earlier write. When the API refuses the lookup for good, no retry can tell either, so the
/// run pauses for a person at once (no further attempt), and the person's decision applies. A lookup-before-create
/// action, and a keyed action past its retention window.
#[tokio::test]
async fn a_lookup_refused_for_good_after_an_attempt_that_may_have_applied_pauses_at_once() {
    // (spec, lookup script): a lookup-before-create action looks first on its first attempt too, and finds nothing.
    let cases: [(ActionSpec, &[LookupFate]); 2] = [
        (lookup("contact", 20), &[LookupFate::Search, LookupFate::FailPermanent]),
        (keyed("charge", 1, true), &[LookupFate::FailPermanent]),
    ];
    for (spec, lookups) in cases {
        let name = &spec.name;
        let first_lookup = lookups.len() - 1;
        for (connector, ledger, engine, recorder, status) in
            run_scripted_lookups(&spec, &[Fate::ApplyThenTimeout], lookups).await
        {
            let events = recorder.lines();
            assert_eq!(status, RunStatus::Paused, "{name}: {events:?}");
            assert_eq!(connector.lookups().len(), first_lookup + 1, "{name}: {events:?}");
            assert_eq!((connector.calls().len(), connector.effects().len()), (1, 1), "{name}: {events:?}");
            let record = ledger.get(&only_key()).unwrap().unwrap();
            assert_eq!((record.status, record.attempt_count), (Status::Unknown, 2), "{name}");
            let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
            assert!(
                reason.contains("may have applied")
                    && reason.contains("400 search query refused")
                    && reason.contains("a person must decide"),
                "{name}: {reason}"
            );
            // Driving it again sends nothing: it waits for the person.
            assert_eq!(engine.drive("r1").await.unwrap(), RunStatus::Paused);
            assert_eq!((connector.lookups().len(), connector.calls().len()), (first_lookup + 1, 1), "{name}");
            // The person finds the effect and marks the step done with it.
            let output = json!({"id": 1});
            let status = engine.resolve("r1", Resolution::MarkDone { output }, "alice").await.unwrap();
            assert_eq!(status, RunStatus::Succeeded, "{name}");
            assert_eq!((connector.lookups().len(), connector.calls().len()), (first_lookup + 1, 1), "{name}");
        }
    }
}

/// A blank run id names no run a person could find (`flow paused`) or mean (`flow resolve --run`): creating or
/// starting one is refused, and the ledger holds no such run.
#[tokio::test]
async fn a_blank_run_id_is_refused() {
    for (ledger_name, ledger) in ledgers() {
        let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
        let wf = one_step("wf", "api.charge");
        let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
        let trigger = engine::doc!({"email": "a@example.com", "amount": 5});
        for run_id in ["", " ", "\t", "\u{3164}"] {
            let e = engine.create_run("wf", run_id, &trigger).unwrap_err().to_string();
            assert!(e.contains(&format!("a run id must name the run: {run_id:?} is blank")), "{ledger_name}: {e}");
            assert!(engine.start_run("wf", run_id, &trigger).await.is_err(), "{ledger_name}: {run_id:?} started");
            assert_eq!(ledger.get_run(run_id).unwrap(), None, "{ledger_name}: {run_id:?} is in the ledger");
        }
        assert_eq!(connector.calls().len(), 0, "{ledger_name}");
        assert_eq!(engine.start_run("wf", "r1", &trigger).await.unwrap(), RunStatus::Succeeded, "{ledger_name}");
    }
}

/// A paused run waits for a person: a replay with edited inputs would give its at-most-once step a new key and send
/// it again while the old key may have applied (rule 2, I4). It is refused naming the step, and changes nothing; so
/// is a replay of a run a worker may be driving. Once a person has decided and the run has finished, it replays.
#[tokio::test]
async fn a_replay_of_a_run_that_has_not_finished_is_refused_and_changes_nothing() {
    let (connector, ledger, engine, _) = paused_payout().await;
    let before = ledger.get_run("r1").unwrap().unwrap();
    let paused_key = engine::ledger::paused_key(before.reason.as_deref().unwrap()).unwrap();
    let record_before = ledger.get(&paused_key).unwrap().unwrap();
    let edited = engine::doc!({"email": "a@example.com", "amount": 6});
    let new_key = key::step_key("r1", "only", &edited).unwrap();
    for trigger in [&edited, &engine::doc!({"email": "a@example.com", "amount": 5})] {
        let refused = engine.replay("r1", trigger).await;
        let Err(e @ Error::NotFinished { status: RunStatus::Paused, step: Some(_), .. }) = refused else {
            panic!("a paused run must not be replayed: {refused:?}");
        };
        let message = e.to_string();
        assert!(message.contains("paused at step only") && message.contains("flow resolve"), "{message}");
        assert_eq!(ledger.get_run("r1").unwrap().unwrap(), before, "the run is left as it was");
        assert_eq!(ledger.get(&paused_key).unwrap().unwrap(), record_before);
        assert_eq!(ledger.get(&new_key).unwrap(), None, "no key of the edited inputs is claimed");
        assert_eq!(connector.calls().len(), 1, "the payout is not sent again without a person's decision");
    }
    // Pending (never driven) and running (a worker may be driving it, or will resume it): refused too.
    engine.create_run("wf", "r2", &engine::doc!({"email": "b@example.com", "amount": 1})).unwrap();
    ledger.create_run(engine::ledger::RunRecord { run_id: "r3".into(), ..before.clone() }).unwrap();
    ledger.set_run_status("r3", RunStatus::Running, None, 5).unwrap();
    for (run, status) in [("r2", RunStatus::Pending), ("r3", RunStatus::Running)] {
        let stored = ledger.get_run(run).unwrap().unwrap();
        let refused = engine.replay(run, &edited).await;
        assert!(
            matches!(&refused, Err(Error::NotFinished { status: s, step: None, .. }) if *s == status),
            "{run}: {refused:?}"
        );
        let message = refused.unwrap_err().to_string();
        assert!(message.contains(status.as_str()) && message.contains("let it finish first"), "{message}");
        assert_eq!(ledger.get_run(run).unwrap().unwrap(), stored, "{run} is left as it was");
    }
    assert_eq!(connector.calls().len(), 1);
    // A person decides; the run finishes, and then a replay with edited inputs runs the step once under its new key.
    let done = Resolution::MarkDone { output: json!({"id": "po_1"}) };
    assert_eq!(engine.resolve("r1", done, "ann").await.unwrap(), RunStatus::Succeeded);
    assert_eq!(engine.replay("r1", &edited).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 2);
    assert_eq!(connector.calls()[1].key, new_key);
}

/// A step's key covers its id and inputs, not its action. A workflow edited to give a step another action (same id,
/// same inputs) finds the key recorded as the old action: the step pauses for a person, naming the step and both
/// actions, instead of replaying the old action's output as the new one's (no call), or sending the new action under
/// the key of an old attempt that may have applied.
#[tokio::test]
async fn a_step_whose_action_was_edited_pauses_instead_of_taking_the_old_actions_record() {
    let step = |action: &str| {
        let inputs = json!({"to": "{{trigger.email}}"});
        json!({"name": "wf", "steps": [{"id": "notify", "action": action, "inputs": inputs}]})
    };
    let trigger = engine::doc!({"email": "a@example.com"});
    let actions = || vec![keyed("email", 60_000, false), keyed("sms", 60_000, false)];

    // The old action succeeded: a replay under the edited workflow must not hand its output on as the new one's.
    let connector = Scripted::new("api", actions(), &[]);
    let ledger = memory_ledger();
    let old = engine(config("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[step("api.email")]);
    assert_eq!(old.start_run("wf", "r1", &trigger).await.unwrap(), RunStatus::Succeeded);
    let edited = engine(config("w2"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[step("api.sms")]);
    assert_eq!(edited.replay("r1", &trigger).await.unwrap(), RunStatus::Paused);
    let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
    for says in ["step notify", "api.email", "api.sms", "a person must decide", "[key "] {
        assert!(reason.contains(says), "{says}: {reason}");
    }
    assert_eq!(connector.calls().len(), 1, "no call, and no replay of the email as the sms");
    // A succeeded key is final: a retry or a mark-done cannot apply there, and the run pauses again, saying so.
    for decision in [Resolution::Retry, Resolution::MarkDone { output: json!({"id": "sms_1"}) }] {
        assert_eq!(edited.resolve("r1", decision, "ann").await.unwrap(), RunStatus::Paused);
        let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
        assert!(reason.contains("cannot apply to a succeeded key") && reason.contains("api.sms"), "{reason}");
        assert_eq!(connector.calls().len(), 1);
    }
    assert_eq!(edited.resolve("r1", Resolution::Abort, "ann").await.unwrap(), RunStatus::Failed);
    // The old workflow still replays its record.
    assert_eq!(old.replay("r1", &trigger).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 1);

    // The old action's attempt may have applied (its worker died after the call): the new action is not sent under
    // its key without a person's decision; a person's retry then sends the new action once.
    let connector = Scripted::new("api", actions(), &[]);
    let ledger = memory_ledger();
    let crashing = Recorder::halting_at(CrashPoint::AfterCallBeforeRecord, 1);
    let old =
        engine(short_lease("w1"), ledger.clone(), crashing.clone(), &[connector.clone()], &[], &[step("api.email")]);
    old.create_run("wf", "r1", &trigger).unwrap();
    assert_eq!(drive_until_halt(&old, &crashing, "r1").await, None);
    let key = connector.calls()[0].key;
    // The edited workflow's drive waits out the dead worker's lease on the key (read from the ledger), then decides.
    let recorder = Recorder::new();
    let edited = engine(config("w2"), ledger.clone(), recorder.clone(), &[connector.clone()], &[], &[step("api.sms")]);
    assert_eq!(edited.drive("r1").await.unwrap(), RunStatus::Paused);
    let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
    for says in ["step notify", "api.email", "api.sms", "may have applied", "a person must decide"] {
        assert!(reason.contains(says), "{says}: {reason}");
    }
    assert_eq!(connector.calls().len(), 1, "the sms was not sent under the email's key");
    assert_eq!(ledger.get(&key).unwrap().unwrap().action, "api.email");
    assert_eq!(edited.resolve("r1", Resolution::Retry, "bo").await.unwrap(), RunStatus::Succeeded);
    let calls = connector.calls();
    assert_eq!(calls.iter().map(|c| (c.action.as_str(), c.key)).collect::<Vec<_>>(), [("email", key), ("sms", key)]);
    assert_eq!(ledger.get(&key).unwrap().unwrap().action, "api.sms", "the person's retry recorded the new action");
    assert_eq!(edited.replay("r1", &trigger).await.unwrap(), RunStatus::Succeeded);
    assert_eq!(connector.calls().len(), 2);
}

#[tokio::test]
async fn two_workers_driving_one_run_execute_each_key_once() {
    // The worker that finds a key claimed by the other waits out that lease, then replays the key's record: every
    // class at once, so the test waits about one lease.
    join_all([keyed("charge", 60_000, false), lookup("charge", 5), at_most_once("charge")].map(|spec| async move {
        let connector = Scripted::new("api", vec![spec.clone()], &[]);
        let ledger = memory_ledger();
        let wf = json!({"name": "wf", "steps": [
            {"id": "a", "action": "api.charge", "inputs": {"n": 1}},
            {"id": "b", "action": "api.charge", "inputs": {"n": 2}},
        ]});
        let one = engine(short_lease("w1"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf.clone()]);
        let two = engine(short_lease("w2"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
        one.create_run("wf", "r1", &engine::doc!({})).unwrap();
        assert!(!two.create_run("wf", "r1", &engine::doc!({})).unwrap(), "create_run is idempotent");
        let (a, b) = tokio::join!(one.drive("r1"), two.drive("r1"));
        assert_eq!((a.unwrap(), b.unwrap()), (RunStatus::Succeeded, RunStatus::Succeeded), "{}", spec.class.name());
        assert_eq!(connector.effects().len(), 2, "{}", spec.class.name());
        assert_eq!(connector.calls().len(), 2, "{}", spec.class.name());
    }))
    .await;
}

/// A run's first drive claims its keys without reading them first (they are almost always new). When a key of a
/// run never driven is recorded already, that claim changes nothing and the drive reads the record and decides on it
/// as any drive would: a succeeded key replays, a failed one is retried under the next fence.
#[tokio::test]
async fn a_first_drive_decides_on_a_key_that_is_recorded_already() {
    for (ledger_name, ledger) in ledgers() {
        let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
        let wf = json!({"name": "wf", "steps": [{"id": "a", "action": "api.charge", "inputs": {"n": 1}}]});
        let recorder = Recorder::new();
        let engine = engine(config("w1"), ledger.clone(), recorder.clone(), &[connector.clone()], &[], &[wf]);

        // Succeeded already: a run set back to pending (never driven, as far as its status says) replays it.
        assert_eq!(engine.start_run("wf", "r1", &engine::doc!({})).await.unwrap(), RunStatus::Succeeded);
        ledger.set_run_status("r1", RunStatus::Pending, None, 0).unwrap();
        assert_eq!(engine.drive("r1").await.unwrap(), RunStatus::Succeeded, "{ledger_name}");
        assert_eq!(connector.calls().len(), 1, "{ledger_name}: a recorded success is not sent again");
        assert_eq!(recorder.count("replayed "), 1, "{ledger_name}");

        // Failed already (another worker's attempt, definitely not applied): retried once, at fence 2.
        assert!(engine.create_run("wf", "r2", &engine::doc!({})).unwrap());
        let key = key::step_key("r2", "a", &json!({"n": 1})).unwrap();
        let claim = engine::ledger::Claim {
            key,
            run_id: "r2",
            step_id: "a",
            action: "api.charge",
            inputs_hash: [0; 32],
            worker: "w0",
            now_ms: 0,
            lease_ms: 40,
            expected_fence: 0,
            expected_status: None,
            durable: false,
            walk: None,
        };
        assert_eq!(ledger.claim(&claim).unwrap(), engine::ledger::Claimed::Granted { fence: 1, attempt: 1 });
        let failed = engine::ledger::Completion::Failed { error: "503 before processing".into() };
        ledger.complete(&key, 1, failed, 1).unwrap();
        assert_eq!(engine.drive("r2").await.unwrap(), RunStatus::Succeeded, "{ledger_name}");
        assert_eq!(connector.calls().len(), 2, "{ledger_name}: one call for r2");
        let record = ledger.get(&key).unwrap().expect("recorded");
        assert_eq!((record.status, record.fence, record.attempt_count), (Status::Succeeded, 2, 2), "{ledger_name}");
    }
}

#[tokio::test]
async fn a_crash_at_each_point_keeps_one_effect_or_pauses() {
    // (class, crash point, status after a restarted worker resumes, calls, effects)
    let table: Vec<(ActionSpec, CrashPoint, RunStatus, usize, usize)> = vec![
        (keyed("charge", 60_000, false), CrashPoint::BeforeCall, RunStatus::Succeeded, 1, 1),
        (keyed("charge", 60_000, false), CrashPoint::AfterCallBeforeRecord, RunStatus::Succeeded, 2, 1),
        (lookup("charge", 5), CrashPoint::BeforeCall, RunStatus::Succeeded, 1, 1),
        (lookup("charge", 5), CrashPoint::AfterCallBeforeRecord, RunStatus::Succeeded, 1, 1),
        (at_most_once("charge"), CrashPoint::BeforeCall, RunStatus::Paused, 0, 0),
        (at_most_once("charge"), CrashPoint::AfterCallBeforeRecord, RunStatus::Paused, 1, 1),
    ];
    // The restarted worker waits out the crashed one's lease: every case at once, so the test waits about one lease.
    let cases = table.into_iter().flat_map(|row| ledgers().into_iter().map(move |l| (row.clone(), l)));
    join_all(cases.map(|((spec, point, status, calls, effects), (ledger_name, ledger))| async move {
        let name = format!("{ledger_name}: {} crash {point:?}", spec.class.name());
        let connector = Scripted::with_lag("api", vec![spec], &[], 2);
        let crashing = Recorder::halting_at(point, 1);
        let wf = one_step("wf", "api.charge");
        let first =
            engine(short_lease("w1"), ledger.clone(), crashing.clone(), &[connector.clone()], &[], &[wf.clone()]);
        first.create_run("wf", "r1", &engine::doc!({"email": "a", "amount": 1})).unwrap();
        assert_eq!(drive_until_halt(&first, &crashing, "r1").await, None, "{name}: should have crashed");
        drop(first);
        let second = engine(config("w2"), ledger.clone(), Recorder::new(), &[connector.clone()], &[], &[wf]);
        let resumed = resume_all(&second).await;
        assert_eq!(resumed, vec![("r1".to_string(), status)], "{name}");
        assert_eq!((connector.calls().len(), connector.effects().len()), (calls, effects), "{name}");
    }))
    .await;
}

/// A re-drive replays the steps done before the crash: an output a later step names is read back from the ledger (the
/// step after it gets the id the first call returned), and the keys it claims record the same inputs hash a first drive
/// does. Crashes before the second and before the third call, so the replays include an output nobody names.
#[tokio::test]
async fn a_re_drive_reads_back_the_outputs_later_steps_name_and_hashes_the_inputs_it_claims() {
    for (nth, (ledger_name, ledger)) in [2, 3].into_iter().flat_map(|nth| ledgers().into_iter().map(move |l| (nth, l)))
    {
        let name = format!("{ledger_name}: crash before call {nth}");
        let connector = Scripted::new("api", vec![keyed("a", 60_000, false), keyed("b", 60_000, false)], &[]);
        let wf = json!({"name": "wf", "steps": [
            {"id": "first", "action": "api.a", "inputs": {"email": "{{trigger.email}}"}},
            {"id": "second", "action": "api.b", "inputs": {"from_first": "{{steps.first.output.id}}"}},
            {"id": "third", "action": "api.a", "inputs": {"after": "third of {{trigger.email}}"}}
        ]});
        let crashing = Recorder::halting_at(CrashPoint::BeforeCall, nth);
        let first =
            engine(short_lease("w1"), ledger.clone(), crashing.clone(), &[connector.clone()], &[], &[wf.clone()]);
        first.create_run("wf", "r1", &engine::doc!({"email": "a@x"})).unwrap();
        assert_eq!(drive_until_halt(&first, &crashing, "r1").await, None, "{name}: should have crashed");
        drop(first);
        let recorder = Recorder::new();
        let second = engine(config("w2"), ledger.clone(), recorder.clone(), &[connector.clone()], &[], &[wf]);
        assert_eq!(second.drive("r1").await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!(recorder.count("replayed"), nth as usize - 1, "{name}");
        let effects = connector.effects();
        assert_eq!(effects.len(), 3, "{name}: one effect per step");
        assert_eq!(effects[1].inputs, json!({"from_first": effects[0].id}), "{name}");
        for effect in &effects {
            let record = ledger.get(&effect.key).unwrap().expect("recorded");
            let canonical = engine::canonical::to_vec(&effect.inputs).unwrap();
            assert_eq!(record.inputs_hash, *blake3::hash(&canonical).as_bytes(), "{name}: {}", effect.action);
        }
    }
}

#[tokio::test]
async fn auto_retry_coverage_counts_distinct_actions() {
    let connector = Scripted::new(
        "api",
        vec![keyed("a", 1, false), lookup("b", 1), at_most_once("c"), keyed("unused", 1, false)],
        &[],
    );
    let wfs = [
        json!({"name": "one", "steps": [{"id": "x", "action": "api.a"}, {"id": "y", "action": "api.c"}]}),
        json!({"name": "two", "steps": [{"id": "x", "writes": [{"action": "api.a"}, {"action": "api.b"}]}]}),
    ];
    let rules = engine(config("w"), memory_ledger(), Recorder::new(), &[connector.clone()], &[], &wfs);
    assert!((rules.auto_retry_coverage() - 2.0 / 3.0).abs() < 1e-9);
    let mut naive_config = config("w");
    naive_config.policy = Policy::Naive;
    let naive = engine(naive_config, memory_ledger(), Recorder::new(), &[connector as Arc<dyn Connector>], &[], &wfs);
    assert_eq!(naive.auto_retry_coverage(), 1.0);
}

#[tokio::test]
async fn registration_checks_actions_and_planners() {
    let connector = Scripted::new("api", vec![keyed("a", 1, false)], &[]);
    let mut engine = engine(config("w"), memory_ledger(), Recorder::new(), &[connector], &[], &[]);
    let table = [
        (json!({"name": "w", "steps": [{"id": "s", "action": "api.nope"}]}), "s", "action"),
        (
            json!({"name": "w", "steps": [{"id": "s", "writes": [{"action": "api.a"}, {"action": "x.y"}]}]}),
            "s",
            "writes[1].action",
        ),
        (json!({"name": "w", "steps": [{"id": "s", "planner": "model"}]}), "s", "planner"),
    ];
    for (def, step, field) in table {
        let wf = engine::workflow::Workflow::from_json(&def.to_string()).unwrap();
        let err = engine.register_workflow(wf).expect_err("must be refused");
        assert_eq!((err.step.as_str(), err.field.as_str()), (step, field), "{err}");
    }
    assert!(matches!(engine.create_run("missing", "r", &engine::doc!({})), Err(Error::UnknownWorkflow(_))));
    assert!(matches!(engine.drive("nope").await, Err(Error::UnknownRun(_))));
}

/// The embedding story: the on-disk SQLite ledger, a worker crash, a restarted worker on a reopened file, and a
/// person resolving the pause from another process's view of the file (what the `flow` CLI does).
#[cfg(not(madsim))]
#[tokio::test]
async fn on_disk_ledger_survives_a_restart_and_a_cli_resolution() {
    use engine::ledger::sqlite::{Options, SqliteLedger};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let open = || -> Arc<dyn Ledger> { Arc::new(SqliteLedger::open(&path, Options::default()).unwrap()) };
    let connector = Scripted::new("bank", vec![keyed("charge", 60_000, false), at_most_once("payout")], &[]);
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "bank.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "payout", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}}
    ]});
    {
        let crashing = Recorder::halting_at(CrashPoint::AfterCallBeforeRecord, 2);
        let first = engine(short_lease("w1"), open(), crashing.clone(), &[connector.clone()], &[], &[wf.clone()]);
        first.create_run("wf", "r1", &engine::doc!({"amount": 3})).unwrap();
        assert_eq!(drive_until_halt(&first, &crashing, "r1").await, None);
    }
    let second = engine(config("w2"), open(), Recorder::new(), &[connector.clone()], &[], &[wf]);
    assert_eq!(resume_all(&second).await, vec![("r1".to_string(), RunStatus::Paused)]);
    assert_eq!(connector.calls().len(), 2, "the payout was not resent after the crash");
    {
        let cli_view = open();
        assert_eq!(cli_view.paused_runs().unwrap(), vec!["r1".to_string()]);
        let done = Resolution::MarkDone { output: json!({"payout": "po_1"}) };
        let status = engine::executor::record_resolution(cli_view.as_ref(), "r1", &done, "erin", 2_000_000_000_000);
        assert_eq!(status.unwrap(), RunStatus::Running);
    }
    assert_eq!(resume_all(&second).await, vec![("r1".to_string(), RunStatus::Succeeded)]);
    assert_eq!((connector.calls().len(), connector.effects().len()), (2, 2));
}

/// The simulator shares one engine between many tasks: the engine is `Send + Sync` and its futures are `Send`.
#[tokio::test]
async fn the_engine_is_shareable_and_its_futures_are_send() {
    fn send<T: Send>(t: T) -> T {
        t
    }
    fn shareable<T: Send + Sync + 'static>(_: &T) {}
    let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
    let engine = Arc::new(engine(
        config("w1"),
        memory_ledger(),
        Recorder::new(),
        &[connector.clone()],
        &[],
        &[one_step("wf", "api.charge")],
    ));
    shareable(&engine);
    let mut handles = Vec::new();
    for i in 0..20 {
        let engine = engine.clone();
        handles.push(tokio::spawn(send(async move {
            engine.start_run("wf", &format!("r{i}"), &engine::doc!({"email": "a", "amount": i})).await.unwrap()
        })));
    }
    for handle in handles {
        assert_eq!(handle.await.unwrap(), RunStatus::Succeeded);
    }
    assert_eq!(connector.effects().len(), 20);
    drop(send(engine.resolve("r0", Resolution::Abort, "x")));
    drop(send(engine.replay("r0", &engine::doc!({}))));
    drop(send(engine.resume_unfinished()));
}

/// An answer that the step applied whose output cannot be stored pauses the run with a reason a person can act on: in
/// the engine's words (not the parser's advice to the sender, nor an offset into text never stored), with the answer
/// itself, from which the person marks the step done; that applies once, with no call sent again (QA, stop 48).
#[tokio::test]
async fn an_unstorable_answer_pauses_with_the_answer_to_mark_done_from() {
    for (name, ledger) in ledgers() {
        for (spec, script, what) in [
            (keyed("charge", 60_000, false), Fate::ApplyUnstorable, "the API answered that the step applied"),
            (lookup("charge", 0), Fate::ApplyUnstorableThenTimeout, "a lookup found the record the step created"),
        ] {
            let api = Scripted::new("api", vec![spec], &[script]);
            let e = engine(
                config("w1"),
                ledger.clone(),
                Recorder::new(),
                &[api.clone()],
                &[],
                &[one_step("wf", "api.charge")],
            );
            let run_id = format!("r-{what}");
            assert_eq!(e.start_run("wf", &run_id, &engine::doc!({"amount": 5})).await.unwrap(), RunStatus::Paused);
            let reason = ledger.get_run(&run_id).unwrap().unwrap().reason.unwrap();
            let says = format!(
                "[unstorable] {what}, but its output cannot be stored (it holds the number 18446744073709551615, \
                 which no IEEE-754 double holds exactly); the answer: {{"
            );
            assert!(reason.contains(&says), "{name}: {reason}");
            assert!(reason.contains(r#""ref":18446744073709551615"#), "{name}: {reason}");
            assert!(reason.contains("a retry would send the step again"), "{name}: {reason}");
            assert!(!reason.contains("send it as a string") && !reason.contains("at byte"), "{name}: {reason}");
            let calls = api.calls().len();
            // A person's retry would send the step again (a lookup action's without the lookup that found it): refused,
            // nothing filed. An older build's, filed unchecked, pauses the run again. (Carried since stop 47.)
            let refused = e.resolve(&run_id, Resolution::Retry, "pat").await.unwrap_err();
            assert!(matches!(refused, Error::RetryWouldResend { .. }), "{name}: {refused:?}");
            assert!(refused.to_string().contains("a retry would send it again"), "{name}: {refused}");
            assert_eq!(ledger.resolutions(&run_id).unwrap(), vec![], "{name}");
            let key = paused_key(&reason).unwrap();
            let older = ResolutionRecord {
                run_id: run_id.clone(),
                key,
                resolution: Resolution::Retry,
                by: "pat".into(),
                at_ms: ledger.get(&key).unwrap().unwrap().last_attempt_ms + 1,
                seen: None,
            };
            ledger.record_resolution(&older, RunStatus::Running, None).unwrap();
            assert_eq!(e.drive(&run_id).await.unwrap(), RunStatus::Paused, "{name}");
            let again = ledger.get_run(&run_id).unwrap().unwrap().reason.unwrap();
            assert!(again.contains("the decision to retry by pat would send again a step"), "{name}: {again}");
            assert_eq!(api.calls().len(), calls, "{name}: nothing sent again");
            let done = Resolution::MarkDone { output: json!({"id": 1, "ref": "18446744073709551615"}) };
            assert_eq!(e.resolve(&run_id, done, "pat").await.unwrap(), RunStatus::Succeeded, "{name}");
            assert_eq!((api.calls().len(), api.effects().len()), (calls, 1), "{name}: nothing sent again");
        }
    }
}
