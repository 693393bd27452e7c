//! A restarted worker's resumption of the unfinished runs ([`Engine::resume_unfinished`]) when one of them cannot be
//! driven: a run it cannot drive, and a person's decision an older build filed that no drive can apply.
#![cfg(not(madsim))]

mod common;

use common::*;
use engine::connector::Connector;
use engine::event::CrashPoint;
use engine::executor::Error;
use engine::ledger::sqlite::SqliteLedger;
use engine::ledger::{Ledger, Resolution, ResolutionRecord, RunStatus, Status, paused_key};
use serde_json::json;
use std::sync::Arc;

/// A run whose drive fails with an error (its workflow is not registered with this worker) is reported with its
/// error, and the runs sorted after it are still resumed. Before: `resume_unfinished` returned the first error, so
/// on every restart the runs after that one were never driven.
#[tokio::test]
async fn one_run_that_cannot_be_driven_does_not_stop_the_others() {
    for (name, ledger) in ledgers() {
        let api = Scripted::new("bank", vec![keyed("charge", 60_000, false)], &[]);
        let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
        let e =
            engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "bank.charge")]);
        let trigger = br#"{"amount":1,"email":"x"}"#;
        ledger.create_run(run_record("a", RunStatus::Pending, trigger)).unwrap();
        let mut gone = run_record("b", RunStatus::Running, trigger);
        gone.workflow = "retired".into();
        ledger.create_run(gone).unwrap();
        ledger.create_run(run_record("c", RunStatus::Pending, trigger)).unwrap();
        let resumed = e.resume_unfinished().await.expect("the listing");
        let ids: Vec<&str> = resumed.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"], "{name}");
        assert!(matches!(resumed[0].1, Ok(RunStatus::Succeeded)), "{name}: {:?}", resumed[0].1);
        assert!(matches!(&resumed[1].1, Err(Error::UnknownWorkflow(w)) if w == "retired"), "{name}: {:?}", resumed[1]);
        assert!(matches!(resumed[2].1, Ok(RunStatus::Succeeded)), "{name}: {:?}", resumed[2].1);
        assert_eq!(ledger.get_run("b").unwrap().unwrap().status, RunStatus::Running, "{name}: b is left as it was");
        assert_eq!(api.effects().len(), 2, "{name}");
    }
}

/// A mark-done decision an older build filed without checking its output (an integer no double holds, which this
/// build refuses when the decision is made): the drive that would apply it pauses the run again, saying why, instead
/// of failing with an error, and it is not reported as applied; the other runs are resumed; a person's new decision
/// then applies. Before: the drive
/// failed with `Error::MarkDoneOutput`, the run stayed running, and `resume_unfinished` stopped there on every
/// restart.
#[tokio::test]
async fn a_stored_mark_done_whose_output_cannot_be_stored_pauses_the_run_again() {
    for (name, ledger) in ledgers() {
        let api = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout]);
        let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
        let recorder = Recorder::new();
        let e =
            engine(config("w1"), ledger.clone(), recorder.clone(), &connectors, &[], &[one_step("wf", "bank.payout")]);
        let trigger = engine::doc!({"amount": 1, "email": "x"});
        assert_eq!(e.start_run("wf", "a", &trigger).await.unwrap(), RunStatus::Paused, "{name}");
        let reason = ledger.get_run("a").unwrap().unwrap().reason.expect("a pause reason");
        let key = paused_key(&reason).expect("the paused key");
        let last_attempt_ms = ledger.get(&key).unwrap().unwrap().last_attempt_ms;
        // What an older build filed: the decision, unchecked, and the run set running.
        let old = ResolutionRecord {
            run_id: "a".into(),
            key,
            resolution: Resolution::MarkDone { output: json!({"ref": u64::MAX}) },
            by: "old-build".into(),
            at_ms: last_attempt_ms + 1,
            seen: None,
        };
        ledger.record_resolution(&old, RunStatus::Running, None).unwrap();
        ledger.create_run(run_record("b", RunStatus::Pending, br#"{"amount":2,"email":"y"}"#)).unwrap();
        api.push_script(&[Fate::Apply]);

        let resumed = resume_all(&e).await;
        assert_eq!(resumed, [("a".to_string(), RunStatus::Paused), ("b".to_string(), RunStatus::Succeeded)], "{name}");
        let a = ledger.get_run("a").unwrap().unwrap();
        let reason = a.reason.expect("a pause reason");
        assert!(reason.contains("old-build gives an output that cannot be stored"), "{name}: {reason}");
        assert_eq!(paused_key(&reason), Some(key), "{name}: paused at the same key");
        assert_eq!(ledger.get(&key).unwrap().unwrap().status, Status::Unknown, "{name}: nothing recorded as done");
        // Not applied, so not reported to the observer as a person's decision applied (QA, stop 48: it was).
        assert_eq!(recorder.count("resolved "), 0, "{name}: {:?}", recorder.lines());

        let status = e.resolve("a", Resolution::MarkDone { output: json!({"ref": 7}) }, "pat").await.unwrap();
        assert_eq!(status, RunStatus::Succeeded, "{name}");
        assert_eq!(ledger.get(&key).unwrap().unwrap().output.as_deref(), Some(&br#"{"ref":7}"#[..]), "{name}");
        assert_eq!(api.calls().len(), 2, "{name}: the payout was sent once, and b's once");
    }
}

/// A mark-done output nested as deep as a canonical document may be (128 levels) is filed, read back and applied on
/// every ledger, by the engine and by `flow resolve`; one level more is refused before anything is written (exit 2
/// for `flow`). Before (QA, stop 48): the SQLite ledger files the decision two levels below its output and read it back
/// with serde_json, which stops at 127 levels, so a 127-level output was filed and never read back: every drive of the
/// run failed, and the run stayed running with no way to decide again.
#[tokio::test]
async fn a_mark_done_output_as_deep_as_a_canonical_document_is_applied() {
    let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!([inner]));
    let depth_max = engine::canonical::DEPTH_MAX;
    for (name, ledger) in ledgers() {
        let api = Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout]);
        let connectors: [Arc<dyn Connector>; 1] = [api.clone()];
        let e =
            engine(config("w1"), ledger.clone(), Recorder::new(), &connectors, &[], &[one_step("wf", "bank.payout")]);
        assert_eq!(e.start_run("wf", "a", &engine::doc!({"amount": 1})).await.unwrap(), RunStatus::Paused);
        let too_deep = e.resolve("a", Resolution::MarkDone { output: nested(depth_max + 1) }, "pat").await;
        let Err(Error::MarkDoneOutput(refusal)) = too_deep else { panic!("{name}: not refused: {too_deep:?}") };
        assert!(refusal.to_string().contains("nesting deeper than 128 levels"), "{name}: {refusal}");
        assert!(ledger.resolutions("a").unwrap().is_empty(), "{name}: nothing written");
        assert_eq!(ledger.get_run("a").unwrap().unwrap().status, RunStatus::Paused, "{name}");
        let deepest = nested(depth_max);
        let status = e.resolve("a", Resolution::MarkDone { output: deepest.clone() }, "pat").await.unwrap();
        assert_eq!(status, RunStatus::Succeeded, "{name}");
        let key = ledger.resolutions("a").unwrap()[0].key;
        assert_eq!(ledger.get(&key).unwrap().unwrap().output, Some(deepest.to_string().into_bytes()), "{name}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["held", "other"]));
    let before = snapshot(dir.path());
    let output = nested(depth_max + 1).to_string();
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "held", "--mark-done", &output, "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    assert!(stderr.contains("nesting deeper than 128 levels"), "{stderr}");
    assert_eq!(snapshot(dir.path()), before, "nothing written");
    let output = nested(depth_max).to_string();
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "held", "--mark-done", &output, "--by", "ann"]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "run held is now running\n", ""));
    let ledger = SqliteLedger::open(&path, Default::default()).unwrap();
    let filed = ledger.resolutions("held").unwrap();
    assert_eq!(filed[0].resolution, Resolution::MarkDone { output: nested(depth_max) }, "read back whole");
}

/// An API's answer nested 128 levels, which the canonical writer accepts and the ledger stores, is read back when a
/// later drive needs it (a step names it): before, serde_json stopped at 127 levels and every re-drive of the run
/// failed with "the ledger holds an unreadable record".
#[tokio::test]
async fn an_answer_as_deep_as_a_canonical_document_is_read_back() {
    // The answer is `{"id": .., "action": .., "inputs": {"deep": nested}}`: two levels above `nested`.
    let nested = (0..engine::canonical::DEPTH_MAX - 2).fold(json!(1), |inner, _| json!([inner]));
    for (name, ledger) in ledgers() {
        let api = Scripted::new("bank", vec![keyed("charge", 60_000, false), keyed("notify", 60_000, false)], &[]);
        let wf = json!({"name": "wf", "steps": [
            {"id": "a", "action": "bank.charge", "inputs": {"deep": "{{trigger.deep}}"}},
            {"id": "b", "action": "bank.notify", "inputs": {"of": "{{steps.a.output.inputs.deep}}"}}
        ]});
        let connectors = [api.clone() as Arc<dyn Connector>];
        // The first worker crashes before step b's call, after a's answer is stored.
        let crashing = Recorder::halting_at(CrashPoint::BeforeCall, 2);
        let e =
            engine(short_lease("w1"), ledger.clone(), crashing.clone(), &connectors, &[], std::slice::from_ref(&wf));
        let trigger = engine::doc!({"deep": nested.clone()});
        e.create_run("wf", "r", &trigger).unwrap();
        assert_eq!(drive_until_halt(&e, &crashing, "r").await, None, "{name}: crashed");
        let stored = &ledger.run_steps("r").unwrap()[0];
        let output = stored.output.as_deref().unwrap();
        assert!(engine::canonical::deeper_than(output, 127).is_some(), "{name}: the answer nests 128 levels");
        assert_eq!(engine::canonical::deeper_than(output, 128), None, "{name}");
        // Another worker resumes the run: it reads the stored trigger and answer back, replays a and sends b.
        let e = engine(config("w2"), ledger.clone(), Recorder::new(), &connectors, &[], &[wf]);
        assert_eq!(resume_all(&e).await, [("r".to_string(), RunStatus::Succeeded)], "{name}");
        assert_eq!(api.calls().len(), 2, "{name}: nothing sent again");
    }
}
