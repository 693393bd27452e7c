//! The executor: applies the three rules of `DESIGN.md` to runs, on real tokio or under madsim.
//!
//! The decisions live in [`crate::decide`] (pure, tested as tables); this module is the thin driver that performs
//! them against the ledger, the connectors and the clock, and reports every step to the [`Observer`].
//!
//! One key's life (rule 1): read the record; a succeeded key returns its stored output without a call; otherwise
//! claim it (an intent with a lease and a fence, durable for at-most-once and lookup actions), look up first when the
//! class says so (rule 2), call, and record the outcome. Indeterminate and failed outcomes go back to the decision
//! core, which retries (bounded exponential backoff, jitter hashed from the seed, retry-after respected), waits,
//! pauses the run for a person, or fails the step. So does a failed lookup: the attempt is recorded failed (nothing
//! was sent) when every earlier attempt definitely did not apply, else unknown, marked
//! [`decide::LOOKUP_REFUSED_MARK`] when the API said no retry of the search can succeed, so that the step fails (or
//! the run pauses) at once instead of spending its attempts.
//!
//! Steps (rule 3): a single-action step has one key, its step key. A `writes` step or an agent step records its plan
//! (the canonical list of `{action, inputs}`) under the step key before its first write, then runs write `i` under
//! `key::write_key(step key, i, inputs)`; a recorded plan is always the one used, and a planner is never asked again
//! once a plan is recorded (a crash while planning simply plans again: nothing outside happened).
//!
//! Runs: pending → running → succeeded | failed | paused (with the reason). Every transition is written to the
//! ledger; [`Engine::resume_unfinished`] drives every pending or running run after a restart. `failed` means every
//! attempt definitely did not apply, or a person aborted the run (a resolution, [`Resolution::Abort`]: the run's
//! reason is "aborted by NAME", and the step it paused at may have applied, as that person judged); anything else
//! that may have applied pauses instead (I3, which exempts aborted runs).
//!
//! Edit and replay ([`Engine::replay`]): the run keeps its id. Keys derive from (run id, step id, inputs), so a step
//! whose rendered inputs did not change gets the same key and replays its stored output with no call, and a step
//! whose inputs changed (directly, or through an earlier step's output) gets a new key and runs exactly once.
//! Minting a new run id for a replay would give every step a fresh key and redo every effect; that is refused by
//! design. Only a succeeded or failed run is replayed: a paused one waits for a person (with edited inputs its
//! paused step would be sent again under a new key while the old one may have applied), and a pending or running one
//! may be driven by a worker.
//!
//! A key does not cover the step's action (DESIGN's formula: run id, step id, inputs). A workflow edited to give a
//! step another action, with the same id and inputs, finds the step's key recorded as the old action: the step
//! pauses for a person, naming the step and both actions ([`decide::decide_for_action`]), rather than replay the old
//! action's output as the new one's or send the new action under a key the old one may have applied under. It is
//! the engine's answer wherever it cannot judge automatically (as for a key reused with another payload): a failed
//! run must carry no effect (I3), and the old action's may have happened. A person's retry sends the new action once
//! and mark-done adopts the given output; a key the old action succeeded under is final, so there only an abort
//! applies (or the workflow is edited again: the old action restored, or the step given a new id, a new key).
//!
//! Resolutions ([`Engine::resolve`], or [`record_resolution`] from the `flow` admin CLI): a pause reason ends with
//! `[key <hex>]`, the key the run stopped at. The resolution is recorded against that key, stamped after its last
//! attempt, and the run set running (an abort fails it at once, "aborted by <by>"). The next drive walks the run
//! (succeeded keys replay) to that key, whose decision is to pause again, finds the resolution recorded after the
//! key's last attempt, and applies it: `MarkDone` adopts the given output (claim with the read fence, complete as
//! succeeded), `Retry` allows exactly one more attempt whatever the class (claimed after the resolution's stamp, so
//! a crash during it cannot reuse the same decision). A worker that crashes mid-resolution therefore loses nothing.
//! A pause does not fence the key: an attempt that outlived its lease may still land its answer there, before or
//! after the decision, and that answer is evidence a person needs. So a decision is filed with the key's status as
//! the person saw it (`ResolutionRecord::seen`) and applies only to the outcome it was made on: a late success is
//! replayed whatever was decided (nothing is sent again); a mark-done over a late answer that the step definitely did
//! not apply pauses the run again, with that answer in the reason, for a new decision (it would record a success
//! with no effect behind it); and a decision is applied where the key would fail the run too, not only where it
//! pauses (a late definite failure on a key whose attempts ran out: a person's retry still sends once more).
//!
//! `KeyReusedWithDifferentPayload` pauses the run rather than failing it: the earlier request under that key may
//! have applied (a volatile field changed between attempts), and a failed run must carry no effect (I3). It is never
//! retried under a new key.
//!
//! Naive policy ([`Policy::Naive`], the "before"): the connector is sent a fresh key per attempt
//! (`naive_attempt_key`), no lookups are made, and every failure is retried until attempts run out. Events still
//! carry the step's ledger key, so a checker can group the attempts.

use crate::canonical;
use crate::clock::Clock;
use crate::connector::{
    ActionSpec, BoxFuture, Connector, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request, pin_in_place,
};
use crate::decide::{self, Decision, Input, LastCall};
use crate::doc::Doc;
use crate::event::{CrashPoint, Event, Observer};
use crate::key::{self, Key};
use crate::ledger::{
    self, Claim, Claimed, Completion, Ledger, Replay, Resolution, ResolutionRecord, RunRecord, Status,
};
use crate::webhook;
use crate::workflow::{self, StepKind, StepOutput, Template, Workflow};
use smallvec::SmallVec;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use crate::decide::{Policy, RetryPolicy};
pub use crate::ledger::{Intake, RunStatus};

/// The engine's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    /// This worker's name in leases.
    pub worker_id: String,
    pub policy: Policy,
    /// The seed of the retry jitter (the engine draws no other randomness).
    pub seed: u64,
    /// How long a claim holds a key. Must exceed the longest connector call: a lease that expires mid-call lets
    /// another worker treat the attempt as crashed. A call is sent only while half the lease is left after the claim,
    /// whose commit comes first (for an at-most-once or lookup action on a file ledger, an fsync by default): keep
    /// that commit well inside half the lease.
    pub lease_ms: u64,
    pub retry: RetryPolicy,
    /// The bound on decisions (attempts, waits, backoffs, claim conflicts) for one key in one drive; past it the
    /// run pauses with the reason, so no drive loops forever.
    pub decision_count_max: u32,
    /// The bound on plan requests to a planner for one agent step in one drive.
    pub plan_attempt_count_max: u32,
    /// How long webhook inbox rows are kept ([`Engine::expire_webhooks`]).
    pub webhook_retention_ms: u64,
}

impl EngineConfig {
    pub fn new(worker_id: impl Into<String>) -> Self {
        Self {
            worker_id: worker_id.into(),
            policy: Policy::Rules,
            seed: 0,
            lease_ms: 30_000,
            retry: RetryPolicy::default(),
            decision_count_max: 256,
            plan_attempt_count_max: 3,
            webhook_retention_ms: webhook::RETENTION_MS_DEFAULT,
        }
    }
}

/// A model (or any planner) that proposes the writes of an agent step. It may answer differently each time it is
/// asked; the engine asks only until a plan is recorded.
pub trait Planner: Send + Sync {
    fn plan<'a>(
        &'a self,
        run_id: &'a str,
        step_id: &'a str,
        inputs: &'a Doc,
    ) -> BoxFuture<'a, Result<Vec<PlannedAction>, String>>;
}

/// One proposed write.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PlannedAction {
    /// `connector.action`.
    pub action: String,
    pub inputs: Doc,
}

/// Engine errors: the ledger failed, or the caller named something that does not exist.
#[derive(Debug)]
pub enum Error {
    Ledger(ledger::Error),
    UnknownRun(String),
    UnknownWorkflow(String),
    /// `resolve` on a run that is not paused.
    NotPaused {
        run_id: String,
        status: RunStatus,
    },
    /// [`Engine::replay`] of a run that has not finished: it is paused (at `step`, when its pause reason names a key
    /// the ledger holds), so a person must decide first, or pending or running, so a worker may be driving it.
    /// Nothing was written.
    NotFinished {
        run_id: String,
        status: RunStatus,
        step: Option<String>,
    },
    /// The trigger cannot be canonicalised.
    Trigger(canonical::Error),
    /// The output a person's decision gives to mark a step done cannot be canonicalised (as a step's output must be,
    /// to be stored and compared): the decision is refused, nothing written.
    MarkDoneOutput(canonical::Error),
    /// A person's retry of a step the API answered as applied with an answer that cannot be stored
    /// ([`decide::UNSTORABLE_MARK`]): a retry would send it again (without the lookup that found it, for a
    /// lookup-before-create action), and a keyed action's replay would give the same answer back. The decision is
    /// refused, nothing written.
    RetryWouldResend {
        run_id: String,
        step: String,
    },
    /// A stored record cannot be read back (a plan, an output, a trigger): the ledger is damaged.
    Corrupt(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Ledger(e) => write!(f, "{e}"),
            Error::UnknownRun(id) => write!(f, "no run {id:?} in the ledger"),
            Error::UnknownWorkflow(name) => write!(f, "no workflow {name:?} is registered"),
            Error::NotPaused { run_id, status } => {
                write!(f, "run {run_id:?} is {}, not paused: nothing to resolve", status.as_str())
            }
            Error::NotFinished { run_id, status: RunStatus::Paused, step } => {
                match step {
                    Some(step) => write!(f, "run {run_id:?} is paused at step {step}")?,
                    None => write!(f, "run {run_id:?} is paused")?,
                }
                write!(f, ": a person must decide first (flow resolve); only a succeeded or failed run is replayed")
            }
            Error::NotFinished { run_id, status, .. } => write!(
                f,
                "run {run_id:?} is {}: a worker may be driving it (or will resume it); only a succeeded or failed run \
                 is replayed, so let it finish first",
                status.as_str()
            ),
            Error::Trigger(e) => write!(f, "the trigger cannot be canonicalised: {e}"),
            Error::MarkDoneOutput(e) => write!(f, "the output to mark the step done with cannot be stored: {e}"),
            Error::RetryWouldResend { run_id, step } => write!(
                f,
                "run {run_id:?} is paused at step {step}, which the API answered as applied with an answer that cannot \
                 be stored: a retry would send it again; mark it done with that answer (the pause reason shows it; \
                 write a number no double holds as a string), or abort the run"
            ),
            Error::Corrupt(what) => write!(f, "the ledger holds an unreadable record: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<ledger::Error> for Error {
    fn from(e: ledger::Error) -> Self {
        Error::Ledger(e)
    }
}

/// A registered action, resolved once.
struct Bound {
    connector: Arc<dyn Connector>,
    spec: ActionSpec,
    /// `connector.action`.
    full: String,
}

enum CompiledKind {
    Action(Arc<Bound>),
    Writes,
    Agent(Arc<dyn Planner>),
}

struct Compiled {
    workflow: Workflow,
    kinds: Vec<CompiledKind>,
    /// Per step, whether a later step's template names its output ([`Workflow::outputs_referenced`]).
    output_needed: Vec<bool>,
}

/// How one key (`T`: its output) or one step ([`StepEnd`]) ended in this drive.
enum End<T> {
    Done(T),
    Paused {
        reason: String,
        key: Key,
    },
    Failed {
        reason: String,
    },
    /// A claim found the run no longer the one this drive walks ([`Claimed::Superseded`]): the drive stops, and
    /// writes nothing more.
    Superseded,
}

type KeyEnd = End<Doc>;
type StepEnd = End<StepOutput>;

impl<T> End<T> {
    fn map<U>(self, f: impl FnOnce(T) -> U) -> End<U> {
        match self {
            End::Done(output) => End::Done(f(output)),
            End::Paused { reason, key } => End::Paused { reason, key },
            End::Failed { reason } => End::Failed { reason },
            End::Superseded => End::Superseded,
        }
    }
}

/// How one walk of a run's steps ended ([`Engine::drive_walk`]).
enum Walked {
    /// The run's status, written by this walk or found.
    Ended(RunStatus),
    /// The run stopped being this walk's meanwhile (a replay began, or another worker paused it and a person
    /// decided): it wrote nothing of its end.
    Superseded,
}

/// Where a drive gets the run's trigger.
#[derive(Clone, Copy)]
enum Trigger<'a> {
    /// Parsed from the ledger.
    Stored,
    /// The caller's copy, used when it is the stored document ([`is_stored_document`]); parsed from the ledger
    /// otherwise.
    Known(&'a Doc),
    /// The caller's copy with its canonical bytes, used when those are the stored bytes; parsed from the ledger
    /// otherwise.
    Canonical(Held<'a>),
}

/// A caller's trigger with its canonical bytes, written once ([`KnownTrigger`]'s, or [`Engine::start_run`]'s).
#[derive(Clone, Copy)]
struct Held<'a> {
    document: &'a Doc,
    canonical: &'a [u8],
    /// Whether parsing `canonical` gives `document` back ([`reads_back`]).
    reads_back: bool,
}

impl Held<'_> {
    /// Whether this is the document whose canonical bytes are `stored`, exactly as parsing `stored` gives it back
    /// (what [`is_stored_document`] decides, with the bytes written already).
    fn is_stored(&self, stored: &[u8]) -> bool {
        self.reads_back && self.canonical == stored
    }
}

/// A run's trigger together with its canonical bytes, written once: [`Engine::create_run_known`] stores those bytes,
/// and [`Engine::drive_known_trigger`] compares them with the stored ones instead of writing the document again (as
/// [`Engine::drive_known`] must). The bytes are always this document's, since only [`KnownTrigger::new`] makes one.
#[derive(Debug, Clone)]
pub struct KnownTrigger {
    document: Doc,
    canonical: Vec<u8>,
    /// Whether parsing `canonical` gives `document` back ([`reads_back`]).
    reads_back: bool,
}

impl KnownTrigger {
    /// Writes the canonical form of `document`; fails as [`canonical::to_vec`] does.
    pub fn new(document: Doc) -> Result<Self, canonical::Error> {
        let canonical = canonical::to_vec(&document)?;
        let reads_back = reads_back(&document);
        Ok(Self { document, canonical, reads_back })
    }

    /// The document.
    pub fn document(&self) -> &Doc {
        &self.document
    }

    /// Its RFC 8785 canonical bytes, as the ledger stores a run's trigger.
    pub fn canonical(&self) -> &[u8] {
        &self.canonical
    }

    fn held(&self) -> Held<'_> {
        Held { document: &self.document, canonical: &self.canonical, reads_back: self.reads_back }
    }
}

/// Whether `trigger` is the document whose canonical bytes are `stored`, exactly as parsing `stored` gives it back:
/// the same canonical bytes, and no number that a parse would read back as another kind. A float with an integral
/// value (`2.0`) is written `2`, which parses as an integer; every other number, string and structure reads back as
/// it was written. Cheaper than the parse it saves: one canonical write into a buffer and no tree to build and drop.
fn is_stored_document(trigger: &Doc, stored: &[u8]) -> bool {
    let same_bytes = key::with_scratch(|buf| canonical::write_value(trigger, buf).is_ok() && buf[..] == *stored);
    same_bytes && reads_back(trigger)
}

/// Whether parsing the canonical form of `value` gives `value` back: true unless it holds a float with an integral
/// value (`2.0` is written `2`, which parses as an integer).
fn reads_back(value: &Doc) -> bool {
    match value {
        Doc::Number(n) => n.as_f64().is_none_or(|f| n.is_i64() || n.is_u64() || f.fract() != 0.0),
        Doc::Array(items) => items.iter().all(reads_back),
        Doc::Object(obj) => obj.iter().all(|(_, item)| reads_back(item)),
        Doc::Null | Doc::Bool(_) | Doc::String(_) => true,
    }
}

/// A plan as the ledger records it: `[{"action": …, "inputs": …}, …]`.
fn plan_document(actions: &[PlannedAction]) -> Doc {
    Doc::array(
        actions
            .iter()
            .map(|a| Doc::object([("action", Doc::from(a.action.as_str())), ("inputs", a.inputs.clone())]))
            .collect(),
    )
}

/// What one key needs from its step.
struct KeyJob<'a> {
    run_id: &'a str,
    step_id: &'a str,
    key: Key,
    bound: &'a Bound,
    inputs: &'a Doc,
    /// The input paths the key leaves out: the inputs hash leaves them out too.
    volatile: &'a [String],
    /// blake3 of the canonical inputs (the claim records it), when already computed. A re-drive leaves it `None`:
    /// most of its keys are replayed, which records nothing, and [`KeyJob::inputs_hash`] computes it for a claim.
    inputs_hash: Option<[u8; 32]>,
    /// The key belongs to a run's first drive, so almost surely nobody has claimed it: its first decision is made
    /// without reading the record (see [`Engine::run_key`]).
    new_run: bool,
    /// A later step's template names this step's output. When none does, a replay does not parse the stored output
    /// back: nothing in the drive would read it.
    output_needed: bool,
    /// The replay count the drive began under: every claim checks the run still walks under it ([`Claim::walk`]).
    replays: u32,
}

impl KeyJob<'_> {
    /// blake3 of the canonical inputs without the volatile paths, as the claim records it.
    fn inputs_hash(&self) -> [u8; 32] {
        self.inputs_hash.unwrap_or_else(|| {
            key::inputs_hash_without(self.inputs, self.volatile)
                .expect("the inputs were canonicalised for the key already")
        })
    }
}

/// What every step of one drive shares with the step runners.
#[derive(Clone, Copy)]
struct Drive<'a> {
    run_id: &'a str,
    /// See [`KeyJob::new_run`].
    new_run: bool,
    /// See [`KeyJob::output_needed`]; the step's, for each of its keys.
    output_needed: bool,
    /// See [`KeyJob::replays`].
    replays: u32,
}

/// What one decision of [`Engine::run_key`]'s loop leaves to do once the key's record is dropped.
enum Next {
    /// Wait this long, then read and decide again.
    Sleep(u64),
    /// Wait until `until_ms` while the key's record is `Started` under `fence` (by another attempt, begun at
    /// `attempt_ms`), looking at the record while that attempt is young enough to be live ([`lease_wait_look_at`]),
    /// then read and decide again: an attempt that ends early (nearly all do) is replayed soon after, not at the end
    /// of the wait. The wait is for the attempt's lease, or, once that expired, for a lookup connector's lag bound
    /// (with the default 30 s lease, such an attempt is past the age at which it is looked at). A failed look
    /// ends the drive with the ledger's error, as any read does.
    AwaitLease { until_ms: u64, attempt_ms: u64, fence: u64 },
    /// Read and decide again now.
    Again,
    /// The key is claimed: make the attempt.
    Attempt(Attempting),
}

/// A claimed attempt, with what it needs of the record it was decided on.
struct Attempting {
    fence: u64,
    attempt: u32,
    claim_ms: u64,
    lookup_first: bool,
    /// An earlier attempt under this key may have applied: a definite failure now leaves the step unknown.
    earlier_maybe_applied: bool,
    /// Every earlier attempt definitely did not apply (or there was none).
    prior_definite: bool,
    /// The error the record holds, kept for a failed lookup's report.
    prior_error: Option<String>,
}

/// What a lookup leaves the attempt to do.
enum Looked {
    /// The key ended: the lookup found an earlier create and adopted it.
    Ended(KeyEnd),
    /// Read the record again: create if it is still this attempt's (nothing was found), else decide again (what was
    /// found could not be adopted, and the attempt was recorded unknown; or another worker took the key over).
    Go,
    /// The search failed at `ended_ms` and the attempt was recorded so: read again and decide.
    Failed { ended_ms: u64, retry_after_ms: Option<u64> },
}

/// The mark a definite failure is recorded with: `permanent` (the decision core's mark for the kind of request that
/// failed) when the API said no retry can succeed, else none, so the failure is retried like any other.
fn failure_mark(failure: &NotApplied, permanent: &'static str) -> &'static str {
    if failure.retryable { "" } else { permanent }
}

/// The workflow engine. Share it as `Arc<Engine>`; every method takes `&self`.
pub struct Engine {
    config: EngineConfig,
    ledger: Arc<dyn Ledger>,
    clock: Arc<dyn Clock>,
    observer: Arc<dyn Observer>,
    actions: BTreeMap<String, Arc<Bound>>,
    planners: BTreeMap<String, Arc<dyn Planner>>,
    workflows: BTreeMap<String, Arc<Compiled>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("actions", &self.actions.keys().collect::<Vec<_>>())
            .field("planners", &self.planners.keys().collect::<Vec<_>>())
            .field("workflows", &self.workflows.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// The key paused run `run_id` waits at, reading only: what [`record_resolution`] checks before it writes (the run
/// exists, is paused, and its pause reason names the key). The `flow` CLI asks this of a ledger it opened read-only,
/// so that a refusal leaves the file as it was.
pub fn resolvable(ledger: &dyn Ledger, run_id: &str) -> Result<Key, Error> {
    let run = ledger.get_run(run_id)?.ok_or_else(|| Error::UnknownRun(run_id.to_string()))?;
    if run.status != RunStatus::Paused {
        return Err(Error::NotPaused { run_id: run_id.to_string(), status: run.status });
    }
    let reason = run.reason.as_deref().unwrap_or("");
    paused_key(reason).ok_or_else(|| Error::Corrupt(format!("run {run_id:?}: no key in the pause reason {reason:?}")))
}

/// [`resolvable`], and whether `resolution` can apply at the key: a retry of a step the API answered as applied, with
/// an answer that cannot be stored, is refused ([`Error::RetryWouldResend`]). Reading only, as `resolvable`.
pub fn decidable(ledger: &dyn Ledger, run_id: &str, resolution: &Resolution) -> Result<Key, Error> {
    decided_on(ledger, run_id, resolution).map(|(key, _)| key)
}

/// [`decidable`], with the key's record it judged: the one a decision filed now is made on (its `seen`).
fn decided_on(
    ledger: &dyn Ledger,
    run_id: &str,
    resolution: &Resolution,
) -> Result<(Key, Option<ledger::StepRecord>), Error> {
    let key = resolvable(ledger, run_id)?;
    let record = ledger.get(&key)?;
    if let (Resolution::Retry, Some(record)) = (resolution, &record)
        && would_resend_applied(record)
    {
        return Err(Error::RetryWouldResend { run_id: run_id.to_string(), step: record.step_id.to_string() });
    }
    Ok((key, record))
}

/// The pause reason of a run whose person's retry (by `by`, when known) would send again a step the API answered
/// as applied ([`would_resend_applied`]): `reason`, the key's own pause reason, with why the retry is not applied.
fn retry_would_resend(reason: &str, by: Option<&str>, key: &Key) -> String {
    let by = by.map(|by| format!(" by {by}")).unwrap_or_default();
    format!(
        "{reason}; the decision to retry{by} would send again a step the API answered as applied: a person must \
         decide again, mark it done or abort [key {key}]"
    )
}

/// Is `record` an attempt the API answered as applied, with an answer that cannot be stored
/// ([`decide::UNSTORABLE_MARK`])? A person's retry of it would send the step again.
fn would_resend_applied(record: &ledger::StepRecord) -> bool {
    record.status == Status::Unknown && record.error.as_deref().is_some_and(|e| e.starts_with(decide::UNSTORABLE_MARK))
}

/// Records a person's decision about paused run `run_id` (the engine API and the `flow` admin CLI both use this):
/// the resolution is filed against the key the run paused at (named in the pause reason), stamped strictly after
/// that key's last attempt. An abort fails the run at once ("aborted by <by>"); mark-done and retry set the run
/// running, and the next drive of the run (this worker's [`Engine::resolve`], or any worker's
/// [`Engine::resume_unfinished`]) applies it at the paused key. Returns the run's new status.
pub fn record_resolution(
    ledger: &dyn Ledger,
    run_id: &str,
    resolution: &Resolution,
    by: &str,
    now_ms: u64,
) -> Result<RunStatus, Error> {
    let (key, judged) = decided_on(ledger, run_id, resolution)?;
    // A step's output is stored canonical: an output that cannot be would leave the run running with a decision no
    // drive can apply.
    if let Resolution::MarkDone { output } = resolution {
        canonical::to_vec(output).map_err(Error::MarkDoneOutput)?;
    }
    let seen = judged.map(|r| (r.last_attempt_ms, ledger::Seen { status: r.status, fence: r.fence }));
    let at_ms = now_ms.max(seen.map_or(0, |(last_attempt_ms, _)| last_attempt_ms) + 1);
    let record = ResolutionRecord {
        run_id: run_id.to_string(),
        key,
        resolution: resolution.clone(),
        by: by.to_string(),
        at_ms,
        seen: seen.map(|(_, seen)| seen),
    };
    let (status, reason) = match resolution {
        Resolution::Abort => (RunStatus::Failed, Some(format!("aborted by {by}"))),
        Resolution::MarkDone { .. } | Resolution::Retry => (RunStatus::Running, None),
    };
    // The ledger files the decision and moves the run on in one transaction, and only if the run still waits for
    // it: between `resolvable` above and this write, another person may have decided.
    match ledger.record_resolution(&record, status, reason.as_deref()) {
        Ok(()) => Ok(status),
        Err(ledger::Error::Superseded { run_id, status }) if status != RunStatus::Paused => {
            Err(Error::NotPaused { run_id, status })
        }
        Err(e) => Err(e.into()),
    }
}

/// The key named at the end of a pause reason (kept here too: the `flow` CLI and embedders found it here first).
pub use crate::ledger::paused_key;

/// A drive that finds another attempt holding a key's lease looks at the key's record again when that attempt is this
/// old, and then each time its age has doubled (50 ms, 100 ms, 200 ms...), while it is at most
/// [`LEASE_WAIT_LOOK_AGE_MAX_MS`] old; after that it waits out the lease. So a second drive of a run (a caller's retry
/// of `start_run`, a run dispatched twice) answers within about as long again as the first attempt took, not at its
/// lease's expiry (30 s by default). Each look is a point read; the waits are not counted as decisions.
pub const LEASE_WAIT_FIRST_LOOK_MS: u64 = 50;
/// The age past which an attempt holding a key's lease is taken for a crashed or stalled worker's (a live call ends
/// within seconds: its answer, its failure or its timeout), so a drive waiting for it stops looking and waits out the
/// lease: a worker restarted after a crash resumes its runs without a look per doubling at every key its old self held.
pub const LEASE_WAIT_LOOK_AGE_MAX_MS: u64 = 5_000;

/// When a drive waiting for the lease of an attempt begun at `attempt_ms` looks at the key next, after `now_ms`: the
/// first moment the attempt's age is [`LEASE_WAIT_FIRST_LOOK_MS`] times a power of two, if that age is at most
/// [`LEASE_WAIT_LOOK_AGE_MAX_MS`]; `None` past it.
fn lease_wait_look_at(attempt_ms: u64, now_ms: u64) -> Option<u64> {
    let age_ms = now_ms.saturating_sub(attempt_ms);
    let mut look_age_ms = LEASE_WAIT_FIRST_LOOK_MS;
    while look_age_ms <= age_ms {
        look_age_ms = look_age_ms.saturating_mul(2);
    }
    (look_age_ms <= LEASE_WAIT_LOOK_AGE_MAX_MS).then(|| attempt_ms.saturating_add(look_age_ms))
}

/// The most of an unstorable answer a pause reason shows, in bytes of its JSON.
const UNSTORABLE_SHOWN_MAX: usize = 600;

/// The reason recorded, marked [`decide::UNSTORABLE_MARK`], when an API's answer that the step applied (`what` says
/// which) holds an `output` that cannot be canonicalised (`e`), so cannot be stored as the key's output. Said in the
/// engine's words (the parser's advice to send a number as a string is for whoever sends the JSON, here the API, and
/// its offset is into text never stored), with the answer itself, shortened, from which a person can mark the step
/// done.
fn unstorable_reason(what: &str, output: &Doc, e: &canonical::Error) -> String {
    let why = match e {
        canonical::Error::NumberOutOfRange { text, .. } => {
            format!("it holds the number {}, which no IEEE-754 double holds exactly", canonical::shorten_digits(text))
        }
        canonical::Error::TooDeep { depth_max, .. } => format!("it nests deeper than {depth_max} levels"),
        other => other.to_string(),
    };
    let mut answer = serde_json::Value::from(output).to_string();
    if answer.len() > UNSTORABLE_SHOWN_MAX {
        let cut = (0..=UNSTORABLE_SHOWN_MAX).rev().find(|&i| answer.is_char_boundary(i)).unwrap_or(0);
        let total = answer.len();
        answer.truncate(cut);
        answer.push_str(&format!("… ({total} bytes)"));
    }
    format!("{}{what}, but its output cannot be stored ({why}); the answer: {answer}", decide::UNSTORABLE_MARK)
}

/// The key sent to the connector by the naive policy: a fresh one per attempt.
pub fn naive_attempt_key(key: &Key, attempt: u32) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"flow/naive-attempt/v1");
    hasher.update(&key.0);
    hasher.update(&attempt.to_le_bytes());
    Key(*hasher.finalize().as_bytes())
}

/// Where an API's late answer that attempt `fence` of `key` applied is kept, when the answer came after another attempt
/// had claimed the key (a person's retry, or a worker that took the key over once this attempt's lease expired): a
/// write-once plan slot holding the answer's canonical output (or, for an output that cannot be stored, the reason
/// that says so, starting [`decide::UNSTORABLE_MARK`]). The key's record does not hold it (the late write is fenced
/// off, and the newer attempt's outcome stands), so without it an effect the API made could be recorded nowhere: for
/// an at-most-once action whose retry also applied, the first of two effects. (For a keyed or lookup-before-create
/// action it is usually the very effect the newer attempt adopted.) `flow show` lists it beside the key
/// (`late_applied`).
pub fn late_applied_marker(key: &Key, fence: u64) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"flow/late-applied/v1");
    hasher.update(&key.0);
    hasher.update(&fence.to_le_bytes());
    Key(*hasher.finalize().as_bytes())
}

/// Where the time of a keyed key's first attempt is kept once it is retried (a write-once plan slot, as decimal
/// text): the retention window of a keyed API runs from it. `flow show` gives it beside the key's record.
pub fn first_attempt_marker(key: &Key) -> Key {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"flow/first-attempt/v1");
    hasher.update(&key.0);
    Key(*hasher.finalize().as_bytes())
}

fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Applied(_) => "applied",
        Outcome::NotApplied(_) => "not-applied",
        Outcome::Indeterminate(_) => "indeterminate",
        Outcome::KeyReusedWithDifferentPayload(_) => "key-reused",
        Outcome::KeyInFlight => "in-flight",
    }
}

async fn sleep_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

impl Engine {
    pub fn new(
        config: EngineConfig,
        ledger: Arc<dyn Ledger>,
        clock: Arc<dyn Clock>,
        observer: Arc<dyn Observer>,
    ) -> Self {
        Self {
            config,
            ledger,
            clock,
            observer,
            actions: BTreeMap::new(),
            planners: BTreeMap::new(),
            workflows: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn ledger(&self) -> &Arc<dyn Ledger> {
        &self.ledger
    }

    /// Registers every action of `connector` as `name.action`, replacing an earlier connector of that name.
    pub fn register_connector(&mut self, connector: Arc<dyn Connector>) {
        let name = connector.name().to_string();
        for spec in connector.actions() {
            let full = format!("{name}.{}", spec.name);
            let bound = Bound { connector: connector.clone(), spec: spec.clone(), full: full.clone() };
            self.actions.insert(full, Arc::new(bound));
        }
    }

    pub fn register_planner(&mut self, name: &str, planner: Arc<dyn Planner>) {
        self.planners.insert(name.to_string(), planner);
    }

    /// Registers a workflow after checking that its actions and planners are registered.
    pub fn register_workflow(&mut self, workflow: Workflow) -> Result<(), workflow::Error> {
        let mut kinds = Vec::with_capacity(workflow.steps.len());
        let missing = |step: &str, field: &str, what: &str| workflow::Error {
            workflow: workflow.name.clone(),
            step: step.to_string(),
            field: field.to_string(),
            message: format!("{what} is not registered"),
        };
        for step in &workflow.steps {
            kinds.push(match &step.kind {
                StepKind::Action { action, .. } => CompiledKind::Action(
                    self.actions.get(action).cloned().ok_or_else(|| missing(&step.id, "action", action))?,
                ),
                StepKind::Writes(writes) => {
                    for (index, (action, _)) in writes.iter().enumerate() {
                        if !self.actions.contains_key(action) {
                            return Err(missing(&step.id, &format!("writes[{index}].action"), action));
                        }
                    }
                    CompiledKind::Writes
                }
                StepKind::Agent { planner, .. } => CompiledKind::Agent(
                    self.planners.get(planner).cloned().ok_or_else(|| missing(&step.id, "planner", planner))?,
                ),
            });
        }
        let output_needed = workflow.outputs_referenced();
        self.workflows.insert(workflow.name.clone(), Arc::new(Compiled { workflow, kinds, output_needed }));
        Ok(())
    }

    /// The share of the registered workflows' distinct actions (agent steps' actions are not known in advance and
    /// are left out) that this engine retries automatically: keyed and lookup-before-create ones under the rules,
    /// every one under the naive policy.
    pub fn auto_retry_coverage(&self) -> f64 {
        let mut actions: BTreeMap<&str, bool> = BTreeMap::new();
        for compiled in self.workflows.values() {
            for step in &compiled.workflow.steps {
                let names: Vec<&str> = match &step.kind {
                    StepKind::Action { action, .. } => vec![action.as_str()],
                    StepKind::Writes(writes) => writes.iter().map(|(a, _)| a.as_str()).collect(),
                    StepKind::Agent { .. } => Vec::new(),
                };
                for name in names {
                    if let Some(bound) = self.actions.get(name) {
                        let auto = self.config.policy == Policy::Naive || bound.spec.auto_retry();
                        actions.insert(name, auto);
                    }
                }
            }
        }
        if actions.is_empty() {
            return 0.0;
        }
        actions.values().filter(|a| **a).count() as f64 / actions.len() as f64
    }

    fn halt(&self, point: CrashPoint, run_id: &str, key: &Key) -> bool {
        self.observer.halt_at(point, run_id, key)
    }

    /// Parks forever when the observer asks to halt here (crash injection).
    async fn maybe_halt(&self, point: CrashPoint, run_id: &str, key: &Key) {
        if self.halt(point, run_id, key) {
            std::future::pending::<()>().await;
        }
    }

    /// Creates run `run_id` of `workflow` (pending) unless it exists; returns whether it created it.
    pub fn create_run(&self, workflow: &str, run_id: &str, trigger: &Doc) -> Result<bool, Error> {
        self.known_workflow(workflow)?;
        self.insert_run(workflow, run_id, canonical::to_vec(trigger).map_err(Error::Trigger)?)
    }

    /// [`Engine::create_run`] with a trigger whose canonical bytes are written already.
    pub fn create_run_known(&self, workflow: &str, run_id: &str, trigger: &KnownTrigger) -> Result<bool, Error> {
        self.known_workflow(workflow)?;
        self.insert_run(workflow, run_id, trigger.canonical.clone())
    }

    fn known_workflow(&self, workflow: &str) -> Result<(), Error> {
        if self.workflows.contains_key(workflow) { Ok(()) } else { Err(Error::UnknownWorkflow(workflow.to_string())) }
    }

    /// Creates the pending run with the trigger's canonical bytes, unless it exists. A blank run id (empty, or only
    /// spaces and other invisible characters, [`ledger::names_someone`]) is refused: it names no run that a person
    /// could find in `flow paused` or mean in `flow resolve --run`, which refuses one too.
    fn insert_run(&self, workflow: &str, run_id: &str, trigger: Vec<u8>) -> Result<bool, Error> {
        if !ledger::names_someone(run_id) {
            return Err(Error::Ledger(ledger::Error::Invalid {
                detail: format!("a run id must name the run: {run_id:?} is blank"),
            }));
        }
        let now_ms = self.clock.now_ms();
        let run = RunRecord {
            run_id: run_id.into(),
            workflow: workflow.into(),
            status: RunStatus::Pending,
            trigger,
            reason: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            replays: 0,
        };
        Ok(self.ledger.create_run(run)?)
    }

    /// Creates the run (unless it exists) and drives it. The trigger's canonical form is written once, for the ledger
    /// and to check that the run's stored trigger is this one (a run that existed may hold another).
    pub async fn start_run(&self, workflow: &str, run_id: &str, trigger: &Doc) -> Result<RunStatus, Error> {
        self.known_workflow(workflow)?;
        let canonical = canonical::to_vec(trigger).map_err(Error::Trigger)?;
        self.insert_run(workflow, run_id, canonical.clone())?;
        let held = Held { document: trigger, canonical: &canonical, reads_back: reads_back(trigger) };
        self.drive_with(run_id, Trigger::Canonical(held)).await
    }

    /// Drives a run until it succeeds, fails or pauses. A finished or paused run is returned as it is.
    pub async fn drive(&self, run_id: &str) -> Result<RunStatus, Error> {
        self.drive_with(run_id, Trigger::Stored).await
    }

    /// [`Engine::drive`] for a caller that holds the run's trigger (it created the run): when `trigger` is the
    /// document the ledger stored (the same canonical bytes, and nothing a parse of them would read back otherwise),
    /// the drive uses it instead of parsing the stored bytes. Otherwise, or for a run created with another trigger,
    /// the stored trigger is used, as by [`Engine::drive`]: the result is the same either way.
    pub async fn drive_known(&self, run_id: &str, trigger: &Doc) -> Result<RunStatus, Error> {
        self.drive_with(run_id, Trigger::Known(trigger)).await
    }

    /// [`Engine::drive_known`] with the trigger's canonical bytes written already ([`KnownTrigger`]): whether it is
    /// the stored document is a comparison of bytes, with nothing written.
    pub async fn drive_known_trigger(&self, run_id: &str, trigger: &KnownTrigger) -> Result<RunStatus, Error> {
        self.drive_with(run_id, Trigger::Canonical(trigger.held())).await
    }

    /// Drives every pending or running run, in id order, one after another (a restarted worker), and returns each
    /// run's id with how its drive ended. One run's drive failing with an error (a damaged record, say) does not stop
    /// the others: its error is in its entry and the next run is driven. Only the listing itself failing is an error
    /// of the whole call. To drive them concurrently, list them with the ledger's `unfinished_runs` and spawn
    /// [`Engine::drive`] per run.
    pub async fn resume_unfinished(&self) -> Result<Vec<(String, Result<RunStatus, Error>)>, Error> {
        let ids = self.ledger.unfinished_runs()?;
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let status = self.drive(&id).await;
            out.push((id, status));
        }
        Ok(out)
    }

    /// Applies a person's decision to a paused run: records it ([`record_resolution`]) and, unless it is an abort,
    /// drives the run on (the paused key applies it). See the module documentation.
    pub async fn resolve(&self, run_id: &str, resolution: Resolution, by: &str) -> Result<RunStatus, Error> {
        let status = record_resolution(self.ledger.as_ref(), run_id, &resolution, by, self.clock.now_ms())?;
        if status == RunStatus::Failed {
            self.observer.event(&Event::RunFailed { run_id, reason: &format!("aborted by {by}") });
            return Ok(status);
        }
        self.drive(run_id).await
    }

    /// The latest resolution of `key`, if it is still to be applied: made on the attempt the key's record still holds
    /// (its fence; any claim since, a retry's or a mark-done's, used it), or, for a decision an older build filed
    /// without saying, recorded after the key's last attempt began.
    fn pending_resolution(
        &self,
        run_id: &str,
        key: &Key,
        record: &ledger::StepRecord,
    ) -> Result<Option<ResolutionRecord>, Error> {
        let resolutions = self.ledger.resolutions(run_id)?;
        // Made on the attempt the key still holds: used once a claim has moved the key past its fence. An older
        // build's decision, which does not say, by the clock: filed after the key's last attempt began.
        let latest = resolutions.into_iter().rfind(|r| r.key == *key);
        Ok(latest.filter(|r| match r.seen {
            Some(seen) => seen.fence == record.fence,
            None => r.at_ms > record.last_attempt_ms,
        }))
    }

    /// Re-runs a finished run with an edited trigger under the same run id: unchanged steps replay from the ledger,
    /// changed ones run exactly once under their new keys. The edited trigger becomes the run's trigger
    /// ([`Ledger::begin_replay`]): the run is set running with it in one transaction, so a worker that resumes the run
    /// after a crash mid-replay drives the edit, as this call would have, and a later replay or `flow` shows what
    /// the run last ran with. The trigger it replaces is kept in the run's replay history in the same transaction
    /// ([`Ledger::replay_history`], `flow replays`), and the steps the earlier trigger ran keep their records under
    /// their own keys.
    ///
    /// Only a run that has succeeded or failed is replayed (a failed run's steps definitely did not apply, or a
    /// person aborted it: a decision made). Any other is refused with [`Error::NotFinished`], the ledger left as it
    /// was:
    /// - a paused run waits for a person's decision about a key whose outcome the engine cannot judge (an
    ///   at-most-once step that may have applied). Walked with edited inputs, that step would get a new key and be
    ///   sent again while the old key still may have applied: the resend without a person's decision that rule 2
    ///   and I4 forbid. Resolve it first ([`Engine::resolve`], `flow resolve`), then replay what it ends as.
    /// - a pending or running run may be driven by a worker now, or waits to be resumed (after a crash, or a
    ///   person's decision, which a drive with the run's own trigger applies at the key it names). A replay beside
    ///   such a drive would race it for the run's status (one's end overwriting the other's pause), and would send
    ///   under a new key a step that a crash left "may have applied". Let it finish first.
    ///
    /// The check and the switch to running are one transaction, so of two replays of one run begun at once (in one
    /// process or two) the second finds the first's run running and is refused.
    pub async fn replay(&self, run_id: &str, edited_trigger: &Doc) -> Result<RunStatus, Error> {
        let canonical = canonical::to_vec(edited_trigger).map_err(Error::Trigger)?;
        // The workflow first: a run this engine cannot drive is refused before it is set running.
        let mut workflow = None;
        self.ledger.inspect_run(run_id, &mut |run| workflow = run.map(|run| String::from(run.workflow.as_str())))?;
        let workflow = workflow.ok_or_else(|| Error::UnknownRun(run_id.to_string()))?;
        if !self.workflows.contains_key(&workflow) {
            return Err(Error::UnknownWorkflow(workflow));
        }
        match self.ledger.begin_replay(run_id, &canonical, self.clock.now_ms()) {
            Ok(Replay::Begun) => {}
            Ok(Replay::Refused { status, reason }) => {
                return Err(self.not_finished(run_id, status, reason.as_deref().and_then(paused_key))?);
            }
            Err(ledger::Error::NotFound { .. }) => return Err(Error::UnknownRun(run_id.to_string())),
            Err(e) => return Err(e.into()),
        }
        let held = Held { document: edited_trigger, canonical: &canonical, reads_back: reads_back(edited_trigger) };
        self.drive_with(run_id, Trigger::Canonical(held)).await
    }

    /// Why a replay of run `run_id`, found `status` (paused at key `paused_at`, if it is), is refused: names the
    /// step the run waits at when the ledger holds the key.
    fn not_finished(&self, run_id: &str, status: RunStatus, paused_at: Option<Key>) -> Result<Error, Error> {
        let mut step = None;
        if let Some(key) = paused_at {
            self.ledger.inspect(&key, &mut |record| step = record.map(|r| r.step_id.to_string()))?;
        }
        Ok(Error::NotFinished { run_id: run_id.to_string(), status, step })
    }

    /// Drops webhook inbox rows older than the configured retention.
    pub fn expire_webhooks(&self) -> Result<u64, Error> {
        let before_ms = self.clock.now_ms().saturating_sub(self.config.webhook_retention_ms);
        Ok(self.ledger.expire_inbox(before_ms)?)
    }

    /// Takes in a webhook delivery: verifies it, then writes the inbox row and the run in one transaction. A new
    /// event creates a pending run (drive it with [`Engine::drive`]); a duplicate starts nothing. A refused delivery
    /// is recorded as rejected and returned as the error. At the crash point `DuringWebhookIntake` this returns
    /// [`webhook::Error::Halted`] with nothing written.
    pub fn intake_webhook(
        &self,
        source: &webhook::Source,
        delivery: &webhook::Incoming,
    ) -> Result<Intake, webhook::Error> {
        let now_ms = self.clock.now_ms();
        if !self.workflows.contains_key(&source.workflow) {
            return Err(webhook::Error::UnknownWorkflow(source.workflow.clone()));
        }
        if !ledger::names_someone(&source.name) {
            return Err(webhook::Error::BlankSource);
        }
        if let Some(body_ids) = &source.body_ids {
            body_ids.check()?;
        }
        let checked = webhook::check_ids(source, delivery)
            .and_then(|()| webhook::verify(source, delivery, now_ms))
            .and_then(|()| {
                canonical::canonicalize_bytes(&delivery.body).map_err(|e| webhook::Error::InvalidBody(e.to_string()))
            })
            .and_then(|trigger| {
                let given = webhook::ObjectIds::given(source, delivery);
                // The ids are checked against the body the signature covers. It canonicalised above, so it parses here
                // with the same depth bound (serde_json's own stops a level short of it).
                if source.body_ids.is_none() {
                    return Ok((trigger, given));
                }
                let body = crate::doc::from_slice::<serde_json::Value>(&delivery.body)
                    .map_err(|e| webhook::Error::InvalidBody(e.to_string()))?;
                Ok((trigger, webhook::check_body_ids(source, delivery, given, &body)?))
            });
        let (trigger, ids) = match checked {
            Ok(checked) => checked,
            Err(e) => {
                // The refusal is the answer whatever happens to its record: a sender told of a ledger error would send
                // it again (a 5xx), where the delivery itself is refused for good (a 4xx).
                let event_id = webhook::recorded_event_id(&delivery.event_id);
                let mut reason = e.to_string();
                if let Err(failed) = self.ledger.record_rejected(&source.name, &event_id, &reason, now_ms) {
                    reason.push_str(&format!(" (the refusal was not recorded: {failed})"));
                }
                self.observer.event(&Event::WebhookRejected {
                    source: &source.name,
                    event_id: &event_id,
                    reason: &reason,
                });
                return Err(e);
            }
        };
        let run_id = webhook::run_id(&source.name, &delivery.event_id);
        let run_key = key::step_key_canonical(&run_id, "", &[]);
        if self.halt(CrashPoint::DuringWebhookIntake, &run_id, &run_key) {
            return Err(webhook::Error::Halted);
        }
        let dedup_key = webhook::dedup_key(source, &ids);
        let inbox = ledger::Delivery {
            source: &source.name,
            event_id: &delivery.event_id,
            dedup_key: dedup_key.as_deref(),
            received_ms: now_ms,
        };
        let run = RunRecord {
            run_id: run_id.as_str().into(),
            workflow: source.workflow.as_str().into(),
            status: RunStatus::Pending,
            trigger,
            reason: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            replays: 0,
        };
        let intake = self.ledger.intake(&inbox, run).map_err(|e| webhook::Error::Ledger(e.to_string()))?;
        if let Intake::Duplicate { run_id } = &intake {
            self.observer.event(&Event::WebhookDuplicate {
                source: &source.name,
                event_id: &delivery.event_id,
                run_id,
            });
        }
        Ok(intake)
    }

    /// Drives the run until it succeeds, fails or pauses ([`Engine::drive_walk`]). A walk that finds the run no longer
    /// its own (a replay began, or another worker paused it and a person decided) drives the run again as it now
    /// stands, with its stored trigger, so that what it returns is the run's status, not the old walk's.
    async fn drive_with(&self, run_id: &str, given: Trigger<'_>) -> Result<RunStatus, Error> {
        let mut given = given;
        loop {
            match self.drive_walk(run_id, given).await? {
                Walked::Ended(status) => return Ok(status),
                Walked::Superseded => given = Trigger::Stored,
            }
        }
    }

    /// One walk of the run's steps with the trigger it holds (or the caller's copy of it), ended with the run's new
    /// status, unless the run stopped being this walk's meanwhile ([`Ledger::finish_drive`]).
    async fn drive_walk(&self, run_id: &str, given: Trigger<'_>) -> Result<Walked, Error> {
        // Read in place: the status, the compiled workflow and (unless the run ends here or the caller's copy is the
        // same document) the parsed trigger, without copying the run's record.
        let mut read = None;
        let mut known_is_stored = false;
        self.ledger.inspect_run(run_id, &mut |run| {
            read = run.map(|run| {
                let ends_here = !run.status.is_unfinished();
                if !ends_here {
                    known_is_stored = match given {
                        Trigger::Known(known) => is_stored_document(known, &run.trigger),
                        Trigger::Canonical(held) => held.is_stored(&run.trigger),
                        Trigger::Stored => false,
                    };
                }
                let trigger = (!ends_here && !known_is_stored).then(|| crate::doc::from_slice::<Doc>(&run.trigger));
                // The compiled workflow, found by the record's name without copying it (the name is copied only to
                // report a workflow this engine does not know).
                let compiled =
                    self.workflows.get(&*run.workflow).cloned().ok_or_else(|| String::from(run.workflow.as_str()));
                (run.status, compiled, trigger, run.replays)
            });
        })?;
        // The trigger this drive uses without parsing: the caller's copy of the stored one.
        let held_trigger = match given {
            Trigger::Known(known) if known_is_stored => Some(known),
            Trigger::Canonical(held) if known_is_stored => Some(held.document),
            _ => None,
        };
        let (status, compiled, stored_trigger, replays) = read.ok_or_else(|| Error::UnknownRun(run_id.to_string()))?;
        match status {
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Paused => return Ok(Walked::Ended(status)),
            RunStatus::Pending | RunStatus::Running => {}
        }
        let compiled = compiled.map_err(Error::UnknownWorkflow)?;
        // Never driven before (a replay, set running by `Ledger::begin_replay`, walks a finished run, whose keys
        // exist).
        let new_run = status == RunStatus::Pending;
        if new_run {
            // Only while it is still pending under this count: a second dispatch of the run that read it pending and
            // then stalled must not set running again a run another drive began, paused, and a person aborted
            // meanwhile (every later claim would pass then).
            if !self.ledger.finish_drive(run_id, replays, RunStatus::Running, None, self.clock.now_ms())? {
                return Ok(Walked::Superseded);
            }
            self.observer.event(&Event::RunStarted { run_id, workflow: &compiled.workflow.name });
        }
        let stored_trigger =
            stored_trigger.transpose().map_err(|e| Error::Corrupt(format!("trigger of run {run_id}: {e}")))?;
        let trigger = held_trigger
            .or(stored_trigger.as_ref())
            .expect("parsed above unless the caller's copy is the stored document");
        // The outputs of a workflow's first steps are held in the drive's own state (a workflow has a few steps), not
        // in a heap block of their own that every later step would read.
        let mut outputs: SmallVec<[StepOutput; 4]> = SmallVec::new();
        for ((step, kind), &output_needed) in
            compiled.workflow.steps.iter().zip(&compiled.kinds).zip(&compiled.output_needed)
        {
            // A drive that stalled, or waited out a call, past its lease may find that another worker paused the run
            // meanwhile and a person aborted it, or that a replay began: every claim checks the run is still the one
            // this drive began (`Claim::walk`), in the ledger's lock or transaction, so such a drive sends nothing of
            // a run that is no longer its own, and stops at its next claim.
            let drive = Drive { run_id, new_run, output_needed, replays };
            let end = match kind {
                CompiledKind::Action(bound) => {
                    let StepKind::Action { inputs, .. } = &step.kind else { unreachable!("compiled from this step") };
                    self.run_action_step(drive, step, bound, inputs, trigger, &outputs).await?
                }
                // Steps with a plan are boxed (built in their block): held inline, their futures would make every
                // drive's future two thirds larger for its whole life, action steps being the common kind.
                CompiledKind::Writes => {
                    let StepKind::Writes(writes) = &step.kind else { unreachable!("compiled from this step") };
                    pin_in_place(|| self.run_writes_step(drive, step, writes, trigger, &outputs)).await?
                }
                CompiledKind::Agent(planner) => {
                    let StepKind::Agent { inputs, .. } = &step.kind else { unreachable!("compiled from this step") };
                    pin_in_place(|| self.run_agent_step(drive, step, planner, inputs, trigger, &outputs)).await?
                }
            };
            match end {
                End::Done(output) => outputs.push(output),
                End::Paused { reason, key } => {
                    let event = Event::RunPaused { run_id, step_id: &step.id, key: &key, reason: &reason };
                    return self.end_walk(run_id, replays, RunStatus::Paused, Some(&reason), &event);
                }
                End::Failed { reason } => {
                    let event = Event::RunFailed { run_id, reason: &reason };
                    return self.end_walk(run_id, replays, RunStatus::Failed, Some(&reason), &event);
                }
                End::Superseded => return Ok(Walked::Superseded),
            }
        }
        self.end_walk(run_id, replays, RunStatus::Succeeded, None, &Event::RunSucceeded { run_id })
    }

    /// Ends a walk begun under `replays` replays with the run's `status` ([`Ledger::finish_drive`]) and reports
    /// `event`; [`Walked::Superseded`], with nothing written or reported, when the run is no longer the walk's.
    fn end_walk(
        &self,
        run_id: &str,
        replays: u32,
        status: RunStatus,
        reason: Option<&str>,
        event: &Event<'_>,
    ) -> Result<Walked, Error> {
        if !self.ledger.finish_drive(run_id, replays, status, reason, self.clock.now_ms())? {
            return Ok(Walked::Superseded);
        }
        self.observer.event(event);
        Ok(Walked::Ended(status))
    }

    async fn run_action_step(
        &self,
        drive: Drive<'_>,
        step: &workflow::Step,
        bound: &Bound,
        template: &Template,
        trigger: &Doc,
        outputs: &[StepOutput],
    ) -> Result<StepEnd, Error> {
        let Drive { run_id, new_run, output_needed, replays } = drive;
        let inputs = workflow::render(template, trigger, outputs);
        // A first drive claims nearly every key, so the inputs hash comes with the key from one canonical write; a
        // re-drive mostly replays, and computes it only for a claim.
        let keyed = if new_run {
            key::step_key_and_inputs_hash(run_id, &step.id, &inputs, &step.volatile).map(|(k, h)| (k, Some(h)))
        } else {
            key::step_key_without(run_id, &step.id, &inputs, &step.volatile).map(|k| (k, None))
        };
        let (key, inputs_hash) = match keyed {
            Ok(keyed) => keyed,
            Err(e) => return Ok(self.unkeyable(&step.id, &e)),
        };
        let job = KeyJob {
            run_id,
            step_id: &step.id,
            key,
            bound,
            inputs: &inputs,
            volatile: &step.volatile,
            inputs_hash,
            new_run,
            output_needed,
            replays,
        };
        Ok(self.run_key(&job).await?.map(StepOutput::One))
    }

    /// A step whose inputs cannot be canonicalised has no key and cannot be sent: it fails (nothing was applied).
    fn unkeyable<T>(&self, step_id: &str, e: &canonical::Error) -> End<T> {
        End::Failed { reason: format!("step {step_id}: its inputs cannot be canonicalised: {e}") }
    }

    async fn run_writes_step(
        &self,
        drive: Drive<'_>,
        step: &workflow::Step,
        writes: &[(String, Template)],
        trigger: &Doc,
        outputs: &[StepOutput],
    ) -> Result<StepEnd, Error> {
        let run_id = drive.run_id;
        let proposed: Vec<PlannedAction> = writes
            .iter()
            .map(|(action, template)| PlannedAction {
                action: action.clone(),
                inputs: workflow::render(template, trigger, outputs),
            })
            .collect();
        let plan = plan_document(&proposed);
        // With no volatile paths the key covers the whole plan: its canonical bytes serve the key and the record.
        let plan_bytes = step.volatile.is_empty().then(|| canonical::to_vec(&plan));
        let key_plan_bytes;
        let key_bytes = match &plan_bytes {
            Some(bytes) => bytes.as_ref(),
            None => {
                // The key covers each write with its volatile input paths left out, written without copying it.
                let paths: Vec<String> = step.volatile.iter().map(|path| format!("inputs.{path}")).collect();
                let mut bytes = Vec::with_capacity(256);
                bytes.push(b'[');
                let written = plan.as_array().expect("built as an array").iter().enumerate().try_for_each(|(i, w)| {
                    if i > 0 {
                        bytes.push(b',');
                    }
                    canonical::write_value_without(w, &paths, &mut bytes)
                });
                bytes.push(b']');
                key_plan_bytes = written.map(|()| bytes);
                key_plan_bytes.as_ref()
            }
        };
        let step_key = match key_bytes {
            Ok(c) => key::step_key_canonical(run_id, &step.id, c),
            Err(e) => return Ok(self.unkeyable(&step.id, e)),
        };
        let (recorded, reused, built) = match self.ledger.get_plan(&step_key)? {
            Some(recorded) => (recorded, true, None),
            None => {
                let bytes = match plan_bytes.unwrap_or_else(|| canonical::to_vec(&plan)) {
                    Ok(b) => b,
                    Err(e) => return Ok(self.unkeyable(&step.id, &e)),
                };
                let in_force = self.ledger.record_plan(run_id, &step_key, &bytes, self.clock.now_ms())?;
                let reused = in_force != bytes;
                // The plan in force is the one just built: its writes are at hand, unless a parse of the recorded
                // bytes would give other values (see `reads_back`).
                let built = (!reused && reads_back(&plan)).then_some(proposed);
                (in_force, reused, built)
            }
        };
        self.run_plan(drive, step, step_key, &recorded, reused, built).await
    }

    async fn run_agent_step(
        &self,
        drive: Drive<'_>,
        step: &workflow::Step,
        planner: &Arc<dyn Planner>,
        template: &Template,
        trigger: &Doc,
        outputs: &[StepOutput],
    ) -> Result<StepEnd, Error> {
        let run_id = drive.run_id;
        let inputs = workflow::render(template, trigger, outputs);
        let step_key = match key::step_key_without(run_id, &step.id, &inputs, &step.volatile) {
            Ok(k) => k,
            Err(e) => return Ok(self.unkeyable(&step.id, &e)),
        };
        if let Some(recorded) = self.ledger.get_plan(&step_key)? {
            // A recorded plan is final: never ask the planner again.
            return self.run_plan(drive, step, step_key, &recorded, true, None).await;
        }
        // Asking the model is no effect, and a superseded drive would stop at its first write's claim anyway; but it
        // costs a model call and records a plan for a run that is no longer this drive's (a person aborted it, a
        // replay began): not asked then.
        let mut walking = false;
        self.ledger.inspect_run(run_id, &mut |run| walking = run.is_some_and(|run| run.walked_by(drive.replays)))?;
        if !walking {
            return Ok(End::Superseded);
        }
        let mut last_error = String::new();
        for attempt in 1..=self.config.plan_attempt_count_max.max(1) {
            let proposed = match planner.plan(run_id, &step.id, &inputs).await {
                Ok(p) => {
                    // Planning is reading and thinking: a crash after the model answered but before its plan is
                    // recorded leaves nothing outside, and the next drive plans again.
                    self.maybe_halt(CrashPoint::WhilePlanning, run_id, &step_key).await;
                    p
                }
                Err(e) => {
                    last_error = e;
                    sleep_ms(decide::backoff_ms(&self.config.retry, self.config.seed, &step_key, attempt + 1)).await;
                    continue;
                }
            };
            if let Some(unknown) = proposed.iter().find(|a| !self.actions.contains_key(&a.action)) {
                return Ok(End::Failed {
                    reason: format!("step {}: the planner proposed unknown action {:?}", step.id, unknown.action),
                });
            }
            let plan = plan_document(&proposed);
            let bytes = match canonical::to_vec(&plan) {
                Ok(b) => b,
                Err(e) => return Ok(self.unkeyable(&step.id, &e)),
            };
            // Another worker may have recorded its plan meanwhile: the one in force wins.
            let in_force = self.ledger.record_plan(run_id, &step_key, &bytes, self.clock.now_ms())?;
            let reused = in_force != bytes;
            let built = (!reused && reads_back(&plan)).then_some(proposed);
            return self.run_plan(drive, step, step_key, &in_force, reused, built).await;
        }
        Ok(End::Failed {
            reason: format!(
                "step {}: the planner failed {} times: {last_error}",
                step.id, self.config.plan_attempt_count_max
            ),
        })
    }

    /// Runs the writes of a recorded plan, each under its own write key. `built` is the plan's writes when this drive
    /// built `plan` from them and a parse of it would give them back; otherwise `plan` is parsed.
    async fn run_plan(
        &self,
        drive: Drive<'_>,
        step: &workflow::Step,
        step_key: Key,
        plan: &[u8],
        reused: bool,
        built: Option<Vec<PlannedAction>>,
    ) -> Result<StepEnd, Error> {
        let Drive { run_id, new_run, output_needed, replays } = drive;
        let corrupt = |what: &str| Error::Corrupt(format!("plan of step {} of run {run_id}: {what}", step.id));
        let writes: Vec<PlannedAction> = match built {
            Some(writes) => writes,
            None => crate::doc::from_slice(plan).map_err(|e| corrupt(&e.to_string()))?,
        };
        self.observer.event(&Event::PlanRecorded {
            run_id,
            step_id: &step.id,
            key: &step_key,
            writes: writes.len(),
            reused,
            plan,
        });
        self.maybe_halt(CrashPoint::AfterPlanBeforeFirstWrite, run_id, &step_key).await;
        let mut outputs = Vec::with_capacity(writes.len());
        for (index, write) in writes.into_iter().enumerate() {
            let bound =
                self.actions.get(&write.action).ok_or_else(|| corrupt(&format!("unknown action {}", write.action)))?;
            let canonical =
                canonical::to_vec_without(&write.inputs, &step.volatile).map_err(|e| corrupt(&e.to_string()))?;
            let key = key::write_key_canonical(&step_key, index as u32, &canonical);
            let job = KeyJob {
                run_id,
                step_id: &step.id,
                key,
                bound,
                inputs: &Arc::new(write.inputs),
                volatile: &step.volatile,
                inputs_hash: new_run.then(|| *blake3::hash(&canonical).as_bytes()),
                new_run,
                output_needed,
                replays,
            };
            match self.run_key(&job).await? {
                End::Done(output) => outputs.push(output),
                other => return Ok(other.map(StepOutput::One)),
            }
        }
        Ok(End::Done(StepOutput::Writes(outputs)))
    }

    /// Reads the first-attempt time of a keyed key, recorded when it was first retried.
    fn first_attempt_ms(&self, key: &Key) -> Result<Option<u64>, Error> {
        let Some(bytes) = self.ledger.get_plan(&first_attempt_marker(key))? else { return Ok(None) };
        let text = std::str::from_utf8(&bytes).map_err(|e| Error::Corrupt(e.to_string()))?;
        Ok(Some(text.parse::<u64>().map_err(|e| Error::Corrupt(format!("first-attempt marker {text:?}: {e}")))?))
    }

    /// One key's life: decide, act, record, until it is done, paused or failed. Bounded by `decision_count_max`.
    async fn run_key(&self, job: &KeyJob<'_>) -> Result<KeyEnd, Error> {
        let KeyJob { run_id, step_id, key, bound, inputs, .. } = *job;
        let spec = &bound.spec;
        let keyed_rules = self.config.policy == Policy::Rules && matches!(spec.class, GuaranteeClass::Keyed { .. });
        // Does a record say every attempt under the key definitely did not apply? (For the attempt about to be made:
        // `Attempting::earlier_maybe_applied`, `prior_definite`.)
        let naive = self.config.policy == Policy::Naive;
        let definite = |r: &ledger::StepRecord| {
            if naive { r.status == Status::Failed } else { decide::definitely_not_applied(r) }
        };
        let durable = !matches!(spec.class, GuaranteeClass::Keyed { .. });
        let mut last: Option<LastCall> = None;
        let mut person_retry = false;
        // When a person's retry was recorded: the attempt it allows is claimed strictly after it, so the resolution
        // is seen as used by every later reader (see `pending_resolution`).
        let mut person_retry_at_ms = 0;
        // The fence of the record a person's retry was taken on: once the key has moved past it (another drive's
        // claim used the retry: its attempt is the one allowed), the retry no longer applies here.
        let mut person_retry_fence = 0;
        let mut resolution_used = false;
        // A key of a run's first drive is decided on first as unclaimed, without reading its record: what deciding on
        // no record does is claim the key as new (`expected_fence` 0), and a claim of a key that exists changes
        // nothing and answers `Conflict`, after which the loop reads the record and decides as always. Saves a
        // read (a SQLite point query) for nearly every key of a first drive.
        let mut unread = job.new_run;
        for _ in 0..self.config.decision_count_max {
            // The record is read and decided on inside this block and dropped at its end, before any await of the
            // loop: so it (240 bytes) is not part of this future's state, which is inside every drive's.
            let next = {
                let record = if std::mem::take(&mut unread) { None } else { self.ledger.get(&key)? };
                if person_retry && record.as_ref().map(|r| r.fence) != Some(person_retry_fence) {
                    // Looked up again: a decision filed after the new attempt is another decision.
                    person_retry = false;
                    resolution_used = false;
                }
                // The attempt in doubt answered since the retry was taken up (before its claim): applied, with an
                // answer that cannot be stored. A retry would send it again ([`decidable`]): withdrawn, and the key
                // decided on as it now stands, which pauses (found by QA, stop 51: the payout was sent twice).
                let retry_withdrawn = person_retry && record.as_ref().is_some_and(would_resend_applied);
                if retry_withdrawn {
                    person_retry = false;
                }
                let now_ms = self.clock.now_ms();
                let first_attempt_ms = match &record {
                    Some(r) if keyed_rules && r.attempt_count >= 2 && r.status != Status::Succeeded => {
                        self.first_attempt_ms(&key)?
                    }
                    _ => None,
                };
                // The record may name another action than the step now does (the workflow was edited, keeping the
                // step's id and inputs): then a person decides (`decide_for_action`).
                let decision = decide::decide_for_action(
                    &Input {
                        spec,
                        policy: self.config.policy,
                        retry: &self.config.retry,
                        seed: self.config.seed,
                        key: &key,
                        record: record.as_ref(),
                        last,
                        first_attempt_ms,
                        now_ms,
                        person_retry,
                    },
                    &bound.full,
                );
                // Whether a stop is a pause (else the step failed): both are handled in one arm below.
                let paused = matches!(decision, Decision::Pause(_));
                match decision {
                    Decision::Replay => {
                        let record = record.expect("replay decided on a record");
                        let bytes =
                            record.output.as_deref().unwrap_or_else(|| panic!("succeeded key {key} has no output"));
                        // An output no later step names stands as `null`: nothing in this drive reads it.
                        let output = if job.output_needed {
                            crate::doc::from_slice(bytes)
                                .map_err(|e| Error::Corrupt(format!("output of key {key}: {e}")))?
                        } else {
                            Doc::Null
                        };
                        self.observer.event(&Event::Replayed { run_id, step_id, key: &key });
                        return Ok(End::Done(output));
                    }
                    Decision::WaitUntil { until_ms } => match &record {
                        // An attempt stamped by a clock ahead of this drive's is taken as begun now: its age counts
                        // from when this drive first saw it, not from a moment this clock has not reached.
                        Some(r) if r.status == Status::Started => {
                            Next::AwaitLease { until_ms, attempt_ms: r.last_attempt_ms.min(now_ms), fence: r.fence }
                        }
                        _ => Next::Sleep(until_ms.saturating_sub(now_ms)),
                    },
                    Decision::Backoff { delay_ms } => {
                        let attempt = record.as_ref().map_or(1, |r| r.attempt_count + 1);
                        self.observer.event(&Event::RetryScheduled { run_id, step_id, key: &key, attempt, delay_ms });
                        Next::Sleep(delay_ms)
                    }
                    // A person's decision made on the key as it now stands (its fence: see `pending_resolution`) is
                    // applied where the key pauses, and also where it fails: an attempt that outlived its lease may
                    // have landed a definite failure after the run paused at it, and a person's retry allows one more
                    // attempt whatever the count.
                    Decision::Pause(reason) | Decision::Fail(reason) => {
                        let pending = match &record {
                            Some(r) if !resolution_used => self.pending_resolution(run_id, &key, r)?,
                            _ => None,
                        };
                        let Some(resolution) = pending else {
                            if retry_withdrawn {
                                return Ok(End::Paused { reason: retry_would_resend(&reason, None, &key), key });
                            }
                            if paused {
                                return Ok(End::Paused { reason: format!("{reason} [key {key}]"), key });
                            }
                            return Ok(End::Failed { reason });
                        };
                        // Only a key recorded as another action pauses at a succeeded record, which is final: neither
                        // another output nor another attempt can be recorded under it.
                        if record.as_ref().is_some_and(|r| r.status == Status::Succeeded)
                            && !matches!(resolution.resolution, Resolution::Abort)
                        {
                            let reason = format!(
                                "{reason}; the decision to {} by {} cannot apply to a succeeded key [key {key}]",
                                resolution.resolution.name(),
                                resolution.by
                            );
                            return Ok(End::Paused { reason, key });
                        }
                        // Refused when it is filed ([`decidable`]); an older build filed it unchecked. A retry would
                        // send again a step the API answered as applied.
                        if let (Resolution::Retry, Some(r)) = (&resolution.resolution, &record)
                            && would_resend_applied(r)
                        {
                            let reason = retry_would_resend(&reason, Some(&resolution.by), &key);
                            return Ok(End::Paused { reason, key });
                        }
                        // A mark-done made on an attempt of unknown outcome, over which that attempt's answer has
                        // since landed saying the step definitely did not apply: the decision's premise is gone (a
                        // success recorded now would have no effect behind it), so a person decides again. An older
                        // build's mark-done does not say what it was made on: over a definite failure it is not
                        // applied either, since a success with nothing behind it is the harm a second decision avoids.
                        if let (Resolution::MarkDone { .. }, Some(r)) = (&resolution.resolution, &record)
                            && decide::definitely_not_applied(r)
                            && resolution.seen.is_none_or(|seen| seen.status != Status::Failed)
                        {
                            let error = r.error.as_deref().unwrap_or("no error recorded");
                            let reason = match resolution.seen {
                                Some(_) => format!(
                                    "{reason}; the attempt's answer came after {} decided to mark the step done, and \
                                     says it definitely did not apply ({error}): a person must decide again \
                                     [key {key}]",
                                    resolution.by
                                ),
                                None => format!(
                                    "{reason}; the decision to mark the step done by {} was filed by an older build, \
                                     which did not record what it was made on, and the step is recorded as definitely \
                                     not applied ({error}): a person must decide again [key {key}]",
                                    resolution.by
                                ),
                            };
                            return Ok(End::Paused { reason, key });
                        }
                        // Refused when it is filed ([`record_resolution`]); an older build filed it unchecked. The
                        // run waits for a decision it can apply (neither applied nor reported as applied), and the
                        // other runs go on.
                        let done_output = match &resolution.resolution {
                            Resolution::MarkDone { output } => match canonical::to_vec(output) {
                                Ok(bytes) => Some(bytes),
                                Err(e) => {
                                    let reason = format!(
                                        "{reason}; the decision to mark the step done by {} gives an output that \
                                         cannot be stored ({e}): a person must decide again [key {key}]",
                                        resolution.by
                                    );
                                    return Ok(End::Paused { reason, key });
                                }
                            },
                            Resolution::Retry | Resolution::Abort => None,
                        };
                        resolution_used = true;
                        // Reported as applied where it takes effect: an abort here, a retry once its claim is
                        // granted, a mark-done once its success is recorded (a claim that conflicts leaves either to
                        // be judged again on the record as it then is: a late success is replayed, unreported).
                        let resolved =
                            Event::RunResolved { run_id, key: &key, resolution: resolution.resolution.name() };
                        match resolution.resolution {
                            Resolution::Abort => {
                                self.observer.event(&resolved);
                                return Ok(End::Failed { reason: format!("aborted by {}", resolution.by) });
                            }
                            Resolution::Retry => {
                                person_retry = true;
                                person_retry_at_ms = resolution.at_ms;
                                person_retry_fence = record.as_ref().map_or(0, |r| r.fence);
                            }
                            Resolution::MarkDone { output } => {
                                let bytes = done_output.unwrap_or_default();
                                // Claimed on the record as read, status and all: an answer of the attempt in doubt
                                // that lands before the claim conflicts it, and the next pass decides on the answer.
                                match self.ledger.claim(&self.claim(job, record.as_ref(), true, now_ms))? {
                                    Claimed::Granted { fence, .. } => {
                                        let done = Completion::Succeeded { output: bytes };
                                        if self.complete_or_lost(&key, fence, done, now_ms)? {
                                            self.observer.event(&resolved);
                                            self.observer.event(&Event::StepSucceeded {
                                                run_id,
                                                step_id,
                                                key: &key,
                                                action: &bound.full,
                                            });
                                            return Ok(End::Done(Doc::from(&output)));
                                        }
                                    }
                                    // The record moved (another drive's claim, or the answer of the attempt in
                                    // doubt): read again, and judge the decision on the record as it now is.
                                    Claimed::Conflict(_) => resolution_used = false,
                                    Claimed::Superseded => return Ok(End::Superseded),
                                }
                            }
                        }
                        Next::Again
                    }
                    Decision::Attempt { expected_fence, lookup_first } => {
                        if keyed_rules
                            && let Some(r) = &record
                            && r.attempt_count == 1
                        {
                            // The first retry: remember when the key was first sent (write-once), for the retention
                            // rule.
                            self.ledger.record_plan(
                                run_id,
                                &first_attempt_marker(&key),
                                r.last_attempt_ms.to_string().as_bytes(),
                                now_ms,
                            )?;
                        }
                        let claim_ms = if person_retry { now_ms.max(person_retry_at_ms + 1) } else { now_ms };
                        debug_assert_eq!(expected_fence, record.as_ref().map_or(0, |r| r.fence), "decided on the read");
                        let (fence, attempt) = match self.ledger.claim(&self.claim(
                            job,
                            record.as_ref(),
                            durable || person_retry,
                            claim_ms,
                        ))? {
                            Claimed::Granted { fence, attempt } => (fence, attempt),
                            // The record changed since it was read (another worker): read again and decide again.
                            Claimed::Conflict(_) => continue,
                            Claimed::Superseded => return Ok(End::Superseded),
                        };
                        if person_retry {
                            self.observer.event(&Event::RunResolved {
                                run_id,
                                key: &key,
                                resolution: Resolution::Retry.name(),
                            });
                        }
                        person_retry = false;
                        // Did an earlier attempt under this key maybe apply? Then a definite failure now does not make
                        // the step definitely failed: "failed" needs every attempt to have definitely not applied. A
                        // lookup that finds nothing past the lag bound settles the question.
                        Next::Attempt(Attempting {
                            fence,
                            attempt,
                            claim_ms,
                            lookup_first,
                            // A `[key-reused]` failure is not definite: an earlier request under the key may have
                            // applied (`decide::definitely_not_applied`). The naive baseline takes every failure for
                            // definite, as it always did.
                            earlier_maybe_applied: record.as_ref().is_some_and(|r| !definite(r)),
                            prior_definite: record.as_ref().is_none_or(definite),
                            prior_error: record.and_then(|r| r.error),
                        })
                    }
                }
            };
            let Attempting {
                fence,
                attempt,
                claim_ms,
                lookup_first,
                mut earlier_maybe_applied,
                prior_definite,
                prior_error,
            } = match next {
                Next::Sleep(ms) => {
                    sleep_ms(ms).await;
                    continue;
                }
                Next::AwaitLease { until_ms, attempt_ms, fence } => {
                    loop {
                        let now_ms = self.clock.now_ms();
                        let Some(look_ms) = lease_wait_look_at(attempt_ms, now_ms).filter(|&at| at < until_ms) else {
                            sleep_ms(until_ms.saturating_sub(now_ms)).await;
                            break;
                        };
                        sleep_ms(look_ms - now_ms).await;
                        // Still the same attempt in flight? Anything else (an outcome, a takeover) is decided on now.
                        let held =
                            self.ledger.get(&key)?.is_some_and(|r| r.status == Status::Started && r.fence == fence);
                        if !held {
                            break;
                        }
                    }
                    continue;
                }
                Next::Again => continue,
                Next::Attempt(attempting) => attempting,
            };
            if lookup_first && spec.has_lookup {
                earlier_maybe_applied = false;
                match self.lookup(job, attempt, fence, prior_definite, prior_error.as_deref()).await? {
                    Looked::Ended(end) => return Ok(end),
                    Looked::Go => {}
                    // A failed lookup's retry-after is waited out from the lookup's end, as a call's is from the
                    // call's end. Without one, `last` stays as it was: the backoff counts from this drive's last call,
                    // else from the attempt's claim.
                    Looked::Failed { ended_ms, retry_after_ms: Some(ms) } => {
                        last = Some(LastCall { ended_ms, retry_after_ms: Some(ms) });
                    }
                    Looked::Failed { .. } => {}
                }
                // Nothing found (create now), or the lookup failed and was recorded (read again).
                let mut moved = false;
                self.ledger.inspect_outcome(&key, &mut |r| {
                    moved = r.is_some_and(|r| r.fence != fence || r.status != Status::Started);
                })?;
                if moved {
                    continue; // the lookup recorded its failure, or we lost the key
                }
            }
            self.maybe_halt(CrashPoint::BeforeCall, run_id, &key).await;
            // The next owner waits out a lookup connector's lag from this attempt's lease expiry, which
            // covers a request only if it reached the API by then. A worker that stalled since its claim
            // (a long pause during the lookup, say) must not send late: it sends only while half its lease
            // is left, the other half being the request's transit (so `lease_ms` must exceed twice the
            // longest transit). Found by the release gate: a worker paused for a minute sent its create after
            // its lease had expired and the new owner's lookup missed it.
            let send_ms = self.clock.now_ms();
            if send_ms >= claim_ms.saturating_add(self.config.lease_ms / 2) {
                let error = format!(
                    "not sent: half the lease was spent before the request could go ({} ms after the claim)",
                    send_ms - claim_ms
                );
                let completion = if earlier_maybe_applied {
                    Completion::Unknown { reason: format!("{error} (an earlier attempt may have applied)") }
                } else {
                    Completion::Failed { error }
                };
                self.complete_or_lost(&key, fence, completion, send_ms)?;
                last = Some(LastCall { ended_ms: send_ms, retry_after_ms: None });
                continue;
            }
            let sent_key = match self.config.policy {
                Policy::Rules => key,
                Policy::Naive => naive_attempt_key(&key, attempt),
            };
            self.observer.event(&Event::CallStarted {
                run_id,
                step_id,
                key: &key,
                sent_key: &sent_key,
                action: &bound.full,
                attempt,
            });
            let request = Request { action: &spec.name, inputs, key: &sent_key, run_id, attempt };
            let outcome = bound.connector.call(request).await;
            self.maybe_halt(CrashPoint::AfterCallBeforeRecord, run_id, &key).await;
            self.observer.event(&Event::CallEnded {
                run_id,
                step_id,
                key: &key,
                action: &bound.full,
                attempt,
                outcome: outcome_name(&outcome),
            });
            let ended_ms = self.clock.now_ms();
            let mut retry_after_ms = None;
            let completion = match &outcome {
                Outcome::Applied(output) => match canonical::to_vec(output) {
                    Ok(bytes) => Completion::Succeeded { output: bytes },
                    Err(e) => Completion::Unknown {
                        reason: unstorable_reason("the API answered that the step applied", output, &e),
                    },
                },
                Outcome::NotApplied(n) => {
                    retry_after_ms = n.retry_after_ms;
                    Completion::Failed { error: format!("{}{}", failure_mark(n, decide::PERMANENT_MARK), n.error) }
                }
                Outcome::Indeterminate(reason) => Completion::Unknown { reason: reason.clone() },
                Outcome::KeyReusedWithDifferentPayload(m) => {
                    Completion::Failed { error: format!("{}{m}", decide::KEY_REUSED_MARK) }
                }
                Outcome::KeyInFlight => {
                    Completion::Unknown { reason: "a concurrent request with this key is in flight (409)".to_string() }
                }
            };
            let completion = match completion {
                // Where the API had said it holds the key with another payload, that answer is why, and a person
                // deciding needs it: kept, once (the last mark onward is the answer itself), however many refusals
                // follow; a refusal that is itself such an answer says it already.
                Completion::Failed { error } if earlier_maybe_applied => Completion::Unknown {
                    reason: match prior_error
                        .as_deref()
                        .filter(|_| !error.starts_with(decide::KEY_REUSED_MARK))
                        .and_then(|e| e.rfind(decide::KEY_REUSED_MARK).map(|at| &e[at..]))
                    {
                        Some(key_reused) => format!(
                            "{error}; an earlier attempt under this key may have applied, as the API had answered: \
                             {key_reused}"
                        ),
                        None => format!("{error} (an earlier attempt under this key may have applied)"),
                    },
                },
                other => other,
            };
            let succeeded = matches!(completion, Completion::Succeeded { .. });
            match self.ledger.complete(&key, fence, completion, ended_ms) {
                Ok(()) => {}
                // Our lease was taken over while we called: the new owner decides; read again. An answer that the
                // step applied is kept beside the key ([`late_applied_marker`]) while the run is there to keep it
                // under: the key's record will not say so. An output that cannot be stored is kept as the reason
                // that says so (marked [`decide::UNSTORABLE_MARK`], with the answer shortened).
                Err(ledger::Error::Fenced { .. }) => {
                    if let Outcome::Applied(output) = &outcome {
                        let mut run_held = false;
                        self.ledger.inspect_run(run_id, &mut |run| run_held = run.is_some())?;
                        if run_held {
                            let kept = canonical::to_vec(output).unwrap_or_else(|e| {
                                unstorable_reason("the API answered that the step applied", output, &e).into_bytes()
                            });
                            self.ledger.record_plan(run_id, &late_applied_marker(&key, fence), &kept, ended_ms)?;
                        }
                    }
                    continue;
                }
                Err(ledger::Error::OutputConflict { key }) => {
                    panic!("key {key} succeeded twice with different outputs: two executions of one key")
                }
                Err(e) => return Err(e.into()),
            }
            if succeeded && let Outcome::Applied(output) = outcome {
                self.observer.event(&Event::StepSucceeded { run_id, step_id, key: &key, action: &bound.full });
                return Ok(End::Done(output));
            }
            last = Some(LastCall { ended_ms, retry_after_ms });
        }
        Ok(End::Paused {
            reason: format!(
                "step {step_id}: no decision reached within {} tries (a lease held elsewhere, or conflicts) [key {key}]",
                self.config.decision_count_max
            ),
            key,
        })
    }

    /// A claim of `job`'s key decided on `read` (the record as this drive read it, `None` for none): the ledger grants
    /// it only while the record still has the fence and the status read.
    fn claim<'a>(
        &'a self,
        job: &KeyJob<'a>,
        read: Option<&ledger::StepRecord>,
        durable: bool,
        now_ms: u64,
    ) -> Claim<'a> {
        Claim {
            key: job.key,
            run_id: job.run_id,
            step_id: job.step_id,
            action: &job.bound.full,
            inputs_hash: job.inputs_hash(),
            worker: &self.config.worker_id,
            now_ms,
            lease_ms: self.config.lease_ms,
            expected_fence: read.map_or(0, |r| r.fence),
            expected_status: read.map(|r| r.status),
            durable,
            walk: Some(job.replays),
        }
    }

    /// Looks for an earlier create under the claimed attempt. Found: adopts it (the key succeeds with the found
    /// record). Not found: [`Looked::Go`], the caller creates. The search failed: records the attempt as failed (when
    /// nothing before it may have applied) or unknown, marked [`decide::LOOKUP_REFUSED_MARK`] when the API said no
    /// retry can succeed, and returns [`Looked::Failed`] so the caller reads again.
    async fn lookup(
        &self,
        job: &KeyJob<'_>,
        attempt: u32,
        fence: u64,
        prior_definite: bool,
        prior_error: Option<&str>,
    ) -> Result<Looked, Error> {
        let KeyJob { run_id, step_id, key, bound, inputs, .. } = *job;
        let request = Request { action: &bound.spec.name, inputs, key: &key, run_id, attempt };
        let found = bound.connector.lookup(request).await;
        let now_ms = self.clock.now_ms();
        self.observer.event(&Event::Lookup {
            run_id,
            step_id,
            key: &key,
            action: &bound.full,
            found: matches!(found, LookupOutcome::Found(_)),
        });
        match found {
            LookupOutcome::Found(output) => {
                let bytes = match canonical::to_vec(&output) {
                    Ok(b) => b,
                    Err(e) => {
                        let reason = unstorable_reason("a lookup found the record the step created", &output, &e);
                        self.complete_or_lost(&key, fence, Completion::Unknown { reason }, now_ms)?;
                        return Ok(Looked::Go);
                    }
                };
                if self.complete_or_lost(&key, fence, Completion::Succeeded { output: bytes }, now_ms)? {
                    self.observer.event(&Event::StepSucceeded { run_id, step_id, key: &key, action: &bound.full });
                    return Ok(Looked::Ended(End::Done(output)));
                }
                Ok(Looked::Go)
            }
            LookupOutcome::NotFound => Ok(Looked::Go),
            LookupOutcome::Failed(n) => {
                let mark = failure_mark(&n, decide::LOOKUP_REFUSED_MARK);
                let e = &n.error;
                let completion = if prior_definite {
                    Completion::Failed { error: format!("{mark}lookup failed, nothing sent: {e}") }
                } else {
                    // Nothing can be concluded about the earlier write, whatever the search's failure: unknown.
                    let earlier = prior_error.unwrap_or("an earlier attempt may have applied");
                    Completion::Unknown { reason: format!("{mark}{earlier}; lookup failed: {e}") }
                };
                self.complete_or_lost(&key, fence, completion, now_ms)?;
                Ok(Looked::Failed { ended_ms: now_ms, retry_after_ms: n.retry_after_ms })
            }
        }
    }

    /// Completes under `fence`; false when another worker took the key over meanwhile.
    fn complete_or_lost(&self, key: &Key, fence: u64, completion: Completion, now_ms: u64) -> Result<bool, Error> {
        match self.ledger.complete(key, fence, completion, now_ms) {
            Ok(()) => Ok(true),
            Err(ledger::Error::Fenced { .. }) => Ok(false),
            Err(ledger::Error::OutputConflict { key }) => {
                panic!("key {key} succeeded twice with different outputs: two executions of one key")
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc;

    /// A waiting drive looks when the attempt's age reaches 50 ms, 100 ms, 200 ms... (the next such age after now),
    /// up to 5 s (3.2 s is the last look); an attempt older than that is waited out.
    #[test]
    fn a_lease_wait_looks_as_the_attempts_age_doubles_while_it_may_be_live() {
        let at = 1_000_000;
        assert_eq!(lease_wait_look_at(at, at), Some(at + 50));
        assert_eq!(lease_wait_look_at(at, at + 50), Some(at + 100));
        assert_eq!(lease_wait_look_at(at, at + 70), Some(at + 100));
        assert_eq!(lease_wait_look_at(at, at + 1_700), Some(at + 3_200));
        assert_eq!(lease_wait_look_at(at, at + 3_200), None, "6.4 s is past the age a live attempt may have");
        assert_eq!(lease_wait_look_at(at, at + 60_000), None);
        // An attempt stamped by a clock ahead of this one's would be first looked at 550 ms from now; `run_key` takes
        // it as begun now instead (`attempt_ms.min(now_ms)`: tests/executor_late_outcomes.rs).
        assert_eq!(lease_wait_look_at(at + 500, at), Some(at + 550));
    }

    #[test]
    fn a_held_trigger_stands_for_the_stored_one_only_when_a_parse_would_give_it_back() {
        let stored = |v: &Doc| canonical::to_vec(v).expect("canonical");
        let trigger = doc!({"email": "a@example.com", "amount": 5, "tags": ["x", -3, 1.5], "ok": true, "n": null});
        assert!(is_stored_document(&trigger, &stored(&trigger)));
        assert!(!is_stored_document(&doc!({"amount": 6}), &stored(&doc!({"amount": 5}))));
        assert!(!is_stored_document(&trigger, b"not json"));
        // 2.0 is stored as `2`, which parses as the integer 2: not the same document as the caller's float.
        let float = doc!({"amount": 2.0});
        assert_eq!(stored(&float), b"{\"amount\":2}");
        assert!(!is_stored_document(&float, &stored(&float)));
        assert!(!is_stored_document(&doc!({"x": -0.0}), &stored(&doc!({"x": -0.0}))));
        // Numbers a parse reads back as themselves: fractions, and integers up to 2^53 - 1.
        let numbers = doc!({"x": 0.25, "y": -1.5e-7, "z": 9_007_199_254_740_991_u64});
        assert!(is_stored_document(&numbers, &stored(&numbers)));
    }

    #[test]
    fn a_known_trigger_stands_for_the_stored_one_exactly_when_a_held_one_would() {
        let stored = |v: &Doc| canonical::to_vec(v).expect("canonical");
        let known = |v: Doc| KnownTrigger::new(v).expect("canonical");
        let documents = [
            doc!({"email": "a@example.com", "amount": 5, "tags": ["x", -3, 1.5], "ok": true, "n": null}),
            doc!({"amount": 2.0}),
            doc!({"x": -0.0}),
            doc!({"x": 0.25, "y": -1.5e-7, "z": 9_007_199_254_740_991_u64}),
            doc!({"\u{e000}": 1, "\u{10000}": 2, "a\"b": "\n"}),
        ];
        for document in &documents {
            let trigger = known(document.clone());
            assert_eq!(trigger.canonical(), stored(document), "{document}");
            assert_eq!(trigger.document(), document);
            let held = trigger.held();
            for other in &documents {
                let expected = is_stored_document(document, &stored(other));
                assert_eq!(held.is_stored(&stored(other)), expected, "{document} against {other}");
            }
            assert!(!held.is_stored(b"not json"));
        }
        assert!(known(doc!({"amount": 5})).held().is_stored(&stored(&doc!({"amount": 5}))));
        assert!(!known(doc!({"amount": 2.0})).held().is_stored(b"{\"amount\":2}"), "2.0 reads back as the integer 2");
        // A document with no canonical form (nested too deep) is refused, as `create_run` refuses it.
        let deep = (0..=canonical::DEPTH_MAX).fold(doc!(1), |inner, _| doc!([inner]));
        assert!(matches!(KnownTrigger::new(deep), Err(canonical::Error::TooDeep { .. })));
    }

    #[test]
    fn a_built_plan_stands_for_its_recorded_bytes_only_when_a_parse_would_give_it_back() {
        let plan = doc!([
            {"action": "payments.charge", "inputs": {"amount": 5, "tags": ["x", 1.5], "n": null}},
            {"action": "email.send_email", "inputs": {"to": "a@example.com"}},
        ]);
        let bytes = canonical::to_vec(&plan).expect("canonical");
        let parsed: Vec<PlannedAction> = serde_json::from_slice(&bytes).expect("a plan parses");
        assert!(reads_back(&plan));
        assert_eq!(plan_document(&parsed), plan);
        // 2.0 is recorded as `2`, which parses as the integer 2: the recorded plan is not the built one.
        let float = doc!([{"action": "payments.charge", "inputs": {"amount": 2.0}}]);
        assert!(!reads_back(&float));
    }
}
