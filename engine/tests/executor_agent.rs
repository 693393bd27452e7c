//! Rule 3: multi-write and agent steps. The plan is recorded before the first write and never replaced; each write
//! has its own key; a crash at each point keeps every write to one effect, and a crash while planning re-plans while
//! a crash during the writes reuses the recorded plan (the planner is never asked again).

#![allow(clippy::cloned_ref_to_slice_refs, reason = "the clone coerces Arc<Scripted> to Arc<dyn Connector>")]

mod common;

use common::*;
use engine::connector::ActionSpec;
use engine::event::CrashPoint;
use engine::executor::Planner;
use engine::ledger::{Ledger, RunStatus};
use serde_json::json;
use std::sync::Arc;

const WRITES: usize = 3;

fn agent_workflow() -> serde_json::Value {
    json!({"name": "triage", "steps": [
        {"id": "think", "planner": "model", "inputs": {"ticket": "{{trigger.ticket}}"}},
        {"id": "close", "action": "desk.reply", "inputs": {"ticket": "{{trigger.ticket}}", "n": "{{steps.think.output.2.id}}"}}
    ]})
}

#[tokio::test]
async fn an_agent_crash_at_each_point_keeps_each_action_to_one_effect() {
    // (crash point, occurrence, planner calls expected in total)
    let table: Vec<(CrashPoint, u32, u32)> = vec![
        (CrashPoint::WhilePlanning, 1, 2),
        (CrashPoint::AfterPlanBeforeFirstWrite, 1, 1),
        (CrashPoint::BeforeCall, 1, 1),
        (CrashPoint::BeforeCall, 2, 1),
        (CrashPoint::BeforeCall, 3, 1),
        (CrashPoint::AfterCallBeforeRecord, 1, 1),
        (CrashPoint::AfterCallBeforeRecord, 2, 1),
        (CrashPoint::AfterCallBeforeRecord, 3, 1),
        (CrashPoint::AfterCallBeforeRecord, 4, 1),
    ];
    let classes: Vec<ActionSpec> = vec![keyed("act", 60_000, false), lookup("act", 5)];
    // The restarted worker waits out the crashed one's lease: every case at once, so the test waits about one lease.
    let cases = classes.into_iter().flat_map(|spec| table.iter().map(move |&row| (spec.clone(), row)));
    join_all(cases.map(|(spec, (point, nth, planner_calls))| async move {
        let name = format!("{} crash {point:?} #{nth}", spec.class.name());
        let tools = Scripted::with_lag("tools", vec![spec.clone()], &[], 2);
        let desk = Scripted::new("desk", vec![keyed("reply", 60_000, false)], &[]);
        let planner = FlakyPlanner::new("tools.act", WRITES);
        let ledger = memory_ledger();
        let crashing = Recorder::halting_at(point, nth);
        let connectors = [tools.clone() as _, desk.clone() as _];
        let planners: [(&str, Arc<dyn Planner>); 1] = [("model", planner.clone())];
        let first =
            engine(short_lease("w1"), ledger.clone(), crashing.clone(), &connectors, &planners, &[agent_workflow()]);
        first.create_run("triage", "r1", &engine::doc!({"ticket": 9})).unwrap();
        assert_eq!(drive_until_halt(&first, &crashing, "r1").await, None, "{name}: should have crashed");
        drop(first);
        let recorder = Recorder::new();
        let second =
            engine(config("w2"), ledger.clone(), recorder.clone(), &connectors, &planners, &[agent_workflow()]);
        assert_eq!(resume_all(&second).await, vec![("r1".to_string(), RunStatus::Succeeded)], "{name}");

        let effects = tools.effects();
        assert_eq!(effects.len(), WRITES, "{name}: {effects:?}");
        let mut keys: Vec<_> = effects.iter().map(|e| e.key).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), WRITES, "{name}: each write has its own key");
        // All writes come from one plan (the planner answers differently each time it is asked).
        assert!(effects.iter().all(|e| e.inputs["answer"] == effects[0].inputs["answer"]), "{name}: {effects:?}");
        assert_eq!(planner.call_count(), planner_calls, "{name}");
        assert_eq!(desk.effects().len(), 1, "{name}");
        // The later step read the agent step's output.
        assert_eq!(desk.effects()[0].inputs["n"], json!(3), "{name}");
        if point != CrashPoint::WhilePlanning {
            assert_eq!(recorder.count("plan think 3 reused=true"), 1, "{name}: {:?}", recorder.lines());
        }
        // A replay afterwards makes no call at all.
        let calls = tools.calls().len();
        assert_eq!(second.replay("r1", &engine::doc!({"ticket": 9})).await.unwrap(), RunStatus::Succeeded);
        assert_eq!((tools.calls().len(), planner.call_count()), (calls, planner_calls), "{name}");
    }))
    .await;
}

#[tokio::test]
async fn a_writes_step_records_its_plan_first_and_keys_each_write() {
    let api = Scripted::new("api", vec![keyed("invoice", 60_000, false), at_most_once("email")], &[]);
    let ledger = memory_ledger();
    let recorder = Recorder::new();
    let wf = json!({"name": "bill", "steps": [
        {"id": "bill", "writes": [
            {"action": "api.invoice", "inputs": {"amount": "{{trigger.amount}}"}},
            {"action": "api.invoice", "inputs": {"amount": "{{trigger.amount}}"}},
            {"action": "api.email", "inputs": {"text": "billed {{trigger.amount}} EUR"}}
        ]}
    ]});
    let engine = engine(config("w1"), ledger.clone(), recorder.clone(), &[api.clone()], &[], &[wf]);
    assert_eq!(engine.start_run("bill", "r1", &engine::doc!({"amount": 12})).await.unwrap(), RunStatus::Succeeded);
    let effects = api.effects();
    assert_eq!(effects.len(), 3);
    // Two identical writes still get two keys: the index is part of the write key.
    assert_ne!(effects[0].key, effects[1].key);
    assert_eq!(effects[2].inputs["text"], "billed 12 EUR");
    let lines = recorder.lines();
    let plan_at = lines.iter().position(|l| l.starts_with("plan bill 3 reused=false")).expect("plan event");
    let first_call = lines.iter().position(|l| l.starts_with("call ")).expect("a call");
    assert!(plan_at < first_call, "the plan is recorded before the first write: {lines:?}");
    assert_eq!(ledger.get_run("r1").unwrap().unwrap().status, RunStatus::Succeeded);
}

#[tokio::test]
async fn a_paused_write_in_a_plan_resumes_from_the_plan() {
    let api = Scripted::new("api", vec![keyed("invoice", 60_000, false), at_most_once("email")], &[]);
    let ledger = memory_ledger();
    let wf = json!({"name": "bill", "steps": [
        {"id": "bill", "writes": [
            {"action": "api.invoice", "inputs": {"n": 1}},
            {"action": "api.email", "inputs": {"n": 2}},
            {"action": "api.invoice", "inputs": {"n": 3}}
        ]}
    ]});
    let engine = engine(config("w1"), ledger.clone(), Recorder::new(), &[api.clone()], &[], &[wf]);
    api.push_script(&[Fate::Apply, Fate::ApplyThenTimeout]);
    assert_eq!(engine.start_run("bill", "r1", &engine::doc!({})).await.unwrap(), RunStatus::Paused);
    assert_eq!(api.calls().len(), 2);
    let status = engine
        .resolve("r1", engine::ledger::Resolution::MarkDone { output: json!({"sent": true}) }, "dana")
        .await
        .unwrap();
    assert_eq!(status, RunStatus::Succeeded);
    // The first write replayed, the second was marked done, the third ran: three calls, three effects.
    assert_eq!((api.calls().len(), api.effects().len()), (3, 3));
}
