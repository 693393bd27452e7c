//! `ledgerly`: a bookkeeping API that confirms a write before any read can see it — the article's residual class.
//!
//! ## Fault model and the public facts behind it
//! The article ("Idempotency is the whole job") ends with "a handful of APIs that confirm a write before it is
//! visible to reads"; several accounting and ledger APIs document that a created entry is acknowledged at once and
//! indexed for search asynchronously. The fake:
//! - takes no idempotency key and enforces no uniqueness: every `record_entry` that reaches it creates an entry;
//! - acknowledges the entry at once (`Applied`) with its id, while the search by `external_ref` (where the connector
//!   writes the engine's key) sees it only after the profile's lag, whose tail is long: the declared
//!   `lag_bound_ms` is the profile's tail bound, and incidents exceed it. A lookup made after the declared bound can
//!   therefore still miss an entry, and the engine's create then duplicates it: the residual duplicates the harness
//!   counts and budgets (invariant I1);
//! - emits an `entry.created` webhook event per entry.

use crate::profile::FaultProfile;
use crate::server::{Api, Context, Handled, Indexed, SearchIndex, created_object, key_hex, numbered};
use crate::truth::Effect;
use crate::webhooks::WebhookEvent;
use engine::connector::{ActionSpec, GuaranteeClass, LookupOutcome, Outcome, Request};
use engine::doc::Doc;
use std::sync::Arc;

pub const RECORD_ENTRY: &str = "record_entry";

/// A long lag tail: median 5 s, 5 % tail up to 2 min (the declared bound), 0.2 % incidents up to an hour.
pub fn realistic_profile() -> FaultProfile {
    FaultProfile {
        latency_ms_median: 80,
        latency_ms_p99: 1_200,
        lag_ms_median: 5_000,
        lag_tail_p: 0.05,
        lag_ms_tail_max: 120_000,
        incident_p: 0.002,
        incident_lag_ms_max: 3_600_000,
        ..FaultProfile::default()
    }
}

/// The ledger API's state.
#[derive(Debug)]
pub struct Ledgerly {
    name: Arc<str>,
    action_name: Arc<str>,
    actions: Vec<ActionSpec>,
    by_external_ref: SearchIndex,
    next_id: u64,
}

impl Ledgerly {
    pub fn new(name: &str, profile: &FaultProfile) -> Self {
        Self {
            name: name.into(),
            action_name: RECORD_ENTRY.into(),
            actions: vec![ActionSpec {
                name: RECORD_ENTRY.into(),
                class: GuaranteeClass::LookupBeforeCreate { lag_bound_ms: profile.declared_lag_bound_ms() },
                has_lookup: true,
                lookup_lag_bound_ms: 0,
            }],
            by_external_ref: SearchIndex::default(),
            next_id: 0,
        }
    }
}

impl Api for Ledgerly {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled {
        if request.action != RECORD_ENTRY {
            return Handled::unknown_action(request);
        }
        self.next_id += 1;
        let id = numbered("entry_", self.next_id);
        let external_ref = key_hex(request.key);
        let visible_ms = cx.now_ms + cx.lag_ms;
        let record = created_object(
            [("id", Doc::from(id.as_str())), ("external_ref", Doc::from(external_ref.as_str()))],
            request.inputs,
            &["amount"],
        );
        let indexed = Indexed { visible_ms, record: record.clone() };
        self.by_external_ref.insert(request.run_id, &external_ref, indexed);
        let effect = Effect::of(&self.name, &self.action_name, request, &id, cx.now_ms, visible_ms);
        let event = WebhookEvent {
            source: self.name.clone(),
            event_id: numbered("evt_", self.next_id),
            object_id: id,
            event_type: "entry.created",
            payload: record.clone(),
        };
        Handled { outcome: Outcome::Applied(record.clone()), effect: Some(effect), event: Some(event) }
    }

    fn search(&mut self, now_ms: u64, request: &Request<'_>) -> LookupOutcome {
        match self.by_external_ref.search(&key_hex(request.key), now_ms) {
            Some(found) => LookupOutcome::Found(found.record.clone()),
            None => LookupOutcome::NotFound,
        }
    }

    fn forget_run(&mut self, run_id: &str) {
        self.by_external_ref.forget_run(run_id);
    }

    fn record_count(&self) -> usize {
        self.by_external_ref.len()
    }
}
