//! `canary`: an API that claims to honour idempotency keys and ignores them, to test the harness itself.
//!
//! ## Fault model
//! It declares its action `create` as keyed (with the profile's key retention), accepts the key and throws it away:
//! every request that reaches it creates a new effect. Any retry with the same key — after a timeout after commit,
//! an error after commit, a worker crash after the call — is a duplicate. A simulation with faults over this
//! connector must report duplicates (invariant I1); if it does not, the harness is broken (TigerBeetle's `.canary`
//! fuzzer, which "intentionally fails, to test fuzzing infrastructure itself").

use crate::profile::FaultProfile;
use crate::server::{Api, Context, Handled};
use crate::truth::Effect;
use engine::connector::{ActionSpec, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request};
use engine::doc::Doc;
use std::sync::Arc;

pub const CREATE: &str = "create";

/// The canary API (stateless apart from an id counter).
#[derive(Debug)]
pub struct Canary {
    name: Arc<str>,
    action_name: Arc<str>,
    actions: Vec<ActionSpec>,
    next_id: u64,
}

impl Canary {
    pub fn new(name: &str, profile: &FaultProfile) -> Self {
        Self {
            name: name.into(),
            action_name: CREATE.into(),
            actions: vec![ActionSpec {
                name: CREATE.into(),
                class: GuaranteeClass::Keyed { retention_ms: profile.key_retention_ms },
                has_lookup: false,
                lookup_lag_bound_ms: 0,
            }],
            next_id: 0,
        }
    }
}

impl Api for Canary {
    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled {
        if request.action != CREATE {
            return Handled::unknown_action(request);
        }
        self.next_id += 1;
        let id = format!("canary_{}", self.next_id);
        let effect = Effect::of(&self.name, &self.action_name, request, &id, cx.now_ms, cx.now_ms);
        Handled {
            outcome: Outcome::Applied(Doc::object([("id", Doc::from(id.as_str()))])),
            effect: Some(effect),
            event: None,
        }
    }

    fn search(&mut self, _now_ms: u64, _request: &Request<'_>) -> LookupOutcome {
        LookupOutcome::Failed(NotApplied::retryable("canary has no search"))
    }

    fn forget_run(&mut self, _run_id: &str) {}

    fn record_count(&self) -> usize {
        0
    }
}
