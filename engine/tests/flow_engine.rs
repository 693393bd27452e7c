//! `flow` against ledgers a real engine run wrote (a run of the test connector, paused at an at-most-once step whose
//! outcome it cannot know): one damaged on disk afterwards, and decisions whose output is not a JSON object. Like
//! `executor_cli.rs`, this drives a real engine and is left out of the simulation build.
#![cfg(not(madsim))]
#![allow(clippy::cloned_ref_to_slice_refs, reason = "the clone coerces Arc<Scripted> to Arc<dyn Connector>")]

mod common;

use common::*;
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, RunStatus};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// The bank's workflow: a payout (at most once), then a note that takes the payout's output whole and its `id`.
fn payout_then_note() -> Value {
    json!({ "name": "wf", "steps": [
        { "id": "pay", "action": "bank.payout", "inputs": { "amount": "{{trigger.amount}}" } },
        { "id": "note", "action": "bank.note",
          "inputs": { "whole": "{{steps.pay.output}}", "id": "{{steps.pay.output.id}}" } }
    ]})
}

fn bank(script: &[Fate]) -> Arc<Scripted> {
    Scripted::new("bank", vec![at_most_once("payout"), keyed("note", 86_400_000, false)], script)
}

/// A ledger at `path` in which the engine ran `runs`, each paused at its payout, whose answer was lost after the
/// bank committed it; closed, so that its pages are all in the file.
async fn ledger_with_real_paused_runs(path: &Path, runs: &[&str]) {
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(path, Options::default()).unwrap());
    let connector = bank(&vec![Fate::ApplyThenTimeout; runs.len()]);
    let engine = engine(config("w1"), ledger, Recorder::new(), &[connector.clone()], &[], &[payout_then_note()]);
    for run in runs {
        assert_eq!(engine.start_run("wf", run, &engine::doc!({"amount": 1})).await.unwrap(), RunStatus::Paused);
    }
    assert_eq!(connector.effects().len(), runs.len());
}

/// A ledger a page of which is damaged (a failing disk, a stray write) is a storage error, exit 1, for both
/// commands, the message naming the file, saying the ledger is damaged and how to check it, and the file is left as
/// it was. Read through a damaged page, SQLite says "database disk image is malformed" (`SQLITE_CORRUPT`) about a
/// file that passed as a ledger: it used to be said raw ("the ledger file is corrupt or not a ledger"), which reads
/// as a file that is not a ledger (exit 2) while the exit was 1, and `paused` listed the runs (it never reads the
/// steps) while `resolve` failed. The same holds when the damage is on page 1, in the schema `flow` reads to check
/// that the file is a ledger: that used to be "not a Flow ledger", exit 2.
#[tokio::test]
async fn a_damaged_ledger_is_a_storage_error_for_both_commands() {
    let dir = tempfile::tempdir().unwrap();
    let sound = dir.path().join("sound.db");
    ledger_with_real_paused_runs(&sound, &["r1"]).await;
    // (the file, what is damaged, whether `paused` reads it)
    let mut cases = Vec::new();
    for (table, listed) in [("steps", true), ("runs", false)] {
        let path = dir.path().join(format!("damaged-{table}.db"));
        std::fs::copy(&sound, &path).unwrap();
        let page = damage_root_page(&path, table);
        cases.push((path, format!("page {page}, the root of {table}"), listed));
    }
    {
        // The b-tree of the schema starts at byte 100 of page 1, after the 100-byte header, which is left as it was.
        use std::io::{Seek, SeekFrom, Write};
        let path = dir.path().join("damaged-schema.db");
        std::fs::copy(&sound, &path).unwrap();
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(100)).unwrap();
        file.write_all(&[0xff; 12]).unwrap();
        cases.push((path, "the schema on page 1".to_string(), false));
    }
    let before = snapshot(dir.path());
    for (path, damage, listed) in &cases {
        let file = path.to_str().unwrap();
        let mut said = Vec::new();
        let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
        if *listed {
            // The listing reads only the runs, which are whole.
            assert_eq!(code, 0, "{damage}: {stdout}{stderr}");
            assert!(stdout.starts_with("r1\twf\t") && stdout.lines().count() == 1, "{damage}: {stdout}");
        } else {
            said.push((code, stdout, stderr));
        }
        for decision in [&["--retry"][..], &["--abort"], &["--mark-done", r#"{"id":"po_1"}"#]] {
            let mut args = vec!["resolve", "--ledger", file, "--run", "r1", "--by", "ann"];
            args.extend_from_slice(decision);
            said.push(flow(&args));
        }
        for (code, stdout, stderr) in said {
            assert_eq!(code, 1, "{damage}: {stdout}{stderr}");
            assert_eq!(stderr.lines().count(), 1, "{damage}: {stderr}");
            assert!(stderr.starts_with(&format!("flow: {file}: ")), "{damage}: {stderr}");
            assert!(stderr.contains("the ledger file is damaged"), "{damage}: {stderr}");
            assert!(stderr.contains("database disk image is malformed"), "{damage}: {stderr}");
            assert!(stderr.contains(&format!(r#"sqlite3 {file} "PRAGMA integrity_check""#)), "{damage}: {stderr}");
            assert!(!stderr.contains("not a Flow ledger") && !stderr.contains("not a ledger"), "{damage}: {stderr}");
        }
        assert_eq!(snapshot(dir.path()), before, "{damage}: a refusal changed the directory");
    }
    // The sound copy is resolved as ever.
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", sound.to_str().unwrap(), "--run", "r1", "--retry", "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (0, "run r1 is now running\n"), "{stderr}");
}

/// A step's output is whatever JSON the API answered (`Outcome::Applied` holds any document, and the engine stores
/// and renders it as it is), so `--mark-done` takes any JSON value, not only an object: the engine adopts it as the
/// step's output, a later step's `{{steps.pay.output}}` gets it whole, and `{{steps.pay.output.id}}` of a value
/// that is no object renders as `null`, as any path that does not resolve does.
#[tokio::test]
async fn mark_done_takes_any_json_value_as_the_step_s_output() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let outputs = [
        ("r1", "null", json!(null)),
        ("r2", "1", json!(1)),
        ("r3", r#""x""#, json!("x")),
        ("r4", "[1]", json!([1])),
        ("r5", r#"{"id":"po_9"}"#, json!({"id": "po_9"})),
    ];
    let runs: Vec<&str> = outputs.iter().map(|(run, _, _)| *run).collect();
    ledger_with_real_paused_runs(&path, &runs).await;
    for (run, json, _) in &outputs {
        let (code, stdout, stderr) =
            flow(&["resolve", "--ledger", file, "--run", run, "--mark-done", json, "--by", "ann"]);
        assert_eq!((code, stdout), (0, format!("run {run} is now running\n")), "{json}: {stderr}");
    }
    // A worker applies each decision: the payout is not sent again, and the note gets the output marked done.
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&path, Options::default()).unwrap());
    let connector = bank(&[]);
    let engine = engine(config("w2"), ledger, Recorder::new(), &[connector.clone()], &[], &[payout_then_note()]);
    let resumed = resume_all(&engine).await;
    assert_eq!(resumed, runs.iter().map(|run| (run.to_string(), RunStatus::Succeeded)).collect::<Vec<_>>());
    assert!(connector.calls().iter().all(|call| call.action == "note"), "{:?}", connector.calls());
    let notes: Vec<Value> = connector.effects().into_iter().map(|effect| effect.inputs).collect();
    let expected: Vec<Value> = outputs
        .iter()
        .map(|(_, _, output)| json!({ "whole": output, "id": output.get("id").cloned().unwrap_or(Value::Null) }))
        .collect();
    assert_eq!(notes, expected);
}
