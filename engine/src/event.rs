//! Events the engine reports as it works, for traces, metrics and the simulation's checker.
//!
//! The engine calls [`Observer::event`] synchronously at each point below, in program order. An observer must not
//! block. The simulation hashes the ordered events into the trace hash and feeds them to its invariant checker.

use crate::key::Key;

/// Something the engine did or decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    RunStarted {
        run_id: &'a str,
        workflow: &'a str,
    },
    /// A duplicate webhook delivery started nothing.
    WebhookDuplicate {
        source: &'a str,
        event_id: &'a str,
        run_id: &'a str,
    },
    WebhookRejected {
        source: &'a str,
        event_id: &'a str,
        reason: &'a str,
    },
    /// A key's stored output was returned without a call (rule 1).
    Replayed {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
    },
    /// A plan of writes was recorded (or the recorded one was reused: `reused`).
    /// `plan` is the canonical JSON of the plan in force.
    PlanRecorded {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        writes: usize,
        reused: bool,
        plan: &'a [u8],
    },
    /// An intent was written and the connector is about to be called. `key` is the ledger key of the write;
    /// `sent_key` is the key sent to the API (the same under the rules; a fresh one per attempt under the naive
    /// policy). A write of a multi-write or agent step reports its step id as `step#index`.
    CallStarted {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        sent_key: &'a Key,
        action: &'a str,
        attempt: u32,
    },
    /// A connector call ended with this outcome (`applied`, `not-applied`, `indeterminate`, `key-reused`, `in-flight`).
    CallEnded {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        action: &'a str,
        attempt: u32,
        outcome: &'a str,
    },
    /// A lookup was made; `found` says whether it adopted an earlier create.
    Lookup {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        action: &'a str,
        found: bool,
    },
    /// The step's key is now succeeded in the ledger.
    StepSucceeded {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        action: &'a str,
    },
    /// A retry was scheduled after `delay_ms`.
    RetryScheduled {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        attempt: u32,
        delay_ms: u64,
    },
    RunPaused {
        run_id: &'a str,
        step_id: &'a str,
        key: &'a Key,
        reason: &'a str,
    },
    RunResolved {
        run_id: &'a str,
        key: &'a Key,
        resolution: &'a str,
    },
    RunSucceeded {
        run_id: &'a str,
    },
    RunFailed {
        run_id: &'a str,
        reason: &'a str,
    },
}

/// The places where a worker crash is most interesting. The engine asks [`Observer::halt_at`] at each; when the
/// observer answers true the engine parks forever at that point, so whoever drives it (madsim's node kill, a test
/// aborting the task) can crash it exactly there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CrashPoint {
    /// The intent is written; the connector has not been called.
    BeforeCall,
    /// The connector answered; the outcome is not recorded yet.
    AfterCallBeforeRecord,
    /// The plan of writes is recorded; the first write has not started.
    AfterPlanBeforeFirstWrite,
    /// The planner (model) is being asked for a plan; nothing is recorded yet.
    WhilePlanning,
    /// A webhook delivery was received and is about to be written to the inbox.
    DuringWebhookIntake,
}

/// Receives the engine's events.
pub trait Observer: Send + Sync {
    fn event(&self, event: &Event<'_>);

    /// Should the engine stop dead at `point` (for crash injection)? `key` is the step or write key involved (the
    /// webhook's derived run key for [`CrashPoint::DuringWebhookIntake`]).
    fn halt_at(&self, _point: CrashPoint, _run_id: &str, _key: &Key) -> bool {
        false
    }
}

/// An observer that ignores everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoObserver;

impl Observer for NoObserver {
    fn event(&self, _event: &Event<'_>) {}
}
