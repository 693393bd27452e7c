//! `payouts` and `email`: at-most-once APIs, with neither an idempotency key nor a way to search for an earlier
//! write (a bank payout, an email send).
//!
//! ## Fault model and the public facts behind it
//! Many payout rails and transactional-email APIs accept a request and act on it with no key and no query by
//! client reference. The fake executes every request that reaches it: each is a new effect (a second payout, a
//! second email), immediately visible, and emits a webhook event (`payout.paid`, `email.sent`). It never
//! deduplicates: only the engine's rule (never retry an indeterminate at-most-once call without a person) prevents
//! duplicates. There is no lookup; a lookup call answers `Failed`.

use crate::server::{Api, Context, Handled, numbered};
use crate::truth::Effect;
use crate::webhooks::WebhookEvent;
use engine::connector::{ActionSpec, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request};
use engine::doc::Doc;
use std::sync::Arc;

pub const SEND_PAYOUT: &str = "send_payout";
pub const SEND_EMAIL: &str = "send_email";

/// One at-most-once API (one action).
#[derive(Debug)]
pub struct AtMostOnce {
    name: Arc<str>,
    action_name: Arc<str>,
    actions: Vec<ActionSpec>,
    /// What an object id starts with: the prefix and `_` (`po_`).
    id_prefix: String,
    event_type: &'static str,
    next_id: u64,
}

impl AtMostOnce {
    /// A payout API named `name` with the action `send_payout`.
    pub fn payouts(name: &str) -> Self {
        Self::new(name, SEND_PAYOUT, "po", "payout.paid")
    }

    /// An email API named `name` with the action `send_email`.
    pub fn email(name: &str) -> Self {
        Self::new(name, SEND_EMAIL, "msg", "email.sent")
    }

    pub fn new(name: &str, action: &str, id_prefix: &'static str, event_type: &'static str) -> Self {
        Self {
            name: name.into(),
            action_name: action.into(),
            actions: vec![ActionSpec {
                name: action.into(),
                class: GuaranteeClass::AtMostOnce,
                has_lookup: false,
                lookup_lag_bound_ms: 0,
            }],
            id_prefix: format!("{id_prefix}_"),
            event_type,
            next_id: 0,
        }
    }
}

impl Api for AtMostOnce {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled {
        if request.action != &*self.action_name {
            return Handled::unknown_action(request);
        }
        self.next_id += 1;
        let id = numbered(&self.id_prefix, self.next_id);
        // A payout or a send is acknowledged with its id and status.
        let record = Doc::object([("id", Doc::from(id.as_str())), ("status", Doc::from_static("accepted"))]);
        let effect = Effect::of(&self.name, &self.action_name, request, &id, cx.now_ms, cx.now_ms);
        let event = WebhookEvent {
            source: self.name.clone(),
            event_id: numbered("evt_", self.next_id),
            object_id: id,
            event_type: self.event_type,
            payload: record.clone(),
        };
        Handled { outcome: Outcome::Applied(record), effect: Some(effect), event: Some(event) }
    }

    fn search(&mut self, _now_ms: u64, _request: &Request<'_>) -> LookupOutcome {
        LookupOutcome::Failed(NotApplied::retryable(format!("`{}` has no search", self.name)))
    }

    /// Nothing is kept per run.
    fn forget_run(&mut self, _run_id: &str) {}

    fn record_count(&self) -> usize {
        0
    }
}
