//! Drives that outlive what they began (a worker stalled past its lease while another paused the run, a person
//! decided, a replay began), replays beside resolutions, crashes and concurrent resumes, and a schema-2 ledger file
//! migrated to 3. Written by a QA pass of stop 46; the three stalled-drive tests failed before `finish_drive` refused
//! to end a finished or paused run and a drive checked before each step that the run was still the one it walked.
//! Real threads and runtimes: not built for the simulation.
#![cfg(not(madsim))]
#![allow(clippy::disallowed_methods, reason = "a stalled worker is a real thread here; this file is not simulated")]

mod common;

use common::*;
use engine::clock::{Clock, RuntimeClock};
use engine::connector::Connector;
use engine::event::{CrashPoint, Event, Observer};
use engine::executor::{Error, Planner};
use engine::key::Key;
use engine::ledger::sqlite::{MIGRATIONS, Options, SqliteLedger};
use engine::ledger::{Ledger, Resolution, RunStatus};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Worker A: a one-second lease, and a stall of 2.5 s right after its first payout call answered (its lease lapses
/// while it stalls).
fn stalling_worker(
    clock: &Arc<dyn Clock>,
    ledger: &Arc<dyn Ledger>,
    connectors: &[Arc<dyn Connector>],
    workflow: Value,
) -> Arc<engine::executor::Engine> {
    let stall = Arc::new(StallAfterCall {
        inner: Recorder::new(),
        action: "payout",
        stall: Duration::from_millis(2_500),
        done: Mutex::new(false),
    });
    let a = engine_on(clock.clone(), short_lease("wA"), ledger.clone(), stall, connectors, &[], &[workflow]);
    Arc::new(a)
}

/// Drives `run_id` with `worker` on a thread of its own (its stall blocks that thread, as a stalled process would
/// block its own, while the test goes on); join it for the drive's result.
fn drive_on_own_thread(
    worker: &Arc<engine::executor::Engine>,
    run_id: &'static str,
) -> std::thread::JoinHandle<Result<RunStatus, engine::executor::Error>> {
    let worker = worker.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(worker.drive(run_id))
    })
}

/// A worker process that stalls (a GC pause, a frozen VM) right after its first call to `action` answered, before
/// it records the outcome: the stall blocks the worker's thread for `stall`.
struct StallAfterCall {
    inner: Arc<Recorder>,
    action: &'static str,
    stall: Duration,
    done: Mutex<bool>,
}

impl Observer for StallAfterCall {
    fn event(&self, event: &Event<'_>) {
        if let Event::CallEnded { action, .. } = event
            && action.ends_with(self.action)
        {
            let first = !std::mem::replace(&mut *self.done.lock().unwrap(), true);
            if first {
                std::thread::sleep(self.stall);
            }
        }
        self.inner.event(event);
    }
    fn halt_at(&self, point: CrashPoint, run_id: &str, key: &Key) -> bool {
        self.inner.halt_at(point, run_id, key)
    }
}

/// pay (at-most-once) then notify (keyed), both from the trigger's amount.
fn pay_then_notify() -> Value {
    json!({"name": "wf", "steps": [
        {"id": "pay", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "notify", "action": "api.notify", "inputs": {"amount": "{{trigger.amount}}"}}
    ]})
}

/// Worker A pays (the payout applies), then stalls past its lease before recording it. Worker W resumes the run,
/// finds the payout started under an expired lease and pauses; a person aborts the run. Optionally the person then
/// replays it with an edited amount. Returns (final run status, final reason, bank effects, api effects, A's result).
async fn stalled_drive_after_abort(
    ledger: Arc<dyn Ledger>,
    replay_after_abort: bool,
) -> (RunStatus, Option<String>, Vec<Effect>, Vec<Effect>, Result<RunStatus, Error>) {
    let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(1_000_000));
    let bank = Scripted::new("bank", vec![at_most_once("payout")], &[]);
    let api = Scripted::new("api", vec![keyed("notify", 60_000, false)], &[]);
    let connectors = [bank.clone() as Arc<dyn Connector>, api.clone() as Arc<dyn Connector>];
    let a = stalling_worker(&clock, &ledger, &connectors, pay_then_notify());
    let w =
        engine_on(clock.clone(), config("wW"), ledger.clone(), Recorder::new(), &connectors, &[], &[pay_then_notify()]);
    a.create_run("wf", "r1", &engine::doc!({"amount": 5})).unwrap();
    let old = drive_on_own_thread(&a, "r1");
    // A's lease (1 s) has expired; A is stalled after the payout applied.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(bank.effects().len(), 1, "A paid");
    assert_eq!(resume_all(&w).await, vec![("r1".to_string(), RunStatus::Paused)]);
    assert_eq!(w.resolve("r1", Resolution::Abort, "ann").await.unwrap(), RunStatus::Failed);
    if replay_after_abort {
        assert_eq!(w.replay("r1", &engine::doc!({"amount": 6})).await.unwrap(), RunStatus::Succeeded);
    }
    let a_result = tokio::task::spawn_blocking(move || old.join().unwrap()).await.unwrap();
    let run = ledger.get_run("r1").unwrap().unwrap();
    (run.status, run.reason, bank.effects(), api.effects(), a_result)
}

/// A drive that stalled past its lease, while another worker paused the run at its payout and a person aborted it,
/// must neither send the run's later step nor write "succeeded" over the abort.
#[tokio::test]
async fn a_stalled_drive_overwrites_a_persons_abort() {
    for (name, ledger) in ledgers() {
        let (status, reason, bank, api, a_result) = stalled_drive_after_abort(ledger, false).await;
        eprintln!("{name}: status {status:?} reason {reason:?} A returned {a_result:?}");
        eprintln!("{name}: bank {:?}", bank.iter().map(|e| &e.inputs).collect::<Vec<_>>());
        eprintln!("{name}: api {:?}", api.iter().map(|e| &e.inputs).collect::<Vec<_>>());
        assert_eq!(api.len(), 0, "{name}: a step of the aborted run was sent after the abort");
        assert_eq!(status, RunStatus::Failed, "{name}: the person's abort must stand, not {status:?}");
    }
}

/// As above, and then the run is replayed with an edit: the stalled drive must not send the old trigger's later step.
#[tokio::test]
async fn a_stalled_drive_sends_old_steps_after_abort_and_replay() {
    for (name, ledger) in ledgers() {
        let (status, reason, bank, api, a_result) = stalled_drive_after_abort(ledger, true).await;
        eprintln!("{name}: status {status:?} reason {reason:?} A returned {a_result:?}");
        eprintln!("{name}: bank {:?}", bank.iter().map(|e| &e.inputs).collect::<Vec<_>>());
        eprintln!("{name}: api {:?}", api.iter().map(|e| &e.inputs).collect::<Vec<_>>());
        assert_eq!(status, RunStatus::Succeeded, "{name}");
        let old_notify = api.iter().filter(|e| e.inputs["amount"] == 5).count();
        assert_eq!(old_notify, 0, "{name}: the aborted trigger's notify went out after the abort and the replay");
    }
}

/// Replay vs resolve on a paused run: refused while paused; abort then replay of the same trigger does not resend the
/// at-most-once step; a replay with the payout edited sends the new amount once; a replay right after a mark-done.
#[tokio::test]
async fn replay_and_resolve() {
    for (name, ledger) in ledgers() {
        let bank = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout]);
        let api = Scripted::new("api", vec![keyed("notify", 60_000, false)], &[]);
        let connectors = [bank.clone() as Arc<dyn Connector>, api.clone() as Arc<dyn Connector>];
        let e = engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[pay_then_notify()]);
        let t5 = engine::doc!({"amount": 5});
        assert_eq!(e.start_run("wf", "r1", &t5).await.unwrap(), RunStatus::Paused, "{name}");
        let refused = e.replay("r1", &engine::doc!({"amount": 6})).await;
        assert!(
            matches!(&refused, Err(Error::NotFinished { status: RunStatus::Paused, step: Some(s), .. }) if s == "pay"),
            "{name}: {refused:?}"
        );
        // replay and resolve at once: one of them wins, never both.
        let t6 = engine::doc!({"amount": 6});
        let (replayed, resolved) = tokio::join!(e.replay("r1", &t6), e.resolve("r1", Resolution::Abort, "ann"));
        eprintln!("{name}: replay {replayed:?} resolve {resolved:?}");
        assert!(replayed.is_err(), "{name}");
        assert_eq!(resolved.unwrap(), RunStatus::Failed, "{name}");
        // Abort then replay with the same trigger: the paused key still carries the abort.
        assert_eq!(e.replay("r1", &t5).await.unwrap(), RunStatus::Failed, "{name}");
        assert_eq!(bank.calls().len(), 1, "{name}: the payout was not sent again");
        // Replay with an edited payout: a new key, sent once.
        assert_eq!(e.replay("r1", &engine::doc!({"amount": 6})).await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!(bank.calls().len(), 2, "{name}");
        // Back to the original: still aborted.
        assert_eq!(e.replay("r1", &t5).await.unwrap(), RunStatus::Failed, "{name}");
        assert_eq!(bank.calls().len(), 2, "{name}");
        // Mark-done then replay.
        bank.push_script(&[Fate::ApplyThenTimeout]);
        assert_eq!(e.replay("r1", &engine::doc!({"amount": 7})).await.unwrap(), RunStatus::Paused, "{name}");
        let done = Resolution::MarkDone { output: json!({"id": "p7"}) };
        assert_eq!(e.resolve("r1", done, "ann").await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!(e.replay("r1", &engine::doc!({"amount": 7})).await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!(bank.calls().len(), 3, "{name}");
        let run = ledger.get_run("r1").unwrap().unwrap();
        assert_eq!(run.replays, 5, "{name}");
    }
}

/// A workflow with an action, an at-most-once action, a writes step and an agent step.
fn everything() -> Value {
    json!({"name": "wf", "steps": [
        {"id": "charge", "action": "api.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "pay", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "bill", "writes": [
            {"action": "api.invoice", "inputs": {"amount": "{{trigger.amount}}"}},
            {"action": "bank.email", "inputs": {"text": "billed {{trigger.amount}}"}}
        ]},
        {"id": "think", "planner": "model", "inputs": {"ticket": "{{trigger.ticket}}"}}
    ]})
}

fn per_key_counts(effects: &[Effect]) -> BTreeMap<Key, usize> {
    let mut m = BTreeMap::new();
    for e in effects {
        *m.entry(e.key).or_insert(0) += 1;
    }
    m
}

/// Replay with crashes at every crash point, the run then resumed by another worker; and a replay beside a
/// concurrent `resume_unfinished` of another worker.
#[tokio::test]
async fn replay_crash_sweep() {
    let mut cases = Vec::new();
    for (point, max) in [
        (CrashPoint::BeforeCall, 6),
        (CrashPoint::AfterCallBeforeRecord, 6),
        (CrashPoint::AfterPlanBeforeFirstWrite, 2),
        (CrashPoint::WhilePlanning, 1),
    ] {
        for nth in 1..=max {
            for ledger_index in 0..2 {
                cases.push((point, nth, ledger_index));
            }
        }
    }
    join_all(cases.into_iter().map(|(point, nth, li)| async move {
        let (name, ledger) = ledgers().swap_remove(li);
        let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(1_000_000));
        let api = Scripted::new("api", vec![keyed("charge", 60_000, false), keyed("invoice", 60_000, false)], &[]);
        let bank = Scripted::new("bank", vec![at_most_once("payout"), at_most_once("email")], &[]);
        let tools = Scripted::new("tools", vec![keyed("act", 60_000, false)], &[]);
        let planner = FlakyPlanner::new("tools.act", 2);
        let connectors = [
            api.clone() as Arc<dyn Connector>,
            bank.clone() as Arc<dyn Connector>,
            tools.clone() as Arc<dyn Connector>,
        ];
        let planners: [(&str, Arc<dyn Planner>); 1] = [("model", planner.clone())];
        let first = engine_on(
            clock.clone(),
            config("w0"),
            ledger.clone(),
            Recorder::new(),
            &connectors,
            &planners,
            &[everything()],
        );
        let t1 = engine::doc!({"amount": 5, "ticket": "t1"});
        assert_eq!(first.start_run("wf", "r1", &t1).await.unwrap(), RunStatus::Succeeded);
        let recorder = Recorder::halting_at(point, nth);
        let crashing = engine_on(
            clock.clone(),
            short_lease("w1"),
            ledger.clone(),
            recorder.clone(),
            &connectors,
            &planners,
            &[everything()],
        );
        let edited = engine::doc!({"amount": 6, "ticket": "t2"});
        let halted = async {
            for _ in 0..10_000 {
                if recorder.was_halted() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            panic!("neither finished nor halted");
        };
        let label = format!("{name} {point:?} #{nth}");
        let crashed = tokio::select! {
            biased;
            status = crashing.replay("r1", &edited) => { let _ = status.unwrap(); false }
            () = halted => true,
        };
        drop(crashing);
        let resumer = engine_on(
            clock.clone(),
            config("w2"),
            ledger.clone(),
            Recorder::new(),
            &connectors,
            &planners,
            &[everything()],
        );
        let statuses = resume_all(&resumer).await;
        let run = ledger.get_run("r1").unwrap().unwrap();
        let (b, a, t) = (bank.effects(), api.effects(), tools.effects());
        for (k, n) in per_key_counts(&b).iter().chain(per_key_counts(&a).iter()).chain(per_key_counts(&t).iter()) {
            assert_eq!(*n, 1, "{label}: key {k:?} has {n} effects");
        }
        // at-most-once: never sent twice under one key
        let mut sent: BTreeMap<Key, usize> = BTreeMap::new();
        for c in bank.calls() {
            *sent.entry(c.key).or_insert(0) += 1;
        }
        assert!(sent.values().all(|n| *n == 1), "{label}: an at-most-once key sent twice: {sent:?}");
        let edited_bank = b.iter().filter(|e| e.inputs.to_string().contains('6')).count();
        match run.status {
            RunStatus::Succeeded => {
                assert_eq!(edited_bank, 2, "{label}: succeeded but the edited payout/email are not both applied");
                assert_eq!(bank.calls().len(), b.len(), "{label}");
            }
            RunStatus::Paused => {
                assert!(run.reason.as_deref().unwrap_or("").contains("[key "), "{label}: {:?}", run.reason)
            }
            other => panic!("{label}: run ended {other:?} ({:?}), crashed {crashed}, {statuses:?}", run.reason),
        }
        assert!(planner.call_count() <= 3, "{label}: planner asked {} times", planner.call_count());
        eprintln!("{label}: crashed {crashed} -> {:?} {:?}", run.status, run.reason);
    }))
    .await;
}

/// A replay beside another worker's `resume_unfinished` of the same run (both in flight at once).
#[tokio::test]
async fn replay_beside_a_concurrent_resume() {
    for round in 0..10u64 {
        for (name, ledger) in ledgers() {
            let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(1_000_000));
            let bank = Scripted::new("bank", vec![at_most_once("payout")], &[]);
            let api = Scripted::new("api", vec![keyed("notify", 60_000, false)], &[]);
            let connectors = [bank.clone() as Arc<dyn Connector>, api.clone() as Arc<dyn Connector>];
            let a = engine_on(
                clock.clone(),
                short_lease("wA"),
                ledger.clone(),
                Recorder::new(),
                &connectors,
                &[],
                &[pay_then_notify()],
            );
            let b = engine_on(
                clock.clone(),
                short_lease("wB"),
                ledger.clone(),
                Recorder::new(),
                &connectors,
                &[],
                &[pay_then_notify()],
            );
            assert_eq!(a.start_run("wf", "r1", &engine::doc!({"amount": 5})).await.unwrap(), RunStatus::Succeeded);
            if round % 2 == 1 {
                bank.push_script(&[Fate::ApplyThenTimeout]);
            }
            let delay = round % 5;
            let t6 = engine::doc!({"amount": 6});
            let (r, s) = tokio::join!(a.replay("r1", &t6), async {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                b.resume_unfinished().await
            });
            let run = ledger.get_run("r1").unwrap().unwrap();
            let label = format!("{name} round {round}");
            for (k, n) in per_key_counts(&bank.effects()) {
                assert_eq!(n, 1, "{label}: {k:?}");
            }
            let mut sent: BTreeMap<Key, usize> = BTreeMap::new();
            for c in bank.calls() {
                *sent.entry(c.key).or_insert(0) += 1;
            }
            assert!(sent.values().all(|n| *n == 1), "{label}: {sent:?}");
            let want = if round % 2 == 1 { RunStatus::Paused } else { RunStatus::Succeeded };
            assert_eq!(run.status, want, "{label}: {r:?} {s:?} {:?}", run.reason);
            assert_eq!(r.unwrap(), want, "{label}");
        }
    }
}

/// A lookup-before-create step whose first create timed out after it applied, then whose lookup is refused for
/// good: the run pauses at once (nothing sent again); a replay is refused; a retry decision sends it once more.
#[tokio::test]
async fn lookup_refused_after_an_indeterminate_create_pauses_and_replay_waits() {
    for (name, ledger) in ledgers() {
        let crm = Scripted::new("crm", vec![lookup("contact", 0)], &[Fate::ApplyThenTimeout]);
        crm.push_lookup_script(&[LookupFate::Search, LookupFate::FailPermanent]);
        let wf = json!({"name": "wf", "steps": [
            {"id": "c", "action": "crm.contact", "inputs": {"email": "{{trigger.email}}"}}
        ]});
        let e = engine(config("w1"), ledger.clone(), Recorder::new(), &[crm.clone() as Arc<dyn Connector>], &[], &[wf]);
        let t = engine::doc!({"email": "a@x"});
        let status = e.start_run("wf", "r1", &t).await.unwrap();
        let run = ledger.get_run("r1").unwrap().unwrap();
        eprintln!("{name}: {status:?} {:?} calls {} lookups {}", run.reason, crm.calls().len(), crm.lookups().len());
        assert_eq!(status, RunStatus::Paused, "{name}");
        assert_eq!(crm.effects().len(), 1, "{name}");
        let refused = e.replay("r1", &engine::doc!({"email": "b@x"})).await;
        assert!(matches!(refused, Err(Error::NotFinished { .. })), "{name}: {refused:?}");
    }
}

/// A schema-version-2 file written by hand: `flow paused` lists it as it is, without migrating it; opened by this
/// build's ledger it is migrated with its rows kept and replays 0.
#[test]
fn a_v2_ledger_file_migrates_and_flow_reads_it_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute_batch(MIGRATIONS[1]).unwrap();
        conn.pragma_update(None, "user_version", 2).unwrap();
        conn.execute(
            "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms, unfinished) \
             VALUES ('done', 'wf', 'succeeded', X'7b7d', NULL, 1, 2, NULL), \
                    ('open', 'wf', 'running', X'7b7d', NULL, 1, 2, 1), \
                    ('held', 'wf', 'paused', X'7b7d', 'why [key 00]', 1, 2, NULL)",
            [],
        )
        .unwrap();
    }
    let (code, out, err) = flow(&["paused", "--ledger", path.to_str().unwrap()]);
    eprintln!("flow paused on v2: code {code}\nstdout: {out}\nstderr: {err}");
    assert_eq!((code, out.as_str()), (0, "held\twf\twhy [key 00]\n"), "{err}");
    let version: i64 =
        rusqlite::Connection::open(&path).unwrap().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, 2, "flow migrates nothing");
    {
        let ledger = SqliteLedger::open(&path, Options::default()).unwrap();
        for id in ["done", "open", "held"] {
            let run = ledger.get_run(id).unwrap().unwrap_or_else(|| panic!("{id} kept"));
            assert_eq!(run.replays, 0, "{id}");
        }
        assert_eq!(ledger.unfinished_runs().unwrap(), vec!["open".to_string()]);
        assert_eq!(ledger.paused_runs().unwrap(), vec!["held".to_string()]);
        assert_eq!(ledger.begin_replay("done", b"{\"v\":1}", 3).unwrap(), engine::ledger::Replay::Begun);
        assert!(!ledger.finish_drive("done", 0, RunStatus::Succeeded, None, 4).unwrap());
        assert!(ledger.finish_drive("done", 1, RunStatus::Succeeded, None, 4).unwrap());
    }
    let version: i64 =
        rusqlite::Connection::open(&path).unwrap().pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
    assert_eq!(version, engine::ledger::sqlite::SCHEMA_VERSION);
    let (code, out, err) = flow(&["paused", "--ledger", path.to_str().unwrap()]);
    eprintln!("flow paused on v3: code {code}\nstdout: {out}\nstderr: {err}");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("held"), "{out}");
    let (code, out, err) = flow(&["replays", "--ledger", path.to_str().unwrap(), "--run", "done"]);
    assert_eq!((code, out.as_str(), err.as_str()), (0, "1\t1970-01-01T00:00:00.003Z\t{}\t{\"v\":1}\n", ""));
}

/// As above, with the old trigger's later step at-most-once and timing out after it applied: sent by the stalled
/// drive, its pause would be dropped as superseded and the run would end "succeeded" (the replay's) with an
/// at-most-once key unknown and applied, and no person asked. The stalled drive must not send it.
#[tokio::test]
async fn a_stalled_drive_pause_under_the_old_trigger_is_lost_after_abort_and_replay() {
    for (name, ledger) in ledgers() {
        let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(1_000_000));
        // A's payout, the replay's payout and email, then A's old email: applied, answer lost.
        let bank = Scripted::new(
            "bank",
            vec![at_most_once("payout"), at_most_once("email")],
            &[Fate::Apply, Fate::Apply, Fate::Apply, Fate::ApplyThenTimeout],
        );
        let wf = json!({"name": "wf", "steps": [
            {"id": "pay", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}},
            {"id": "email", "action": "bank.email", "inputs": {"amount": "{{trigger.amount}}"}}
        ]});
        let connectors = [bank.clone() as Arc<dyn Connector>];
        let a = stalling_worker(&clock, &ledger, &connectors, wf.clone());
        let w = engine_on(clock.clone(), config("wW"), ledger.clone(), Recorder::new(), &connectors, &[], &[wf]);
        a.create_run("wf", "r1", &engine::doc!({"amount": 5})).unwrap();
        let old = drive_on_own_thread(&a, "r1");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        assert_eq!(resume_all(&w).await, vec![("r1".to_string(), RunStatus::Paused)], "{name}");
        assert_eq!(w.resolve("r1", Resolution::Abort, "ann").await.unwrap(), RunStatus::Failed, "{name}");
        assert_eq!(w.replay("r1", &engine::doc!({"amount": 6})).await.unwrap(), RunStatus::Succeeded, "{name}");
        let a_result = tokio::task::spawn_blocking(move || old.join().unwrap()).await.unwrap();
        let run = ledger.get_run("r1").unwrap().unwrap();
        let effects = bank.effects();
        eprintln!("{name}: A returned {a_result:?}; run {:?} {:?}", run.status, run.reason);
        eprintln!("{name}: bank {:?}", effects.iter().map(|e| (&e.action, &e.inputs)).collect::<Vec<_>>());
        let old_email = effects.iter().find(|e| e.action.ends_with("email") && e.inputs["amount"] == 5);
        assert!(old_email.is_none(), "{name}: the stalled drive sent the old trigger's email; run is {:?}", run.status);
        assert_eq!(run.status, RunStatus::Succeeded, "{name}: the replay's end stands");
    }
}
