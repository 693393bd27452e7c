//! `flow`: the admin command line for a person looking at the runs of an on-disk ledger and resolving paused ones.
//!
//! ```text
//! flow paused  --ledger FILE
//! flow resolve --ledger FILE --run ID (--mark-done JSON | --retry | --abort) --by NAME
//! flow replays --ledger FILE --run ID
//! flow show    --ledger FILE --run ID
//! ```
//!
//! `paused` writes one line per run, its id, workflow and reason separated by tabs. Each field is escaped so that
//! neither a line nor a column can be forged by what it holds: a backslash is written `\\`, a tab `\t`, a newline
//! `\n`, a carriage return `\r`, and any other control character, a line or paragraph separator (U+2028, U+2029) or
//! a bidirectional formatting character as `\u{HEX}` (as Rust writes it, e.g. `\u{1b}`); everything else, a plain id
//! whole, is written as it is. `resolve` says the run it recorded the decision for the same way, and every message on
//! standard error is one line (control characters in it written as `\u{HEX}`, `\t`, `\n`, `\r`). `--run` takes
//! the id itself, not the listing's escaped form (in a POSIX shell, `$'a\tb'` is the id `a`, a tab, `b`).
//!
//! `replays` writes one line per replay of the run ([`engine::ledger::Ledger::replay_history`]), oldest first: the
//! replay's number, when it began (UTC, RFC 3339, to the millisecond), the trigger it replaced and the trigger it set,
//! separated by tabs. A trigger is written as JSON, the same document the ledger holds, with every character that
//! the listing's escaping names (control characters, U+2028, U+2029, the bidirectional formatting characters) written
//! as JSON's own `\uXXXX` escape, so the field is valid JSON on one line and in one column (`cut -f3 | jq`). Replays
//! the ledger holds no entry for (begun before it kept a history, at schema version 4, or by a worker of an older
//! build) are named in a note on standard error; a trigger not known for that reason is an empty field. A run never
//! replayed writes nothing. `--run` is the id itself, as for `resolve`.
//!
//! `show` writes everything the ledger holds about one run as one JSON document (pretty-printed): the run's record
//! (status, reason, times, replay count, trigger), each step record of it ([`engine::ledger::Ledger::run_steps`]: step
//! id, action, key, status, attempts, a retried keyed key's first attempt, the last attempt's time, the lease's owner,
//! fence and expiry, the inputs hash, and the output or the error; `paused_here` marks the key a paused run waits at,
//! whose record may have moved since the pause, when a stalled worker's answer came late; `late_applied` lists each
//! earlier attempt's answer that it applied which came only after a later attempt had claimed the key, with its fence
//! and output, or `unstorable` and why, [`engine::executor::late_applied_marker`]), the plans its writes and
//! agent steps recorded before their first write (under the step's key; the writes are among the step records), the
//! people's decisions, and the replay history. It is what a person reads before deciding, or when a duplicate is
//! reported: which keys were sent, how often, and what came back. Stored documents (the trigger, outputs, a mark-done's
//! output) are JSON values in it, a stored text that does not parse (a damaged ledger) the object `{"unreadable": TEXT,
//! "why": ERROR}`; times are RFC 3339 UTC as for `replays`. Characters [`field`] escapes that JSON leaves raw (DEL, C1
//! controls, U+2028, U+2029, the bidirectional formatting characters) are written as JSON's `\uXXXX`, so the document
//! shows as it is.
//!
//! `resolve` records the decision against the key the run paused at ([`engine::executor::record_resolution`]); an
//! abort fails the run at once, a mark-done or retry sets it running so the next worker that resumes unfinished runs
//! applies it. Exit codes: 0 done; 1 the ledger refused the decision (the run is not paused) or a storage error,
//! with a message naming the file: the ledger locked by another connection, a hot `-journal` a writer left, a file,
//! `-wal` or `-shm` this user may not read (or, for `resolve`, write), a directory `resolve` may not create SQLite's
//! `-wal` or `-shm` in, a damaged ledger (a page SQLite finds malformed, its `SQLITE_CORRUPT`: "the ledger file is
//! damaged", with the `sqlite3 FILE "PRAGMA integrity_check"` that says what is damaged); 2 bad usage or bad input,
//! with a message naming it (a file that is not a ledger, a ledger of a newer schema version, or for `resolve` of an
//! older one, a run id the ledger does not hold, a blank `--run`, `--mark-done` that is not valid JSON, a blank `--by`
//! or one with a control character, the last three told before anything is opened), and the ledger left as it was.
//! `paused`, `replays` and `show` exit 0, 1 (a storage error) or 2 (bad input) the same way. Both kinds of SQLite
//! failure are told apart as the ledger tells them ([`engine::ledger::sqlite::open_failure`] when a file is opened,
//! [`engine::ledger::Error`] after), and every command says a failure of the ledger one way: a damaged ledger is
//! damaged whichever command, and whichever read, finds it (`paused` reads only the runs, `resolve` a run's step too).
//!
//! Every command opens only a file that already is a Flow ledger of this build's schema version or an older one: a
//! missing file, a path that is no regular file (a directory, a device such as `/dev/null`, a FIFO, a socket: told
//! by its metadata, before anything opens it, so a FIFO does not block), an empty file (a mistyped path that
//! something created), a file that is not SQLite, a SQLite database whose tables are not those of a ledger of its
//! schema version, or a ledger of a newer schema version is refused with exit 2 and left as it was, never turned into
//! a new ledger or migrated. `paused`, `replays` and `show` only read the file, of an older schema version too, as it
//! is ([`SqliteLedger::open_read_only`]: what its version lacks read as its migration would set it, no replay history
//! before version 4), so that looking at a ledger that workers of an older build still use changes nothing for
//! them. `resolve` checks the run reading only, and opens the file to write only then, and only if it is of this
//! build's schema version (a ledger of an older one is refused, exit 2, saying what to do: `flow` does not migrate a
//! ledger, as the older build's workers would then refuse it when they next start; a worker of this build migrates
//! it when it opens it) and this user may write it and its `-wal` and `-shm`, and create them in its directory when
//! they are not there ([`engine::ledger::sqlite::check_writable`]). `--mark-done` is read by the engine's strict JSON
//! parser ([`engine::canonical`]), the one step inputs go through, so it refuses what a step's output could not be
//! keyed by (a repeated member name, an integer no double holds exactly, nesting deeper than 128 levels). It may be
//! any JSON value, not only an object: a step's output is the API's answer as the engine stored it
//! ([`engine::connector::Outcome::Applied`] holds any document), and templates read any value (a path into one that
//! has no such member renders as `null`).

use clap::{ArgGroup, Parser, Subcommand};
use engine::clock::{Clock, SystemClock};
use engine::ledger::sqlite::{MIGRATIONS, OpenFailure, Options, SCHEMA_VERSION, SqliteLedger, open_failure};
use engine::ledger::{Error as LedgerError, Ledger, Resolution};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "flow", about = "Inspect Flow runs and resolve paused ones")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List paused runs, one a line: id, workflow, reason, separated by tabs (control characters escaped).
    ///
    /// A field is escaped so that what it holds cannot forge a line or a column: a backslash is written `\\`, a tab
    /// `\t`, a newline `\n`, a carriage return `\r`, any other control character, U+2028, U+2029 and the
    /// bidirectional formatting characters `\u{HEX}` (e.g. `\u{1b}`). A plain id is written as it is. Give
    /// `resolve --run` the id itself, not its escaped form.
    Paused {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
    },
    /// Record a person's decision about a paused run.
    #[command(group(ArgGroup::new("decision").required(true).args(["mark_done", "retry", "abort"])))]
    Resolve {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
        /// The paused run's id (as `flow paused` lists it, unescaped: `$'a\tb'` in a POSIX shell for `a\tb`); not
        /// blank.
        #[arg(long, value_name = "ID")]
        run: String,
        /// The effect happened: this JSON, any value (as an API's answer may be), is the step's output (it may start
        /// with `-`: `--mark-done -1`).
        #[arg(long, value_name = "JSON", allow_hyphen_values = true)]
        mark_done: Option<String>,
        /// Send it once more.
        #[arg(long)]
        retry: bool,
        /// Give up: the run fails with "aborted by NAME".
        #[arg(long)]
        abort: bool,
        /// Who decided (recorded with the resolution): a name, on one line (no control characters).
        #[arg(long, value_name = "NAME")]
        by: String,
    },
    /// Show a run's replays, one a line: number, start (UTC), trigger replaced, trigger set, separated by tabs.
    ///
    /// Oldest first. A replay's start is RFC 3339 UTC, to the millisecond. A trigger is the JSON the ledger holds,
    /// with control characters, U+2028, U+2029 and the bidirectional formatting characters written as JSON `\uXXXX`
    /// escapes, so each field is valid JSON on one line. Replays the ledger has no entry for (begun before it kept a
    /// history, or by a worker of an older build) are named on standard error, and a trigger unknown for that reason
    /// is an empty field.
    Replays {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
        /// The run's id (unescaped, as for `resolve --run`); not blank.
        #[arg(long, value_name = "ID")]
        run: String,
    },
    /// Show everything the ledger holds about one run, as one JSON document.
    ///
    /// The run's record, each of its step records (step, action, key, status, attempts, first and last attempt,
    /// lease, inputs hash, output or error; `paused_here` on the key a paused run waits at; `late_applied`, an earlier
    /// attempt's answer that it applied which came after a later attempt claimed the key), the plans of its writes
    /// and agent steps, the people's decisions and the replay history. Times are RFC 3339 UTC; stored documents are
    /// JSON values.
    Show {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
        /// The run's id (unescaped, as for `resolve --run`); not blank.
        #[arg(long, value_name = "ID")]
        run: String,
    },
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Why `flow` does not go on with a ledger file, which it leaves as it was.
enum Refusal {
    /// It is not a Flow ledger (or no file at all): bad input, exit 2.
    NotALedger(String),
    /// A Flow ledger of a newer schema version than this build's, which `flow` cannot read, or (for `resolve`) of an
    /// older one, which `flow` does not migrate: exit 2.
    OtherSchema(String),
    /// A ledger SQLite cannot read or write now (another connection holds its lock, a writer left a hot journal,
    /// this user may not read or write it, or create SQLite's files beside it, a page of it is damaged): a storage
    /// error, exit 1.
    Storage(String),
}

impl Refusal {
    fn fail(&self) -> ExitCode {
        match self {
            Refusal::NotALedger(message) | Refusal::OtherSchema(message) => fail(2, message),
            Refusal::Storage(message) => fail(1, message),
        }
    }
}

/// Opens the ledger at `path` for reading only ([`SqliteLedger::open_read_only`]): the file is not changed, whatever
/// follows.
fn open_read_only(path: &Path) -> Result<SqliteLedger, Refusal> {
    match path.try_exists() {
        Ok(true) => check_is_ledger(path),
        Ok(false) => return Err(Refusal::NotALedger(format!("no ledger at {}", path.display()))),
        // A directory on the way that this user may not search: whether there is a ledger is not known.
        Err(e) => Err(io_refusal(e, "cannot look it up")),
    }
    .map_err(|refusal| match refusal {
        Refusal::NotALedger(reason) => Refusal::NotALedger(format!("{}: not a Flow ledger: {reason}", path.display())),
        Refusal::OtherSchema(reason) => {
            Refusal::OtherSchema(format!("{}: a Flow ledger of another schema: {reason}", path.display()))
        }
        Refusal::Storage(reason) => Refusal::Storage(format!("{}: {reason}", path.display())),
    })?;
    SqliteLedger::open_read_only(path, Options::default()).map_err(|e| match e {
        // Its message names the file.
        LedgerError::Storage(detail) => Refusal::Storage(detail),
        LedgerError::Damaged { .. } => ledger_refusal(path, &e),
        e => Refusal::NotALedger(format!("{}: {e}", path.display())),
    })
}

/// Why `flow` stops at the failure `e` of the ledger at `path`, a file [`check_is_ledger`] found to be a ledger: a
/// storage error (exit 1), named with the file. Both commands say every failure of the ledger through this, so they
/// call one condition by one name: a page SQLite finds malformed ([`LedgerError::Damaged`], as the ledger reads
/// SQLite's `SQLITE_CORRUPT`) is a damaged ledger, whichever command reads it first, never a file that is no ledger.
fn ledger_refusal(path: &Path, e: &LedgerError) -> Refusal {
    Refusal::Storage(format!("{}: {}", path.display(), ledger_failure(path, e)))
}

/// What `flow` says of the failure `e` of the ledger at `path`, without naming the file but in the command that
/// checks a damaged one.
fn ledger_failure(path: &Path, e: &LedgerError) -> String {
    match e {
        LedgerError::Damaged { .. } => {
            format!("{e}; check it with sqlite3 {} \"PRAGMA integrity_check\"", path.display())
        }
        e => e.to_string(),
    }
}

/// The tables of a ledger of schema version `version` (at most this build's) and their columns, from the migrations
/// up to it applied to an empty database.
fn ledger_tables(version: i64) -> Result<BTreeMap<String, Vec<String>>, String> {
    let conn = rusqlite::Connection::open_in_memory().map_err(|e| e.to_string())?;
    for migration in MIGRATIONS.iter().take(usize::try_from(version).unwrap_or(0)) {
        conn.execute_batch(migration).map_err(|e| e.to_string())?;
    }
    tables(&conn).map_err(|e| e.to_string())
}

/// Every table of `conn` with its columns in order.
fn tables(conn: &rusqlite::Connection) -> rusqlite::Result<BTreeMap<String, Vec<String>>> {
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = BTreeMap::new();
    for name in names {
        let columns: Vec<String> = conn
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")?
            .query_map([&name], |row| row.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        out.insert(name, columns);
    }
    Ok(out)
}

/// Why SQLite could not open or read the file `path`, which starts like a SQLite database, as the ledger reads such a
/// failure ([`open_failure`]): a lock another connection holds, a hot `-journal`, a file, `-wal` or `-shm` this user
/// may not read, and a page SQLite finds malformed (a damaged file, said as [`ledger_failure`] says a damaged
/// ledger) are conditions of a ledger's storage, not signs that the file is no ledger (a storage error); what SQLite
/// cannot read as a database, or fails at otherwise, is refused as no ledger, `doing` saying what failed.
fn sqlite_refusal(path: &Path, e: &rusqlite::Error, doing: &str) -> Refusal {
    match open_failure(path, e) {
        OpenFailure::Storage(why) => Refusal::Storage(why),
        OpenFailure::Damaged(why) => Refusal::Storage(ledger_failure(path, &LedgerError::Damaged { detail: why })),
        OpenFailure::NotALedger(why) | OpenFailure::Other(why) => Refusal::NotALedger(format!("{doing}: {why}")),
    }
}

/// Why `flow` could not look up or read the ledger file itself: this user may not (a storage error: the file may well
/// be a ledger), or something else is wrong with it. The message does not name the file.
fn io_refusal(e: std::io::Error, doing: &str) -> Refusal {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        Refusal::Storage(format!("{doing}: {e} (check the permissions of the file and the directories on its path)"))
    } else {
        Refusal::NotALedger(format!("{doing}: {e}"))
    }
}

/// Refuses `path` unless it already is a Flow ledger, of this build's schema version or an older one, reading it
/// only. `SqliteLedger::open` creates the schema in a file that has none, which is right for a worker starting a new
/// ledger but would turn a mistyped path (an empty file, another database) into an empty ledger that lists no paused
/// runs. The refusal's message does not name the file.
fn check_is_ledger(path: &Path) -> Result<(), Refusal> {
    use std::io::Read;
    let not_a_ledger = |reason: String| Err(Refusal::NotALedger(reason));
    // Looked at before anything opens it: opening a FIFO waits for a writer, and reading a device is no answer.
    let metadata = std::fs::metadata(path).map_err(|e| io_refusal(e, "cannot read it"))?;
    if !metadata.is_file() {
        return not_a_ledger(match kind_of(&metadata.file_type()) {
            Some(kind) => format!("it is {kind}, not a regular file"),
            None => "it is not a regular file".to_string(),
        });
    }
    if metadata.len() == 0 {
        return not_a_ledger("the file is empty (a mistyped path?)".to_string());
    }
    let mut header = [0u8; 16];
    match std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut header)) {
        Ok(()) if &header == SQLITE_HEADER => {}
        Ok(()) => return not_a_ledger("not a SQLite database".to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            return not_a_ledger("not a SQLite database".to_string());
        }
        Err(e) => return Err(io_refusal(e, "cannot read it")),
    }
    // A connection that cannot change the file, even if it turns out not to be a ledger.
    let conn = engine::ledger::sqlite::open_unchanged(path).map_err(|e| sqlite_refusal(path, &e, "cannot open it"))?;
    let cannot_read = |e| sqlite_refusal(path, &e, "SQLite cannot read it");
    // The version and the tables in one snapshot: a worker of this build may migrate the file meanwhile, and a
    // version read before its migration with the tables after would not match them.
    let (version, found) = {
        let look = conn.unchecked_transaction().map_err(cannot_read)?;
        let version: i64 = look.pragma_query_value(None, "user_version", |row| row.get(0)).map_err(cannot_read)?;
        (version, tables(&look).map_err(cannot_read)?)
    };
    if version < 1 || !found.contains_key("runs") {
        return not_a_ledger("a SQLite database without the ledger schema".to_string());
    }
    if version > SCHEMA_VERSION {
        return Err(Refusal::OtherSchema(format!(
            "its schema version is {version}, newer than this flow's {SCHEMA_VERSION}: use a newer flow"
        )));
    }
    // A ledger of an older version is read as it is (`SqliteLedger::open_read_only`): its tables are those of its
    // version.
    let expected = ledger_tables(version).map_err(Refusal::NotALedger)?;
    for (table, columns) in &expected {
        match found.get(table) {
            None => return not_a_ledger(format!("a SQLite database without the ledger's table {table}")),
            Some(have) if have != columns => {
                return not_a_ledger(format!(
                    "its table {table} has the columns ({}), a ledger's has ({})",
                    have.join(", "),
                    columns.join(", ")
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// What a file that is not a regular one is, as `flow` names it: a directory, a device, a FIFO, a socket.
fn kind_of(file_type: &std::fs::FileType) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if file_type.is_char_device() {
            return Some("a character device");
        }
        if file_type.is_block_device() {
            return Some("a block device");
        }
        if file_type.is_fifo() {
            return Some("a FIFO (a named pipe)");
        }
        if file_type.is_socket() {
            return Some("a socket");
        }
    }
    file_type.is_dir().then_some("a directory")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Replays { ledger, run } => replays(&ledger, &run),
        Command::Show { ledger, run } => show(&ledger, &run),
        Command::Paused { ledger: path } => {
            let ledger = match open_read_only(&path) {
                Ok(l) => l,
                Err(refusal) => return refusal.fail(),
            };
            let ids = match ledger.paused_runs() {
                Ok(ids) => ids,
                Err(e) => return ledger_refusal(&path, &e).fail(),
            };
            let mut out = std::io::stdout().lock();
            for id in ids {
                let written = match ledger.get_run(&id) {
                    Ok(Some(run)) => {
                        let reason = run.reason.unwrap_or_default();
                        writeln!(out, "{}\t{}\t{}", field(&run.run_id), field(&run.workflow), field(&reason))
                    }
                    Ok(None) => Ok(()),
                    Err(e) => return ledger_refusal(&path, &e).fail(),
                };
                if let Err(e) = written {
                    return output_failed(&e);
                }
            }
            match out.flush() {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => output_failed(&e),
            }
        }
        Command::Resolve { ledger, run, mark_done, retry, abort, by } => {
            // Bad input is refused before anything is opened. A blank id names no run a person could mean.
            if !engine::ledger::names_someone(&run) {
                return fail(2, "--run must name the paused run (`flow paused` lists them)");
            }
            // The name is the resolution's only record of who decided: checked by the ledger's own rule.
            if let Some(refusal) = engine::ledger::by_refusal(&by) {
                return fail(2, &format!("--by {refusal}"));
            }
            let resolution = match (mark_done, retry, abort) {
                (Some(json), false, false) => match parse_output(&json) {
                    Ok(output) => Resolution::MarkDone { output },
                    Err(e) => return fail(2, &format!("--mark-done is not valid JSON for a step's output: {e}")),
                },
                (None, true, false) => Resolution::Retry,
                (None, false, true) => Resolution::Abort,
                _ => return fail(2, "give exactly one of --mark-done, --retry, --abort"),
            };
            let path = ledger;
            // Checked reading only, so that a refusal leaves the file as it was; only then opened to write (which
            // also sets the journal mode the engine uses, WAL, if the file had another).
            let unknown_run = || {
                fail(
                    2,
                    &format!(
                        "{}: no run {run:?} in this ledger; `flow paused --ledger {}` lists the paused runs",
                        path.display(),
                        path.display()
                    ),
                )
            };
            let look = match open_read_only(&path) {
                Ok(l) => l,
                Err(refusal) => return refusal.fail(),
            };
            match engine::executor::decidable(&look, &run, &resolution) {
                Err(engine::executor::Error::UnknownRun(_)) => return unknown_run(),
                Err(engine::executor::Error::Ledger(e)) => return ledger_refusal(&path, &e).fail(),
                // A decision that cannot apply to this pause is bad input: refused with the file untouched.
                Err(e @ engine::executor::Error::RetryWouldResend { .. }) => {
                    return fail(2, &format!("{}: {e}", path.display()));
                }
                // Not paused, or no key in its pause reason: the ledger refuses the decision (exit 1), unchanged.
                Err(e) => return fail(1, &format!("{}: {e}", path.display())),
                Ok(_) => {}
            }
            let version = look.schema_version();
            // Closed before the file is opened to write: a look at a log without a `-shm` holds SQLite's exclusive
            // lock (`open_unchanged`).
            drop(look);
            if version < SCHEMA_VERSION {
                return Refusal::OtherSchema(older_schema(&path, version)).fail();
            }
            // SQLite opens a file (or its -wal, -shm) this user may only read read-only and fails only at the write,
            // after its read left files that lock the owner out, and says only that the database is read-only when it
            // may not create its -wal or -shm beside the file: refused before it is opened, naming the file or the
            // directory (`open` refuses it too).
            if let Err(why) = engine::ledger::sqlite::check_writable(&path, &Options::default()) {
                return fail(1, &format!("{why}: recording a decision writes the ledger"));
            }
            let ledger = match SqliteLedger::open(&path, Options::default()) {
                Ok(l) => l,
                Err(e) => return ledger_refusal(&path, &e).fail(),
            };
            match engine::executor::record_resolution(&ledger, &run, &resolution, &by, SystemClock.now_ms()) {
                // The decision is recorded: a reader gone from standard output changes nothing about that.
                Ok(status) => match writeln!(std::io::stdout(), "run {} is now {}", field(&run), status.as_str()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => output_failed(&e),
                },
                // A run id the ledger does not hold is bad input (a typo, another ledger's run): nothing was written.
                Err(engine::executor::Error::UnknownRun(_)) => unknown_run(),
                // A write that waited out another connection's lock says so (the ledger's message), named here.
                Err(engine::executor::Error::Ledger(e)) => ledger_refusal(&path, &e).fail(),
                // Refused by `parse_output` already; were one to get through, still bad input, nothing written.
                Err(
                    e @ (engine::executor::Error::MarkDoneOutput(_) | engine::executor::Error::RetryWouldResend { .. }),
                ) => fail(2, &format!("{}: {e}", path.display())),
                Err(e) => fail(1, &format!("{}: {e}", path.display())),
            }
        }
    }
}

/// Why `resolve` does not record a decision in the ledger at `path`, of the older schema version `version`: opened to
/// write, the file would be migrated to this build's version, after which the workers of the build that wrote it,
/// which may still be using it, would refuse it when they next start (a ledger of a newer schema than theirs). So
/// `flow` leaves migrating to the workers, and says how to record the decision meanwhile.
fn older_schema(path: &Path, version: i64) -> String {
    format!(
        "{}: a Flow ledger of an older schema: its schema version is {version}, older than this flow's \
         {SCHEMA_VERSION}; flow records a decision only in a ledger of its own schema version and does not migrate \
         one (the workers of the build that wrote it would then refuse the file when they next start): record it with \
         the flow of the workers' build, or once a worker of this build has opened the ledger, which migrates it; \
         nothing was written",
        path.display()
    )
}

/// Opens the ledger at `path` to read only and calls `read` with it and its record of run `run`, all of it in one
/// read of the file ([`SqliteLedger::read_together`]: a worker's commit meanwhile cannot show, say, a decision beside
/// the pause it ended); or says the refusal and gives its exit code: a blank `--run` (refused before anything is
/// opened, as `resolve` refuses it), a file that is no ledger, a run it does not hold (exit 2), a storage error (exit
/// 1).
fn read_run<T>(
    path: &Path,
    run: &str,
    read: impl FnOnce(&SqliteLedger, engine::ledger::RunRecord) -> Result<T, LedgerError>,
) -> Result<T, ExitCode> {
    if !engine::ledger::names_someone(run) {
        return Err(fail(2, "--run must name a run"));
    }
    let ledger = open_read_only(path).map_err(|refusal| refusal.fail())?;
    let found = ledger.read_together(|l| match l.get_run(run)? {
        Some(record) => read(l, record).map(Some),
        None => Ok(None),
    });
    match found {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(fail(2, &format!("{}: no run {run:?} in this ledger", path.display()))),
        Err(e) => Err(ledger_refusal(path, &e).fail()),
    }
}

/// `flow replays`: the replays of run `run` in the ledger at `path`, one a line (see the module doc).
fn replays(path: &Path, run: &str) -> ExitCode {
    let (record, history) = match read_run(path, run, |l, record| Ok((record, l.replay_history(run)?))) {
        Ok(read) => read,
        Err(code) => return code,
    };
    // The history comes sorted by replay number (`Ledger::replay_history`).
    let unrecorded: Vec<u32> =
        (1..=record.replays).filter(|n| history.binary_search_by_key(n, |e| e.replay).is_err()).collect();
    if !unrecorded.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "flow: note: run {} was replayed {} times; replays {} left no entry in its history (begun before the \
             ledger kept one, at schema version 4, or by a worker of an older build): the triggers they replaced are \
             not known",
            field(run),
            record.replays,
            ranges(&unrecorded)
        );
    }
    let mut out = std::io::stdout().lock();
    for (i, entry) in history.iter().enumerate() {
        // What this replay set: the trigger the next replay replaced, or the run's own after the last one.
        let set = match history.get(i + 1) {
            Some(next) if next.replay == entry.replay + 1 => json_field(&next.replaced_trigger),
            None if record.replays == entry.replay => json_field(&record.trigger),
            _ => String::new(),
        };
        let replaced = json_field(&entry.replaced_trigger);
        if let Err(e) = writeln!(out, "{}\t{}\t{replaced}\t{set}", entry.replay, utc(entry.replayed_ms)) {
            return output_failed(&e);
        }
    }
    match out.flush() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => output_failed(&e),
    }
}

/// `flow show`'s document: a run and what the ledger holds about it, fields in this order.
#[derive(serde::Serialize)]
struct Shown {
    run_id: String,
    workflow: String,
    status: &'static str,
    reason: Option<String>,
    created: String,
    updated: String,
    replays: u32,
    trigger: serde_json::Value,
    steps: Vec<ShownStep>,
    plans: Vec<ShownPlan>,
    decisions: Vec<ShownDecision>,
    replay_history: Vec<ShownReplay>,
}

#[derive(serde::Serialize)]
struct ShownStep {
    step: String,
    action: String,
    key: String,
    status: &'static str,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    paused_here: bool,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_attempt: Option<String>,
    last_attempt: String,
    owner: String,
    fence: u64,
    lease_expiry: String,
    inputs_hash: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// The API's answers that an earlier attempt of this key applied, which came after a later attempt had claimed
    /// the key (`engine::executor::late_applied_marker`): for an at-most-once action, effects the record above does
    /// not hold; for a keyed or lookup-before-create one, usually the effect it holds.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    late_applied: Vec<ShownLate>,
}

/// How many of a key's earlier fences `show` looks at for a late answer (see [`ShownStep::late_applied`]): a key is
/// claimed a handful of times, and a fence past this many claims is a damaged record.
const LATE_FENCES_MAX: u64 = 10_000;

/// An earlier attempt's late answer that it applied (see [`ShownStep::late_applied`]): its output, or why the output
/// could not be stored (the answer shortened in it).
#[derive(serde::Serialize)]
struct ShownLate {
    fence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unstorable: Option<String>,
}

/// A plan of writes a step recorded before its first write (a writes step's list, an agent step's model plan),
/// under the step's key; the writes themselves are among the steps, under their own keys.
#[derive(serde::Serialize)]
struct ShownPlan {
    key: String,
    plan: serde_json::Value,
}

#[derive(serde::Serialize)]
struct ShownDecision {
    at: String,
    by: String,
    decision: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<serde_json::Value>,
    key: String,
    /// The key's status as the person saw it when deciding; left out when not known (filed by an older build).
    #[serde(skip_serializing_if = "Option::is_none")]
    seen_status: Option<&'static str>,
    /// The key's fence then: the attempt the decision was made on.
    #[serde(skip_serializing_if = "Option::is_none")]
    seen_fence: Option<u64>,
}

#[derive(serde::Serialize)]
struct ShownReplay {
    replay: u32,
    at: String,
    replaced_trigger: serde_json::Value,
}

/// A stored JSON document as a value of `show`'s document, read as the engine reads it ([`engine::doc::from_slice`]);
/// a stored text that is not JSON (a damaged ledger) as `{"unreadable": TEXT, "why": ERROR}`, the text as UTF-8 (bad
/// bytes as U+FFFD), so that it cannot be taken for an output that is a string.
fn stored_json(bytes: &[u8]) -> serde_json::Value {
    engine::doc::from_slice(bytes)
        .unwrap_or_else(|e| serde_json::json!({"unreadable": String::from_utf8_lossy(bytes), "why": e.to_string()}))
}

/// `flow show`: everything the ledger at `path` holds about run `run`, as one JSON document (see the module doc).
fn show(path: &Path, run: &str) -> ExitCode {
    let read = read_run(path, run, |l, record| {
        Ok((record, l.run_steps(run)?, l.run_plans(run)?, l.resolutions(run)?, l.replay_history(run)?))
    });
    let (record, steps, plans, decisions, history) = match read {
        Ok(read) => read,
        Err(code) => return code,
    };
    // By key, the order the ledger lists them in: the markers below are taken out by their keys.
    type Plans = std::collections::BTreeMap<engine::key::Key, Vec<u8>>;
    let mut plans: Plans = plans.into_iter().collect();
    // A retried keyed key's first attempt is filed among the plans under a key of its own: shown with the key.
    let first_attempt = |plans: &mut Plans, key: &engine::key::Key| {
        let text = plans.remove(&engine::executor::first_attempt_marker(key))?;
        Some(match std::str::from_utf8(&text).ok().and_then(|t| t.parse::<u64>().ok()) {
            Some(ms) => utc(ms),
            None => format!("unreadable: {:?}", String::from_utf8_lossy(&text)),
        })
    };
    // So is an earlier attempt's late answer that it applied, one per fence the key has moved past: looked for at the
    // last LATE_FENCES_MAX of them, while any plan is left (a damaged ledger's fence of 2^63 must not take forever).
    let late_applied = |plans: &mut Plans, key: &engine::key::Key, fence: u64| {
        let mut late = Vec::new();
        for earlier in fence.saturating_sub(LATE_FENCES_MAX).max(1)..fence {
            if plans.is_empty() {
                break;
            }
            if let Some(kept) = plans.remove(&engine::executor::late_applied_marker(key, earlier)) {
                let unstorable = kept.starts_with(engine::decide::UNSTORABLE_MARK.as_bytes());
                late.push(ShownLate {
                    fence: earlier,
                    output: (!unstorable).then(|| stored_json(&kept)),
                    unstorable: unstorable.then(|| String::from_utf8_lossy(&kept).into_owned()),
                });
            }
        }
        late
    };
    let paused_at = (record.status == engine::ledger::RunStatus::Paused)
        .then(|| record.reason.as_deref().and_then(engine::ledger::paused_key))
        .flatten();
    let shown = Shown {
        run_id: record.run_id.to_string(),
        workflow: record.workflow.to_string(),
        status: record.status.as_str(),
        reason: record.reason.clone(),
        created: utc(record.created_ms),
        updated: utc(record.updated_ms),
        replays: record.replays,
        trigger: stored_json(&record.trigger),
        steps: steps
            .into_iter()
            .map(|step| ShownStep {
                first_attempt: first_attempt(&mut plans, &step.key),
                late_applied: late_applied(&mut plans, &step.key, step.fence),
                paused_here: paused_at == Some(step.key),
                step: step.step_id.to_string(),
                action: step.action.to_string(),
                key: step.key.to_string(),
                status: step.status.as_str(),
                attempts: step.attempt_count,
                last_attempt: utc(step.last_attempt_ms),
                owner: step.owner.to_string(),
                fence: step.fence,
                lease_expiry: utc(step.lease_expiry_ms),
                inputs_hash: engine::key::Key(step.inputs_hash).to_string(),
                output: step.output.as_deref().map(stored_json),
                error: step.error,
            })
            .collect(),
        plans: plans.iter().map(|(key, plan)| ShownPlan { key: key.to_string(), plan: stored_json(plan) }).collect(),
        decisions: decisions
            .into_iter()
            .map(|d| ShownDecision {
                at: utc(d.at_ms),
                by: d.by,
                decision: d.resolution.name(),
                output: match d.resolution {
                    Resolution::MarkDone { output } => Some(output),
                    Resolution::Retry | Resolution::Abort => None,
                },
                key: d.key.to_string(),
                seen_status: d.seen.map(|s| s.status.as_str()),
                seen_fence: d.seen.map(|s| s.fence),
            })
            .collect(),
        replay_history: history
            .into_iter()
            .map(|e| ShownReplay {
                replay: e.replay,
                at: utc(e.replayed_ms),
                replaced_trigger: stored_json(&e.replaced_trigger),
            })
            .collect(),
    };
    let text = serde_json::to_string_pretty(&shown).expect("a document of strings, numbers and JSON values");
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{}", json_text(&text)).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => output_failed(&e),
    }
}

/// JSON text as `show` writes it: every character [`escaped`] names that serde_json writes as it is (DEL, the C1
/// controls, U+2028, U+2029, the bidirectional formatting characters; it escapes C0 controls itself) written as
/// JSON's `\uXXXX` ([`json_escaped`]), its newlines (between tokens, pretty-printed) kept.
fn json_text(text: &str) -> String {
    json_escaped(text, |c| c == '\n')
}

/// Ascending numbers as ranges: `1-3, 5`.
fn ranges(numbers: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < numbers.len() {
        let start = numbers[i];
        while i + 1 < numbers.len() && numbers[i + 1] == numbers[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push_str(", ");
        }
        let _ = if numbers[i] == start { write!(out, "{start}") } else { write!(out, "{start}-{}", numbers[i]) };
        i += 1;
    }
    out
}

/// A time in milliseconds since the Unix epoch (the engine's clock) as UTC in RFC 3339, to the millisecond:
/// `2024-05-01T12:00:00.123Z`.
fn utc(ms: u64) -> String {
    let (secs, millis) = (ms / 1_000, ms % 1_000);
    let (days, of_day) = ((secs / 86_400) as i64, secs % 86_400);
    // The civil date of a day count (Howard Hinnant's `civil_from_days`): eras of 400 years from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 { month_from_march + 3 } else { month_from_march - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let (hour, minute, second) = (of_day / 3_600, of_day % 3_600 / 60, of_day % 60);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

/// A stored JSON document (a trigger) as one field of `flow`'s output: the JSON as it is, its backslashes its own
/// escapes, with every other character [`escaped`] names (control characters, U+2028, U+2029, the bidirectional
/// formatting characters, all in the Basic Multilingual Plane) written as JSON's `\uXXXX`: the same document, still
/// valid JSON, that cannot forge a line or a column. (Canonical JSON holds a control character raw only inside a
/// string, DEL or C1, where `\u` is JSON's own escape for it.) Bytes that are not UTF-8, which no ledger of this
/// build writes, are shown as U+FFFD.
fn json_field(json: &[u8]) -> String {
    json_escaped(&String::from_utf8_lossy(json), |_| false)
}

/// JSON text with every character [`escaped`] names written as JSON's `\uXXXX`, but for backslashes (the text's own
/// escapes) and those `keep` keeps.
fn json_escaped(text: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c != '\\' && escaped(c) && !keep(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses a step's output as the engine parses step inputs: strictly ([`engine::canonical::canonicalize_bytes`]).
/// Plain serde_json would keep the last of a repeated member and round an integer no double holds into another one.
fn parse_output(json: &str) -> Result<serde_json::Value, String> {
    let canonical = engine::canonical::canonicalize_bytes(json.as_bytes()).map_err(|e| e.to_string())?;
    engine::doc::from_slice(&canonical).map_err(|e| e.to_string())
}

/// Whether `c` is written escaped in a field of `flow`'s output ([`field`]): a backslash (so that an escape can be
/// read back), a control character (C0, DEL, C1: a tab or newline would forge a column or a line, an escape sequence
/// would rewrite the terminal), a line or paragraph separator (some readers split lines at them) and the
/// bidirectional formatting characters (they reorder what a terminal shows, across tabs).
fn escaped(c: char) -> bool {
    c == '\\' || engine::ledger::breaks_a_line_or_its_order(c)
}

/// `text` as one field of `flow`'s output, escaped so that it is one field on one line: `\\`, `\t`, `\n`, `\r`, and
/// `\u{HEX}` for every other character [`escaped`] names; a text with none of them is written as it is.
fn field(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// [`field`], leaving a backslash as it is when `backslash` is false.
fn escape(text: &str, backslash: bool) -> Cow<'_, str> {
    let needs = |c: char| escaped(c) && (backslash || c != '\\');
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !needs(c) => out.push(c),
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

/// Says `message` on standard error, on one line (a control character in it, from a file name or a ledger's message,
/// written as [`field`] writes it; backslashes, which quoted names in it use, are left as they are), and exits `code`.
/// A standard error that is gone drops the message quietly, not a panic.
fn fail(code: u8, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "flow: {}", escape(message, false));
    ExitCode::from(code)
}

/// A write to standard output failed. A reader that has gone (`flow paused L | head -1`) wanted no more: success.
/// Anything else (a full disk behind a redirect) loses output the user asked for: a storage error.
fn output_failed(e: &std::io::Error) -> ExitCode {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return ExitCode::SUCCESS;
    }
    fail(1, &format!("cannot write standard output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{json_field, ranges, utc};

    #[test]
    fn utc_names_the_day_across_leap_years_and_centuries() {
        for (ms, want) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_714_564_800_123, "2024-05-01T12:00:00.123Z"),
            (4_102_444_799_999, "2099-12-31T23:59:59.999Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        ] {
            assert_eq!(utc(ms), want, "{ms}");
        }
    }

    #[test]
    fn ranges_join_runs_of_numbers() {
        assert_eq!(ranges(&[1]), "1");
        assert_eq!(ranges(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
    }

    #[test]
    fn a_json_field_escapes_what_would_forge_a_line_as_json_does() {
        assert_eq!(json_field(br#"{"a":"x\"y"}"#), r#"{"a":"x\"y"}"#, "JSON's own escapes stay");
        let forging = "{\"a\":\"\u{2028}\u{202e}\u{7f}\u{85}\"}";
        assert_eq!(json_field(forging.as_bytes()), r#"{"a":"\u2028\u202e\u007f\u0085"}"#);
        let value: serde_json::Value = serde_json::from_str(&json_field(forging.as_bytes())).unwrap();
        assert_eq!(value, serde_json::from_str::<serde_json::Value>(forging).unwrap(), "the same document");
    }
}
