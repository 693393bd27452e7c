//! The SQLite ledger (rusqlite, bundled SQLite): a file in WAL mode for real deployments, `:memory:` for
//! simulations. The same contract as [`super::memory::MemoryLedger`] (`tests/ledger_contract.rs`); transitions are
//! decided by the pure core in `transition.rs`, this module only reads and writes rows.
//!
//! # Schema and migrations
//! The schema version lives in `PRAGMA user_version`; [`MIGRATIONS`] are applied in order, each in its own
//! transaction together with the version bump. A file whose version is newer than this build knows is refused with
//! [`Error::SchemaTooNew`]. A file SQLite cannot read as a database (garbage bytes, a damaged header), or a
//! database at version 0 that already holds tables (not a ledger), is refused with [`Error::Corrupt`]; a page SQLite
//! finds malformed (`SQLITE_CORRUPT`), when the file is opened or at any later read, is [`Error::Damaged`]. Nothing is
//! ever recreated over either. [`SqliteLedger::open`] reads the version and the tables before it changes anything
//! (the switch to WAL rewrites the header), so a refused file, another program's database at a mistyped path, is
//! left byte for byte; an empty file becomes a new ledger. SQLite's `random()` is never used: every value stored
//! comes from the caller.
//!
//! [`SqliteLedger::open_read_only`] migrates nothing: it reads a file of an older version as it is, taking what the
//! version lacks as its migration would set it (`Reads`), so that a reader of another build's ledger (`flow paused`)
//! changes neither the file nor what that build's workers can open.
//!
//! # Settings
//! - Files: `journal_mode=WAL`, `busy_timeout` ([`Options::busy_timeout_ms`]), `synchronous=FULL` by default
//!   ([`Synchronous::Full`]): every commit fsyncs the WAL before `COMMIT` returns, so a committed transaction
//!   survives a power loss or an OS crash too. That is what the engine's promise needs: an at-most-once intent
//!   ("started", committed before the call) that a power cut rolled back would leave no trace of the call, and the
//!   email or payout would be sent again. [`Synchronous::Normal`] is the explicit trade of that durability for speed:
//!   WAL + NORMAL is durable against a crash of the process (a committed transaction is in the WAL file, in the OS
//!   page cache, before `COMMIT` returns; `tests/crash_sigkill.rs` kills a writer with SIGKILL to check it), but the
//!   WAL is fsynced only at checkpoints, so a power loss or kernel crash may roll back the last committed
//!   transactions (never corrupt the file), intents among them. Choose it only where a lost intent after a power cut
//!   is acceptable (or the disk's cache is battery-backed and the OS cannot crash without the process).
//! - `:memory:`: `journal_mode=OFF`, for speed (simulations). Without a journal SQLite cannot roll anything back,
//!   so there any storage error poisons the ledger (see "Failures"); nothing here is durable anyway.
//!
//! # Group commit: which writes may wait, and why that is safe
//! With [`Options::group_commit_ops_max`] = N > 0, writes run inside one open transaction that is committed every N
//! writes. Reads go through the same connection, so they see uncommitted writes: within the process the ledger
//! behaves exactly as if every write were committed. What a crash can lose is the open batch, and only writes whose
//! loss the engine recovers from are allowed to wait in it:
//! - **may wait**: a claim with `durable == false` (the intent of a keyed or otherwise repeatable call), the
//!   completion of such a claim, lease renewals, run status `Pending`/`Running`, rejected webhook records, inbox
//!   expiry, `forget_run`. Why safe: a lost keyed intent or keyed outcome leaves the key absent or `Started`, and
//!   after the restart the engine claims it again and resends **with the same idempotency key**; the API replays its
//!   stored response, so the effect is not repeated (within the API's key retention, which the engine checks before
//!   resending anyway). A lost renewal only shortens a lease whose owner died in the same crash. A lost `Running`
//!   leaves the run `Pending`, which is resumed the same way. A lost rejection, expiry or forget is bookkeeping that
//!   the next call redoes.
//! - **commit at once, together with the open batch**: a claim with `durable == true` (at-most-once and
//!   lookup-before-create intents: the intent must be on disk before the call, or a crash would forget that a call
//!   may have happened), the completion of a durably claimed key (so an at-most-once outcome is not turned into a
//!   needless pause), `intake` (the sender is acknowledged after it returns; the run must exist), `record_plan` (a
//!   plan is never replaced, so it must not be re-asked), `create_run`, run status `Paused`, `Succeeded`, `Failed`,
//!   resolutions (a person's decision), and [`Ledger::flush`]. A batch is committed in order, as one transaction, so
//!   nothing that was written after a write can survive it: a durable write commits every earlier write with it.
//!
//! In `:memory:` nothing outlives the process, so there no write needs committing at once: with N > 0 only the N-th
//! write (or [`Ledger::flush`]) ends a batch. The simulation runs SQLite this way.
//!
//! With N = 0 (the default) every write is its own transaction: a write of one statement (a fresh key's claim, the
//! completion of a started attempt, a run's status, a new run) in SQLite's autocommit mode, and a write that reads
//! before it writes (a claim on a taken key, any other completion, `intake`, `forget_run`) between `BEGIN IMMEDIATE`
//! and `COMMIT`.
//!
//! The open batch holds SQLite's write lock until it commits, and other connections do not see it: group commit
//! assumes one process owns the ledger file (the engine's case, and the simulation's). When several processes
//! share one file, use N = 0, so each write takes the lock (waiting up to `busy_timeout`) and releases it at once;
//! a write that reads first begins with `BEGIN IMMEDIATE`, so a claim's read and write are one atomic step across
//! processes (and a write of one statement is atomic by itself).
//!
//! # Read cache
//! With [`Options::cache_entries`] > 0 the ledger keeps the step and run records it has written or read in memory,
//! up to that many, and serves reads from them: `get`, `inspect`, `inspect_outcome`, `get_run`, `inspect_run` and
//! `run_status` run no statement when the record is cached, and a claim, a completion, a renewal or a run's status
//! change is decided on the cached record and written as one statement, with nothing read first. Every write goes to
//! SQLite as before, statement by statement, and updates the cached record only after its statement succeeded; a
//! storage failure empties the cache. `forget_run` drops the run's records from it, and while the cache holds
//! every row it deletes only from the tables that hold some of the run's (it notes which runs recorded a plan, a
//! resolution or a replay's entry in the history).
//! - Only a ledger that no other connection writes may cache: `:memory:`, or a file opened
//!   [`Options::exclusive`] (SQLite's lock keeps other processes out). [`SqliteLedger::open`] refuses a cache
//!   otherwise.
//! - A fresh `:memory:` database is written only through the ledger, so until the cache first fills it holds every
//!   row, and a key it does not hold is absent: a fresh key's claim is an `INSERT` with nothing read. A file may hold
//!   rows already, so there a record the cache does not hold is read from SQLite and then kept.
//! - When it holds `cache_entries` records it is emptied at once, and from then on holds only some rows (the same as
//!   a file's). A simulation forgets every finished run, so with a large enough `cache_entries` it never fills.
//! - Debug builds, which the tests run, read SQLite as well at every read the cache serves and assert that the two
//!   agree; so the simulation's tests still check what SQLite stored, and a release simulation runs no read statement
//!   for a cached record (stop 35 in `docs/speed.md`).
//!
//! # Failures
//! A storage error while a batch holds earlier writes rolls the whole batch back (SQLite cannot keep a transaction
//! after some failures) and the ledger refuses every later call with [`Error::Storage`]: the process must reopen it,
//! exactly as after a crash, since it may have acted on writes that are gone. With N = 0 only the failing write is
//! rolled back, except in `:memory:` (no journal): there every storage error poisons the ledger. Refusals of the
//! state machine ([`Error::Fenced`], [`Error::InvalidTransition`], ...) are decided before anything is written and
//! never roll anything back.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, ErrorCode, OptionalExtension, params};
use smallvec::SmallVec;

use super::transition::{self, ClaimEffect};
use super::{
    Claim, Claimed, CompactString, Completion, Delivery, Error, Intake, Ledger, Replay, ReplayEntry, Resolution,
    ResolutionRecord, Result, RunRecord, RunStatus, Seen, Status, StepOutcome, StepRecord,
};
use crate::fastmap::FastMap;
use crate::key::Key;

/// The schema migrations; entry `i` takes the schema from version `i` to `i + 1`.
pub const MIGRATIONS: &[&str] = &[
    // Version 1. Step records are keyed by the 32-byte key (WITHOUT ROWID: the row lives in the key's b-tree) and
    // indexed by run, so forget_run touches only the run's rows. (`plans.run_id` may be NULL here: builds before
    // every plan was filed under its run let a plan recorded without one take its step record's run, or none.)
    "CREATE TABLE steps (
        key BLOB PRIMARY KEY NOT NULL,
        run_id TEXT NOT NULL,
        step_id TEXT NOT NULL,
        action TEXT NOT NULL,
        inputs_hash BLOB NOT NULL,
        attempt_count INTEGER NOT NULL,
        status TEXT NOT NULL,
        owner TEXT NOT NULL,
        lease_expiry_ms INTEGER NOT NULL,
        fence INTEGER NOT NULL,
        last_attempt_ms INTEGER NOT NULL,
        output BLOB,
        error TEXT,
        durable INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX steps_by_run ON steps (run_id);
    CREATE TABLE plans (
        key BLOB PRIMARY KEY NOT NULL,
        run_id TEXT,
        plan BLOB NOT NULL,
        recorded_ms INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX plans_by_run ON plans (run_id);
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY NOT NULL,
        workflow TEXT NOT NULL,
        status TEXT NOT NULL,
        trigger BLOB NOT NULL,
        reason TEXT,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX runs_by_status ON runs (status, run_id);
    CREATE TABLE inbox (
        source TEXT NOT NULL,
        event_id TEXT NOT NULL,
        dedup_key TEXT,
        run_id TEXT NOT NULL,
        received_ms INTEGER NOT NULL,
        PRIMARY KEY (source, event_id)
    ) WITHOUT ROWID;
    CREATE UNIQUE INDEX inbox_by_dedup_key ON inbox (source, dedup_key) WHERE dedup_key IS NOT NULL;
    CREATE INDEX inbox_by_received ON inbox (received_ms);
    CREATE TABLE rejected (
        id INTEGER PRIMARY KEY,
        source TEXT NOT NULL,
        event_id TEXT NOT NULL,
        reason TEXT NOT NULL,
        received_ms INTEGER NOT NULL
    );
    CREATE INDEX rejected_by_received ON rejected (received_ms);
    CREATE TABLE resolutions (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL,
        key BLOB NOT NULL,
        resolution TEXT NOT NULL,
        by_whom TEXT NOT NULL,
        at_ms INTEGER NOT NULL
    );
    CREATE INDEX resolutions_by_run ON resolutions (run_id, id);",
    // Version 2. A run's status moved its entry in `runs_by_status (status, run_id)` at every change (pending →
    // running → succeeded: two deletes and two inserts besides the row's own), about half the cost of the change. The
    // listings need only the unfinished (pending or running) and the paused runs: `unfinished` is 1 exactly when the
    // status is pending or running (NULL otherwise), and each listing has a partial index. A change between pending
    // and running does not set `unfinished`, so SQLite leaves both indexes alone; a run enters the first index when
    // created (or resumed) and leaves it when it ends or pauses, and only paused runs are in the second.
    "ALTER TABLE runs ADD COLUMN unfinished INTEGER;
    UPDATE runs SET unfinished = 1 WHERE status IN ('pending', 'running');
    DROP INDEX runs_by_status;
    CREATE INDEX runs_unfinished ON runs (run_id) WHERE unfinished = 1;
    CREATE INDEX runs_paused ON runs (run_id) WHERE status = 'paused';",
    // Version 3. How many replays of a run have begun (`Ledger::begin_replay`): a drive ends the run only while the
    // count is the one it started under (`Ledger::finish_drive`), so a drive of the old trigger that outlives a
    // replay's start cannot overwrite the replay's pause or end.
    "ALTER TABLE runs ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;",
    // Version 4. The history of a run's replays: each replay that begins files the trigger it replaces under its
    // number (the run's `replays` once it began) and its time, in `Ledger::begin_replay`'s transaction
    // (`Ledger::replay_history`). Keyed by run first, so `forget_run` deletes a run's entries through the key. A file
    // migrated from version 3 has no entry for the replays begun before: they are counted in `runs.replays` only.
    "CREATE TABLE replays (
        run_id TEXT NOT NULL,
        replay INTEGER NOT NULL,
        trigger BLOB NOT NULL,
        replayed_ms INTEGER NOT NULL,
        PRIMARY KEY (run_id, replay)
    ) WITHOUT ROWID;",
    // Version 5. The status and fence of the key a person's decision was made on (`ResolutionRecord::seen`): a drive
    // applies a decision only to the attempt and the outcome it was made on (an attempt that outlived its lease may
    // land its answer after the decision). NULL for the decisions filed before (not known).
    "ALTER TABLE resolutions ADD COLUMN seen_status TEXT;
    ALTER TABLE resolutions ADD COLUMN seen_fence INTEGER;",
];

/// Prepared statements kept per connection: more than the ledger's distinct statements, so none is ever re-prepared.
const STATEMENT_CACHE_CAPACITY: usize = 64;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The first schema version with `runs.unfinished` (and the partial index of the unfinished runs).
const UNFINISHED_COLUMN_SINCE: i64 = 2;
/// The first schema version with `runs.replays`.
const REPLAYS_COUNTED_SINCE: i64 = 3;
/// The first schema version with the `replays` table, the runs' replay history.
const REPLAY_HISTORY_SINCE: i64 = 4;
/// The first schema version with `resolutions.seen_status` and `seen_fence`.
const SEEN_STATUS_SINCE: i64 = 5;

/// Reads a run's resolutions: the columns [`SqliteLedger::resolutions`] takes, in its order.
const RESOLUTIONS: &str =
    "SELECT key, resolution, by_whom, at_ms, seen_status, seen_fence FROM resolutions WHERE run_id = ?1 ORDER BY id";
/// [`RESOLUTIONS`] for a file before version 5, which keeps no decision's seen status: not known, as migrating it
/// would set.
const RESOLUTIONS_UNSEEN: &str =
    "SELECT key, resolution, by_whom, at_ms, NULL, NULL FROM resolutions WHERE run_id = ?1 ORDER BY id";

/// Reads a run row: the columns [`load_run_with`] takes, in its order.
const LOAD_RUN: &str =
    "SELECT workflow, status, trigger, reason, created_ms, updated_ms, replays FROM runs WHERE run_id = ?1";
/// [`LOAD_RUN`] for a file before version 3, which counts no replays: 0, as migrating it would set.
const LOAD_RUN_UNCOUNTED: &str =
    "SELECT workflow, status, trigger, reason, created_ms, updated_ms, 0 FROM runs WHERE run_id = ?1";
const UNFINISHED_RUNS: &str = "SELECT run_id FROM runs WHERE unfinished = 1 ORDER BY run_id";
/// [`UNFINISHED_RUNS`] for a file before version 2, which has no `unfinished` column: by status, as migrating it
/// would set the column.
const UNFINISHED_RUNS_BY_STATUS: &str =
    "SELECT run_id FROM runs WHERE status IN ('pending', 'running') ORDER BY run_id";

/// How a ledger reads its file: with this build's statements, or, for a file of an older schema version opened to
/// read only ([`SqliteLedger::open_read_only`], which does not migrate it), with statements that read what that
/// version has and take what it lacks as migrating the file would set it: no replay counted before version 3, no
/// replay history before version 4, a run unfinished by its status before version 2. Chosen when the file is opened.
/// A migration only ever adds (a table, a column with its value), so an older version's statements still read a
/// file that a worker migrates meanwhile.
#[derive(Debug, Clone, Copy)]
struct Reads {
    /// The file's schema version when it was opened.
    version: i64,
    load_run: &'static str,
    unfinished_runs: &'static str,
    resolutions: &'static str,
}

impl Reads {
    const CURRENT: Reads = Reads::of(SCHEMA_VERSION);

    const fn of(version: i64) -> Reads {
        Reads {
            version,
            load_run: if version >= REPLAYS_COUNTED_SINCE { LOAD_RUN } else { LOAD_RUN_UNCOUNTED },
            unfinished_runs: if version >= UNFINISHED_COLUMN_SINCE {
                UNFINISHED_RUNS
            } else {
                UNFINISHED_RUNS_BY_STATUS
            },
            resolutions: if version >= SEEN_STATUS_SINCE { RESOLUTIONS } else { RESOLUTIONS_UNSEEN },
        }
    }

    /// Whether the file keeps the runs' replay history.
    fn replay_history(&self) -> bool {
        self.version >= REPLAY_HISTORY_SINCE
    }
}

/// How hard a commit pushes to the disk (SQLite's `synchronous`), for a file (`:memory:` has no disk). See the
/// module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// Faster, and durable against crashes of the process only: the WAL is fsynced at checkpoints, so a power loss
    /// or an OS crash may roll back the last commits, a started at-most-once intent among them (after which the
    /// engine, seeing no intent, sends the email or payout again). Trades that durability for speed.
    Normal,
    /// Every commit fsyncs the WAL: durable against power loss and OS crashes too. The default.
    #[default]
    Full,
}

/// Options of [`SqliteLedger`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Writes that may wait are committed every this many writes; 0 = every write is its own transaction.
    pub group_commit_ops_max: usize,
    /// Files only; [`Synchronous::Full`] by default (see [`Synchronous::Normal`] for what the faster one risks).
    pub synchronous: Synchronous,
    /// How long a write waits for another connection's lock before failing.
    pub busy_timeout_ms: u64,
    /// Files only: `locking_mode=EXCLUSIVE`, for a ledger one process owns (faster; no other process can read it
    /// while it is open).
    pub exclusive: bool,
    /// How many step and run records to keep in memory to serve reads without a statement (0 = none; see "Read
    /// cache" in the module doc). Only for a ledger no other connection writes: `:memory:`, or a file opened
    /// [`Options::exclusive`]; [`SqliteLedger::open`] refuses it otherwise.
    pub cache_entries: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            group_commit_ops_max: 0,
            synchronous: Synchronous::Full,
            busy_timeout_ms: 5_000,
            exclusive: false,
            cache_entries: 0,
        }
    }
}

/// The SQLite ledger. `Send + Sync`: the connection sits behind a mutex; every call is short and runs inline.
#[derive(Debug)]
pub struct SqliteLedger {
    state: Mutex<State>,
    group_commit_ops_max: usize,
    /// False for `:memory:` (`journal_mode=OFF`): a failed write cannot be rolled back, and nothing outlives the
    /// process.
    journal: bool,
    /// Whether the read cache is on ([`Options::cache_entries`] > 0).
    cached: bool,
    /// The statements that read the file's schema ([`Reads::CURRENT`] unless it is older and opened read-only).
    reads: Reads,
}

#[derive(Debug)]
struct State {
    conn: Connection,
    /// Writes in the open transaction (0 = no transaction open).
    batch_ops: usize,
    /// Set when a failure rolled back writes that callers were told had succeeded.
    failed: Option<String>,
    cache: Cache,
}

/// What the read cache knows of a row.
enum Cached<T> {
    /// The row as stored.
    Hit(T),
    /// The cache holds every row, and not this one: it is absent.
    Absent,
    /// The cache cannot say (it is off, or holds only some rows): read the database.
    Unknown,
}

/// The read cache (see "Read cache" in the module doc): step records (with whether they were claimed durably) and
/// run records as stored, kept up to date by every write of this ledger. Hash maps, looked up and never iterated.
#[derive(Debug, Default)]
struct Cache {
    /// Most entries (steps, runs and `run_rows` together) it holds; 0 = off.
    capacity: usize,
    /// Whether it holds every step and run row of the database: a fresh `:memory:` database, nothing dropped since.
    complete: bool,
    steps: FastMap<Key, (StepRecord, bool)>,
    runs: FastMap<CompactString, RunRecord>,
    /// What each run has in the cached tables and beyond them, for `forget_run`.
    run_rows: FastMap<CompactString, RunRows>,
}

/// A run's rows as far as the cache knows.
#[derive(Debug, Default)]
struct RunRows {
    /// Its cached step records.
    keys: SmallVec<[Key; 4]>,
    /// Whether a plan, a resolution or a replay's history entry was recorded for it (tables the cache does not hold).
    plans: bool,
    resolutions: bool,
    replays: bool,
}

impl Cache {
    fn new(capacity: usize, complete: bool) -> Self {
        Self { capacity, complete: capacity > 0 && complete, ..Self::default() }
    }

    fn on(&self) -> bool {
        self.capacity > 0
    }

    fn miss<T>(&self) -> Cached<T> {
        if self.complete { Cached::Absent } else { Cached::Unknown }
    }

    fn step(&self, key: &Key) -> Cached<&(StepRecord, bool)> {
        match self.steps.get(key) {
            Some(entry) => Cached::Hit(entry),
            None => self.miss(),
        }
    }

    fn step_mut(&mut self, key: &Key) -> Cached<&mut (StepRecord, bool)> {
        let miss = self.miss();
        match self.steps.get_mut(key) {
            Some(entry) => Cached::Hit(entry),
            None => miss,
        }
    }

    fn run(&self, run_id: &str) -> Cached<&RunRecord> {
        match self.runs.get(run_id) {
            Some(run) => Cached::Hit(run),
            None => self.miss(),
        }
    }

    fn run_mut(&mut self, run_id: &str) -> Cached<&mut RunRecord> {
        let miss = self.miss();
        match self.runs.get_mut(run_id) {
            Some(run) => Cached::Hit(run),
            None => miss,
        }
    }

    /// Drops everything when full: the cache then holds only some rows, and misses read the database. (Dropping all
    /// at once needs no order of use to be kept, and a simulation, which forgets its finished runs, never fills it.)
    fn make_room(&mut self) {
        if self.steps.len() + self.runs.len() + self.run_rows.len() >= self.capacity {
            self.invalidate();
        }
    }

    /// Forgets everything it holds; after a failed write, whose effect on the database it cannot know.
    fn invalidate(&mut self) {
        self.steps = FastMap::default();
        self.runs = FastMap::default();
        self.run_rows = FastMap::default();
        self.complete = false;
    }

    /// Keeps a step row as stored (after a write, or a read of the database).
    fn put_step(&mut self, record: StepRecord, durable: bool) {
        if !self.on() {
            return;
        }
        self.make_room();
        let key = record.key;
        let run_id = record.run_id.clone();
        if self.steps.insert(key, (record, durable)).is_none() {
            self.run_rows.entry(run_id).or_default().keys.push(key);
        }
    }

    /// Keeps a run row as stored (after a write, or a read of the database).
    fn put_run(&mut self, run: RunRecord) {
        if !self.on() {
            return;
        }
        self.make_room();
        self.runs.insert(run.run_id.clone(), run);
    }

    /// Notes that a row of a table the cache does not hold was written for `run_id`.
    fn note_row(&mut self, run_id: &str, row: fn(&mut RunRows) -> &mut bool) {
        if !self.on() {
            return;
        }
        if !self.run_rows.contains_key(run_id) {
            self.make_room();
        }
        *row(self.run_rows.entry(run_id.into()).or_default()) = true;
    }

    /// Which of the run's tables may hold rows of it, in `forget_run`'s order (plans, steps, resolutions, replays,
    /// runs): all of them unless the cache holds every row.
    fn tables_of(&self, run_id: &str) -> [bool; 5] {
        if !self.complete {
            return [true; 5];
        }
        let rows = self.run_rows.get(run_id);
        [
            rows.is_some_and(|r| r.plans),
            rows.is_some_and(|r| !r.keys.is_empty()),
            rows.is_some_and(|r| r.resolutions),
            rows.is_some_and(|r| r.replays),
            self.runs.contains_key(run_id),
        ]
    }

    fn forget_run(&mut self, run_id: &str) {
        self.runs.remove(run_id);
        for key in self.run_rows.remove(run_id).map(|rows| rows.keys).unwrap_or_default() {
            self.steps.remove(&key);
        }
    }
}

/// Whether a write must be committed before it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    Now,
    MayWait,
}

fn storage(e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => Error::Corrupt { detail: e.to_string() },
        // A page SQLite finds malformed in a file it reads as a database: the ledger is damaged, not something else.
        Some(ErrorCode::DatabaseCorrupt) => Error::Damaged { detail: e.to_string() },
        // SQLite's own words ("database is locked") do not say that the lock is another process's, nor that it passes.
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => Error::Storage(locked(&e)),
        _ => Error::Storage(e.to_string()),
    }
}

/// Why a statement waited out the busy timeout and gave up: another connection holds the lock.
fn locked(e: &rusqlite::Error) -> String {
    format!(
        "the ledger is locked by another connection (another process is writing it, or a worker holds it \
         exclusively); try again when it is free: {e}"
    )
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt { detail: detail.into() }
}

/// What a failure of SQLite to open, or first read, an existing file says about the file: the one reading that the
/// ledger's opens ([`SqliteLedger::open`], [`SqliteLedger::open_read_only`]) and the `flow` command line share, so
/// that a worker and `flow` call one condition by one name. The messages do not name the file itself (its caller
/// does), only the other file or directory at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenFailure {
    /// A condition of the file's storage that passes, or that an administrator mends, not a sign that it is no
    /// ledger: another connection holds its lock, a writer that crashed left a hot `-journal`, this user may not
    /// read or write the file, its `-wal` or `-shm`, or create them in its directory.
    Storage(String),
    /// SQLite cannot read it as a database: it is none (or its header is damaged beyond reading).
    NotALedger(String),
    /// SQLite reads it as a database but finds part of it malformed (`SQLITE_CORRUPT`): a damaged file, which may
    /// well be a ledger, as [`Error::Damaged`] says of one; a condition of its storage, as [`OpenFailure::Storage`].
    Damaged(String),
    /// Neither, as far as SQLite says (an unexpected error of SQLite's): each caller keeps its own reading, the
    /// ledger a storage error, `flow` bad input.
    Other(String),
}

/// Reads the failure `e` of SQLite opening or first reading the existing file `path` (see [`OpenFailure`]). A
/// permission problem is a storage error, whatever SQLite calls it: a file, `-wal` or `-shm` this user may not open
/// ("unable to open database file"), one it may only read ("attempt to write a readonly database"), a directory it
/// may not create SQLite's journal in. A file SQLite reads as a database and finds malformed is damaged. A file
/// SQLite cannot open for another reason, and cannot read, is no ledger.
pub fn open_failure(path: &Path, e: &rusqlite::Error) -> OpenFailure {
    let extended = e.sqlite_error().map(|failure| failure.extended_code);
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => OpenFailure::Storage(locked(e)),
        _ if extended == Some(rusqlite::ffi::SQLITE_READONLY_ROLLBACK) => OpenFailure::Storage(format!(
            "a writer stopped in the middle of a transaction, and reading it means rolling its -journal back into \
             the file, which a read-only connection does not do (a worker opening the ledger does): {e}"
        )),
        // SQLite's name for a journal it could not create (`errno` EACCES, the file not there).
        _ if extended == Some(rusqlite::ffi::SQLITE_READONLY_DIRECTORY) => {
            let file = resolved(path);
            let dir = directory_of(&file);
            OpenFailure::Storage(format!(
                "this user may not create files in its directory {}, where SQLite must create the ledger's journal \
                 (its -wal or -journal) beside the file to write it: {e}",
                dir.display()
            ))
        }
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => OpenFailure::Storage(match unreadable(path) {
            Some(why) => format!("{why} (SQLite: {e})"),
            None => format!(
                "SQLite may not write what reading it needs (check the permissions of the file, its -wal and -shm, \
                 and their directory): {e}"
            ),
        }),
        Some(ErrorCode::CannotOpen) => match unreadable(path) {
            Some(why) => OpenFailure::Storage(format!("{why} (SQLite: {e})")),
            None => OpenFailure::NotALedger(e.to_string()),
        },
        Some(ErrorCode::DatabaseCorrupt) => OpenFailure::Damaged(e.to_string()),
        Some(ErrorCode::NotADatabase | ErrorCode::SystemIoFailure) => OpenFailure::NotALedger(e.to_string()),
        _ => OpenFailure::Other(e.to_string()),
    }
}

/// The first of the ledger file `path`, its `-wal` and its `-shm` (those that are there, next to the file with its
/// symbolic links resolved) that this user may not open to read, which any reader of the ledger must, or a directory
/// on the way to the file that this user may not search; said without naming `path`. `None` if no permission stands
/// in the way.
fn unreadable(path: &Path) -> Option<String> {
    let denied = |e: &std::io::Error| e.kind() == std::io::ErrorKind::PermissionDenied;
    if let Err(e) = std::fs::metadata(path)
        && denied(&e)
    {
        return Some(format!("cannot look it up: {e} (a directory on its path this user may not search)"));
    }
    let resolved = resolved(path);
    let files = [
        (resolved.clone(), None),
        (with_suffix(&resolved, "-wal"), Some("write-ahead log")),
        (with_suffix(&resolved, "-shm"), Some("write-ahead log's index")),
    ];
    files.into_iter().find_map(|(file, what)| match may_access(&file, rustix::fs::Access::READ_OK) {
        Err(e) if denied(&e) => Some(match what {
            None => format!("this user may not open it to read: {e}"),
            Some(what) => format!("this user may not open its {what} {} to read: {e}", file.display()),
        }),
        _ => None,
    })
}

/// Whether this process may open `file` for `access`, asked of the kernel without opening it (`faccessat` with the
/// effective user and group, as `open` would judge). Opening the file and closing it again would drop every POSIX
/// lock this process holds on it: those of another SQLite connection to the same ledger in this process (SQLite keeps
/// its own descriptors open for that reason). That connection would then hold its log index unlocked, and another
/// process could reset the index under it ("disk I/O error", or SIGBUS). `NotFound` when the file is not there.
fn may_access(file: &Path, access: rustix::fs::Access) -> std::io::Result<()> {
    rustix::fs::accessat(rustix::fs::CWD, file, access, rustix::fs::AtFlags::EACCESS).map_err(std::io::Error::from)
}

/// `path` with its symbolic links resolved, where SQLite keeps its `-wal`, `-shm` and `-journal` (`path` itself if
/// it cannot be resolved).
fn resolved(path: &Path) -> std::path::PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Why SQLite could not create the ledger file `path` (`e`, which says only "unable to open database file"): its
/// directory is not there, or this user may not create files in it (asked of the kernel, [`may_access`], which judges
/// root, access lists and read-only mounts as creating the file would), said as [`check_writable`] says it of an
/// existing ledger's directory; SQLite's words alone if neither.
fn cannot_create(path: &Path, e: &rusqlite::Error) -> String {
    let dir = directory_of(path);
    match may_access(dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK) {
        Err(why) if why.kind() == std::io::ErrorKind::NotFound => {
            format!("{}: cannot create: its directory {} does not exist (SQLite: {e})", path.display(), dir.display())
        }
        Err(why) => format!(
            "{}: this user may not create files in this directory ({why}), and to create the ledger {} SQLite must \
             create it here, with its write-ahead log and its index beside it (SQLite: {e})",
            dir.display(),
            path.display()
        ),
        Ok(()) => format!("{}: cannot create: {e}", path.display()),
    }
}

/// The directory that holds `file`.
fn directory_of(file: &Path) -> &Path {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// A failure of the first reads of the existing file `path`, as [`open_failure`] reads it: a file SQLite cannot read
/// as a database is refused as corrupt (with SQLite's reason), one it finds malformed as damaged; a lock another
/// connection holds is not corruption, nor is a hot `-journal` that a read-only connection may not roll back, nor a
/// permission problem.
fn read_error(path: &Path, e: rusqlite::Error) -> Error {
    match open_failure(path, &e) {
        OpenFailure::NotALedger(why) => corrupt(format!("{}: {why}", path.display())),
        OpenFailure::Damaged(why) => Error::Damaged { detail: format!("{}: {why}", path.display()) },
        OpenFailure::Storage(why) | OpenFailure::Other(why) => Error::Storage(format!("{}: {why}", path.display())),
    }
}

/// A connection to the existing database file at `path` that changes nothing on disk: not the file, and not its
/// directory (no `-wal` or `-shm` appears or disappears), while it reads every committed transaction, those a worker
/// left in its `-wal` included. `PRAGMA query_only` is set on top. How it opens the file depends on what is there
/// first (next to `path` with its symbolic links resolved, where SQLite keeps them):
///
/// - **A WAL-mode file and no `-wal`** (its last connection closed cleanly: it copied the log into the file and
///   removed it): `immutable=1`, with which SQLite reads the file alone, as on read-only media, opening no other
///   file and taking no lock; the file holds every committed transaction. Any other reader of a WAL file creates a
///   `-wal` and a `-shm`, even a read-only one, and only the last connection, closing with write access to the
///   file, removes them: a reader that may not write the file left both behind, owned by itself, after which the
///   owner's worker could no longer write the ledger ("attempt to write a readonly database"); in a directory it
///   may not write, the read failed. The price: SQLite assumes the file does not change under this connection, so
///   a writer that opens the ledger after the look and checkpoints into the file before this connection's last
///   read (a worker every 10,000 pages, or any connection that closes last) could make the read fail as corrupt or
///   mix two states. The ledger is never harmed, and `flow`'s reads last milliseconds: run it again.
/// - **A `-wal` and a `-shm`** (a worker has the ledger open, or died): opened read-only. SQLite reads the log
///   through the index in the `-shm` that it shares with a live worker (and rebuilds after a worker died: that, and
///   the marks every reader leaves there, rewrite the `-shm`), and a read-only connection never checkpoints: the
///   file and the `-wal` stay byte for byte, and nothing is removed. (`immutable=1` would ignore the `-wal`.)
/// - **A `-wal` and no `-shm`** (a worker opened [`Options::exclusive`] has it, or died): `locking_mode=EXCLUSIVE`
///   before the first read, with which SQLite keeps the log's index in memory instead of creating a `-shm`, and no
///   checkpoint on close (`SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE`), so the `-wal` stays as it is. That lock needs the
///   file open for writing: a reader that may not write it is refused, and any reader waits for a live exclusive
///   worker (up to the busy timeout, then "database is locked"). If that worker closes meanwhile, removing its
///   log, SQLite makes a new, empty one; no other connection can use it while this one holds the lock, so closing
///   removes it, as the worker's closing did.
/// - **A rollback-journal file and no `-wal`**: opened read-only, under SQLite's shared lock, which creates no
///   file. A hot `-journal` a crashed writer left is refused rather than rolled back into the file (a worker
///   opening the ledger rolls it back).
///
/// If the last live connection closes between the look and SQLite's first read, removing its `-wal` and `-shm`, a
/// read-only reader makes them again and leaves them, as any SQLite reader would; the window is microseconds.
pub fn open_unchanged(path: &Path) -> rusqlite::Result<Connection> {
    use rusqlite::OpenFlags;
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let with_suffix = |suffix: &str| with_suffix(&path, suffix);
    let (wal, shm) = (with_suffix("-wal").exists(), with_suffix("-shm").exists());
    let read_only = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = if !wal && wal_mode(&path) {
        Connection::open_with_flags(immutable_uri(&path), read_only | OpenFlags::SQLITE_OPEN_URI)?
    } else if wal && !shm {
        let conn =
            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        if conn.is_readonly(rusqlite::MAIN_DB)? {
            // SQLite opened it read-only (the file is not writable): its exclusive lock would fail as an I/O error.
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
                Some(
                    "its write-ahead log has no -shm index, and reading the log without creating one needs write \
                     access to the file"
                        .to_string(),
                ),
            ));
        }
        let no_checkpoint = rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE;
        conn.set_db_config(no_checkpoint, true)?;
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")?;
        let wal_before = file_id(&with_suffix("-wal"));
        // The first read takes the lock (waiting for a live worker's), then looks for the log again: a new, empty one
        // is this connection's own (see above), which closing is let remove.
        conn.pragma_query_value(None, "schema_version", |row| row.get::<_, i64>(0))?;
        let wal_now = file_id(&with_suffix("-wal"));
        if wal_now != wal_before && wal_now.is_some_and(|(_, _, len, _)| len == 0) {
            conn.set_db_config(no_checkpoint, false)?;
        }
        conn
    } else {
        Connection::open_with_flags(&path, read_only)?
    };
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// `path` with `suffix` appended to its file name: SQLite's `-wal`, `-shm` or `-journal` of the database `path`.
fn with_suffix(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    std::path::PathBuf::from(name)
}

/// Refuses an existing ledger that this process could open only to read: its file, or the `-wal` or `-shm` next to
/// it (next to the file with its symbolic links resolved, where SQLite keeps them), which this user may not open for
/// writing (another user's file, a read-only mount); the `-shm` not with [`Options::exclusive`], with which SQLite
/// keeps the log's index in memory. SQLite opens such a file read-only without a word and fails
/// only at the first write ("attempt to write a readonly database", naming no file); by then its first read has
/// made a `-wal` and a `-shm` (a WAL file read without them), which a read-only connection cannot remove when it
/// closes: they stay, owned by this user, and the file's owner can no longer write the ledger either. The check asks
/// the kernel whether each file that is there may be opened to write, without opening it ([`may_access`]).
///
/// Refuses as well a ledger whose `-wal` (or `-shm`) is not there, in a directory where this user may not create
/// files: SQLite must create them beside the file to write it in WAL mode, and says only "attempt to write a
/// readonly database" when it cannot, or, with a `-wal` there and no `-shm`, "unable to open database file", which
/// read as a damaged ledger. Whether the directory takes a file is asked of the kernel as well ([`may_access`]), which
/// judges root, access lists and read-only mounts as creating a file would; nothing in the directory is checked when
/// both are there.
///
/// A missing file is not refused (SQLite creates it, or says why not), nor anything that is not a regular file
/// (SQLite says what is wrong with it). The refusal names the file or directory and the reason, e.g.
/// `/srv/L.db: cannot open it to write: Permission denied (os error 13)`.
pub fn check_writable(path: &Path, options: &Options) -> std::result::Result<(), String> {
    if !std::fs::metadata(path).is_ok_and(|metadata| metadata.is_file()) {
        return Ok(());
    }
    let open_to_write = |file: &Path| may_access(file, rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK);
    open_to_write(path).map_err(|e| format!("{}: cannot open it to write: {e}", path.display()))?;
    let resolved = resolved(path);
    let companions: &[(&str, &str)] = if options.exclusive {
        &[("-wal", "write-ahead log")]
    } else {
        &[("-wal", "write-ahead log"), ("-shm", "index of the write-ahead log")]
    };
    // What SQLite must create when it opens the file to write.
    let mut missing = Vec::new();
    for (suffix, what) in companions {
        let file = with_suffix(&resolved, suffix);
        match open_to_write(&file) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing.push(format!("{what} {}", file.file_name().unwrap_or_default().to_string_lossy()));
            }
            Err(e) => {
                return Err(format!(
                    "{}: cannot open it to write: {e} (SQLite's {what} of {})",
                    file.display(),
                    path.display()
                ));
            }
            Ok(_) => {}
        }
    }
    if !missing.is_empty() {
        let dir = directory_of(&resolved);
        // Write and search permission on the directory are what creating a file in it takes.
        may_access(dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK).map_err(|e| {
            format!(
                "{}: this user may not create files in this directory ({e}), and to write the ledger {} SQLite must \
                 create its {} here",
                dir.display(),
                path.display(),
                missing.join(" and ")
            )
        })?;
    }
    Ok(())
}

/// What tells the file `path` names from another one made under the same name after it was removed: its inode (which
/// a new file often reuses at once), length and modification time (not its change time, which SQLite's `fchown` of
/// a log it opens as root moves).
fn file_id(path: &Path) -> Option<(u64, u64, u64, std::time::SystemTime)> {
    let metadata = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (device, inode) = {
        use std::os::unix::fs::MetadataExt as _;
        (metadata.dev(), metadata.ino())
    };
    #[cfg(not(unix))]
    let (device, inode) = (0, 0);
    Some((device, inode, metadata.len(), metadata.modified().ok()?))
}

/// Whether the database header at `path` says WAL mode (its read version, byte 19, is 2; SQLite opens the log of a
/// file whose header says so). False for a file too short or unreadable: SQLite then reports what is wrong with it.
fn wal_mode(path: &Path) -> bool {
    use std::io::Read;
    let mut header = [0u8; 20];
    std::fs::File::open(path).and_then(|mut file| file.read_exact(&mut header)).is_ok() && header[19] == 2
}

/// The (Unix) `path` as a SQLite URI that opens it immutable: every byte but an unreserved one or `/` is
/// percent-encoded, so a `?`, `#` or `%` in a name is not read as URI syntax.
fn immutable_uri(path: &Path) -> String {
    let bytes = path.as_os_str().as_encoded_bytes();
    // `file://` and an empty authority before an absolute path (`file:` alone would read `//x` as an authority).
    let mut uri = String::from(if bytes.starts_with(b"/") { "file://" } else { "file:" });
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

impl SqliteLedger {
    /// Opens (or creates) the ledger file at `path` in WAL mode, migrating it to [`SCHEMA_VERSION`]. An existing
    /// file that this process may only read, or whose `-wal` or `-shm` it may only read, is refused with
    /// [`Error::Storage`] before SQLite opens it ([`check_writable`]), and left as it was.
    pub fn open(path: &Path, options: Options) -> Result<Self> {
        if options.cache_entries > 0 && !options.exclusive {
            return Err(Error::Storage(format!(
                "{}: a read cache (cache_entries = {}) needs a ledger no other connection writes: open it exclusive",
                path.display(),
                options.cache_entries
            )));
        }
        // Before SQLite opens it: SQLite opens a file this process may only read read-only, and its first read
        // leaves files behind that lock the file's owner out.
        check_writable(path, &options).map_err(Error::Storage)?;
        let existed = path.exists();
        let conn = Connection::open(path)
            .map_err(|e| if existed { read_error(path, e) } else { Error::Storage(cannot_create(path, &e)) })?;
        let read_err = |e| read_error(path, e);
        conn.busy_timeout(std::time::Duration::from_millis(options.busy_timeout_ms)).map_err(storage)?;
        if options.exclusive {
            conn.pragma_update(None, "locking_mode", "EXCLUSIVE").map_err(read_err)?;
        }
        // Before anything changes the file: a database that is not a ledger (another program's, at a mistyped path),
        // or a ledger of a newer schema, is refused as it is. Switching to WAL rewrites the header (bytes 18 and 19),
        // for good. Read in one transaction, so that another worker's migration is seen whole or not at all. The
        // first statement that reads the file: garbage bytes fail here with SQLITE_NOTADB.
        let (found, tables) = {
            let look = conn.unchecked_transaction().map_err(read_err)?;
            read_schema(&look, read_err)?
        };
        judge_schema(found, tables).map_err(|e| in_file(path, e))?;
        let mode = switch_to_wal(&conn, options.busy_timeout_ms).map_err(read_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::Storage(format!("{}: could not switch to WAL mode (got {mode})", path.display())));
        }
        let synchronous = match options.synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous).map_err(storage)?;
        // Checkpoint less often than the default 1,000 pages: fewer stalls on the write path; the WAL stays bounded.
        conn.pragma_update(None, "wal_autocheckpoint", 10_000).map_err(storage)?;
        // 64 MiB of page cache (negative = KiB): random 32-byte keys touch pages all over the steps b-tree.
        conn.pragma_update(None, "cache_size", -65_536).map_err(storage)?;
        // A file may hold rows already: the cache starts as a cache of some rows, filled as they are read.
        Self::finish_open(conn, options, true, false).map_err(|e| in_file(path, e))
    }

    /// Opens an existing ledger file for reading only: nothing is migrated and the journal mode is left as it is,
    /// so the file is not changed (`flow paused`, `flow replays`, and `flow resolve`'s checks before it writes).
    /// A file of an older schema version than this build's [`SCHEMA_VERSION`] is read as it is, what its version
    /// lacks taken as migrating it would set it (no replay counted before version 3, no replay history before
    /// version 4; see the module doc); [`SqliteLedger::schema_version`] says which it is. A file of a newer version is
    /// refused with [`Error::SchemaTooNew`], and a database without a ledger's schema version with
    /// [`Error::Corrupt`]. Writes through the ledger fail.
    pub fn open_read_only(path: &Path, options: Options) -> Result<Self> {
        let conn = open_unchanged(path).map_err(|e| read_error(path, e))?;
        conn.busy_timeout(std::time::Duration::from_millis(options.busy_timeout_ms)).map_err(storage)?;
        let found: i64 =
            conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(|e| read_error(path, e))?;
        if found > SCHEMA_VERSION {
            return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
        }
        if found < 1 {
            return Err(corrupt(format!(
                "{}: schema version {found}: a SQLite database without the ledger schema, not a ledger",
                path.display()
            )));
        }
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        Ok(Self {
            state: Mutex::new(State { conn, batch_ops: 0, failed: None, cache: Cache::new(0, false) }),
            group_commit_ops_max: options.group_commit_ops_max,
            journal: true,
            cached: false,
            reads: Reads::of(found),
        })
    }

    /// Runs `read`, whose reads through this ledger then see one state of the file (they share one read
    /// transaction), for a reader that puts several reads of one run together and must not show a mix of states, as
    /// `flow show` does: without it, a worker's commit between two reads could show a decision beside the pause it
    /// ended. The transaction ends (nothing written) when `read` returns. While a batch of writes is open the reads
    /// already share its transaction, which is left as it is.
    pub fn read_together<T>(&self, read: impl FnOnce(&Self) -> Result<T>) -> Result<T> {
        let began = {
            let state = self.lock()?;
            if state.batch_ops > 0 || !state.conn.is_autocommit() {
                false
            } else {
                control(&state.conn, "BEGIN").map_err(storage)?;
                true
            }
        };
        let out = read(self);
        if began {
            let state = self.lock()?;
            if !state.conn.is_autocommit() {
                control(&state.conn, "COMMIT").map_err(storage)?;
            }
        }
        out
    }

    /// The schema version of the file as this ledger reads it: [`SCHEMA_VERSION`] (a writable open migrates the
    /// file to it), or the older version of a file opened with [`SqliteLedger::open_read_only`].
    pub fn schema_version(&self) -> i64 {
        self.reads.version
    }

    /// Opens a fresh ledger in memory (for simulations and tests).
    pub fn open_in_memory(options: Options) -> Result<Self> {
        let conn = Connection::open_in_memory().map_err(storage)?;
        conn.pragma_update(None, "journal_mode", "OFF").map_err(storage)?;
        // 16 KiB pages (before the first table): shallower b-trees for the random 32-byte keys. callgrind, `mixed` at
        // 20 k steps with a simulated 1 MiB last-level cache, against the default 4 KiB: instructions -1.7 %,
        // last-level read misses -5.5 %, writes the same (8 KiB: -1.9 %, -3.2 %; 64 KiB: -1.5 %, -5.9 %, writes +2 %;
        // 1 KiB: +16 %). A file keeps the default, the size of the OS's pages that its writes go out in.
        conn.pragma_update(None, "page_size", 16_384).map_err(storage)?;
        // A fresh database, written only through this ledger: the cache holds every row until it first fills.
        Self::finish_open(conn, options, false, true)
    }

    fn finish_open(mut conn: Connection, options: Options, journal: bool, fresh: bool) -> Result<Self> {
        // rusqlite keeps 16 prepared statements by default; the ledger uses more than that, and an evicted statement
        // is parsed and planned again on its next use.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE_CAPACITY);
        migrate(&mut conn)?;
        Ok(Self {
            state: Mutex::new(State {
                conn,
                batch_ops: 0,
                failed: None,
                cache: Cache::new(options.cache_entries, fresh),
            }),
            group_commit_ops_max: options.group_commit_ops_max,
            journal,
            cached: options.cache_entries > 0,
            reads: Reads::CURRENT,
        })
    }

    fn lock(&self) -> Result<MutexGuard<'_, State>> {
        // A panic while holding the lock may have left a half-done write in the open transaction; going on would be
        // unsafe and it is a bug elsewhere anyway.
        let state = self.state.lock().expect("the SQLite ledger's mutex was poisoned by a panic during a write");
        if let Some(reason) = &state.failed {
            return Err(Error::Storage(format!("the ledger failed earlier and must be reopened: {reason}")));
        }
        Ok(state)
    }

    /// Runs a read on the connection (it sees the open batch).
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let state = self.lock()?;
        f(&state.conn)
    }

    /// Runs a read that may be served by the cache, or fill it.
    fn read_cached<T>(&self, f: impl FnOnce(&Connection, &mut Cache) -> Result<T>) -> Result<T> {
        let mut state = self.lock()?;
        let State { conn, cache, .. } = &mut *state;
        f(conn, cache)
    }

    /// Runs a write inside the open batch (opening one if needed) and commits per the module doc's rules.
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<(T, Commit)>) -> Result<T> {
        self.write_cached(|conn, _| f(conn))
    }

    /// [`SqliteLedger::write`] with the cache, which `f` keeps up to date with what it writes.
    fn write_cached<T>(&self, f: impl FnOnce(&Connection, &mut Cache) -> Result<(T, Commit)>) -> Result<T> {
        let mut state = self.lock()?;
        if state.batch_ops == 0 {
            // IMMEDIATE takes the write lock before the write's reads, so its decision holds across processes.
            control(&state.conn, "BEGIN IMMEDIATE").map_err(storage)?;
        }
        let State { conn, cache, .. } = &mut *state;
        match f(conn, cache) {
            Ok((value, commit)) => {
                state.batch_ops += 1;
                if (commit == Commit::Now && self.commit_timing_matters())
                    || state.batch_ops >= self.group_commit_ops_max
                {
                    commit_batch(&mut state, self.journal)?;
                }
                Ok(value)
            }
            // An error of the state machine wrote nothing: the batch goes on.
            Err(e) if !failed_in_storage(&e) => finish_if_empty(&mut state, e),
            Err(e) => {
                fail_batch(&mut state, self.journal, &e);
                Err(e)
            }
        }
    }

    /// Whether a write committed at once differs from one that waits in the batch: only with group commit, and only
    /// where something outlives the process (in `:memory:` nothing does).
    fn commit_timing_matters(&self) -> bool {
        self.group_commit_ops_max > 0 && self.journal
    }

    /// Runs a write that is one statement. Without group commit (and so outside any batch) it runs in SQLite's
    /// autocommit mode: the statement is its own transaction, atomic by itself, and the two statements
    /// `BEGIN IMMEDIATE` and `COMMIT` around it are not run (they were a twentieth of a SQLite simulation's work).
    /// With group commit it joins the open batch like any write.
    fn write_one<T>(&self, f: impl FnOnce(&Connection) -> Result<(T, Commit)>) -> Result<T> {
        self.write_one_cached(|conn, _| f(conn))
    }

    /// [`SqliteLedger::write_one`] with the cache, which `f` keeps up to date with what it writes.
    fn write_one_cached<T>(&self, f: impl FnOnce(&Connection, &mut Cache) -> Result<(T, Commit)>) -> Result<T> {
        if self.group_commit_ops_max > 0 {
            return self.write_cached(f);
        }
        let mut state = self.lock()?;
        debug_assert_eq!(state.batch_ops, 0, "without group commit no batch outlives its write");
        let State { conn, cache, .. } = &mut *state;
        match f(conn, cache) {
            Ok((value, _)) => Ok(value),
            // An error of the state machine wrote nothing.
            Err(e) if !failed_in_storage(&e) => Err(e),
            Err(e) => {
                fail_batch(&mut state, self.journal, &e);
                Err(e)
            }
        }
    }
}

/// Runs a transaction-control statement (`BEGIN IMMEDIATE`, `COMMIT`) from the statement cache. Every write that must
/// commit at once (all of them with the default `group_commit_ops_max` of 0) begins and commits a transaction, and
/// parsing both statements again each time (`execute_batch`) was a tenth of a SQLite simulation's time.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Whether `e` is a failure of SQLite's (a statement may have done part of its work, or the transaction is gone), not
/// a refusal of the state machine, which is decided before anything is written.
fn failed_in_storage(e: &Error) -> bool {
    matches!(e, Error::Storage(_) | Error::Corrupt { .. } | Error::Damaged { .. })
}

/// After a refused write: closes the transaction when it holds nothing, then returns the refusal.
fn finish_if_empty<T>(state: &mut State, refusal: Error) -> Result<T> {
    if state.batch_ops == 0 {
        control(&state.conn, "COMMIT").map_err(storage)?;
    }
    Err(refusal)
}

fn commit_batch(state: &mut State, journal: bool) -> Result<()> {
    if state.batch_ops == 0 {
        return Ok(());
    }
    match control(&state.conn, "COMMIT") {
        Ok(()) => {
            state.batch_ops = 0;
            Ok(())
        }
        Err(e) => {
            let e = storage(e);
            fail_batch(state, journal, &e);
            Err(e)
        }
    }
}

/// Rolls the open transaction back after a storage failure; poisons the ledger if that lost earlier writes.
fn fail_batch(state: &mut State, journal: bool, e: &Error) {
    let earlier_writes = state.batch_ops > 0 || !journal;
    let _ = state.conn.execute_batch("ROLLBACK");
    state.batch_ops = 0;
    // The failed write may have changed a cached record before its statement failed, and the rollback may have undone
    // earlier writes: the cache no longer knows what is stored.
    state.cache.invalidate();
    if earlier_writes {
        state.failed = Some(e.to_string());
    }
}

/// Puts the file in WAL mode and returns the mode it is in. Switching needs the file to itself for a moment, and
/// SQLite answers "busy" at once, without waiting `busy_timeout`, when another connection holds a lock while it
/// switches (waiting could deadlock): workers deployed together open a fresh file at once. The switch is tried
/// again, every 10 ms, for as long as `busy_timeout` allows, as SQLite waits for any other lock.
fn switch_to_wal(conn: &Connection, busy_timeout_ms: u64) -> rusqlite::Result<String> {
    let mut waited_ms = 0;
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) && waited_ms < busy_timeout_ms =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
                waited_ms += 10;
            }
            other => return other,
        }
    }
}

fn migrate(conn: &mut Connection) -> Result<()> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(storage)?;
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    // Workers deployed together open a fresh (or older) ledger at once. Each would read the version, then apply the
    // same migration ("table steps already exists"). The version is read again under the write lock, which the
    // others wait for (`busy_timeout`), so exactly one migrates and the others find the schema current; and it is
    // judged there, where the version and the tables are read in one snapshot (read apart, another worker's
    // migration between them made a fresh file look like a database with tables and no version).
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate).map_err(storage)?;
    let found = schema_version(&tx)?;
    for (from, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(migration).map_err(storage)?;
        tx.pragma_update(None, "user_version", from as i64 + 1).map_err(storage)?;
    }
    tx.commit().map_err(storage)
}

/// `e`, a row of run `run_id` found unreadable, naming the row (`row`) and its run, so that a person can find it.
fn in_row(e: Error, row: &str, run_id: &str) -> Error {
    match e {
        Error::Corrupt { detail } => corrupt(format!("{row} of run {run_id:?}: {detail}")),
        other => other,
    }
}

/// `e`, a refusal of the file at `path` as no ledger or as damaged, naming the file.
fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Corrupt { detail } => corrupt(format!("{}: {detail}", path.display())),
        Error::Damaged { detail } => Error::Damaged { detail: format!("{}: {detail}", path.display()) },
        other => other,
    }
}

/// The ledger schema version of `conn`'s file, refusing one this build cannot migrate ([`judge_schema`]). Reads
/// only.
fn schema_version(conn: &Connection) -> Result<i64> {
    let (found, tables) = read_schema(conn, storage)?;
    judge_schema(found, tables)
}

/// The file's `user_version` and how many entries (tables, indexes...) its schema holds, SQLite's failures said by
/// `failed`. Read apart from a transaction, another worker's migration between the two reads can make a fresh file
/// look like a database with tables and no version: the caller reads both in one.
fn read_schema(conn: &Connection, failed: impl Fn(rusqlite::Error) -> Error) -> Result<(i64, i64)> {
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(&failed)?;
    let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0)).map_err(&failed)?;
    Ok((found, tables))
}

/// The ledger schema version `found` of a file whose schema holds `tables` entries, refused when this build cannot
/// migrate it: newer, negative, or a database that has tables but no version (not a ledger: another program's).
fn judge_schema(found: i64, tables: i64) -> Result<i64> {
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew { found, supported: SCHEMA_VERSION });
    }
    if found < 0 {
        return Err(corrupt(format!("negative schema version {found}")));
    }
    if found == 0 && tables > 0 {
        return Err(corrupt("a SQLite database with tables but no ledger schema version: not a ledger"));
    }
    Ok(found)
}

// --- rows ---------------------------------------------------------------------------------------------------------

/// The columns of a step row after its key, in the order `load_step` reads and `store_step` writes them (a macro, so
/// the SQL texts are built at compile time).
macro_rules! step_columns {
    () => {
        "run_id, step_id, action, inputs_hash, attempt_count, status, owner, lease_expiry_ms, fence, \
         last_attempt_ms, output, error, durable"
    };
}

fn parse_status(s: &str) -> Result<Status> {
    Ok(match s {
        "started" => Status::Started,
        "succeeded" => Status::Succeeded,
        "failed" => Status::Failed,
        "unknown" => Status::Unknown,
        other => return Err(corrupt(format!("unknown step status {other:?}"))),
    })
}

fn parse_run_status(s: &str) -> Result<RunStatus> {
    Ok(match s {
        "pending" => RunStatus::Pending,
        "running" => RunStatus::Running,
        "succeeded" => RunStatus::Succeeded,
        "failed" => RunStatus::Failed,
        "paused" => RunStatus::Paused,
        other => return Err(corrupt(format!("unknown run status {other:?}"))),
    })
}

fn key_of(blob: &[u8]) -> Result<Key> {
    <[u8; 32]>::try_from(blob).map(Key).map_err(|_| corrupt(format!("a key of {} bytes", blob.len())))
}

/// Times and counters are `u64` in Rust and `INTEGER` (`i64`) in SQLite; the cast keeps every bit.
fn to_sql(n: u64) -> i64 {
    n as i64
}

fn from_sql(n: i64) -> u64 {
    n as u64
}

/// A step row's columns as read ([`step_columns!`] in order), before they are checked.
type StepRow = (
    CompactString,
    CompactString,
    CompactString,
    Vec<u8>,
    i64,
    CompactString,
    CompactString,
    (i64, i64, i64),
    Option<Vec<u8>>,
    Option<String>,
    bool,
);

/// Reads the [`step_columns!`] of a row, the first at `at`.
fn step_row(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<StepRow> {
    Ok((
        text(r, at)?,
        text(r, at + 1)?,
        text(r, at + 2)?,
        r.get::<_, Vec<u8>>(at + 3)?,
        r.get::<_, i64>(at + 4)?,
        text(r, at + 5)?,
        text(r, at + 6)?,
        (r.get::<_, i64>(at + 7)?, r.get::<_, i64>(at + 8)?, r.get::<_, i64>(at + 9)?),
        r.get::<_, Option<Vec<u8>>>(at + 10)?,
        r.get::<_, Option<String>>(at + 11)?,
        r.get::<_, bool>(at + 12)?,
    ))
}

/// The step record of `key` from its row, and whether it was claimed durably.
fn step_record(key: &Key, row: StepRow) -> Result<(StepRecord, bool)> {
    let (run_id, step_id, action, hash, attempts, status, owner, (lease, fence, last), output, error, durable) = row;
    let inputs_hash = <[u8; 32]>::try_from(hash.as_slice())
        .map_err(|_| corrupt(format!("an inputs hash of {} bytes", hash.len())))?;
    let attempt_count = u32::try_from(attempts).map_err(|_| corrupt(format!("attempt count {attempts}")))?;
    let record = StepRecord {
        key: *key,
        run_id,
        step_id,
        action,
        inputs_hash,
        attempt_count,
        status: parse_status(&status)?,
        owner,
        lease_expiry_ms: from_sql(lease),
        fence: from_sql(fence),
        last_attempt_ms: from_sql(last),
        output,
        error,
    };
    Ok((record, durable))
}

/// The step record of `key` and whether it was claimed durably.
fn load_step(conn: &Connection, key: &Key) -> Result<Option<(StepRecord, bool)>> {
    let mut stmt =
        conn.prepare_cached(concat!("SELECT ", step_columns!(), " FROM steps WHERE key = ?1")).map_err(storage)?;
    let row = stmt.query_row([&key.0[..]], |r| step_row(r, 0)).optional().map_err(storage)?;
    row.map(|row| step_record(key, row)).transpose()
}

/// A text column as a `CompactString`, read in place: up to 24 bytes it needs no heap block (a `String` would).
fn text(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<CompactString> {
    let value = row.get_ref(index)?;
    match value.as_str() {
        Ok(text) => Ok(CompactString::from(text)),
        Err(e) => Err(rusqlite::Error::FromSqlConversionFailure(index, value.data_type(), Box::new(e))),
    }
}

/// Whether a step row is new or replaces the stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Row {
    New,
    Stored,
}

/// Writes the row; returns how many rows changed (0 when a `Row::New` found the key taken).
fn store_step(conn: &Connection, record: &StepRecord, durable: bool, row: Row) -> Result<usize> {
    let sql = match row {
        Row::New => concat!(
            "INSERT OR IGNORE INTO steps (key, ",
            step_columns!(),
            ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        ),
        // An UPDATE rewrites the row in place; INSERT OR REPLACE would delete and re-insert it and its index entry.
        Row::Stored => {
            "UPDATE steps SET run_id = ?2, step_id = ?3, action = ?4, inputs_hash = ?5, attempt_count = ?6, \
             status = ?7, owner = ?8, lease_expiry_ms = ?9, fence = ?10, last_attempt_ms = ?11, output = ?12, \
             error = ?13, durable = ?14 WHERE key = ?1"
        }
    };
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    stmt.execute(params![
        &record.key.0[..],
        record.run_id.as_str(),
        record.step_id.as_str(),
        record.action.as_str(),
        &record.inputs_hash[..],
        record.attempt_count,
        record.status.as_str(),
        record.owner.as_str(),
        to_sql(record.lease_expiry_ms),
        to_sql(record.fence),
        to_sql(record.last_attempt_ms),
        record.output,
        record.error,
        durable,
    ])
    .map_err(storage)
}

/// The common completion, `Started` under the presented fence, as one conditional `UPDATE` with nothing read
/// first. It writes exactly what [`transition::complete`] decides for that case: the new status, the output or the
/// error, and the lease released to `min(lease, now)`. Returns `false` when the row is not a started attempt under
/// `fence` (or `now_ms` or `fence` does not fit SQLite's integers), for the caller to decide on the stored record.
/// (No `RETURNING`: SQLite buffers returned rows in an ephemeral table, which cost more than the read it saves.)
fn complete_started(conn: &Connection, key: &Key, fence: u64, completion: &Completion, now_ms: u64) -> Result<bool> {
    let (Ok(now), Ok(fence)) = (i64::try_from(now_ms), i64::try_from(fence)) else { return Ok(false) };
    let (output, error) = completion.output_and_error();
    // A lease past i64::MAX is stored negative (`to_sql`), and is later than any `now` that fits.
    let mut stmt = conn
        .prepare_cached(
            "UPDATE steps SET status = ?2, output = ?3, error = ?4, \
             lease_expiry_ms = CASE WHEN lease_expiry_ms BETWEEN 0 AND ?5 THEN lease_expiry_ms ELSE ?5 END \
             WHERE key = ?1 AND fence = ?6 AND status = ?7",
        )
        .map_err(storage)?;
    let changed = stmt
        .execute(params![
            &key.0[..],
            transition::completion_status(completion).as_str(),
            output,
            error,
            now,
            fence,
            Status::Started.as_str()
        ])
        .map_err(storage)?;
    Ok(changed == 1)
}

/// Whether `key` was claimed durably (false when it has no record).
fn claimed_durably(conn: &Connection, key: &Key) -> Result<bool> {
    let mut stmt = conn.prepare_cached("SELECT durable FROM steps WHERE key = ?1").map_err(storage)?;
    Ok(stmt.query_row([&key.0[..]], |r| r.get::<_, bool>(0)).optional().map_err(storage)?.unwrap_or(false))
}

/// A run's `unfinished` column: 1 while it is pending or running, NULL otherwise (see version 2 of [`MIGRATIONS`]).
fn unfinished_column(status: RunStatus) -> Option<i64> {
    status.is_unfinished().then_some(1)
}

fn insert_run(conn: &Connection, run: &RunRecord) -> Result<bool> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT OR IGNORE INTO runs \
             (run_id, workflow, status, trigger, reason, created_ms, updated_ms, unfinished, replays) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .map_err(storage)?;
    let inserted = stmt
        .execute(params![
            run.run_id.as_str(),
            run.workflow.as_str(),
            run.status.as_str(),
            run.trigger,
            run.reason,
            to_sql(run.created_ms),
            to_sql(run.updated_ms),
            unfinished_column(run.status),
            run.replays,
        ])
        .map_err(storage)?;
    Ok(inserted == 1)
}

fn run_ids(conn: &Connection, sql: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(storage)?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map_err(storage)
}

fn record_plan(conn: &Connection, run_id: &str, key: &Key, plan: &[u8], now_ms: u64) -> Result<(Vec<u8>, Commit)> {
    let mut insert = conn
        .prepare_cached("INSERT OR IGNORE INTO plans (key, run_id, plan, recorded_ms) VALUES (?1, ?2, ?3, ?4)")
        .map_err(storage)?;
    let inserted = insert.execute(params![&key.0[..], run_id, plan, to_sql(now_ms)]).map_err(storage)?;
    if inserted == 1 {
        return Ok((plan.to_vec(), Commit::Now));
    }
    let in_force = get_plan(conn, key)?.expect("INSERT OR IGNORE ignored the plan, so a plan is recorded");
    // Nothing was written; committing is still harmless and keeps the rule simple.
    Ok((in_force, Commit::Now))
}

fn get_plan(conn: &Connection, key: &Key) -> Result<Option<Vec<u8>>> {
    let mut stmt = conn.prepare_cached("SELECT plan FROM plans WHERE key = ?1").map_err(storage)?;
    stmt.query_row([&key.0[..]], |r| r.get(0)).optional().map_err(storage)
}

/// Debug builds, which the tests run, check every step row the cache answers for against the database, so that a
/// simulation's reads still test what was written.
fn verify_step(conn: &Connection, key: &Key, cached: Option<(&StepRecord, bool)>) -> Result<()> {
    if cfg!(debug_assertions) {
        let stored = load_step(conn, key)?;
        assert_eq!(
            stored.as_ref().map(|(r, d)| (r, *d)),
            cached,
            "the read cache disagrees with the database on {key}"
        );
    }
    Ok(())
}

/// [`verify_step`] for a run row.
fn verify_run(conn: &Connection, run_id: &str, cached: Option<&RunRecord>) -> Result<()> {
    if cfg!(debug_assertions) {
        let stored = load_run(conn, run_id)?;
        assert_eq!(stored.as_ref(), cached, "the read cache disagrees with the database on run {run_id}");
    }
    Ok(())
}

fn load_run(conn: &Connection, run_id: &str) -> Result<Option<RunRecord>> {
    load_run_with(conn, LOAD_RUN, run_id)
}

/// The run row `run_id` read by `sql`, [`LOAD_RUN`] or the statement of an older schema ([`Reads::load_run`]).
fn load_run_with(conn: &Connection, sql: &str, run_id: &str) -> Result<Option<RunRecord>> {
    let mut stmt = conn.prepare_cached(sql).map_err(storage)?;
    let row = stmt
        .query_row([run_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Vec<u8>>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, i64>(4)?,
                r.get::<_, i64>(5)?,
                r.get::<_, u32>(6)?,
            ))
        })
        .optional()
        .map_err(storage)?;
    let Some((workflow, status, trigger, reason, created, updated, replays)) = row else {
        return Ok(None);
    };
    Ok(Some(RunRecord {
        run_id: run_id.into(),
        workflow: workflow.into(),
        status: parse_run_status(&status)?,
        trigger,
        reason,
        created_ms: from_sql(created),
        updated_ms: from_sql(updated),
        replays,
    }))
}

/// Writes a completion's columns (see `transition::complete`: it changes only these).
fn store_outcome(conn: &Connection, record: &StepRecord) -> Result<()> {
    let mut stmt = conn
        .prepare_cached("UPDATE steps SET status = ?2, output = ?3, error = ?4, lease_expiry_ms = ?5 WHERE key = ?1")
        .map_err(storage)?;
    stmt.execute(params![
        &record.key.0[..],
        record.status.as_str(),
        record.output,
        record.error,
        to_sql(record.lease_expiry_ms)
    ])
    .map_err(storage)?;
    Ok(())
}

/// What the cache knows of `key`'s row: `Some(row)` (or `Some(None)`, absent), checked against SQLite in debug builds,
/// or `None` when it cannot say.
fn known_step<'c>(conn: &Connection, cache: &'c Cache, key: &Key) -> Result<Option<Option<&'c (StepRecord, bool)>>> {
    let known = match cache.step(key) {
        Cached::Hit(entry) => Some(entry),
        Cached::Absent => None,
        Cached::Unknown => return Ok(None),
    };
    verify_step(conn, key, known.map(|(record, durable)| (record, *durable)))?;
    Ok(Some(known))
}

/// Sets run `run_id` to `status` (`reason`, `now_ms`) and keeps the cache up to date; returns whether it wrote (with
/// `replays` given, only while the run has seen that many replays: [`Ledger::finish_drive`]) and when the write must
/// commit. [`Ledger::set_run_status`], a drive's end, and a person's decision inside its own transaction.
fn update_run_status(
    conn: &Connection,
    cache: &mut Cache,
    run_id: &str,
    replays: Option<u32>,
    status: RunStatus,
    reason: Option<&str>,
    now_ms: u64,
) -> Result<(bool, Commit)> {
    // Whether the run is unfinished now, when the cache knows: then one statement does.
    let unfinished_now = match known_run(conn, cache, run_id)? {
        Some(Some(run)) if replays.is_some_and(|replays| !run.walked_by(replays)) => {
            return Ok((false, Commit::MayWait));
        }
        Some(Some(run)) => Some(run.status.is_unfinished()),
        Some(None) => return Err(Error::NotFound { what: format!("run {run_id}") }),
        None => None,
    };
    let values = params![run_id, status.as_str(), reason, to_sql(now_ms), replays];
    let update = |sql: &str| conn.prepare_cached(sql).and_then(|mut stmt| stmt.execute(values)).map_err(storage);
    // `unfinished` is set only when it changes, so that a change between pending and running, the common one,
    // touches neither listing's index (see version 2 of `MIGRATIONS`). Each statement is atomic, and the
    // second sets every column: when the first finds the run not unfinished, the two together write what the
    // second alone would. When `replays` is given (?5, a drive's end) each writes only while the run has seen that
    // many replays and is unfinished: a drive never ends a run a person or another drive has ended or paused.
    const STAYS: &str = "UPDATE runs SET status = ?2, reason = ?3, updated_ms = ?4 \
                         WHERE run_id = ?1 AND unfinished = 1 AND (?5 IS NULL OR replays = ?5)";
    const ENTERS: &str = "UPDATE runs SET status = ?2, reason = ?3, updated_ms = ?4, unfinished = 1 \
                          WHERE run_id = ?1 AND (?5 IS NULL OR (replays = ?5 AND unfinished = 1))";
    const LEAVES: &str = "UPDATE runs SET status = ?2, reason = ?3, updated_ms = ?4, unfinished = NULL \
                          WHERE run_id = ?1 AND (?5 IS NULL OR (replays = ?5 AND unfinished = 1))";
    let updated = match (unfinished_column(status), unfinished_now) {
        (Some(_), Some(true)) => update(STAYS)?,
        (Some(_), Some(false)) => update(ENTERS)?,
        (Some(_), None) => match update(STAYS)? {
            0 => update(ENTERS)?,
            n => n,
        },
        (None, _) => update(LEAVES)?,
    };
    if updated == 0 {
        // A run replayed or ended since the drive began is there; one that is not there is not found.
        if replays.is_some() && load_run(conn, run_id)?.is_some() {
            return Ok((false, Commit::MayWait));
        }
        return Err(Error::NotFound { what: format!("run {run_id}") });
    }
    if let Cached::Hit(run) = cache.run_mut(run_id) {
        run.status = status;
        run.reason = reason.map(str::to_owned);
        run.updated_ms = now_ms;
    }
    let commit = match status {
        RunStatus::Pending | RunStatus::Running => Commit::MayWait,
        RunStatus::Paused | RunStatus::Succeeded | RunStatus::Failed => Commit::Now,
    };
    Ok((true, commit))
}

/// The row of run `run_id` for a write to decide on: the cached one (checked against SQLite in debug builds), or the
/// row read into `loaded` when the cache cannot say; [`Error::NotFound`] when there is none.
fn run_to_write<'a>(
    conn: &Connection,
    cache: &'a Cache,
    run_id: &str,
    loaded: &'a mut Option<RunRecord>,
) -> Result<&'a RunRecord> {
    let run = match known_run(conn, cache, run_id)? {
        Some(known) => known,
        None => {
            *loaded = load_run(conn, run_id)?;
            loaded.as_ref()
        }
    };
    run.ok_or_else(|| Error::NotFound { what: format!("run {run_id}") })
}

/// [`known_step`] for a run row.
fn known_run<'c>(conn: &Connection, cache: &'c Cache, run_id: &str) -> Result<Option<Option<&'c RunRecord>>> {
    let known = match cache.run(run_id) {
        Cached::Hit(run) => Some(run),
        Cached::Absent => None,
        Cached::Unknown => return Ok(None),
    };
    verify_run(conn, run_id, known)?;
    Ok(Some(known))
}

/// Whether a claim may go on by its [`Claim::walk`]: no check asked, or run `run_id` is pending or running under
/// the replay count the claimant's drive began with ([`RunRecord::walked_by`]). Decided on the cached run when the
/// cache holds it (or knows it absent), else by one indexed read, inside the claim's lock or transaction.
fn walk_holds(conn: &Connection, cache: Option<&Cache>, claim: &Claim<'_>) -> Result<bool> {
    let Some(replays) = claim.walk else { return Ok(true) };
    if let Some(cache) = cache
        && let Some(known) = known_run(conn, cache, claim.run_id)?
    {
        return Ok(known.is_some_and(|run| run.walked_by(replays)));
    }
    let mut stmt = conn
        .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1 AND replays = ?2 AND unfinished = 1")
        .map_err(storage)?;
    stmt.exists(params![claim.run_id, replays]).map_err(storage)
}

/// The row of `key` for a write to decide on, and whether it was claimed durably: the cached record (checked against
/// SQLite in debug builds), or the row read into `loaded` when the cache cannot say, for the caller to cache once
/// it is written.
fn step_to_write<'a>(
    conn: &Connection,
    cache: &'a mut Cache,
    key: &Key,
    loaded: &'a mut Option<(StepRecord, bool)>,
) -> Result<(Option<&'a mut StepRecord>, bool)> {
    let (record, durable) = match cache.step_mut(key) {
        Cached::Hit((record, durable)) => (Some(record), *durable),
        Cached::Absent => (None, false),
        Cached::Unknown => {
            *loaded = load_step(conn, key)?;
            return Ok(match loaded {
                Some((record, durable)) => (Some(record), *durable),
                None => (None, false),
            });
        }
    };
    verify_step(conn, key, record.as_deref().map(|r| (r, durable)))?;
    Ok((record, durable))
}

/// A claim with the cache on, decided on the cached record where there is one: one statement, nothing read.
fn claim_cached(conn: &Connection, cache: &mut Cache, claim: &Claim<'_>, commit: Commit) -> Result<(Claimed, Commit)> {
    if !walk_holds(conn, Some(cache), claim)? {
        return Ok((Claimed::Superseded, Commit::MayWait));
    }
    // A fresh key the cache cannot place: insert first, as without a cache, and read only if it was taken.
    if claim.expected_fence == 0
        && matches!(cache.step(&claim.key), Cached::Unknown)
        && let ClaimEffect::Insert(record, granted) = transition::claim(None, claim)?
        && store_step(conn, &record, claim.durable, Row::New)? == 1
    {
        cache.put_step(record, claim.durable);
        return Ok((granted, commit));
    }
    let mut loaded = None;
    let (mut record, was_durable) = step_to_write(conn, cache, &claim.key, &mut loaded)?;
    // A key claimed durably once stays durable: its completion must not wait either.
    let durable = claim.durable || was_durable;
    let (granted, commit) = match transition::claim(record.as_deref_mut(), claim)? {
        ClaimEffect::Insert(record, granted) => {
            let inserted = store_step(conn, &record, durable, Row::New)?;
            assert_eq!(inserted, 1, "key {} is neither cached nor stored, yet taken", claim.key);
            cache.put_step(record, durable);
            return Ok((granted, commit));
        }
        ClaimEffect::Updated(granted) => {
            store_step(conn, record.expect("an update needs a stored record"), durable, Row::Stored)?;
            (granted, commit)
        }
        ClaimEffect::Conflict(conflict) => return Ok((conflict, Commit::MayWait)),
    };
    match loaded {
        Some((record, _)) => cache.put_step(record, durable),
        None => {
            if let Some(entry) = cache.steps.get_mut(&claim.key) {
                entry.1 = durable;
            }
        }
    }
    Ok((granted, commit))
}

/// A completion with the cache on, decided on the cached record where there is one: one statement, nothing read.
fn complete_cached(
    conn: &Connection,
    cache: &mut Cache,
    key: &Key,
    fence: u64,
    completion: Completion,
    now_ms: u64,
) -> Result<((), Commit)> {
    let mut loaded = None;
    let (mut record, durable) = step_to_write(conn, cache, key, &mut loaded)?;
    if transition::complete(record.as_deref_mut(), key, fence, completion, now_ms)? {
        store_outcome(conn, record.expect("a change needs a stored record"))?;
    }
    if let Some((record, durable)) = loaded {
        cache.put_step(record, durable);
    }
    Ok(((), if durable { Commit::Now } else { Commit::MayWait }))
}

impl Ledger for SqliteLedger {
    fn get(&self, key: &Key) -> Result<Option<StepRecord>> {
        if !self.cached {
            return self.read(|conn| Ok(load_step(conn, key)?.map(|(record, _)| record)));
        }
        let mut found = None;
        self.inspect(key, &mut |record| found = record.cloned())?;
        Ok(found)
    }

    fn inspect(&self, key: &Key, read: &mut dyn FnMut(Option<&StepRecord>)) -> Result<()> {
        self.read_cached(|conn, cache| {
            if let Some(known) = known_step(conn, cache, key)? {
                read(known.map(|(record, _)| record));
                return Ok(());
            }
            let stored = load_step(conn, key)?;
            read(stored.as_ref().map(|(record, _)| record));
            if let Some((record, durable)) = stored {
                cache.put_step(record, durable);
            }
            Ok(())
        })
    }

    fn inspect_outcome(&self, key: &Key, read: &mut dyn FnMut(Option<StepOutcome<'_>>)) -> Result<()> {
        self.read_cached(|conn, cache| {
            if let Some(known) = known_step(conn, cache, key)? {
                read(known.map(|(record, _)| StepOutcome::of(record)));
                return Ok(());
            }
            // Three columns, the output borrowed from SQLite's row: no record is built.
            let mut stmt =
                conn.prepare_cached("SELECT status, fence, output FROM steps WHERE key = ?1").map_err(storage)?;
            let mut rows = stmt.query([&key.0[..]]).map_err(storage)?;
            let Some(row) = rows.next().map_err(storage)? else {
                read(None);
                return Ok(());
            };
            let column = |i: usize| row.get_ref(i).map_err(storage);
            let status = parse_status(column(0)?.as_str().map_err(|e| corrupt(format!("a step status: {e}")))?)?;
            let fence = from_sql(column(1)?.as_i64().map_err(|e| corrupt(format!("a step fence: {e}")))?);
            let output = column(2)?.as_blob_or_null().map_err(|e| corrupt(format!("a step output: {e}")))?;
            read(Some(StepOutcome { status, fence, output }));
            Ok(())
        })
    }

    fn claim(&self, claim: &Claim<'_>) -> Result<Claimed> {
        let commit = if claim.durable { Commit::Now } else { Commit::MayWait };
        if self.cached {
            // One statement whatever the case: the decision is made on the cached record (or a read of the row,
            // under the same lock, when the cache does not hold it), and no other connection writes.
            return self.write_one_cached(|conn, cache| claim_cached(conn, cache, claim, commit));
        }
        // A claim that checks its drive's run reads the run first, so it takes the transaction below: the read and
        // the write must be one step, or another process's decision could land between them.
        if claim.expected_fence == 0 && claim.walk.is_none() {
            // A fresh key: one insert, and nothing read first.
            let inserted = self.write_one(|conn| {
                if let ClaimEffect::Insert(record, granted) = transition::claim(None, claim)?
                    && store_step(conn, &record, claim.durable, Row::New)? == 1
                {
                    return Ok((Some(granted), commit));
                }
                Ok((None, Commit::MayWait))
            })?;
            if let Some(granted) = inserted {
                return Ok(granted);
            }
        }
        // The key is taken, or the run must be checked: decide on the stored records, read and written in one
        // transaction.
        self.write(|conn| {
            if !walk_holds(conn, None, claim)? {
                return Ok((Claimed::Superseded, Commit::MayWait));
            }
            let mut stored = load_step(conn, &claim.key)?;
            // A key claimed durably once stays durable: its completion must not wait either.
            let durable = claim.durable || stored.as_ref().is_some_and(|(_, d)| *d);
            match transition::claim(stored.as_mut().map(|(record, _)| record), claim)? {
                ClaimEffect::Insert(record, granted) => {
                    let inserted = store_step(conn, &record, durable, Row::New)?;
                    assert_eq!(inserted, 1, "key {} was absent a moment ago in this transaction", claim.key);
                    Ok((granted, commit))
                }
                ClaimEffect::Updated(granted) => {
                    let (record, _) = stored.expect("an update needs a stored record");
                    store_step(conn, &record, durable, Row::Stored)?;
                    Ok((granted, commit))
                }
                ClaimEffect::Conflict(conflict) => Ok((conflict, Commit::MayWait)),
            }
        })
    }

    fn complete(&self, key: &Key, fence: u64, completion: Completion, now_ms: u64) -> Result<()> {
        if self.cached {
            return self.write_one_cached(|conn, cache| complete_cached(conn, cache, key, fence, completion, now_ms));
        }
        let done = self.write_one(|conn| {
            if !complete_started(conn, key, fence, &completion, now_ms)? {
                return Ok((false, Commit::MayWait));
            }
            // How the key was claimed decides whether the completion may wait, when that matters at all.
            let durable = self.commit_timing_matters() && claimed_durably(conn, key)?;
            Ok((true, if durable { Commit::Now } else { Commit::MayWait }))
        })?;
        if done {
            return Ok(());
        }
        // Anything else (an adoption, a repeat, a stale fence, a missing key) is decided on the stored record, read
        // and written in one transaction.
        self.write(|conn| {
            let mut stored = load_step(conn, key)?;
            let durable = stored.as_ref().is_some_and(|(_, d)| *d);
            let changed =
                transition::complete(stored.as_mut().map(|(record, _)| record), key, fence, completion, now_ms)?;
            if changed {
                // A completion changes the outcome columns and releases the lease (see transition::complete).
                let (record, _) = stored.expect("a change needs a stored record");
                store_outcome(conn, &record)?;
            }
            Ok(((), if durable { Commit::Now } else { Commit::MayWait }))
        })
    }

    fn renew(&self, key: &Key, fence: u64, lease_expiry_ms: u64) -> Result<()> {
        self.write_cached(|conn, cache| {
            let mut loaded = None;
            let (record, _) = step_to_write(conn, cache, key, &mut loaded)?;
            transition::renew(record, key, fence, lease_expiry_ms)?;
            let mut stmt =
                conn.prepare_cached("UPDATE steps SET lease_expiry_ms = ?2 WHERE key = ?1").map_err(storage)?;
            stmt.execute(params![&key.0[..], to_sql(lease_expiry_ms)]).map_err(storage)?;
            if let Some((record, durable)) = loaded {
                cache.put_step(record, durable);
            }
            Ok(((), Commit::MayWait))
        })
    }

    fn record_plan(&self, run_id: &str, key: &Key, plan: &[u8], now_ms: u64) -> Result<Vec<u8>> {
        self.write_cached(|conn, cache| {
            let recorded = record_plan(conn, run_id, key, plan, now_ms)?;
            cache.note_row(run_id, |rows| &mut rows.plans);
            Ok(recorded)
        })
    }

    fn get_plan(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.read(|conn| get_plan(conn, key))
    }

    fn run_plans(&self, run_id: &str) -> Result<Vec<(Key, Vec<u8>)>> {
        self.read(|conn| {
            let mut stmt =
                conn.prepare_cached("SELECT key, plan FROM plans WHERE run_id = ?1 ORDER BY key").map_err(storage)?;
            let rows = stmt
                .query_map([run_id], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?)))
                .map_err(storage)?;
            let mut out = Vec::new();
            for row in rows {
                let (key, plan) = row.map_err(storage)?;
                let key = key_of(&key).map_err(|e| in_row(e, "a plan", run_id))?;
                out.push((key, plan));
            }
            Ok(out)
        })
    }

    fn create_run(&self, run: RunRecord) -> Result<bool> {
        self.write_one_cached(|conn, cache| {
            let inserted = insert_run(conn, &run)?;
            if inserted {
                cache.put_run(run);
            }
            Ok((inserted, Commit::Now))
        })
    }

    fn get_run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        if !self.cached {
            return self.read(|conn| load_run_with(conn, self.reads.load_run, run_id));
        }
        let mut found = None;
        self.inspect_run(run_id, &mut |run| found = run.cloned())?;
        Ok(found)
    }

    fn inspect_run(&self, run_id: &str, read: &mut dyn FnMut(Option<&RunRecord>)) -> Result<()> {
        self.read_cached(|conn, cache| {
            if let Some(known) = known_run(conn, cache, run_id)? {
                read(known);
                return Ok(());
            }
            let stored = load_run_with(conn, self.reads.load_run, run_id)?;
            read(stored.as_ref());
            if let Some(run) = stored {
                cache.put_run(run);
            }
            Ok(())
        })
    }

    fn run_status(&self, run_id: &str) -> Result<Option<RunStatus>> {
        self.read_cached(|conn, cache| {
            if let Some(known) = known_run(conn, cache, run_id)? {
                return Ok(known.map(|run| run.status));
            }
            let mut stmt = conn.prepare_cached("SELECT status FROM runs WHERE run_id = ?1").map_err(storage)?;
            let status = stmt.query_row([run_id], |r| r.get::<_, String>(0)).optional().map_err(storage)?;
            status.as_deref().map(parse_run_status).transpose()
        })
    }

    fn set_run_status(&self, run_id: &str, status: RunStatus, reason: Option<&str>, now_ms: u64) -> Result<()> {
        self.write_one_cached(|conn, cache| {
            let (_, commit) = update_run_status(conn, cache, run_id, None, status, reason, now_ms)?;
            Ok(((), commit))
        })
    }

    fn finish_drive(
        &self,
        run_id: &str,
        replays: u32,
        status: RunStatus,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<bool> {
        self.write_one_cached(|conn, cache| {
            update_run_status(conn, cache, run_id, Some(replays), status, reason, now_ms)
        })
    }

    fn begin_replay(&self, run_id: &str, trigger: &[u8], now_ms: u64) -> Result<Replay> {
        // One transaction, begun IMMEDIATE: the status is read under the write lock, so of two replays begun at once
        // (in two processes) the second reads the first's `running` and is refused.
        self.write_cached(|conn, cache| {
            let mut loaded = None;
            let run = run_to_write(conn, cache, run_id, &mut loaded)?;
            if !Replay::may_begin(run.status) {
                let refused = Replay::Refused { status: run.status, reason: run.reason.clone() };
                return Ok((refused, Commit::MayWait));
            }
            // The trigger it replaces goes into the history first, numbered as the count the update below sets, both
            // taken from the stored row: in this transaction, so no replay begins without its entry.
            let mut keep = conn
                .prepare_cached(
                    "INSERT INTO replays (run_id, replay, trigger, replayed_ms) \
                     SELECT run_id, replays + 1, trigger, ?2 FROM runs WHERE run_id = ?1",
                )
                .map_err(storage)?;
            let kept = keep.execute(params![run_id, to_sql(now_ms)]).map_err(storage)?;
            assert_eq!(kept, 1, "run {run_id} was read in this transaction");
            cache.note_row(run_id, |rows| &mut rows.replays);
            let mut stmt = conn
                .prepare_cached(
                    "UPDATE runs SET status = ?2, reason = NULL, trigger = ?3, updated_ms = ?4, unfinished = 1, \
                     replays = replays + 1 WHERE run_id = ?1",
                )
                .map_err(storage)?;
            stmt.execute(params![run_id, RunStatus::Running.as_str(), trigger, to_sql(now_ms)]).map_err(storage)?;
            if let Cached::Hit(run) = cache.run_mut(run_id) {
                run.status = RunStatus::Running;
                run.reason = None;
                run.trigger = trigger.to_vec();
                run.updated_ms = now_ms;
                run.replays += 1;
            }
            // At once, before the replay's first claim: a crash after it resumes the run with the edited trigger.
            Ok((Replay::Begun, Commit::Now))
        })
    }

    fn replay_history(&self, run_id: &str) -> Result<Vec<ReplayEntry>> {
        if !self.reads.replay_history() {
            // A file of an older schema, read as it is: it kept no history.
            return Ok(Vec::new());
        }
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached("SELECT replay, trigger, replayed_ms FROM replays WHERE run_id = ?1 ORDER BY replay")
                .map_err(storage)?;
            let rows = stmt
                .query_map([run_id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?, r.get::<_, i64>(2)?)))
                .map_err(storage)?;
            let mut out = Vec::new();
            for row in rows {
                let (replay, replaced_trigger, replayed_ms) = row.map_err(storage)?;
                let replay = u32::try_from(replay).map_err(|_| corrupt(format!("replay number {replay}")))?;
                out.push(ReplayEntry { replay, replaced_trigger, replayed_ms: from_sql(replayed_ms) });
            }
            Ok(out)
        })
    }

    fn run_steps(&self, run_id: &str) -> Result<Vec<StepRecord>> {
        // Every write of this connection is in the file (or in its open transaction, which its reads see): the read
        // cache only ever holds what was written, so the rows are read as they are. The steps table is the same in
        // every schema version.
        self.read(|conn| {
            let mut stmt = conn
                .prepare_cached(concat!(
                    "SELECT key, ",
                    step_columns!(),
                    // Times are u64 stored bit for bit as i64: those from 2^63 read negative, and sort last.
                    " FROM steps WHERE run_id = ?1 ORDER BY last_attempt_ms < 0, last_attempt_ms, key"
                ))
                .map_err(storage)?;
            let rows = stmt.query_map([run_id], |r| Ok((r.get::<_, Vec<u8>>(0)?, step_row(r, 1)?))).map_err(storage)?;
            let mut out = Vec::new();
            for row in rows {
                let (key, row) = row.map_err(storage)?;
                let key = key_of(&key).map_err(|e| in_row(e, "a step record", run_id))?;
                let row =
                    step_record(&key, row).map_err(|e| in_row(e, &format!("the step record of key {key}"), run_id))?;
                out.push(row.0);
            }
            Ok(out)
        })
    }

    fn unfinished_runs(&self) -> Result<Vec<String>> {
        self.read(|conn| run_ids(conn, self.reads.unfinished_runs))
    }

    fn paused_runs(&self) -> Result<Vec<String>> {
        self.read(|conn| run_ids(conn, "SELECT run_id FROM runs WHERE status = 'paused' ORDER BY run_id"))
    }

    fn intake(&self, delivery: &Delivery<'_>, run: RunRecord) -> Result<Intake> {
        self.write_cached(|conn, cache| {
            let mut by_event =
                conn.prepare_cached("SELECT run_id FROM inbox WHERE source = ?1 AND event_id = ?2").map_err(storage)?;
            let seen: Option<String> =
                by_event.query_row([delivery.source, delivery.event_id], |r| r.get(0)).optional().map_err(storage)?;
            if let Some(run_id) = seen {
                return Ok((Intake::Duplicate { run_id }, Commit::MayWait));
            }
            if let Some(dedup_key) = delivery.dedup_key {
                let mut by_dedup = conn
                    .prepare_cached("SELECT run_id FROM inbox WHERE source = ?1 AND dedup_key = ?2")
                    .map_err(storage)?;
                let seen: Option<String> =
                    by_dedup.query_row([delivery.source, dedup_key], |r| r.get(0)).optional().map_err(storage)?;
                if let Some(run_id) = seen {
                    return Ok((Intake::Duplicate { run_id }, Commit::MayWait));
                }
            }
            let mut insert = conn
                .prepare_cached(
                    "INSERT INTO inbox (source, event_id, dedup_key, run_id, received_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(storage)?;
            insert
                .execute(params![
                    delivery.source,
                    delivery.event_id,
                    delivery.dedup_key,
                    run.run_id.as_str(),
                    to_sql(delivery.received_ms)
                ])
                .map_err(storage)?;
            // The run id is derived from the event: a run that exists already (its inbox row expired, the sender
            // retried a week later) was started by this event, so this delivery starts nothing.
            let intake = if insert_run(conn, &run)? {
                let intake = Intake::Started { run_id: String::from(run.run_id.as_str()) };
                cache.put_run(run);
                intake
            } else {
                Intake::Duplicate { run_id: String::from(run.run_id.as_str()) }
            };
            Ok((intake, Commit::Now))
        })
    }

    fn record_rejected(&self, source: &str, event_id: &str, reason: &str, now_ms: u64) -> Result<()> {
        self.write_one(|conn| {
            let mut stmt = conn
                .prepare_cached("INSERT INTO rejected (source, event_id, reason, received_ms) VALUES (?1, ?2, ?3, ?4)")
                .map_err(storage)?;
            stmt.execute(params![source, event_id, reason, to_sql(now_ms)]).map_err(storage)?;
            Ok(((), Commit::MayWait))
        })
    }

    fn expire_inbox(&self, before_ms: u64) -> Result<u64> {
        self.write(|conn| {
            let inbox =
                conn.execute("DELETE FROM inbox WHERE received_ms < ?1", [to_sql(before_ms)]).map_err(storage)?;
            let rejected =
                conn.execute("DELETE FROM rejected WHERE received_ms < ?1", [to_sql(before_ms)]).map_err(storage)?;
            Ok(((inbox + rejected) as u64, Commit::MayWait))
        })
    }

    fn record_resolution(&self, resolution: &ResolutionRecord, status: RunStatus, reason: Option<&str>) -> Result<()> {
        resolution.check()?;
        let json = serde_json::to_string(&resolution.resolution)
            .map_err(|e| Error::Storage(format!("cannot encode a resolution: {e}")))?;
        // One transaction, begun IMMEDIATE: the run is read under the write lock, so of two people deciding at once
        // (two `flow resolve` processes) the second reads the first's decision and is refused.
        self.write_cached(|conn, cache| {
            let run_id = resolution.run_id.as_str();
            let mut loaded = None;
            let run = run_to_write(conn, cache, run_id, &mut loaded)?;
            resolution.check_waited_for(run.status, run.reason.as_deref())?;
            let mut stmt = conn
                .prepare_cached(
                    "INSERT INTO resolutions (run_id, key, resolution, by_whom, at_ms, seen_status, seen_fence) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(storage)?;
            stmt.execute(params![
                run_id,
                &resolution.key.0[..],
                json,
                resolution.by,
                to_sql(resolution.at_ms),
                resolution.seen.map(|seen| seen.status.as_str()),
                resolution.seen.map(|seen| to_sql(seen.fence))
            ])
            .map_err(storage)?;
            cache.note_row(run_id, |rows| &mut rows.resolutions);
            update_run_status(conn, cache, run_id, None, status, reason, resolution.at_ms)?;
            Ok(((), Commit::Now))
        })
    }

    fn resolutions(&self, run_id: &str) -> Result<Vec<ResolutionRecord>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(self.reads.resolutions).map_err(storage)?;
            let rows = stmt
                .query_map([run_id], |r| {
                    Ok((
                        r.get::<_, Vec<u8>>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, i64>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Option<i64>>(5)?,
                    ))
                })
                .map_err(storage)?;
            let mut out = Vec::new();
            for row in rows {
                let (key, json, by, at, seen_status, seen_fence) = row.map_err(storage)?;
                // Filed two levels below a mark-done's output, which may nest as deep as a canonical document.
                let resolution: Resolution = crate::doc::from_str_deep(&json, crate::canonical::DEPTH_MAX + 2)
                    .map_err(|e| corrupt(format!("a resolution that does not decode: {e}")))?;
                out.push(ResolutionRecord {
                    run_id: run_id.to_owned(),
                    key: key_of(&key)?,
                    resolution,
                    by,
                    at_ms: from_sql(at),
                    seen: match (seen_status, seen_fence) {
                        (Some(status), Some(fence)) => {
                            Some(Seen { status: parse_status(&status)?, fence: from_sql(fence) })
                        }
                        _ => None,
                    },
                });
            }
            Ok(out)
        })
    }

    fn forget_run(&self, run_id: &str) -> Result<()> {
        self.write_cached(|conn, cache| {
            // Every plan is filed under its run (`record_plan`), so five deletes through the run indexes (the replay
            // history's key starts with the run) drop all. A cache that holds every row knows which tables hold none
            // of the run's (most runs record no plan, no resolution and no replay); debug builds run the delete anyway
            // and check that it finds nothing.
            let tables = cache.tables_of(run_id);
            for (sql, may_hold) in [
                "DELETE FROM plans WHERE run_id = ?1",
                "DELETE FROM steps WHERE run_id = ?1",
                "DELETE FROM resolutions WHERE run_id = ?1",
                "DELETE FROM replays WHERE run_id = ?1",
                "DELETE FROM runs WHERE run_id = ?1",
            ]
            .into_iter()
            .zip(tables)
            {
                if may_hold || cfg!(debug_assertions) {
                    let deleted = conn.prepare_cached(sql).map_err(storage)?.execute([run_id]).map_err(storage)?;
                    assert!(may_hold || deleted == 0, "the read cache missed {deleted} rows of {run_id}: {sql}");
                }
            }
            cache.forget_run(run_id);
            Ok(((), Commit::MayWait))
        })
    }

    fn flush(&self) -> Result<()> {
        let mut state = self.lock()?;
        commit_batch(&mut state, self.journal)
    }
}

impl Drop for SqliteLedger {
    fn drop(&mut self) {
        // A graceful close makes the open batch durable; a crash is what the module doc's safety argument covers.
        if let Ok(state) = self.state.get_mut()
            && state.failed.is_none()
        {
            let _ = commit_batch(state, self.journal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite's `synchronous` on the ledger's connection: 1 NORMAL, 2 FULL.
    fn synchronous_of(ledger: &SqliteLedger) -> i64 {
        let state = ledger.lock().expect("a usable ledger");
        state.conn.pragma_query_value(None, "synchronous", |r| r.get(0)).expect("read synchronous")
    }

    /// A file commits with `synchronous=FULL` unless the caller asks for NORMAL: with NORMAL a power loss or an OS
    /// crash can roll back a committed at-most-once intent, and the email is sent again. It used to be NORMAL by
    /// default.
    #[test]
    fn a_file_fsyncs_every_commit_unless_told_otherwise() {
        assert_eq!(Options::default().synchronous, Synchronous::Full);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let full = SqliteLedger::open(&dir.path().join("full.db"), Options::default()).expect("open");
        assert_eq!(synchronous_of(&full), 2);
        let normal = Options { synchronous: Synchronous::Normal, ..Options::default() };
        let normal = SqliteLedger::open(&dir.path().join("normal.db"), normal).expect("open");
        assert_eq!(synchronous_of(&normal), 1);
    }
}
