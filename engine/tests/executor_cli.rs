//! The `flow` admin binary against a real ledger file: list paused runs, resolve one, and the exit codes.
#![cfg(not(madsim))]
#![allow(clippy::cloned_ref_to_slice_refs, reason = "the clone coerces Arc<Scripted> to Arc<dyn Connector>")]

mod common;

use common::*;
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, RunStatus};
use std::sync::Arc;

#[tokio::test]
async fn list_and_resolve_paused_runs_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let connector =
        Scripted::new("bank", vec![at_most_once("payout")], &[Fate::ApplyThenTimeout, Fate::ApplyThenTimeout]);
    let ledger: Arc<dyn Ledger> = Arc::new(SqliteLedger::open(&path, Options::default()).unwrap());
    let engine = engine(
        config("w1"),
        ledger.clone(),
        Recorder::new(),
        &[connector.clone()],
        &[],
        &[one_step("wf", "bank.payout")],
    );
    for run in ["r1", "r2"] {
        assert_eq!(engine.start_run("wf", run, &engine::doc!({"amount": 1})).await.unwrap(), RunStatus::Paused);
    }

    let (code, stdout, _) = flow(&["paused", "--ledger", file]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].starts_with("r1\twf\t") && lines[0].contains("at-most-once"), "{stdout}");

    // (arguments, exit code, what stdout or stderr says)
    let table: &[(&[&str], i32, &str)] = &[
        (&["resolve", "--ledger", file, "--run", "r1", "--mark-done", "{not json", "--by", "ann"], 2, "not valid JSON"),
        (&["resolve", "--ledger", file, "--run", "nope", "--retry", "--by", "ann"], 2, r#"no run "nope""#),
        (&["resolve", "--ledger", "/nonexistent/flow.db", "--run", "r1", "--retry", "--by", "ann"], 2, "no ledger"),
        (
            &["resolve", "--ledger", file, "--run", "r1", "--mark-done", r#"{"id":"po_9"}"#, "--by", "ann"],
            0,
            "now running",
        ),
        (&["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"], 1, "not paused"),
        (&["resolve", "--ledger", file, "--run", "r2", "--abort", "--by", "bo"], 0, "now failed"),
    ];
    for (args, want_code, says) in table {
        let (code, stdout, stderr) = flow(args);
        assert_eq!(code, *want_code, "{args:?}: {stdout}{stderr}");
        assert!(stdout.contains(says) || stderr.contains(says), "{args:?}: {stdout}{stderr}");
    }
    // A worker applies the mark-done; no call is made.
    assert_eq!(resume_all(&engine).await, vec![("r1".to_string(), RunStatus::Succeeded)]);
    assert_eq!(connector.calls().len(), 2);
    assert_eq!(ledger.get_run("r2").unwrap().unwrap().reason.as_deref(), Some("aborted by bo"));
    assert_eq!(ledger.resolutions("r1").unwrap()[0].by, "ann");
}
