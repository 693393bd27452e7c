//! `flow replays`: a run's replay history ([`engine::ledger::Ledger::replay_history`]) for a person, one replay a
//! line, and its refusals. The runs and their replays are made with the ledger API alone.

mod common;

use common::{flow, snapshot};
use engine::ledger::sqlite::{Options, SqliteLedger, Synchronous};
use engine::ledger::{Ledger, Replay, RunRecord, RunStatus};
use std::path::Path;

/// A new ledger at `path` (fixture writes: no fsync per commit).
fn ledger_at(path: &Path) -> SqliteLedger {
    SqliteLedger::open(path, Options { synchronous: Synchronous::Normal, ..Options::default() }).unwrap()
}

fn finished_run(run_id: &str, trigger: &[u8]) -> RunRecord {
    RunRecord {
        run_id: run_id.into(),
        workflow: "wf".into(),
        status: RunStatus::Succeeded,
        trigger: trigger.to_vec(),
        reason: None,
        created_ms: 1,
        updated_ms: 1,
        replays: 0,
    }
}

/// Replays `run_id` with `trigger` at `now_ms`, and ends the replay's drive as succeeded.
fn replay(ledger: &SqliteLedger, run_id: &str, trigger: &[u8], now_ms: u64) {
    assert_eq!(ledger.begin_replay(run_id, trigger, now_ms).unwrap(), Replay::Begun);
    let replays = ledger.get_run(run_id).unwrap().unwrap().replays;
    assert!(ledger.finish_drive(run_id, replays, RunStatus::Succeeded, None, now_ms + 1).unwrap());
}

/// Each replay is a line: its number, when it began (UTC), the trigger it replaced and the one it set, oldest first;
/// the last one set the run's trigger. A run never replayed shows nothing. The file is only read.
#[test]
fn replays_lists_each_replay_with_the_trigger_it_replaced_and_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    ledger.create_run(finished_run("r1", br#"{"amount":5}"#)).unwrap();
    ledger.create_run(finished_run("never", br#"{"amount":1}"#)).unwrap();
    replay(&ledger, "r1", br#"{"amount":6}"#, 1_714_564_800_123);
    replay(&ledger, "r1", br#"{"amount":7,"note":"a\\\"b"}"#, 1_714_651_200_000);
    drop(ledger);
    let before = snapshot(dir.path());
    let (code, stdout, stderr) = flow(&["replays", "--ledger", file, "--run", "r1"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(
        stdout,
        "1\t2024-05-01T12:00:00.123Z\t{\"amount\":5}\t{\"amount\":6}\n\
         2\t2024-05-02T12:00:00.000Z\t{\"amount\":6}\t{\"amount\":7,\"note\":\"a\\\\\\\"b\"}\n"
    );
    // Each trigger field is the JSON the ledger holds.
    let last = stdout.lines().last().unwrap().split('\t').nth(3).unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(last).unwrap()["note"], "a\\\"b");
    let (code, stdout, stderr) = flow(&["replays", "--ledger", file, "--run", "never"]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (0, "", ""));
    assert_eq!(snapshot(dir.path()), before, "replays changed the directory");
}

/// A trigger holding what would forge a line or a column, or rewrite a terminal (a line separator, bidirectional
/// controls, DEL and C1 controls, which JSON leaves raw in a string), is written with JSON's own `\uXXXX` for them:
/// still valid JSON, the same document, one line and one column.
#[test]
fn replays_escapes_what_would_forge_a_line_in_a_trigger_as_json_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    let forging = "{\"n\":\"a\u{2028}b\u{202e}c\u{7f}\u{9b}31m\"}";
    ledger.create_run(finished_run("r\t1", forging.as_bytes())).unwrap();
    replay(&ledger, "r\t1", b"{}", 0);
    drop(ledger);
    let (code, stdout, stderr) = flow(&["replays", "--ledger", file, "--run", "r\t1"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    assert_eq!(stdout, "1\t1970-01-01T00:00:00.000Z\t{\"n\":\"a\\u2028b\\u202ec\\u007f\\u009b31m\"}\t{}\n");
    let replaced: serde_json::Value = serde_json::from_str(stdout.split('\t').nth(2).unwrap()).unwrap();
    assert_eq!(replaced, serde_json::from_str::<serde_json::Value>(forging).unwrap());
}

/// Replays with no entry in the history (begun before the ledger kept one, or by a worker of an older build, which
/// counts a replay without filing it) are named on standard error; a trigger they make unknown is an empty field.
#[test]
fn replays_names_the_replays_the_history_does_not_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    ledger.create_run(finished_run("r1", br#"{"v":0}"#)).unwrap();
    replay(&ledger, "r1", br#"{"v":1}"#, 10);
    drop(ledger);
    // A worker of schema version 3 replays it: the count and the trigger, no entry.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE runs SET replays = replays + 1, trigger = CAST('{\"v\":2}' AS BLOB) WHERE run_id = 'r1'",
            [],
        )
        .unwrap();
    }
    let ledger = ledger_at(&path);
    replay(&ledger, "r1", br#"{"v":3}"#, 30);
    drop(ledger);
    let (code, stdout, stderr) = flow(&["replays", "--ledger", file, "--run", "r1"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout, "1\t1970-01-01T00:00:00.010Z\t{\"v\":0}\t\n3\t1970-01-01T00:00:00.030Z\t{\"v\":2}\t{\"v\":3}\n",
        "what replay 1 set was replaced by replay 2, which left no entry"
    );
    assert!(stderr.starts_with("flow: note: run r1 was replayed 3 times; replays 2 left no entry"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

/// Bad input is refused with exit 2 and a message naming it: a blank `--run` before anything is opened (even where
/// there is no ledger), a run the ledger does not hold, a file that is no ledger; the directory is left as it was.
#[test]
fn replays_refuses_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_at(&path));
    let not_a_ledger = dir.path().join("notes.txt");
    std::fs::write(&not_a_ledger, "hello").unwrap();
    let missing = dir.path().join("missing.db");
    let before = snapshot(dir.path());
    let cases: &[(&[&str], &str)] = &[
        (&["--ledger", file, "--run", " "], "flow: --run must name a run\n"),
        (&["--ledger", missing.to_str().unwrap(), "--run", ""], "flow: --run must name a run\n"),
        (&["--ledger", file, "--run", "r9"], &format!("flow: {file}: no run \"r9\" in this ledger\n")),
        (
            &["--ledger", not_a_ledger.to_str().unwrap(), "--run", "r9"],
            &format!("flow: {}: not a Flow ledger: not a SQLite database\n", not_a_ledger.display()),
        ),
        (
            &["--ledger", missing.to_str().unwrap(), "--run", "r9"],
            &format!("flow: no ledger at {}\n", missing.display()),
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["replays"];
        all.extend_from_slice(args);
        let (code, stdout, stderr) = flow(&all);
        assert_eq!((code, stdout.as_str(), stderr.as_str()), (2, "", *says), "{all:?}");
        assert_eq!(snapshot(dir.path()), before, "{all:?} changed the directory");
    }
}
