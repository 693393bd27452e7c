//! Test doubles for the executor tests: a scripted connector (a fixed sequence of outcomes in; the calls made and the
//! effects committed out), a scripted planner whose answer changes from call to call, and a recording observer that
//! can halt the engine at a crash point. They run under real tokio and under madsim alike (time comes from the
//! runtime clock, no threads, no randomness).

#![allow(dead_code, reason = "each test file uses a different subset of the helpers")]

pub mod hooked;

use engine::clock::{Clock, RuntimeClock};
use engine::connector::{
    ActionSpec, BoxFuture, Connector, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request,
};
use engine::doc::Doc;
use engine::event::{CrashPoint, Event, Observer};
use engine::executor::{Engine, EngineConfig, PlannedAction, Planner, RetryPolicy};
use engine::key::Key;
use engine::ledger::Ledger;
use engine::ledger::memory::MemoryLedger;
use engine::workflow::Workflow;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

/// What the next call to a scripted action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Commit (a keyed API replays an earlier commit of the same key instead) and answer `Applied`.
    Apply,
    /// Commit, then the answer is lost: `Indeterminate`.
    ApplyThenTimeout,
    /// Nothing committed; `Indeterminate` (a timeout before the request arrived).
    TimeoutBefore,
    /// Nothing committed; a definite, retryable failure (a 503 before processing).
    FailRetryable,
    /// Nothing committed; a definite, permanent failure (a validation error).
    FailPermanent,
    /// Nothing committed; `idempotency_error`.
    KeyReused,
    /// Nothing committed; 409 concurrent request.
    InFlight,
    /// Commit an effect whose record holds a number no double holds (`u64::MAX`), and answer `Applied` with it: an
    /// output that cannot be canonicalised. A keyed API replays it for the key, and a lookup finds it.
    ApplyUnstorable,
    /// [`Fate::ApplyUnstorable`]'s commit, then the answer is lost: `Indeterminate`.
    ApplyUnstorableThenTimeout,
}

/// What the next lookup of a scripted connector does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupFate {
    /// Search: found when an effect under the key is visible (committed at least the connector's lag ago).
    Search,
    /// The search fails; retrying may succeed (a 503).
    FailRetryable,
    /// The search fails, retryable, and the API says when to retry: after this many milliseconds (a 429).
    FailRetryAfter(u64),
    /// The search fails for good (a 400: the query is refused).
    FailPermanent,
}

/// One committed effect: the fakes' ground truth.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub action: String,
    pub key: Key,
    pub inputs: Value,
    pub id: u64,
    pub committed_ms: u64,
    /// Its record holds `u64::MAX` ([`Fate::ApplyUnstorable`]).
    pub unstorable: bool,
}

/// One call or lookup as the connector saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub what: &'static str,
    pub action: String,
    pub key: Key,
    pub attempt: u32,
    /// When the connector answered, on the runtime clock.
    pub at_ms: u64,
}

#[derive(Default)]
struct State {
    script: VecDeque<Fate>,
    lookup_script: VecDeque<LookupFate>,
    effects: Vec<Effect>,
    seen: Vec<Seen>,
}

/// A connector whose calls follow a script; after the script runs out every call is `Apply`. Its lookups follow a
/// script of their own ([`Scripted::push_lookup_script`]); after it runs out (or without one) every lookup searches.
pub struct Scripted {
    name: String,
    actions: Vec<ActionSpec>,
    /// How long after a commit a lookup can see it.
    pub lag_ms: u64,
    clock: RuntimeClock,
    state: Mutex<State>,
}

impl Scripted {
    pub fn new(name: &str, actions: Vec<ActionSpec>, script: &[Fate]) -> Arc<Self> {
        Self::with_lag(name, actions, script, 0)
    }

    pub fn with_lag(name: &str, actions: Vec<ActionSpec>, script: &[Fate], lag_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            actions,
            lag_ms,
            clock: RuntimeClock::new(0),
            state: Mutex::new(State { script: script.iter().copied().collect(), ..State::default() }),
        })
    }

    pub fn push_script(&self, fates: &[Fate]) {
        self.state.lock().unwrap().script.extend(fates.iter().copied());
    }

    pub fn push_lookup_script(&self, fates: &[LookupFate]) {
        self.state.lock().unwrap().lookup_script.extend(fates.iter().copied());
    }

    pub fn effects(&self) -> Vec<Effect> {
        self.state.lock().unwrap().effects.clone()
    }

    pub fn calls(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.iter().filter(|s| s.what == "call").cloned().collect()
    }

    pub fn lookups(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.iter().filter(|s| s.what == "lookup").cloned().collect()
    }

    fn spec(&self, action: &str) -> ActionSpec {
        self.actions.iter().find(|a| a.name == action).cloned().expect("scripted action")
    }
}

fn output_of(effect: &Effect) -> Value {
    let mut out = json!({ "id": effect.id, "action": effect.action, "inputs": effect.inputs });
    if effect.unstorable {
        out["ref"] = json!(u64::MAX);
    }
    out
}

impl Connector for Scripted {
    fn name(&self) -> &str {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            // Every call takes a millisecond, so time moves on.
            tokio::time::sleep(Duration::from_millis(1)).await;
            let now_ms = self.clock.now_ms();
            let keyed = matches!(self.spec(request.action).class, GuaranteeClass::Keyed { .. });
            let mut state = self.state.lock().unwrap();
            state.seen.push(Seen {
                what: "call",
                action: request.action.to_string(),
                key: *request.key,
                attempt: request.attempt,
                at_ms: now_ms,
            });
            let fate = state.script.pop_front().unwrap_or(Fate::Apply);
            let unstorable = matches!(fate, Fate::ApplyUnstorable | Fate::ApplyUnstorableThenTimeout);
            let commit = |state: &mut State| -> Value {
                if keyed && let Some(earlier) = state.effects.iter().find(|e| e.key == *request.key) {
                    return output_of(earlier);
                }
                let effect = Effect {
                    action: request.action.to_string(),
                    key: *request.key,
                    inputs: Value::from(request.inputs),
                    id: state.effects.len() as u64 + 1,
                    committed_ms: now_ms,
                    unstorable,
                };
                let out = output_of(&effect);
                state.effects.push(effect);
                out
            };
            match fate {
                Fate::Apply | Fate::ApplyUnstorable => Outcome::Applied(commit(&mut state).into()),
                Fate::ApplyThenTimeout | Fate::ApplyUnstorableThenTimeout => {
                    commit(&mut state);
                    Outcome::Indeterminate("timeout after commit".to_string())
                }
                Fate::TimeoutBefore => Outcome::Indeterminate("timeout".to_string()),
                Fate::FailRetryable => Outcome::NotApplied(NotApplied {
                    error: "503 unavailable".to_string(),
                    retryable: true,
                    retry_after_ms: Some(2),
                }),
                Fate::FailPermanent => Outcome::NotApplied(NotApplied {
                    error: "400 invalid email".to_string(),
                    retryable: false,
                    retry_after_ms: None,
                }),
                Fate::KeyReused => Outcome::KeyReusedWithDifferentPayload("idempotency_error".to_string()),
                Fate::InFlight => Outcome::KeyInFlight,
            }
        })
    }

    fn lookup<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let now_ms = self.clock.now_ms();
            let mut state = self.state.lock().unwrap();
            state.seen.push(Seen {
                what: "lookup",
                action: request.action.to_string(),
                key: *request.key,
                attempt: request.attempt,
                at_ms: now_ms,
            });
            let failed = |error: &str, retryable, retry_after_ms| {
                LookupOutcome::Failed(NotApplied { error: error.to_string(), retryable, retry_after_ms })
            };
            match state.lookup_script.pop_front().unwrap_or(LookupFate::Search) {
                LookupFate::Search => {}
                LookupFate::FailRetryable => return failed("503 search unavailable", true, None),
                LookupFate::FailRetryAfter(ms) => return failed("429 too many searches", true, Some(ms)),
                LookupFate::FailPermanent => return failed("400 search query refused", false, None),
            }
            match state.effects.iter().find(|e| e.key == *request.key && e.committed_ms + self.lag_ms <= now_ms) {
                Some(effect) => LookupOutcome::Found(output_of(effect).into()),
                None => LookupOutcome::NotFound,
            }
        })
    }
}

pub fn keyed(name: &str, retention_ms: u64, has_lookup: bool) -> ActionSpec {
    ActionSpec {
        name: name.to_string(),
        class: GuaranteeClass::Keyed { retention_ms },
        has_lookup,
        lookup_lag_bound_ms: 0,
    }
}

pub fn lookup(name: &str, lag_bound_ms: u64) -> ActionSpec {
    ActionSpec {
        name: name.to_string(),
        class: GuaranteeClass::LookupBeforeCreate { lag_bound_ms },
        has_lookup: true,
        lookup_lag_bound_ms: 0,
    }
}

pub fn at_most_once(name: &str) -> ActionSpec {
    ActionSpec { name: name.to_string(), class: GuaranteeClass::AtMostOnce, has_lookup: false, lookup_lag_bound_ms: 0 }
}

/// A planner whose plan differs on every call (a model that changes its mind); counts its calls.
pub struct FlakyPlanner {
    pub calls: Mutex<u32>,
    pub action: String,
    pub writes: usize,
}

impl FlakyPlanner {
    pub fn new(action: &str, writes: usize) -> Arc<Self> {
        Arc::new(Self { calls: Mutex::new(0), action: action.to_string(), writes })
    }

    pub fn call_count(&self) -> u32 {
        *self.calls.lock().unwrap()
    }
}

impl Planner for FlakyPlanner {
    fn plan<'a>(
        &'a self,
        _run_id: &'a str,
        _step_id: &'a str,
        inputs: &'a Doc,
    ) -> BoxFuture<'a, Result<Vec<PlannedAction>, String>> {
        Box::pin(async move {
            let answer = {
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                *calls
            };
            Ok((0..self.writes)
                .map(|i| PlannedAction {
                    action: self.action.clone(),
                    inputs: engine::doc!({ "ticket": inputs["ticket"], "write": i, "answer": answer }),
                })
                .collect())
        })
    }
}

/// Records events (as short lines) and halts the engine at the `nth` (from 1) occurrence of `halt` if set.
#[derive(Default)]
pub struct Recorder {
    pub lines: Mutex<Vec<String>>,
    pub halt: Mutex<Option<(CrashPoint, u32)>>,
    pub halted: Mutex<bool>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn halting_at(point: CrashPoint, nth: u32) -> Arc<Self> {
        let r = Self::default();
        *r.halt.lock().unwrap() = Some((point, nth));
        Arc::new(r)
    }

    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    pub fn count(&self, prefix: &str) -> usize {
        self.lines.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).count()
    }

    pub fn was_halted(&self) -> bool {
        *self.halted.lock().unwrap()
    }
}

impl Observer for Recorder {
    fn event(&self, event: &Event<'_>) {
        let line = match event {
            Event::RunStarted { .. } => "run-started".to_string(),
            Event::WebhookDuplicate { event_id, .. } => format!("webhook-duplicate {event_id}"),
            Event::WebhookRejected { event_id, .. } => format!("webhook-rejected {event_id}"),
            Event::Replayed { step_id, .. } => format!("replayed {step_id}"),
            Event::PlanRecorded { step_id, writes, reused, .. } => format!("plan {step_id} {writes} reused={reused}"),
            Event::CallStarted { action, attempt, .. } => format!("call {action} #{attempt}"),
            Event::CallEnded { action, outcome, .. } => format!("ended {action} {outcome}"),
            Event::Lookup { action, found, .. } => format!("lookup {action} found={found}"),
            Event::StepSucceeded { action, .. } => format!("succeeded {action}"),
            Event::RetryScheduled { attempt, .. } => format!("retry #{attempt}"),
            Event::RunPaused { step_id, .. } => format!("paused {step_id}"),
            Event::RunResolved { resolution, .. } => format!("resolved {resolution}"),
            Event::RunSucceeded { .. } => "run-succeeded".to_string(),
            Event::RunFailed { reason, .. } => format!("run-failed {reason}"),
        };
        self.lines.lock().unwrap().push(line);
    }

    fn halt_at(&self, point: CrashPoint, _run_id: &str, _key: &Key) -> bool {
        let mut halt = self.halt.lock().unwrap();
        match &mut *halt {
            Some((p, nth)) if *p == point => {
                *nth -= 1;
                if *nth == 0 {
                    *halt = None;
                    *self.halted.lock().unwrap() = true;
                    return true;
                }
                false
            }
            _ => false,
        }
    }
}

/// A lease no test waits out. The engine tests run on real tokio in real time, many at once on a machine that may be
/// loaded, and a worker sends a call only while half its lease is left after its claim: a lease of a few tens of ms
/// could be half spent before the call went, or run out mid-step, and fail a test that is not about leases.
pub const LEASE_MS: u64 = 60_000;

/// The lease of a worker whose lease a test means to expire: one that crashes holding a key another worker then
/// takes over, or one of two workers racing for a run (the one that finds a key claimed waits out the other's lease).
/// The engine that takes over waits the lease out itself, reading the key's record until it has expired, so no test
/// sleeps on a guess. A second keeps that wait short while leaving the worker half a second from its claim to its
/// send (an fsync included, on a ledger file) and the whole second for its call: far more than a loaded machine
/// delays a task.
pub const SHORT_LEASE_MS: u64 = 1_000;

/// Test settings: small waits so real-time runs stay fast, and a lease of [`LEASE_MS`] (a test of expiry gives its
/// worker [`short_lease`]).
pub fn config(worker: &str) -> EngineConfig {
    let mut config = EngineConfig::new(worker);
    config.lease_ms = LEASE_MS;
    config.seed = 7;
    config.retry =
        RetryPolicy { attempt_count_max: 4, backoff_ms_base: 1, backoff_ms_max: 4, request_transit_ms_max: 0 };
    config
}

/// [`config`] with a lease of [`SHORT_LEASE_MS`], for a worker whose lease a test means to expire.
pub fn short_lease(worker: &str) -> EngineConfig {
    EngineConfig { lease_ms: SHORT_LEASE_MS, ..config(worker) }
}

/// Runs `cases` at once on the test's task and returns when all have finished; a panic in one is the test's. For
/// test cases that each wait out a lease in real time: together they wait about one lease, not one each.
pub async fn join_all<F: Future<Output = ()>>(cases: impl IntoIterator<Item = F>) {
    let mut cases: Vec<Option<Pin<Box<F>>>> = cases.into_iter().map(|case| Some(Box::pin(case))).collect();
    std::future::poll_fn(|cx| {
        for slot in &mut cases {
            if let Some(case) = slot
                && case.as_mut().poll(cx).is_ready()
            {
                *slot = None;
            }
        }
        if cases.iter().all(Option::is_none) { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
}

/// An engine over `ledger` with the connectors, planners and workflows given (workflows as JSON text).
pub fn engine(
    config: EngineConfig,
    ledger: Arc<dyn Ledger>,
    observer: Arc<dyn Observer>,
    connectors: &[Arc<dyn Connector>],
    planners: &[(&str, Arc<dyn Planner>)],
    workflows: &[Value],
) -> Engine {
    let clock = Arc::new(RuntimeClock::new(1_000_000));
    engine_on(clock, config, ledger, observer, connectors, planners, workflows)
}

/// [`engine`] on `clock`: engines that must agree about lease expiry share one (each [`engine`] starts its own
/// clock at 1,000,000 ms when it is built, so two built apart disagree).
pub fn engine_on(
    clock: Arc<dyn Clock>,
    config: EngineConfig,
    ledger: Arc<dyn Ledger>,
    observer: Arc<dyn Observer>,
    connectors: &[Arc<dyn Connector>],
    planners: &[(&str, Arc<dyn Planner>)],
    workflows: &[Value],
) -> Engine {
    let mut engine = Engine::new(config, ledger, clock, observer);
    for c in connectors {
        engine.register_connector(c.clone());
    }
    for (name, p) in planners {
        engine.register_planner(name, p.clone());
    }
    for w in workflows {
        engine.register_workflow(Workflow::from_json(&w.to_string()).expect("valid workflow")).expect("registered");
    }
    engine
}

pub fn memory_ledger() -> Arc<MemoryLedger> {
    Arc::new(MemoryLedger::new())
}

/// Both ledgers: the in-memory one and SQLite (`:memory:`, with group commit, as the simulator runs it).
pub fn ledgers() -> Vec<(&'static str, Arc<dyn Ledger>)> {
    let options = engine::ledger::sqlite::Options { group_commit_ops_max: 64, ..Default::default() };
    vec![
        ("memory", memory_ledger()),
        ("sqlite", Arc::new(engine::ledger::sqlite::SqliteLedger::open_in_memory(options).expect("sqlite :memory:"))),
    ]
}

/// A one-step workflow calling `action` with the trigger's `email` and `amount`.
pub fn one_step(name: &str, action: &str) -> Value {
    json!({ "name": name, "steps": [
        { "id": "only", "action": action, "inputs": { "email": "{{trigger.email}}", "amount": "{{trigger.amount}}" } }
    ]})
}

/// A run of workflow `wf`, as the ledger would hold it, to put there directly.
pub fn run_record(run_id: &str, status: engine::ledger::RunStatus, trigger: &[u8]) -> engine::ledger::RunRecord {
    engine::ledger::RunRecord {
        run_id: run_id.into(),
        workflow: "wf".into(),
        status,
        trigger: trigger.to_vec(),
        reason: None,
        created_ms: 0,
        updated_ms: 0,
        replays: 0,
    }
}

/// [`Engine::resume_unfinished`], each run's drive expected to end without an error: the runs' ids and statuses.
pub async fn resume_all(engine: &Engine) -> Vec<(String, engine::ledger::RunStatus)> {
    let resumed = engine.resume_unfinished().await.expect("list the unfinished runs");
    resumed.into_iter().map(|(id, status)| (id.clone(), status.unwrap_or_else(|e| panic!("drive {id}: {e}")))).collect()
}

/// Drives `run_id` until it finishes or the engine halts at the recorder's crash point (then the future is dropped:
/// a crash). Returns the status, or `None` when it was crashed.
pub async fn drive_until_halt(engine: &Engine, recorder: &Recorder, run_id: &str) -> Option<engine::ledger::RunStatus> {
    let halted = async {
        // Bounded: a working drive finishes in milliseconds.
        for _ in 0..10_000 {
            if recorder.was_halted() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the drive neither finished nor halted within 10 s");
    };
    tokio::select! {
        biased;
        status = engine.drive(run_id) => Some(status.expect("drive")),
        () = halted => None,
    }
}

/// A ledger at `path` holding `run_ids`, each paused at a key, as the engine leaves an at-most-once step whose
/// outcome it cannot know.
pub fn ledger_with_paused_runs(path: &std::path::Path, run_ids: &[&str]) -> engine::ledger::sqlite::SqliteLedger {
    use engine::ledger::sqlite::{Options, SqliteLedger, Synchronous};
    use engine::ledger::{Ledger as _, RunRecord, RunStatus};
    // A fixture, written before the test looks: without an fsync per commit (the default, for power-loss
    // durability), as a ledger of 2,000 runs takes seconds to write with one.
    let options = Options { synchronous: Synchronous::Normal, ..Options::default() };
    let ledger = SqliteLedger::open(path, options).expect("open a new ledger");
    for run_id in run_ids {
        let run = RunRecord {
            run_id: (*run_id).into(),
            workflow: "wf".into(),
            status: RunStatus::Running,
            trigger: b"{}".to_vec(),
            reason: None,
            created_ms: 1,
            updated_ms: 1,
            replays: 0,
        };
        assert!(ledger.create_run(run).unwrap());
        let reason = format!("at-most-once step payout: outcome unknown [key {}]", "ab".repeat(32));
        ledger.set_run_status(run_id, RunStatus::Paused, Some(&reason), 2).unwrap();
    }
    ledger
}

/// Another connection to the ledger at `path`, holding its write lock (`BEGIN IMMEDIATE`, with a write to `run_id`)
/// until it is rolled back or dropped: a live writer, as a worker in the middle of a transaction is.
pub fn live_writer(path: &std::path::Path, run_id: &str) -> rusqlite::Connection {
    let writer = rusqlite::Connection::open(path).expect("open a second connection");
    writer.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
    writer.execute("UPDATE runs SET updated_ms = updated_ms WHERE run_id = ?1", [run_id]).expect("write");
    writer
}

/// Damages the closed ledger file at `path` (no `-wal`: its pages are all in the file) as a failing disk or a stray
/// write would: the root page of `table`'s b-tree, a page beyond page 1, is overwritten with bytes that are no b-tree
/// page, so every read of the table fails with SQLite's `SQLITE_CORRUPT` ("database disk image is malformed"). The
/// header and the schema on page 1 stay as they were, so the file still passes as a ledger. Returns the page's number.
pub fn damage_root_page(path: &std::path::Path, table: &str) -> u64 {
    use std::io::{Seek, SeekFrom, Write};
    let root = {
        // The last connection to close removes the `-wal` it made, leaving the file alone as before.
        let conn = rusqlite::Connection::open(path).expect("open the ledger");
        let root: i64 = conn
            .query_row("SELECT rootpage FROM sqlite_schema WHERE type = 'table' AND name = ?1", [table], |row| {
                row.get(0)
            })
            .expect("the table's root page");
        u64::try_from(root).unwrap()
    };
    let wal = format!("{}-wal", path.display());
    assert!(!std::path::Path::new(&wal).exists(), "the ledger must be closed, its pages all in the file");
    let bytes = std::fs::read(path).expect("read the ledger");
    assert_eq!(&bytes[..16], b"SQLite format 3\0");
    // The page size: two bytes at offset 16, big-endian; 1 stands for 65,536.
    let page_size = match u64::from(u16::from_be_bytes([bytes[16], bytes[17]])) {
        1 => 65_536,
        size => size,
    };
    assert!(root > 1, "page 1 holds the header and the schema: {table} must be elsewhere");
    assert!(root * page_size <= bytes.len() as u64, "page {root} of {table} is past the end of the file");
    let mut file = std::fs::OpenOptions::new().write(true).open(path).expect("open the ledger to write");
    file.seek(SeekFrom::Start((root - 1) * page_size)).unwrap();
    // 0xff is no b-tree page's type (2, 5, 10 or 13), and the cell count and offsets it makes point past the page.
    file.write_all(&vec![0xff; page_size as usize]).unwrap();
    file.sync_all().unwrap();
    root
}

/// Runs the `flow` binary with `args`: its exit code, stdout and stderr.
pub fn flow(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flow")).args(args).output().expect("run flow");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `flow` run with `args`, given 20 s, for a command that could wait or work for ever (one that opened a FIFO waits
/// for a writer; one that walked a damaged record's every fence would not end): panics past them.
pub fn flow_in_time(args: &[&str]) -> (i32, String, String) {
    use std::process::Stdio;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run flow");
    for _ in 0..2_000 {
        if child.try_wait().expect("wait for flow").is_some() {
            let out = child.wait_with_output().expect("flow's output");
            return (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    child.kill().expect("stop flow");
    panic!("{args:?}: flow did not finish within 20 s (a FIFO opened, or a damaged record walked?)");
}

/// A claim of `key` for step `step_id` of run `run_id` by worker `w1`, as a fixture makes one to put a step record in a
/// ledger: action `api.x`, no fence or status expected, no walk checked. Other fields by struct update.
pub fn fixture_claim<'a>(key: Key, run_id: &'a str, step_id: &'a str) -> engine::ledger::Claim<'a> {
    engine::ledger::Claim {
        key,
        run_id,
        step_id,
        action: "api.x",
        inputs_hash: [0; 32],
        worker: "w1",
        now_ms: 10,
        lease_ms: 100,
        expected_fence: 0,
        expected_status: None,
        durable: true,
        walk: None,
    }
}

/// Every file name in `dir` with its bytes.
pub fn snapshot(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (entry.file_name().to_string_lossy().into_owned(), std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}
