//! The simulated world: worker nodes running the real engine inside madsim, the fakes (whose state lives outside
//! every worker, so killing a worker mid-call never un-commits a write the fake already made), a traffic generator,
//! webhook senders, chaos (crashes, crash points, network cuts, stalls), then a heal phase.
//!
//! Everything is a function of the seed: the madsim runtime is seeded with it, and every random draw of the world,
//! the fakes and the planner comes from a [`Rng`] forked from it by name. Time is madsim's virtual clock.

use crate::checker::{self, Checker, EffectSeen};
use crate::profile::Profile;
use crate::results::{ActionStats, Results};
use crate::trace::{Field, Trace};
use crate::workflows;
use connectors_fake::profile::Draws;
use connectors_fake::rng::Rng;
use connectors_fake::server::{Fake, numbered};
use connectors_fake::truth::{Effect, EffectSink};
use connectors_fake::webhooks::WebhookEvent;
use engine::clock::Clock;
use engine::connector::{
    BoxFuture, Connector, LookupOutcome, NotApplied, Outcome as CallOutcome, Request, pin_in_place,
};
use engine::doc::Doc;
use engine::event::{CrashPoint, Event, Observer};
use engine::executor::{Engine, EngineConfig, KnownTrigger, Policy};
use engine::fastmap::{FastMap, FastSet};
use engine::key::Key;
use engine::ledger::{CompactString, Intake, Ledger, Resolution, RunStatus};
// Spin locks: the world runs on one thread, so they are never contended, and releasing one is a plain store where
// std's `Mutex` swaps atomically, which waits for every earlier store (docs/speed.md, stop 27).
use spin::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The simulated wall-clock time the world starts at (2026-01-01T00:00:00Z): fixed, so stored times and the trace do
/// not depend on madsim's randomly chosen start date.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// Which ledger the workers share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerKind {
    Memory,
    /// SQLite `:memory:` (the same code as on disk, without the disk).
    Sqlite,
}

impl LedgerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Memory => "memory",
            LedgerKind::Sqlite => "sqlite",
        }
    }
}

/// Everything one simulation needs.
#[derive(Debug, Clone)]
pub struct WorldConfig {
    pub scenario: String,
    pub seed: u64,
    pub policy: Policy,
    pub ledger: LedgerKind,
    /// Steps (writes) to start before the chaos phase ends.
    pub steps: u64,
    pub profile: Profile,
    /// Keep the readable trace around the first violation.
    pub keep_trace: bool,
    /// Keep, instead, every event of this run.
    pub trace_run: Option<String>,
    /// The command that reproduces this run, stored in the results.
    pub repro: String,
}

pub use crate::Progress;

/// What a simulation produced.
#[derive(Debug)]
pub struct Outcome {
    pub results: Results,
    pub trace_text: Option<String>,
    /// The run the readable trace's first violation names (`Trace::first_violation_run`).
    pub first_violation_run: Option<String>,
}

// ------------------------------------------------------------------------------------------------------------------
// The monitor: the checker and the trace behind one lock, fed by every worker's observer and by the fakes.

struct MonitorState {
    checker: Checker,
    trace: Trace,
    crash_rng: Rng,
    crash_point_p: f64,
    extra_lookup_ms_total: u64,
    /// Crashes by cause (crash point name, or `random`).
    crashes: BTreeMap<String, u64>,
}

struct Monitor {
    state: Mutex<MonitorState>,
    /// Whether a crash point can fire now: the scenario gives crash points a probability and the chaos phase is on
    /// (cleared at the heal). Read without the lock, since every step passes several crash points.
    crash_points_armed: AtomicBool,
    clock: SimClock,
}

/// The simulated clock, read straight from madsim's time handle.
///
/// The same readings as `engine::clock::RuntimeClock` under the simulation (which reads `Instant::now()`, which madsim
/// intercepts), without finding the runtime through thread-local storage, cloning its handles and converting through
/// a `timespec` on every reading: the engine, the fakes and the monitor read the clock several times per step.
///
/// It reads the runtime's elapsed time (a `Duration`), not an `Instant`: madsim's `Instant` is its base instant plus
/// the elapsed time, so subtracting the start instant gives the same difference after two `timespec` conversions per
/// reading (about 2 % of a simulation's instructions at two dozen readings per step).
#[derive(Clone)]
struct SimClock {
    time: madsim::time::TimeHandle,
    start: Duration,
    /// The runtime's instant at elapsed time zero: its `now_instant()` is this plus its elapsed time.
    base: tokio::time::Instant,
    epoch_ms: u64,
}

impl SimClock {
    /// Must be called inside the simulation's runtime.
    fn new(epoch_ms: u64) -> Self {
        let time = madsim::time::TimeHandle::current();
        let start = time.elapsed();
        // No time passes between the two readings: the runtime advances its clock only between polls.
        let base = time.now_instant() - start;
        Self { time, start, base, epoch_ms }
    }

    /// The runtime's instant (what `tokio::time::sleep_until` takes) at runtime elapsed time `elapsed`, without
    /// reading the clock again.
    fn instant_at(&self, elapsed: Duration) -> tokio::time::Instant {
        self.base + elapsed
    }

    /// The runtime's elapsed time now: [`Clock::now_ms`] is [`SimClock::ms_at`] of it.
    fn elapsed(&self) -> Duration {
        self.time.elapsed()
    }

    /// `tokio::time::sleep_until` (madsim's) on the time handle held here: the same sleep, without first looking the
    /// runtime up and cloning its handle (two `Arc`s, cloned and dropped again: four atomic instructions per sleep,
    /// `scripts/atomics`).
    fn sleep_until(&self, deadline: tokio::time::Instant) -> madsim::time::Sleep {
        self.time.sleep_until(deadline)
    }

    /// `tokio::time::sleep`, likewise.
    fn sleep(&self, duration: Duration) -> madsim::time::Sleep {
        self.time.sleep(duration)
    }

    /// The simulated milliseconds at runtime elapsed time `elapsed`.
    fn ms_at(&self, elapsed: Duration) -> u64 {
        self.epoch_ms + (elapsed - self.start).as_millis() as u64
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.ms_at(self.time.elapsed())
    }
}

impl Monitor {
    fn lock(&self) -> spin::MutexGuard<'_, MonitorState> {
        self.state.lock()
    }
}

impl MonitorState {
    fn note_violation(&mut self) {
        if let Some(v) = self.checker.new_violation.take() {
            self.trace.violation(&v);
        }
    }
}

impl EffectSink for Monitor {
    fn effect(&self, effect: Effect) {
        let mut state = self.lock();
        state.trace.record(
            effect.committed_ms,
            "effect",
            &[
                Field::Str(&effect.run_id),
                Field::Action { connector: &effect.connector, action: &effect.action },
                Field::Bytes(&effect.key.0),
                Field::Str(&effect.object_id),
                Field::U64(effect.visible_ms),
            ],
        );
        state.checker.on_effect(EffectSeen {
            sent_key: &effect.key,
            run_id: &effect.run_id,
            connector: &effect.connector,
            action: &effect.action,
            object_id: effect.object_id,
            committed_ms: effect.committed_ms,
            visible_ms: effect.visible_ms,
        });
        state.note_violation();
    }

    fn webhook_event(&self, event: WebhookEvent, at_ms: u64) {
        // Changes inside the fakes emit events too; the world's webhook traffic comes from the generator, so these
        // are recorded in the trace only.
        self.lock().trace.record(at_ms, "fake-webhook", &[Field::Str(&event.source), Field::Str(&event.event_id)]);
    }
}

/// One worker's observer: tags events with the worker and decides crash points.
struct WorkerObserver {
    worker: u32,
    world: Arc<Shared>,
}

impl Observer for WorkerObserver {
    fn event(&self, event: &Event<'_>) {
        let now = self.world.settle();
        let mut state = self.world.monitor.lock();
        let plan_hash = record_event(&mut state.trace, now, self.worker, event);
        state.checker.on_event(self.worker, now, event, plan_hash.as_ref());
        state.note_violation();
    }

    fn halt_at(&self, point: CrashPoint, run_id: &str, key: &Key) -> bool {
        let monitor = &self.world.monitor;
        // Most scenarios have no crash points, none fires after the heal, and every step passes several: answered
        // without a lock or the clock then.
        if !monitor.crash_points_armed.load(Ordering::Relaxed) {
            return false;
        }
        // A crash point is recorded in the trace after the requests that arrived before it.
        let now = self.world.settle();
        // A worker that has just restarted walks every one of its runs past their crash points again; without a
        // grace period a high crash-point probability turns into a crash storm that never lets it work.
        let settled = self.worker >= self.world.config.profile.world.workers
            || now
                >= self.world.up_since_ms[self.worker as usize].load(Ordering::Relaxed)
                    + self.world.config.profile.world.crash_point_grace_ms;
        let crash = {
            let mut state = monitor.lock();
            let p = state.crash_point_p;
            // Drawn only once the worker has settled.
            let crash = settled && state.crash_rng.chance(p);
            if crash {
                *state.crashes.entry(crash_point_name(point).to_owned()).or_default() += 1;
                state.trace.record(
                    now,
                    "crash-point",
                    &[
                        Field::U64(self.worker as u64),
                        Field::Str(crash_point_name(point)),
                        Field::Str(run_id),
                        Field::Bytes(&key.0),
                    ],
                );
            }
            crash
        };
        // The front door (the API and webhook endpoint) is not a worker node: there a crash point fails the request,
        // and the sender tries again.
        if crash && self.worker < self.world.config.profile.world.workers {
            self.world.crash_worker(self.worker);
        }
        crash
    }
}

fn crash_point_name(point: CrashPoint) -> &'static str {
    match point {
        CrashPoint::BeforeCall => "before-call",
        CrashPoint::AfterCallBeforeRecord => "after-call-before-record",
        CrashPoint::AfterPlanBeforeFirstWrite => "after-plan-before-first-write",
        CrashPoint::WhilePlanning => "while-planning",
        CrashPoint::DuringWebhookIntake => "during-webhook-intake",
    }
}

/// Records an engine event in the trace. Returns the hash of a recorded plan, which the checker needs too.
fn record_event(trace: &mut Trace, now: u64, worker: u32, event: &Event<'_>) -> Option<checker::PlanHash> {
    let w = Field::U64(worker as u64);
    match *event {
        Event::RunStarted { run_id, workflow } => {
            trace.record(now, "run-started", &[w, Field::Str(run_id), Field::Str(workflow)])
        }
        Event::WebhookDuplicate { source, event_id, run_id } => {
            trace.record(now, "webhook-duplicate", &[w, Field::Str(source), Field::Str(event_id), Field::Str(run_id)])
        }
        Event::WebhookRejected { source, event_id, reason } => {
            trace.record(now, "webhook-rejected", &[w, Field::Str(source), Field::Str(event_id), Field::Str(reason)])
        }
        Event::Replayed { run_id, step_id, key } => {
            trace.record(now, "replayed", &[w, Field::Str(run_id), Field::Str(step_id), Field::Bytes(&key.0)])
        }
        Event::PlanRecorded { run_id, step_id, key, writes, reused, plan } => {
            let hash = checker::plan_hash(plan);
            trace.record(
                now,
                "plan-recorded",
                &[
                    w,
                    Field::Str(run_id),
                    Field::Str(step_id),
                    Field::Bytes(&key.0),
                    Field::U64(writes as u64),
                    Field::U64(reused as u64),
                    Field::Bytes(&hash),
                ],
            );
            return Some(hash);
        }
        Event::CallStarted { run_id, step_id, key, sent_key, action, attempt } => trace.record(
            now,
            "call-started",
            &[
                w,
                Field::Str(run_id),
                Field::Str(step_id),
                Field::Bytes(&key.0),
                Field::Bytes(&sent_key.0),
                Field::Str(action),
                Field::U64(attempt as u64),
            ],
        ),
        Event::CallEnded { run_id, step_id, key, action, attempt, outcome } => trace.record(
            now,
            "call-ended",
            &[
                w,
                Field::Str(run_id),
                Field::Str(step_id),
                Field::Bytes(&key.0),
                Field::Str(action),
                Field::U64(attempt as u64),
                Field::Str(outcome),
            ],
        ),
        Event::Lookup { run_id, step_id, key, action, found } => trace.record(
            now,
            "lookup",
            &[
                w,
                Field::Str(run_id),
                Field::Str(step_id),
                Field::Bytes(&key.0),
                Field::Str(action),
                Field::U64(found as u64),
            ],
        ),
        Event::StepSucceeded { run_id, step_id, key, action } => trace.record(
            now,
            "step-succeeded",
            &[w, Field::Str(run_id), Field::Str(step_id), Field::Bytes(&key.0), Field::Str(action)],
        ),
        Event::RetryScheduled { run_id, step_id, key, attempt, delay_ms } => trace.record(
            now,
            "retry-scheduled",
            &[
                w,
                Field::Str(run_id),
                Field::Str(step_id),
                Field::Bytes(&key.0),
                Field::U64(attempt as u64),
                Field::U64(delay_ms),
            ],
        ),
        Event::RunPaused { run_id, step_id, key, reason } => trace.record(
            now,
            "run-paused",
            &[w, Field::Str(run_id), Field::Str(step_id), Field::Bytes(&key.0), Field::Str(reason)],
        ),
        Event::RunResolved { run_id, key, resolution } => {
            trace.record(now, "run-resolved", &[w, Field::Str(run_id), Field::Bytes(&key.0), Field::Str(resolution)])
        }
        Event::RunSucceeded { run_id } => trace.record(now, "run-succeeded", &[w, Field::Str(run_id)]),
        Event::RunFailed { run_id, reason } => {
            trace.record(now, "run-failed", &[w, Field::Str(run_id), Field::Str(reason)])
        }
        #[allow(unreachable_patterns, reason = "new engine events are hashed by their debug form until listed here")]
        ref other => trace.record(now, "event", &[w, Field::Str(&format!("{other:?}"))]),
    }
    None
}

// ------------------------------------------------------------------------------------------------------------------
// The network between the workers and the fakes: cuts, latency, and lookup accounting.

/// A fake as one worker sees it: through a network that can be cut.
struct WorkerLink {
    inner: Arc<dyn Fake>,
    worker: u32,
    world: Arc<Shared>,
}

/// A request as it travels: owned, so the fake can serve it whatever happens to the sender.
struct Sent {
    action: SentAction,
    inputs: Doc,
    key: Key,
    /// Inline up to 24 bytes: a generated run's id costs no heap block per call.
    run_id: CompactString,
    attempt: u32,
}

/// A travelling request's action: one of its fake's (every request the engine sends), named by its place in the fake's
/// actions, so a request copies no name (an `Arc`'s clone and drop were two atomic instructions); any other is kept.
enum SentAction {
    Fakes(usize),
    Other(Box<str>),
}

impl Sent {
    /// `request` as it travels to `fake`.
    fn of(request: &Request<'_>, fake: &dyn Fake) -> Self {
        let action = match fake.actions().iter().position(|spec| spec.name == request.action) {
            Some(index) => SentAction::Fakes(index),
            None => SentAction::Other(request.action.into()),
        };
        Sent {
            action,
            inputs: request.inputs.clone(),
            key: *request.key,
            run_id: request.run_id.into(),
            attempt: request.attempt,
        }
    }

    /// The request as `fake`, the one it was sent to, reads it.
    fn request<'a>(&'a self, fake: &'a dyn Fake) -> Request<'a> {
        Request {
            action: match &self.action {
                SentAction::Fakes(index) => &fake.actions()[*index].name,
                SentAction::Other(name) => name,
            },
            inputs: &self.inputs,
            key: &self.key,
            run_id: &self.run_id,
            attempt: self.attempt,
        }
    }
}

/// A request on its way to a fake.
struct InFlight {
    fake: Arc<dyn Fake>,
    sent: Sent,
    draws: Draws,
    lookup: bool,
}

/// A fake's answer, waiting in its request's slot for the sender.
enum Answered {
    Call(CallOutcome),
    Lookup(LookupOutcome),
}

/// Where a sent request's answer stands. The slot is the rendezvous between the sender and the network: a oneshot
/// channel per request cost a heap block each.
enum Answer {
    /// Not served yet.
    Pending,
    Served(Answered),
    /// The sender is gone (its worker was killed): the slot is freed once the request is served.
    Abandoned,
}

/// One request in flight: the request until it is served, and its answer.
struct Slot {
    request: Option<InFlight>,
    answer: Answer,
}

/// The requests sent and not yet served, each served at its arrival time ([`Network::serve_arrived`]).
///
/// Once sent, a request reaches its API after the request half of its latency whatever happens to the sender: a
/// paused worker resumes to find the answer waiting, a killed one never reads it. A request is served lazily, but as
/// of its arrival: the fake is given the arrival time (`Fake::serve_call`), and every request that has arrived is
/// served, in arrival order, before anything can observe the fakes or their effects at a later time. That is, before
/// the sender takes its answer (it sleeps until the answer is due, which is after the arrival), before every event
/// the monitor records (the engine's, the world's), and before a run is finished, a person looks at a paused run,
/// or the results are read ([`Shared::settle`]). The fakes' state, their answers and their effects are what serving
/// each request at its arrival would give; what is saved is a timer and a wake-up per request (the arrival), which
/// were a third of the runtime's polls.
struct Network {
    queue: Mutex<NetworkQueue>,
    /// The earliest arrival queued (runtime elapsed nanoseconds; `u64::MAX` when none): [`Network::serve_arrived`]
    /// looks at it without the lock, since most times it is asked nothing has arrived.
    next_arrival_ns: AtomicU64,
}

#[derive(Default)]
struct NetworkQueue {
    /// Arrivals (runtime elapsed time), earliest first, then in send order (the same for the same seed), each naming
    /// its slot.
    arrivals: std::collections::BinaryHeap<std::cmp::Reverse<(Duration, u64, usize)>>,
    /// The requests in flight and their answers; a slot is reused once its answer is taken (the last freed first,
    /// still warm).
    slots: Vec<Slot>,
    free: Vec<usize>,
    sent_count: u64,
}

impl NetworkQueue {
    fn free_slot(&mut self, slot: usize) {
        self.slots[slot] = Slot { request: None, answer: Answer::Pending };
        self.free.push(slot);
    }

    fn next_arrival_ns(&self) -> u64 {
        self.arrivals.peek().map_or(u64::MAX, |std::cmp::Reverse((at, _, _))| at.as_nanos() as u64)
    }
}

impl Network {
    fn new() -> Self {
        Network { queue: Mutex::default(), next_arrival_ns: AtomicU64::new(u64::MAX) }
    }

    /// Queues `request` to arrive at `arrival` (runtime elapsed time); returns the slot its answer will be in.
    fn send(&self, arrival: Duration, request: InFlight) -> usize {
        let mut queue = self.queue.lock();
        let filled = Slot { request: Some(request), answer: Answer::Pending };
        let slot = match queue.free.pop() {
            Some(slot) => {
                queue.slots[slot] = filled;
                slot
            }
            None => {
                queue.slots.push(filled);
                queue.slots.len() - 1
            }
        };
        let order = queue.sent_count;
        queue.sent_count += 1;
        queue.arrivals.push(std::cmp::Reverse((arrival, order, slot)));
        self.next_arrival_ns.store(queue.next_arrival_ns(), Ordering::Relaxed);
        slot
    }

    /// Serves, in arrival order, every request that has arrived by `now` (runtime elapsed time), each at its
    /// arrival time: `at_ms` turns an arrival into the simulated milliseconds the fakes read.
    fn serve_arrived(&self, now: Duration, at_ms: impl Fn(Duration) -> u64) {
        if (now.as_nanos() as u64) < self.next_arrival_ns.load(Ordering::Relaxed) {
            return;
        }
        while let Some((slot, arrival, InFlight { fake, sent, draws, lookup })) = self.arrived(now) {
            // A sender that died meanwhile abandoned its slot: the request is served all the same.
            let at = at_ms(arrival);
            let answered = if lookup {
                Answered::Lookup(fake.serve_lookup(&sent.request(&*fake), &draws, at))
            } else {
                Answered::Call(fake.serve_call(&sent.request(&*fake), &draws, at))
            };
            self.answer(slot, answered);
        }
    }

    /// The first request whose arrival time has come, if any, with its slot and arrival.
    fn arrived(&self, now: Duration) -> Option<(usize, Duration, InFlight)> {
        let mut queue = self.queue.lock();
        let &std::cmp::Reverse((at, _, slot)) = queue.arrivals.peek()?;
        if at > now {
            return None;
        }
        queue.arrivals.pop();
        self.next_arrival_ns.store(queue.next_arrival_ns(), Ordering::Relaxed);
        let request = queue.slots[slot].request.take().expect("a queued request is in its slot");
        Some((slot, at, request))
    }

    /// Puts a served request's answer in its slot; drops it if the sender is gone.
    fn answer(&self, slot: usize, answered: Answered) {
        let mut queue = self.queue.lock();
        match std::mem::replace(&mut queue.slots[slot].answer, Answer::Served(answered)) {
            Answer::Pending => {}
            Answer::Abandoned => queue.free_slot(slot),
            Answer::Served(_) => unreachable!("a request is served once"),
        }
    }

    /// The answer in `slot`, which must be served (the slot is then freed).
    fn take_answer(&self, slot: usize) -> Answered {
        let mut queue = self.queue.lock();
        let Answer::Served(answered) = std::mem::replace(&mut queue.slots[slot].answer, Answer::Abandoned) else {
            unreachable!("an answer is taken once it is due, after its request arrived and was served")
        };
        queue.free_slot(slot);
        answered
    }

    /// The sender of the request in `slot` is gone before taking its answer: the slot is freed now if the answer is
    /// there, or once the request is served.
    fn abandon(&self, slot: usize) {
        let mut queue = self.queue.lock();
        match queue.slots[slot].answer {
            Answer::Served(_) => queue.free_slot(slot),
            Answer::Pending => queue.slots[slot].answer = Answer::Abandoned,
            Answer::Abandoned => unreachable!("a slot is abandoned once"),
        }
    }
}

/// A sender's claim on its request's slot: abandons the slot if the sender is dropped before it takes the answer
/// (a killed worker's future is dropped mid-call).
struct Awaiting<'a> {
    network: &'a Network,
    slot: usize,
    taken: bool,
}

impl Awaiting<'_> {
    fn take(mut self) -> Answered {
        self.taken = true;
        self.network.take_answer(self.slot)
    }
}

impl Drop for Awaiting<'_> {
    fn drop(&mut self) {
        if !self.taken {
            self.network.abandon(self.slot);
        }
    }
}

impl WorkerLink {
    fn new(inner: Arc<dyn Fake>, worker: u32, world: Arc<Shared>) -> Self {
        WorkerLink { inner, worker, world }
    }

    /// Whether this worker's network is cut now. Asked twice per call and lookup: without a lock, and without the
    /// clock when no cut is in force (an expired cut is cleared on the first look after it ends).
    fn cut(&self) -> bool {
        let cut_until = &self.world.cut_until_ms[self.worker as usize];
        let until = cut_until.load(Ordering::Relaxed);
        if until == 0 {
            return false;
        }
        if until > self.world.monitor.clock.now_ms() {
            return true;
        }
        // Cleared only if no new cut was set meanwhile.
        let _ = cut_until.compare_exchange(until, 0, Ordering::Relaxed, Ordering::Relaxed);
        false
    }

    /// Sends `request` and returns its answer when it is due: the request half of the latency, then the answer's wait.
    async fn send_and_wait(&self, request: &Request<'_>, lookup: bool) -> Answered {
        let draws = self.inner.draw();
        let clock = &self.world.monitor.clock;
        let arrival = clock.elapsed() + Duration::from_millis(draws.request_ms);
        let answered = clock.instant_at(arrival + Duration::from_millis(self.inner.wait_ms(&draws)));
        let sent = Sent::of(request, &*self.inner);
        let network = &self.world.network;
        let slot = network.send(arrival, InFlight { fake: self.inner.clone(), sent, draws, lookup });
        let awaiting = Awaiting { network, slot, taken: false };
        clock.sleep_until(answered).await;
        // The request arrived by now: served here unless something else served it first.
        self.world.settle();
        awaiting.take()
    }
}

impl Connector for WorkerLink {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn actions(&self) -> &[engine::connector::ActionSpec] {
        self.inner.actions()
    }

    fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, CallOutcome> {
        pin_in_place(move || async move {
            if self.cut() {
                // The connection could not be opened: nothing was sent.
                return CallOutcome::NotApplied(NotApplied::retryable("connection refused (network cut)"));
            }
            let Answered::Call(outcome) = self.send_and_wait(&request, false).await else {
                unreachable!("a call is answered with an outcome")
            };
            if self.cut() {
                // The request went out; the cut swallowed the answer.
                return CallOutcome::Indeterminate("connection reset after send (network cut)".into());
            }
            outcome
        })
    }

    fn lookup<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        pin_in_place(move || async move {
            if self.cut() {
                return LookupOutcome::Failed(NotApplied::retryable("connection refused (network cut)"));
            }
            let start = self.world.monitor.clock.now_ms();
            let Answered::Lookup(found) = self.send_and_wait(&request, true).await else {
                unreachable!("a lookup is answered with what it found")
            };
            let spent = self.world.monitor.clock.now_ms() - start;
            self.world.monitor.lock().extra_lookup_ms_total += spent;
            if self.cut() {
                return LookupOutcome::Failed(NotApplied::retryable("connection reset (network cut)"));
            }
            found
        })
    }
}

// ------------------------------------------------------------------------------------------------------------------
// The shared world.

/// A run being driven by one worker incarnation.
type Driver = (u32, u32);

/// A run for a worker to drive: its id, and its trigger when the sender created the run with it (the drive then
/// skips parsing the stored trigger; see `Engine::drive_known_trigger`).
type Mail = (CompactString, Option<Arc<KnownTrigger>>);

struct Shared {
    config: WorldConfig,
    ledger: Arc<dyn Ledger>,
    monitor: Arc<Monitor>,
    fakes: workflows::Fakes,
    progress: Arc<Progress>,
    /// Runs dispatched to each worker while it was down (or restarted but not yet resumed), for its next incarnation.
    mailboxes: Vec<Mutex<VecDeque<Mail>>>,
    /// Each worker's live incarnation, once its `worker_main` has resumed its runs (cleared at its kill): a run
    /// dispatched to it starts its drive on the worker's node at once, with no hop through the mailbox.
    live_workers: Mutex<Vec<Option<LiveWorker>>>,
    /// Node ids of the workers, and each worker's incarnation (bumped on every crash).
    nodes: Mutex<Vec<Option<madsim::runtime::NodeHandle>>>,
    incarnations: Mutex<Vec<u32>>,
    down: Mutex<Vec<bool>>,
    /// When each worker last came up (for the crash-point grace period).
    up_since_ms: Vec<AtomicU64>,
    /// When each worker's network cut ends (simulated ms; 0 when none is in force).
    cut_until_ms: Vec<AtomicU64>,
    /// Live drivers of each run; a run is finished only when its last live driver ends. Almost always one, held inline.
    drivers: Mutex<FastMap<CompactString, smallvec::SmallVec<[Driver; 2]>>>,
    /// Runs started and not yet finished, and webhook changes whose deliveries are not all done.
    runs_in_flight: AtomicU64,
    changes_in_flight: AtomicU64,
    room: tokio::sync::Notify,
    healed: AtomicBool,
    /// A run id → did a person already look at it (so each paused run is resolved at most once).
    person_seen: Mutex<FastSet<String>>,
    engine_errors: Mutex<Vec<String>>,
    /// The node that performs restarts and other supervisor work.
    supervisor: Mutex<Option<madsim::runtime::NodeHandle>>,
    webhook_starts: Mutex<FastMap<CompactString, ChangeDeliveries>>,
    /// The front door engine (set once the world is built).
    api: Mutex<Option<Arc<Engine>>>,
    /// Requests between the workers and the fakes.
    network: Network,
    /// The built-in workflows, parsed once: every worker incarnation registers copies (a restart must not re-parse).
    workflows: Vec<engine::workflow::Workflow>,
    /// The webhook source of each workflow of the mix, as the front door knows it: made once, not per delivery.
    webhook_sources: BTreeMap<String, engine::webhook::Source>,
}

impl Shared {
    /// Serves every request that has arrived by now (see [`Network`]) and returns now in simulated ms, both from
    /// one reading of the clock (a reading takes the runtime clock's lock). Called before anything observes the fakes
    /// or their effects: every event the monitor records, a crash point, a run's end, a person's look at a paused run,
    /// the results.
    fn settle(&self) -> u64 {
        let clock = &self.monitor.clock;
        let now = clock.elapsed();
        self.network.serve_arrived(now, |arrival| clock.ms_at(arrival));
        clock.ms_at(now)
    }

    /// Records a world event (a crash, a delivery, the heal) in the trace, after the requests that arrived before it.
    fn world_event(&self, tag: &str, fields: &[Field<'_>]) {
        let now = self.settle();
        self.monitor.lock().trace.record(now, tag, fields);
    }
}

/// Whether a driver is live: its worker has not crashed since it started (the person's desk's slot is never bumped).
fn live(incarnations: &[u32], driver: Driver) -> bool {
    incarnations[driver.0 as usize] == driver.1
}

/// Where a run at the person's desk stands (`Shared::desk_holds`).
enum Desk {
    /// Only the desk holds the run: the person can decide.
    Alone,
    /// A worker's drive of the run is live beside the desk.
    WithDrives,
    /// A drive took the run from the desk: nothing is left to decide.
    TakenOver,
}

/// I6 bookkeeping for one change: its event ids and how many runs their deliveries started.
#[derive(Debug, Default)]
struct ChangeDeliveries {
    deliveries_left: u32,
    started: BTreeMap<CompactString, u32>,
}

impl Shared {
    fn assigned_worker(&self, run_id: &str) -> u32 {
        (blake3::hash(run_id.as_bytes()).as_bytes()[0] as u32) % self.config.profile.world.workers
    }

    /// Hands a run to a worker: its drive starts on the worker's node now if the worker is up and has resumed its
    /// runs; otherwise the run waits in the worker's mailbox for its next incarnation.
    fn dispatch(self: &Arc<Self>, run_id: &str, worker: u32, trigger: Option<Arc<KnownTrigger>>) {
        let live = self.live_workers.lock()[worker as usize].clone();
        match live {
            Some(live) => start_drive(self, &live, run_id.into(), trigger),
            None => self.mailboxes[worker as usize].lock().push_back((run_id.into(), trigger)),
        }
    }

    /// Kills a worker now and restarts it after the restart delay (crash points and random crashes).
    fn crash_worker(self: &Arc<Self>, worker: u32) {
        {
            let mut down = self.down.lock();
            if down[worker as usize] {
                return;
            }
            down[worker as usize] = true;
        }
        self.live_workers.lock()[worker as usize] = None;
        self.incarnations.lock()[worker as usize] += 1;
        // Recorded after the requests that arrived before it, which the checker sees before it learns of the kill.
        self.world_event("worker-killed", &[Field::U64(worker as u64)]);
        self.monitor.lock().checker.worker_killed(worker);
        let node = self.nodes.lock()[worker as usize].as_ref().map(|n| n.id());
        if let Some(id) = node {
            madsim::runtime::Handle::current().kill(id);
        }
        let world = self.clone();
        let delay = self.config.profile.world.restart_delay_ms;
        let supervisor = self.supervisor.lock().clone();
        if let Some(supervisor) = supervisor {
            supervisor.spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                world.restart_worker(worker);
            });
        }
    }

    fn restart_worker(self: &Arc<Self>, worker: u32) {
        {
            let mut down = self.down.lock();
            if !down[worker as usize] {
                return;
            }
            down[worker as usize] = false;
        }
        self.up_since_ms[worker as usize].store(self.monitor.clock.now_ms(), Ordering::Relaxed);
        self.world_event("worker-restarted", &[Field::U64(worker as u64)]);
        let node = self.nodes.lock()[worker as usize].as_ref().map(|n| n.id());
        if let Some(id) = node {
            madsim::runtime::Handle::current().restart(id);
        }
    }

    fn engine_for(self: &Arc<Self>, worker: u32, incarnation: u32) -> Engine {
        let world = &self.config.profile.world;
        let mut config = EngineConfig::new(format!("worker-{worker}.{incarnation}"));
        config.webhook_retention_ms = world.webhook_retention_ms;
        config.policy = self.config.policy;
        config.seed = self.config.seed;
        config.lease_ms = world.lease_ms;
        let observer: Arc<dyn Observer> = Arc::new(WorkerObserver { worker, world: self.clone() });
        let clock: Arc<dyn Clock> = Arc::new(self.monitor.clock.clone());
        let mut engine = Engine::new(config, self.ledger.clone(), clock, observer);
        for fake in self.fakes.fakes() {
            engine.register_connector(Arc::new(WorkerLink::new(fake.clone(), worker, self.clone())));
        }
        engine.register_planner(workflows::PLANNER, self.fakes.planner());
        for workflow in &self.workflows {
            engine
                .register_workflow(workflow.clone())
                .unwrap_or_else(|e| panic!("a workflow of the profile is invalid: {e}"));
        }
        engine
    }

    /// A drive of `run_id` by this worker incarnation ended with `status`, and the run is replayed with edited inputs
    /// ([`Shared::replay_due`]); every other drive goes at once (`start_drive`).
    async fn replay_then_go(self: &Arc<Self>, engine: &Engine, me: Driver, run_id: &str, status: RunStatus) {
        let edited = workflows::edited_trigger(self.ledger.as_ref(), run_id);
        // Boxed: replays are rare, and inline this future would make every drive task (which holds it) several times
        // larger to allocate and copy.
        let status = match pin_in_place(|| engine.replay(run_id, &edited)).await {
            Ok(s) => s,
            Err(e) => {
                self.engine_error(format!("replay {run_id}: {e}"));
                status
            }
        };
        self.driver_gone(me, run_id, status);
    }

    /// The driver that stands for a person looking at a paused run: the spare incarnation slot after the workers',
    /// never bumped, so it never counts as dead. (The front door's engine has that slot's name but drives nothing.)
    fn person_desk(&self) -> Driver {
        (self.config.profile.world.workers, 0)
    }

    /// A drive of `run_id` by this worker incarnation ended with the run paused, and a person will look at it
    /// ([`Shared::person_resolves`]). The person is not a worker: the run waits at the person's desk, a task on the
    /// supervisor node, which no crash kills, and the desk holds the run in flight in place of the drive. (When the
    /// wait was part of the drive, a crash of its worker ended the run as paused: in `mixed`, where some worker
    /// crashes every few simulated minutes, 59 of the 979 runs given a person at seed 1 and 200 k steps were ever
    /// resolved.)
    fn hand_to_person(self: &Arc<Self>, me: Driver, run_id: CompactString) {
        let desk = self.person_desk();
        let handed = {
            let incarnations = self.incarnations.lock();
            let mut drivers = self.drivers.lock();
            match drivers.get_mut(run_id.as_str()) {
                Some(entry) => {
                    entry.retain(|d| *d != me && live(&incarnations, *d));
                    entry.push(desk);
                    true
                }
                None => false,
            }
        };
        if !handed {
            // As `driver_gone` does for a run without an entry.
            self.finish_run(&run_id, RunStatus::Paused);
            return;
        }
        let supervisor = self.supervisor.lock().clone().expect("the supervisor node exists");
        let world = self.clone();
        supervisor.spawn(async move { world.person_resolves_at_desk(run_id).await });
    }

    /// After the person's delay, records their decision (from the external system's truth, [`Shared::person_decision`])
    /// as `flow resolve` would, and hands the run, running again, to its worker, whose drive applies it. The desk
    /// leaves the run's drivers when a worker takes the run up (`start_drive`), so the run is never without one.
    async fn person_resolves_at_desk(self: Arc<Self>, run_id: CompactString) {
        tokio::time::sleep(Duration::from_millis(self.config.profile.world.person_delay_ms)).await;
        // The decision is recorded only while no worker drives the run (a second drive that found it paused ends
        // within about a lease). Then no drive that started before the decision can end the run after it, and the
        // first drive to start after it takes the run over from the desk. A run a drive took from the desk before the
        // decision (a drive that outlived the pause carried it on, and a worker picked it up) is not the desk's any
        // more: there is nothing to decide.
        loop {
            match self.desk_holds(&run_id) {
                Desk::Alone => break,
                Desk::WithDrives => tokio::time::sleep(Duration::from_millis(1_000)).await,
                Desk::TakenOver => return,
            }
        }
        let resolution = self.person_decision(&run_id);
        let now_ms = self.monitor.clock.now_ms();
        let status =
            match engine::executor::record_resolution(self.ledger.as_ref(), &run_id, &resolution, "person", now_ms) {
                Ok(status) => {
                    self.world_event("person-resolved", &[Field::Str(&run_id), Field::Str(resolution.name())]);
                    status
                }
                // A drive that started before the pause and outlived it (a worker stalled past its lease, then resumed)
                // may have carried the run on since: the person finds nothing to decide, as `flow resolve` would say.
                Err(engine::executor::Error::NotPaused { status, .. }) => {
                    self.world_event("person-found-not-paused", &[Field::Str(&run_id), Field::Str(status.as_str())]);
                    status
                }
                Err(e) => {
                    self.engine_error(format!("resolve {run_id}: {e}"));
                    match self.ledger.run_status(&run_id) {
                        Ok(Some(status)) => status,
                        _ => RunStatus::Paused,
                    }
                }
            };
        if !status.is_unfinished() {
            self.driver_gone(self.person_desk(), &run_id, status);
        } else {
            self.dispatch(&run_id, self.assigned_worker(&run_id), None);
        }
    }

    /// Whether the person's desk still holds `run_id`, and whether a live worker drive is registered beside it.
    fn desk_holds(&self, run_id: &str) -> Desk {
        let desk = self.person_desk();
        let incarnations = self.incarnations.lock();
        let drivers = self.drivers.lock();
        match drivers.get(run_id) {
            Some(entry) if entry.contains(&desk) => {
                if entry.iter().any(|d| *d != desk && live(&incarnations, *d)) {
                    Desk::WithDrives
                } else {
                    Desk::Alone
                }
            }
            _ => Desk::TakenOver,
        }
    }

    /// A drive of `run_id` by this worker incarnation is over with `status`: the run is finished once its last live
    /// driver goes.
    fn driver_gone(&self, me: Driver, run_id: &str, status: RunStatus) {
        let last = {
            let incarnations = self.incarnations.lock();
            let mut drivers = self.drivers.lock();
            // A live driver is registered, so the run's entry exists; `entry` would allocate the run id to find it.
            let last = match drivers.get_mut(run_id) {
                Some(entry) => {
                    entry.retain(|d| *d != me && live(&incarnations, *d));
                    entry.is_empty()
                }
                None => true,
            };
            if last {
                drivers.remove(run_id);
            }
            last
        };
        if last {
            self.finish_run(run_id, status);
        }
    }

    fn person_resolves(&self, run_id: &str) -> bool {
        let share = self.config.profile.world.person_share;
        share > 0.0
            && self.person_seen.lock().insert(run_id.to_owned())
            && unit(self.config.seed, "person", run_id) < share
    }

    /// What a careful person decides: if the external system shows the effect, mark the step done with it;
    /// otherwise send it again.
    fn person_decision(&self, run_id: &str) -> Resolution {
        // What the person finds in the external system includes every request that has reached it.
        self.settle();
        match self.monitor.lock().checker.paused_effect(run_id) {
            Some(object_id) => Resolution::MarkDone { output: serde_json::json!({ "id": object_id }) },
            None => Resolution::Retry,
        }
    }

    /// Whether a drive that ended with `status` is followed by a replay with edited inputs: the run succeeded and is
    /// one of the share the world replays (never a replay's own run).
    fn replay_due(&self, run_id: &str, status: RunStatus) -> bool {
        let share = self.config.profile.world.replay_share;
        status == RunStatus::Succeeded
            && share > 0.0
            && !run_id.contains("-replayed")
            && unit(self.config.seed, "replay", run_id) < share
    }

    fn engine_error(&self, message: String) {
        self.world_event("engine-error", &[Field::Str(&message)]);
        self.engine_errors.lock().push(message);
    }

    fn finish_run(&self, run_id: &str, status: RunStatus) {
        // The run's effects so far are checked, and the fakes forget the run, after every request that reached them.
        let now = self.settle();
        let finished = {
            let mut state = self.monitor.lock();
            state.trace.record(now, "run-finished", &[Field::Str(run_id), Field::Str(status.as_str())]);
            state.checker.run_finished(run_id, status, self.ledger.as_ref());
            state.note_violation();
            state.checker.runs_finished
        };
        if let Err(e) = self.ledger.forget_run(run_id) {
            self.engine_error(format!("forget {run_id}: {e}"));
        }
        self.fakes.forget_run(run_id);
        // A finished run is forgotten everywhere and never driven again, so no person will look at it again either.
        self.person_seen.lock().remove(run_id);
        self.progress.runs_finished.fetch_add(1, Ordering::Relaxed);
        if finished.is_multiple_of(PRUNE_TASKS_EVERY_RUNS) {
            prune_dead_tasks();
        }
        self.runs_in_flight.fetch_sub(1, Ordering::Relaxed);
        self.room.notify_one();
    }
}

/// A deterministic uniform number in `[0, 1)` for a named decision about a run.
fn unit(seed: u64, what: &str, run_id: &str) -> f64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&seed.to_le_bytes());
    hasher.update(what.as_bytes());
    hasher.update(run_id.as_bytes());
    let bytes = hasher.finalize();
    let mut n = [0u8; 8];
    n.copy_from_slice(&bytes.as_bytes()[..8]);
    (u64::from_le_bytes(n) >> 11) as f64 / (1u64 << 53) as f64
}

// ------------------------------------------------------------------------------------------------------------------
// Workers.

async fn worker_main(world: Arc<Shared>, worker: u32) {
    let incarnation = world.incarnations.lock()[worker as usize];
    let me: Driver = (worker, incarnation);
    let engine = Arc::new(world.engine_for(worker, incarnation));
    // A handle on this incarnation: madsim gives a restarted node new task state, and a handle taken before the
    // restart spawns onto the killed one (its tasks are dropped unpolled).
    let id = world.nodes.lock()[worker as usize].as_ref().map(|n| n.id()).expect("a worker runs on its node");
    let node = madsim::runtime::Handle::current().get_node(id).expect("a worker's node exists");
    let this = LiveWorker { me, engine, node };
    // A restarted worker resumes every unfinished run assigned to it.
    let unfinished = world.ledger.unfinished_runs().unwrap_or_else(|e| panic!("the ledger failed listing runs: {e}"));
    for run_id in unfinished {
        if world.assigned_worker(&run_id) == worker {
            start_drive(&world, &this, run_id.into(), None);
        }
    }
    // Runs whose every driver died (a crash killed them; a run another worker was driving, say): finish those that
    // are terminal or paused, drive the others.
    let orphans: Vec<String> = {
        let incarnations = world.incarnations.lock();
        let drivers = world.drivers.lock();
        let mut orphans: Vec<String> = drivers
            .iter()
            .filter(|(_, ds)| ds.iter().all(|d| !live(&incarnations, *d)))
            .map(|(run_id, _)| run_id.to_string())
            .collect();
        // In run id order, whatever order the hash map holds them in.
        orphans.sort_unstable();
        orphans
    };
    for run_id in orphans {
        let status =
            world.ledger.run_status(&run_id).unwrap_or_else(|e| panic!("the ledger failed reading run {run_id}: {e}"));
        match status {
            Some(status) if !status.is_unfinished() => {
                world.drivers.lock().remove(run_id.as_str());
                world.finish_run(&run_id, status);
            }
            Some(_) => start_drive(&world, &this, run_id.into(), None),
            None => {
                world.drivers.lock().remove(run_id.as_str());
            }
        }
    }
    // From here on a run dispatched to this worker starts at once (`Shared::dispatch`); those dispatched while it
    // was down, or before it got here, start now. Nothing above awaits, so no dispatch slips in between.
    world.live_workers.lock()[worker as usize] = Some(this.clone());
    let waiting = std::mem::take(&mut *world.mailboxes[worker as usize].lock());
    for (run_id, trigger) in waiting {
        start_drive(&world, &this, run_id, trigger);
    }
    // The node's first task must not end: madsim stops a node whose first task returns.
    std::future::pending::<()>().await;
}

/// A worker incarnation that can take runs: its driver identity, its engine and its node.
#[derive(Clone)]
struct LiveWorker {
    me: Driver,
    engine: Arc<Engine>,
    node: madsim::runtime::NodeHandle,
}

/// Starts a drive of `run_id` on `live`'s worker, unless the run has finished or is paused.
/// The run id is held inline up to 24 bytes (an API run's; a webhook run's is 35).
fn start_drive(world: &Arc<Shared>, live: &LiveWorker, run_id: CompactString, trigger: Option<Arc<KnownTrigger>>) {
    let me = live.me;
    // Finished runs are forgotten; a late dispatch of one is dropped here. This check and the registration
    // below happen without an await between them, so no finish can slip in.
    match world.ledger.run_status(&run_id) {
        Ok(Some(status)) if status.is_unfinished() => {}
        Ok(_) => return,
        Err(e) => panic!("the ledger failed reading run {run_id}: {e}"),
    }
    {
        let mut drivers = world.drivers.lock();
        let entry = drivers.entry(run_id.as_str().into()).or_default();
        // The run can be driven, so a person who had it at their desk has decided: the first drive after the
        // decision takes it from the desk (`Shared::hand_to_person`).
        let desk = world.person_desk();
        entry.retain(|d| *d != desk);
        if entry.contains(&me) {
            return;
        }
        entry.push(me);
    }
    let world = world.clone();
    let engine = live.engine.clone();
    // On the worker's node (whoever dispatched the run), so the worker's kill ends the drive.
    live.node.spawn(async move {
        // Boxed: the drive's state machine is large, and this task is spawned (and copied) on every restart.
        let drive = pin_in_place(|| async {
            match &trigger {
                Some(trigger) => engine.drive_known_trigger(&run_id, trigger).await,
                None => engine.drive(&run_id).await,
            }
        });
        let status = match drive.await {
            Ok(status) => status,
            Err(e) => {
                world.engine_error(format!("drive {run_id}: {e}"));
                RunStatus::Failed
            }
        };
        // Most drives end here and now; a paused run a person will look at goes to their desk, and a replay runs
        // in a boxed future (held inline, its state would make every drive's task larger for the whole of the drive).
        if status == RunStatus::Paused && world.person_resolves(&run_id) {
            world.hand_to_person(me, run_id);
        } else if world.replay_due(&run_id, status) {
            pin_in_place(|| world.replay_then_go(&engine, me, &run_id, status)).await;
        } else {
            world.driver_gone(me, &run_id, status);
        }
    });
}

// ------------------------------------------------------------------------------------------------------------------
// Traffic.

async fn generate(world: Arc<Shared>, api: Arc<Engine>) {
    let config = &world.config;
    let knobs = &config.profile.world;
    let mut rng = Rng::new(config.seed).fork_named("traffic");
    let mix: Vec<(String, f64)> = config.profile.mix.iter().map(|(k, v)| (k.clone(), *v)).collect();
    let total: f64 = mix.iter().map(|(_, w)| w).sum();
    let in_flight_max = knobs.runs_in_flight_max as u64;
    let mut planned: u64 = 0;
    let mut index: u64 = 0;
    while planned < config.steps {
        while world.runs_in_flight.load(Ordering::Relaxed) + world.changes_in_flight.load(Ordering::Relaxed)
            >= in_flight_max
        {
            world.room.notified().await;
        }
        let gap_ms = rng.exponential(1000.0 / knobs.run_rate_per_s);
        if gap_ms >= 1.0 {
            world.monitor.clock.sleep(Duration::from_millis(gap_ms as u64)).await;
        }
        let mut pick = rng.unit_f64() * total;
        let mut workflow = mix[mix.len() - 1].0.as_str();
        for (name, weight) in &mix {
            if pick < *weight {
                workflow = name;
                break;
            }
            pick -= weight;
        }
        // Its canonical bytes are written once, for the ledger and for the drive to compare with what it stored.
        let trigger = KnownTrigger::new(workflows::trigger(workflow, index, &mut rng))
            .expect("a generated trigger has a canonical form");
        planned += workflows::expected_writes(&config.profile, workflow);
        world.progress.steps_started.store(planned, Ordering::Relaxed);
        if rng.chance(knobs.webhook_share) {
            start_change(&world, &api, workflow, index, trigger, &mut rng);
        } else {
            let run_id = numbered("run-", index);
            match api.create_run_known(workflow, &run_id, &trigger) {
                Ok(true) => {}
                Ok(false) => panic!("run id {run_id} was minted twice"),
                Err(e) => panic!("the engine refused a generated run {run_id}: {e}"),
            }
            world.runs_in_flight.fetch_add(1, Ordering::Relaxed);
            let worker = world.assigned_worker(&run_id);
            let trigger = Arc::new(trigger);
            world.dispatch(&run_id, worker, Some(trigger.clone()));
            if knobs.workers > 1 && rng.chance(knobs.double_dispatch_share) {
                world.dispatch(&run_id, (worker + 1) % knobs.workers, Some(trigger));
            }
        }
        index += 1;
    }
}

/// The webhook source every generated change comes from.
pub const WEBHOOK_SOURCE: &str = "payments";
const WEBHOOK_SECRET: &[u8] = b"whsec_flowsim";

fn webhook_source(knobs: &crate::profile::WorldKnobs, workflow: &str) -> engine::webhook::Source {
    engine::webhook::Source {
        name: WEBHOOK_SOURCE.to_owned(),
        secret: Some(WEBHOOK_SECRET.to_vec()),
        tolerance_ms: 300_000,
        dedup_by_object: knobs.webhook_dedup_by_object,
        workflow: workflow.to_owned(),
        // The simulated bodies are the triggers alone (no envelope), and the world hands intake the ids it made.
        body_ids: None,
    }
}

fn start_change(
    world: &Arc<Shared>,
    api: &Arc<Engine>,
    workflow: &str,
    index: u64,
    trigger: KnownTrigger,
    rng: &mut Rng,
) {
    let event = WebhookEvent {
        source: WEBHOOK_SOURCE.into(),
        event_id: numbered("evt_", index),
        object_id: numbered("obj_", index),
        event_type: "customer.updated",
        payload: trigger.document().clone(),
    };
    let trigger = Arc::new(trigger);
    let profile = world.fakes.webhook_profile(WEBHOOK_SOURCE);
    let mut schedule = connectors_fake::webhooks::delivery_schedule(&event, &profile, rng);
    // Now and then a forger sends a delivery with a bad signature: it must be refused and start nothing.
    let forged = rng.chance(0.01);
    if forged {
        schedule.push(connectors_fake::webhooks::Delivery {
            offset_ms: rng.range(0, 5_000),
            event_id: format!("evt_{index}_forged").into(),
            attempt: 1,
            receiver_fails: false,
            duplicate: false,
        });
    }
    world.changes_in_flight.fetch_add(1, Ordering::Relaxed);
    world.webhook_starts.lock().insert(
        event.object_id.clone(),
        ChangeDeliveries { deliveries_left: schedule.len() as u32, started: BTreeMap::new() },
    );
    let supervisor = world.supervisor.lock().clone().expect("the supervisor node exists");
    for delivery in schedule {
        let world = world.clone();
        let api = api.clone();
        let event = event.clone();
        let trigger = trigger.clone();
        let workflow = workflow.to_owned();
        supervisor.spawn(async move {
            world.monitor.clock.sleep(Duration::from_millis(delivery.offset_ms)).await;
            deliver(&world, &api, &workflow, &event, &trigger, &delivery);
        });
    }
}

fn deliver(
    world: &Arc<Shared>,
    api: &Engine,
    workflow: &str,
    event: &WebhookEvent,
    trigger: &Arc<KnownTrigger>,
    delivery: &connectors_fake::webhooks::Delivery,
) {
    let now = world.monitor.clock.now_ms();
    let forged = delivery.event_id.ends_with("_forged");
    let mut started = None;
    let reached = !delivery.receiver_fails || world.healed.load(Ordering::Relaxed);
    if reached {
        // The event's payload as its canonical JSON, written once for every delivery of the event.
        let body = trigger.canonical().to_vec();
        let secret: &[u8] = if forged { b"not-the-secret" } else { WEBHOOK_SECRET };
        let mut incoming = engine::webhook::Incoming {
            // `String::from(&str)`: a `CompactString`'s `to_string` goes through the formatting machinery.
            event_id: String::from(delivery.event_id.as_str()),
            signature: None,
            body,
            timestamp_ms: now,
            object_id: Some(String::from(event.object_id.as_str())),
            event_type: Some(event.event_type.to_owned()),
        };
        incoming.signature = Some(engine::webhook::sign(secret, &incoming));
        world.world_event("webhook-delivery", &[Field::Str(&delivery.event_id), Field::U64(delivery.attempt as u64)]);
        let source = world.webhook_sources.get(workflow).expect("a change's workflow is one of the mix's");
        match api.intake_webhook(source, &incoming) {
            Ok(Intake::Started { run_id }) => {
                if forged {
                    world.violation("I6", format!("forged delivery {} started run {run_id}", delivery.event_id));
                }
                world.runs_in_flight.fetch_add(1, Ordering::Relaxed);
                let worker = world.assigned_worker(&run_id);
                // The run's trigger is the event's body, which the world holds parsed with its canonical bytes.
                world.dispatch(&run_id, worker, Some(trigger.clone()));
                started = Some(run_id);
            }
            Ok(Intake::Duplicate { .. }) => {}
            Err(engine::webhook::Error::Halted) => {
                // The endpoint crashed before writing anything: the sender sees an error and redelivers later.
                redeliver(world, workflow, event, trigger, delivery);
            }
            Err(e) if forged && e.is_rejection() => {}
            Err(e) => {
                world.violation("I6", format!("delivery {} of a genuine event was refused: {e}", delivery.event_id))
            }
        }
    }
    let done = {
        let mut starts = world.webhook_starts.lock();
        let change = starts.get_mut(&event.object_id).expect("a change outlives its deliveries");
        if started.is_some() && !forged {
            *change.started.entry(delivery.event_id.clone()).or_default() += 1;
        } else if reached && !forged {
            change.started.entry(delivery.event_id.clone()).or_default();
        }
        change.deliveries_left -= 1;
        if change.deliveries_left == 0 { starts.remove(&event.object_id) } else { None }
    };
    if let Some(change) = done {
        let dedup = world.config.profile.world.webhook_dedup_by_object;
        let total: u32 = change.started.values().sum();
        let delivered_any = !change.started.is_empty();
        if dedup && delivered_any && total != 1 {
            world.violation("I6", format!("change {} started {total} runs (deduplicated by object)", event.object_id));
        }
        if !dedup {
            for (event_id, count) in &change.started {
                if *count != 1 {
                    world.violation("I6", format!("event {event_id} started {count} runs"));
                }
            }
        }
        world.changes_in_flight.fetch_sub(1, Ordering::Relaxed);
        world.room.notify_one();
    }
}

/// Schedules one more delivery of `delivery` after the sender's first backoff (the receiver failed it).
fn redeliver(
    world: &Arc<Shared>,
    workflow: &str,
    event: &WebhookEvent,
    trigger: &Arc<KnownTrigger>,
    delivery: &connectors_fake::webhooks::Delivery,
) {
    let backoff_ms = world.fakes.webhook_profile(WEBHOOK_SOURCE).redelivery_backoff_ms_base.max(1_000);
    if let Some(change) = world.webhook_starts.lock().get_mut(&event.object_id) {
        change.deliveries_left += 1;
    }
    let again = connectors_fake::webhooks::Delivery { attempt: delivery.attempt + 1, ..delivery.clone() };
    let world2 = world.clone();
    let event = event.clone();
    let trigger = trigger.clone();
    let workflow = workflow.to_owned();
    let supervisor = world.supervisor.lock().clone().expect("the supervisor node exists");
    supervisor.spawn(async move {
        tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
        let api = world2.api.lock().clone().expect("the front door exists");
        deliver(&world2, &api, &workflow, &event, &trigger, &again);
    });
}

impl Shared {
    fn violation(&self, id: &'static str, description: String) {
        let mut state = self.monitor.lock();
        state.checker.external_violation(id, description);
        state.note_violation();
    }
}

// ------------------------------------------------------------------------------------------------------------------
// Chaos and heal.

/// The moments of one kind of random fault: exponentially distributed gaps drawn from the fault's own stream of the
/// seed, until the world heals.
struct FaultGaps {
    rng: Rng,
    mean_ms: f64,
}

impl FaultGaps {
    /// `None` when the profile turns the fault off (a mean interval of zero).
    fn new(world: &Shared, mean_interval_s: f64, stream: &str) -> Option<FaultGaps> {
        (mean_interval_s > 0.0).then(|| FaultGaps {
            rng: Rng::new(world.config.seed).fork_named(stream),
            mean_ms: mean_interval_s * 1000.0,
        })
    }

    /// Sleeps until the next fault and lends the stream to draw its details from; `None` once the world has healed.
    async fn next(&mut self, world: &Shared) -> Option<&mut Rng> {
        let gap = self.rng.exponential(self.mean_ms);
        tokio::time::sleep(Duration::from_millis(gap as u64 + 1)).await;
        (!world.healed.load(Ordering::Relaxed)).then_some(&mut self.rng)
    }
}

async fn crash_randomly(world: Arc<Shared>) {
    let knobs = &world.config.profile.world;
    let Some(mut gaps) = FaultGaps::new(&world, knobs.crash_interval_s_mean, "crashes") else { return };
    while let Some(rng) = gaps.next(&world).await {
        let worker = rng.range(0, knobs.workers as u64) as u32;
        if !world.down.lock()[worker as usize] {
            *world.monitor.lock().crashes.entry("random".to_owned()).or_default() += 1;
        }
        world.crash_worker(worker);
    }
}

async fn cut_randomly(world: Arc<Shared>) {
    let knobs = &world.config.profile.world;
    let Some(mut gaps) = FaultGaps::new(&world, knobs.cut_interval_s_mean, "cuts") else { return };
    while let Some(rng) = gaps.next(&world).await {
        let worker = rng.range(0, knobs.workers as u64) as usize;
        let until = world.monitor.clock.now_ms() + knobs.cut_ms;
        world.cut_until_ms[worker].store(until, Ordering::Relaxed);
        world.world_event("network-cut", &[Field::U64(worker as u64), Field::U64(until)]);
    }
}

async fn stall_randomly(world: Arc<Shared>) {
    let knobs = &world.config.profile.world;
    let Some(mut gaps) = FaultGaps::new(&world, knobs.stall_interval_s_mean, "stalls") else { return };
    while let Some(rng) = gaps.next(&world).await {
        let worker = rng.range(0, knobs.workers as u64) as u32;
        if world.down.lock()[worker as usize] {
            continue;
        }
        let node = world.nodes.lock()[worker as usize].as_ref().map(|n| n.id());
        let Some(id) = node else { continue };
        world.world_event("worker-stalled", &[Field::U64(worker as u64), Field::U64(knobs.stall_ms)]);
        madsim::runtime::Handle::current().pause(id);
        tokio::time::sleep(Duration::from_millis(knobs.stall_ms)).await;
        madsim::runtime::Handle::current().resume(id);
        world.world_event("worker-resumed", &[Field::U64(worker as u64)]);
    }
}

/// How many finished runs between two [`prune_dead_tasks`] (besides housekeeping's, every simulated minute).
const PRUNE_TASKS_EVERY_RUNS: u64 = 1024;

/// Frees what madsim keeps of finished tasks. madsim holds a weak reference to every task spawned on a node until
/// the node is killed or its tasks are counted, and a weak reference keeps the task's record (its `TaskInfo`, 144
/// bytes) allocated. Every webhook change's deliveries, redelivery, restart and person's desk is a task on the
/// supervisor's node, which is never killed (and until stop 18 every connector call was one on a fakes' node):
/// counted once a simulated minute only, the dead ones were a fifth of the live heap under the default profile,
/// spread among the live blocks where the allocator could not reuse the space. Counting draws nothing from the
/// seeded RNG and wakes no task, so how often it happens changes nothing else.
fn prune_dead_tasks() {
    let _ = madsim::runtime::Handle::current().metrics().num_tasks();
}

/// Housekeeping, every simulated minute.
///
/// - As a deployment runs it: every simulated hour the front door drops inbox rows older than the retention, so the
///   ledger's memory stays bounded over a simulated month.
/// - For the simulator itself: [`prune_dead_tasks`], also when no run finishes for a while.
async fn housekeeping(world: Arc<Shared>, api: Arc<Engine>) {
    const TICK_MS: u64 = 60_000;
    const TICKS_PER_EXPIRY: u64 = 60;
    let mut tick: u64 = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(TICK_MS)).await;
        tick += 1;
        prune_dead_tasks();
        if !tick.is_multiple_of(TICKS_PER_EXPIRY) {
            continue;
        }
        match api.expire_webhooks() {
            Ok(0) => {}
            Ok(expired) => world.world_event("inbox-expired", &[Field::U64(expired)]),
            Err(e) => world.engine_error(format!("expire webhook inbox: {e}")),
        }
    }
}

/// The SQLite ledger's read cache, in records: far above the few thousand runs in flight (with their keys) that the
/// default profiles hold; past it the cache empties and goes on as a cache of some rows (correct, only slower).
const SQLITE_CACHE_ENTRIES: usize = 1 << 20;

/// Runs one simulation to the end of its heal phase. Must be called inside a madsim runtime.
async fn run_world(config: WorldConfig, progress: Arc<Progress>) -> Outcome {
    let handle = madsim::runtime::Handle::current();
    let clock = SimClock::new(EPOCH_MS);
    let workers = config.profile.world.workers;
    let ledger: Arc<dyn Ledger> = match config.ledger {
        LedgerKind::Memory => Arc::new(engine::ledger::memory::MemoryLedger::new()),
        LedgerKind::Sqlite => Arc::new(
            // Group commit is safe here: the in-memory database lives outside every worker, so a worker crash loses
            // nothing, and nothing survives the process anyway. The read cache holds the records of the runs not yet
            // finished (every finished run is forgotten), which is what the memory ledger holds: reads run no
            // statement in a release build, and a debug build checks each against SQLite (the ledger's module doc).
            engine::ledger::sqlite::SqliteLedger::open_in_memory(engine::ledger::sqlite::Options {
                group_commit_ops_max: 1_000,
                cache_entries: SQLITE_CACHE_ENTRIES,
                ..Default::default()
            })
            .unwrap_or_else(|e| panic!("cannot open an in-memory SQLite ledger: {e}")),
        ),
    };
    let actions = workflows::action_infos(&config.profile);
    let checker =
        Checker::new(&actions, workflows::plan_steps(&config.profile), workers + 1, config.profile.world.lease_ms);
    let monitor = Arc::new(Monitor {
        state: Mutex::new(MonitorState {
            checker,
            trace: Trace::with_options(config.keep_trace, config.trace_run.clone(), EPOCH_MS),
            crash_rng: Rng::new(config.seed).fork_named("crash-points"),
            crash_point_p: config.profile.world.crash_point_p,
            extra_lookup_ms_total: 0,
            crashes: BTreeMap::new(),
        }),
        crash_points_armed: AtomicBool::new(config.profile.world.crash_point_p > 0.0),
        clock: clock.clone(),
    });
    let sink: Arc<dyn EffectSink> = monitor.clone();
    let fakes = workflows::Fakes::new(&config.profile, config.seed, Arc::new(clock.clone()), sink);
    let world = Arc::new(Shared {
        ledger: ledger.clone(),
        monitor: monitor.clone(),
        fakes,
        progress: progress.clone(),
        mailboxes: (0..workers).map(|_| Mutex::new(VecDeque::new())).collect(),
        live_workers: Mutex::new(vec![None; workers as usize]),
        nodes: Mutex::new(vec![None; workers as usize]),
        incarnations: Mutex::new(vec![0; workers as usize + 1]),
        down: Mutex::new(vec![false; workers as usize]),
        up_since_ms: (0..workers).map(|_| AtomicU64::new(0)).collect(),
        cut_until_ms: (0..workers).map(|_| AtomicU64::new(0)).collect(),
        drivers: Mutex::new(FastMap::default()),
        runs_in_flight: AtomicU64::new(0),
        changes_in_flight: AtomicU64::new(0),
        room: tokio::sync::Notify::new(),
        healed: AtomicBool::new(false),
        person_seen: Mutex::new(FastSet::default()),
        engine_errors: Mutex::new(Vec::new()),
        supervisor: Mutex::new(None),
        webhook_starts: Mutex::new(FastMap::default()),
        api: Mutex::new(None),
        network: Network::new(),
        workflows: workflows::compiled_for(&config.profile),
        webhook_sources: config
            .profile
            .mix
            .keys()
            .map(|workflow| (workflow.clone(), webhook_source(&config.profile.world, workflow)))
            .collect(),
        config,
    });
    let supervisor = handle.create_node().name("supervisor").build();
    *world.supervisor.lock() = Some(supervisor.clone());
    for worker in 0..workers {
        let w = world.clone();
        let node =
            handle.create_node().name(format!("worker-{worker}")).init(move || worker_main(w.clone(), worker)).build();
        world.nodes.lock()[worker as usize] = Some(node);
    }
    // The front door: the API and webhook endpoint that records new runs, on the supervisor's node.
    let api = Arc::new(world.engine_for(workers, 0));
    *world.api.lock() = Some(api.clone());

    // Chaos phase: traffic with every fault on.
    let chaos = [
        supervisor.spawn(crash_randomly(world.clone())),
        supervisor.spawn(cut_randomly(world.clone())),
        supervisor.spawn(stall_randomly(world.clone())),
    ];
    supervisor.spawn(housekeeping(world.clone(), api.clone()));
    supervisor.spawn(generate(world.clone(), api.clone())).await.expect("the traffic generator does not panic");

    // Heal phase: faults off, every worker up; every run must end (or pause) within `heal_s_max`.
    let heal_started_ms = clock.now_ms();
    world.healed.store(true, Ordering::Relaxed);
    world.fakes.heal();
    monitor.crash_points_armed.store(false, Ordering::Relaxed);
    world.world_event("heal", &[]);
    for c in chaos {
        c.abort();
    }
    for worker in 0..workers {
        world.cut_until_ms[worker as usize].store(0, Ordering::Relaxed);
        // A stall aborted with the chaos tasks may have left the worker paused.
        let node = world.nodes.lock()[worker as usize].as_ref().map(|n| n.id());
        if let Some(id) = node {
            handle.resume(id);
        }
        world.restart_worker(worker);
    }
    let heal_ms_max = world.config.profile.world.heal_s_max.saturating_mul(1000);
    while world.runs_in_flight.load(Ordering::Relaxed) + world.changes_in_flight.load(Ordering::Relaxed) > 0
        && clock.now_ms() - heal_started_ms < heal_ms_max
    {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
    let end_ms = clock.now_ms();
    world.world_event("end", &[Field::U64(end_ms - EPOCH_MS)]);
    progress.done.store(true, Ordering::Relaxed);
    for error in world.engine_errors.lock().iter() {
        let mut state = monitor.lock();
        state.checker.external_violation("I8", format!("engine error: {error}"));
        state.note_violation();
    }
    // A run the ledger holds as succeeded or failed meets I8 even while a drive of it is still waiting: on a lease
    // that another worker took and then ended the run under, for one, which it learns only when the lease runs out.
    // Its end-of-run checks run now; the trace names the drivers still waiting. (A paused run still counts until the
    // world has finished it: one left at a person's desk, neither decided nor driven, is what I8 exists to catch.)
    let drivers_of = |run_id: &str| world.drivers.lock().get(run_id).cloned().unwrap_or_default();
    let unfinished = monitor.lock().checker.unfinished_runs(usize::MAX);
    for run_id in unfinished {
        let Some(run) = world.ledger.get_run(&run_id).ok().flatten() else { continue };
        if matches!(run.status, RunStatus::Succeeded | RunStatus::Failed) {
            let drivers = drivers_of(&run_id);
            // Passing runs have this event, so the hash keeps the text it always had; the trace shows a readable one.
            let hashed = format!("status {} drivers {drivers:?}", run.status.as_str());
            let shown = format!("status {}; drivers: {}", run.status.as_str(), world.describe_drivers(&drivers));
            let mut state = monitor.lock();
            let detail = Field::Shown { hashed: &hashed, shown: &shown };
            state.trace.record(end_ms, "run-ended-still-driven", &[Field::Str(&run_id), detail]);
            state.checker.run_finished(&run_id, run.status, world.ledger.as_ref());
            state.note_violation();
        }
    }
    // Runs still unfinished break I8: the readable trace marks it (when nothing broke before), then names them.
    let stuck = {
        let mut state = monitor.lock();
        state.checker.finish();
        state.note_violation();
        state.checker.unfinished_runs(3)
    };
    for run_id in stuck {
        let run = world.ledger.get_run(&run_id).ok().flatten();
        let drivers = world.describe_drivers(&drivers_of(&run_id));
        let detail = match run {
            Some(r) => match &r.reason {
                Some(reason) => format!("status {}, reason \"{reason}\"; drivers: {drivers}", r.status.as_str()),
                None => format!("status {}, no reason; drivers: {drivers}", r.status.as_str()),
            },
            None => format!("not in the ledger; drivers: {drivers}"),
        };
        world.world_event("stuck-run", &[Field::Str(&run_id), Field::Str(&detail)]);
        eprintln!("flowsim: run {run_id} did not finish: {detail}");
    }
    let state = monitor.lock();
    let results = assemble(&world, &state, &api, end_ms);
    let trace_text = state.trace.readable_text();
    let first_violation_run = state.trace.first_violation_run().map(str::to_owned);
    drop(state);
    Outcome { results, trace_text, first_violation_run }
}

impl Shared {
    /// A run's drivers as the trace and stderr name them: `worker 3 (incarnation 0)` (`crashed since` when that
    /// incarnation is dead), `person's desk`, or `none`.
    fn describe_drivers(&self, drivers: &[Driver]) -> String {
        if drivers.is_empty() {
            return "none".to_owned();
        }
        let desk = self.person_desk();
        let incarnations = self.incarnations.lock();
        let names: Vec<String> = drivers
            .iter()
            .map(|&driver| match driver {
                _ if driver == desk => "person's desk".to_owned(),
                (worker, incarnation) if live(&incarnations, driver) => {
                    format!("worker {worker} (incarnation {incarnation})")
                }
                (worker, incarnation) => format!("worker {worker} (incarnation {incarnation}, crashed since)"),
            })
            .collect();
        names.join(", ")
    }
}

fn assemble(world: &Shared, state: &MonitorState, api: &Engine, end_ms: u64) -> Results {
    let config = &world.config;
    let checker = &state.checker;
    let mut actions = BTreeMap::new();
    let mut steps = 0;
    for (index, name) in checker.action_names().iter().enumerate() {
        let counters = &checker.counters[index];
        let info = checker.action_info(index);
        steps += counters.steps;
        actions.insert(
            name.clone(),
            ActionStats {
                class: info.class.clone(),
                safeguards: workflows::safeguards(&info.class, config.policy),
                steps: counters.steps,
                effects: counters.effects,
                duplicates: counters.duplicates,
                residual_duplicates: counters.residual_duplicates,
                calls: counters.calls,
                lookups: counters.lookups,
                lag_bound_ms: info.lag_bound_ms,
            },
        );
    }
    Results {
        scenario: config.scenario.clone(),
        seed: config.seed,
        policy: policy_name(config.policy).to_owned(),
        ledger: config.ledger.as_str().to_owned(),
        steps,
        runs: checker.runs_finished + checker.runs_in_flight() as u64,
        trace_hash: state.trace.hash_hex(),
        trace_ledgers: None,
        effects: checker.effects,
        duplicates: checker.duplicates(config.policy == Policy::Rules),
        paused_runs: checker.runs_paused,
        failed_runs: checker.runs_failed,
        runs_with_visible_retry: checker.runs_with_visible_retry,
        person_resolutions: checker.resolutions,
        auto_retry_coverage: api.auto_retry_coverage(),
        extra_lookups: checker.lookups_total,
        extra_lookup_ms_total: state.extra_lookup_ms_total,
        latency: checker.latency(),
        actions,
        invariants: checker.invariants(false),
        crashes: state.crashes.clone(),
        knobs: crate::profile::knobs(&config.profile),
        repro: config.repro.clone(),
        merged_runs: 1,
        simulated_seconds: (end_ms - EPOCH_MS) as f64 / 1000.0,
        wall_seconds: 0.0,
        steps_per_second: 0.0,
        peak_rss_bytes: 0,
    }
}

pub fn policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Rules => "rules",
        Policy::Naive => "naive",
    }
}

/// Runs one simulation in a fresh madsim runtime seeded with `config.seed`.
pub fn simulate(config: WorldConfig, progress: Arc<Progress>) -> Outcome {
    let runtime = madsim::runtime::Runtime::with_seed_and_config(config.seed, madsim::Config::default());
    runtime.block_on(run_world(config, progress))
}

#[cfg(all(test, madsim))]
mod tests {
    use super::*;
    use connectors_fake::FakeKind;
    use connectors_fake::profile::FaultProfile;
    use connectors_fake::truth::RecordingSink;
    use engine::clock::RuntimeClock;

    fn payouts() -> (Arc<dyn Fake>, Arc<RecordingSink>) {
        let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(0));
        let sink = Arc::new(RecordingSink::new());
        (FakeKind::Payouts.connector("payouts", FaultProfile::default(), Rng::new(1), clock, sink.clone()), sink)
    }

    fn send(network: &Network, fake: &Arc<dyn Fake>, at: Duration, key: u8) -> usize {
        send_key(network, fake, at, Key([key; 32]))
    }

    fn send_key(network: &Network, fake: &Arc<dyn Fake>, at: Duration, key: Key) -> usize {
        let inputs = Doc::object([("amount", Doc::from(5))]);
        let request = Request {
            action: FakeKind::Payouts.create_action(),
            inputs: &inputs,
            key: &key,
            run_id: "run-1",
            attempt: 1,
        };
        network.send(
            at,
            InFlight { fake: fake.clone(), sent: Sent::of(&request, &**fake), draws: fake.draw(), lookup: false },
        )
    }

    /// Serves what has arrived by `now_ms`, each request at its arrival in whole milliseconds.
    fn serve(network: &Network, now_ms: u64) {
        network.serve_arrived(Duration::from_millis(now_ms), |arrival| arrival.as_millis() as u64);
    }

    #[test]
    fn requests_are_served_in_arrival_order_at_their_arrival_times_once_they_have_arrived() {
        let network = Network::new();
        let (fake, sink) = payouts();
        // Sent out of arrival order; two arrive at the same instant (then in send order).
        let late = send(&network, &fake, Duration::from_millis(30), 1);
        let early = send(&network, &fake, Duration::from_millis(10), 2);
        let tied = send(&network, &fake, Duration::from_millis(30), 3);
        serve(&network, 9);
        assert!(sink.effects().is_empty(), "nothing is served before it arrives");
        serve(&network, 29);
        let served: Vec<(u8, u64)> = sink.effects().iter().map(|e| (e.key.0[0], e.committed_ms)).collect();
        assert_eq!(served, [(2, 10)], "served at its arrival time, not when served");
        serve(&network, 500);
        let served: Vec<(u8, u64)> = sink.effects().iter().map(|e| (e.key.0[0], e.committed_ms)).collect();
        assert_eq!(served, [(2, 10), (1, 30), (3, 30)]);
        for slot in [early, late, tied] {
            let answered = Awaiting { network: &network, slot, taken: false }.take();
            assert!(matches!(answered, Answered::Call(CallOutcome::Applied(_))));
        }
        assert_eq!(network.next_arrival_ns.load(Ordering::Relaxed), u64::MAX, "nothing is left to arrive");
    }

    #[test]
    fn a_request_slot_is_freed_whether_its_sender_takes_the_answer_or_is_gone() {
        let network = Network::new();
        let (fake, sink) = payouts();
        let at = Duration::from_millis(5);
        // Taken.
        let slot = send(&network, &fake, at, 9);
        serve(&network, 5);
        let answered = Awaiting { network: &network, slot, taken: false }.take();
        assert!(matches!(answered, Answered::Call(CallOutcome::Applied(_))));
        // Gone before its request is served: the request is still served (its effect commits), then the slot freed.
        let gone_early = send(&network, &fake, at, 9);
        drop(Awaiting { network: &network, slot: gone_early, taken: false });
        serve(&network, 5);
        // Gone after its answer came.
        let gone_late = send(&network, &fake, at, 9);
        serve(&network, 5);
        drop(Awaiting { network: &network, slot: gone_late, taken: false });
        let queue = network.queue.lock();
        assert_eq!(queue.slots.len(), 1, "each request reused the slot the previous one freed");
        assert_eq!(queue.free, [0]);
        assert!(queue.arrivals.is_empty());
        drop(queue);
        assert_eq!(sink.effects_for(&Key([9; 32])), 3, "every sent request was served, its sender there or not");
    }

    /// What a test does next to the network: send a request arriving `ms` from now, let `ms` pass and settle, or drop
    /// the sender of the `n`-th request still waiting for its answer.
    #[derive(Debug, Clone)]
    enum Step {
        Send(u64),
        Settle(u64),
        Abandon(usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..40u64).prop_map(Step::Send),
            (0..25u64).prop_map(Step::Settle),
            any::<usize>().prop_map(Step::Abandon)
        ]
    }

    proptest::proptest! {
        /// Whatever the order of sends, settles and dead senders: every request is served once, in arrival order (ties
        /// in send order), only once it has arrived, committed at its arrival time; a sender still there takes its
        /// answer; every slot is freed in the end.
        #[test]
        fn the_network_serves_each_request_once_in_arrival_order_at_its_arrival(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let network = Network::new();
            let (fake, sink) = payouts();
            let mut now = 0u64;
            // (arrival ms, send order, key) of every request sent, and the senders still waiting: (slot, arrival ms).
            let mut sent: Vec<(u64, u64, Key)> = Vec::new();
            let mut waiting: Vec<(usize, u64)> = Vec::new();
            let check = |sent: &[(u64, u64, Key)], now: u64| {
                let mut due: Vec<(u64, u64, Key)> = sent.iter().filter(|s| s.0 <= now).copied().collect();
                due.sort_by_key(|s| (s.0, s.1));
                let expected: Vec<(Key, u64)> = due.iter().map(|s| (s.2, s.0)).collect();
                let served: Vec<(Key, u64)> = sink.effects().iter().map(|e| (e.key, e.committed_ms)).collect();
                proptest::prop_assert_eq!(served, expected);
                Ok(())
            };
            for step in steps {
                match step {
                    Step::Send(ms) => {
                        let n = sent.len() as u64;
                        let key = Key(*blake3::hash(&n.to_le_bytes()).as_bytes());
                        let slot = send_key(&network, &fake, Duration::from_millis(now + ms), key);
                        sent.push((now + ms, n, key));
                        waiting.push((slot, now + ms));
                    }
                    Step::Settle(ms) => {
                        now += ms;
                        serve(&network, now);
                        check(&sent, now)?;
                        // The senders whose requests have arrived take their answers (as soon as an answer can be due).
                        let (due, still): (Vec<_>, Vec<_>) = waiting.into_iter().partition(|w| w.1 <= now);
                        waiting = still;
                        for (slot, _) in due {
                            let answered = Awaiting { network: &network, slot, taken: false }.take();
                            proptest::prop_assert!(matches!(answered, Answered::Call(CallOutcome::Applied(_))));
                        }
                    }
                    Step::Abandon(n) if !waiting.is_empty() => {
                        let (slot, _) = waiting.remove(n % waiting.len());
                        drop(Awaiting { network: &network, slot, taken: false });
                    }
                    Step::Abandon(_) => {}
                }
            }
            for (slot, _) in waiting.drain(..) {
                drop(Awaiting { network: &network, slot, taken: false });
            }
            serve(&network, u64::MAX / 2_000_000);
            check(&sent, u64::MAX)?;
            let queue = network.queue.lock();
            proptest::prop_assert!(queue.arrivals.is_empty());
            proptest::prop_assert_eq!(queue.free.len(), queue.slots.len(), "every slot is freed");
        }
    }
}
