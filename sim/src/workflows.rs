//! The world's built-in workflows, their triggers, the fake planner, and the fakes the workers share.
//!
//! Step ids are unique across workflows, because the checker keys "this step records a plan first" (I7) by step id.

use crate::checker::ActionInfo;
use crate::profile::Profile;
use connectors_fake::FakeKind;
use connectors_fake::profile::{FaultProfile, WebhookProfile};
use connectors_fake::rng::Rng;
use connectors_fake::server::{Fake, numbered};
use connectors_fake::truth::EffectSink;
use engine::clock::Clock;
use engine::connector::{BoxFuture, GuaranteeClass};
use engine::doc::{Doc, Str};
use engine::executor::{PlannedAction, Planner, Policy};
use engine::ledger::Ledger;
use engine::workflow::{StepKind, Workflow};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The planner agent steps name.
pub const PLANNER: &str = "support-agent";

/// The built-in workflows, as a user would write them (TOML, the engine's workflow format).
pub const WORKFLOWS: &[(&str, &str)] = &[
    (
        "signup",
        r#"
name = "signup"
description = "A new customer: a keyed create with a lookup, a lookup-before-create contact, an at-most-once email."
[[steps]]
id = "customer"
action = "payments.create_customer"
inputs = { email = "{{trigger.email}}", name = "{{trigger.name}}", requested_at = "{{trigger.requested_at}}" }
volatile = ["requested_at"]
[[steps]]
id = "contact"
action = "contacts.create_contact"
inputs = { email = "{{trigger.email}}", customer = "{{steps.customer.output.id}}" }
[[steps]]
id = "welcome"
action = "email.send_email"
inputs = { to = "{{trigger.email}}", template = "welcome", customer = "{{steps.customer.output.id}}" }
"#,
    ),
    (
        "checkout",
        r#"
name = "checkout"
description = "A charge (keyed, no lookup), a ledger entry on an API that confirms before it is visible, a receipt."
[[steps]]
id = "charge"
action = "payments.charge"
inputs = { amount = "{{trigger.amount}}", currency = "usd", customer = "{{trigger.email}}" }
[[steps]]
id = "entry"
action = "ledgerly.record_entry"
inputs = { amount = "{{trigger.amount}}", reference = "{{steps.charge.output.id}}" }
[[steps]]
id = "receipt"
action = "email.send_email"
inputs = { to = "{{trigger.email}}", template = "receipt", charge = "{{steps.charge.output.id}}" }
"#,
    ),
    (
        "payout",
        r#"
name = "payout"
description = "A payout: at-most-once, never retried automatically."
[[steps]]
id = "payout"
action = "payouts.send_payout"
inputs = { amount = "{{trigger.amount}}", destination = "{{trigger.email}}" }
"#,
    ),
    (
        "onboard",
        r#"
name = "onboard"
description = "One step with three writes: the plan is recorded before the first write."
[[steps]]
id = "setup"
writes = [
  { action = "contacts.create_contact", inputs = { email = "{{trigger.email}}" } },
  { action = "payments.create_customer", inputs = { email = "{{trigger.email}}", name = "{{trigger.name}}" } },
  { action = "email.send_email", inputs = { to = "{{trigger.email}}", template = "onboard" } },
]
"#,
    ),
    (
        "assist",
        r#"
name = "assist"
description = "An agent step: the model's list of actions is recorded, then each action runs with its own key."
[[steps]]
id = "triage"
planner = "support-agent"
inputs = { email = "{{trigger.email}}", ticket = "{{trigger.ticket}}" }
"#,
    ),
    (
        "canary",
        r#"
name = "canary"
description = "The canary: an API that claims to honour keys and ignores them."
[[steps]]
id = "canary"
action = "canary.create"
inputs = { email = "{{trigger.email}}" }
"#,
    ),
];

/// Steps that must record a plan before their first write: the built-in ones and the profile's multi-write and agent
/// steps.
pub fn plan_steps(profile: &Profile) -> BTreeSet<String> {
    let mut steps: BTreeSet<String> = ["setup", "triage"].into_iter().map(str::to_owned).collect();
    for def in profile.workflows.values() {
        steps.extend(def.steps.iter().filter(|s| s.writes.is_some() || s.planner.is_some()).map(|s| s.id.clone()));
    }
    steps
}

/// The connectors the fake planner proposes writes on: an agent step needs them all.
const PLANNER_CONNECTORS: &[&str] = &["contacts", "email", "payments"];

/// Checks the workflows a profile defines: each compiles, is named as its key, does not shadow a built-in workflow,
/// uses only actions of the profile's connectors and the fake planner, and uses step ids no other workflow uses (the
/// checker knows steps by id). Errors name the workflow and what is wrong.
pub fn validate_defined(profile: &Profile) -> Result<(), String> {
    if profile.workflows.is_empty() {
        return Ok(());
    }
    let actions = action_infos(profile);
    let mut owners: BTreeMap<String, String> = BTreeMap::new();
    for (name, text) in WORKFLOWS {
        let builtin = Workflow::from_toml(text).map_err(|e| format!("built-in workflow {name} is invalid: {e}"))?;
        for step in builtin.steps {
            owners.insert(step.id, (*name).to_owned());
        }
    }
    for (name, def) in &profile.workflows {
        let at = format!("workflows.{name}");
        if is_workflow(name) {
            return Err(format!("{at}: {name:?} is a built-in workflow; give yours another name"));
        }
        if def.name != *name {
            return Err(format!("{at}: its `name` is {:?}; it must be {name:?}, the table's key", def.name));
        }
        let compiled = Workflow::compile(def).map_err(|e| format!("{at}: {e}"))?;
        if let Some(field) = unknown_trigger_field(def) {
            return Err(format!(
                "{at}: {{{{trigger.{field}}}}} names a field the simulation's triggers do not carry; they carry: {}",
                TRIGGER_FIELDS.join(", ")
            ));
        }
        for step in &compiled.steps {
            let used: Vec<&str> = match &step.kind {
                StepKind::Action { action, .. } => vec![action.as_str()],
                StepKind::Writes(writes) => writes.iter().map(|(a, _)| a.as_str()).collect(),
                StepKind::Agent { planner, .. } => {
                    if planner != PLANNER {
                        return Err(format!("{at}, step {:?}: the only planner is {PLANNER:?}", step.id));
                    }
                    let missing: Vec<&&str> =
                        PLANNER_CONNECTORS.iter().filter(|c| !profile.connectors.contains_key(**c)).collect();
                    if !missing.is_empty() {
                        return Err(format!(
                            "{at}, step {:?}: the planner proposes writes on {}, and the profile lacks {missing:?}",
                            step.id,
                            PLANNER_CONNECTORS.join(", ")
                        ));
                    }
                    Vec::new()
                }
            };
            for action in used {
                if !actions.contains_key(action) {
                    let known: Vec<&str> = actions.keys().map(String::as_str).collect();
                    return Err(format!(
                        "{at}, step {:?}: unknown action {action:?}; the profile's connectors have: {}",
                        step.id,
                        known.join(", ")
                    ));
                }
            }
            if let Some(problem) = contacts_email_problem(def, &step.id) {
                return Err(format!("{at}, step {:?}: {problem}", step.id));
            }
            if let Some(owner) = owners.insert(step.id.clone(), name.clone()) {
                return Err(format!(
                    "{at}: step id {:?} is used by workflow {owner:?} too; step ids must be unique across workflows",
                    step.id
                ));
            }
        }
    }
    Ok(())
}

/// What is wrong with the `email` of a step's `contacts.create_contact` writes, if anything. The contacts API is unique
/// on email, and the fake forgets a run's contacts when the run ends (the simulation's triggers give each run its own
/// email, so its memory stays bounded): an email that is not the run's own would be created again by a later run, a
/// second contact with that email, and adopted by a run whose create found another run's contact, which the checker
/// cannot tell from a lost write (I2). So the email must carry `{{trigger.email}}`, and every call would fail without
/// one (400).
fn contacts_email_problem(def: &engine::workflow::WorkflowDef, step_id: &str) -> Option<String> {
    const ACTION: &str = "contacts.create_contact";
    let step = def.steps.iter().find(|s| s.id == step_id)?;
    let mut writes: Vec<Option<&serde_json::Value>> = Vec::new();
    if step.action.as_deref() == Some(ACTION) {
        writes.push(step.inputs.as_ref());
    }
    writes.extend(step.writes.iter().flatten().filter(|w| w.action == ACTION).map(|w| w.inputs.as_ref()));
    writes.into_iter().find_map(|inputs| match inputs.and_then(|i| i.get("email")) {
        None => Some(format!("{ACTION} needs an `email` input (every call without one fails: 400)")),
        Some(serde_json::Value::String(email)) if email.split_whitespace().collect::<String>().contains(RUN_EMAIL) => {
            None
        }
        Some(email) => Some(format!(
            "{ACTION}'s email {email} does not carry {RUN_EMAIL}: the contacts API is unique on email, and the \
             simulation gives each run its own (the fake forgets a run's contacts when it ends), so an email shared \
             by runs would be created again by later runs and adopted across runs"
        )),
    })
}

/// The template of a run's own email, which every trigger carries.
const RUN_EMAIL: &str = "{{trigger.email}}";

/// Whether one of `connector`'s actions looks anything up (and so waits out a lag bound).
pub fn has_lookup(profile: &Profile, connector: &str) -> bool {
    let prefix = format!("{connector}.");
    action_infos(profile).iter().any(|(action, info)| action.starts_with(&prefix) && info.lag_bound_ms.is_some())
}

/// Refuses `lookup_wait_ms` on a connector none of whose actions looks anything up: the knob is the lag bound a
/// lookup waits out, so there it would change nothing, and a profile that sets it means something it does not get.
pub fn validate_lookup_waits(profile: &Profile) -> Result<(), String> {
    for (name, connector) in &profile.connectors {
        let Some(ms) = connector.lookup_wait_ms else { continue };
        if !has_lookup(profile, name) {
            let with: Vec<&str> =
                profile.connectors.keys().filter(|c| has_lookup(profile, c)).map(String::as_str).collect();
            return Err(format!(
                "connectors.{name}.lookup_wait_ms = {ms}: {name} has no lookup action, so the bound a lookup waits out \
                 would change nothing; connectors with one: {}",
                with.join(", ")
            ));
        }
    }
    Ok(())
}

/// The connectors each workflow needs.
fn connectors_of(workflow: &str) -> &'static [&'static str] {
    match workflow {
        "signup" => &["payments", "contacts", "email"],
        "checkout" => &["payments", "ledgerly", "email"],
        "payout" => &["payouts"],
        "onboard" => &["contacts", "payments", "email"],
        "assist" => &["contacts", "payments", "email"],
        "canary" => &["canary"],
        _ => &[],
    }
}

/// The workflows a profile's connectors can run, compiled.
///
/// Then the profile's own workflows (checked by [`validate_defined`] when the profile was resolved).
pub fn compiled_for(profile: &Profile) -> Vec<Workflow> {
    let builtin = WORKFLOWS
        .iter()
        .filter(|(name, _)| connectors_of(name).iter().all(|c| profile.connectors.contains_key(*c)))
        .map(|(name, text)| {
            Workflow::from_toml(text).unwrap_or_else(|e| panic!("built-in workflow {name} is invalid: {e}"))
        });
    let defined = profile.workflows.iter().map(|(name, def)| {
        Workflow::compile(def).unwrap_or_else(|e| panic!("workflow {name} was validated with the profile: {e}"))
    });
    builtin.chain(defined).collect()
}

/// Is `name` a built-in workflow?
pub fn is_workflow(name: &str) -> bool {
    WORKFLOWS.iter().any(|(n, _)| *n == name)
}

/// Is `name` a workflow this profile can run (built-in or defined by the profile)?
pub fn is_workflow_in(profile: &Profile, name: &str) -> bool {
    is_workflow(name) || profile.workflows.contains_key(name)
}

/// The writes a run of `workflow` is expected to make (for pacing the traffic to a step budget): a defined
/// workflow's action steps count one, multi-write steps their writes, agent steps two (the planner's mean).
pub fn expected_writes(profile: &Profile, workflow: &str) -> u64 {
    if let Some(def) = profile.workflows.get(workflow) {
        return def
            .steps
            .iter()
            .map(|s| match (&s.writes, &s.planner) {
                (Some(writes), _) => writes.len() as u64,
                (None, Some(_)) => 2,
                (None, None) => 1,
            })
            .sum::<u64>()
            .max(1);
    }
    match workflow {
        "signup" | "checkout" | "onboard" => 3,
        "assist" => 2,
        _ => 1,
    }
}

/// The members of every trigger [`trigger`] makes: what a defined workflow's `{{trigger.…}}` may name.
pub const TRIGGER_FIELDS: [&str; 6] = ["email", "name", "amount", "ticket", "requested_at", "workflow"];

/// The first `{{trigger.FIELD…}}` of a defined workflow whose field no trigger carries. The engine would render it
/// as missing on every run; in a profile it is a typo, named before the simulation starts.
fn unknown_trigger_field(def: &engine::workflow::WorkflowDef) -> Option<String> {
    let text = serde_json::to_string(def).expect("a workflow definition serialises");
    text.split("{{").skip(1).find_map(|after| {
        let path = after.trim_start().strip_prefix("trigger.")?;
        let field: String = path.chars().take_while(|c| !matches!(c, '.' | '}' | ' ' | '[')).collect();
        (!TRIGGER_FIELDS.contains(&field.as_str())).then_some(field)
    })
}

/// The trigger payload of run number `index`.
pub fn trigger(workflow: &str, index: u64, rng: &mut Rng) -> Doc {
    let amount = 100 + rng.range(0, 100_000);
    Doc::object([
        ("email", {
            let mut email = numbered("user", index);
            email.push_str("@example.com");
            Doc::from(email.as_str())
        }),
        ("name", Doc::from(numbered("User ", index).as_str())),
        ("amount", amount.into()),
        ("ticket", Doc::from(numbered("ticket-", rng.range(0, 1_000_000)).as_str())),
        ("requested_at", index.into()),
        ("workflow", workflow.into()),
    ])
}

/// The trigger of a replay: the amount edited, the rest unchanged, so some steps replay and some run anew.
pub fn edited_trigger(ledger: &dyn Ledger, run_id: &str) -> Doc {
    let run = ledger.get_run(run_id).ok().flatten().expect("a replayed run exists");
    let trigger: Doc = engine::doc::from_slice(&run.trigger).expect("a stored trigger is JSON");
    match (trigger.as_object(), trigger.get("amount").and_then(Doc::as_u64)) {
        (Some(members), Some(amount)) => Doc::Object(members.with(Str::from_static("amount"), Doc::from(amount + 1))),
        _ => trigger,
    }
}

/// The safeguards in force for a class, for the public guarantees table.
pub fn safeguards(class: &str, policy: Policy) -> Vec<String> {
    if policy == Policy::Naive {
        return vec!["none (naive: fresh key per attempt, no lookup, retries everything)".into()];
    }
    let s: &[&str] = match class {
        "keyed" => &[
            "idempotency key per write",
            "resend with the same key inside retention",
            "lookup or pause past retention",
        ],
        "lookup-before-create" => &["lookup before create", "wait out the lag bound after an indeterminate outcome"],
        "at-most-once" => &["never retried automatically", "pause for a person"],
        "canary" => &["none: the API ignores the keys it accepts"],
        _ => &[],
    };
    s.iter().map(|x| (*x).to_owned()).collect()
}

/// What the checker needs to know about each action of the profile's connectors.
pub fn action_infos(profile: &Profile) -> BTreeMap<String, ActionInfo> {
    let mut out = BTreeMap::new();
    for (name, fault) in &profile.connectors {
        let kind = kind_of(name);
        let server = kind.server(name, fault.clone());
        for spec in server.actions() {
            let class = if kind == FakeKind::Canary { "canary".to_owned() } else { spec.class.name().to_owned() };
            let lag_bound_ms = match spec.class {
                GuaranteeClass::LookupBeforeCreate { lag_bound_ms } => Some(lag_bound_ms),
                _ if spec.has_lookup => Some(spec.lookup_lag_bound()),
                _ => None,
            };
            out.insert(
                format!("{name}.{}", spec.name),
                ActionInfo { class, lag_bound_ms, at_most_once: spec.class == GuaranteeClass::AtMostOnce },
            );
        }
    }
    out
}

/// The fake behind a connector name (the names are the catalogue's).
pub fn kind_of(name: &str) -> FakeKind {
    match name {
        "payments" => FakeKind::Payments,
        "contacts" => FakeKind::Contacts,
        "ledgerly" => FakeKind::Ledgerly,
        "payouts" => FakeKind::Payouts,
        "email" => FakeKind::Email,
        "canary" => FakeKind::Canary,
        other => panic!("no fake named {other:?} (validated when the profile was read)"),
    }
}

/// The connector names a profile may use.
pub const CONNECTOR_NAMES: &[&str] = &["payments", "contacts", "ledgerly", "payouts", "email", "canary"];

/// The fakes of one world, shared by every worker.
pub struct Fakes {
    fakes: Vec<Arc<dyn Fake>>,
    profiles: BTreeMap<String, FaultProfile>,
    planner: Arc<FakePlanner>,
}

impl Fakes {
    pub fn new(profile: &Profile, seed: u64, clock: Arc<dyn Clock>, sink: Arc<dyn EffectSink>) -> Self {
        let root = Rng::new(seed).fork_named("fakes");
        let fakes = profile
            .connectors
            .iter()
            .map(|(name, fault)| {
                kind_of(name).connector(name, fault.clone(), root.fork_named(name), clock.clone(), sink.clone())
            })
            .collect();
        Fakes {
            fakes,
            profiles: profile.connectors.clone(),
            planner: Arc::new(FakePlanner { seed, calls: AtomicU64::new(0) }),
        }
    }

    /// The fakes a worker registers connectors for (shared: the API's state outlives any worker).
    pub fn fakes(&self) -> &[Arc<dyn Fake>] {
        &self.fakes
    }

    pub fn planner(&self) -> Arc<dyn Planner> {
        self.planner.clone()
    }

    pub fn forget_run(&self, run_id: &str) {
        for fake in &self.fakes {
            fake.forget_run(run_id);
        }
    }

    /// Faults off (latency and ordinary read-after-write lag stay: they are how the API works, not faults).
    pub fn heal(&self) {
        for fake in &self.fakes {
            fake.heal();
        }
    }

    pub fn webhook_profile(&self, source: &str) -> WebhookProfile {
        self.profiles.get(source).map(|p| p.webhooks.clone()).unwrap_or_default()
    }
}

/// A deterministic stand-in for a model: proposes one to three writes, and may answer differently each time it is
/// asked (the engine must record the first plan and never ask again once it is recorded).
pub struct FakePlanner {
    seed: u64,
    calls: AtomicU64,
}

impl Planner for FakePlanner {
    fn plan<'a>(
        &'a self,
        run_id: &'a str,
        _step_id: &'a str,
        inputs: &'a Doc,
    ) -> BoxFuture<'a, Result<Vec<PlannedAction>, String>> {
        Box::pin(async move {
            let call = self.calls.fetch_add(1, Ordering::Relaxed);
            let mut rng = Rng::new(self.seed ^ call.wrapping_mul(0x9e37_79b9_7f4a_7c15)).fork_named(run_id);
            // Thinking takes a while; a crash during it loses nothing.
            tokio::time::sleep(Duration::from_millis(200 + rng.range(0, 2_000))).await;
            let email = inputs.get("email").cloned().unwrap_or(Doc::Null);
            let note = Doc::from(format!("triaged (draft {})", rng.range(0, 3)));
            let mut actions = vec![PlannedAction {
                action: "contacts.create_contact".into(),
                inputs: Doc::object([("email", email.clone()), ("note", note)]),
            }];
            if rng.chance(0.5) {
                actions.push(PlannedAction {
                    action: "email.send_email".into(),
                    inputs: Doc::object([("to", email.clone()), ("template", Doc::from_static("support-reply"))]),
                });
            }
            if rng.chance(0.3) {
                actions.push(PlannedAction {
                    action: "payments.create_customer".into(),
                    inputs: Doc::object([("email", email), ("name", Doc::from_static("from support"))]),
                });
            }
            Ok(actions)
        })
    }
}
