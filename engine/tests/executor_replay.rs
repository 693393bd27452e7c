//! `Engine::replay` as one transaction with the ledger: the edited trigger becomes the run's, so a crash mid-replay
//! resumes the edit, and two replays of one run begun at once cannot both walk it.

mod common;

use common::*;
use engine::canonical;
use engine::connector::{ActionSpec, BoxFuture, Connector, LookupOutcome, Outcome, Request};
use engine::event::CrashPoint;
use engine::executor::{Engine, Error};
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, Replay, ReplayEntry, RunRecord, RunStatus};
use serde_json::json;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// charge (keyed) then a welcome email (at-most-once) to the trigger's address.
fn charge_then_email() -> serde_json::Value {
    json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "email", "action": "api.email", "inputs": {"to": "{{trigger.email}}"}}
    ]})
}

/// Replays `run_id` until it finishes or the engine halts at the recorder's crash point (the future is then dropped:
/// a crash). `None` when it was crashed.
async fn replay_until_halt(engine: &Engine, recorder: &Recorder, run_id: &str, edited: &engine::doc::Doc) -> bool {
    let halted = async {
        for _ in 0..10_000 {
            if recorder.was_halted() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the replay neither finished nor halted within 10 s");
    };
    tokio::select! {
        biased;
        status = engine.replay(run_id, edited) => panic!("the replay finished ({status:?}) instead of halting"),
        () = halted => true,
    }
}

/// A worker crashes mid-replay, after the edited email went out and before its outcome was recorded. The worker that
/// resumes the run must drive the edit, find the email's new key started and pause for a person: the email may have
/// gone out. Driven with the original trigger instead (the edit lost), the run would end "succeeded" with every old
/// key replayed, and nobody would be told about the email sent under the new key.
#[tokio::test]
async fn a_crash_mid_replay_resumes_the_edit_and_pauses_at_the_step_it_may_have_sent() {
    for (name, ledger) in ledgers() {
        let actions = || vec![keyed("charge", 60_000, false), at_most_once("email")];
        let connector = Scripted::new("api", actions(), &[Fate::Apply, Fate::Apply, Fate::Apply]);
        let first = engine(
            short_lease("w1"),
            ledger.clone(),
            Recorder::new(),
            &[connector.clone() as Arc<dyn Connector>],
            &[],
            &[charge_then_email()],
        );
        let trigger = engine::doc!({"email": "a@example.com", "amount": 5});
        assert_eq!(first.start_run("wf", "r1", &trigger).await.unwrap(), RunStatus::Succeeded, "{name}");

        let recorder = Recorder::halting_at(CrashPoint::AfterCallBeforeRecord, 1);
        let crashing = engine(
            short_lease("w1"),
            ledger.clone(),
            recorder.clone(),
            &[connector.clone() as Arc<dyn Connector>],
            &[],
            &[charge_then_email()],
        );
        let edited = engine::doc!({"email": "b@example.com", "amount": 5});
        assert!(replay_until_halt(&crashing, &recorder, "r1", &edited).await, "{name}");
        drop(crashing);
        let effects = connector.effects();
        assert_eq!(effects.len(), 3, "{name}: the charge replayed, the edited email went out: {effects:?}");
        assert_eq!(effects[2].inputs["to"], "b@example.com", "{name}");
        let run = ledger.get_run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Running, "{name}");
        assert_eq!(run.trigger, canonical::to_vec(&edited).unwrap(), "{name}: the run holds the edited trigger");

        let resumed = engine(
            config("w2"),
            ledger.clone(),
            Recorder::new(),
            &[connector.clone() as Arc<dyn Connector>],
            &[],
            &[charge_then_email()],
        );
        let statuses = resume_all(&resumed).await;
        assert_eq!(statuses, vec![("r1".to_string(), RunStatus::Paused)], "{name}");
        let reason = ledger.get_run("r1").unwrap().unwrap().reason.unwrap();
        assert!(reason.contains("email") && reason.contains("[key "), "{name}: {reason}");
        assert_eq!(connector.effects().len(), 3, "{name}: the email is not sent again without a person");
    }
}

/// The replay's switch to running happens before anything is walked, so a second replay of the run (another edit,
/// another person) begun while the first is in flight is refused, and the first's edit is the one the run holds.
#[tokio::test]
async fn a_second_replay_begun_while_one_is_in_flight_is_refused() {
    for (name, ledger) in ledgers() {
        let connector = Scripted::new("api", vec![keyed("charge", 60_000, false)], &[]);
        let wf = json!({"name": "wf", "steps": [
            {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}}
        ]});
        let engine = engine(
            config("w1"),
            ledger.clone(),
            Recorder::new(),
            &[connector.clone() as Arc<dyn Connector>],
            &[],
            &[wf],
        );
        assert_eq!(engine.start_run("wf", "r1", &engine::doc!({"amount": 5})).await.unwrap(), RunStatus::Succeeded);
        let (six, seven) = (engine::doc!({"amount": 6}), engine::doc!({"amount": 7}));
        let (first, second) = tokio::join!(engine.replay("r1", &six), engine.replay("r1", &seven));
        assert_eq!(first.unwrap(), RunStatus::Succeeded, "{name}");
        assert!(
            matches!(&second, Err(Error::NotFinished { status: RunStatus::Running, step: None, .. })),
            "{name}: {second:?}"
        );
        assert_eq!(connector.effects().len(), 2, "{name}: one charge for the edit, none for the refused one");
        assert_eq!(connector.effects()[1].inputs["amount"], 6, "{name}");
        assert_eq!(ledger.get_run("r1").unwrap().unwrap().trigger, canonical::to_vec(&six).unwrap(), "{name}");
        // Once it has finished, the other edit may replay.
        assert_eq!(engine.replay("r1", &seven).await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!(connector.effects().len(), 3, "{name}");
        // The history keeps what each replay replaced, the refused one nothing; the last edit is the run's trigger.
        let replaced: Vec<(u32, Vec<u8>)> =
            ledger.replay_history("r1").unwrap().into_iter().map(|e| (e.replay, e.replaced_trigger)).collect();
        let five = canonical::to_vec(&engine::doc!({"amount": 5})).unwrap();
        assert_eq!(replaced, vec![(1, five), (2, canonical::to_vec(&six).unwrap())], "{name}");
        assert_eq!(ledger.get_run("r1").unwrap().unwrap().trigger, canonical::to_vec(&seven).unwrap(), "{name}");
    }
}

/// A replay this engine cannot drive (its workflow is unknown here) is refused before the run is touched.
#[tokio::test]
async fn a_replay_of_a_run_of_an_unknown_workflow_leaves_the_run_finished() {
    for (name, ledger) in ledgers() {
        let run = RunRecord {
            run_id: "r1".into(),
            workflow: "gone".into(),
            status: RunStatus::Succeeded,
            trigger: b"{\"amount\":5}".to_vec(),
            reason: None,
            created_ms: 1,
            updated_ms: 2,
            replays: 0,
        };
        ledger.create_run(run.clone()).unwrap();
        let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[], &[], &[]);
        let refused = engine.replay("r1", &engine::doc!({"amount": 6})).await;
        assert!(matches!(&refused, Err(Error::UnknownWorkflow(w)) if w == "gone"), "{name}: {refused:?}");
        assert_eq!(ledger.get_run("r1").unwrap().unwrap(), run, "{name}: the run is left as it was");
        assert_eq!(ledger.replay_history("r1").unwrap(), [], "{name}: no replay began");
        let unknown = engine.replay("r9", &engine::doc!({"amount": 6})).await;
        assert!(matches!(&unknown, Err(Error::UnknownRun(r)) if r == "r9"), "{name}: {unknown:?}");
    }
}

/// Two workers on one ledger file begin a replay of the same finished run at the same moment: exactly one begins,
/// the other finds the run running, in every round.
#[test]
fn two_processes_beginning_a_replay_at_once_cannot_both_begin() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let open = || SqliteLedger::open(&path, Options::default()).unwrap();
    let setup = open();
    for round in 0..20 {
        let run_id = format!("r{round}");
        let run = RunRecord {
            run_id: run_id.as_str().into(),
            workflow: "wf".into(),
            status: RunStatus::Succeeded,
            trigger: b"{}".to_vec(),
            reason: None,
            created_ms: 1,
            updated_ms: 2,
            replays: 0,
        };
        setup.create_run(run).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let results: Vec<Replay> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..2)
                .map(|i| {
                    let (barrier, run_id, ledger) = (barrier.clone(), run_id.clone(), open());
                    scope.spawn(move || {
                        barrier.wait();
                        ledger.begin_replay(&run_id, format!("{{\"by\":{i}}}").as_bytes(), 10).unwrap()
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let begun = results.iter().filter(|r| **r == Replay::Begun).count();
        assert_eq!(begun, 1, "round {round}: {results:?}");
        let refused = Replay::Refused { status: RunStatus::Running, reason: None };
        assert!(results.contains(&refused), "round {round}: {results:?}");
        let stored = setup.get_run(&run_id).unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Running);
        assert!(stored.trigger == b"{\"by\":0}" || stored.trigger == b"{\"by\":1}", "round {round}");
        let history = setup.replay_history(&run_id).unwrap();
        assert_eq!(history, [ReplayEntry { replay: 1, replaced_trigger: b"{}".to_vec(), replayed_ms: 10 }], "{round}");
    }
}

/// The ledger's side, on both ledgers: only a succeeded or failed run begins a replay; it is then running, without a
/// reason, with the new trigger; a refusal reports what it found and writes nothing.
#[test]
fn begin_replay_sets_a_finished_run_running_with_the_new_trigger_and_refuses_the_rest() {
    for (name, ledger) in ledgers() {
        let record = |id: &str, status: RunStatus, reason: Option<&str>| RunRecord {
            run_id: id.into(),
            workflow: "wf".into(),
            status,
            trigger: b"{\"v\":1}".to_vec(),
            reason: reason.map(str::to_owned),
            created_ms: 1,
            updated_ms: 2,
            replays: 0,
        };
        let cases = [
            ("ok", RunStatus::Succeeded, None, true),
            ("failed", RunStatus::Failed, Some("aborted by ann"), true),
            ("pending", RunStatus::Pending, None, false),
            ("running", RunStatus::Running, None, false),
            ("paused", RunStatus::Paused, Some("a person must decide"), false),
        ];
        for (id, status, reason, begins) in cases {
            ledger.create_run(record(id, status, reason)).unwrap();
            let got = ledger.begin_replay(id, b"{\"v\":2}", 9).unwrap();
            let stored = ledger.get_run(id).unwrap().unwrap();
            if begins {
                assert_eq!(got, Replay::Begun, "{name} {id}");
                let want = RunRecord {
                    status: RunStatus::Running,
                    reason: None,
                    trigger: b"{\"v\":2}".to_vec(),
                    updated_ms: 9,
                    replays: 1,
                    ..record(id, status, reason)
                };
                assert_eq!(stored, want, "{name} {id}");
                assert!(ledger.unfinished_runs().unwrap().contains(&id.to_string()), "{name} {id}: listed");
            } else {
                assert_eq!(got, Replay::Refused { status, reason: reason.map(str::to_owned) }, "{name} {id}");
                assert_eq!(stored, record(id, status, reason), "{name} {id}: nothing written");
            }
        }
        assert_eq!(ledger.paused_runs().unwrap(), vec!["paused".to_string()], "{name}");
        let unknown = ledger.begin_replay("nope", b"{}", 9);
        assert!(matches!(unknown, Err(engine::ledger::Error::NotFound { .. })), "{name}: {unknown:?}");
    }
}

/// An API whose one action answers after `delay`: a drive that waits on it is a drive still in flight.
struct Slow {
    actions: Vec<ActionSpec>,
    delay: Duration,
}

impl Connector for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }
    fn call<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            Outcome::Applied(engine::doc!({"id": "wait_1"}))
        })
    }
    fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        unreachable!("the action has no lookup")
    }
}

/// A drive of the old trigger that outlives the start of a replay (a second dispatch of the run, a stalled worker)
/// must not end the run: here the replay pauses at its edited payout, which may have gone out, and the old drive then
/// finishes every old step. Writing its "succeeded" over the pause would hide the payout from the person who must
/// decide about it (and a later replay would edit the edit, leaving the paused key's effect behind in a run that may
/// end failed: what flowsim found as I3). The old drive drives the run again as it now stands instead, and returns
/// the pause.
#[tokio::test]
async fn a_drive_that_outlives_the_start_of_a_replay_does_not_end_the_run() {
    for (name, ledger) in ledgers() {
        let bank = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::Apply, Fate::ApplyThenTimeout]);
        let slow = Arc::new(Slow { actions: vec![keyed("wait", 60_000, false)], delay: Duration::from_millis(200) });
        let wf = json!({"name": "wf", "steps": [
            {"id": "pay", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}},
            {"id": "settle", "action": "slow.wait", "inputs": {"ref": "{{trigger.ref}}"}}
        ]});
        let connectors = [bank.clone() as Arc<dyn Connector>, slow as Arc<dyn Connector>];
        let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[wf]);
        engine.create_run("wf", "r1", &engine::doc!({"amount": 5, "ref": "x"})).unwrap();
        let edited = engine::doc!({"amount": 6, "ref": "x"});
        let old_drive = engine.drive("r1");
        let meanwhile = async {
            // The old drive has paid and waits on `settle`; another drive of the run is taken to have ended it (its
            // keys are the old drive's), and then a person replays it with an edited amount.
            tokio::time::sleep(Duration::from_millis(50)).await;
            assert_eq!(bank.effects().len(), 1, "{name}: the old drive paid");
            ledger.set_run_status("r1", RunStatus::Succeeded, None, 1).unwrap();
            engine.replay("r1", &edited).await
        };
        let (old, replayed) = tokio::join!(old_drive, meanwhile);
        assert_eq!(replayed.unwrap(), RunStatus::Paused, "{name}: the edited payout timed out after it applied");
        assert_eq!(old.unwrap(), RunStatus::Paused, "{name}: the old drive returns the run as it stands");
        let run = ledger.get_run("r1").unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Paused, "{name}: the pause stands");
        let reason = run.reason.unwrap();
        assert!(reason.contains("pay") && reason.contains("[key "), "{name}: {reason}");
        assert_eq!(run.trigger, canonical::to_vec(&edited).unwrap(), "{name}");
        assert_eq!(bank.effects().len(), 2, "{name}: one payout per key, none again without a person");
    }
}

/// The ledger's side: a drive's end is written only while the run has seen as many replays as when it began.
#[test]
fn finish_drive_writes_only_for_the_replays_it_began_under() {
    for (name, ledger) in ledgers() {
        let run = RunRecord {
            run_id: "r1".into(),
            workflow: "wf".into(),
            status: RunStatus::Running,
            trigger: b"{}".to_vec(),
            reason: None,
            created_ms: 1,
            updated_ms: 2,
            replays: 0,
        };
        ledger.create_run(run.clone()).unwrap();
        assert!(ledger.finish_drive("r1", 0, RunStatus::Succeeded, None, 3).unwrap(), "{name}");
        assert_eq!(ledger.run_status("r1").unwrap(), Some(RunStatus::Succeeded), "{name}");
        assert_eq!(ledger.begin_replay("r1", b"{\"v\":2}", 4).unwrap(), Replay::Begun, "{name}");
        assert!(!ledger.finish_drive("r1", 0, RunStatus::Succeeded, None, 5).unwrap(), "{name}: an old drive's end");
        let stored = ledger.get_run("r1").unwrap().unwrap();
        assert_eq!((stored.status, stored.updated_ms, stored.replays), (RunStatus::Running, 4, 1), "{name}");
        assert_eq!(ledger.unfinished_runs().unwrap(), vec!["r1".to_string()], "{name}: still listed");
        assert!(ledger.finish_drive("r1", 1, RunStatus::Paused, Some("why"), 6).unwrap(), "{name}");
        assert_eq!(ledger.paused_runs().unwrap(), vec!["r1".to_string()], "{name}");
        let unknown = ledger.finish_drive("nope", 0, RunStatus::Succeeded, None, 7);
        assert!(matches!(unknown, Err(engine::ledger::Error::NotFound { .. })), "{name}: {unknown:?}");
    }
}
