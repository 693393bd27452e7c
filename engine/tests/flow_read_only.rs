//! `flow paused`, and the refusals of `flow resolve`, read a ledger without changing anything on disk
//! ([`engine::ledger::sqlite::open_unchanged`]): not the file, and not its directory, whatever state a worker left
//! them in (its write-ahead log closed cleanly, holding pages, without a `-shm`) and whatever this user may write.
//! SQLite's `-shm` index of a log is the one thing a read may rewrite, as every reader of that log does.
//!
//! The permission cases run `flow` as `nobody` when the tests run as root (root ignores permissions), and are skipped
//! where that is not possible.
#![cfg(unix)]

mod common;

use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, RunRecord, RunStatus};
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

/// Whom `flow` runs as.
#[derive(Clone, Copy)]
enum As {
    Me,
    /// Someone who may not write what this user's permissions say they may not: `nobody` if this is root.
    Restricted,
    /// The owner of the files [`own`] gave away: [`OWNER`] if this is root (so that permissions apply to them too),
    /// else this user.
    Owner,
}

fn flow(who: As, args: &[&str]) -> (i32, String, String) {
    run(who, Command::new(env!("CARGO_BIN_EXE_flow")).args(args))
}

/// Runs `command` as `who`: its exit code, stdout and stderr.
fn run(who: As, command: &mut Command) -> (i32, String, String) {
    match who {
        As::Restricted if running_as_root() => command.uid(NOBODY).gid(NOBODY),
        As::Owner if running_as_root() => command.uid(OWNER).gid(OWNER),
        _ => command,
    };
    let out = command.output().expect("run the command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const NOBODY: u32 = 65_534;
/// A user who is neither root nor `nobody`, whom [`As::Owner`] runs as when this is root.
const OWNER: u32 = 1_000;

/// Gives every file in `dir` to [`As::Owner`] (a no-op unless this is root).
fn own(dir: &Path) {
    if running_as_root() {
        for entry in std::fs::read_dir(dir).unwrap() {
            std::os::unix::fs::chown(entry.unwrap().path(), Some(OWNER), Some(OWNER)).unwrap();
        }
    }
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn running_as_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        let probe = tempfile::NamedTempFile::new().expect("a temporary file");
        probe.as_file().metadata().expect("its metadata").uid() == 0
    })
}

/// Whether `flow` can run as [`As::Restricted`] and reach `dir`: always unless this is root, and then only if root
/// may switch to `nobody` and `nobody` may enter `dir` and run the binary.
fn restricted_can_reach(dir: &Path) -> bool {
    if !running_as_root() {
        return true;
    }
    let reachable = dir.ancestors().skip(1).all(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 != 0));
    let runs = Command::new(env!("CARGO_BIN_EXE_flow"))
        .arg("--help")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .is_ok_and(|out| out.status.success());
    if !(reachable && runs) {
        eprintln!("skipped: running as root, and flow cannot run as nobody on {}", dir.display());
    }
    reachable && runs
}

/// A ledger at `path` holding the run `r1`, paused at a key; closed cleanly (no `-wal`, no `-shm` left).
fn ledger_with_a_paused_run(path: &Path) {
    drop(common::ledger_with_paused_runs(path, &["r1"]));
}

/// A worker that dies after a write: its last transaction stays in the `-wal`, not yet in the file. `exclusive`: a
/// worker in `locking_mode=EXCLUSIVE` ([`Options::exclusive`]), which keeps its log's index in memory (no `-shm`).
fn worker_dies_after_renaming_the_workflow(path: &Path, exclusive: bool) {
    let conn = rusqlite::Connection::open(path).unwrap();
    // A killed worker does not checkpoint when it goes.
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).unwrap();
    if exclusive {
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE").unwrap();
    }
    conn.execute("UPDATE runs SET workflow = 'wf2' WHERE run_id = 'r1'", []).unwrap();
}

/// Every entry of `dir` with a hash of its bytes and its modification time (a `-shm`'s left out: readers of a log
/// write it), and the directory's own modification time, which a file created and removed again moves.
#[derive(Debug, PartialEq)]
struct Snapshot {
    files: Vec<(String, Option<(String, SystemTime)>)>,
    modified: SystemTime,
}

fn snapshot(dir: &Path) -> Snapshot {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let content = (!name.ends_with("-shm")).then(|| {
                let bytes = std::fs::read(entry.path()).unwrap();
                let modified = entry.metadata().unwrap().modified().unwrap();
                (format!("{} bytes, blake3 {}", bytes.len(), blake3::hash(&bytes).to_hex()), modified)
            });
            (name, content)
        })
        .collect();
    files.sort();
    Snapshot { files, modified: std::fs::metadata(dir).unwrap().modified().unwrap() }
}

/// Sets the modification time of `dir` to 2001, so that any change to its entries shows however coarse the file
/// system's clock.
fn age(dir: &Path) {
    let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::open(dir).unwrap().set_modified(past).unwrap();
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// `flow paused` lists `r1` with `workflow`, and `flow resolve` of a run the ledger does not hold is refused, both
/// leaving `dir` as they found it.
fn list_and_refuse_leave_it(who: As, dir: &Path, ledger: &Path, workflow: &str) {
    let file = ledger.to_str().unwrap();
    let before = snapshot(dir);
    let (code, stdout, stderr) = flow(who, &["paused", "--ledger", file]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with(&format!("r1\t{workflow}\t")), "{stdout}");
    assert_eq!(snapshot(dir), before, "`flow paused` changed the directory");
    let (code, stdout, stderr) = flow(who, &["resolve", "--ledger", file, "--run", "nope", "--retry", "--by", "ann"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains(r#"no run "nope""#), "{stderr}");
    assert_eq!(snapshot(dir), before, "a refused `flow resolve` changed the directory");
}

/// (a) A ledger its worker closed cleanly has no `-wal`: reading it used to make a `-wal` and a `-shm` and remove
/// them again (a reader that may write the file can), which the directory's modification time shows. The names
/// hold characters a SQLite URI gives a meaning to.
#[test]
fn a_cleanly_closed_ledger_is_read_without_a_file_made_or_removed() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("a #dir%41?");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("flow?mode=rwc#%2F.db");
    ledger_with_a_paused_run(&path);
    assert_eq!(names(&dir), ["flow?mode=rwc#%2F.db"]);
    age(&dir);
    list_and_refuse_leave_it(As::Me, &dir, &path, "wf");
}

/// (b) A worker died with its last transaction in the `-wal`: the listing reads it, and the file and the log stay
/// byte for byte as they were, also when the ledger is named through a symbolic link (SQLite's log is next to the
/// file the link points to; looking for it next to the link, a listing found none and copied the log into the file
/// when it closed, removing it).
#[test]
fn a_dead_worker_s_log_is_read_and_left_also_through_a_symbolic_link() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ledgers");
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("flow.db");
    ledger_with_a_paused_run(&path);
    worker_dies_after_renaming_the_workflow(&path, false);
    assert_eq!(names(&dir), ["flow.db", "flow.db-shm", "flow.db-wal"]);
    assert!(std::fs::metadata(dir.join("flow.db-wal")).unwrap().len() > 0, "the test needs a log with pages");
    age(&dir);
    list_and_refuse_leave_it(As::Me, &dir, &path, "wf2");
    let link = root.path().join("link.db");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    list_and_refuse_leave_it(As::Me, &dir, &link, "wf2");
    assert_eq!(names(root.path()), ["ledgers", "link.db"]);
}

/// A `-wal` and a `-shm` that hold nothing (left by a reader that could not remove them, or a worker that died before
/// it wrote) stay: reading used to remove them when it closed.
#[test]
fn an_empty_log_a_reader_left_stays() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    ledger_with_a_paused_run(&path);
    {
        // A read-only connection cannot remove the log and index its read made.
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
        let conn = rusqlite::Connection::open_with_flags(&path, flags).unwrap();
        let _: i64 = conn.query_row("SELECT count(*) FROM runs", [], |row| row.get(0)).unwrap();
    }
    assert_eq!(names(dir.path()), ["flow.db", "flow.db-shm", "flow.db-wal"]);
    age(dir.path());
    list_and_refuse_leave_it(As::Me, dir.path(), &path, "wf");
}

/// A worker opened [`Options::exclusive`] died with its last transaction in the `-wal`, and there is no `-shm`:
/// the listing reads the log with its index in memory, and makes no `-shm` (it used to leave one behind).
#[test]
fn an_exclusive_worker_s_log_is_read_without_a_shm_made() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    ledger_with_a_paused_run(&path);
    worker_dies_after_renaming_the_workflow(&path, true);
    assert_eq!(names(dir.path()), ["flow.db", "flow.db-wal"]);
    assert!(std::fs::metadata(dir.path().join("flow.db-wal")).unwrap().len() > 0, "the test needs a log with pages");
    age(dir.path());
    list_and_refuse_leave_it(As::Me, dir.path(), &path, "wf2");
}

/// (d) A ledger file this user may only read, in a directory they may write: reading a cleanly closed one used to
/// leave a `-wal` and a `-shm` behind, owned by this user, after which the file's owner could no longer write it.
/// A dead worker's log is read and left; one without a `-shm` cannot be read without making one, and is refused as
/// a storage error (exit 1) naming the file: a permission of the file's, not bad input (it used to exit 2).
#[test]
fn a_ledger_this_user_may_only_read_is_read_without_a_file_left() {
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if !restricted_can_reach(root.path()) {
        return;
    }
    let ledger_in = |name: &str, worker: Option<bool>| {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("flow.db");
        ledger_with_a_paused_run(&path);
        if let Some(exclusive) = worker {
            worker_dies_after_renaming_the_workflow(&path, exclusive);
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(0o444)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        age(&dir);
        (dir, path)
    };
    let (dir, path) = ledger_in("closed", None);
    list_and_refuse_leave_it(As::Restricted, &dir, &path, "wf");
    assert_eq!(names(&dir), ["flow.db"]);
    let (dir, path) = ledger_in("dead-worker", Some(false));
    list_and_refuse_leave_it(As::Restricted, &dir, &path, "wf2");
    let (dir, path) = ledger_in("dead-exclusive-worker", Some(true));
    let before = snapshot(&dir);
    let (code, stdout, stderr) = flow(As::Restricted, &["paused", "--ledger", path.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("no -shm index") && stderr.contains("needs write access to the file"), "{stderr}");
    assert!(stderr.contains(path.to_str().unwrap()) && !stderr.contains("not a Flow ledger"), "{stderr}");
    assert_eq!(snapshot(&dir), before, "a refused listing changed the directory");
}

/// (e) A ledger in a directory this user may not write: reading a cleanly closed one used to fail, since SQLite
/// could not make the `-wal` and `-shm` a reader of a WAL file needs; a dead worker's log is read as ever.
#[test]
fn a_ledger_in_a_directory_this_user_may_not_write_is_read() {
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    if !restricted_can_reach(root.path()) {
        return;
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    for (name, mode, worker) in [("rw-file", 0o666, false), ("ro-file", 0o444, false), ("dead-worker", 0o666, true)] {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("flow.db");
        ledger_with_a_paused_run(&path);
        if worker {
            worker_dies_after_renaming_the_workflow(&path, false);
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
        age(&dir);
        dirs.push(dir);
    }
    let results: Vec<_> = dirs
        .iter()
        .zip(["wf", "wf", "wf2"])
        .map(|(dir, workflow)| {
            std::panic::catch_unwind(|| list_and_refuse_leave_it(As::Restricted, dir, &dir.join("flow.db"), workflow))
        })
        .collect();
    for dir in &dirs {
        // So that the temporary directory can be removed.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for result in results {
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}

/// (c) A ledger in rollback-journal mode is read under SQLite's shared lock, which makes no file. One whose writer
/// died in the middle of a transaction, leaving a hot `-journal`, is refused and left as it is: reading it means
/// rolling the journal back into the file, which a worker opening the ledger does.
#[test]
fn a_rollback_journal_ledger_is_read_and_a_hot_journal_left_to_a_worker() {
    let root = tempfile::tempdir().unwrap();
    let (dir, crashed) = (root.path().join("ledger"), root.path().join("crashed"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(&crashed).unwrap();
    let path = dir.join("flow.db");
    ledger_with_a_paused_run(&path);
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "DELETE", |row| row.get(0)).unwrap();
    assert_eq!(mode, "delete");
    age(&dir);
    list_and_refuse_leave_it(As::Me, &dir, &path, "wf");
    // A transaction too large for the page cache writes pages into the file before it commits; a copy of the file
    // and its journal as they are then is what a crash at that moment leaves.
    conn.pragma_update(None, "cache_size", 1).unwrap();
    conn.execute_batch("BEGIN; UPDATE runs SET workflow = 'wf2', trigger = zeroblob(200000);").unwrap();
    for name in ["flow.db", "flow.db-journal"] {
        std::fs::copy(dir.join(name), crashed.join(name)).unwrap();
    }
    conn.execute_batch("ROLLBACK").unwrap();
    age(&crashed);
    let before = snapshot(&crashed);
    let file = crashed.join("flow.db");
    let file = file.to_str().unwrap();
    // A ledger a worker will mend, not bad input: a storage error (exit 1) that does not say it is no ledger.
    for args in
        [&["paused", "--ledger", file][..], &["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "a"]]
    {
        let (code, stdout, stderr) = flow(As::Me, args);
        assert_eq!(code, 1, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(file) && stderr.contains("stopped in the middle of a transaction"), "{stderr}");
        assert!(!stderr.contains("not a Flow ledger"), "{stderr}");
        assert_eq!(snapshot(&crashed), before, "a refused {args:?} changed the directory");
    }
    drop(conn);
    // A worker rolls the journal back.
    let ledger = SqliteLedger::open(&crashed.join("flow.db"), Options::default()).unwrap();
    assert_eq!(ledger.get_run("r1").unwrap().unwrap().workflow, "wf");
}

/// A worker that holds the ledger exclusively ([`Options::exclusive`]) keeps every other connection out: a listing,
/// or a decision, waits for it up to the busy timeout and then gives up with a storage error (exit 1) saying so. It
/// used to call the file "not a Flow ledger" (exit 2), as if it were bad input.
#[test]
fn a_ledger_a_worker_holds_exclusively_is_locked_not_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    ledger_with_a_paused_run(&path);
    let worker = SqliteLedger::open(&path, Options { exclusive: true, ..Options::default() }).unwrap();
    let run = RunRecord {
        run_id: "r2".into(),
        workflow: "wf".into(),
        status: RunStatus::Running,
        trigger: b"{}".to_vec(),
        reason: None,
        created_ms: 3,
        updated_ms: 3,
        replays: 0,
    };
    assert!(worker.create_run(run).unwrap(), "a write takes the worker's lock");
    assert_eq!(names(dir.path()), ["flow.db", "flow.db-wal"]);
    age(dir.path());
    // Not [`snapshot`]: closing a file this process opened to read it would drop the worker's lock on it (a POSIX
    // lock belongs to the process, and any close of the file releases it).
    let metadata = |dir: &Path| {
        let files: Vec<_> = names(dir)
            .into_iter()
            .map(|name| {
                let metadata = std::fs::metadata(dir.join(&name)).unwrap();
                (name, metadata.len(), metadata.modified().unwrap())
            })
            .collect();
        (files, std::fs::metadata(dir).unwrap().modified().unwrap())
    };
    let before = metadata(dir.path());
    for args in
        [&["paused", "--ledger", file][..], &["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "a"]]
    {
        let (code, stdout, stderr) = flow(As::Me, args);
        assert_eq!(code, 1, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(file) && stderr.contains("locked by another connection"), "{args:?}: {stderr}");
        assert!(!stderr.contains("not a Flow ledger"), "{args:?}: {stderr}");
        assert_eq!(metadata(dir.path()), before, "a refused {args:?} changed the directory");
    }
    drop(worker);
    let (code, stdout, stderr) = flow(As::Me, &["paused", "--ledger", file]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.starts_with("r1\twf\t"), "{stdout}");
}

/// Three ledgers in directories anyone may write, each with one file [`As::Restricted`] may not write: the ledger
/// file (its owner's, 0644), a dead worker's `-wal`, or its `-shm`. The unwritable file's name, and the directory.
fn ledgers_with_a_file_not_everyone_may_write(root: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut ledgers = Vec::new();
    for (name, worker, unwritable) in
        [("file", false, "flow.db"), ("wal", true, "flow.db-wal"), ("shm", true, "flow.db-shm")]
    {
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("flow.db");
        ledger_with_a_paused_run(&path);
        if worker {
            worker_dies_after_renaming_the_workflow(&path, false);
        }
        own(&dir);
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            // 0444 rather than 0644: the restricted user is this one when this is not root.
            set_mode(&entry.path(), if entry.file_name() == unwritable { 0o444 } else { 0o666 });
        }
        set_mode(&dir, 0o777);
        age(&dir);
        ledgers.push((dir, unwritable));
    }
    ledgers
}

/// Gives the files in `dir` back to their owner alone (0644), as they were before [`As::Restricted`] tried them.
fn back_to_the_owner(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        set_mode(&entry.unwrap().path(), 0o644);
    }
}

/// `flow resolve` by a user who may write the ledger's directory but not the ledger file, or not its `-wal` or
/// `-shm`, is refused before SQLite opens the file to write, naming the file and why (a storage error, exit 1), and
/// leaves the directory as it was. SQLite used to open the file read-only without a word: its read made a `-wal` and
/// a `-shm` (or used the worker's), the write failed ("attempt to write a readonly database", naming no file), and
/// the `-wal` and `-shm` it left behind, owned by that user, kept the file's owner from writing the ledger too.
#[test]
fn resolve_by_a_user_who_may_not_write_the_ledger_is_refused_and_leaves_it() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    for (dir, unwritable) in ledgers_with_a_file_not_everyone_may_write(root.path()) {
        let path = dir.join("flow.db");
        let file = path.to_str().unwrap();
        let decision = ["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "bob"];
        let before = snapshot(&dir);
        let (code, stdout, stderr) = flow(As::Restricted, &decision);
        assert_eq!(code, 1, "{unwritable}: {stdout}{stderr}");
        assert!(stderr.contains(&dir.join(unwritable).to_str().unwrap().to_string()), "{unwritable}: {stderr}");
        assert!(stderr.contains("cannot open it to write"), "{unwritable}: {stderr}");
        assert!(stderr.contains("recording a decision writes the ledger"), "{unwritable}: {stderr}");
        assert_eq!(snapshot(&dir), before, "{unwritable}: a refused decision changed the directory");
        back_to_the_owner(&dir);
        let (code, stdout, stderr) = flow(As::Owner, &decision);
        assert_eq!(code, 0, "{unwritable}: the owner's decision: {stdout}{stderr}");
        assert!(stdout.contains("now running"), "{unwritable}: {stdout}");
    }
}

/// Set (to the ledger's path) in the child [`a_worker_that_may_not_write_the_ledger_is_refused_and_leaves_it`] runs.
const WORKER_ENV: &str = "FLOW_TEST_WORKER_LEDGER";
/// Set as well when the child is to open the ledger to read only ([`SqliteLedger::open_read_only`]).
const READER_ENV: &str = "FLOW_TEST_READER";

/// What the ledger API says, run as `who` (this test binary run again as the child of
/// [`a_worker_that_may_not_write_the_ledger_is_refused_and_leaves_it`]), opening the ledger at `path` to write, as a
/// worker does, then writing it ("wrote"), or to read only (`read_only`), then reading it ("read"); or "refused: "
/// and why.
fn ledger_api(who: As, path: &Path, read_only: bool) -> String {
    let test = "a_worker_that_may_not_write_the_ledger_is_refused_and_leaves_it";
    let exe = std::env::current_exe().unwrap();
    let mut command = Command::new(&exe);
    command.args([test, "--exact", "--nocapture"]).env(WORKER_ENV, path);
    if read_only {
        command.env(READER_ENV, "1");
    }
    let (code, stdout, stderr) = run(who, &mut command);
    assert_eq!(code, 0, "{}: {stdout}{stderr}", path.display());
    stdout.lines().find_map(|line| line.strip_prefix("worker: ")).map(str::to_string).unwrap_or_default()
}

/// The same for a worker ([`SqliteLedger::open`]), which is this test binary run again as [`As::Restricted`]: its
/// open is refused, naming the file, and the directory is left as it was, so the owner's worker still writes it.
#[test]
fn a_worker_that_may_not_write_the_ledger_is_refused_and_leaves_it() {
    if let Ok(path) = std::env::var(WORKER_ENV) {
        // The child: what it reports is checked by the parent.
        if std::env::var_os(READER_ENV).is_some() {
            match SqliteLedger::open_read_only(Path::new(&path), Options::default()) {
                Err(e) => println!("worker: refused: {e}"),
                Ok(ledger) => match ledger.get_run("r1") {
                    Ok(_) => println!("worker: read"),
                    Err(e) => println!("worker: opened, the read failed: {e}"),
                },
            }
            return;
        }
        match SqliteLedger::open(Path::new(&path), Options::default()) {
            Err(e) => println!("worker: refused: {e}"),
            Ok(ledger) => match ledger.set_run_status("r1", RunStatus::Running, None, 3) {
                Ok(()) => println!("worker: wrote"),
                Err(e) => println!("worker: opened, the write failed: {e}"),
            },
        }
        return;
    }
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    for (dir, unwritable) in ledgers_with_a_file_not_everyone_may_write(root.path()) {
        let path = dir.join("flow.db");
        let before = snapshot(&dir);
        let said = ledger_api(As::Restricted, &path, false);
        assert!(said.starts_with("refused: "), "{unwritable}: {said}");
        assert!(said.contains(&format!("{}: cannot open it to write", dir.join(unwritable).display())), "{said}");
        assert_eq!(snapshot(&dir), before, "{unwritable}: a refused worker changed the directory");
        back_to_the_owner(&dir);
        assert_eq!(ledger_api(As::Owner, &path, false), "wrote", "{unwritable}: the owner's worker");
    }
}

/// A ledger with one thing this user may not read: the file itself, a dead worker's `-wal` or `-shm`, an exclusive
/// worker's `-wal` (no `-shm`), or the directory that holds them (not searchable). The name of the thing, and its
/// mode, which [`As::Restricted`] may not read (0 when this is not root: the restricted user is this one).
fn ledgers_with_a_file_this_user_may_not_read(root: &Path) -> Vec<(PathBuf, PathBuf, u32)> {
    let mut ledgers = Vec::new();
    for (name, worker, unreadable) in [
        ("file", None, Some("flow.db")),
        ("wal", Some(false), Some("flow.db-wal")),
        ("shm", Some(false), Some("flow.db-shm")),
        ("lone-wal", Some(true), Some("flow.db-wal")),
        ("dir", None, None),
    ] {
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("flow.db");
        ledger_with_a_paused_run(&path);
        if let Some(exclusive) = worker {
            worker_dies_after_renaming_the_workflow(&path, exclusive);
        }
        age(&dir);
        let unreadable = unreadable.map_or(dir.clone(), |name| dir.join(name));
        let mode = std::fs::metadata(&unreadable).unwrap().mode() & 0o7777;
        ledgers.push((path, unreadable, mode));
    }
    ledgers
}

/// A ledger this user may not read (the file, its `-wal` or `-shm`, or its directory) is a storage error (exit 1)
/// naming what may not be read and why, not bad input: `flow` used to say "not a Flow ledger" ("SQLite cannot open
/// it to read", or "no ledger at" for a directory it may not search) and exit 2. The ledger API says the same: a
/// storage error naming the file, where its `open_read_only` used to call the ledger corrupt; `flow` and the ledger
/// read a SQLite failure one way ([`engine::ledger::sqlite::open_failure`]). Nothing is changed on disk.
#[test]
fn a_ledger_this_user_may_not_read_is_a_storage_error_naming_what_it_may_not_read() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    for (path, unreadable, mode) in ledgers_with_a_file_this_user_may_not_read(root.path()) {
        let (file, what) = (path.to_str().unwrap(), unreadable.to_str().unwrap());
        let dir = path.parent().unwrap();
        let before = snapshot(dir);
        let restricted = if unreadable == dir { 0o700 } else { 0o600 };
        set_mode(&unreadable, if running_as_root() { restricted } else { 0 });
        let mut said = Vec::new();
        for args in
            [&["paused", "--ledger", file][..], &["resolve", "--ledger", file, "--run", "r1", "--retry", "--by", "a"]]
        {
            said.push(flow(As::Restricted, args));
        }
        let reader = ledger_api(As::Restricted, &path, true);
        set_mode(&unreadable, mode);
        for (code, stdout, stderr) in said {
            assert_eq!(code, 1, "{what}: {stdout}{stderr}");
            assert!(stderr.contains(file) && stderr.contains(what), "{what}: {stderr}");
            assert!(stderr.contains("Permission denied"), "{what}: {stderr}");
            assert!(!stderr.contains("not a Flow ledger") && !stderr.contains("no ledger at"), "{what}: {stderr}");
        }
        assert!(reader.starts_with("refused: ledger storage error: "), "{what}: {reader}");
        assert!(reader.contains(what) && reader.contains("Permission denied"), "{what}: {reader}");
        assert_eq!(snapshot(dir), before, "{what}: a refused read changed the directory");
        // The ledger is sound: only the permission stood in the way.
        assert_eq!(ledger_api(As::Me, &path, true), "read", "{what}");
    }
}

/// Ledgers whose files anyone may write, each in a directory no one but root may write (0555), in a state where
/// SQLite must create a file beside the ledger to write it: closed cleanly (no `-wal`, no `-shm`), in rollback-journal
/// mode (no `-wal`), a worker opened exclusive died (a `-wal`, no `-shm`). The state, and the file to be created.
fn ledgers_in_a_directory_not_everyone_may_write(root: &Path) -> Vec<(PathBuf, &'static str)> {
    let mut ledgers = Vec::new();
    for (name, creates) in
        [("closed", "flow.db-wal"), ("rollback-journal", "flow.db-wal"), ("exclusive-worker", "flow.db-shm")]
    {
        let dir = root.join(name);
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("flow.db");
        ledger_with_a_paused_run(&path);
        match name {
            "rollback-journal" => {
                let conn = rusqlite::Connection::open(&path).unwrap();
                let mode: String = conn.pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0)).unwrap();
                assert_eq!(mode, "delete");
            }
            "exclusive-worker" => worker_dies_after_renaming_the_workflow(&path, true),
            _ => {}
        }
        for entry in std::fs::read_dir(&dir).unwrap() {
            set_mode(&entry.unwrap().path(), 0o666);
        }
        set_mode(&dir, 0o555);
        age(&dir);
        ledgers.push((dir, creates));
    }
    ledgers
}

/// `flow resolve` of a ledger this user may write, in a directory they may not write, is refused before SQLite opens
/// the file (a storage error, exit 1), naming the directory and why it matters: SQLite must create the ledger's
/// `-wal` (or `-shm`) there. It used to say "attempt to write a readonly database", or call a ledger with a `-wal`
/// and no `-shm` corrupt. Nothing is changed on disk; in a directory this user may write, the same decision is made.
#[test]
fn a_decision_in_a_directory_this_user_may_not_write_is_refused_naming_it() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    let ledgers = ledgers_in_a_directory_not_everyone_may_write(root.path());
    let results: Vec<_> = ledgers
        .iter()
        .map(|(dir, _)| {
            let path = dir.join("flow.db");
            let decision = ["resolve", "--ledger", path.to_str().unwrap(), "--run", "r1", "--retry", "--by", "bob"];
            let before = snapshot(dir);
            let refused = flow(As::Restricted, &decision);
            let unchanged = snapshot(dir) == before;
            set_mode(dir, 0o777);
            (refused, unchanged, flow(As::Restricted, &decision))
        })
        .collect();
    for ((dir, creates), ((code, stdout, stderr), unchanged, made)) in ledgers.iter().zip(results) {
        assert_eq!(code, 1, "{creates}: {stdout}{stderr}");
        assert!(stderr.contains(&format!("{}: this user may not create files in this directory", dir.display())));
        assert!(stderr.contains("SQLite must create") && stderr.contains(creates), "{stderr}");
        assert!(stderr.contains("recording a decision writes the ledger"), "{stderr}");
        assert!(!stderr.contains("readonly database") && !stderr.contains("corrupt"), "{stderr}");
        assert!(unchanged, "{}: a refused decision changed the directory", dir.display());
        let (code, stdout, stderr) = made;
        assert_eq!(code, 0, "{}: in a directory this user may write: {stdout}{stderr}", dir.display());
        assert!(stdout.contains("now running"), "{stdout}");
    }
}

/// The same for a worker ([`SqliteLedger::open`] checks the directory too): its open is refused as a storage error
/// naming the directory, where it used to say "attempt to write a readonly database", or, with a `-wal` and no
/// `-shm`, call the ledger corrupt; nothing is changed on disk.
#[test]
fn a_worker_in_a_directory_it_may_not_write_is_refused_naming_it() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    let ledgers = ledgers_in_a_directory_not_everyone_may_write(root.path());
    let results: Vec<_> = ledgers
        .iter()
        .map(|(dir, _)| {
            let path = dir.join("flow.db");
            let before = snapshot(dir);
            let refused = ledger_api(As::Restricted, &path, false);
            let unchanged = snapshot(dir) == before;
            set_mode(dir, 0o777);
            (refused, unchanged, ledger_api(As::Restricted, &path, false))
        })
        .collect();
    for ((dir, creates), (refused, unchanged, wrote)) in ledgers.iter().zip(results) {
        let expected = format!("refused: ledger storage error: {}: this user may not create files", dir.display());
        assert!(refused.starts_with(&expected), "{creates}: {refused}");
        assert!(refused.contains(creates), "{refused}");
        assert!(unchanged, "{}: a refused worker changed the directory", dir.display());
        assert_eq!(wrote, "wrote", "{}: in a directory this user may write", dir.display());
    }
}

/// A worker asked to create a new ledger in a directory it may not write is refused naming the directory and why
/// (SQLite said only "unable to open database file"), and nothing is created; given the right, it creates it.
#[test]
fn a_new_ledger_in_a_directory_this_user_may_not_write_is_refused_naming_it() {
    let root = tempfile::tempdir().unwrap();
    set_mode(root.path(), 0o755);
    if !restricted_can_reach(root.path()) {
        return;
    }
    let dir = root.path().join("read-only");
    std::fs::create_dir(&dir).unwrap();
    set_mode(&dir, 0o555);
    let path = dir.join("new.db");
    let refused = ledger_api(As::Restricted, &path, false);
    let expected = format!("refused: ledger storage error: {}: this user may not create files", dir.display());
    assert!(refused.starts_with(&expected), "{refused}");
    assert!(refused.contains("new.db"), "{refused}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "a refused worker created a file");
    set_mode(&dir, 0o777);
    let created = ledger_api(As::Restricted, &path, false);
    assert!(!created.starts_with("refused") && path.exists(), "{created}");
}
