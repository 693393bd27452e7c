//! Two people deciding about one paused run at once, each with `flow resolve`: exactly one decision is recorded and
//! the other is refused (exit 1, "not paused"). Each used to pass its check that the run was paused, then both wrote;
//! the engine applies the last decision filed, so a retry filed after a mark-done sent the email again.

mod common;

use common::{ledger_with_paused_runs, live_writer};
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, Resolution, RunStatus};
use std::process::{Command, Stdio};

#[test]
fn two_decisions_at_once_record_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["r1"]));
    // A live writer holds the write lock while both commands start: each reads the run paused (WAL readers are not
    // blocked), then waits for the lock (busy_timeout, 5 s) to write. Released, they write one after the other.
    let writer = live_writer(&path, "r1");
    let decide = |decision: &[&str], by: &str| {
        Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(["resolve", "--ledger", file, "--run", "r1", "--by", by])
            .args(decision)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run flow")
    };
    let ann = decide(&["--mark-done", r#"{"id":"msg_1"}"#], "ann");
    let bob = decide(&["--retry"], "bob");
    // Both are past their read by now on any machine that runs this suite; the lock outlasts this wait.
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    writer.execute_batch("ROLLBACK").unwrap();
    drop(writer);
    let outcomes: Vec<(i32, String)> = [ann, bob]
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("flow finishes");
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            (out.status.code().unwrap_or(-1), text)
        })
        .collect();
    let codes: Vec<i32> = outcomes.iter().map(|(code, _)| *code).collect();
    assert!(codes == [0, 1] || codes == [1, 0], "exactly one decision is accepted: {outcomes:?}");
    let (_, refused) = outcomes.iter().find(|(code, _)| *code == 1).expect("one refused");
    assert!(refused.contains("run \"r1\" is running, not paused"), "{refused}");
    let ledger = SqliteLedger::open(&path, Options::default()).unwrap();
    let filed = ledger.resolutions("r1").unwrap();
    assert_eq!(filed.len(), 1, "{filed:?}");
    let winner = if codes[0] == 0 { "ann" } else { "bob" };
    assert_eq!(filed[0].by, winner);
    assert_eq!(matches!(filed[0].resolution, Resolution::Retry), winner == "bob");
    assert_eq!(ledger.run_status("r1").unwrap(), Some(RunStatus::Running));
}
