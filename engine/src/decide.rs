//! The executor's pure decision core: what to do next with one key, as a function of data only.
//!
//! The driver in [`crate::executor`] reads the key's ledger record, asks [`decide`] what to do, performs exactly that
//! (a wait, a claim then maybe a lookup then a call, a pause...), records what happened, and asks again. Nothing in
//! this module does I/O, reads a clock or draws randomness (jitter is a hash of the seed, the key and the attempt),
//! so every rule of `DESIGN.md` is tested here as a table: record and last outcome in, decision out.
//!
//! How the rules map onto decisions (policy [`Policy::Rules`]):
//!
//! | record as read | keyed | lookup-before-create | at-most-once |
//! |---|---|---|---|
//! | none | attempt | attempt, lookup first | attempt |
//! | succeeded | replay | replay | replay |
//! | started, lease unexpired | wait for the lease | same | same |
//! | failed (definitely not applied), retryable | back off, attempt | back off, attempt, lookup first | pause |
//! | failed, permanent | fail | fail | fail |
//! | failed, its lookup refused for good (nothing sent) | n/a | fail | n/a |
//! | failed, key reused with another payload | pause | pause | pause |
//! | unknown, its lookup refused for good | pause | pause | n/a |
//! | unknown, the API's answer says applied but its output cannot be stored | pause | pause | pause |
//! | unknown, or started with an expired lease (a crash) | inside retention (a resend must arrive inside it: [`RetryPolicy::request_transit_ms_max`]): back off, resend; past it: lookup if the action has one, else pause | wait out the lag bound since that attempt's call ended (or its lease expired), then attempt with lookup first | pause |
//!
//! Attempts are bounded by [`RetryPolicy::attempt_count_max`]: when it is reached and the last attempt definitely
//! did not apply the step fails, otherwise the run pauses. Why a `failed` record means *every* attempt under that
//! key did not apply: a keyed API replays its stored answer for a key it has seen (so a definite failure under the
//! same key, inside the retention window, covers the earlier attempts), and a lookup-before-create attempt only
//! creates after a lookup past the lag bound found nothing.
//!
//! A lookup that fails records the attempt like a call's definite failure: `failed` when every earlier attempt
//! definitely did not apply (nothing was sent), else `unknown`, since nothing can be concluded about the earlier
//! write. When the API said the search cannot succeed on a retry (a bad query, a 403: not `retryable`), the record's
//! error carries [`LOOKUP_REFUSED_MARK`], and retrying would only spend the attempts and their backoff: a `failed`
//! record fails the step at once, an `unknown` one pauses the run for a person at once. (A keyed action looks up
//! only past its retention, after an attempt that may have applied, so only its `unknown` row applies.) A call
//! refused the same way ([`PERMANENT_MARK`], or [`KEY_REUSED_MARK`]: the API holds the key with another payload)
//! after an attempt that may have applied is recorded `unknown` too, and pauses the run at once for the same reason:
//! a resend would get the same answer. So does an API's answer that the step applied whose output cannot be
//! canonicalised (a number no double holds), from a call or a lookup: it is recorded `unknown` with
//! [`UNSTORABLE_MARK`], and a resend or another lookup would only fetch the same output again.
//!
//! Policy [`Policy::Naive`] is the baseline "before the rules": a fresh connector key per attempt, no lookups, every
//! failure retried while attempts remain, and the step failed when they run out.
//!
//! A key is derived from (run id, step id, inputs), not from the action: a workflow edited to give a step another
//! action, with the same id and inputs, keeps the step's key. The driver asks [`decide_for_action`], which sees
//! a record that names another action than the step now does and pauses for a person (whatever the class and the
//! policy) instead of replaying the old action's output as the new one's, or sending the new action under a key
//! the old one may have applied under. It waits out a lease held on the key first (an attempt of the old action in
//! flight), and a person's retry sends the new action once.

use crate::connector::{ActionSpec, GuaranteeClass};
use crate::key::Key;
use crate::ledger::{Status, StepRecord};

/// Which engine runs: the rules of `DESIGN.md`, or the naive baseline they replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Policy {
    #[default]
    Rules,
    /// Fresh connector key per attempt, no lookups, retries everything.
    Naive,
}

/// Bounded exponential backoff with jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetryPolicy {
    /// Attempts per key, the first included, before the step fails or pauses.
    pub attempt_count_max: u32,
    pub backoff_ms_base: u64,
    pub backoff_ms_max: u64,
    /// The longest a request may take to reach an API once sent. A keyed resend must *arrive* while the API still
    /// keeps the key, so it is sent only while `now + request_transit_ms_max` is inside the retention window; after
    /// that the key counts as expired (look up, or pause). Found by the simulator: a resend sent 14 ms before a 2 s
    /// window closed arrived 10 ms after it and created a second customer.
    pub request_transit_ms_max: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self { attempt_count_max: 5, backoff_ms_base: 100, backoff_ms_max: 30_000, request_transit_ms_max: 30_000 }
    }
}

/// Prefix of a recorded error that must never be retried (a non-retryable `NotApplied`).
pub const PERMANENT_MARK: &str = "[permanent] ";
/// Prefix of a recorded error that says the API saw this key with another payload.
pub const KEY_REUSED_MARK: &str = "[key-reused] ";
/// Prefix of a recorded error that says the attempt's lookup failed and the API said no retry of it can succeed (a
/// lookup's non-retryable failure): a `failed` record fails the step, an `unknown` one pauses the run, at once.
pub const LOOKUP_REFUSED_MARK: &str = "[lookup-refused] ";
/// Prefix of a recorded reason that says the API answered that the step applied (a call's answer, or the record a
/// lookup found), but its output cannot be canonicalised, so it cannot be stored as the key's output: an `unknown`
/// record pauses the run at once (a resend or a lookup would get the same answer back).
pub const UNSTORABLE_MARK: &str = "[unstorable] ";

/// What the driver knows beyond the ledger record: the end of the call it made itself in this drive (or of the
/// lookup it made since, when that lookup failed with a retry-after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCall {
    pub ended_ms: u64,
    /// The API's retry-after, if it gave one: the next attempt waits at least this long from `ended_ms`.
    pub retry_after_ms: Option<u64>,
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub spec: &'a ActionSpec,
    pub policy: Policy,
    pub retry: &'a RetryPolicy,
    pub seed: u64,
    pub key: &'a Key,
    /// The key's record as just read (none when the key was never claimed).
    pub record: Option<&'a StepRecord>,
    /// The call this drive made on this key last, if any.
    pub last: Option<LastCall>,
    /// When the key was first attempted, if known (from the ledger); the retention window of a keyed API is measured
    /// from it. Unknown with more than one attempt means "assume the window is over".
    pub first_attempt_ms: Option<u64>,
    pub now_ms: u64,
    /// A person decided to send it once more (resolution `Retry`): one attempt, whatever the class and count.
    pub person_retry: bool,
}

/// What to do next with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The key succeeded: return its stored output without calling.
    Replay,
    /// Claim the key with `expected_fence` (the fence read), then look up first if `lookup_first` (adopting what is
    /// found), else (or when nothing is found) call.
    Attempt { expected_fence: u64, lookup_first: bool },
    /// Wait until `until_ms` (another worker's lease, a lookup connector's lag bound), then read and decide again.
    WaitUntil { until_ms: u64 },
    /// A retry: wait `delay_ms` (from now), then read and decide again.
    Backoff { delay_ms: u64 },
    /// Stop the run for a person, with the reason and the evidence.
    Pause(String),
    /// The step failed: every attempt definitely did not apply.
    Fail(String),
}

/// The backoff before attempt `attempt` (counting from 2 for the first retry): `base * 2^(attempt-2)`, capped, with
/// "equal jitter" (half fixed, half drawn) from a hash of (seed, key, attempt), so the delay does not depend on
/// which task ran first.
pub fn backoff_ms(retry: &RetryPolicy, seed: u64, key: &Key, attempt: u32) -> u64 {
    let exponent = attempt.saturating_sub(2).min(32);
    let ceiling = retry.backoff_ms_base.saturating_mul(1u64 << exponent).min(retry.backoff_ms_max);
    let half = ceiling / 2;
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"flow/jitter/v1");
    hasher.update(&seed.to_le_bytes());
    hasher.update(&key.0);
    hasher.update(&attempt.to_le_bytes());
    let draw = u64::from_le_bytes(hasher.finalize().as_bytes()[..8].try_into().expect("8 bytes"));
    half + if ceiling - half == 0 { 0 } else { draw % (ceiling - half + 1) }
}

/// The decision for one key. See the module documentation for the table.
pub fn decide(input: &Input<'_>) -> Decision {
    let Some(record) = input.record else {
        return Decision::Attempt { expected_fence: 0, lookup_first: looks_first(input) };
    };
    let attempt = record.attempt_count;
    match record.status {
        Status::Succeeded => Decision::Replay,
        Status::Started if record.lease_expiry_ms > input.now_ms => {
            Decision::WaitUntil { until_ms: record.lease_expiry_ms }
        }
        _ if input.person_retry => Decision::Attempt { expected_fence: record.fence, lookup_first: false },
        Status::Failed => after_failure(input, record),
        Status::Unknown | Status::Started => {
            let why = match (record.status, record.error.as_deref()) {
                (Status::Started, _) => "the worker stopped during the attempt (its lease expired)",
                (_, Some(reason)) => reason,
                (_, None) => "indeterminate outcome",
            };
            after_indeterminate(input, record, why, attempt)
        }
    }
}

/// [`decide`] for a key the step now performs as `action` (`connector.action`): when the record names another
/// action (the workflow was edited, keeping the step's id and inputs, so its key), the step pauses for a person
/// rather than take the old action's stored output as the new one's, or send the new action under a key the old one
/// may have applied under: neither can be judged automatically. Only a lease held on the key is waited out first
/// (an attempt of the old action may be in flight), and a person's retry sends the new action once (its claim
/// records the new action). A succeeded key is final, so there the person restores the action, gives the step a new
/// id (a new key: the new action runs once) or aborts the run.
pub fn decide_for_action(input: &Input<'_>, action: &str) -> Decision {
    let Some(record) = input.record.filter(|r| r.action != action) else {
        return decide(input);
    };
    let edited = format!(
        "step {}: the workflow now gives it action {action}, but its key (the same step id and inputs) is recorded \
         as action {}",
        record.step_id, record.action
    );
    match record.status {
        Status::Started if record.lease_expiry_ms > input.now_ms => decide(input),
        Status::Succeeded => Decision::Pause(format!(
            "{edited}, which succeeded (attempt {} at {} ms): its output is not the new action's, and a succeeded \
             key is final; a person must decide: restore the step's action, give the step a new id to run the new \
             action once, or abort the run",
            record.attempt_count, record.last_attempt_ms
        )),
        _ if input.person_retry => decide(input),
        Status::Failed if definitely_not_applied(record) => Decision::Pause(evidence(
            record,
            &format!("{edited}, which did not apply; a person must decide whether to send the new one (retry)"),
        )),
        // A `[key-reused]` failure too: an earlier request under the key may have applied.
        Status::Unknown | Status::Started | Status::Failed => Decision::Pause(evidence(
            record,
            &format!(
                "{edited}, which may have applied; a person must decide (mark the step done, retry: send the new \
                 action once, or abort)"
            ),
        )),
    }
}

fn looks_first(input: &Input<'_>) -> bool {
    input.policy == Policy::Rules && matches!(input.spec.class, GuaranteeClass::LookupBeforeCreate { .. })
}

fn evidence(record: &StepRecord, what: &str) -> String {
    format!(
        "{what}: action {} step {} attempt {} at {} ms: {}",
        record.action,
        record.step_id,
        record.attempt_count,
        record.last_attempt_ms,
        record.error.as_deref().unwrap_or("worker stopped during the attempt")
    )
}

/// Retry after `delay`, or claim now when the delay is over.
fn retry_when_due(input: &Input<'_>, record: &StepRecord, lookup_first: bool) -> Decision {
    let delay_ms = backoff_ms(input.retry, input.seed, input.key, record.attempt_count + 1);
    let (since_ms, delay_ms) = match input.last {
        Some(last) => (last.ended_ms, delay_ms.max(last.retry_after_ms.unwrap_or(0))),
        None => (record.last_attempt_ms, delay_ms),
    };
    let due_ms = since_ms.saturating_add(delay_ms);
    if due_ms > input.now_ms {
        Decision::Backoff { delay_ms: due_ms - input.now_ms }
    } else {
        Decision::Attempt { expected_fence: record.fence, lookup_first }
    }
}

/// Does `record` say the step definitely did not apply? A `failed` record does, unless the API refused the call because
/// it holds the key with another payload ([`KEY_REUSED_MARK`]): then the earlier request under the key may have
/// applied ([`after_failure`] pauses for a person).
pub fn definitely_not_applied(record: &StepRecord) -> bool {
    record.status == Status::Failed && !record.error.as_deref().is_some_and(|e| e.starts_with(KEY_REUSED_MARK))
}

fn after_failure(input: &Input<'_>, record: &StepRecord) -> Decision {
    let error = record.error.as_deref().unwrap_or("");
    if error.starts_with(KEY_REUSED_MARK) {
        if input.policy == Policy::Naive {
            return Decision::Fail(evidence(record, "the key was reused with a different payload"));
        }
        // The earlier request under this key may have applied (a volatile field changed between attempts, or a
        // bug changed the inputs without changing the key), and a failed run must carry no effect (I3): a person
        // decides. Never "fixed" by a new key.
        return Decision::Pause(evidence(record, "the key was reused with a different payload"));
    }
    if error.starts_with(PERMANENT_MARK) {
        return Decision::Fail(evidence(record, "the call was refused and cannot be retried"));
    }
    if error.starts_with(LOOKUP_REFUSED_MARK) {
        return Decision::Fail(evidence(
            record,
            "the lookup before the create was refused and cannot be retried (nothing was sent)",
        ));
    }
    if input.policy == Policy::Rules && input.spec.class == GuaranteeClass::AtMostOnce {
        return Decision::Pause(evidence(record, "an at-most-once action is never retried automatically"));
    }
    if record.attempt_count >= input.retry.attempt_count_max {
        return Decision::Fail(evidence(record, "attempts exhausted, none applied"));
    }
    retry_when_due(input, record, looks_first(input))
}

fn after_indeterminate(input: &Input<'_>, record: &StepRecord, why: &str, attempt: u32) -> Decision {
    if input.policy == Policy::Naive {
        if attempt >= input.retry.attempt_count_max {
            return Decision::Fail(evidence(record, "attempts exhausted"));
        }
        return retry_when_due(input, record, false);
    }
    let error = if record.status == Status::Unknown { record.error.as_deref().unwrap_or("") } else { "" };
    if error.starts_with(LOOKUP_REFUSED_MARK) {
        return Decision::Pause(evidence(
            record,
            "an earlier attempt may have applied, and the lookup that would tell was refused and cannot be retried; \
             a person must decide",
        ));
    }
    // The last call was refused in a way no resend gets past (the API's answer to this very request, which a resend
    // repeats), after an earlier attempt that may have applied: resending would spend the attempts and their backoff
    // and end in the same pause, later.
    if error.starts_with(PERMANENT_MARK) {
        return Decision::Pause(evidence(
            record,
            "an earlier attempt may have applied, and the last call was refused and cannot be retried; a person must \
             decide",
        ));
    }
    if error.starts_with(KEY_REUSED_MARK) {
        return Decision::Pause(evidence(
            record,
            "an earlier attempt may have applied, and the API holds this key with another payload; a person must \
             decide",
        ));
    }
    if error.starts_with(UNSTORABLE_MARK) {
        return Decision::Pause(evidence(
            record,
            "the API says the step applied, but its output cannot be stored; a person must decide: mark the step \
             done with an output that can be stored (the answer is at the end), or abort (a retry would send the step \
             again: a keyed API answers the same, another may apply it a second time)",
        ));
    }
    match input.spec.class {
        GuaranteeClass::AtMostOnce => Decision::Pause(evidence(
            record,
            &format!("at-most-once action may have applied ({why}); a person must decide"),
        )),
        _ if attempt >= input.retry.attempt_count_max => {
            Decision::Pause(evidence(record, &format!("attempts exhausted after an indeterminate outcome ({why})")))
        }
        GuaranteeClass::LookupBeforeCreate { lag_bound_ms } => {
            // A create becomes searchable within the lag bound of its commit, which happened at the latest when the
            // call ended: known exactly when this drive made the call, else bounded by the attempt's lease (no call
            // outlives its lease; `EngineConfig::lease_ms` must exceed the longest call).
            let ended_ms = input.last.map_or(record.lease_expiry_ms, |last| last.ended_ms);
            let visible_ms = ended_ms.max(record.last_attempt_ms).saturating_add(lag_bound_ms);
            if visible_ms > input.now_ms {
                return Decision::WaitUntil { until_ms: visible_ms };
            }
            retry_when_due(input, record, true)
        }
        GuaranteeClass::Keyed { retention_ms } => {
            let first_ms = match input.first_attempt_ms {
                Some(first_ms) => Some(first_ms),
                None if attempt <= 1 => Some(record.last_attempt_ms),
                None => None,
            };
            let arrives_by_ms = input.now_ms.saturating_add(input.retry.request_transit_ms_max);
            let inside = first_ms.is_some_and(|first_ms| arrives_by_ms < first_ms.saturating_add(retention_ms));
            if inside {
                retry_when_due(input, record, false)
            } else if input.spec.has_lookup {
                // Past retention the key protects nothing: look up, but only once the lookup can see a write the
                // earlier attempt may have made (its lag bound, counted from the end of that attempt).
                let ended_ms = input.last.map_or(record.lease_expiry_ms, |last| last.ended_ms);
                let visible_ms = ended_ms.max(record.last_attempt_ms).saturating_add(input.spec.lookup_lag_bound_ms);
                if visible_ms > input.now_ms {
                    return Decision::WaitUntil { until_ms: visible_ms };
                }
                retry_when_due(input, record, true)
            } else {
                Decision::Pause(evidence(
                    record,
                    &format!("past the key retention window of {retention_ms} ms and no lookup ({why})"),
                ))
            }
        }
    }
}
