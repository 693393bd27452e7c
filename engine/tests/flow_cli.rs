//! The `flow` admin binary's refusals: what it must not record and which files it must not open, each leaving the
//! ledger (or the file that is not one) as it was. The paused runs are made with the ledger API alone, so this runs
//! in the simulation build too (`executor_cli.rs` drives a real engine and is left out of it).

mod common;

use common::{fixture_claim, flow, flow_in_time, ledger_with_paused_runs, live_writer, snapshot};
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, Resolution, RunStatus};
use std::path::Path;
use std::process::Command;

fn assert_untouched(ledger: &SqliteLedger, run_id: &str, context: &str) {
    assert_eq!(ledger.run_status(run_id).unwrap(), Some(RunStatus::Paused), "{context}");
    assert_eq!(ledger.resolutions(run_id).unwrap(), vec![], "{context}");
}

#[test]
fn mark_done_is_read_by_the_strict_parser() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_with_paused_runs(&path, &["r1"]);
    // (--mark-done, what the refusal names)
    let refused: &[(&str, &str)] = &[
        (r#"{"id":"a","id":"b"}"#, r#"duplicate object key "id""#),
        (r#"{"amount":9007199254740993}"#, "the integer 9007199254740993 cannot be represented exactly"),
        (r#"{"amount":9007199254740993.0}"#, "the integer 9007199254740993 cannot be represented exactly"),
        (r#"{"amount":1e400}"#, "outside the range of IEEE-754 doubles"),
        (r#"{"note":"\ud800"}"#, "lone UTF-16 surrogate"),
        ("{not json", "invalid JSON at byte 1"),
    ];
    for (json, says) in refused {
        let (code, stdout, stderr) =
            flow(&["resolve", "--ledger", file, "--run", "r1", "--mark-done", json, "--by", "ann"]);
        assert_eq!(code, 2, "{json}: {stdout}{stderr}");
        assert!(stderr.contains("--mark-done") && stderr.contains(says), "{json}: {stderr}");
        assert_untouched(&ledger, "r1", json);
    }
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "r1", "--mark-done", r#"{"id":"po_9","n":1.0}"#, "--by", "ann"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let recorded = &ledger.resolutions("r1").unwrap()[0];
    assert_eq!(recorded.resolution, Resolution::MarkDone { output: serde_json::json!({"id": "po_9", "n": 1}) });
}

#[test]
fn resolve_refuses_a_blank_by() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_with_paused_runs(&path, &["r1"]);
    for by in [
        "",
        " ",
        "\t\n",
        "\u{200b}",
        "\u{feff} \u{2060}",
        "\u{a0}",
        "\u{3164}",
        "\u{2066}\u{202e}",
        "\u{301}",
        "\u{2800}",
    ] {
        for decision in [&["--retry"][..], &["--abort"], &["--mark-done", "{}"]] {
            let mut args = vec!["resolve", "--ledger", file, "--run", "r1"];
            args.extend_from_slice(decision);
            args.extend_from_slice(&["--by", by]);
            let (code, stdout, stderr) = flow(&args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(stderr.contains("--by must name the person deciding"), "{args:?}: {stderr}");
            assert_untouched(&ledger, "r1", &format!("{args:?}"));
        }
    }
}

/// A `--by` with a control character (a tab, a line break, an escape, a C1 control) is bad input, refused by the rule
/// the ledger applies (`engine::ledger::by_refusal`) before anything is opened: exit 2, the ledger's directory as it
/// was. It was refused only by the ledger, after `resolve` had opened the file to write, with exit 1.
#[test]
fn resolve_refuses_a_by_with_a_control_character_before_opening_the_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["r1"]));
    let missing = dir.path().join("missing.db");
    let before = snapshot(dir.path());
    // The line and paragraph separators and the bidirectional formatting characters, which `paused` escapes as it
    // does control characters, are refused with them (QA, stop 51: they were recorded).
    for by in [
        "a\tb",
        "ann\n",
        "ann\r\nbo",
        "x\u{1b}[31m",
        "a\u{85}b",
        "al\u{7f}",
        "a\u{2028}b",
        "a\u{2029}",
        "\u{202e}evil",
        "ann\u{2066}",
        "bo\u{200f}",
        "\u{61c}x",
    ] {
        let refusal = engine::ledger::by_refusal(by).unwrap_or_else(|| panic!("{by:?} accepted"));
        assert!(refusal.starts_with("must name the person deciding on one line, without control characters"), "{by:?}");
        for ledger in [file, missing.to_str().unwrap()] {
            for decision in [&["--retry"][..], &["--abort"], &["--mark-done", "{}"]] {
                let mut args = vec!["resolve", "--ledger", ledger, "--run", "r1"];
                args.extend_from_slice(decision);
                args.extend_from_slice(&["--by", by]);
                let (code, stdout, stderr) = flow(&args);
                assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
                assert!(stderr.contains("--by must name the person deciding on one line"), "{args:?}: {stderr}");
                assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
                assert_eq!(snapshot(dir.path()), before, "{args:?} changed the ledger's directory");
            }
        }
    }
    let ledger = SqliteLedger::open(&path, Options::default()).unwrap();
    assert_untouched(&ledger, "r1", "after the refusals");
}

/// A blank `--run` (empty, or white space only) names no run: bad input, exit 2, told before anything is opened,
/// even when the ledger holds a run of that id (it was resolved: "run  is now running").
#[test]
fn resolve_refuses_a_blank_run_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["", " ", "r1"]));
    let before = snapshot(dir.path());
    for run in ["", " ", "\t", " \u{3000}\n"] {
        for decision in [&["--retry"][..], &["--abort"], &["--mark-done", "{}"]] {
            let mut args = vec!["resolve", "--ledger", file, "--run", run];
            args.extend_from_slice(decision);
            args.extend_from_slice(&["--by", "ann"]);
            let (code, stdout, stderr) = flow(&args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(stderr.contains("--run must name the paused run"), "{args:?}: {stderr}");
            assert_eq!(stdout, "", "{args:?}");
            assert_eq!(snapshot(dir.path()), before, "{args:?} changed the ledger's directory");
        }
    }
    let ledger = SqliteLedger::open(&path, Options::default()).unwrap();
    for run in ["", " ", "r1"] {
        assert_untouched(&ledger, run, &format!("{run:?} after the refusals"));
    }
}

#[test]
fn paused_and_resolve_refuse_a_file_that_is_not_a_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let empty_database = dir.path().join("empty-database.db");
    {
        // A SQLite database that has held a table: a header and pages, no schema.
        let conn = rusqlite::Connection::open(&empty_database).unwrap();
        conn.execute_batch("CREATE TABLE t (x); DROP TABLE t;").unwrap();
    }
    let other_database = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&other_database).unwrap();
        conn.execute_batch("CREATE TABLE runs (x); INSERT INTO runs VALUES (1);").unwrap();
    }
    let cases: &[(&str, &[u8], &str)] = &[
        ("empty.db", b"", "the file is empty"),
        ("short.db", b"SQLite", "not a SQLite database"),
        ("text.db", b"run_id,status\nr1,paused\n", "not a SQLite database"),
        ("garbage.db", &[0xff; 4096], "not a SQLite database"),
    ];
    for (name, bytes, _) in cases {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let mut checks: Vec<(String, &str)> =
        cases.iter().map(|(name, _, says)| (dir.path().join(name).to_str().unwrap().to_string(), *says)).collect();
    checks.push((empty_database.to_str().unwrap().to_string(), "a SQLite database without the ledger schema"));
    checks.push((other_database.to_str().unwrap().to_string(), "a SQLite database without the ledger schema"));
    checks.push((dir.path().to_str().unwrap().to_string(), "it is a directory"));
    let before = snapshot(dir.path());
    assert_eq!(before.iter().find(|(name, _)| name == "empty.db").map(|(_, bytes)| bytes.len()), Some(0));
    for (file, says) in &checks {
        let commands: [&[&str]; 2] =
            [&["paused", "--ledger", file], &["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"]];
        for args in commands {
            let (code, stdout, stderr) = flow(args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(stderr.contains(file.as_str()) && stderr.contains("not a Flow ledger"), "{args:?}: {stderr}");
            assert!(stderr.contains(says), "{args:?}: {stderr}");
            assert_eq!(snapshot(dir.path()), before, "{args:?} changed the directory");
        }
    }
    let (code, _, stderr) = flow(&["paused", "--ledger", &dir.path().join("missing.db").to_string_lossy()]);
    assert_eq!((code, stderr.contains("no ledger at")), (2, true), "{stderr}");
    assert_eq!(snapshot(dir.path()), before);
}

/// What `dir` holds: each name with its kind of file, and a regular file's bytes (nothing else is opened).
fn kinds(dir: &Path) -> Vec<(String, String, Vec<u8>)> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let kind = entry.file_type().unwrap();
            let bytes = if kind.is_file() { std::fs::read(entry.path()).unwrap() } else { Vec::new() };
            (entry.file_name().to_string_lossy().into_owned(), format!("{kind:?}"), bytes)
        })
        .collect();
    entries.sort();
    entries
}

/// A path that is no regular file (a character device such as `/dev/zero` or `/dev/null`, a FIFO, a socket, a
/// directory, or a symbolic link to one) is refused as no ledger (exit 2), the message naming it and saying what it
/// is: `flow` looks at it without opening it, so a FIFO does not block it, and nothing is made beside it. Both
/// character devices used to be called "empty", as were the FIFO and the socket.
#[cfg(unix)]
#[test]
fn paused_and_resolve_refuse_what_is_not_a_regular_file() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.db");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::from(0o644), 0)
        .expect("make a FIFO");
    let socket = dir.path().join("socket.db");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).expect("make a socket");
    let subdir = dir.path().join("ledgers.db");
    std::fs::create_dir(&subdir).unwrap();
    let link = dir.path().join("null-link.db");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let cases = [
        (Path::new("/dev/zero"), "it is a character device, not a regular file"),
        (Path::new("/dev/null"), "it is a character device, not a regular file"),
        (&link, "it is a character device, not a regular file"),
        (&fifo, "it is a FIFO (a named pipe), not a regular file"),
        (&socket, "it is a socket, not a regular file"),
        (&subdir, "it is a directory, not a regular file"),
    ];
    let before = kinds(dir.path());
    for (path, says) in cases {
        let file = path.to_str().unwrap();
        for args in
            [&["paused", "--ledger", file][..], &["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"]]
        {
            let (code, stdout, stderr) = flow_in_time(args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert_eq!(stderr, format!("flow: {file}: not a Flow ledger: {says}\n"), "{args:?}");
            assert_eq!(kinds(dir.path()), before, "{args:?} changed the directory");
        }
    }
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    for made in ["/dev/zero-wal", "/dev/zero-shm", "/dev/null-wal", "/dev/null-shm"] {
        assert!(!Path::new(made).exists(), "{made} was made beside a device");
    }
}

/// A database that looks like a ledger at a glance (a `runs` table, a schema version) but is not one of a ledger's
/// schema is refused without being changed, and so is a ledger of a newer schema: `flow` writes into neither. A
/// ledger of an older schema is listed as it is, and a decision about it refused: `flow` does not migrate a ledger (an
/// older worker still using it would then refuse it). A ledger in another journal mode than the engine's is read as it
/// is: a listing, or a refusal, leaves it byte for byte as it was.
#[test]
fn a_ledger_of_another_schema_or_journal_mode_is_left_as_it_was() {
    use engine::ledger::sqlite::{MIGRATIONS, SCHEMA_VERSION};
    let dir = tempfile::tempdir().unwrap();
    let older = dir.path().join("older.db");
    {
        let conn = rusqlite::Connection::open(&older).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        for migration in &MIGRATIONS[..MIGRATIONS.len() - 1] {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION - 1).unwrap();
        let reason = format!("at-most-once step payout: outcome unknown [key {}]", "ab".repeat(32));
        conn.execute(
            "INSERT INTO runs (run_id, workflow, status, trigger, reason, created_ms, updated_ms) \
             VALUES ('r1', 'wf', 'paused', X'7b7d', ?1, 1, 2)",
            [reason],
        )
        .unwrap();
    }
    let newer = dir.path().join("newer.db");
    {
        let conn = rusqlite::Connection::open(&newer).unwrap();
        for migration in MIGRATIONS {
            conn.execute_batch(migration).unwrap();
        }
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
    }
    let lookalike = dir.path().join("lookalike.db");
    {
        let conn = rusqlite::Connection::open(&lookalike).unwrap();
        conn.execute_batch("CREATE TABLE runs (x); INSERT INTO runs VALUES (1);").unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION).unwrap();
    }
    let before = snapshot(dir.path());
    let older_file = older.to_str().unwrap();
    let (code, stdout, stderr) = flow(&["paused", "--ledger", older_file]);
    let listed = format!("r1\twf\tat-most-once step payout: outcome unknown [key {}]\n", "ab".repeat(32));
    assert_eq!((code, stdout), (0, listed), "{stderr}");
    assert_eq!(snapshot(dir.path()), before, "listing an older ledger changed the directory");
    let newer_says = format!(
        "a Flow ledger of another schema: its schema version is {}, newer than this flow's {SCHEMA_VERSION}",
        SCHEMA_VERSION + 1
    );
    let older_says = format!(
        "{older_file}: a Flow ledger of an older schema: its schema version is {}, older than this flow's \
         {SCHEMA_VERSION}",
        SCHEMA_VERSION - 1
    );
    let cases = [
        (&older, &["resolve"][..], older_says.as_str()),
        (&newer, &["paused", "resolve"], newer_says.as_str()),
        (&lookalike, &["paused", "resolve"], "not a Flow ledger: a SQLite database without the ledger's table"),
    ];
    for (file, commands, says) in cases {
        let file = file.to_str().unwrap();
        for command in commands {
            let args = match *command {
                "paused" => vec!["paused", "--ledger", file],
                _ => vec!["resolve", "--ledger", file, "--run", "r1", "--abort", "--by", "al"],
            };
            let (code, stdout, stderr) = flow(&args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(stderr.contains(says), "{args:?}: {stderr}");
            assert_eq!(snapshot(dir.path()), before, "{args:?} changed the directory");
        }
    }
    let rollback = dir.path().join("rollback-journal.db");
    drop(ledger_with_paused_runs(&rollback, &["r1"]));
    {
        let conn = rusqlite::Connection::open(&rollback).unwrap();
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0)).unwrap();
        assert_eq!(mode, "delete");
    }
    let before = snapshot(dir.path());
    let file = rollback.to_str().unwrap();
    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!((code, stdout.lines().count()), (0, 1), "{stdout}{stderr}");
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r9", "--abort", "--by", "al"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(snapshot(dir.path()), before, "a listing or a refusal changed the ledger");
    // A run that is not paused: the ledger refuses the decision (exit 1), read without being changed.
    {
        let conn = rusqlite::Connection::open(&rollback).unwrap();
        conn.execute("UPDATE runs SET status = 'running' WHERE run_id = 'r1'", []).unwrap();
    }
    let before = snapshot(dir.path());
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r1", "--abort", "--by", "al"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("not paused"), "{stderr}");
    assert_eq!(snapshot(dir.path()), before, "a refused decision changed the ledger");
}

/// A `-wal` a worker left with pages in it (it died before checkpointing, or is running) stays as it is through a
/// listing: the listing's connection does not copy it into the ledger file when it closes.
#[test]
fn a_listing_leaves_a_worker_s_write_ahead_log_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    drop(ledger_with_paused_runs(&path, &["r1"]));
    {
        // A writer that does not checkpoint when it closes, as a killed worker would not.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).unwrap();
        conn.execute("UPDATE runs SET workflow = 'wf2' WHERE run_id = 'r1'", []).unwrap();
    }
    let wal = dir.path().join("flow.db-wal");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0, "the test needs a write-ahead log with pages");
    let (ledger_before, wal_before) = (std::fs::read(&path).unwrap(), std::fs::read(&wal).unwrap());
    let (code, stdout, stderr) = flow(&["paused", "--ledger", path.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("r1\twf2"), "the listing reads the log's pages: {stdout}");
    assert_eq!(std::fs::read(&path).unwrap(), ledger_before, "the ledger file changed");
    assert_eq!(std::fs::read(&wal).unwrap(), wal_before, "the write-ahead log changed");
}

/// The read-only check accepts a real ledger, whether another process has it open (in WAL mode) or not.
#[test]
fn paused_lists_a_ledger_open_elsewhere_and_a_closed_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_with_paused_runs(&path, &["r1", "r2"]);
    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(stdout.lines().map(|l| l.split('\t').next().unwrap()).collect::<Vec<_>>(), ["r1", "r2"]);
    drop(ledger);
    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!((code, stdout.lines().count()), (0, 2), "{stdout}{stderr}");
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r2", "--retry", "--by", "bo"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("now running"), "{stdout}");
}

/// A run id the ledger does not hold is bad input: exit 2, the message names the run and the file, and the ledger
/// file is left byte for byte as it was. A run that is there but not paused is the ledger refusing: exit 1.
#[test]
fn resolve_of_an_unknown_run_is_bad_input_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["r1"]));
    let before = snapshot(dir.path());
    for decision in [&["--retry"][..], &["--abort"], &["--mark-done", "{}"]] {
        let mut args = vec!["resolve", "--ledger", file, "--run", "r9"];
        args.extend_from_slice(decision);
        args.extend_from_slice(&["--by", "ann"]);
        let (code, stdout, stderr) = flow(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(r#"no run "r9""#) && stderr.contains(file), "{args:?}: {stderr}");
        assert!(stderr.contains("flow paused"), "{args:?}: {stderr}");
        assert_eq!(snapshot(dir.path()), before, "{args:?} changed the ledger");
    }
    let ledger = SqliteLedger::open(&path, Options::default()).unwrap();
    assert_untouched(&ledger, "r1", "after the unknown runs");
    ledger.set_run_status("r1", RunStatus::Running, None, 3).unwrap();
    drop(ledger);
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("not paused"), "{stderr}");
}

/// The engine API refuses a blank name as the CLI does: the ledger's `record_resolution` says no before anything
/// is written, so the run stays paused with no resolution.
#[test]
fn record_resolution_refuses_a_blank_name() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = ledger_with_paused_runs(&dir.path().join("flow.db"), &["r1"]);
    for by in ["", " ", "\t"] {
        let e = engine::executor::record_resolution(&ledger, "r1", &Resolution::Retry, by, 10).unwrap_err();
        assert!(e.to_string().contains("must name the person deciding"), "{by:?}: {e}");
        assert_untouched(&ledger, "r1", by);
    }
}

/// A decision that waits out the lock of a live writer (another connection in `BEGIN IMMEDIATE`) fails as a storage
/// error (exit 1) that names the ledger file, says another connection holds it and to try again; it used to print
/// SQLite's "database is locked" alone. Nothing is recorded, and once the writer is done the decision goes through.
#[test]
fn a_decision_blocked_by_a_live_writer_names_the_file_and_says_to_try_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_with_paused_runs(&path, &["r1"]));
    let writer = live_writer(&path, "r1");
    let decision = ["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"];
    let (code, stdout, stderr) = flow(&decision);
    writer.execute_batch("ROLLBACK").unwrap();
    drop(writer);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains(file) && stderr.contains("locked by another connection"), "{stderr}");
    assert!(stderr.contains("try again"), "{stderr}");
    assert_untouched(&SqliteLedger::open(&path, Options::default()).unwrap(), "r1", "after the blocked decision");
    let (code, stdout, stderr) = flow(&decision);
    assert_eq!(code, 0, "{stdout}{stderr}");
}

/// The one reading of a SQLite failure on an existing ledger file that `flow` and the ledger's opens share
/// ([`open_failure`]): a permission error is a storage error (`flow` used to call it "not a Flow ledger", exit 2,
/// while the ledger called it a storage error), as are a lock, a hot journal and a directory SQLite may not create
/// its journal in; a file SQLite cannot read as a database is no ledger, one it finds malformed is damaged (it used to
/// be no ledger too); anything else is left to the caller.
#[test]
fn one_reading_of_a_sqlite_failure_serves_flow_and_the_ledger() {
    use engine::ledger::sqlite::{OpenFailure, open_failure};
    use rusqlite::ffi;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    drop(ledger_with_paused_runs(&path, &["r1"]));
    let failure = |code| open_failure(&path, &rusqlite::Error::SqliteFailure(ffi::Error::new(code), None));
    for code in [
        ffi::SQLITE_PERM,
        ffi::SQLITE_READONLY,
        ffi::SQLITE_BUSY,
        ffi::SQLITE_LOCKED,
        ffi::SQLITE_READONLY_ROLLBACK,
        ffi::SQLITE_READONLY_DIRECTORY,
    ] {
        assert!(matches!(failure(code), OpenFailure::Storage(_)), "{code}: {:?}", failure(code));
    }
    let OpenFailure::Storage(why) = failure(ffi::SQLITE_READONLY_DIRECTORY) else { unreachable!() };
    assert!(why.contains(dir.path().to_str().unwrap()) && why.contains("may not create files"), "{why}");
    let OpenFailure::Storage(why) = failure(ffi::SQLITE_BUSY) else { unreachable!() };
    assert!(why.contains("locked by another connection") && why.contains("try again"), "{why}");
    // SQLite could not open a file this user may read: not a permission problem.
    for code in [ffi::SQLITE_NOTADB, ffi::SQLITE_IOERR, ffi::SQLITE_CANTOPEN] {
        assert!(matches!(failure(code), OpenFailure::NotALedger(_)), "{code}: {:?}", failure(code));
    }
    // SQLite reads it as a database and finds part of it malformed: a damaged file, not one that is no ledger.
    assert!(matches!(failure(ffi::SQLITE_CORRUPT), OpenFailure::Damaged(_)), "{:?}", failure(ffi::SQLITE_CORRUPT));
    assert!(matches!(failure(ffi::SQLITE_FULL), OpenFailure::Other(_)), "{:?}", failure(ffi::SQLITE_FULL));
}

/// A reader that has gone (`flow paused L | head -1`, a closed `2>`) is not a panic: `paused` exits 0 as it would
/// have, and a refusal keeps its own exit code.
#[test]
fn a_reader_gone_from_either_stream_changes_no_exit_code() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let ids: Vec<String> = (0..2_000).map(|i| format!("run-{i}")).collect();
    drop(ledger_with_paused_runs(&path, &ids.iter().map(String::as_str).collect::<Vec<_>>()));
    let spawn = |args: &[&str], stdout: bool| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_flow"))
            .args(args)
            .stdout(if stdout { Stdio::piped() } else { Stdio::null() })
            .stderr(if stdout { Stdio::null() } else { Stdio::piped() })
            .spawn()
            .expect("run flow");
        // Closed before flow has opened the ledger, so its output meets a closed pipe (2,000 lines: more than a pipe
        // holds, whatever the timing).
        drop(child.stdout.take());
        drop(child.stderr.take());
        child.wait().expect("flow finishes").code()
    };
    assert_eq!(spawn(&["paused", "--ledger", path.to_str().unwrap()], true), Some(0));
    let missing = dir.path().join("missing.db");
    let refused = spawn(&["paused", "--ledger", missing.to_str().unwrap()], false);
    assert_eq!(refused, Some(2));
}

/// Reads back a field of `flow paused` as its documentation says it is written: `\\`, `\t`, `\n`, `\r`, `\u{HEX}`.
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('u') => {
                assert_eq!(chars.next(), Some('{'), "{field}");
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                out.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
            }
            other => panic!("{field}: no escape \\{other:?}"),
        }
    }
    out
}

/// A run id, workflow name or reason holding a newline or a tab cannot forge a line or a column of `flow paused`
/// (it used to: an id `evil\nrun-2\twf\tfake reason` listed a run `run-2` the ledger does not hold), nor break the
/// line `resolve` answers with or a message: each field is escaped, so a script splitting on lines and tabs reads
/// every field back whole. Plain ids print as they did.
#[test]
fn paused_and_resolve_escape_what_would_forge_a_line_or_a_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let forged = "evil\nrun-2\twf\tfake reason";
    let odd = ["back\\slash", "esc\u{1b}[31mred", "cr\r\u{85}\u{2028}\u{202e}lrm\u{7f}", "ünï\u{301}cödé 名前"];
    let mut ids = vec!["plain-1", forged];
    ids.extend(odd);
    let ledger = ledger_with_paused_runs(&path, &ids);
    // A workflow name and a reason with a tab and a newline in them.
    let run = engine::ledger::RunRecord {
        run_id: "plain-2".into(),
        workflow: "w\tf\nx".into(),
        status: RunStatus::Running,
        trigger: b"{}".to_vec(),
        reason: None,
        created_ms: 1,
        updated_ms: 1,
        replays: 0,
    };
    assert!(ledger.create_run(run).unwrap());
    let reason = format!("line one\nline two\tcolumn [key {}]", "cd".repeat(32));
    ledger.set_run_status("plain-2", RunStatus::Paused, Some(&reason), 2).unwrap();

    let (code, stdout, stderr) = flow(&["paused", "--ledger", file]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), ids.len() + 1, "one line per paused run: {stdout}");
    let mut listed = std::collections::BTreeMap::new();
    for line in &lines {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3, "three columns: {line:?}");
        assert!(!fields.concat().chars().any(char::is_control), "{line:?}");
        listed.insert(unescape(fields[0]), (unescape(fields[1]), unescape(fields[2])));
    }
    let mut expected: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
    expected.push("plain-2".into());
    expected.sort();
    assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(listed["plain-2"], ("w\tf\nx".to_string(), reason));
    let standard = format!("at-most-once step payout: outcome unknown [key {}]", "ab".repeat(32));
    assert!(lines.contains(&format!("plain-1\twf\t{standard}").as_str()), "a plain id as before: {stdout}");
    assert!(lines.contains(&format!("evil\\nrun-2\\twf\\tfake reason\twf\t{standard}").as_str()), "{stdout}");
    assert!(lines.contains(&format!("back\\\\slash\twf\t{standard}").as_str()), "{stdout}");
    assert!(lines.contains(&format!("esc\\u{{1b}}[31mred\twf\t{standard}").as_str()), "{stdout}");
    assert!(
        lines.contains(&format!("plain-2\tw\\tf\\nx\tline one\\nline two\\tcolumn [key {}]", "cd".repeat(32)).as_str())
    );
    assert!(lines.contains(&format!("ünï\u{301}cödé 名前\twf\t{standard}").as_str()), "printable text as it is");

    // `resolve` takes the id itself and answers on one line, the id escaped; a plain id as before.
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", forged, "--retry", "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (0, "run evil\\nrun-2\\twf\\tfake reason is now running\n"), "{stderr}");
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "plain-1", "--abort", "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (0, "run plain-1 is now failed\n"), "{stderr}");
    // A message on standard error is one line too, whatever the id or the file's name holds.
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "no\nsuch\trun", "--retry", "--by", "ann"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(r#"no run "no\nsuch\trun""#), "{stderr}");
    let odd_file = dir.path().join("a\nb\tc.db");
    let (code, stdout, stderr) = flow(&["paused", "--ledger", odd_file.to_str().unwrap()]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("a\\nb\\tc.db"), "{stderr}");
}

/// A step's output that is a negative number is given as one: `--mark-done -1` (it used to be refused as an unknown
/// flag, while `--mark-done=-1` was taken).
#[test]
fn mark_done_takes_a_value_that_starts_with_a_hyphen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_with_paused_runs(&path, &["r1", "r2", "r3"]);
    for (run, args, output) in [
        ("r1", &["--mark-done", "-1"][..], serde_json::json!(-1)),
        ("r2", &["--mark-done", "-2.5e1"], serde_json::json!(-25)),
        ("r3", &["--mark-done=-3"], serde_json::json!(-3)),
    ] {
        let mut all = vec!["resolve", "--ledger", file, "--run", run];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--by", "ann"]);
        let (code, stdout, stderr) = flow(&all);
        assert_eq!(code, 0, "{all:?}: {stdout}{stderr}");
        assert_eq!(stdout, format!("run {run} is now running\n"));
        assert_eq!(ledger.resolutions(run).unwrap()[0].resolution, Resolution::MarkDone { output }, "{all:?}");
    }
}

/// `--retry` of a step the API answered as applied, with an answer that cannot be stored (`[unstorable]`), would send
/// it again: refused as bad input (exit 2), naming what to do instead, and the ledger's files are left byte for byte
/// as they were. A mark-done of it is recorded. (Carried since stop 47: the retry was recorded and resent the step.)
#[test]
fn resolve_refuses_a_retry_that_would_send_an_applied_step_again() {
    use engine::ledger::{Claim, Claimed, Completion};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_with_paused_runs(&path, &["r1"]);
    // The key `ledger_with_paused_runs` names in the pause reason, answered as applied with an unstorable output.
    let key = engine::key::Key([0xab; 32]);
    let claim = Claim { action: "bank.payout", now_ms: 1, lease_ms: 1_000, ..fixture_claim(key, "r1", "payout") };
    let Claimed::Granted { fence, .. } = ledger.claim(&claim).unwrap() else { panic!("a fresh key is granted") };
    let reason = format!(
        "{}the API answered that the step applied, but its output cannot be stored; the answer: {{\"ref\":1e400}}",
        engine::decide::UNSTORABLE_MARK
    );
    ledger.complete(&key, fence, Completion::Unknown { reason }, 2).unwrap();
    drop(ledger);
    let before = snapshot(dir.path());
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "ann"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("paused at step payout") && stderr.contains("a retry would send it again"), "{stderr}");
    assert!(stderr.contains("mark it done") && stderr.contains(file), "{stderr}");
    assert_eq!(snapshot(dir.path()), before, "the refusal changed the ledger");
    let (code, stdout, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "r1", "--mark-done", r#"{"ref":"1e400"}"#, "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (0, "run r1 is now running\n"), "{stderr}");
}
