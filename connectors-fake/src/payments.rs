//! `payments`: a Stripe-like keyed API (customers and charges).
//!
//! ## Fault model and the public facts behind it (Stripe's documentation on idempotent requests and search)
//! - Both actions take an idempotency key (the engine's key in hex, 64 characters; keys up to 255 characters are
//!   accepted, longer ones are a validation error). A key and its stored response are kept for `key_retention_ms`
//!   (Stripe: at least 24 hours), then forgotten: a request with an expired key executes again.
//! - The first request with a key executes and its response is stored, **including a 500** (an error after commit):
//!   every later request with the same key and the same parameters gets the stored response replayed, and creates
//!   nothing.
//! - The same key with other parameters (or on the other action) answers `idempotency_error`
//!   ([`Outcome::KeyReusedWithDifferentPayload`]).
//! - A request whose key is still being executed (arrived before the first request's response left) answers 409
//!   ([`Outcome::KeyInFlight`]) and is not stored.
//! - 429s, 503s before execution and validation errors (400) are not stored: a retry executes.
//! - `create_customer` writes the engine's key into the customer's metadata (`flow_key`): the connector's lookup
//!   searches customers by that metadata. Search is eventually consistent (the profile's lag: normally seconds, a
//!   tail up to a minute, incidents up to an hour); retrieve by id ([`Payments::retrieve`]) sees a write at once.
//!   `charge` has no lookup.
//! - Every created object emits a webhook event (`customer.created`, `charge.succeeded`).

use crate::profile::FaultProfile;
use crate::server::{
    Api, Context, Handled, Indexed, SearchIndex, created_object, fingerprint, key_hex, not_applied, numbered,
};
use crate::truth::Effect;
use crate::webhooks::WebhookEvent;
use engine::connector::{ActionSpec, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request};
use engine::doc::Doc;
use engine::fastmap::FastMap;
use engine::ledger::CompactString;
use std::collections::BTreeMap;
use std::sync::Arc;

pub const CREATE_CUSTOMER: &str = "create_customer";
pub const CHARGE: &str = "charge";
/// Stripe's limit on idempotency key length.
pub const IDEMPOTENCY_KEY_CHARS_MAX: usize = 255;
pub const IDEMPOTENCY_ERROR: &str = "idempotency_error: keys for idempotent requests can only be used with the same parameters they were first used with";

/// A profile with Stripe-like public numbers: ~40 ms median latency, search lag of ~2 s, 1 % tail up to a minute,
/// 0.05 % incidents up to an hour, keys kept 24 h. Faults stay at zero: scenarios turn them up.
pub fn realistic_profile() -> FaultProfile {
    FaultProfile {
        latency_ms_median: 40,
        latency_ms_p99: 400,
        lag_ms_median: 2_000,
        lag_tail_p: 0.01,
        lag_ms_tail_max: 60_000,
        incident_p: 0.000_5,
        incident_lag_ms_max: 3_600_000,
        ..FaultProfile::default()
    }
}

#[derive(Debug, Clone)]
enum Stored {
    Applied(Doc),
    ServerError,
}

/// A run's idempotency keys (fingerprints), each with the id of the object its first request created (one list: they
/// come in pairs). Ids are held inline up to 24 bytes.
type RunRecords = Vec<(u128, CompactString)>;

#[derive(Debug)]
struct KeyRecord {
    action: usize,
    /// The first request's inputs (shared with the caller's request, not copied).
    inputs: Doc,
    response: Stored,
    /// The first request's response leaves at this time; until then the key is in flight.
    completed_ms: u64,
    /// This key's entry in [`Payments::expiry`]: (expiry time, sequence number).
    expiry_slot: (u64, u64),
}

/// The payments API's state.
#[derive(Debug)]
pub struct Payments {
    name: Arc<str>,
    action_names: [Arc<str>; 2],
    actions: Vec<ActionSpec>,
    retention_ms: u64,
    /// Idempotency keys, each by its 128-bit fingerprint (`server::fingerprint`; the engine sends its key in hex, 64
    /// characters), here, in [`Payments::expiry`] and under its run. Two keys share a fingerprint with a chance of
    /// about 2^-128 per pair, as with the search index's terms.
    keys: FastMap<u128, KeyRecord>,
    /// Keys by (expiry time, sequence number), for expiry. A forgotten run's keys leave this index too, so memory is
    /// bounded by the keys of unfinished runs rather than by everything stored in the last retention window.
    expiry: BTreeMap<(u64, u64), u128>,
    /// Each run's keys and object ids, so a finished run's records can be dropped (run ids up to 24 bytes inline).
    by_run: FastMap<CompactString, RunRecords>,
    customers: SearchIndex,
    /// Objects by id (held inline up to 24 bytes).
    objects_by_id: FastMap<CompactString, Doc>,
    next_id: u64,
}

impl Payments {
    pub fn new(name: &str, profile: &FaultProfile) -> Self {
        let retention_ms = profile.key_retention_ms;
        let actions = vec![
            ActionSpec {
                name: CREATE_CUSTOMER.into(),
                class: GuaranteeClass::Keyed { retention_ms },
                has_lookup: true,
                // Customer search by metadata lags like the rest of the search index.
                lookup_lag_bound_ms: profile.declared_lag_bound_ms(),
            },
            ActionSpec {
                name: CHARGE.into(),
                class: GuaranteeClass::Keyed { retention_ms },
                has_lookup: false,
                lookup_lag_bound_ms: 0,
            },
        ];
        Self {
            name: name.into(),
            action_names: [CREATE_CUSTOMER.into(), CHARGE.into()],
            actions,
            retention_ms,
            keys: FastMap::default(),
            expiry: BTreeMap::new(),
            by_run: FastMap::default(),
            customers: SearchIndex::default(),
            objects_by_id: FastMap::default(),
            next_id: 0,
        }
    }

    /// Retrieve by id: immediate, as Stripe's retrieve is.
    pub fn retrieve(&self, object_id: &str) -> Option<&Doc> {
        self.objects_by_id.get(object_id)
    }

    fn expire(&mut self, now_ms: u64) {
        while let Some(entry) = self.expiry.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let (slot, key) = entry.remove_entry();
            if self.keys.get(&key).is_some_and(|r| r.expiry_slot == slot) {
                self.keys.remove(&key);
            }
        }
    }

    /// Runs `request` under an explicit idempotency key (the adapter sends the engine key in hex).
    pub fn execute_with_idempotency_key(
        &mut self,
        cx: Context,
        request: &Request<'_>,
        idempotency_key: &str,
    ) -> Handled {
        self.expire(cx.now_ms);
        let Some(action) = self.action_names.iter().position(|a| &**a == request.action) else {
            return Handled::unknown_action(request);
        };
        if idempotency_key.is_empty() || idempotency_key.len() > IDEMPOTENCY_KEY_CHARS_MAX {
            return Handled::outcome(not_applied("400 invalid idempotency key", false, None));
        }
        if let Err(message) = validate(action, request.inputs) {
            return Handled::outcome(not_applied(&message, false, None));
        }
        let held_as = fingerprint(idempotency_key);
        if let Some(record) = self.keys.get(&held_as) {
            if cx.now_ms < record.completed_ms {
                return Handled::outcome(Outcome::KeyInFlight);
            }
            if record.action != action || record.inputs != *request.inputs {
                return Handled::outcome(Outcome::KeyReusedWithDifferentPayload(IDEMPOTENCY_ERROR.to_string()));
            }
            let outcome = match &record.response {
                Stored::Applied(value) => Outcome::Applied(value.clone()),
                Stored::ServerError => Outcome::Indeterminate(crate::server::ERROR_AFTER_COMMIT.to_string()),
            };
            return Handled::outcome(outcome);
        }
        self.next_id += 1;
        let (object_id, record, event_type, visible_ms) = if action == 0 {
            let id = numbered("cus_", self.next_id);
            // A customer carries the engine key in its metadata, and the search finds it by that key.
            let flow_key = key_hex(request.key);
            let record = created_object(
                [
                    ("id", Doc::from(id.as_str())),
                    ("object", Doc::from_static("customer")),
                    ("metadata", Doc::object([("flow_key", Doc::from(flow_key.as_str()))])),
                ],
                request.inputs,
                &["email", "name"],
            );
            let visible_ms = cx.now_ms + cx.lag_ms;
            self.customers.insert(request.run_id, &flow_key, Indexed { visible_ms, record: record.clone() });
            (id, record, "customer.created", visible_ms)
        } else {
            let id = numbered("ch_", self.next_id);
            let amount = request.inputs.get("amount").cloned().unwrap_or(Doc::Null);
            let record = Doc::object([
                ("id", Doc::from(id.as_str())),
                ("object", Doc::from_static("charge")),
                ("amount", amount),
                ("status", Doc::from_static("succeeded")),
            ]);
            (id, record, "charge.succeeded", cx.now_ms)
        };
        self.objects_by_id.insert(object_id.clone(), record.clone());
        let response = if cx.error_after_commit { Stored::ServerError } else { Stored::Applied(record.clone()) };
        let outcome = match &response {
            Stored::Applied(value) => Outcome::Applied(value.clone()),
            Stored::ServerError => Outcome::Indeterminate(crate::server::ERROR_AFTER_COMMIT.to_string()),
        };
        // `next_id` was bumped above for this key alone: a unique sequence number.
        let expiry_slot = (cx.now_ms + self.retention_ms, self.next_id);
        self.keys.insert(
            held_as,
            KeyRecord {
                action,
                inputs: request.inputs.clone(),
                response,
                completed_ms: cx.now_ms + cx.response_ms,
                expiry_slot,
            },
        );
        self.expiry.insert(expiry_slot, held_as);
        match self.by_run.get_mut(request.run_id) {
            Some(run) => run.push((held_as, object_id.clone())),
            None => {
                // Room for a second create in the same run (a customer and a charge).
                let mut run = Vec::with_capacity(2);
                run.push((held_as, object_id.clone()));
                self.by_run.insert(request.run_id.into(), run);
            }
        }
        let effect = Effect::of(&self.name, &self.action_names[action], request, &object_id, cx.now_ms, visible_ms);
        let event = WebhookEvent {
            source: self.name.clone(),
            event_id: numbered("evt_", self.next_id),
            object_id,
            event_type,
            payload: record,
        };
        Handled { outcome, effect: Some(effect), event: Some(event) }
    }
}

fn validate(action: usize, inputs: &Doc) -> Result<(), String> {
    if !inputs.is_object() {
        return Err("400 parameters must be an object".into());
    }
    if action == 1 && inputs.get("amount").and_then(Doc::as_u64).is_none_or(|a| a == 0) {
        return Err("400 `amount` must be a positive integer".into());
    }
    Ok(())
}

impl Api for Payments {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled {
        let idempotency_key = key_hex(request.key);
        self.execute_with_idempotency_key(cx, request, &idempotency_key)
    }

    fn search(&mut self, now_ms: u64, request: &Request<'_>) -> LookupOutcome {
        if request.action != CREATE_CUSTOMER {
            return LookupOutcome::Failed(NotApplied::retryable(format!("no search for `{}`", request.action)));
        }
        match self.customers.search(&key_hex(request.key), now_ms) {
            Some(found) => LookupOutcome::Found(found.record.clone()),
            None => LookupOutcome::NotFound,
        }
    }

    fn forget_run(&mut self, run_id: &str) {
        for (key, object_id) in self.by_run.remove(run_id).unwrap_or_default() {
            if let Some(record) = self.keys.remove(&key) {
                self.expiry.remove(&record.expiry_slot);
            }
            self.objects_by_id.remove(&object_id);
        }
        self.customers.forget_run(run_id);
    }

    fn record_count(&self) -> usize {
        self.keys.len() + self.objects_by_id.len()
    }
}
