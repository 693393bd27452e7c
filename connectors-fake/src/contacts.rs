//! `contacts`: a HubSpot-like CRM contacts API, lookup-before-create.
//!
//! ## Fault model and the public facts behind it (HubSpot's CRM contacts API documentation)
//! - No idempotency keys: the key the engine sends is ignored (it never reaches the business logic).
//! - Email is a unique property, enforced by the primary store at once: creating a contact whose email exists
//!   answers 409 `CONFLICT` with the existing contact's id. The engine is meant to adopt that contact, so the fake
//!   answers [`Outcome::Applied`] with the existing record and `"conflict": true`, and commits nothing new. (Emails
//!   compare case-insensitively, as HubSpot's do.)
//! - Search by email sees new records after "a few moments": the profile's lag. The lookup is that search.
//! - A missing or non-string `email` is a 400 validation error (`NotApplied`, not retryable).
//! - Every created contact emits a `contact.creation` webhook event.
//!
//! Declared class: lookup-before-create with `lag_bound_ms` = the profile's [`FaultProfile::lag_bound_ms`].

use crate::profile::FaultProfile;
use crate::server::{Api, Context, Handled, Indexed, SearchIndex, not_applied, numbered};
use crate::truth::Effect;
use crate::webhooks::WebhookEvent;
use engine::connector::{ActionSpec, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request};
use engine::doc::{Doc, Str};
use std::borrow::Cow;
use std::sync::Arc;

pub const CREATE_CONTACT: &str = "create_contact";

/// HubSpot-like numbers: ~60 ms median latency, search lag ~1 s, 2 % tail up to 10 s. Faults at zero.
pub fn realistic_profile() -> FaultProfile {
    FaultProfile {
        latency_ms_median: 60,
        latency_ms_p99: 600,
        lag_ms_median: 1_000,
        lag_tail_p: 0.02,
        lag_ms_tail_max: 10_000,
        ..FaultProfile::default()
    }
}

/// The contacts API's state.
#[derive(Debug)]
pub struct Contacts {
    name: Arc<str>,
    action_name: Arc<str>,
    actions: Vec<ActionSpec>,
    by_email: SearchIndex,
    next_id: u64,
}

impl Contacts {
    pub fn new(name: &str, profile: &FaultProfile) -> Self {
        Self {
            name: name.into(),
            action_name: CREATE_CONTACT.into(),
            actions: vec![ActionSpec {
                name: CREATE_CONTACT.into(),
                class: GuaranteeClass::LookupBeforeCreate { lag_bound_ms: profile.declared_lag_bound_ms() },
                has_lookup: true,
                lookup_lag_bound_ms: 0,
            }],
            by_email: SearchIndex::default(),
            next_id: 0,
        }
    }
}

/// The contact's email as the search index keys it: lowercase. Borrowed when it is lowercase ASCII already (every
/// email the simulator sends), so a search allocates nothing.
fn email_of(inputs: &Doc) -> Option<Cow<'_, str>> {
    let email = inputs.get("email").and_then(Doc::as_str)?;
    if email.bytes().all(|b| b.is_ascii() && !b.is_ascii_uppercase()) {
        Some(Cow::Borrowed(email))
    } else {
        Some(Cow::Owned(email.to_lowercase()))
    }
}

impl Api for Contacts {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled {
        if request.action != CREATE_CONTACT {
            return Handled::unknown_action(request);
        }
        let Some(email) = email_of(request.inputs) else {
            return Handled::outcome(not_applied("400 `email` is required", false, None));
        };
        if let Some(existing) = self.by_email.committed(&email) {
            let contact = existing.record.as_object().expect("a contact is stored as an object");
            let record = Doc::Object(contact.with(Str::from_static("conflict"), Doc::Bool(true)));
            return Handled::outcome(Outcome::Applied(record));
        }
        self.next_id += 1;
        let id = numbered("contact_", self.next_id);
        let visible_ms = cx.now_ms + cx.lag_ms;
        let record = Doc::object([("id", Doc::from(id.as_str())), ("email", Doc::from(&*email))]);
        self.by_email.insert(request.run_id, &email, Indexed { visible_ms, record: record.clone() });
        let effect = Effect::of(&self.name, &self.action_name, request, &id, cx.now_ms, visible_ms);
        let event = WebhookEvent {
            source: self.name.clone(),
            event_id: numbered("evt_", self.next_id),
            object_id: id,
            event_type: "contact.creation",
            payload: record.clone(),
        };
        Handled { outcome: Outcome::Applied(record.clone()), effect: Some(effect), event: Some(event) }
    }

    fn search(&mut self, now_ms: u64, request: &Request<'_>) -> LookupOutcome {
        let Some(email) = email_of(request.inputs) else {
            // A real search refuses this query for good; the fakes' search failures are all transient (the
            // simulation's workflows always give an email, so it never asks this).
            return LookupOutcome::Failed(NotApplied::retryable("400 `email` is required"));
        };
        match self.by_email.search(&email, now_ms) {
            Some(found) => LookupOutcome::Found(found.record.clone()),
            None => LookupOutcome::NotFound,
        }
    }

    /// Drops the run's contacts (the simulator gives each run its own emails).
    fn forget_run(&mut self, run_id: &str) {
        self.by_email.forget_run(run_id);
    }

    fn record_count(&self) -> usize {
        self.by_email.len()
    }
}
