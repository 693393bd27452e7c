//! The pure decision core of the step-record state machine, shared by both ledgers so they cannot disagree.
//!
//! Each function takes the record as stored (or `None`) and the request, validates the transition, and either
//! returns a typed error or the record as it must be stored. No I/O: [`super::memory`] applies the result to its
//! maps, [`super::sqlite`] writes it back as one row.
//!
//! Rules (see the module doc of [`super`]):
//! - claim: absent (`expected_fence == 0`) → `Started` at fence 1, attempt 1; `Failed`, `Unknown` or `Started` with
//!   an expired lease (`lease_expiry_ms <= now_ms`) → `Started` at fence + 1, attempt + 1. A record whose fence is
//!   not `expected_fence`, or not of `expected_status` when the claim names one, or that is `Started` under an
//!   unexpired lease (whoever holds it), is a [`Claimed::Conflict`]. `Succeeded` is final: claiming it (expecting it,
//!   or no status) is [`Error::InvalidTransition`].
//! - complete: `Started` → `Succeeded | Failed | Unknown`; `Failed | Unknown` → `Succeeded` (adopt). The fence
//!   must be the record's current fence, else [`Error::Fenced`]. On a `Succeeded` record the same output again is an
//!   idempotent `Ok` whatever the fence (nothing is written, so there is nothing to fence), a different output is
//!   [`Error::OutputConflict`] whatever the fence (loud, because it means two effects or a bug).
//! - renew: only `Started`, only under the current fence.

use super::{Claim, Claimed, CompactString, Completion, Error, Result, Status, StepRecord};
use crate::key::Key;

/// What a claim does to the stored record.
#[derive(Debug)]
#[allow(clippy::large_enum_variant, reason = "a short-lived return value; boxing would cost an allocation per new key")]
pub(crate) enum ClaimEffect {
    /// No record existed: store this new one.
    Insert(StepRecord, Claimed),
    /// The record was updated in place (the caller must store it back).
    Updated(Claimed),
    /// Nothing changes.
    Conflict(Claimed),
}

/// Decides a claim. On `Updated`, `current` has been modified and must be written back.
pub(crate) fn claim(current: Option<&mut StepRecord>, claim: &Claim<'_>) -> Result<ClaimEffect> {
    let Some(record) = current else {
        if claim.expected_fence != 0 {
            // The claimant decided on a record that is gone (forgotten with its run): its decision is void.
            return Err(Error::NotFound {
                what: format!("step record {} (expected fence {})", claim.key, claim.expected_fence),
            });
        }
        let granted = Claimed::Granted { fence: 1, attempt: 1 };
        let record = StepRecord {
            key: claim.key,
            run_id: claim.run_id.into(),
            step_id: claim.step_id.into(),
            action: claim.action.into(),
            inputs_hash: claim.inputs_hash,
            attempt_count: 1,
            status: Status::Started,
            owner: claim.worker.into(),
            lease_expiry_ms: claim.now_ms.saturating_add(claim.lease_ms),
            fence: 1,
            last_attempt_ms: claim.now_ms,
            output: None,
            error: None,
        };
        return Ok(ClaimEffect::Insert(record, granted));
    };
    assert_eq!(record.key, claim.key, "the ledger handed the decision core the record of another key");
    if record.fence != claim.expected_fence || claim.expected_status.is_some_and(|status| status != record.status) {
        return Ok(ClaimEffect::Conflict(Claimed::Conflict(Box::new(record.clone()))));
    }
    match record.status {
        Status::Succeeded => {
            return Err(Error::InvalidTransition { key: claim.key, from: Status::Succeeded, to: Status::Started });
        }
        Status::Started if record.lease_expiry_ms > claim.now_ms => {
            return Ok(ClaimEffect::Conflict(Claimed::Conflict(Box::new(record.clone()))));
        }
        Status::Started | Status::Failed | Status::Unknown => {}
    }
    let fence = record.fence.checked_add(1).expect("fence overflowed u64: a key was claimed 2^64 times");
    let attempt = record.attempt_count.saturating_add(1);
    // A claim on an existing key keeps run and step (they are part of the key) but records what this attempt
    // carries, so a person sees the action and inputs of the last attempt. The action is not part of the key: the
    // executor claims a key recorded as another action (a workflow edited to give the step another action) only
    // after a person's decision (`decide::decide_for_action`), never silently.
    set_if_changed(&mut record.action, claim.action);
    set_if_changed(&mut record.owner, claim.worker);
    record.inputs_hash = claim.inputs_hash;
    record.attempt_count = attempt;
    record.status = Status::Started;
    record.lease_expiry_ms = claim.now_ms.saturating_add(claim.lease_ms);
    record.fence = fence;
    record.last_attempt_ms = claim.now_ms;
    record.output = None;
    record.error = None;
    Ok(ClaimEffect::Updated(Claimed::Granted { fence, attempt }))
}

fn set_if_changed(field: &mut CompactString, value: &str) {
    if field != value {
        *field = value.into();
    }
}

/// Decides a completion. Returns `Ok(true)` when `current` was modified and must be written back, `Ok(false)` for
/// an idempotent repeat of the same output.
/// It changes only `status`, `output` and `error`: the SQLite ledger writes back just those columns.
pub(crate) fn complete(
    current: Option<&mut StepRecord>,
    key: &Key,
    fence: u64,
    completion: Completion,
    now_ms: u64,
) -> Result<bool> {
    let Some(record) = current else {
        return Err(Error::NotFound { what: format!("step record {key}") });
    };
    if record.status == Status::Succeeded {
        return match &completion {
            Completion::Succeeded { output } if record.output.as_deref() == Some(output.as_slice()) => Ok(false),
            // A stale owner (its lease was taken over) is fenced, whatever it brings: the new owner may have adopted
            // the same effect through a lookup, whose answer is shaped differently from the create's.
            _ if fence != record.fence => Err(Error::Fenced { key: *key, presented: fence, current: record.fence }),
            Completion::Succeeded { .. } => Err(Error::OutputConflict { key: *key }),
            _ => {
                Err(Error::InvalidTransition { key: *key, from: Status::Succeeded, to: completion_status(&completion) })
            }
        };
    }
    if fence != record.fence {
        return Err(Error::Fenced { key: *key, presented: fence, current: record.fence });
    }
    let to = completion_status(&completion);
    let allowed = match record.status {
        Status::Started => true,
        // Adopting: a lookup found the effect, or a person marked it done.
        Status::Failed | Status::Unknown => to == Status::Succeeded,
        Status::Succeeded => unreachable!("handled above"),
    };
    if !allowed {
        return Err(Error::InvalidTransition { key: *key, from: record.status, to });
    }
    record.status = to;
    // The attempt is over, so the lease is released now. From here on `lease_expiry_ms` is the moment the attempt
    // ended: the latest moment its effect can have committed, from which a lookup connector's lag bound is counted.
    record.lease_expiry_ms = record.lease_expiry_ms.min(now_ms);
    (record.output, record.error) = completion.into_output_and_error();
    Ok(true)
}

/// Decides a lease renewal; on `Ok`, `current` was modified and must be written back.
pub(crate) fn renew(current: Option<&mut StepRecord>, key: &Key, fence: u64, lease_expiry_ms: u64) -> Result<()> {
    let Some(record) = current else {
        return Err(Error::NotFound { what: format!("step record {key}") });
    };
    if fence != record.fence {
        return Err(Error::Fenced { key: *key, presented: fence, current: record.fence });
    }
    if record.status != Status::Started {
        return Err(Error::InvalidTransition { key: *key, from: record.status, to: Status::Started });
    }
    record.lease_expiry_ms = lease_expiry_ms;
    Ok(())
}

/// The status a completion moves a record to.
pub(crate) fn completion_status(completion: &Completion) -> Status {
    match completion {
        Completion::Succeeded { .. } => Status::Succeeded,
        Completion::Failed { .. } => Status::Failed,
        Completion::Unknown { .. } => Status::Unknown,
    }
}
