//! The ledger contract: one suite of properties, each a function run against every implementation
//! (the in-memory ledger, SQLite `:memory:`, SQLite on a file in a temporary directory, and both SQLite ledgers with
//! their read cache).
//!
//! Errors are compared by their `Debug` text against an expected `Error` value, so a test names the exact error
//! (kind, key, fences, states) and not merely "some error".

mod common;

use engine::key::Key;
use engine::ledger::memory::MemoryLedger;
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{
    Claim, Claimed, Completion, Delivery, Error, Intake, Ledger, Replay, ReplayEntry, Resolution, ResolutionRecord,
    RunRecord, RunStatus, Seen, Status, StepOutcome,
};

/// A ledger under test, plus a way to reopen it (files only) and the temp dir that must outlive it.
struct Fixture {
    ledger: Box<dyn Ledger>,
    reopen: Option<Box<dyn Fn() -> Box<dyn Ledger>>>,
    _dir: Option<tempfile::TempDir>,
}

fn memory() -> Fixture {
    Fixture { ledger: Box::new(MemoryLedger::new()), reopen: None, _dir: None }
}

fn sqlite_memory() -> Fixture {
    let ledger = SqliteLedger::open_in_memory(Options::default()).expect("open :memory:");
    Fixture { ledger: Box::new(ledger), reopen: None, _dir: None }
}

fn sqlite_file() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.sqlite");
    // Group commit on, so the suite also covers reads of uncommitted writes on the same connection.
    let options = Options { group_commit_ops_max: 16, ..Options::default() };
    let ledger = SqliteLedger::open(&path, options.clone()).expect("open file");
    let reopen = move || -> Box<dyn Ledger> { Box::new(SqliteLedger::open(&path, options.clone()).expect("reopen")) };
    Fixture { ledger: Box::new(ledger), reopen: Some(Box::new(reopen)), _dir: Some(dir) }
}

/// SQLite `:memory:` with the read cache: it holds every row, so reads and decisions run on it.
fn sqlite_memory_cached() -> Fixture {
    let ledger =
        SqliteLedger::open_in_memory(Options { cache_entries: 1 << 16, ..Options::default() }).expect("open :memory:");
    Fixture { ledger: Box::new(ledger), reopen: None, _dir: None }
}

/// An exclusive SQLite file with a read cache of four records, so that it fills and empties all the time and most
/// reads fill it from the file: the partial cache's paths.
fn sqlite_file_cached() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("ledger.sqlite");
    let options = Options { group_commit_ops_max: 16, exclusive: true, cache_entries: 4, ..Options::default() };
    let ledger = SqliteLedger::open(&path, options.clone()).expect("open file");
    let reopen = move || -> Box<dyn Ledger> { Box::new(SqliteLedger::open(&path, options.clone()).expect("reopen")) };
    Fixture { ledger: Box::new(ledger), reopen: Some(Box::new(reopen)), _dir: Some(dir) }
}

macro_rules! contract {
    ($($property:ident),* $(,)?) => {
        mod memory {
            $( #[test] fn $property() { super::$property(super::memory()) } )*
        }
        mod sqlite_memory {
            $( #[test] fn $property() { super::$property(super::sqlite_memory()) } )*
        }
        mod sqlite_file {
            $( #[test] fn $property() { super::$property(super::sqlite_file()) } )*
        }
        mod sqlite_memory_cached {
            $( #[test] fn $property() { super::$property(super::sqlite_memory_cached()) } )*
        }
        mod sqlite_file_cached {
            $( #[test] fn $property() { super::$property(super::sqlite_file_cached()) } )*
        }
    };
}

contract!(
    claim_then_complete,
    claim_conflicts,
    a_claim_expecting_a_status_conflicts_when_the_attempt_ended_meanwhile,
    takeover_fences_the_old_owner,
    transitions,
    output_conflict_is_refused,
    plans_are_never_replaced,
    runs,
    intake_deduplicates,
    expire_inbox,
    resolutions,
    a_resolution_must_name_a_person,
    a_decision_is_filed_once_and_only_while_the_run_waits_for_it,
    forget_run_drops_everything_of_the_run,
    reopen_keeps_everything,
    replay_history_keeps_every_replaced_trigger,
    inspect_outcome_lends_status_and_output,
    completion_releases_the_lease,
    a_claim_checks_the_run_its_drive_walks,
    run_steps_lists_a_runs_records_by_their_last_attempt,
    run_plans_lists_a_runs_plans_by_key,
);

// --- helpers ------------------------------------------------------------------------------------------------------

fn key(n: u8) -> Key {
    Key([n; 32])
}

fn claim_of<'a>(key: Key, run_id: &'a str, worker: &'a str, now_ms: u64, expected_fence: u64) -> Claim<'a> {
    Claim {
        key,
        run_id,
        step_id: "step",
        action: "stripe.create_charge",
        inputs_hash: [7; 32],
        worker,
        now_ms,
        lease_ms: 100,
        expected_fence,
        expected_status: None,
        durable: false,
        walk: None,
    }
}

fn run_of(run_id: &str, status: RunStatus) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        workflow: "wf".into(),
        status,
        trigger: br#"{"a":1}"#.to_vec(),
        reason: None,
        created_ms: 5,
        updated_ms: 5,
        replays: 0,
    }
}

/// Pauses run `run_id` (creating it if needed) at `key`, its reason naming the key as the engine's does, so that a
/// person's decision about it may be filed.
fn paused_at(l: &dyn Ledger, run_id: &str, key: Key) {
    if l.get_run(run_id).unwrap().is_none() {
        l.create_run(run_of(run_id, RunStatus::Running)).unwrap();
    }
    l.set_run_status(run_id, RunStatus::Paused, Some(&format!("payout timed out [key {key}]")), 6).unwrap();
}

fn succeeded(output: &str) -> Completion {
    Completion::Succeeded { output: output.as_bytes().to_vec() }
}

fn failed() -> Completion {
    Completion::Failed { error: "card declined".to_owned() }
}

fn unknown() -> Completion {
    Completion::Unknown { reason: "timeout".to_owned() }
}

fn granted(result: Result<Claimed, Error>) -> (u64, u32) {
    match result {
        Ok(Claimed::Granted { fence, attempt }) => (fence, attempt),
        other => panic!("expected a granted claim, got {other:?}"),
    }
}

fn assert_err<T: std::fmt::Debug>(result: Result<T, Error>, expected: &Error) {
    match result {
        Err(e) => assert_eq!(format!("{e:?}"), format!("{expected:?}")),
        Ok(v) => panic!("expected {expected:?}, got Ok({v:?})"),
    }
}

// --- properties ---------------------------------------------------------------------------------------------------

fn claim_then_complete(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    assert_eq!(l.get(&k).unwrap(), None);
    assert_eq!(granted(l.claim(&claim_of(k, "run-1", "w1", 10, 0))), (1, 1));
    let r = l.get(&k).unwrap().expect("intent recorded");
    assert_eq!(
        (r.status, r.run_id.as_str(), r.step_id.as_str(), r.owner.as_str(), r.fence, r.attempt_count),
        (Status::Started, "run-1", "step", "w1", 1, 1)
    );
    assert_eq!((r.lease_expiry_ms, r.last_attempt_ms, r.inputs_hash), (110, 10, [7; 32]));
    assert_eq!((r.action.as_str(), r.output.clone(), r.error.clone()), ("stripe.create_charge", None, None));
    l.renew(&k, 1, 500).unwrap();
    assert_eq!(l.get(&k).unwrap().unwrap().lease_expiry_ms, 500);
    l.complete(&k, 1, succeeded("{\"id\":\"ch_1\"}"), 20).unwrap();
    let r = l.get(&k).unwrap().unwrap();
    assert_eq!((r.status, r.output.as_deref()), (Status::Succeeded, Some(&b"{\"id\":\"ch_1\"}"[..])));
    // The same output again is an idempotent Ok, also from a stale fence (nothing is written).
    l.complete(&k, 1, succeeded("{\"id\":\"ch_1\"}"), 30).unwrap();
    l.complete(&k, 0, succeeded("{\"id\":\"ch_1\"}"), 30).unwrap();
    assert_eq!(l.get(&k).unwrap().unwrap(), r);
    // `inspect` lends the same record, and `None` for a key with none.
    let mut lent = None;
    l.inspect(&k, &mut |record| lent = record.cloned()).unwrap();
    assert_eq!(lent, Some(r));
    let mut none_for_unknown = false;
    l.inspect(&key(99), &mut |record| none_for_unknown = record.is_none()).unwrap();
    assert!(none_for_unknown);
    // A durable claim behaves the same.
    let mut durable = claim_of(key(2), "run-1", "w1", 10, 0);
    durable.durable = true;
    assert_eq!(granted(l.claim(&durable)), (1, 1));
    l.flush().unwrap();
}

fn claim_conflicts(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    granted(l.claim(&claim_of(k, "run-1", "w1", 0, 0)));
    let current = l.get(&k).unwrap().unwrap();
    // (claim, what happens)
    let cases: Vec<(Claim<'_>, Option<Error>)> = vec![
        // Another worker, lease unexpired (expiry 100 > now 99).
        (claim_of(k, "run-1", "w2", 99, 1), None),
        // The same worker, lease unexpired: also refused, a lease is never held twice.
        (claim_of(k, "run-1", "w1", 50, 1), None),
        // Read nothing, but the record exists.
        (claim_of(k, "run-1", "w2", 500, 0), None),
        // A fence from the future.
        (claim_of(k, "run-1", "w2", 500, 9), None),
        // Read a record that is not there (forgotten): its decision is void.
        (claim_of(key(9), "run-1", "w2", 500, 3), Some(Error::NotFound { what: String::new() })),
    ];
    for (claim, expected) in cases {
        match (l.claim(&claim), expected) {
            (Ok(Claimed::Conflict(seen)), None) => assert_eq!(*seen, current, "conflict shows the record as stored"),
            (Err(Error::NotFound { .. }), Some(Error::NotFound { .. })) => {}
            (other, expected) => panic!("claim {claim:?}: expected {expected:?} (None = conflict), got {other:?}"),
        }
    }
    assert_eq!(l.get(&k).unwrap().unwrap(), current, "conflicting claims change nothing");
    assert_eq!(l.get(&key(9)).unwrap(), None);
}

/// An attempt's answer lands under the fence it was claimed with: a claim decided on the record `Started` (its lease
/// expired) must not be granted over that attempt's `Failed` end, which has the same fence. Expecting the status it
/// ended in, or no status, the same claim is granted.
fn a_claim_expecting_a_status_conflicts_when_the_attempt_ended_meanwhile(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    assert_eq!(granted(l.claim(&claim_of(k, "run-1", "w1", 0, 0))), (1, 1));
    let on_started = Claim { expected_status: Some(Status::Started), ..claim_of(k, "run-1", "w2", 500, 1) };
    l.complete(&k, 1, failed(), 200).unwrap();
    let ended = l.get(&k).unwrap().unwrap();
    match l.claim(&on_started) {
        Ok(Claimed::Conflict(seen)) => assert_eq!(*seen, ended, "the conflict shows the failure"),
        other => panic!("a claim decided on `started` over the attempt's failure: {other:?}"),
    }
    assert_eq!(l.get(&k).unwrap().unwrap(), ended, "a conflicting claim changes nothing");
    // A status expected on a record that does not exist is a claim of a new key as any other.
    let fresh = Claim { expected_status: Some(Status::Failed), ..claim_of(key(2), "run-1", "w2", 500, 0) };
    assert_eq!(granted(l.claim(&fresh)), (1, 1));
    let on_failed = Claim { expected_status: Some(Status::Failed), ..claim_of(k, "run-1", "w2", 500, 1) };
    assert_eq!(granted(l.claim(&on_failed)), (2, 2));
    assert_eq!(granted(l.claim(&claim_of(k, "run-1", "w1", 700, 2))), (3, 3), "no status expected: the fence decides");
}

fn takeover_fences_the_old_owner(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    assert_eq!(granted(l.claim(&claim_of(k, "run-1", "old", 0, 0))), (1, 1));
    // The lease expires at 100: at 100 the key can be taken over.
    assert_eq!(granted(l.claim(&claim_of(k, "run-1", "new", 100, 1))), (2, 2));
    let r = l.get(&k).unwrap().unwrap();
    assert_eq!((r.owner.as_str(), r.fence, r.attempt_count, r.status), ("new", 2, 2, Status::Started));
    let fenced = Error::Fenced { key: k, presented: 1, current: 2 };
    assert_err(l.complete(&k, 1, succeeded("x"), 150), &fenced);
    assert_err(l.complete(&k, 1, failed(), 150), &fenced);
    assert_err(l.complete(&k, 1, unknown(), 150), &fenced);
    assert_err(l.renew(&k, 1, 1_000), &fenced);
    assert_err(l.complete(&k, 3, failed(), 150), &Error::Fenced { key: k, presented: 3, current: 2 });
    assert_eq!(l.get(&k).unwrap().unwrap(), r, "refused writes change nothing");
    l.complete(&k, 2, succeeded("y"), 160).unwrap();
    // Once succeeded, the old owner's non-success writes are still fenced.
    assert_err(l.complete(&k, 1, failed(), 170), &fenced);
}

/// The state a record is brought into before an operation.
#[derive(Debug, Clone, Copy)]
enum Setup {
    Started,
    Failed,
    Unknown,
    Succeeded,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Succeed,
    Fail,
    Unknown,
    Claim,
    Renew,
}

/// The status after the operation, or the (from, to) of the `InvalidTransition` it is refused with.
type Expected = Result<Status, (Status, Status)>;

fn transitions(f: Fixture) {
    let l = &*f.ledger;
    use Status as S;
    // (state, operation, Ok(status after) or Err((from, to)) of InvalidTransition)
    let cases: &[(Setup, Op, Expected)] = &[
        (Setup::Started, Op::Succeed, Ok(S::Succeeded)),
        (Setup::Started, Op::Fail, Ok(S::Failed)),
        (Setup::Started, Op::Unknown, Ok(S::Unknown)),
        (Setup::Started, Op::Renew, Ok(S::Started)),
        (Setup::Failed, Op::Succeed, Ok(S::Succeeded)),
        (Setup::Failed, Op::Fail, Err((S::Failed, S::Failed))),
        (Setup::Failed, Op::Unknown, Err((S::Failed, S::Unknown))),
        (Setup::Failed, Op::Claim, Ok(S::Started)),
        (Setup::Failed, Op::Renew, Err((S::Failed, S::Started))),
        (Setup::Unknown, Op::Succeed, Ok(S::Succeeded)),
        (Setup::Unknown, Op::Fail, Err((S::Unknown, S::Failed))),
        (Setup::Unknown, Op::Unknown, Err((S::Unknown, S::Unknown))),
        (Setup::Unknown, Op::Claim, Ok(S::Started)),
        (Setup::Unknown, Op::Renew, Err((S::Unknown, S::Started))),
        (Setup::Succeeded, Op::Fail, Err((S::Succeeded, S::Failed))),
        (Setup::Succeeded, Op::Unknown, Err((S::Succeeded, S::Unknown))),
        (Setup::Succeeded, Op::Claim, Err((S::Succeeded, S::Started))),
        (Setup::Succeeded, Op::Renew, Err((S::Succeeded, S::Started))),
    ];
    for (i, &(setup, op, expected)) in cases.iter().enumerate() {
        let k = key(100 + i as u8);
        let run_id = format!("run-{i}");
        granted(l.claim(&claim_of(k, &run_id, "w", 0, 0)));
        match setup {
            Setup::Started => {}
            Setup::Failed => l.complete(&k, 1, failed(), 1).unwrap(),
            Setup::Unknown => l.complete(&k, 1, unknown(), 1).unwrap(),
            Setup::Succeeded => l.complete(&k, 1, succeeded("out"), 1).unwrap(),
        }
        let before = l.get(&k).unwrap().unwrap();
        let result = match op {
            Op::Succeed => l.complete(&k, 1, succeeded("out"), 2),
            Op::Fail => l.complete(&k, 1, failed(), 2),
            Op::Unknown => l.complete(&k, 1, unknown(), 2),
            Op::Renew => l.renew(&k, 1, 1_000),
            Op::Claim => l
                .claim(&claim_of(k, &run_id, "w2", 2, 1))
                .map(|c| assert_eq!(c, Claimed::Granted { fence: 2, attempt: 2 })),
        };
        let after = l.get(&k).unwrap().unwrap();
        match expected {
            Ok(status) => {
                result.unwrap_or_else(|e| panic!("case {i} {setup:?} {op:?}: {e}"));
                assert_eq!(after.status, status, "case {i} {setup:?} {op:?}");
            }
            Err((from, to)) => {
                assert_err(result, &Error::InvalidTransition { key: k, from, to });
                assert_eq!(after, before, "case {i}: a refused transition changes nothing");
            }
        }
        match (op, expected) {
            (Op::Fail, Ok(_)) => assert_eq!(after.error.as_deref(), Some("card declined")),
            (Op::Unknown, Ok(_)) => assert_eq!(after.error.as_deref(), Some("timeout")),
            (Op::Succeed, Ok(_)) => {
                assert_eq!((after.output.as_deref(), after.error.as_deref()), (Some(&b"out"[..]), None))
            }
            (Op::Claim, Ok(_)) => {
                assert_eq!((after.output.as_deref(), after.error.as_deref(), after.owner.as_str()), (None, None, "w2"))
            }
            _ => {}
        }
    }
    // Writes to a key with no record.
    let absent = key(250);
    assert!(matches!(l.complete(&absent, 1, succeeded("o"), 1), Err(Error::NotFound { .. })));
    assert!(matches!(l.renew(&absent, 1, 1), Err(Error::NotFound { .. })));
}

fn output_conflict_is_refused(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    granted(l.claim(&claim_of(k, "run-1", "w", 0, 0)));
    l.complete(&k, 1, succeeded("first"), 1).unwrap();
    let conflict = Error::OutputConflict { key: k };
    assert_err(l.complete(&k, 1, succeeded("second"), 2), &conflict);
    // A stale owner is fenced instead: the owner that took the key over may have adopted the same effect through a
    // lookup, whose answer is shaped differently. Still never overwritten.
    assert_err(l.complete(&k, 0, succeeded("second"), 2), &Error::Fenced { key: k, presented: 0, current: 1 });
    assert_eq!(l.get(&k).unwrap().unwrap().output.as_deref(), Some(&b"first"[..]), "never overwritten");
}

fn plans_are_never_replaced(f: Fixture) {
    let l = &*f.ledger;
    let k = key(1);
    assert_eq!(l.get_plan(&k).unwrap(), None);
    assert_eq!(l.record_plan("run-1", &k, b"plan-a", 1).unwrap(), b"plan-a");
    assert_eq!(l.record_plan("run-1", &k, b"plan-b", 2).unwrap(), b"plan-a", "the earlier plan stays in force");
    assert_eq!(l.record_plan("run-2", &k, b"plan-c", 3).unwrap(), b"plan-a", "whichever run asks");
    assert_eq!(l.get_plan(&k).unwrap().as_deref(), Some(&b"plan-a"[..]));
    assert_eq!(l.record_plan("run-1", &key(2), b"plan-d", 3).unwrap(), b"plan-d");
    assert_eq!(l.get_plan(&key(2)).unwrap().as_deref(), Some(&b"plan-d"[..]));
}

fn runs(f: Fixture) {
    let l = &*f.ledger;
    assert_eq!(l.get_run("r1").unwrap(), None);
    // Created out of order, to check the listings are sorted.
    for (id, status) in [
        ("r3", RunStatus::Running),
        ("r1", RunStatus::Pending),
        ("r5", RunStatus::Paused),
        ("r2", RunStatus::Succeeded),
        ("r4", RunStatus::Pending),
    ] {
        assert!(l.create_run(run_of(id, status)).unwrap());
    }
    assert!(!l.create_run(run_of("r1", RunStatus::Failed)).unwrap(), "an existing run is kept");
    assert_eq!(l.get_run("r1").unwrap(), Some(run_of("r1", RunStatus::Pending)));
    let mut lent = None;
    l.inspect_run("r1", &mut |run| lent = run.cloned()).unwrap();
    assert_eq!(lent, Some(run_of("r1", RunStatus::Pending)));
    let mut none_for_unknown = false;
    l.inspect_run("nope", &mut |run| none_for_unknown = run.is_none()).unwrap();
    assert!(none_for_unknown);
    assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r3", "r4"]);
    assert_eq!(l.paused_runs().unwrap(), ["r5"]);
    l.set_run_status("r4", RunStatus::Paused, Some("at-most-once payout indeterminate"), 50).unwrap();
    l.set_run_status("r3", RunStatus::Succeeded, None, 51).unwrap();
    l.set_run_status("r5", RunStatus::Running, None, 52).unwrap();
    l.set_run_status("r1", RunStatus::Running, None, 53).unwrap();
    assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r5"]);
    assert_eq!(l.paused_runs().unwrap(), ["r4"]);
    // A finished run walked again (an edited replay) is unfinished once more, and a paused run that fails is in
    // neither listing; a run that does not exist is not found, whatever the status asked for.
    l.set_run_status("r2", RunStatus::Running, None, 54).unwrap();
    l.set_run_status("r2", RunStatus::Pending, None, 55).unwrap();
    assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r2", "r5"]);
    l.set_run_status("r2", RunStatus::Paused, Some("a person looks"), 56).unwrap();
    l.set_run_status("r2", RunStatus::Failed, Some("aborted"), 57).unwrap();
    assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r5"]);
    assert_eq!(l.paused_runs().unwrap(), ["r4"]);
    for status in [RunStatus::Running, RunStatus::Failed] {
        assert!(matches!(l.set_run_status("nope", status, None, 58), Err(Error::NotFound { .. })), "{status:?}");
    }
    let r4 = l.get_run("r4").unwrap().unwrap();
    assert_eq!(
        (r4.status, r4.reason.as_deref(), r4.created_ms, r4.updated_ms),
        (RunStatus::Paused, Some("at-most-once payout indeterminate"), 5, 50)
    );
    assert_eq!(r4.trigger, br#"{"a":1}"#);
    assert_eq!(l.run_status("r4").unwrap(), Some(RunStatus::Paused));
    assert_eq!(l.run_status("r5").unwrap(), Some(RunStatus::Running));
    assert_eq!(l.run_status("nope").unwrap(), None);
    assert!(matches!(l.set_run_status("nope", RunStatus::Running, None, 1), Err(Error::NotFound { .. })));
}

fn intake_deduplicates(f: Fixture) {
    let l = &*f.ledger;
    let delivery = |source, event_id, dedup_key| Delivery { source, event_id, dedup_key, received_ms: 100 };
    // A forged delivery is recorded and must not block the real one with the same event id.
    l.record_rejected("stripe", "evt_1", "bad signature", 90).unwrap();
    // (delivery, run it would start, expected)
    let started = |id: &str| Intake::Started { run_id: id.to_owned() };
    let duplicate = |id: &str| Intake::Duplicate { run_id: id.to_owned() };
    let cases = [
        (delivery("stripe", "evt_1", Some("ch_1/charge.succeeded")), "run-a", started("run-a")),
        (delivery("stripe", "evt_1", None), "run-b", duplicate("run-a")),
        (delivery("stripe", "evt_2", Some("ch_1/charge.succeeded")), "run-c", duplicate("run-a")),
        (delivery("stripe", "evt_3", Some("ch_2/charge.succeeded")), "run-d", started("run-d")),
        // The same event id from another source is another event.
        (delivery("hubspot", "evt_1", Some("ch_1/charge.succeeded")), "run-e", started("run-e")),
        (delivery("stripe", "evt_4", None), "run-f", started("run-f")),
        (delivery("stripe", "evt_4", None), "run-f", duplicate("run-f")),
    ];
    for (i, (d, run_id, expected)) in cases.iter().enumerate() {
        assert_eq!(&l.intake(d, run_of(run_id, RunStatus::Pending)).unwrap(), expected, "case {i}");
    }
    // The runs were created in the same transaction; duplicates created none.
    assert_eq!(l.unfinished_runs().unwrap(), ["run-a", "run-d", "run-e", "run-f"]);
}

fn expire_inbox(f: Fixture) {
    let l = &*f.ledger;
    let at = |event_id, received_ms| Delivery { source: "s", event_id, dedup_key: Some(event_id), received_ms };
    assert_eq!(
        l.intake(&at("e1", 10), run_of("r1", RunStatus::Pending)).unwrap(),
        Intake::Started { run_id: "r1".into() }
    );
    assert_eq!(
        l.intake(&at("e2", 20), run_of("r2", RunStatus::Pending)).unwrap(),
        Intake::Started { run_id: "r2".into() }
    );
    l.record_rejected("s", "forged", "unsigned", 15).unwrap();
    assert_eq!(l.expire_inbox(20).unwrap(), 2, "e1 and the rejected row are older than 20; e2 is not");
    assert_eq!(l.expire_inbox(20).unwrap(), 0);
    // e2 is still deduplicated.
    assert_eq!(
        l.intake(&at("e2", 30), run_of("r9", RunStatus::Pending)).unwrap(),
        Intake::Duplicate { run_id: "r2".into() }
    );
    // e1 expired: a late redelivery finds its run (the run id derives from the event) and starts nothing...
    assert_eq!(
        l.intake(&at("e1", 30), run_of("r1", RunStatus::Pending)).unwrap(),
        Intake::Duplicate { run_id: "r1".into() }
    );
    // ...and once the run is forgotten as well, it is new again.
    l.forget_run("r1").unwrap();
    l.expire_inbox(31).unwrap();
    assert_eq!(
        l.intake(&at("e1", 40), run_of("r1", RunStatus::Pending)).unwrap(),
        Intake::Started { run_id: "r1".into() }
    );
}

fn resolutions(f: Fixture) {
    let l = &*f.ledger;
    assert_eq!(l.resolutions("r1").unwrap(), []);
    let records = [
        ResolutionRecord {
            run_id: "r1".into(),
            key: key(1),
            resolution: Resolution::Retry,
            by: "ana".into(),
            at_ms: 9,
            seen: Some(Seen { status: Status::Started, fence: 1 }),
        },
        ResolutionRecord {
            run_id: "r1".into(),
            key: key(2),
            resolution: Resolution::MarkDone { output: serde_json::json!({"id": "po_1", "n": 1.5}) },
            by: "bo".into(),
            at_ms: 3,
            seen: Some(Seen { status: Status::Unknown, fence: 7 }),
        },
        ResolutionRecord {
            run_id: "r2".into(),
            key: key(1),
            resolution: Resolution::Abort,
            by: "cy".into(),
            at_ms: 1,
            seen: None,
        },
    ];
    for r in &records {
        paused_at(l, &r.run_id, r.key);
        l.record_resolution(r, RunStatus::Running, None).unwrap();
    }
    assert_eq!(l.resolutions("r1").unwrap(), records[..2], "in the order recorded");
    assert_eq!(l.resolutions("r2").unwrap(), records[2..]);
}

/// A resolution's `by` is its only record of who decided: an empty or blank one is refused, and nothing is written.
fn a_resolution_must_name_a_person(f: Fixture) {
    let l = &*f.ledger;
    for by in ["", " ", "\t\n", "\u{200b}", "\u{feff}\u{200d}", "\u{3164}", "\u{fe0f}"] {
        let record = ResolutionRecord {
            run_id: "r1".into(),
            key: key(1),
            resolution: Resolution::Abort,
            by: by.into(),
            at_ms: 2,
            seen: None,
        };
        assert_err(
            l.record_resolution(&record, RunStatus::Failed, Some("aborted")),
            &Error::Invalid {
                detail: format!("a resolution of run \"r1\" must name the person deciding (`by` is {by:?})"),
            },
        );
    }
    assert_eq!(l.resolutions("r1").unwrap(), []);
    paused_at(l, "r1", key(1));
    let named = ResolutionRecord {
        run_id: "r1".into(),
        key: key(1),
        resolution: Resolution::Abort,
        by: " ann ".into(),
        at_ms: 2,
        seen: None,
    };
    l.record_resolution(&named, RunStatus::Failed, Some("aborted by ann")).unwrap();
    assert_eq!(l.resolutions("r1").unwrap(), [named]);
}

/// A person's decision is filed only while its run waits for it, and moves the run on in the same write: of two
/// people deciding about one pause, the second is refused (the engine applies the last decision filed, so it would
/// have replaced the first), as is a decision about a pause the run has since left for another.
fn a_decision_is_filed_once_and_only_while_the_run_waits_for_it(f: Fixture) {
    let l = &*f.ledger;
    let decision = |key: Key, resolution: Resolution, by: &str, at_ms: u64| ResolutionRecord {
        run_id: "r1".into(),
        key,
        resolution,
        by: by.into(),
        at_ms,
        seen: None,
    };
    let done = decision(key(1), Resolution::MarkDone { output: serde_json::json!({"id": "msg_1"}) }, "ann", 10);
    assert_err(l.record_resolution(&done, RunStatus::Running, None), &Error::NotFound { what: "run r1".into() });
    paused_at(l, "r1", key(1));
    l.record_resolution(&done, RunStatus::Running, None).unwrap();
    let run = l.get_run("r1").unwrap().unwrap();
    assert_eq!((run.status, run.reason, run.updated_ms), (RunStatus::Running, None, 10));
    assert_eq!(l.unfinished_runs().unwrap(), ["r1"]);
    assert_eq!(l.paused_runs().unwrap(), Vec::<String>::new());
    // Bob decided on the same pause a moment later: refused, nothing written.
    let retry = decision(key(1), Resolution::Retry, "bob", 11);
    assert_err(
        l.record_resolution(&retry, RunStatus::Running, None),
        &Error::Superseded { run_id: "r1".into(), status: RunStatus::Running },
    );
    assert_eq!(l.resolutions("r1").unwrap(), std::slice::from_ref(&done));
    // The run paused again at another step: a decision about the first pause is refused there too.
    paused_at(l, "r1", key(2));
    assert_err(
        l.record_resolution(&retry, RunStatus::Running, None),
        &Error::Superseded { run_id: "r1".into(), status: RunStatus::Paused },
    );
    let abort = decision(key(2), Resolution::Abort, "bob", 12);
    l.record_resolution(&abort, RunStatus::Failed, Some("aborted by bob")).unwrap();
    let run = l.get_run("r1").unwrap().unwrap();
    assert_eq!((run.status, run.reason.as_deref()), (RunStatus::Failed, Some("aborted by bob")));
    assert_eq!(l.unfinished_runs().unwrap(), Vec::<String>::new());
    assert_eq!(l.resolutions("r1").unwrap(), [done, abort]);
    // A name with a line break would forge lines wherever decisions are listed.
    paused_at(l, "r2", key(3));
    let forged = ResolutionRecord { run_id: "r2".into(), ..decision(key(3), Resolution::Retry, "ann\nbob", 13) };
    assert!(matches!(l.record_resolution(&forged, RunStatus::Running, None), Err(Error::Invalid { .. })));
    assert_eq!(l.run_status("r2").unwrap(), Some(RunStatus::Paused));
}

fn forget_run_drops_everything_of_the_run(f: Fixture) {
    let l = &*f.ledger;
    for (run_id, first) in [("gone", 1u8), ("kept", 101u8)] {
        l.create_run(run_of(run_id, RunStatus::Succeeded)).unwrap();
        assert_eq!(l.begin_replay(run_id, br#"{"a":2}"#, 1).unwrap(), Replay::Begun);
        for i in 0..20u8 {
            let k = key(first + i);
            granted(l.claim(&claim_of(k, run_id, "w", 0, 0)));
            l.complete(&k, 1, succeeded("o"), 1).unwrap();
        }
        // A plan on a claimed step key, a plan of a key with no step record, a plan recorded before the step's claim.
        l.record_plan(run_id, &key(first), b"p", 1).unwrap();
        l.record_plan(run_id, &key(first + 50), b"p", 1).unwrap();
        l.record_plan(run_id, &key(first + 60), b"p", 1).unwrap();
        granted(l.claim(&claim_of(key(first + 60), run_id, "w", 0, 0)));
        paused_at(l, run_id, key(first));
        let retry = ResolutionRecord {
            run_id: run_id.into(),
            key: key(first),
            resolution: Resolution::Retry,
            by: "p".into(),
            at_ms: 1,
            seen: None,
        };
        l.record_resolution(&retry, RunStatus::Running, None).unwrap();
    }
    l.forget_run("gone").unwrap();
    l.forget_run("never-existed").unwrap();
    for i in 0..20u8 {
        assert_eq!(l.get(&key(1 + i)).unwrap(), None);
        assert!(l.get(&key(101 + i)).unwrap().is_some());
    }
    for offset in [0, 50, 60] {
        assert_eq!(l.get_plan(&key(1 + offset)).unwrap(), None, "plan at offset {offset} forgotten");
        assert!(l.get_plan(&key(101 + offset)).unwrap().is_some());
    }
    assert_eq!(l.get(&key(61)).unwrap(), None);
    assert_eq!(l.get_run("gone").unwrap(), None);
    assert_eq!(l.resolutions("gone").unwrap(), []);
    assert_eq!(l.replay_history("gone").unwrap(), []);
    assert!(l.get_run("kept").unwrap().is_some());
    assert_eq!(l.resolutions("kept").unwrap().len(), 1);
    assert_eq!(l.replay_history("kept").unwrap().len(), 1);
    // A forgotten key starts afresh.
    assert_eq!(granted(l.claim(&claim_of(key(1), "gone", "w", 5, 0))), (1, 1));
}

fn reopen_keeps_everything(f: Fixture) {
    let Some(reopen) = &f.reopen else {
        return; // Nothing to reopen for in-memory ledgers; the property is about files.
    };
    let l = &*f.ledger;
    let k = key(1);
    granted(l.claim(&claim_of(k, "run-1", "w", 0, 0)));
    l.complete(&k, 1, succeeded("out"), 1).unwrap();
    granted(l.claim(&claim_of(key(2), "run-1", "w", 0, 0)));
    l.record_plan("run-1", &k, b"plan", 2).unwrap();
    paused_at(l, "run-1", k);
    let d = Delivery { source: "s", event_id: "e", dedup_key: None, received_ms: 3 };
    l.intake(&d, run_of("run-2", RunStatus::Pending)).unwrap();
    let res = ResolutionRecord {
        run_id: "run-1".into(),
        key: k,
        resolution: Resolution::Abort,
        by: "p".into(),
        at_ms: 4,
        seen: Some(Seen { status: Status::Failed, fence: u64::MAX >> 1 }),
    };
    l.record_resolution(&res, RunStatus::Failed, Some("aborted by p")).unwrap();
    paused_at(l, "run-4", key(2));
    l.flush().unwrap();
    let before =
        (l.get(&k).unwrap(), l.get(&key(2)).unwrap(), l.get_run("run-1").unwrap(), l.get_run("run-2").unwrap());
    drop(f.ledger);
    let l = reopen();
    let after = (l.get(&k).unwrap(), l.get(&key(2)).unwrap(), l.get_run("run-1").unwrap(), l.get_run("run-2").unwrap());
    assert_eq!(before, after);
    assert_eq!(l.get_plan(&k).unwrap().as_deref(), Some(&b"plan"[..]));
    assert_eq!(
        l.intake(&d, run_of("run-3", RunStatus::Pending)).unwrap(),
        Intake::Duplicate { run_id: "run-2".into() }
    );
    assert_eq!(l.resolutions("run-1").unwrap(), [res]);
    assert_eq!(l.get_run("run-1").unwrap().map(|r| r.status), Some(RunStatus::Failed));
    assert_eq!(l.paused_runs().unwrap(), ["run-4"]);
    assert_eq!(l.unfinished_runs().unwrap(), ["run-2"]);
}

fn history_entry(replay: u32, replaced_trigger: &[u8], replayed_ms: u64) -> ReplayEntry {
    ReplayEntry { replay, replaced_trigger: replaced_trigger.to_vec(), replayed_ms }
}

/// Each replay that begins files the trigger it replaced in the run's history, under its number and time, oldest
/// first; a refused one files nothing. The history is the run's own, outlives a reopen, and goes with the run.
fn replay_history_keeps_every_replaced_trigger(f: Fixture) {
    let Fixture { ledger, reopen, _dir } = f;
    let l = &*ledger;
    assert_eq!(l.replay_history("r1").unwrap(), [], "an unknown run has none");
    l.create_run(run_of("r1", RunStatus::Succeeded)).unwrap();
    l.create_run(run_of("r2", RunStatus::Failed)).unwrap();
    assert_eq!(l.replay_history("r1").unwrap(), [], "a run never replayed has none");
    assert_eq!(l.begin_replay("r1", br#"{"a":2}"#, 10).unwrap(), Replay::Begun);
    let running = Replay::Refused { status: RunStatus::Running, reason: None };
    assert_eq!(l.begin_replay("r1", br#"{"a":9}"#, 11).unwrap(), running);
    assert!(l.finish_drive("r1", 1, RunStatus::Failed, Some("declined"), 12).unwrap());
    assert_eq!(l.begin_replay("r1", br#"{"a":3}"#, 13).unwrap(), Replay::Begun);
    assert!(l.finish_drive("r1", 2, RunStatus::Paused, Some("a person looks"), 14).unwrap());
    let paused = Replay::Refused { status: RunStatus::Paused, reason: Some("a person looks".into()) };
    assert_eq!(l.begin_replay("r1", br#"{"a":9}"#, 15).unwrap(), paused);
    assert_eq!(l.begin_replay("r2", br#"{"b":1}"#, 16).unwrap(), Replay::Begun);
    let r1 = [history_entry(1, br#"{"a":1}"#, 10), history_entry(2, br#"{"a":2}"#, 13)];
    let r2 = [history_entry(1, br#"{"a":1}"#, 16)];
    assert_eq!(l.replay_history("r1").unwrap(), r1);
    assert_eq!(l.replay_history("r2").unwrap(), r2);
    let run = l.get_run("r1").unwrap().unwrap();
    assert_eq!((run.trigger.as_slice(), run.replays), (&br#"{"a":3}"#[..], 2), "the last edit is the run's trigger");
    let ledger = match reopen {
        Some(reopen) => {
            l.flush().unwrap();
            drop(ledger);
            reopen()
        }
        None => ledger,
    };
    let l = &*ledger;
    assert_eq!(l.replay_history("r1").unwrap(), r1);
    l.forget_run("r1").unwrap();
    assert_eq!(l.replay_history("r1").unwrap(), []);
    assert_eq!(l.replay_history("r2").unwrap(), r2, "another run's history stays");
    // A run made again under a forgotten id starts a history of its own.
    l.create_run(run_of("r1", RunStatus::Succeeded)).unwrap();
    assert_eq!(l.begin_replay("r1", br#"{"a":4}"#, 20).unwrap(), Replay::Begun);
    assert_eq!(l.replay_history("r1").unwrap(), [history_entry(1, br#"{"a":1}"#, 20)]);
}

// --- SQLite files only --------------------------------------------------------------------------------------------

mod sqlite_file_only {
    use super::*;

    fn open(path: &std::path::Path) -> Result<SqliteLedger, Error> {
        SqliteLedger::open(path, Options::default())
    }

    /// A new ledger whose directory is not there is refused naming the directory (SQLite says only "unable to open
    /// database file"), and no directory is made.
    #[test]
    fn a_new_ledger_in_a_missing_directory_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-dir");
        let Err(Error::Storage(message)) = open(&missing.join("flow.db")) else {
            panic!("a ledger opened in a directory that does not exist")
        };
        let expected = format!("cannot create: its directory {} does not exist", missing.display());
        assert!(message.contains(&expected), "{message}");
        assert!(!missing.exists());
    }

    #[test]
    fn garbage_bytes_are_corrupt_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let garbage: Vec<u8> = (0..8192u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(&path, &garbage).unwrap();
        match open(&path) {
            Err(Error::Corrupt { detail }) => assert!(detail.contains("ledger.sqlite"), "names the file: {detail}"),
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), garbage, "never silently recreated");
    }

    #[test]
    fn a_database_that_is_not_a_ledger_is_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.sqlite");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE customers (id INTEGER PRIMARY KEY); INSERT INTO customers VALUES (1);")
            .unwrap();
        drop(conn);
        assert!(matches!(open(&path), Err(Error::Corrupt { .. })));
        let conn = rusqlite::Connection::open(&path).unwrap();
        let n: i64 = conn.query_row("SELECT count(*) FROM customers", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1, "the foreign database is untouched");
    }

    /// Another program's database at a mistyped path, or a ledger of a newer schema, is refused before anything
    /// changes the file: the switch to WAL (the header's bytes 18 and 19 from 1 to 2) used to come first, so the
    /// refusal left the other program's database changed for good. The file stays byte for byte, with nothing beside
    /// it, whether the ledger would be opened shared or exclusive.
    #[test]
    fn a_database_that_is_not_a_ledger_is_refused_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other.sqlite");
        {
            let conn = rusqlite::Connection::open(&other).unwrap();
            conn.execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);").unwrap();
        }
        let newer = dir.path().join("newer.sqlite");
        {
            let conn = rusqlite::Connection::open(&newer).unwrap();
            conn.execute_batch("CREATE TABLE runs (x);").unwrap();
            conn.pragma_update(None, "user_version", engine::ledger::sqlite::SCHEMA_VERSION + 1).unwrap();
        }
        let files = || {
            let mut names: Vec<String> =
                std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            names
        };
        let bytes = |path: &std::path::Path| std::fs::read(path).unwrap();
        let (other_before, newer_before) = (bytes(&other), bytes(&newer));
        assert_eq!((other_before[18], other_before[19]), (1, 1), "a database in rollback-journal mode");
        for options in [Options::default(), Options { exclusive: true, ..Options::default() }] {
            match SqliteLedger::open(&other, options.clone()) {
                Err(Error::Corrupt { detail }) => {
                    assert!(detail.contains("other.sqlite") && detail.contains("not a ledger"), "{detail}")
                }
                other => panic!("expected Corrupt, got {other:?}"),
            }
            assert!(matches!(SqliteLedger::open(&newer, options), Err(Error::SchemaTooNew { .. })));
            assert_eq!(bytes(&other), other_before, "the other program's database is left as it was");
            assert_eq!(bytes(&newer), newer_before);
            assert_eq!(files(), ["newer.sqlite", "other.sqlite"], "nothing made beside them");
        }
        // An empty new file becomes a ledger, as designed.
        let fresh = dir.path().join("fresh.sqlite");
        std::fs::write(&fresh, b"").unwrap();
        let ledger = SqliteLedger::open(&fresh, Options::default()).unwrap();
        assert!(ledger.create_run(run_of("run-1", RunStatus::Running)).unwrap());
    }

    /// A page SQLite finds malformed in a ledger file (its `SQLITE_CORRUPT`, "database disk image is malformed": a
    /// failing disk, a stray write) is [`Error::Damaged`], not [`Error::Corrupt`], which says a file is no ledger: the
    /// file opens, what is whole is read as ever, and a read or a write that meets the damage is refused as damaged,
    /// the write rolled back and the ledger left usable. It used to be "corrupt or not a ledger".
    #[test]
    fn a_damaged_page_is_damaged_not_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        {
            let l = open(&path).unwrap();
            assert!(l.create_run(run_of("run-1", RunStatus::Running)).unwrap());
            granted(l.claim(&claim_of(key(1), "run-1", "w1", 10, 0)));
        }
        crate::common::damage_root_page(&path, "steps");
        let l = open(&path).unwrap();
        assert_eq!(l.run_status("run-1").unwrap(), Some(RunStatus::Running));
        let damaged = |result: Result<(), Error>| match result {
            Err(e @ Error::Damaged { .. }) => {
                let said = e.to_string();
                assert!(said.contains("the ledger file is damaged") && said.contains("malformed"), "{said}");
            }
            other => panic!("expected Damaged, got {other:?}"),
        };
        damaged(l.get(&key(1)).map(drop));
        damaged(l.claim(&claim_of(key(2), "run-1", "w1", 20, 0)).map(drop));
        l.set_run_status("run-1", RunStatus::Paused, Some("waits"), 30).unwrap();
        assert_eq!(l.run_status("run-1").unwrap(), Some(RunStatus::Paused));
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        drop(open(&path).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", engine::ledger::sqlite::SCHEMA_VERSION + 7).unwrap();
        drop(conn);
        match open(&path) {
            Err(Error::SchemaTooNew { found, supported }) => {
                assert_eq!(
                    (found, supported),
                    (engine::ledger::sqlite::SCHEMA_VERSION + 7, engine::ledger::sqlite::SCHEMA_VERSION)
                )
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        }
    }

    /// Workers deployed together open a fresh file at once: every one opens it, and it is migrated once. (Each used
    /// to read the version, then apply the same migration: "table steps already exists".)
    #[test]
    fn workers_opening_a_fresh_file_at_once_all_open_it() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("ledger.sqlite");
            let opened: Vec<Result<(), Error>> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..4)
                    .map(|_| scope.spawn(|| open(&path).map(|l| l.run_status("r").map(drop)).and_then(|r| r)))
                    .collect();
                workers.into_iter().map(|w| w.join().expect("no worker panicked")).collect()
            });
            for result in opened {
                if let Err(e) = result {
                    panic!("round {round}: a worker could not open the fresh ledger: {e}");
                }
            }
            let conn = rusqlite::Connection::open(&path).unwrap();
            let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
            assert_eq!(version, engine::ledger::sqlite::SCHEMA_VERSION);
        }
    }

    #[test]
    fn a_fresh_file_gets_the_current_schema_and_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        drop(open(&path).unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        let mode: String = conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!((version, mode.as_str()), (engine::ledger::sqlite::SCHEMA_VERSION, "wal"));
    }

    /// A file written by a build of schema version 1 (the runs listed through an index on (status, run id)) is
    /// migrated on open: every run keeps its status, both listings give the same runs, and later changes keep them.
    #[test]
    fn a_version_1_file_is_migrated_and_lists_the_same_runs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(engine::ledger::sqlite::MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        for (id, status) in
            [("r3", "running"), ("r1", "pending"), ("r5", "paused"), ("r2", "succeeded"), ("r6", "failed")]
        {
            conn.execute(
                "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms) \
                 VALUES (?1, 'wf', ?2, X'7b7d', NULL, 1, 2)",
                [id, status],
            )
            .unwrap();
        }
        drop(conn);
        let l = open(&path).unwrap();
        assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r3"]);
        assert_eq!(l.paused_runs().unwrap(), ["r5"]);
        assert_eq!(l.get_run("r2").unwrap().map(|r| r.status), Some(RunStatus::Succeeded));
        l.set_run_status("r1", RunStatus::Running, None, 3).unwrap();
        l.set_run_status("r3", RunStatus::Succeeded, None, 3).unwrap();
        l.set_run_status("r5", RunStatus::Running, None, 3).unwrap();
        l.set_run_status("r2", RunStatus::Paused, Some("a person looks"), 3).unwrap();
        assert_eq!(l.unfinished_runs().unwrap(), ["r1", "r5"]);
        assert_eq!(l.paused_runs().unwrap(), ["r2"]);
        drop(l);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, engine::ledger::sqlite::SCHEMA_VERSION);
        // Both listings are answered from their partial indexes, not by reading every run.
        for (sql, index) in [
            ("SELECT run_id FROM runs WHERE unfinished = 1 ORDER BY run_id", "runs_unfinished"),
            ("SELECT run_id FROM runs WHERE status = 'paused' ORDER BY run_id", "runs_paused"),
        ] {
            let plan: String =
                conn.query_row(&format!("EXPLAIN QUERY PLAN {sql}"), [], |r| r.get::<_, String>(3)).unwrap();
            assert!(plan.contains(index), "{sql}: {plan}");
        }
    }

    /// A file written by a build of schema version 3 (replays counted, no history) is migrated on open: it gets the
    /// history's table, its runs keep their count, and the history starts with the first replay after: numbered
    /// after the replays it counts, with the trigger the run had.
    #[test]
    fn a_version_3_file_with_a_replayed_run_gets_the_history() {
        use engine::ledger::sqlite::{MIGRATIONS, SCHEMA_VERSION};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            for migration in &MIGRATIONS[..3] {
                conn.execute_batch(migration).unwrap();
            }
            conn.pragma_update(None, "user_version", 3).unwrap();
            conn.execute(
                "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms, unfinished, \
                 replays) VALUES ('r1', 'wf', 'succeeded', X'7b2276223a337d', NULL, 1, 2, NULL, 2)",
                [],
            )
            .unwrap();
        }
        let l = open(&path).unwrap();
        assert_eq!(l.schema_version(), SCHEMA_VERSION);
        let run = l.get_run("r1").unwrap().unwrap();
        assert_eq!((run.replays, run.trigger.as_slice()), (2, &br#"{"v":3}"#[..]));
        assert_eq!(l.replay_history("r1").unwrap(), [], "the replays before version 4 left no entries");
        assert_eq!(l.begin_replay("r1", br#"{"v":4}"#, 7).unwrap(), Replay::Begun);
        assert_eq!(l.replay_history("r1").unwrap(), [history_entry(3, br#"{"v":3}"#, 7)]);
        drop(l);
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info('replays') ORDER BY cid")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(columns, ["run_id", "replay", "trigger", "replayed_ms"]);
    }

    /// The history's entry and the replay are one transaction: when the entry cannot be written (here a row another
    /// connection left under the number the replay would take), the replay does not begin and the run is as it was.
    #[test]
    fn a_replay_whose_history_entry_fails_does_not_begin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let l = open(&path).unwrap();
        l.create_run(run_of("r1", RunStatus::Succeeded)).unwrap();
        let before = l.get_run("r1").unwrap();
        {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.execute("INSERT INTO replays VALUES ('r1', 1, X'7b7d', 3)", []).unwrap();
        }
        let failed = l.begin_replay("r1", br#"{"a":2}"#, 9);
        assert!(matches!(&failed, Err(Error::Storage(e)) if e.contains("UNIQUE")), "{failed:?}");
        assert_eq!(l.get_run("r1").unwrap(), before, "nothing of the replay was written");
        assert_eq!(l.unfinished_runs().unwrap(), Vec::<String>::new());
        assert_eq!(l.replay_history("r1").unwrap(), [history_entry(1, b"{}", 3)]);
    }

    /// A read cache on a file another connection may write would serve stale records: refused, with the reason.
    #[test]
    fn a_cache_on_a_shared_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let err = SqliteLedger::open(&path, Options { cache_entries: 10, ..Options::default() }).unwrap_err();
        assert!(err.to_string().contains("open it exclusive"), "{err}");
        assert!(!path.exists(), "nothing was created");
        let exclusive = Options { cache_entries: 10, exclusive: true, ..Options::default() };
        SqliteLedger::open(&path, exclusive).expect("an exclusive file may cache");
    }

    /// Writes that may wait are lost by a crash unless flushed; durable ones and everything before them are not.
    /// A crash is modelled by leaking the ledger (no `Drop`, so no graceful commit) and copying the files away.
    #[test]
    fn group_commit_keeps_durable_writes_and_everything_before_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let options = Options { group_commit_ops_max: 1_000, ..Options::default() };
        let l = SqliteLedger::open(&path, options.clone()).unwrap();
        granted(l.claim(&claim_of(key(1), "r", "w", 0, 0)));
        let mut durable = claim_of(key(2), "r", "w", 0, 0);
        durable.durable = true;
        granted(l.claim(&durable));
        granted(l.claim(&claim_of(key(3), "r", "w", 0, 0)));
        assert!(l.get(&key(3)).unwrap().is_some(), "reads see the open batch");
        // Snapshot the files as a crash would leave them: key 3 is only in the open transaction.
        let crashed = dir.path().join("crashed.sqlite");
        for suffix in ["", "-wal"] {
            let from = format!("{}{suffix}", path.display());
            if std::path::Path::new(&from).exists() {
                std::fs::copy(&from, format!("{}{suffix}", crashed.display())).unwrap();
            }
        }
        l.flush().unwrap();
        let after_crash = SqliteLedger::open(&crashed, options).unwrap();
        assert!(after_crash.get(&key(1)).unwrap().is_some(), "committed with the durable claim after it");
        assert!(after_crash.get(&key(2)).unwrap().is_some(), "durable");
        assert_eq!(after_crash.get(&key(3)).unwrap(), None, "was waiting in the batch");
        drop(l);
        let reopened = SqliteLedger::open(&path, Options::default()).unwrap();
        assert!(reopened.get(&key(3)).unwrap().is_some(), "flushed");
    }
}

// --- the in-memory ledger only ------------------------------------------------------------------------------------

/// A long simulation forgets finished runs; the in-memory ledger must then hold nothing of them, indexes included.
#[test]
fn memory_forget_run_leaves_no_entry_behind() {
    let l = MemoryLedger::new();
    for run in 0..200u32 {
        let run_id = format!("run-{run}");
        l.create_run(run_of(&run_id, RunStatus::Succeeded)).unwrap();
        assert_eq!(l.begin_replay(&run_id, b"{}", 1).unwrap(), Replay::Begun);
        for step in 0..5u32 {
            let mut bytes = [0u8; 32];
            bytes[..4].copy_from_slice(&run.to_le_bytes());
            bytes[4..8].copy_from_slice(&step.to_le_bytes());
            let k = Key(bytes);
            granted(l.claim(&claim_of(k, &run_id, "w", 0, 0)));
            l.complete(&k, 1, succeeded("o"), 1).unwrap();
            l.record_plan(&run_id, &k, b"p", 1).unwrap();
        }
        let resolution = ResolutionRecord {
            run_id: run_id.clone(),
            key: key(0),
            resolution: Resolution::Abort,
            by: "p".into(),
            at_ms: 1,
            seen: None,
        };
        paused_at(&l, &run_id, key(0));
        l.record_resolution(&resolution, RunStatus::Failed, Some("aborted")).unwrap();
        l.record_plan(&run_id, &key(200), b"p", 1).unwrap();
        assert!(l.entry_count() > 0);
        l.forget_run(&run_id).unwrap();
        assert_eq!(l.entry_count(), 0, "run {run} left entries behind");
    }
}

/// `inspect_outcome` lends what `get` holds: the status, the fence and the output, for every state a key can be in
/// (a key claimed again after a failure too, at fence 2).
fn inspect_outcome_lends_status_and_output(f: Fixture) {
    let l = &*f.ledger;
    let completions =
        [None, Some(succeeded("{\"id\":\"ch_1\"}")), Some(succeeded("")), Some(failed()), Some(unknown())];
    let outcome_of = |k: &Key| {
        let mut lent = None;
        l.inspect_outcome(k, &mut |outcome| {
            lent = Some(outcome.map(|o| (o.status, o.fence, o.output.map(<[u8]>::to_vec))))
        })
        .unwrap();
        lent
    };
    let expected_of = |k: &Key| {
        let record = l.get(k).unwrap().expect("claimed");
        let expected = StepOutcome::of(&record);
        Some(Some((expected.status, expected.fence, expected.output.map(<[u8]>::to_vec))))
    };
    for (i, completion) in completions.into_iter().enumerate() {
        let k = key(i as u8 + 1);
        granted(l.claim(&claim_of(k, "run-1", "w1", 10, 0)));
        if let Some(completion) = completion {
            l.complete(&k, 1, completion, 20).unwrap();
        }
        assert_eq!(outcome_of(&k), expected_of(&k), "completion {i}");
    }
    let again = key(4); // failed above: claimed again under the next fence
    granted(l.claim(&claim_of(again, "run-1", "w2", 30, 1)));
    assert_eq!(outcome_of(&again), Some(Some((Status::Started, 2, None))));
    assert_eq!(outcome_of(&again), expected_of(&again));
    assert_eq!(outcome_of(&key(99)), Some(None), "None for a key with no record");
}

/// Completing an attempt releases its lease to `min(lease, now)`, whatever the lease (a lease past `i64::MAX` too),
/// and a durably claimed key completes like any other.
fn completion_releases_the_lease(f: Fixture) {
    let l = &*f.ledger;
    let cases = [(u64::MAX, 20, 20), (100, 20, 20), (100, 500, 100), (0, 500, 0)];
    for (i, (lease_ms, now_ms, released)) in cases.into_iter().enumerate() {
        let k = key(i as u8 + 1);
        let mut claim = claim_of(k, "run-1", "w1", 0, 0);
        claim.lease_ms = lease_ms;
        claim.durable = i % 2 == 0;
        granted(l.claim(&claim));
        assert_eq!(l.get(&k).unwrap().unwrap().lease_expiry_ms, lease_ms);
        l.complete(&k, 1, failed(), now_ms).unwrap();
        let r = l.get(&k).unwrap().unwrap();
        assert_eq!(
            (r.status, r.lease_expiry_ms, r.error.as_deref()),
            (Status::Failed, released, Some("card declined"))
        );
        // An adoption after the failure: decided on the stored record, the lease only goes down.
        l.complete(&k, 1, succeeded("o"), now_ms + 1).unwrap();
        let r = l.get(&k).unwrap().unwrap();
        assert_eq!((r.status, r.lease_expiry_ms, r.error.as_deref()), (Status::Succeeded, released, None));
    }
    // A stale fence on a started attempt is refused, and nothing changes.
    granted(l.claim(&claim_of(key(50), "run-1", "w1", 0, 0)));
    let before = l.get(&key(50)).unwrap();
    assert_err(l.complete(&key(50), 2, failed(), 5), &Error::Fenced { key: key(50), presented: 2, current: 1 });
    assert_eq!(l.get(&key(50)).unwrap(), before);
}

/// A claim made for a drive ([`Claim::walk`]) is granted only while its run is pending or running under the replay
/// count the drive began with; otherwise it is `Superseded` and writes nothing: not the key's record, not its
/// fence. Decided on the run as it is at the claim, so a decision or a replay filed in between counts.
fn a_claim_checks_the_run_its_drive_walks(f: Fixture) {
    let l = &*f.ledger;
    let walk = |k: Key, run_id: &'static str, replays: u32, expected_fence: u64| {
        let mut claim = claim_of(k, run_id, "w1", 10, expected_fence);
        claim.walk = Some(replays);
        l.claim(&claim)
    };
    // No such run.
    assert_eq!(walk(key(1), "gone", 0, 0).unwrap(), Claimed::Superseded);
    assert!(l.get(&key(1)).unwrap().is_none());
    // Pending and running runs are walked; a fresh key and a taken one are granted.
    l.create_run(run_of("p", RunStatus::Pending)).unwrap();
    assert_eq!(granted(walk(key(2), "p", 0, 0)), (1, 1));
    l.create_run(run_of("r", RunStatus::Running)).unwrap();
    assert_eq!(granted(walk(key(3), "r", 0, 0)), (1, 1));
    l.complete(&key(3), 1, unknown(), 11).unwrap();
    assert_eq!(granted(walk(key(3), "r", 0, 1)), (2, 2));
    // Another replay count: a replay began since the drive did (or the drive is the older one).
    assert_eq!(walk(key(4), "r", 1, 0).unwrap(), Claimed::Superseded);
    assert!(l.get(&key(4)).unwrap().is_none());
    // A run another drive paused, or a person decided, or that ended: nothing written, fresh or taken key.
    l.complete(&key(3), 2, unknown(), 12).unwrap();
    for status in [RunStatus::Paused, RunStatus::Failed, RunStatus::Succeeded] {
        l.set_run_status("r", status, Some("stopped"), 13).unwrap();
        assert_eq!(walk(key(5), "r", 0, 0).unwrap(), Claimed::Superseded, "{status:?}");
        assert!(l.get(&key(5)).unwrap().is_none(), "{status:?}");
        assert_eq!(walk(key(3), "r", 0, 2).unwrap(), Claimed::Superseded, "{status:?}");
        let record = l.get(&key(3)).unwrap().unwrap();
        assert_eq!((record.fence, record.attempt_count, record.status), (2, 2, Status::Unknown), "{status:?}");
    }
    // Without `walk` the run is not looked at (callers outside a drive).
    assert_eq!(granted(l.claim(&claim_of(key(6), "gone", "w1", 10, 0))), (1, 1));
}

/// `run_steps` lists the records of one run, as `get` reads each, ordered by their last attempt and then by key (so
/// both ledgers agree, whatever order they store them in); a key claimed again moves to its new attempt's place.
fn run_steps_lists_a_runs_records_by_their_last_attempt(f: Fixture) {
    let l = &*f.ledger;
    // (key, run, claimed at): key 9 and key 3 tie at 20 ms and come by key; key 7 is claimed again later.
    for (k, run_id, at) in [(7u8, "r", 10u64), (9, "r", 20), (3, "r", 20), (5, "other", 15), (1, "r", 30)] {
        granted(l.claim(&claim_of(key(k), run_id, "w", at, 0)));
    }
    l.complete(&key(9), 1, succeeded("o"), 21).unwrap();
    l.complete(&key(3), 1, failed(), 21).unwrap();
    l.complete(&key(7), 1, unknown(), 11).unwrap();
    let keys = |run_id: &str| -> Vec<u8> { l.run_steps(run_id).unwrap().iter().map(|r| r.key.0[0]).collect() };
    assert_eq!(keys("r"), [7, 3, 9, 1]);
    assert_eq!(keys("other"), [5]);
    assert_eq!(keys("unknown"), Vec::<u8>::new());
    for record in l.run_steps("r").unwrap() {
        assert_eq!(Some(&record), l.get(&record.key).unwrap().as_ref(), "as get reads it");
    }
    // The unknown key 7 is attempted again: it moves after the others. Times are compared as u64, whatever a ledger
    // stores them as (SQLite: bit for bit as i64, so that 2^63 and later read negative).
    granted(l.claim(&claim_of(key(7), "r", "w", 40, 1)));
    assert_eq!(keys("r"), [3, 9, 1, 7]);
    granted(l.claim(&claim_of(key(8), "r", "w", 1 << 63, 0)));
    granted(l.claim(&claim_of(key(6), "r", "w", u64::MAX, 0)));
    assert_eq!(keys("r"), [3, 9, 1, 7, 8, 6]);
    l.forget_run("r").unwrap();
    assert_eq!(keys("r"), Vec::<u8>::new());
    assert_eq!(keys("other"), [5]);
}

/// `run_plans` lists the plans filed under one run with their keys, by key (the first of a key's plans, which is never
/// replaced); forgetting the run drops them.
fn run_plans_lists_a_runs_plans_by_key(f: Fixture) {
    let l = &*f.ledger;
    l.record_plan("r", &key(9), b"p9", 1).unwrap();
    l.record_plan("r", &key(2), b"p2", 1).unwrap();
    l.record_plan("other", &key(5), b"p5", 1).unwrap();
    l.record_plan("r", &key(2), b"again", 2).unwrap();
    assert_eq!(l.run_plans("r").unwrap(), [(key(2), b"p2".to_vec()), (key(9), b"p9".to_vec())]);
    assert_eq!(l.run_plans("other").unwrap(), [(key(5), b"p5".to_vec())]);
    assert_eq!(l.run_plans("unknown").unwrap(), []);
    l.forget_run("r").unwrap();
    assert_eq!(l.run_plans("r").unwrap(), []);
    assert_eq!(l.run_plans("other").unwrap().len(), 1);
}
