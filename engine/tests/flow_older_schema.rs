//! `flow` on a ledger of an older schema version, as workers of an older build left it or still use it: the reading
//! commands read it as it is, changing nothing (what its version lacks read as its migration would set it), and
//! `resolve` refuses to write it, saying what to do, since opening it to write would migrate it and the older
//! build's workers would then refuse it when they next start. Once a worker of this build has opened the ledger (and
//! migrated it), `resolve` records decisions in it again. The files are made with SQL, as each version's build wrote
//! them.

mod common;

use common::{flow, live_writer, snapshot};
use engine::ledger::sqlite::{MIGRATIONS, Options, SCHEMA_VERSION, SqliteLedger};
use engine::ledger::{Ledger, RunStatus};
use rusqlite::params;
use std::path::Path;

fn pause_reason() -> String {
    format!("at-most-once step payout: outcome unknown [key {}]", "ab".repeat(32))
}

/// A ledger file of schema version `version` (WAL) as a build of that version writes it, holding the runs `held`
/// (paused at a key), `done` (succeeded with the trigger `{"v":3}`, replayed twice where the version counts replays)
/// and `open` (running). Returns the connection, which holds the file as a worker does until it is dropped.
fn older_ledger(path: &Path, version: i64) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
    for migration in &MIGRATIONS[..usize::try_from(version).unwrap()] {
        conn.execute_batch(migration).unwrap();
    }
    conn.pragma_update(None, "user_version", version).unwrap();
    let runs = [
        ("held", "paused", Some(pause_reason()), &b"{}"[..], 0),
        ("done", "succeeded", None, br#"{"v":3}"#, 2),
        ("open", "running", None, b"{}", 0),
    ];
    for (run_id, status, reason, trigger, replays) in runs {
        let unfinished = (status == "running").then_some(1);
        match version {
            1 => conn.execute(
                "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms) \
                 VALUES (?1, 'wf', ?2, ?3, ?4, 1, 2)",
                params![run_id, status, trigger, reason],
            ),
            2 => conn.execute(
                "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms, unfinished) \
                 VALUES (?1, 'wf', ?2, ?3, ?4, 1, 2, ?5)",
                params![run_id, status, trigger, reason, unfinished],
            ),
            _ => conn.execute(
                "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms, unfinished, \
                 replays) VALUES (?1, 'wf', ?2, ?3, ?4, 1, 2, ?5, ?6)",
                params![run_id, status, trigger, reason, unfinished, replays],
            ),
        }
        .unwrap();
    }
    // A decision about `done` (older builds file none with the status it was made on).
    conn.execute(
        "INSERT INTO resolutions (run_id, key, resolution, by_whom, at_ms) VALUES ('done', ?1, '\"Retry\"', 'ann', 1)",
        [&[0xab_u8; 32][..]],
    )
    .unwrap();
    conn
}

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap()
}

fn older_versions() -> std::ops::Range<i64> {
    1..SCHEMA_VERSION
}

/// The ledger API reads an older file opened to read only as it is: every run, both listings, no replay counted
/// before version 3 and no history before version 4; a write fails; the file is not migrated.
#[test]
fn an_older_file_opened_to_read_only_is_read_as_it_is() {
    for version in older_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        drop(older_ledger(&path, version));
        let before = snapshot(dir.path());
        let l = SqliteLedger::open_read_only(&path, Options::default()).unwrap();
        assert_eq!(l.schema_version(), version);
        assert_eq!(l.paused_runs().unwrap(), ["held"], "v{version}");
        assert_eq!(l.unfinished_runs().unwrap(), ["open"], "v{version}");
        let done = l.get_run("done").unwrap().unwrap();
        let counted = if version >= 3 { 2 } else { 0 };
        assert_eq!(
            (done.status, done.replays, done.trigger.as_slice()),
            (RunStatus::Succeeded, counted, &br#"{"v":3}"#[..])
        );
        let mut lent = None;
        l.inspect_run("held", &mut |run| lent = run.map(|r| (r.status, r.replays))).unwrap();
        assert_eq!(lent, Some((RunStatus::Paused, 0)), "v{version}");
        assert_eq!(l.run_status("open").unwrap(), Some(RunStatus::Running), "v{version}");
        assert_eq!(l.replay_history("done").unwrap(), [], "v{version}");
        assert!(l.set_run_status("open", RunStatus::Failed, None, 3).is_err(), "v{version}: a write through it");
        drop(l);
        assert_eq!(snapshot(dir.path()), before, "v{version}: the file changed");
        assert_eq!(user_version(&path), version);
    }
}

/// `paused` and `replays` read a ledger of every older version, closed cleanly, without a byte of the directory
/// changing; `resolve` refuses a decision about its paused run (exit 2) saying what to do, and writes nothing. After
/// a worker of this build has opened the ledger, migrating it, the same decision is recorded.
#[test]
fn older_ledgers_are_read_and_a_decision_refused_until_a_worker_migrates_them() {
    for version in older_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let file = path.to_str().unwrap();
        drop(older_ledger(&path, version));
        let before = snapshot(dir.path());
        let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
        assert_eq!((code, stdout, stderr), (0, format!("held\twf\t{}\n", pause_reason()), String::new()), "v{version}");
        let (code, stdout, stderr) = flow(&["replays", "--ledger", file, "--run", "done"]);
        assert_eq!((code, stdout.as_str()), (0, ""), "v{version}: {stderr}");
        if version >= 3 {
            assert_eq!(
                stderr,
                "flow: note: run done was replayed 2 times; replays 1-2 left no entry in its history (begun before \
                 the ledger kept one, at schema version 4, or by a worker of an older build): the triggers they \
                 replaced are not known\n",
                "v{version}"
            );
        } else {
            assert_eq!(stderr, "", "v{version}: no replays counted");
        }
        let (code, _, stderr) = flow(&["replays", "--ledger", file, "--run", "nope"]);
        assert_eq!(code, 2, "v{version}: {stderr}");
        assert!(stderr.contains(r#"no run "nope""#), "v{version}: {stderr}");
        // `show` reads the run as its version has it: the replays it counts, none before version 3.
        let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "done"]);
        assert_eq!((code, stderr.as_str()), (0, ""), "v{version}");
        let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(shown["trigger"], serde_json::json!({"v": 3}), "v{version}");
        assert_eq!(shown["replays"], if version >= 3 { 2 } else { 0 }, "v{version}");
        assert_eq!((&shown["steps"], &shown["replay_history"]), (&serde_json::json!([]), &serde_json::json!([])));
        // A decision's seen status, kept since version 5, is left out where not known.
        let decisions = &shown["decisions"];
        assert_eq!(decisions.as_array().map(Vec::len), Some(1), "v{version}: {stdout}");
        assert_eq!(
            (&decisions[0]["decision"], &decisions[0]["by"]),
            (&serde_json::json!("retry"), &serde_json::json!("ann"))
        );
        assert!(decisions[0].get("seen_status").is_none(), "v{version}: {stdout}");
        let decision = ["resolve", "--ledger", file, "--run", "held", "--abort", "--by", "ann"];
        let (code, stdout, stderr) = flow(&decision);
        assert_eq!(code, 2, "v{version}: {stdout}{stderr}");
        let says = format!(
            "flow: {file}: a Flow ledger of an older schema: its schema version is {version}, older than this flow's \
             {SCHEMA_VERSION}; flow records a decision only in a ledger of its own schema version and does not \
             migrate one (the workers of the build that wrote it would then refuse the file when they next start): \
             record it with the flow of the workers' build, or once a worker of this build has opened the ledger, \
             which migrates it; nothing was written\n"
        );
        assert_eq!(stderr, says, "v{version}");
        // The run is checked first: one the ledger does not hold, or not paused, is refused as on any ledger.
        let (code, _, stderr) = flow(&["resolve", "--ledger", file, "--run", "nope", "--retry", "--by", "ann"]);
        assert_eq!(code, 2, "v{version}: {stderr}");
        assert!(stderr.contains(r#"no run "nope""#), "v{version}: {stderr}");
        let (code, _, stderr) = flow(&["resolve", "--ledger", file, "--run", "open", "--retry", "--by", "ann"]);
        assert_eq!(code, 1, "v{version}: {stderr}");
        assert!(stderr.contains("not paused"), "v{version}: {stderr}");
        assert_eq!(snapshot(dir.path()), before, "v{version}: flow changed the directory");
        assert_eq!(user_version(&path), version);
        // A worker of this build opens it: migrated, and the decision goes through.
        drop(SqliteLedger::open(&path, Options::default()).unwrap());
        assert_eq!(user_version(&path), SCHEMA_VERSION);
        let (code, stdout, stderr) = flow(&decision);
        assert_eq!((code, stdout.as_str()), (0, "run held is now failed\n"), "v{version}: {stderr}");
    }
}

/// A worker of the older build has the ledger open (its last writes still in the `-wal`) and is in the middle of a
/// transaction, holding the write lock, while a person looks: `paused` and `replays` read what it committed, wait
/// for nothing and change neither the file nor its log; `resolve` is refused for the schema, not as locked, and
/// leaves both as they were. The worker then commits and goes on as before, its file still of its own version.
#[test]
fn an_older_worker_holding_the_ledger_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let file = path.to_str().unwrap();
    let version = SCHEMA_VERSION - 1;
    let worker = older_ledger(&path, version);
    // Committed, and only in the log: the worker pauses another run.
    worker
        .execute(
            "UPDATE runs SET status = 'paused', reason = ?1, unfinished = NULL WHERE run_id = 'open'",
            [pause_reason()],
        )
        .unwrap();
    let wal = dir.path().join("ledger.db-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0, "the test needs the worker's pages in its log");
    let writer = live_writer(&path, "held");
    let (file_before, wal_before) = (std::fs::read(&path).unwrap(), std::fs::read(&wal).unwrap());
    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, format!("held\twf\t{0}\nopen\twf\t{0}\n", pause_reason()));
    let (code, _, stderr) = flow(&["replays", "--ledger", file, "--run", "done"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "open"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains(r#""status": "paused""#), "what the worker committed: {stdout}");
    let (code, _, stderr) = flow(&["resolve", "--ledger", file, "--run", "open", "--retry", "--by", "ann"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("older schema") && !stderr.contains("locked"), "{stderr}");
    assert_eq!(std::fs::read(&path).unwrap(), file_before, "the ledger file changed");
    assert_eq!(std::fs::read(&wal).unwrap(), wal_before, "the worker's log changed");
    writer.execute_batch("COMMIT").unwrap();
    drop(writer);
    worker
        .execute("UPDATE runs SET status = 'running', reason = NULL, unfinished = 1 WHERE run_id = 'open'", [])
        .unwrap();
    drop(worker);
    assert_eq!(user_version(&path), version);
    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!((code, stdout.lines().count()), (0, 1), "{stderr}");
}
