//! The ledger: the engine's durable record of keys, attempts, outcomes, runs, plans and the webhook inbox.
//!
//! One interface, [`Ledger`], two implementations that pass one contract suite (`tests/ledger_contract.rs`):
//! [`memory::MemoryLedger`] and [`sqlite::SqliteLedger`] (a file in WAL mode by default, `:memory:` for simulations).
//!
//! A step record moves through these states; every transition is validated and `Succeeded` is final:
//!
//! ```text
//!   (absent) --claim--> Started --complete--> Succeeded | Failed | Unknown
//!   Failed | Unknown | Started(lease expired) --claim--> Started
//!   Unknown | Failed --adopt (lookup found it / a person marked it done)--> Succeeded
//! ```
//!
//! A claim carries a lease and a fencing token: two workers can never both hold one key, a stale lease can be taken
//! over (the fence goes up), and every write of the old owner is refused afterwards with [`Error::Fenced`].
//! Recording a different output for a succeeded key is refused with [`Error::OutputConflict`], never overwritten.

pub mod memory;
pub mod sqlite;
mod transition;

use crate::key::Key;
pub use compact_str::CompactString;

/// The status of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Status {
    /// An intent: an attempt was (or is being) made by `owner` under the current fence.
    Started,
    /// Finished with an output. Final.
    Succeeded,
    /// The last attempt definitely did not apply.
    Failed,
    /// The outcome of the last attempt is indeterminate (timeout, reset after send, 5xx after the request left).
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Started => "started",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Unknown => "unknown",
        }
    }
}

/// Everything the ledger knows about one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub key: Key,
    /// The identifying strings are `CompactString`s: up to 24 bytes they are held inline, so making or copying a
    /// record allocates nothing for them (a `CompactString` reads as a `&str`).
    pub run_id: CompactString,
    pub step_id: CompactString,
    /// `connector.action`.
    pub action: CompactString,
    /// blake3 of the canonical inputs, so a person can tell which inputs an attempt carried.
    pub inputs_hash: [u8; 32],
    pub attempt_count: u32,
    pub status: Status,
    /// The worker that holds (or last held) the lease.
    pub owner: CompactString,
    pub lease_expiry_ms: u64,
    /// Goes up by one with every claim; writes carrying an older fence are refused.
    pub fence: u64,
    /// When the last attempt started (the intent was written).
    pub last_attempt_ms: u64,
    /// Canonical JSON of the output, when succeeded.
    pub output: Option<Vec<u8>>,
    /// The error of a failed attempt, or the reason of an unknown one.
    pub error: Option<String>,
}

/// The outcome fields of a step record, borrowed: see [`Ledger::inspect_outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepOutcome<'a> {
    pub status: Status,
    /// The fence of the latest claim: with the status, whether the record moved since a claim.
    pub fence: u64,
    /// Canonical JSON of the output, when succeeded.
    pub output: Option<&'a [u8]>,
}

impl<'a> StepOutcome<'a> {
    pub fn of(record: &'a StepRecord) -> Self {
        Self { status: record.status, fence: record.fence, output: record.output.as_deref() }
    }
}

/// A request to take the lease on a key and write an intent (`Started`) for a new attempt.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    pub key: Key,
    pub run_id: &'a str,
    pub step_id: &'a str,
    pub action: &'a str,
    pub inputs_hash: [u8; 32],
    pub worker: &'a str,
    pub now_ms: u64,
    pub lease_ms: u64,
    /// The fence of the record as the claimant last read it (0 when it read no record). The claim is refused with
    /// [`Claimed::Conflict`] when the record changed since: a compare-and-swap, so the claimant's decision was made
    /// on the state it replaces.
    pub expected_fence: u64,
    /// The status of the record as the claimant last read it, or `None` to check the fence alone (a claimant that
    /// read no record, or a caller outside a drive). An attempt's answer lands under the fence it was claimed with, so
    /// the fence alone does not tell a `Started` record from the same attempt's `Failed` or `Unknown` end: a claim
    /// decided on `Started` (a person's mark-done of an attempt in doubt, say) is refused with [`Claimed::Conflict`]
    /// when the answer landed meanwhile, and the claimant decides again on what the answer says.
    pub expected_status: Option<Status>,
    /// Must the intent be on disk before the call? True for at-most-once and lookup-before-create actions (see
    /// `ARCHITECTURE.md`, "group commit"); keyed intents may be group-committed.
    pub durable: bool,
    /// The replay count the claimant's drive of `run_id` began under ([`RunRecord::replays`]). The claim is refused
    /// with [`Claimed::Superseded`], nothing written, unless the run is still pending or running under it
    /// ([`RunRecord::walked_by`]), checked in the same lock or transaction as the claim: so a drive that stalled
    /// past its lease sends nothing once a person decided the run, another drive paused or ended it, or a replay
    /// began, however late it wakes. `None` claims without the check, for callers outside a drive (tests, tools).
    pub walk: Option<u32>,
}

/// What a claim did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The lease is the claimant's, the intent is written; `attempt` counts from 1.
    Granted { fence: u64, attempt: u32 },
    /// The record is not as the claimant read it, or another worker holds an unexpired lease. Re-read and decide.
    Conflict(Box<StepRecord>),
    /// The run is no longer the one the claimant's drive walks ([`Claim::walk`]), or no longer exists: nothing was
    /// written, and the drive stops.
    Superseded,
}

/// The recorded end of an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// Applied, with its canonical JSON output.
    Succeeded { output: Vec<u8> },
    /// Definitely not applied.
    Failed { error: String },
    /// Indeterminate.
    Unknown { reason: String },
}

impl Completion {
    /// [`Completion::output_and_error`], owned: what a record keeps.
    pub(crate) fn into_output_and_error(self) -> (Option<Vec<u8>>, Option<String>) {
        match self {
            Completion::Succeeded { output } => (Some(output), None),
            Completion::Failed { error } => (None, Some(error)),
            Completion::Unknown { reason } => (None, Some(reason)),
        }
    }

    /// What the record's `output` and `error` become: the output of a success, the error or reason otherwise.
    pub(crate) fn output_and_error(&self) -> (Option<&[u8]>, Option<&str>) {
        match self {
            Completion::Succeeded { output } => (Some(output), None),
            Completion::Failed { error } => (None, Some(error)),
            Completion::Unknown { reason } => (None, Some(reason)),
        }
    }
}

/// The status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum RunStatus {
    Pending,
    Running,
    Succeeded,
    /// Every attempt of the step it stopped at definitely did not apply, or a person aborted the run (its reason is
    /// "aborted by NAME": the step it paused at may have applied, as that person judged).
    Failed,
    /// Waiting for a person; the record carries the reason.
    Paused,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Pending => "pending",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Paused => "paused",
        }
    }
    pub fn is_terminal(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
    }
    /// Pending or running: neither finished nor waiting for a person, so a drive can carry it on. The ledgers list
    /// these runs ([`Ledger::unfinished_runs`]).
    pub fn is_unfinished(self) -> bool {
        matches!(self, RunStatus::Pending | RunStatus::Running)
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// Held inline up to 24 bytes, as a step record's strings are (an API run's id, a workflow's name).
    pub run_id: CompactString,
    pub workflow: CompactString,
    pub status: RunStatus,
    /// Canonical JSON of the trigger payload.
    pub trigger: Vec<u8>,
    /// Why the run is paused or failed.
    pub reason: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// How many replays of the run have begun ([`Ledger::begin_replay`]): the generation of its trigger. A drive ends
    /// the run only while this is still the count it started under ([`Ledger::finish_drive`]).
    pub replays: u32,
}

impl RunRecord {
    /// Whether a drive that began when the run had seen `replays` replays may still go on with it, and end it: the run
    /// is still pending or running, and no replay has begun since ([`Ledger::finish_drive`]).
    pub fn walked_by(&self, replays: u32) -> bool {
        self.replays == replays && self.status.is_unfinished()
    }
}

/// One replay of a run as the ledger keeps it ([`Ledger::replay_history`]): the trigger the replay replaced, so that
/// what the run ran with before an edit outlives the edit (the steps keep only hashes of their inputs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayEntry {
    /// Which replay of the run this was: 1 for the first (the run's [`RunRecord::replays`] once it had begun).
    pub replay: u32,
    /// Canonical JSON of the trigger the run had until this replay began: the run's first trigger for replay 1, the
    /// edit of replay `replay - 1` after that. What this replay set is the next replay's `replaced_trigger`, or the
    /// run's trigger for the last.
    pub replaced_trigger: Vec<u8>,
    /// When the replay began (the `now_ms` [`Ledger::begin_replay`] was given).
    pub replayed_ms: u64,
}

/// What [`Ledger::begin_replay`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// The run was finished; it is running now, with the edited trigger.
    Begun,
    /// The run is not finished (pending, running or paused, for `reason`): nothing was written.
    Refused { status: RunStatus, reason: Option<String> },
}

impl Replay {
    /// Whether a run in `status` may be replayed: it has succeeded, or failed (its steps definitely did not apply,
    /// or a person aborted it).
    pub fn may_begin(status: RunStatus) -> bool {
        matches!(status, RunStatus::Succeeded | RunStatus::Failed)
    }
}

/// A webhook delivery to record in the inbox.
#[derive(Debug, Clone)]
pub struct Delivery<'a> {
    pub source: &'a str,
    pub event_id: &'a str,
    /// Optional second deduplication key for senders that emit two distinct events for one change
    /// (`object id` + `event type`); a delivery whose `dedup_key` is already in the inbox is a duplicate too.
    pub dedup_key: Option<&'a str>,
    pub received_ms: u64,
}

/// What a webhook intake did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intake {
    /// The event is new: the inbox row and the run were written in one transaction.
    Started { run_id: String },
    /// Seen before (by event id or by dedup key): nothing was started.
    Duplicate { run_id: String },
}

/// A person's decision about a paused step.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Resolution {
    /// The effect happened: record this output and go on. Any JSON value, as a step's output is: an applied call's
    /// answer is stored as the API gave it ([`crate::connector::Outcome::Applied`] holds any document), not only an
    /// object, and templates read any value.
    MarkDone { output: serde_json::Value },
    /// Send it again anyway.
    Retry,
    /// Give up on the run.
    Abort,
}

impl Resolution {
    /// The decision's name in events and traces: `mark-done`, `retry`, `abort`.
    pub fn name(&self) -> &'static str {
        match self {
            Resolution::MarkDone { .. } => "mark-done",
            Resolution::Retry => "retry",
            Resolution::Abort => "abort",
        }
    }
}

/// A recorded resolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolutionRecord {
    pub run_id: String,
    pub key: Key,
    pub resolution: Resolution,
    /// Who decided: the resolution's only record of it, so it must name someone ([`Ledger::record_resolution`]
    /// refuses an empty or blank name).
    pub by: String,
    pub at_ms: u64,
    /// The key's record as the person saw it when deciding ([`crate::executor::record_resolution`] reads it): a
    /// drive applies the decision only to the attempt and the outcome it was made on. `None` when not known: a
    /// decision filed by an older build (a SQLite ledger before schema version 5) or about a key without a record.
    pub seen: Option<Seen>,
}

/// What a person's decision was made on: the key's status and fence then. The fence says which attempt (every claim
/// moves it), so a decision is used once a later claim has moved the key past it, whatever the hosts' clocks say; the
/// status says what that attempt's outcome was known to be. An attempt that outlived its lease may land its answer on
/// the key after the decision (the run paused at an attempt of unknown outcome, and the pause does not fence it), and
/// a mark-done over an answer that says the step definitely did not apply pauses the run again instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub status: Status,
    pub fence: u64,
}

/// Whether `name` names someone: it holds a letter or digit that is not a Hangul filler (U+115F, U+1160, U+3164,
/// U+FFA0: letters by category, blank to the eye), or an ASCII symbol. White space, control and format characters
/// (a zero-width space, a byte-order mark, bidirectional controls), lone combining marks and blank symbols (U+2800)
/// alone are not a name: a resolution's `by` is its only record of who decided.
pub fn names_someone(name: &str) -> bool {
    name.chars().any(|c| {
        c.is_ascii_graphic() || (c.is_alphanumeric() && !matches!(c, '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}'))
    })
}

/// What is wrong with `by` as a resolution's record of who decided, if anything, as the end of a sentence whose
/// subject is the name ("must name the person deciding"): it names no one ([`names_someone`]; an empty or blank
/// name would file a person's decision anonymously), or it holds a character that breaks a line or its order
/// ([`breaks_a_line_or_its_order`]: a line break, a tab, a bidirectional override: it would forge lines and columns,
/// or reorder them, wherever it is listed). The rule [`Ledger::record_resolution`] applies, and the one the
/// `flow` CLI checks `--by` by before it opens a ledger.
pub fn by_refusal(by: &str) -> Option<&'static str> {
    if !names_someone(by) {
        return Some("must name the person deciding");
    }
    if by.chars().any(breaks_a_line_or_its_order) {
        return Some(
            "must name the person deciding on one line, without control characters, line or paragraph separators \
             (U+2028, U+2029) or bidirectional formatting characters",
        );
    }
    None
}

/// Whether `c` can make a text shown on one line read as something else: a control character (C0, DEL, C1: a tab or
/// newline forges a column or a line, an escape sequence rewrites the terminal), a line or paragraph separator (some
/// readers split lines at them) or a bidirectional formatting character (it reorders what a terminal shows). A
/// person's name in a decision holds none ([`by_refusal`]); `flow` escapes them in what it prints.
pub fn breaks_a_line_or_its_order(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

impl ResolutionRecord {
    /// Refuses a record whose `by` cannot stand for the person deciding ([`by_refusal`]).
    pub(crate) fn check(&self) -> Result<()> {
        match by_refusal(&self.by) {
            None => Ok(()),
            Some(refusal) => Err(Error::Invalid {
                detail: format!("a resolution of run {:?} {refusal} (`by` is {:?})", self.run_id, self.by),
            }),
        }
    }

    /// Refuses this decision unless its run, now in `status` (paused for `reason`), still waits for it: paused at
    /// the key the decision names ([`paused_key`]).
    pub(crate) fn check_waited_for(&self, status: RunStatus, reason: Option<&str>) -> Result<()> {
        if status == RunStatus::Paused && reason.and_then(paused_key) == Some(self.key) {
            return Ok(());
        }
        Err(Error::Superseded { run_id: self.run_id.clone(), status })
    }
}

/// The key named at the end of a pause reason, `... [key <64 hex digits>]`: where a paused run waits for a person,
/// which both the engine's check before a decision and the ledger's, as it files one, read.
pub fn paused_key(reason: &str) -> Option<Key> {
    let hex = reason.strip_suffix(']')?.rsplit_once("[key ")?.1;
    crate::key::decode_hex(hex, crate::key::HexCase::Either).map(Key)
}

/// Ledger errors. A broken invariant (a different output for a succeeded key) is an error the executor turns into a
/// loud failure, never a silent overwrite.
#[derive(Debug)]
pub enum Error {
    /// The write carried fence `presented` but the record is at `current`: another worker took the key over.
    Fenced { key: Key, presented: u64, current: u64 },
    /// A transition the state machine does not allow (for example, anything out of `Succeeded`).
    InvalidTransition { key: Key, from: Status, to: Status },
    /// A succeeded key was given a different output.
    OutputConflict { key: Key },
    /// A record the operation needs is absent.
    NotFound { what: String },
    /// The ledger file was written by a newer schema than this build knows.
    SchemaTooNew { found: i64, supported: i64 },
    /// The file is not a ledger (not a SQLite database, another program's database), or holds a record this build
    /// cannot read back.
    Corrupt { detail: String },
    /// SQLite finds part of the ledger file malformed (its `SQLITE_CORRUPT`, "database disk image is malformed"): the
    /// file is a SQLite database, and a page of it is damaged (a failing disk, a stray write), which is a condition
    /// of its storage, not a sign that it is no ledger. SQLite's `PRAGMA integrity_check` says what is damaged.
    Damaged { detail: String },
    /// Any other storage failure.
    Storage(String),
    /// The caller's request is malformed (a resolution that names no person); nothing was written.
    Invalid { detail: String },
    /// A person's decision about a run that no longer waits for it: another decision was recorded first (the run is
    /// now `status`), or the run has paused again at another step since. Nothing was written.
    Superseded { run_id: String, status: RunStatus },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Fenced { key, presented, current } => {
                write!(f, "write to key {key} refused: fence {presented} is stale, the key is at fence {current}")
            }
            Error::InvalidTransition { key, from, to } => {
                write!(f, "key {key}: transition {} -> {} is not allowed", from.as_str(), to.as_str())
            }
            Error::OutputConflict { key } => {
                write!(f, "key {key} already succeeded with a different output; refusing to overwrite it")
            }
            Error::NotFound { what } => write!(f, "not found: {what}"),
            Error::SchemaTooNew { found, supported } => write!(
                f,
                "the ledger has schema version {found}, newer than the {supported} this build supports; \
                 use a newer build"
            ),
            Error::Corrupt { detail } => write!(f, "the ledger file is corrupt or not a ledger: {detail}"),
            Error::Damaged { detail } => {
                write!(f, "the ledger file is damaged, SQLite cannot read part of it: {detail}")
            }
            Error::Storage(detail) => write!(f, "ledger storage error: {detail}"),
            Error::Invalid { detail } => write!(f, "refused: {detail}"),
            Error::Superseded { run_id, status: RunStatus::Paused } => write!(
                f,
                "run {run_id:?} has paused at another step since this decision was made: nothing was recorded; \
                 look again (`flow paused`)"
            ),
            Error::Superseded { run_id, status } => write!(
                f,
                "run {run_id:?} is {} now, not paused: another decision was recorded first; nothing was recorded",
                status.as_str()
            ),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// The ledger interface. Methods are synchronous: SQLite runs inline on the calling task (on the simulation thread
/// under madsim, where thread pools are not allowed), and every call is short.
pub trait Ledger: Send + Sync {
    // --- keys -------------------------------------------------------------------------------------------------
    fn get(&self, key: &Key) -> Result<Option<StepRecord>>;
    /// Calls `read` with the record of `key` (or `None`), borrowed where the ledger can, so that a reader of a field
    /// or two does not copy the whole record. `read` may run under the ledger's lock: it must not call the ledger.
    fn inspect(&self, key: &Key, read: &mut dyn FnMut(Option<&StepRecord>)) -> Result<()> {
        read(self.get(key)?.as_ref());
        Ok(())
    }
    /// Calls `read` with the status, fence and stored output of `key` (or `None`): what a checker of outcomes, or a
    /// claimant asking whether its record moved, needs, read without building the whole record where the ledger can
    /// (SQLite reads three columns). The same rule as [`Ledger::inspect`]: `read` must not call the ledger.
    fn inspect_outcome(&self, key: &Key, read: &mut dyn FnMut(Option<StepOutcome<'_>>)) -> Result<()> {
        self.inspect(key, &mut |record| read(record.map(StepOutcome::of)))
    }
    /// Takes the lease and writes the intent. See [`Claim`].
    fn claim(&self, claim: &Claim<'_>) -> Result<Claimed>;
    /// Records the end of the attempt made under `fence`. Takes the completion by value: a ledger that keeps records
    /// in memory stores its output or error as it is, without a copy.
    fn complete(&self, key: &Key, fence: u64, completion: Completion, now_ms: u64) -> Result<()>;
    /// Extends the lease held under `fence`.
    fn renew(&self, key: &Key, fence: u64, lease_expiry_ms: u64) -> Result<()>;

    // --- plans ------------------------------------------------------------------------------------------------
    /// Records the plan of writes of the step keyed `key`, a step of run `run_id`, unless one is recorded; returns
    /// the plan in force (the earlier one when there was one). A recorded plan is never replaced. It is filed under
    /// its run, so [`Ledger::forget_run`] drops it whether or not the key has a step record.
    fn record_plan(&self, run_id: &str, key: &Key, plan: &[u8], now_ms: u64) -> Result<Vec<u8>>;
    fn get_plan(&self, key: &Key) -> Result<Option<Vec<u8>>>;
    /// The plans filed under run `run_id` with their keys, ordered by key; empty for a run with none or not known.
    /// For a person looking at one run (`flow show`), not for a drive. (A plan a build before every plan was filed
    /// under its run recorded without one is not listed.)
    fn run_plans(&self, run_id: &str) -> Result<Vec<(Key, Vec<u8>)>>;

    // --- runs -------------------------------------------------------------------------------------------------
    /// Creates the run unless a run with its id exists; returns whether it created it. Takes the record, which a
    /// ledger in memory keeps as it is.
    fn create_run(&self, run: RunRecord) -> Result<bool>;
    fn get_run(&self, run_id: &str) -> Result<Option<RunRecord>>;
    /// Calls `read` with the run's record (or `None`), borrowed where the ledger can: see [`Ledger::inspect`].
    fn inspect_run(&self, run_id: &str, read: &mut dyn FnMut(Option<&RunRecord>)) -> Result<()> {
        read(self.get_run(run_id)?.as_ref());
        Ok(())
    }
    /// The status of a run, without copying its trigger (a restart asks this of every unfinished run).
    fn run_status(&self, run_id: &str) -> Result<Option<RunStatus>> {
        Ok(self.get_run(run_id)?.map(|run| run.status))
    }
    fn set_run_status(&self, run_id: &str, status: RunStatus, reason: Option<&str>, now_ms: u64) -> Result<()>;
    /// Begins a replay of a finished run: in one transaction, and only while the run has succeeded or failed, sets it
    /// running (no reason, updated at `now_ms`) with `trigger` (canonical JSON) as its trigger from now on, counts the
    /// replay ([`RunRecord::replays`]) and files the trigger it replaces in the run's history under that count and
    /// `now_ms` ([`Ledger::replay_history`]). So of two replays begun at once the second finds the run running and
    /// is refused, a worker that resumes the run after a crash mid-replay drives it with the edited trigger, as the
    /// replay would have, and no replay begins without its entry in the history, nor an entry without its replay. A
    /// run in any other status is refused with what was found ([`Replay::Refused`]) and nothing written; an unknown
    /// run is [`Error::NotFound`].
    fn begin_replay(&self, run_id: &str, trigger: &[u8], now_ms: u64) -> Result<Replay>;
    /// The replays of run `run_id` that [`Ledger::begin_replay`] began, oldest first (by [`ReplayEntry::replay`]),
    /// each with the trigger it replaced; empty for a run never replayed or not known. A ledger file kept before
    /// schema version 4 has no entry for the replays begun then (its runs still count them): a run's history then
    /// starts after them.
    fn replay_history(&self, run_id: &str) -> Result<Vec<ReplayEntry>>;
    /// Ends a drive that started when the run had seen `replays` replays: sets the run to `status` (`reason`,
    /// `now_ms`) as [`Ledger::set_run_status`] does, but only while the run is still pending or running and its
    /// [`RunRecord::replays`] is still `replays`, in one atomic step. Returns whether it wrote. A drive that started
    /// before a replay began walked the old trigger's keys: its end (a success, say, over the replay's pause) is not
    /// the run's. Nor is the end of a drive that stalled past its lease while another worker paused the run and a
    /// person decided (an abort stands). Then nothing is written. A run's first drive sets it `Running` this way too,
    /// so a drive that read the run pending and stalled cannot reopen what another drive and a person ended meanwhile.
    fn finish_drive(
        &self,
        run_id: &str,
        replays: u32,
        status: RunStatus,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<bool>;
    /// The step records of run `run_id` (every key a drive of it claimed, of every trigger it ran with), ordered by
    /// when each key was last attempted, then by key; empty for a run with none or not known. For a person looking
    /// at one run (`flow show`), not for a drive.
    fn run_steps(&self, run_id: &str) -> Result<Vec<StepRecord>>;
    /// Ids of runs that are pending or running, sorted.
    fn unfinished_runs(&self) -> Result<Vec<String>>;
    /// Ids of paused runs, sorted.
    fn paused_runs(&self) -> Result<Vec<String>>;

    // --- webhooks ---------------------------------------------------------------------------------------------
    /// Records the delivery in the inbox and creates `run` in one transaction, unless the event (or its dedup key)
    /// is already in the inbox.
    fn intake(&self, delivery: &Delivery<'_>, run: RunRecord) -> Result<Intake>;
    /// Records a rejected delivery (forged, unsigned, stale), which starts nothing.
    fn record_rejected(&self, source: &str, event_id: &str, reason: &str, now_ms: u64) -> Result<()>;
    /// Drops inbox rows received before `before_ms` (retention).
    fn expire_inbox(&self, before_ms: u64) -> Result<u64>;

    // --- people -----------------------------------------------------------------------------------------------
    /// Records a person's decision about a paused run and sets the run to `status` with `reason` (updated at the
    /// decision's `at_ms`), in one transaction, and only if the run still waits for it: paused at the decision's key
    /// ([`Error::Superseded`] otherwise). Two people deciding at once must not both be accepted: the engine applies
    /// the last decision filed for a key, so the second would silently replace the first (a retry filed after a
    /// mark-done would send the email again). A record whose `by` names no one is refused with [`Error::Invalid`].
    /// A refusal writes nothing.
    fn record_resolution(&self, resolution: &ResolutionRecord, status: RunStatus, reason: Option<&str>) -> Result<()>;
    fn resolutions(&self, run_id: &str) -> Result<Vec<ResolutionRecord>>;

    // --- housekeeping -----------------------------------------------------------------------------------------
    /// Forgets every record of a finished run (keys, plans, resolutions, replay history, the run itself), so a long
    /// simulation keeps bounded memory. Inbox rows stay until they expire.
    fn forget_run(&self, run_id: &str) -> Result<()>;
    /// Makes every group-committed write durable.
    fn flush(&self) -> Result<()>;
}
