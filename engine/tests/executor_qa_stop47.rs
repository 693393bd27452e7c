//! Regression tests from stop 47's QA pass: a stalled first drive, drives a person's decision or a replay
//! superseded, data an older build stored, and a decision's output that cannot be stored. Each test says what went
//! wrong before its fix (or, for noncharacters, what a refusal of them broke, which is why they are accepted).
#![cfg(not(madsim))]

mod common;

use common::hooked::Hooked;
use common::*;
use engine::connector::{ActionSpec, BoxFuture, Connector, GuaranteeClass, LookupOutcome, Outcome, Request};
use engine::doc::Doc;
use engine::executor::{Engine, Planner};
use engine::key::Key;
use engine::ledger::memory::MemoryLedger;
use engine::ledger::{Claim, Claimed, Completion, Ledger, Replay, ReplayEntry, Resolution, RunStatus, Status};
use serde_json::json;
use std::sync::Arc;

// --- stored data an older build accepted: Unicode noncharacters -----------------------------------------------------

/// A run an older build (commit 0e98389) started with a trigger holding U+FFFF, a noncharacter it accepted: its step
/// was claimed and sent, and timed out (the call may have applied). A worker of this build resumes the run.
///
/// The step may have applied, so the run must not end `failed` (a failed run carries no effect, and `Engine::replay`
/// walks a failed run as one whose steps definitely did not apply). With noncharacters refused by the canonical
/// writer (briefly, in stop 47) the key could not be derived any more and the run was failed: keys must stay
/// derivable from what earlier builds stored.
#[tokio::test]
async fn an_in_flight_step_of_a_trigger_an_older_build_accepted_is_not_failed() {
    let ledger = memory_ledger();
    let api = Scripted::new("api", vec![keyed("notify", 86_400_000, false)], &[]);
    let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
    let e = engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "api.notify")]);
    let trigger = json!({"amount": 5, "email": "a\u{FFFF}"});
    // What the older build stored and keyed: noncharacters written as they are, as every build but one commit of
    // stop 47 wrote them.
    let stored = engine::canonical::to_vec(&trigger).unwrap();
    assert_eq!(stored, "{\"amount\":5,\"email\":\"a\u{FFFF}\"}".as_bytes());
    let inputs = stored.clone();
    let key = engine::key::step_key_canonical("r", "only", &inputs);
    assert_eq!(key, engine::key::step_key("r", "only", &trigger).unwrap());
    ledger.create_run(run_record("r", RunStatus::Running, &stored)).unwrap();
    let claim = Claim {
        key,
        run_id: "r",
        step_id: "only",
        action: "api.notify",
        inputs_hash: *blake3::hash(&inputs).as_bytes(),
        worker: "old-build",
        now_ms: 0,
        lease_ms: 1,
        expected_fence: 0,
        expected_status: None,
        durable: false,
        walk: None,
    };
    assert!(matches!(ledger.claim(&claim).unwrap(), Claimed::Granted { fence: 1, attempt: 1 }));
    ledger.complete(&key, 1, Completion::Unknown { reason: "timeout".into() }, 1).unwrap();

    let status = e.drive("r").await.unwrap();
    // The key is derived again as the older build derived it, so the resend goes under the same key (a keyed API
    // replays its first answer) and the step succeeds: nothing is failed that may have applied.
    let record = ledger.get(&key).unwrap().unwrap();
    assert_eq!((status, record.status, record.attempt_count), (RunStatus::Succeeded, Status::Succeeded, 2));
    let calls = api.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].key, key, "resent under the key the older build sent");
}

/// A connector whose every call applies and answers with a document holding U+FFFE (an API echoing a name a user
/// typed, say).
struct AnswersNoncharacter;

impl Connector for AnswersNoncharacter {
    fn name(&self) -> &str {
        "crm"
    }
    fn actions(&self) -> &[ActionSpec] {
        static ACTIONS: std::sync::LazyLock<Vec<ActionSpec>> =
            std::sync::LazyLock::new(|| vec![keyed("create", 86_400_000, false)]);
        &ACTIONS
    }
    fn call<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move { Outcome::Applied(engine::doc!({"id": 7, "name": "Zo\u{FFFE}"})) })
    }
    fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(async move { LookupOutcome::NotFound })
    }
}

/// An API that applies a call and answers with a noncharacter in its answer (valid JSON; the request held none).
/// The step succeeds. With noncharacters refused (briefly, in stop 47) the applied call was recorded `unknown`
/// ("applied, but the output cannot be canonicalised"), resent while attempts remained and the run paused.
#[tokio::test]
async fn an_api_answer_holding_a_noncharacter_turns_an_applied_call_into_a_pause() {
    let ledger = memory_ledger();
    let connectors: [Arc<dyn Connector>; 1] = [Arc::new(AnswersNoncharacter)];
    let workflow = json!({"name": "wf", "steps": [{"id": "only", "action": "crm.create", "inputs": {"a": 1}}]});
    let recorder = Recorder::new();
    let e = engine(config("w1"), ledger.clone(), recorder.clone(), &connectors, &[], &[workflow]);
    let status = e.start_run("wf", "r", &engine::doc!({})).await.unwrap();
    let run = ledger.get_run("r").unwrap().unwrap();
    eprintln!("status {status:?}, reason {:?}\nevents: {:#?}", run.reason, recorder.lines());
    assert_eq!(status, RunStatus::Succeeded, "an applied call whose answer holds U+FFFE: {:?}", run.reason);
}

/// A person marks a paused step done through the engine's API (`Engine::resolve`) with an output that cannot be
/// canonicalised (an integer no double holds). The decision is refused before anything is written, as `flow resolve`
/// refuses such a `--mark-done`, and the other unfinished runs are still resumed. Before: the ledger recorded the
/// decision and set the run running; the drive that applies it failed with `Error::Trigger` ("the trigger cannot
/// be canonicalised", about the person's output), the run stayed `running` for good, and `resume_unfinished`
/// stopped at it on every restart, never resuming the runs sorted after it.
#[tokio::test]
async fn a_mark_done_output_holding_a_noncharacter_does_not_wedge_the_worker() {
    let ledger = memory_ledger();
    let api = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout]);
    let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
    let e = engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "bank.payout")]);
    assert_eq!(e.start_run("wf", "a", &engine::doc!({"amount": 1, "email": "x"})).await.unwrap(), RunStatus::Paused);
    // Another unfinished run, sorted after "a", which a restarted worker must resume.
    ledger.create_run(run_record("b", RunStatus::Pending, br#"{"amount":2,"email":"y"}"#)).unwrap();
    let resolved = e.resolve("a", Resolution::MarkDone { output: json!({"ref": u64::MAX}) }, "pat").await;
    let Err(engine::executor::Error::MarkDoneOutput(_)) = resolved else { panic!("not refused: {resolved:?}") };
    assert!(ledger.resolutions("a").unwrap().is_empty(), "nothing written");
    let resumed = e.resume_unfinished().await;
    let a = ledger.get_run("a").unwrap().unwrap();
    let b = ledger.get_run("b").unwrap().unwrap();
    assert!(
        resumed.as_ref().is_ok_and(|runs| runs.iter().all(|(_, status)| status.is_ok())),
        "one run's resolution stops every later run's resumption: {resumed:?}"
    );
    assert_eq!(a.status, RunStatus::Paused, "run a still waits for a decision it can apply");
    assert_eq!(b.status, RunStatus::Succeeded);
}

// --- a drive that is no longer the run's --------------------------------------------------------------------------

/// Two drives of one pending run (a second dispatch). Drive A reads the run `pending` and stalls just before it sets
/// the run running; meanwhile drive B walked the run into a pause and a person aborted it (here: the run set
/// `failed`, "aborted by pat", as `record_resolution` leaves it). A then wakes.
///
/// A sends nothing and the run stays failed: a first drive sets its run running only while it is still pending under
/// its replay count (`Ledger::finish_drive`). Before: A's unconditional `set_run_status(Running)` wrote the aborted
/// run back to `running`, so every later claim of A passed the walk check: A called the API after the abort, and
/// ended the run `succeeded` over the person's abort.
#[tokio::test]
async fn a_stalled_first_drive_does_not_reopen_an_aborted_run() {
    let inner = memory_ledger();
    let ledger = Hooked::new(inner.clone());
    let api = Scripted::new("api", vec![keyed("notify", 86_400_000, false)], &[]);
    let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
    let e = engine(config("wA"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "api.notify")]);
    inner.create_run(run_record("r", RunStatus::Pending, br#"{"amount":1,"email":"x"}"#)).unwrap();
    *ledger.before_set_running.lock().unwrap() = Some(Box::new(|l: &MemoryLedger| {
        // Drive B: set running, paused; a person aborts.
        l.set_run_status("r", RunStatus::Running, None, 1).unwrap();
        assert!(l.finish_drive("r", 0, RunStatus::Paused, Some("looks odd [key 00]"), 2).unwrap());
        l.set_run_status("r", RunStatus::Failed, Some("aborted by pat"), 3).unwrap();
    }));
    let status = e.drive("r").await.unwrap();
    let run = inner.get_run("r").unwrap().unwrap();
    assert_eq!(
        (api.calls().len(), status, run.status, run.reason.as_deref()),
        (0, RunStatus::Failed, RunStatus::Failed, Some("aborted by pat")),
        "(calls sent after the abort, drive's status, run's status, reason)"
    );
}

/// A drive finishes step one; right then (between two steps) a person's decision fails the run (another worker had
/// paused it). The next step is an agent step.
///
/// No planner call and no plan recorded after the run stopped being the drive's: an agent step checks its run
/// before it asks the planner. With the run checked only in claims, the drive asked the planner (a model call) and
/// recorded a plan for the aborted run before its first write's claim stopped it.
#[tokio::test]
async fn a_superseded_drive_does_not_ask_the_planner() {
    let inner = memory_ledger();
    let ledger = Hooked::new(inner.clone());
    let api = Scripted::new("api", vec![keyed("notify", 86_400_000, false)], &[]);
    let tools = Scripted::new("tools", vec![keyed("act", 86_400_000, false)], &[]);
    let connectors: [Arc<dyn Connector>; 2] = [api.clone(), tools.clone()];
    let planner = FlakyPlanner::new("tools.act", 2);
    let planners: [(&str, Arc<dyn Planner>); 1] = [("model", planner.clone())];
    let workflow = json!({"name": "wf", "steps": [
        {"id": "first", "action": "api.notify", "inputs": {"ticket": "{{trigger.ticket}}"}},
        {"id": "think", "planner": "model", "inputs": {"ticket": "{{trigger.ticket}}"}}
    ]});
    let e: Engine = engine(config("wA"), ledger.clone(), Recorder::new(), &connectors, &planners, &[workflow]);
    *ledger.after_success.lock().unwrap() = Some(Box::new(|l: &MemoryLedger| {
        l.set_run_status("r", RunStatus::Failed, Some("aborted by pat"), 3).unwrap();
    }));
    inner.create_run(run_record("r", RunStatus::Running, br#"{"ticket":"t1"}"#)).unwrap();
    let status = e.drive("r").await.unwrap();
    assert_eq!(status, RunStatus::Failed);
    assert_eq!(tools.calls().len(), 0, "a write was sent after the abort");
    assert_eq!(
        (planner.call_count(), ledger.plans.lock().unwrap().clone()),
        (0, Vec::<String>::new()),
        "the planner was asked, and its plan recorded, for a run aborted before the step began"
    );
}

/// A drive's claim of `key` in run "r" at `expected_fence`, for a drive begun under `walk` replays.
fn walk_claim(key: Key, expected_fence: u64, walk: u32) -> Claim<'static> {
    Claim {
        key,
        run_id: "r",
        step_id: "s",
        action: "a.b",
        inputs_hash: [0; 32],
        worker: "w",
        now_ms: 10,
        lease_ms: 5,
        expected_fence,
        expected_status: None,
        durable: false,
        walk: Some(walk),
    }
}

/// Ledger-level: the memory ledger and SQLite (uncached file, group commit on and off; cached :memory:) agree that
/// a walk claim on a run a replay began since is superseded, also for a key already taken, and that nothing moves.
#[test]
fn a_walk_claim_after_a_replay_is_superseded_in_every_ledger() {
    use engine::ledger::sqlite::{Options, SqliteLedger};
    let dir = tempfile::tempdir().unwrap();
    let mut ledgers: Vec<(&str, Arc<dyn Ledger>)> = vec![("memory", memory_ledger())];
    for (name, group) in [("file-gc0", 0usize), ("file-gc8", 8)] {
        let options = Options { group_commit_ops_max: group, ..Options::default() };
        ledgers.push((name, Arc::new(SqliteLedger::open(&dir.path().join(name), options).unwrap())));
    }
    let cached = Options { cache_entries: 1_000, ..Options::default() };
    ledgers.push(("cached", Arc::new(SqliteLedger::open_in_memory(cached).unwrap())));
    for (name, l) in ledgers {
        l.create_run(run_record("r", RunStatus::Running, b"{}")).unwrap();
        let claim = |k: u8, fence: u64, walk: u32| walk_claim(Key([k; 32]), fence, walk);
        assert!(matches!(l.claim(&claim(1, 0, 0)).unwrap(), Claimed::Granted { .. }), "{name}");
        l.complete(&Key([1; 32]), 1, Completion::Succeeded { output: b"1".to_vec() }, 11).unwrap();
        assert!(l.finish_drive("r", 0, RunStatus::Succeeded, None, 12).unwrap(), "{name}");
        assert_eq!(l.begin_replay("r", br#"{"x":1}"#, 13).unwrap(), Replay::Begun, "{name}");
        // The old drive (walk 0) is superseded; the new one (walk 1) is granted.
        assert_eq!(l.claim(&claim(2, 0, 0)).unwrap(), Claimed::Superseded, "{name}");
        assert_eq!(l.get(&Key([2; 32])).unwrap(), None, "{name}");
        assert!(matches!(l.claim(&claim(2, 0, 1)).unwrap(), Claimed::Granted { .. }), "{name}");
        l.flush().unwrap();
        assert_eq!(
            l.replay_history("r").unwrap(),
            [ReplayEntry { replay: 1, replaced_trigger: b"{}".to_vec(), replayed_ms: 13 }],
            "{name}"
        );
    }
}

#[allow(dead_code)]
fn unused(_: GuaranteeClass, _: Doc) {}

/// Two connections on one ledger file (uncached; the claimant's with group commit off and on): one claims fresh keys
/// for a drive as fast as it can while the other pauses the run. Every claim begun after the pause returned must be
/// superseded, and no key may be recorded by a claim that was answered `Superseded`.
#[test]
fn walk_claims_race_a_pause_from_another_connection() {
    use engine::ledger::sqlite::{Options, SqliteLedger, Synchronous};
    use std::sync::atomic::{AtomicBool, Ordering};
    for group in [0usize, 8] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let options = |g| Options { group_commit_ops_max: g, synchronous: Synchronous::Normal, ..Options::default() };
        let a = SqliteLedger::open(&path, options(group)).unwrap();
        a.create_run(run_record("r", RunStatus::Running, b"{}")).unwrap();
        a.flush().unwrap();
        let b = SqliteLedger::open(&path, options(0)).unwrap();
        let paused = AtomicBool::new(false);
        let results = std::thread::scope(|s| {
            let claimant = s.spawn(|| {
                let mut results = Vec::new();
                let mut after = 0;
                for i in 0..200_000u32 {
                    let after_pause = paused.load(Ordering::SeqCst);
                    after += u32::from(after_pause);
                    if after > 200 {
                        break;
                    }
                    let mut k = [0u8; 32];
                    k[..4].copy_from_slice(&i.to_le_bytes());
                    let claim = walk_claim(Key(k), 0, 0);
                    results.push((Key(k), after_pause, a.claim(&claim).unwrap()));
                }
                a.flush().unwrap();
                results
            });
            std::thread::sleep(std::time::Duration::from_millis(5));
            b.set_run_status("r", RunStatus::Paused, Some("a person looks"), 20).unwrap();
            paused.store(true, Ordering::SeqCst);
            claimant.join().unwrap()
        });
        let granted = results.iter().filter(|r| matches!(r.2, Claimed::Granted { .. })).count();
        let superseded = results.iter().filter(|r| r.2 == Claimed::Superseded).count();
        eprintln!("group {group}: {granted} granted, {superseded} superseded");
        for (key, after_pause, claimed) in &results {
            if *after_pause {
                assert_eq!(*claimed, Claimed::Superseded, "group {group}: a claim begun after the pause was granted");
            }
            let recorded = b.get(key).unwrap().is_some();
            assert_eq!(recorded, matches!(claimed, Claimed::Granted { .. }), "group {group}: {claimed:?}");
        }
    }
}

/// decide.rs: a keyed call refused for good after a timeout pauses at once; a person's Retry then sends again (it
/// must not be re-paused on the same record without a call), and a mark-done completes the step.
#[tokio::test]
async fn a_permanent_refusal_pause_is_resolved_by_retry_and_mark_done() {
    for (resolution, calls_after) in [(Resolution::Retry, 1), (Resolution::MarkDone { output: json!({"id": 9}) }, 0)] {
        let ledger = memory_ledger();
        let api =
            Scripted::new("api", vec![keyed("notify", 86_400_000, false)], &[Fate::TimeoutBefore, Fate::FailPermanent]);
        let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
        let e =
            engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "api.notify")]);
        let status = e.start_run("wf", "r", &engine::doc!({"amount": 1, "email": "x"})).await.unwrap();
        assert_eq!((status, api.calls().len()), (RunStatus::Paused, 2));
        let name = resolution.name();
        let status = e.resolve("r", resolution, "pat").await.unwrap();
        assert_eq!((status, api.calls().len()), (RunStatus::Succeeded, 2 + calls_after), "{name}");
    }
}
