//! An attempt that outlives its lease, beside a pause. Worker A claims a step's key and calls the connector, and
//! stalls; its lease expires; worker B finds the attempt's outcome unknown and pauses the run at that key for a
//! person, without claiming it (so the fence does not move, and A's answer, when it comes, is recorded: it may be the
//! evidence the person needs). These tests stage exactly that, deterministically: a manual clock shared by every
//! worker (the lease expires when the test moves it) and a connector whose call waits until the test releases it with
//! the answer it is to give. Then they check what each decision of a person does with the late outcome, and what a
//! late answer does after a decision, on both ledgers: a decision applies only to the outcome it was made on
//! (`ResolutionRecord::seen`), a person's retry allows one more attempt even where the key's attempts ran out, and a
//! late write after a decision was applied is fenced. (Found by a QA pass, stop 49.)
#![cfg(not(madsim))]

mod common;

use common::hooked::Hooked;
use common::*;
use engine::clock::{Clock, RuntimeClock};
use engine::connector::{ActionSpec, BoxFuture, Connector, LookupOutcome, NotApplied, Outcome, Request};
use engine::executor::{Engine, EngineConfig, Error, late_applied_marker, record_resolution};
use engine::key::Key;
use engine::ledger::{Completion, Ledger, Resolution, ResolutionRecord, RunStatus, Status, paused_key};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// The runtime's clock, which the test can also move forward at once (to expire a lease without waiting it out).
struct JumpClock {
    runtime: RuntimeClock,
    jumped_ms: AtomicU64,
}

impl JumpClock {
    fn new(ms: u64) -> Arc<Self> {
        Arc::new(Self { runtime: RuntimeClock::new(ms), jumped_ms: AtomicU64::new(0) })
    }
    fn advance(&self, ms: u64) {
        self.jumped_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for JumpClock {
    fn now_ms(&self) -> u64 {
        self.runtime.now_ms() + self.jumped_ms.load(Ordering::SeqCst)
    }
}

/// What a released call answers.
#[derive(Debug)]
enum Answer {
    /// Commit an effect and answer `Applied` with this output.
    Apply(Value),
    /// Nothing committed; a definite, retryable failure.
    Fail,
    /// Nothing committed; the call timed out (indeterminate). (QA review.)
    Timeout,
}

enum Entry {
    /// Wait for the test to send the answer.
    Wait(oneshot::Receiver<Answer>),
}

#[derive(Default)]
struct GatedState {
    script: VecDeque<Entry>,
    /// (attempt, key) of every call, as it arrived.
    calls: Vec<(u32, Key)>,
    /// Outputs of the committed effects.
    effects: Vec<Value>,
    /// Calls answered.
    answered: usize,
}

/// A connector with one action, `payout`, of the class given: each call takes the next script entry (waiting for the
/// test's answer); past the script it commits at once and answers `{"id": "auto-N"}`. Lookups find nothing.
struct Gated {
    actions: Vec<ActionSpec>,
    state: Mutex<GatedState>,
}

impl Gated {
    fn new(spec: ActionSpec) -> Arc<Self> {
        Arc::new(Self { actions: vec![spec], state: Mutex::new(GatedState::default()) })
    }
    /// The next call waits for the answer sent through the returned sender.
    fn gate(&self) -> oneshot::Sender<Answer> {
        let (tx, rx) = oneshot::channel();
        self.state.lock().unwrap().script.push_back(Entry::Wait(rx));
        tx
    }
    fn calls(&self) -> usize {
        self.state.lock().unwrap().calls.len()
    }
    fn answered(&self) -> usize {
        self.state.lock().unwrap().answered
    }
    fn effects(&self) -> Vec<Value> {
        self.state.lock().unwrap().effects.clone()
    }
}

impl Connector for Gated {
    fn name(&self) -> &str {
        "bank"
    }
    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }
    fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            let entry = {
                let mut state = self.state.lock().unwrap();
                state.calls.push((request.attempt, *request.key));
                state.script.pop_front()
            };
            let answer = match entry {
                Some(Entry::Wait(rx)) => rx.await.expect("the test answers every gated call"),
                None => {
                    let n = self.state.lock().unwrap().effects.len() + 1;
                    Answer::Apply(json!({ "id": format!("auto-{n}") }))
                }
            };
            let mut state = self.state.lock().unwrap();
            state.answered += 1;
            match answer {
                Answer::Apply(output) => {
                    state.effects.push(output.clone());
                    Outcome::Applied(output.into())
                }
                Answer::Fail => Outcome::NotApplied(NotApplied {
                    error: "503 unavailable".to_string(),
                    retryable: true,
                    retry_after_ms: None,
                }),
                Answer::Timeout => Outcome::Indeterminate("timeout".to_string()),
            }
        })
    }
    fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        Box::pin(async move { LookupOutcome::NotFound })
    }
}

/// How B comes to pause the run at the key A stalled on.
#[derive(Debug, Clone, Copy)]
enum Why {
    /// An at-most-once action: an expired lease is an unknown outcome, never retried automatically.
    AtMostOnce,
    /// A keyed action without a lookup, past its key retention.
    KeyedPastRetention,
    /// A lookup-before-create action whose attempts ran out (B allows one).
    LookupAttemptsExhausted,
}

const WHYS: [Why; 3] = [Why::AtMostOnce, Why::KeyedPastRetention, Why::LookupAttemptsExhausted];

impl Why {
    fn spec(self) -> ActionSpec {
        match self {
            Why::AtMostOnce => at_most_once("payout"),
            Why::KeyedPastRetention => keyed("payout", 1_000, false),
            Why::LookupAttemptsExhausted => lookup("payout", 0),
        }
    }
    fn config(self, worker: &str) -> EngineConfig {
        let mut config = config(worker);
        if let Why::LookupAttemptsExhausted = self {
            config.retry.attempt_count_max = 1;
        }
        config
    }
}

/// pay (the gated action) then notify (keyed), which sends the id of pay's output: what a later step saw.
fn pay_then_notify() -> Value {
    json!({"name": "wf", "steps": [
        {"id": "pay", "action": "bank.payout", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "notify", "action": "api.notify", "inputs": {"paid": "{{steps.pay.output.id}}"}}
    ]})
}

struct Staged {
    why: Why,
    clock: Arc<JumpClock>,
    ledger: Arc<dyn Ledger>,
    bank: Arc<Gated>,
    api: Arc<Scripted>,
    /// A's drive, stalled in its payout call.
    a: Option<tokio::task::JoinHandle<Result<RunStatus, Error>>>,
    /// Releases A's call with its (late) answer.
    release: Option<oneshot::Sender<Answer>>,
    /// The key the run paused at.
    key: Key,
}

impl Staged {
    fn engine(&self, worker: &str, recorder: Arc<Recorder>) -> Engine {
        let connectors = [self.bank.clone() as Arc<dyn Connector>, self.api.clone() as Arc<dyn Connector>];
        engine_on(
            self.clock.clone(),
            self.why.config(worker),
            self.ledger.clone(),
            recorder,
            &connectors,
            &[],
            &[pay_then_notify()],
        )
    }

    /// A's answer arrives late; A's drive ends (its next claim is refused: the run is not its own any more) with the
    /// run's status as it then stands.
    async fn late_answer(&mut self, answer: Answer) -> Result<RunStatus, Error> {
        let answered = self.bank.answered();
        self.release.take().expect("A's call is held").send(answer).expect("A is waiting");
        wait_for(|| self.bank.answered() > answered).await;
        let a = self.a.take().expect("A's drive");
        tokio::time::timeout(Duration::from_secs(10), a).await.expect("A's drive ends").expect("joined")
    }

    /// Files ann's `resolution` about the paused key now, as a build before schema version 5 did: not saying what it
    /// was made on (`seen: None`).
    fn file_as_an_older_build(&self, resolution: Resolution) {
        let older = ResolutionRecord {
            run_id: "r".into(),
            key: self.key,
            resolution,
            by: "ann".into(),
            at_ms: self.clock.now_ms(),
            seen: None,
        };
        self.ledger.record_resolution(&older, RunStatus::Running, None).unwrap();
    }

    fn record(&self) -> engine::ledger::StepRecord {
        self.ledger.get(&self.key).unwrap().expect("the paused key's record")
    }

    fn run(&self) -> engine::ledger::RunRecord {
        self.ledger.get_run("r").unwrap().unwrap()
    }

    /// What the notify step sent as pay's output id, per notify effect.
    fn notified(&self) -> Vec<Value> {
        self.api.effects().iter().map(|e| e.inputs["paid"].clone()).collect()
    }
}

async fn wait_for(done: impl Fn() -> bool) {
    for _ in 0..10_000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("not reached within 10 s");
}

/// A drives run `r`, claims pay's key (fence 1) and calls; the call hangs. The clock passes A's lease. B drives the
/// run and pauses it at pay's key, as the class says, without claiming it.
async fn stage(name: &'static str, ledger: Arc<dyn Ledger>, why: Why) -> Staged {
    let clock = JumpClock::new(1_000_000);
    let bank = Gated::new(why.spec());
    let api = Scripted::new("api", vec![keyed("notify", 3_600_000, false)], &[]);
    let release = bank.gate();
    let connectors = [bank.clone() as Arc<dyn Connector>, api.clone() as Arc<dyn Connector>];
    let a = Arc::new(engine_on(
        clock.clone(),
        EngineConfig { lease_ms: SHORT_LEASE_MS, ..config("wA") },
        ledger.clone(),
        Recorder::new(),
        &connectors,
        &[],
        &[pay_then_notify()],
    ));
    a.create_run("wf", "r", &engine::doc!({"amount": 5})).unwrap();
    let a = {
        let a = a.clone();
        tokio::spawn(async move { a.drive("r").await })
    };
    wait_for(|| bank.calls() == 1).await;
    clock.advance(5_000);
    let mut staged = Staged { why, clock, ledger, bank, api, a: Some(a), release: Some(release), key: Key([0; 32]) };
    let b = staged.engine("wB", Recorder::new());
    assert_eq!(b.drive("r").await.unwrap(), RunStatus::Paused, "{name} {why:?}: B pauses");
    let reason = staged.run().reason.expect("a pause reason");
    staged.key = paused_key(&reason).expect("the key paused at");
    let record = staged.record();
    assert_eq!((record.status, record.fence, record.owner.as_str()), (Status::Started, 1, "wA"), "{name} {why:?}");
    assert_eq!(staged.bank.calls(), 1, "{name} {why:?}: B sent nothing");
    staged
}

fn every_case() -> Vec<(&'static str, Arc<dyn Ledger>, Why)> {
    let mut out = Vec::new();
    for why in WHYS {
        for (name, ledger) in ledgers() {
            out.push((name, ledger, why));
        }
    }
    out
}

fn text(bytes: Option<&[u8]>) -> Option<String> {
    bytes.map(|b| String::from_utf8_lossy(b).into_owned())
}

const LATE_X: &str = r#"{"id":"late-X"}"#;

fn late_x() -> Answer {
    Answer::Apply(json!({"id": "late-X"}))
}

fn person_y() -> Resolution {
    Resolution::MarkDone { output: json!({"id": "person-Y"}) }
}

/// A's late "applied" lands on the paused key (accepted: the fence did not move); a person then decides retry. The
/// drive replays the stored output: the payout is not sent again, and the later step sees A's output. (A succeeded
/// key is final, so the retry has nothing left to send; no `resolved` event is reported for it.)
#[tokio::test]
async fn a_late_applied_answer_then_a_retry_replays_it_and_sends_nothing_again() {
    for (name, ledger, why) in every_case() {
        let mut s = stage(name, ledger, why).await;
        let a = s.late_answer(late_x()).await;
        assert_eq!(a.unwrap(), RunStatus::Paused, "{name} {why:?}: A's drive stops; the run stays paused");
        let record = s.record();
        assert_eq!((record.status, record.fence), (Status::Succeeded, 1), "{name} {why:?}: A's late write accepted");
        assert_eq!(text(record.output.as_deref()).as_deref(), Some(LATE_X), "{name} {why:?}");
        assert_eq!(s.run().status, RunStatus::Paused, "{name} {why:?}");

        let recorder = Recorder::new();
        let c = s.engine("wC", recorder.clone());
        assert_eq!(c.resolve("r", Resolution::Retry, "ann").await.unwrap(), RunStatus::Succeeded, "{name} {why:?}");
        assert_eq!(s.bank.calls(), 1, "{name} {why:?}: the payout was not sent again");
        assert_eq!(s.bank.effects().len(), 1, "{name} {why:?}");
        assert_eq!(s.notified(), [json!("late-X")], "{name} {why:?}: the later step saw A's output");
        assert_eq!(text(s.record().output.as_deref()).as_deref(), Some(LATE_X), "{name} {why:?}");
        assert_eq!(recorder.count("replayed pay"), 1, "{name} {why:?}: {:?}", recorder.lines());
    }
}

/// A's late "applied" (output X) lands; a person, who read the pause, marks the step done with another output Y.
/// Nothing is sent again, the stored X stands (a succeeded key is final, and X is the API's own answer) and later
/// steps see X. The decision is filed with the status the person saw, `succeeded`, which `flow show` lists beside it.
/// (Known gap: the decision is accepted, and its output Y is not used; nothing tells the person so.)
#[tokio::test]
async fn a_mark_done_over_a_late_applied_answer_keeps_the_apis_output() {
    for (name, ledger, why) in every_case() {
        let mut s = stage(name, ledger, why).await;
        s.late_answer(late_x()).await.unwrap();
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.resolve("r", person_y(), "ann").await.unwrap(), RunStatus::Succeeded, "{name} {why:?}");
        assert_eq!(s.bank.calls(), 1, "{name} {why:?}: nothing sent again");
        assert_eq!(text(s.record().output.as_deref()).as_deref(), Some(LATE_X), "{name} {why:?}: X stands");
        assert_eq!(s.notified(), [json!("late-X")], "{name} {why:?}");
        let filed = s.ledger.resolutions("r").unwrap();
        let seen: Vec<_> = filed.iter().map(|r| r.seen.map(|seen| (seen.status, seen.fence))).collect();
        assert_eq!(seen, [Some((Status::Succeeded, 1))], "{name} {why:?}");
    }
}

/// A's late definite failure lands on the paused key (failed, fence 1). Each decision made after it does what the
/// person decided, with the failure in view: retry sends once, mark-done adopts the person's output (they saw the
/// failure, and know of an effect the API does not: a payout made by hand), abort fails the run. Also where the
/// failure leaves the key failed for good (a lookup action whose attempts ran out): the drive would fail the run, and
/// applies the person's decision instead (before the fix, the decision was dropped and the run failed).
#[tokio::test]
async fn a_late_definite_failure_then_each_decision() {
    for decision in [Resolution::Retry, person_y(), Resolution::Abort] {
        for (name, ledger, why) in every_case() {
            // A keyed action's definite failure lets the drive retry the key on its own (the person's output is
            // not used): covered by `a_keyed_step_retries_on_its_own_over_a_mark_done`.
            if let (Why::KeyedPastRetention, Resolution::MarkDone { .. }) = (why, &decision) {
                continue;
            }
            let mut s = stage(name, ledger, why).await;
            assert_eq!(s.late_answer(Answer::Fail).await.unwrap(), RunStatus::Paused, "{name} {why:?}");
            assert_eq!(s.bank.calls(), 1, "{name} {why:?}: A sent nothing more (the run is not its own)");
            let record = s.record();
            assert_eq!((record.status, record.fence), (Status::Failed, 1), "{name} {why:?}");
            let c = s.engine("wC", Recorder::new());
            let status = c.resolve("r", decision.clone(), "ann").await.unwrap();
            let record = s.record();
            let case = format!("{name} {why:?} {}", decision.name());
            match &decision {
                Resolution::Retry => {
                    assert_eq!(status, RunStatus::Succeeded, "{case}");
                    assert_eq!((s.bank.calls(), s.bank.effects().len()), (2, 1), "{case}: sent once more, one effect");
                    assert_eq!(record.fence, 2, "{case}");
                    assert_eq!(s.notified(), [json!("auto-1")], "{case}");
                }
                Resolution::MarkDone { .. } => {
                    assert_eq!(status, RunStatus::Succeeded, "{case}");
                    assert_eq!(s.bank.calls(), 1, "{case}");
                    assert_eq!(text(record.output.as_deref()).as_deref(), Some(r#"{"id":"person-Y"}"#), "{case}");
                    assert_eq!(s.notified(), [json!("person-Y")], "{case}");
                }
                Resolution::Abort => {
                    assert_eq!(status, RunStatus::Failed, "{case}");
                    assert_eq!(s.run().reason.as_deref(), Some("aborted by ann"), "{case}");
                    assert_eq!(s.bank.calls(), 1, "{case}");
                    assert!(s.notified().is_empty(), "{case}");
                }
            }
        }
    }
}

/// A person reads the pause ("may have applied") and files mark-done; before a drive applies it, A's late answer
/// lands: the API definitely did NOT apply the payout. The decision's premise is gone, so the run pauses again, with
/// the failure in its reason, for a new decision; applying it would record a success with no payout behind it (I2),
/// which is what happened before the fix. A new decision (retry) then sends the payout once. (At-most-once only: for
/// the keyed and lookup classes the late failure lets A's drive retry on its own, which is right.)
#[tokio::test]
async fn a_mark_done_filed_before_a_late_definite_failure_pauses_the_run_again() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::AtMostOnce).await;
        record_resolution(s.ledger.as_ref(), "r", &person_y(), "ann", s.clock.now_ms()).unwrap();
        let seen = s.ledger.resolutions("r").unwrap()[0].seen.map(|seen| (seen.status, seen.fence));
        assert_eq!(seen, Some((Status::Started, 1)), "{name}");
        let a = s.late_answer(Answer::Fail).await;
        assert_eq!(a.unwrap(), RunStatus::Paused, "{name}: A's drive found the decision, and paused again");
        let record = s.record();
        assert_eq!(record.status, Status::Failed, "{name}: no success recorded without an effect");
        assert!(s.bank.effects().is_empty() && s.notified().is_empty(), "{name}");
        let run = s.run();
        let reason = run.reason.as_deref().unwrap_or_default();
        assert_eq!(run.status, RunStatus::Paused, "{name}");
        assert!(
            reason.contains(
                "the attempt's answer came after ann decided to mark the step done, and says it definitely \
                             did not apply (503 unavailable): a person must decide again"
            ),
            "{name}: {reason}"
        );
        assert_eq!(paused_key(reason), Some(s.key), "{name}: {reason}");
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.resolve("r", Resolution::Retry, "bo").await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!((s.bank.calls(), s.bank.effects().len()), (2, 1), "{name}: sent once more, one payout");
        assert_eq!(s.notified(), [json!("auto-1")], "{name}");
    }
}

/// The same history with the mark-done filed by an older build, which recorded no `seen` (a ledger before schema
/// version 5): it does not say whether the failure was known when it was made, so over the failure it is not applied
/// either, and the run pauses again, saying why. Over the key still in doubt it is applied, as before.
#[tokio::test]
async fn an_older_builds_mark_done_is_not_applied_over_a_definite_failure() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::AtMostOnce).await;
        s.file_as_an_older_build(person_y());
        s.ledger.complete(&s.key, 1, Completion::Failed { error: "503 unavailable".into() }, s.clock.now_ms()).unwrap();
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.drive("r").await.unwrap(), RunStatus::Paused, "{name}");
        let reason = s.run().reason.unwrap_or_default();
        assert!(
            reason.contains(
                "the decision to mark the step done by ann was filed by an older build, which did not record what it \
                 was made on, and the step is recorded as definitely not applied (503 unavailable): a person must \
                 decide again"
            ),
            "{name}: {reason}"
        );
        assert_eq!((s.record().status, s.bank.effects().len(), s.notified().len()), (Status::Failed, 0, 0), "{name}");
        let _ = s.late_answer(Answer::Fail).await;
    }
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::AtMostOnce).await;
        s.file_as_an_older_build(person_y());
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.drive("r").await.unwrap(), RunStatus::Succeeded, "{name}: the key in doubt takes the decision");
        assert_eq!(s.notified(), [json!("person-Y")], "{name}");
        let _ = s.late_answer(Answer::Fail).await;
    }
}

/// A keyed action past its retention, A's late definite failure, then a mark-done: the drive retries the key on its
/// own (the failure is definite, and the class retries), so the payout is made once and the person's output is not
/// used.
#[tokio::test]
async fn a_keyed_step_retries_on_its_own_over_a_mark_done() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::KeyedPastRetention).await;
        s.late_answer(Answer::Fail).await.unwrap();
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.resolve("r", person_y(), "ann").await.unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!((s.bank.calls(), s.bank.effects().len()), (2, 1), "{name}: sent once more, one payout");
        assert_eq!(s.notified(), [json!("auto-1")], "{name}");
    }
}

/// A retry filed before A's late answer lands. Late "applied": nothing is sent again and the stored output is used.
/// Late definite failure: the payout is sent once more, by the person's decision.
#[tokio::test]
async fn a_retry_filed_before_the_late_answer() {
    for applied in [true, false] {
        for (name, ledger, why) in every_case() {
            let mut s = stage(name, ledger, why).await;
            record_resolution(s.ledger.as_ref(), "r", &Resolution::Retry, "ann", s.clock.now_ms()).unwrap();
            let _ = s.late_answer(if applied { late_x() } else { Answer::Fail }).await.unwrap();
            let c = s.engine("wC", Recorder::new());
            resume_all(&c).await;
            let case = format!("{name} {why:?} late {}", if applied { "applied" } else { "failure" });
            assert_eq!(s.run().status, RunStatus::Succeeded, "{case}");
            assert_eq!(s.bank.effects().len(), 1, "{case}: one payout");
            assert_eq!(s.bank.calls(), if applied { 1 } else { 2 }, "{case}");
            assert_eq!(s.notified().len(), 1, "{case}: notified once");
        }
    }
}

/// A's late answer after the person's decision was applied and another worker drove the key: refused (fenced),
/// whatever it brings, and the newer outcome stands. Retry: the claim moved the fence (A's effect and the retry's are
/// two, as the person decided; A's answer that it applied is kept beside the key, `late_applied_marker`, so that the
/// second effect is on record: it was dropped until stop 51). Mark-done: the
/// person's output stands. Mid-flight (C's retry call not yet answered): every fence-1 write is refused. Abort: no
/// claim, so A's late "applied" is accepted on the key, and the run stays failed, "aborted by ann".
#[tokio::test]
async fn a_late_answer_after_the_decision_was_applied_is_fenced() {
    for (name, ledger, why) in every_case() {
        for decision in [Resolution::Retry, person_y(), Resolution::Abort] {
            let case = format!("{name} {why:?} {}", decision.name());
            let mut s = stage(name, ledger.clone(), why).await;
            // `ledgers()` is shared by the three decisions: the run is forgotten after each.
            let c = s.engine("wC", Recorder::new());
            let status = c.resolve("r", decision.clone(), "ann").await.unwrap();
            let before = s.record();
            assert_eq!(s.late_answer(late_x()).await.unwrap(), status, "{case}: A's drive ends with the run's status");
            let after = s.record();
            match &decision {
                Resolution::Abort => {
                    assert_eq!(status, RunStatus::Failed, "{case}");
                    assert_eq!((after.status, after.fence), (Status::Succeeded, 1), "{case}: accepted");
                    assert_eq!(s.run().reason.as_deref(), Some("aborted by ann"), "{case}: the abort stands");
                    assert!(s.notified().is_empty(), "{case}");
                }
                _ => {
                    assert_eq!(status, RunStatus::Succeeded, "{case}");
                    assert_eq!(after, before, "{case}: the newer outcome stands");
                    assert_eq!(before.fence, 2, "{case}");
                    // A's answer that it applied is kept beside the key, under A's fence.
                    let kept = s.ledger.get_plan(&late_applied_marker(&s.key, 1)).unwrap();
                    assert_eq!(text(kept.as_deref()).as_deref(), Some(LATE_X), "{case}: A's late answer is kept");
                    let direct = s.ledger.complete(&s.key, 1, Completion::Failed { error: "late".into() }, 0);
                    assert!(matches!(direct, Err(engine::ledger::Error::Fenced { .. })), "{case}: {direct:?}");
                    assert_eq!(s.notified().len(), 1, "{case}");
                }
            }
            s.ledger.forget_run("r").unwrap();
        }
    }
}

/// The person's retry is being sent by C (claimed, fence 2, call unanswered) when A's late answer arrives: every
/// write under fence 1 is refused, and C's answer is the key's.
#[tokio::test]
async fn a_late_answer_while_the_persons_retry_is_in_flight_is_fenced() {
    for (name, ledger, why) in every_case() {
        let mut s = stage(name, ledger, why).await;
        let c_release = s.bank.gate();
        let c = Arc::new(s.engine("wC", Recorder::new()));
        let c_drive = {
            let c = c.clone();
            tokio::spawn(async move { c.resolve("r", Resolution::Retry, "ann").await })
        };
        wait_for(|| s.bank.calls() == 2).await;
        for completion in [
            Completion::Succeeded { output: LATE_X.as_bytes().to_vec() },
            Completion::Failed { error: "late".into() },
            Completion::Unknown { reason: "late".into() },
        ] {
            let direct = s.ledger.complete(&s.key, 1, completion, s.clock.now_ms());
            assert!(matches!(direct, Err(engine::ledger::Error::Fenced { .. })), "{name} {why:?}: {direct:?}");
        }
        let record = s.record();
        assert_eq!((record.status, record.fence, record.owner.as_str()), (Status::Started, 2, "wC"), "{name} {why:?}");
        c_release.send(Answer::Apply(json!({"id": "retry-Z"}))).unwrap();
        assert_eq!(c_drive.await.unwrap().unwrap(), RunStatus::Succeeded, "{name} {why:?}");
        assert_eq!(s.late_answer(late_x()).await.unwrap(), RunStatus::Succeeded, "{name} {why:?}");
        assert_eq!(text(s.record().output.as_deref()).as_deref(), Some(r#"{"id":"retry-Z"}"#), "{name} {why:?}");
        assert_eq!(s.notified(), [json!("retry-Z")], "{name} {why:?}");
    }
}

/// A SQLite ledger in a file `flow.db` of `dir` (no fsync per commit: a test fixture), for the `flow` CLI to read.
fn file_ledger(dir: &std::path::Path) -> (std::path::PathBuf, Arc<dyn Ledger>) {
    let path = dir.join("flow.db");
    let options = engine::ledger::sqlite::Options {
        synchronous: engine::ledger::sqlite::Synchronous::Normal,
        ..Default::default()
    };
    let ledger: Arc<dyn Ledger> = Arc::new(engine::ledger::sqlite::SqliteLedger::open(&path, options).unwrap());
    (path, ledger)
}

/// Through the admin CLI: a person's retry is sent and applied, and then A's late answer says A's attempt applied
/// too (two payouts at an at-most-once API). `flow show` lists A's answer beside the key (`late_applied`, with A's
/// fence), so the second effect is on record, and an answer whose output cannot be stored as why. (Stop 51: it was
/// recorded nowhere.)
#[tokio::test]
async fn flow_show_lists_a_late_applied_answer_fenced_off_by_a_retry() {
    let unstorable = json!({"id": "late-X", "ref": 18446744073709551615u64});
    for late in [json!({"id": "late-X"}), unstorable] {
        let dir = tempfile::tempdir().unwrap();
        let (path, ledger) = file_ledger(dir.path());
        let file = path.to_str().unwrap();
        let mut s = stage("file", ledger, Why::AtMostOnce).await;
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.resolve("r", Resolution::Retry, "ann").await.unwrap(), RunStatus::Succeeded);
        assert_eq!(s.late_answer(Answer::Apply(late.clone())).await.unwrap(), RunStatus::Succeeded);
        assert_eq!(s.bank.effects().len(), 2, "A's payout and the retry's");
        let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "r"]);
        assert_eq!(code, 0, "{stderr}");
        let shown: Value = serde_json::from_str(&stdout).unwrap();
        let key = s.key.to_string();
        let step = shown["steps"].as_array().unwrap().iter().find(|step| step["key"] == json!(key)).unwrap();
        let kept = &step["late_applied"];
        assert_eq!((&kept[0]["fence"], kept.as_array().map(Vec::len)), (&json!(1), Some(1)), "{stdout}");
        if late["ref"].is_null() {
            assert_eq!(kept[0], json!({"fence": 1, "output": {"id": "late-X"}}), "{stdout}");
        } else {
            let why = kept[0]["unstorable"].as_str().unwrap_or_default();
            assert!(why.starts_with("[unstorable] the API answered that the step applied"), "{stdout}");
            assert!(kept[0].get("output").is_none(), "{stdout}");
        }
        assert_eq!(step["fence"], json!(2), "{stdout}");
        assert_eq!(shown["plans"], json!([]), "the marker is shown with its key, not as a plan: {stdout}");
    }
}

/// The same when A's late answer holds an output that cannot be stored: what is kept is why, with the answer, marked
/// `[unstorable]`. (QA, stop 51: the first version kept nothing then.)
#[tokio::test]
async fn a_late_applied_answer_that_cannot_be_stored_is_kept_as_why() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::AtMostOnce).await;
        let c = s.engine("wC", Recorder::new());
        assert_eq!(c.resolve("r", Resolution::Retry, "ann").await.unwrap(), RunStatus::Succeeded, "{name}");
        let late = Answer::Apply(json!({"id": "late-X", "ref": 18446744073709551615u64}));
        assert_eq!(s.late_answer(late).await.unwrap(), RunStatus::Succeeded, "{name}");
        let kept = text(s.ledger.get_plan(&late_applied_marker(&s.key, 1)).unwrap().as_deref()).unwrap_or_default();
        assert!(kept.starts_with("[unstorable] the API answered that the step applied"), "{name}: {kept}");
        assert!(kept.contains(r#""ref":18446744073709551615"#), "{name}: {kept}");
    }
}

/// Through the admin CLI, on a ledger file: `flow show` puts A's late success beside the pause (`paused_here`,
/// status succeeded, A's output), `flow resolve --retry` records the decision (`flow show` lists the status it was
/// made on), and the next drive replays the stored output without a second payout.
#[tokio::test]
async fn a_late_success_through_flow_show_and_flow_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let (path, ledger) = file_ledger(dir.path());
    let file = path.to_str().unwrap();
    let mut s = stage("file", ledger, Why::AtMostOnce).await;
    s.late_answer(late_x()).await.unwrap();
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "r"]);
    assert_eq!(code, 0, "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    let here: Vec<&Value> = shown["steps"].as_array().unwrap().iter().filter(|s| s["paused_here"] == true).collect();
    assert_eq!(here.len(), 1, "{stdout}");
    assert_eq!((&here[0]["status"], &here[0]["output"]), (&json!("succeeded"), &json!({"id": "late-X"})), "{stdout}");
    assert_eq!(shown["status"], json!("paused"), "{stdout}");
    let (code, stdout, stderr) = flow(&["resolve", "--ledger", file, "--run", "r", "--retry", "--by", "ann"]);
    assert_eq!((code, stdout.as_str()), (0, "run r is now running\n"), "{stderr}");
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "r"]);
    assert_eq!(code, 0, "{stderr}");
    let shown: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["decisions"][0]["seen_status"], json!("succeeded"), "{stdout}");
    assert_eq!(shown["decisions"][0]["seen_fence"], json!(1), "{stdout}");
    let c = s.engine("wC", Recorder::new());
    assert_eq!(resume_all(&c).await, [("r".to_string(), RunStatus::Succeeded)]);
    assert_eq!(s.bank.calls(), 1, "not sent again");
    assert_eq!(s.notified(), [json!("late-X")]);
}

/// A's late definite failure lands on a key paused because its attempts ran out (a lookup action); a person then
/// decides retry. The drive finds the key failed with its attempts used up, which fails the run, but a person's retry
/// allows exactly one more attempt whatever the class and count: the payout is sent once more. (Before the fix the
/// decision was dropped and the run failed, "attempts exhausted, none applied".)
#[tokio::test]
async fn a_retry_after_a_late_failure_on_a_key_whose_attempts_ran_out_is_applied() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::LookupAttemptsExhausted).await;
        s.late_answer(Answer::Fail).await.unwrap();
        assert_eq!(s.record().status, Status::Failed, "{name}");
        let recorder = Recorder::new();
        let c = s.engine("wC", recorder.clone());
        let status = c.resolve("r", Resolution::Retry, "ann").await.unwrap();
        assert_eq!((status, s.bank.calls(), s.bank.effects().len()), (RunStatus::Succeeded, 2, 1), "{name}");
        assert_eq!(recorder.count("resolved"), 1, "{name}: {:?}", recorder.lines());
    }
}

/// A second drive of a run whose key another drive's attempt holds (a caller's retry of `start_run`, a run dispatched
/// twice) answers soon after that attempt's end, not at its lease's expiry: it looks at the key again each time the
/// attempt's age doubles from 50 ms, up to 5 s (`LEASE_WAIT_FIRST_LOOK_MS`). (Before, it slept out the whole lease,
/// 30 s by default.) Nothing is sent twice.
#[tokio::test]
async fn a_second_drive_waits_for_the_first_attempt_not_for_its_lease() {
    second_drive_waits_for_the_first_attempt(0).await;
}

/// The same with the first drive's host clock 60 s ahead of the second's: its attempt is stamped 60 s in the second
/// drive's future. The second drive counts the attempt's age from when it first saw it, and still answers soon after
/// the attempt's end. (Before, it first looked when its own clock reached the stamp plus 50 ms: a minute later.)
#[tokio::test]
async fn a_second_drive_waits_for_an_attempt_stamped_by_a_clock_ahead_of_its_own() {
    second_drive_waits_for_the_first_attempt(60_000).await;
}

/// Drive A (its clock `a_ahead_ms` ahead of B's) holds run `r`'s payout key in a hung call; drive B of the same run
/// must end within 10 s of A's answer, both succeeded, nothing sent twice.
async fn second_drive_waits_for_the_first_attempt(a_ahead_ms: u64) {
    for (name, ledger) in ledgers() {
        let clock = JumpClock::new(1_000_000);
        let a_clock = JumpClock::new(1_000_000);
        a_clock.advance(a_ahead_ms);
        let bank = Gated::new(keyed("payout", 3_600_000, false));
        let api = Scripted::new("api", vec![keyed("notify", 3_600_000, false)], &[]);
        let release = bank.gate();
        let connectors = [bank.clone() as Arc<dyn Connector>, api.clone() as Arc<dyn Connector>];
        let worker = |id: &str, clock: &Arc<JumpClock>| {
            Arc::new(engine_on(
                clock.clone(),
                EngineConfig { lease_ms: 30_000, ..config(id) },
                ledger.clone(),
                Recorder::new(),
                &connectors,
                &[],
                &[pay_then_notify()],
            ))
        };
        let (a, b) = (worker("wA", &a_clock), worker("wB", &clock));
        a.create_run("wf", "r", &engine::doc!({"amount": 5})).unwrap();
        let a_drive = tokio::spawn({
            let a = a.clone();
            async move { a.drive("r").await }
        });
        wait_for(|| bank.calls() == 1).await;
        let b_drive = tokio::spawn({
            let b = b.clone();
            async move { b.drive("r").await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        release.send(Answer::Apply(json!({"id": "po_1"}))).expect("A waits for its answer");
        assert_eq!(a_drive.await.unwrap().unwrap(), RunStatus::Succeeded, "{name}");
        let b_ended = tokio::time::timeout(Duration::from_secs(10), b_drive).await;
        let b_status = b_ended.unwrap_or_else(|_| panic!("{name}: B still waits 10 s after A's attempt ended"));
        assert_eq!(b_status.unwrap().unwrap(), RunStatus::Succeeded, "{name}");
        assert_eq!((bank.calls(), bank.effects().len(), api.effects().len()), (1, 1, 1), "{name}: nothing sent twice");
    }
}

/// A's payout attempt is in doubt (`started`, its lease expired) when ann files `decision`; A's answer, `answer` under
/// fence 1, lands between the next drive's read of the key and its claim (when the drive reads the run's decisions).
/// Drives the run once with worker C: the stage, C's recorded events and the status the drive ended with.
async fn decided_then_answered_before_the_claim(
    decision: Resolution,
    answer: Completion,
) -> (Staged, Arc<Recorder>, RunStatus) {
    let hooked = Hooked::new(memory_ledger());
    let s = stage("memory (hooked)", hooked.clone(), Why::AtMostOnce).await;
    assert_eq!(s.record().status, Status::Started);
    record_resolution(s.ledger.as_ref(), "r", &decision, "ann", s.clock.now_ms()).unwrap();
    let key = s.key;
    Hooked::on(&hooked.before_resolutions, move |l| l.complete(&key, 1, answer, 0).unwrap());
    let recorder = Recorder::new();
    let status = s.engine("wC", recorder.clone()).drive("r").await.unwrap();
    assert!(hooked.before_resolutions.lock().unwrap().is_none(), "the answer landed in between");
    (s, recorder, status)
}

/// ann marks the step done while the at-most-once payout's attempt is in doubt (`started`, its lease expired). The
/// attempt's answer, a definite failure, lands between the drive's read of the key and its mark-done's claim (here:
/// when the drive reads the run's decisions, in between). The run pauses again, as when the failure lands before the
/// read (`a_mark_done_filed_before_a_late_definite_failure_pauses_the_run_again`), and the failure stays on record.
/// (Found by QA, stop 49: the claim checked only the fence, which the failure keeps, so the step was marked succeeded
/// over the failure with ann's output and no payout behind it, I2. Once that was mended, the drive still reported the
/// decision as applied, `resolved mark-done`, before its claim conflicted.)
#[tokio::test]
async fn a_late_failure_between_the_read_and_the_mark_dones_claim_pauses_the_run_again() {
    let failed = Completion::Failed { error: "503 unavailable".into() };
    let (mut s, recorder, status) = decided_then_answered_before_the_claim(person_y(), failed).await;
    // The decision was not applied, and is not reported as applied.
    assert_eq!(recorder.count("resolved "), 0, "{:?}", recorder.lines());
    assert_eq!((status, s.bank.effects().len()), (RunStatus::Paused, 0));
    let reason = s.run().reason.unwrap_or_default();
    assert!(reason.contains("a person must decide again"), "{reason}");
    assert_eq!((s.record().status, s.record().error.as_deref()), (Status::Failed, Some("503 unavailable")));
    assert!(s.notified().is_empty(), "notify ran on a payout that never happened: {:?}", s.notified());
    let _ = s.late_answer(Answer::Fail).await;
}

/// ann decides retry while the at-most-once payout's attempt is in doubt (`started`, its lease expired). The attempt's
/// answer, applied, lands between the drive's read of the key and the retry's claim. The claim conflicts; the drive
/// reads the key again and replays the success: nothing is sent again, the later step sees A's output, and the retry,
/// which was never sent, is not reported as applied. (Left open in stop 50: `resolved retry` was reported before the
/// retry's claim.)
#[tokio::test]
async fn a_late_success_between_the_read_and_the_retrys_claim_is_replayed_and_the_retry_not_reported() {
    let succeeded = Completion::Succeeded { output: LATE_X.as_bytes().to_vec() };
    let (mut s, recorder, status) = decided_then_answered_before_the_claim(Resolution::Retry, succeeded).await;
    assert_eq!((status, s.bank.calls()), (RunStatus::Succeeded, 1), "{:?}", recorder.lines());
    assert_eq!(recorder.count("resolved "), 0, "{:?}", recorder.lines());
    assert_eq!(s.notified(), [json!("late-X")]);
    let _ = s.late_answer(Answer::Fail).await;
}

/// ann decides retry while the at-most-once payout's attempt is in doubt (`started`, its lease expired): nothing says
/// yet that it applied, so the decision is filed. The attempt's answer lands between the drive's read of the key and
/// the retry's claim: applied, with an output that cannot be stored (`[unstorable]`). The retry is withdrawn and the
/// run pauses again, saying why: the payout is not sent again, and the retry is not reported as applied. (Found by
/// QA, stop 51: the drive claimed and sent it, two payouts.)
#[tokio::test]
async fn a_late_unstorable_answer_between_the_read_and_the_retrys_claim_withdraws_the_retry() {
    let reason = format!(
        "{}the API answered that the step applied, but its output cannot be stored; the answer: {{\"id\":1e400}}",
        engine::decide::UNSTORABLE_MARK
    );
    let unknown = Completion::Unknown { reason };
    let (mut s, recorder, status) = decided_then_answered_before_the_claim(Resolution::Retry, unknown).await;
    assert_eq!((status, s.bank.calls()), (RunStatus::Paused, 1), "{:?}", recorder.lines());
    assert_eq!(recorder.count("resolved "), 0, "{:?}", recorder.lines());
    let reason = s.run().reason.unwrap_or_default();
    assert!(reason.contains("the decision to retry would send again a step the API answered as applied"), "{reason}");
    assert!(reason.contains(r#"the answer: {"id":1e400}"#), "the answer to mark it done from: {reason}");
    let _ = s.late_answer(Answer::Fail).await;
}

/// Two drives of the run take ann's retry at once (`resolve` drives it while a worker resumes
/// it). C's claim wins; D's loses and D keeps its `person_retry` flag, then waits on C's lease. C's retry times out
/// (unknown) and C pauses the run, its pause's commit slow. D's lease wait now looks within ~100 ms of C's attempt
/// (before: at the lease's expiry, long after the pause): D reads the key unknown, decides with `person_retry` still
/// set, claims while the run is still running and sends the at-most-once payout a third time, after an indeterminate
/// outcome, on no one's decision (I4). Expected: two calls (A's and the one retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drive_that_lost_a_persons_retry_claim_does_not_send_again() {
    let inner = memory_ledger();
    let hooked = Hooked::new(inner.clone());
    let mut s = stage("memory (hooked)", hooked.clone(), Why::AtMostOnce).await;
    let _ = s.late_answer(Answer::Timeout).await;
    assert_eq!(s.record().status, Status::Unknown);
    record_resolution(s.ledger.as_ref(), "r", &Resolution::Retry, "ann", s.clock.now_ms()).unwrap();
    let gate = s.bank.gate();
    *hooked.resolutions_barrier.lock().unwrap() = Some((Arc::new(std::sync::Barrier::new(2)), 0));
    *hooked.stall_pause.lock().unwrap() = Some(Duration::from_millis(1_500));
    let (c, d) = (Arc::new(s.engine("wC", Recorder::new())), Arc::new(s.engine("wD", Recorder::new())));
    let c = tokio::spawn(async move { c.drive("r").await });
    let d = tokio::spawn(async move { d.drive("r").await });
    wait_for(|| s.bank.calls() == 2).await;
    tokio::time::sleep(Duration::from_millis(70)).await;
    gate.send(Answer::Timeout).unwrap();
    let c = tokio::time::timeout(Duration::from_secs(10), c).await.expect("C ends").unwrap();
    let d = tokio::time::timeout(Duration::from_secs(10), d).await.expect("D ends").unwrap();
    assert_eq!(s.bank.calls(), 2, "C: {c:?}, D: {d:?}, run {:?}, pay {:?}", s.run().status, s.record().status);
}

/// A decision is used by the attempt it was made on, not by the clocks. Here the person's host runs 60 s ahead of the
/// workers': ann marks the step done while attempt 1 is in doubt; attempt 1's late answer is a definite failure, the
/// keyed class retries on its own (attempt 2), and attempt 2 times out: nothing was paid at all. The pause at attempt
/// 2's unknown outcome must not apply ann's mark-done, made on attempt 1 (a success with no payout behind it, I2):
/// the run stays paused for a decision about attempt 2. (Found by QA, stop 49: the decision was taken as pending
/// while its stamp, from the ahead clock, was later than the new attempt's.)
#[tokio::test]
async fn a_mark_done_made_on_attempt_1_is_not_applied_to_attempt_2() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::KeyedPastRetention).await;
        record_resolution(s.ledger.as_ref(), "r", &person_y(), "ann", s.clock.now_ms() + 60_000).unwrap();
        s.bank.gate().send(Answer::Timeout).unwrap();
        let _ = s.late_answer(Answer::Fail).await;
        let c = s.engine("wC", Recorder::new());
        resume_all(&c).await;
        assert_eq!((s.bank.calls(), s.bank.effects().len()), (2, 0), "{name}: two calls, no payout");
        assert_eq!(
            s.run().status,
            RunStatus::Paused,
            "{name}: pay {:?}, notified {:?}",
            s.record().status,
            s.notified()
        );
    }
}

/// The same clock skew where the key fails the run: ann's retry, filed while attempt 1 is in doubt, is used by the
/// engine's own retry (attempt 2), so after attempts 2 to 4 all failed definitely the run fails after four calls, as
/// it does without the skew, instead of sending a fifth on a decision already used.
#[tokio::test]
async fn a_retry_made_on_attempt_1_is_not_applied_after_the_engines_own_retries() {
    for (name, ledger) in ledgers() {
        let mut s = stage(name, ledger, Why::KeyedPastRetention).await;
        record_resolution(s.ledger.as_ref(), "r", &Resolution::Retry, "ann", s.clock.now_ms() + 60_000).unwrap();
        for _ in 2..=4 {
            s.bank.gate().send(Answer::Fail).unwrap();
        }
        let _ = s.late_answer(Answer::Fail).await;
        let c = s.engine("wC", Recorder::new());
        resume_all(&c).await;
        assert_eq!((s.run().status, s.bank.calls()), (RunStatus::Failed, 4), "{name}");
    }
}
