//! The streaming invariant checker (I1–I10 of `DESIGN.md`).
//!
//! It is fed, in simulation order, every engine event (tagged with the worker and the worker's incarnation), every
//! effect the fakes committed (the ground truth, tagged out-of-band with the key the engine sent), and the world's
//! own events (a worker killed, a run finished). State is kept per unfinished run and dropped when the run finishes,
//! so memory is bounded by the runs in flight, not by the total number of steps.
//!
//! Logical identity: the checker counts effects per *ledger key* (the rules key of a write). Under `--policy naive`
//! the engine sends a fresh key per attempt, so each `CallStarted` event carries both the ledger key and the key sent;
//! the checker maps one to the other, which is what lets it see the naive policy's duplicates at all.

use crate::results::{Duplicates, InvariantResult, Latency};
use crate::vecmap::VecMap;
use connectors_fake::one_or_more::{OneOrMore, push_or_start};
use engine::event::Event;
use engine::fastmap::{FastMap, FastSet};
use engine::key::Key;
use engine::ledger::{CompactString, Ledger, RunStatus, Status, StepOutcome};
use std::collections::{BTreeMap, BTreeSet};

/// The invariants, in order.
pub const INVARIANTS: [&str; 10] = ["I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9", "I10"];

/// What the checker knows about an action.
#[derive(Debug, Clone)]
pub struct ActionInfo {
    /// The class duplicates are counted under: `keyed`, `lookup-before-create`, `at-most-once`, or `canary`.
    pub class: String,
    /// The visibility-lag bound of a lookup action: a duplicate whose first effect stayed invisible longer than this
    /// is the residual class (counted and budgeted, not an I1 violation).
    pub lag_bound_ms: Option<u64>,
    pub at_most_once: bool,
}

/// One committed effect, as the checker sees it.
#[derive(Debug, Clone)]
pub struct EffectSeen<'a> {
    /// The key the engine sent (the fake's out-of-band tag).
    pub sent_key: &'a Key,
    pub run_id: &'a str,
    /// The connector's name and its action's (the checker's action is `connector.action`).
    pub connector: &'a str,
    pub action: &'a str,
    /// Kept by the checker (the effect gives it up rather than have it copied).
    pub object_id: CompactString,
    pub committed_ms: u64,
    pub visible_ms: u64,
}

#[derive(Debug, Default)]
struct KeyState {
    action: usize,
    step_id: CompactString,
    effects: u32,
    /// The object ids of its effects, in order (more than one only for a duplicate).
    objects: Option<OneOrMore<CompactString>>,
    first_lag_ms: u64,
    succeeded: bool,
    /// The in-flight call: (worker, incarnation, when its lease expires at the latest).
    in_flight: Option<(u32, u32, u64)>,
    /// An attempt of an at-most-once action started; any later attempt needs a person's decision.
    attempted: bool,
    retry_grants: u32,
    first_call_ms: Option<u64>,
    resolved_by_person: bool,
}

impl KeyState {
    /// The ids of the objects its effects created, in order.
    fn object_ids(&self) -> impl Iterator<Item = &str> {
        self.objects.iter().flat_map(OneOrMore::iter).map(CompactString::as_str)
    }
}

#[derive(Debug, Default)]
struct RunState {
    keys: VecMap<Key, KeyState>,
    /// Steps whose plan is recorded (step ids; a set, as a map to nothing).
    plans: VecMap<CompactString, ()>,
    /// Step key → the hash of the plan in force (a different one later breaks I7).
    plan_keys: VecMap<Key, PlanHash>,
    paused_once: bool,
    pending_retry_grants: u32,
    /// Keys sent in place of this run's ledger keys (the naive policy's fresh key per attempt), forgotten with it.
    sent_keys: Vec<Key>,
    aborted: bool,
}

#[derive(Debug, Default, Clone)]
struct Violations {
    count: u64,
    first: Option<String>,
}

/// Per-action counters.
#[derive(Debug, Default, Clone)]
pub struct ActionCounters {
    pub steps: u64,
    pub effects: u64,
    pub duplicates: u64,
    pub residual_duplicates: u64,
    pub calls: u64,
    pub lookups: u64,
}

/// The streaming checker.
pub struct Checker {
    actions: Vec<ActionInfo>,
    action_names: Vec<String>,
    /// Each action's index by its full name: one hash and one compare per event (a binary search over the sorted
    /// names compared a string at every probe, several per event).
    action_index: FastMap<String, usize>,
    /// Each action's name split at its first `.` (as the engine splits it): the connector and the action. Found by a
    /// scan: a world declares a dozen or two actions, and the lengths rule out almost every one without a compare.
    action_parts: Vec<(String, String)>,
    /// Which steps of which workflow must record a plan first (multi-write and agent steps), by step id. Only
    /// looked up (most steps are not in it, which a hash answers without comparing a string).
    plan_steps: FastSet<String>,
    /// Looked up on every event; listed only in sorted order (`unfinished_runs`).
    runs: FastMap<CompactString, RunState>,
    /// Sent key → ledger key, for calls in flight (dropped when the run finishes).
    sent_to_ledger: FastMap<Key, Key>,
    incarnations: Vec<u32>,
    violations: BTreeMap<&'static str, Violations>,
    pub counters: Vec<ActionCounters>,
    pub runs_finished: u64,
    pub runs_paused: u64,
    pub runs_failed: u64,
    pub runs_with_visible_retry: u64,
    /// Resolutions of paused steps the engine applied: a person's "done" or "send it again" (`RunResolved`).
    pub resolutions: u64,
    pub effects: u64,
    pub lookups_total: u64,
    latency: hdrhistogram::Histogram<u64>,
    /// Set when a violation was found and not yet reported to the trace.
    pub new_violation: Option<String>,
    /// The engine's lease: a call is exclusive for at most this long after it started.
    lease_ms: u64,
}

impl Checker {
    pub fn new(
        actions: &BTreeMap<String, ActionInfo>,
        plan_steps: BTreeSet<String>,
        workers: u32,
        lease_ms: u64,
    ) -> Self {
        let action_names: Vec<String> = actions.keys().cloned().collect();
        let action_parts = action_names
            .iter()
            .map(|name| match name.split_once('.') {
                Some((connector, action)) => (connector.to_owned(), action.to_owned()),
                None => panic!("action {name:?} is not named connector.action"),
            })
            .collect();
        Checker {
            actions: actions.values().cloned().collect(),
            counters: vec![ActionCounters::default(); action_names.len()],
            action_index: action_names.iter().enumerate().map(|(i, name)| (name.clone(), i)).collect(),
            action_names,
            action_parts,
            plan_steps: plan_steps.into_iter().collect(),
            runs: FastMap::default(),
            sent_to_ledger: FastMap::default(),
            incarnations: vec![0; workers as usize],
            violations: BTreeMap::new(),
            runs_finished: 0,
            runs_paused: 0,
            runs_failed: 0,
            runs_with_visible_retry: 0,
            resolutions: 0,
            effects: 0,
            lookups_total: 0,
            latency: hdrhistogram::Histogram::new(3).expect("a histogram with 3 significant figures"),
            new_violation: None,
            lease_ms,
        }
    }

    fn violate(&mut self, id: &'static str, description: String) {
        let v = self.violations.entry(id).or_default();
        v.count += 1;
        if v.first.is_none() {
            v.first = Some(description.clone());
        }
        if self.new_violation.is_none() {
            self.new_violation = Some(format!("{id}: {description}"));
        }
    }

    /// Records a violation found outside the checker (the webhook driver's I6, the determinism check's I9).
    pub fn external_violation(&mut self, id: &'static str, description: String) {
        self.violate(id, description);
    }

    pub fn worker_killed(&mut self, worker: u32) {
        self.incarnations[worker as usize] += 1;
    }

    /// The index of the action the engine names `connector.action` (equal full names are equal parts, so the full
    /// name is looked up without splitting it).
    fn action_of(&self, name: &str) -> usize {
        match self.action_index.get(name) {
            Some(&i) => i,
            None => panic!("the engine called action {name:?}, which the world did not declare"),
        }
    }

    /// The index of the action a fake reports as `connector` and `action`.
    fn action_of_parts(&self, connector: &str, action: &str) -> usize {
        match self.find_action(connector, action) {
            Some(i) => i,
            None => panic!("a fake committed action {connector}.{action}, which the world did not declare"),
        }
    }

    fn find_action(&self, connector: &str, action: &str) -> Option<usize> {
        self.action_parts.iter().position(|(c, a)| c == connector && a == action)
    }

    /// One engine event from `worker`; `plan_hash` is [`plan_hash`] of a recorded plan when the caller has hashed it
    /// already (the world hashes it for the trace), else the checker hashes it.
    pub fn on_event(&mut self, worker: u32, now_ms: u64, event: &Event<'_>, plan_hash: Option<&PlanHash>) {
        match *event {
            Event::RunStarted { run_id, .. } => {
                run_state(&mut self.runs, run_id);
            }
            Event::PlanRecorded { run_id, step_id, key, plan, .. } => {
                let run = run_state(&mut self.runs, run_id);
                run.plans.get_or_insert_with(step_id, |s: &str| CompactString::from(s), || ());
                // Plans are per step key (a replay with edited inputs has a new key and a new plan, legitimately);
                // two workers may both report the plan in force, but its content must never change.
                let hash = plan_hash.copied().unwrap_or_else(|| self::plan_hash(plan));
                let first = run.plan_keys.get_or_insert_with(key, |k| *k, || hash);
                if *first != hash {
                    self.violate("I7", format!("run {run_id} step {step_id}: a recorded plan was replaced"));
                }
            }
            Event::CallStarted { run_id, step_id, key, sent_key, action, attempt } => {
                let action = self.action_of(action);
                let incarnation = self.incarnations[worker as usize];
                let at_most_once = self.actions[action].at_most_once;
                let plan_needed = self.plan_steps.contains(step_base(step_id));
                let run = run_state(&mut self.runs, run_id);
                if sent_key != key {
                    run.sent_keys.push(*sent_key);
                }
                let plan_missing = plan_needed && !run.plans.contains_key(step_base(step_id));
                let grants_available = run.pending_retry_grants;
                let state = key_state(&mut run.keys, key, action, step_id);
                let mut found: Vec<(&'static str, String)> = Vec::new();
                if state.succeeded {
                    found.push(("I5", format!("run {run_id} step {step_id}: a call was made for a succeeded key")));
                }
                // Another live worker's call whose lease has not expired: two executions of one key at once. (After
                // the lease expired, taking the key over is the protocol; the old owner's writes are fenced.)
                if let Some((w, inc, lease_end_ms)) = state.in_flight
                    && self.incarnations[w as usize] == inc
                    && now_ms < lease_end_ms
                {
                    found.push((
                        "I10",
                        format!("run {run_id} step {step_id}: workers {w} and {worker} executed one key at once"),
                    ));
                }
                if at_most_once && state.attempted {
                    if state.retry_grants > 0 {
                        state.retry_grants -= 1;
                    } else if grants_available > 0 {
                        run.pending_retry_grants -= 1;
                    } else {
                        found.push((
                            "I4",
                            format!(
                                "run {run_id} step {step_id}: at-most-once action sent again (attempt {attempt}) \
                                 without a person's decision"
                            ),
                        ));
                    }
                }
                if plan_missing {
                    found.push((
                        "I7",
                        format!("run {run_id} step {step_id}: a write started before its plan was recorded"),
                    ));
                }
                state.attempted = true;
                state.in_flight = Some((worker, incarnation, now_ms + self.lease_ms));
                state.first_call_ms.get_or_insert(now_ms);
                self.counters[action].calls += 1;
                // Under the rules the key sent is the ledger key; only the naive policy needs the mapping.
                if sent_key != key {
                    self.sent_to_ledger.insert(*sent_key, *key);
                }
                for (id, d) in found {
                    self.violate(id, d);
                }
            }
            Event::CallEnded { run_id, key, .. } => {
                if let Some(state) = self.runs.get_mut(run_id).and_then(|r| r.keys.get_mut(key)) {
                    state.in_flight = None;
                }
            }
            Event::Lookup { run_id, step_id, key, action, .. } => {
                let action = self.action_of(action);
                self.counters[action].lookups += 1;
                self.lookups_total += 1;
                let run = run_state(&mut self.runs, run_id);
                let state = key_state(&mut run.keys, key, action, step_id);
                state.first_call_ms.get_or_insert(now_ms);
            }
            Event::StepSucceeded { run_id, step_id, key, action } => {
                let action = self.action_of(action);
                let run = run_state(&mut self.runs, run_id);
                let state = key_state(&mut run.keys, key, action, step_id);
                state.succeeded = true;
                state.in_flight = None;
                if let Some(start) = state.first_call_ms {
                    let _ = self.latency.record(now_ms.saturating_sub(start));
                }
            }
            Event::RunPaused { run_id, .. } => {
                let run = run_state(&mut self.runs, run_id);
                run.paused_once = true;
            }
            Event::RunResolved { run_id, key, resolution } => {
                self.resolutions += 1;
                let run = run_state(&mut self.runs, run_id);
                match resolution {
                    "retry" => match run.keys.get_mut(key) {
                        Some(state) => state.retry_grants += 1,
                        None => run.pending_retry_grants += 1,
                    },
                    "abort" => run.aborted = true,
                    _ => {
                        if let Some(state) = run.keys.get_mut(key) {
                            state.resolved_by_person = true;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// One committed effect.
    pub fn on_effect(&mut self, effect: EffectSeen<'_>) {
        self.effects += 1;
        let action = self.action_of_parts(effect.connector, effect.action);
        self.counters[action].effects += 1;
        let ledger_key = self.sent_to_ledger.get(effect.sent_key).copied().unwrap_or(*effect.sent_key);
        let Some(run) = self.runs.get_mut(effect.run_id) else {
            self.violate("I3", format!("run {}: an effect committed after the run finished", effect.run_id));
            return;
        };
        let state = run.keys.get_or_insert_with(&ledger_key, |k| *k, || KeyState { action, ..KeyState::default() });
        state.effects += 1;
        push_or_start(&mut state.objects, effect.object_id);
        if state.effects == 1 {
            state.first_lag_ms = effect.visible_ms.saturating_sub(effect.committed_ms);
            return;
        }
        let info = &self.actions[action];
        let residual = info.lag_bound_ms.is_some_and(|bound| state.first_lag_ms > bound);
        let counters = &mut self.counters[action];
        counters.duplicates += 1;
        if residual {
            counters.residual_duplicates += 1;
        } else {
            let description = format!(
                "run {} step {}: key {} of {} ({}) has {} effects",
                effect.run_id, state.step_id, ledger_key, self.action_names[action], info.class, state.effects
            );
            self.violate("I1", description);
        }
    }

    /// The run reached a terminal or paused state: check what can only be checked now, then forget it.
    pub fn run_finished(&mut self, run_id: &str, status: RunStatus, ledger: &dyn Ledger) {
        let Some(run) = self.runs.remove(run_id) else { return };
        for sent in &run.sent_keys {
            self.sent_to_ledger.remove(sent);
        }
        self.runs_finished += 1;
        match status {
            RunStatus::Paused => self.runs_paused += 1,
            RunStatus::Failed => self.runs_failed += 1,
            _ => {}
        }
        if run.paused_once {
            self.runs_with_visible_retry += 1;
        }
        let mut found: Vec<(&'static str, String)> = Vec::new();
        // Whether any of the run's writes created `id`: a step may adopt an object another step created (below).
        let run_created = |id: &str| run.keys.values().flat_map(|s| s.object_ids()).any(|object| object == id);
        for (key, state) in run.keys.iter() {
            self.counters[state.action].steps += 1;
            // The status and output are read in place (the ledger's lock is held meanwhile; nothing below calls the
            // ledger).
            let mut check = |record: Option<StepOutcome<'_>>| {
                let ledger_succeeded = record.is_some_and(|r| r.status == Status::Succeeded);
                if state.succeeded && !ledger_succeeded {
                    found.push((
                        "I10",
                        format!("run {run_id} step {}: a succeeded key is gone from the ledger", state.step_id),
                    ));
                }
                let output = record.and_then(|r| r.output);
                if ledger_succeeded && !state.resolved_by_person {
                    // No effect of its own is right when the step adopted an object another step of the run
                    // created: an API unique on a natural key (contacts: the email) answers a second create with the
                    // first object, and a lookup finds it.
                    let adopted = || {
                        let id = serde_json::from_slice::<serde_json::Value>(output.unwrap_or_default())
                            .ok()
                            .and_then(|v| v.get("id").and_then(|id| id.as_str().map(str::to_owned)));
                        id.is_some_and(|id| run_created(&id))
                    };
                    if state.effects == 0 {
                        if !adopted() {
                            found.push((
                                "I2",
                                format!("run {run_id} step {}: succeeded without any effect", state.step_id),
                            ));
                        }
                    } else if let Some(output) = output
                        && !state.object_ids().any(|object| contains(output, object.as_bytes()))
                    {
                        found.push((
                            "I2",
                            format!(
                                "run {run_id} step {}: the stored output describes none of its effects ({})",
                                state.step_id,
                                state.object_ids().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                }
                if state.effects > 0 && !ledger_succeeded && status == RunStatus::Failed && !run.aborted {
                    found.push((
                        "I3",
                        format!("run {run_id} step {}: an effect belongs to a run marked failed", state.step_id),
                    ));
                }
            };
            if let Err(e) = ledger.inspect_outcome(key, &mut check) {
                panic!("the ledger failed while the checker read key {key}: {e}");
            }
        }
        for (id, d) in found {
            self.violate(id, d);
        }
    }

    /// Runs still unfinished after the heal phase: I8, one violation per run, reported to the trace as any other
    /// violation is ([`Checker::new_violation`]) with the description the results give as I8's first.
    pub fn finish(&mut self) {
        let stuck = self.unfinished_runs(3);
        let count = self.runs.len() as u64;
        if count > 0 {
            let v = self.violations.entry("I8").or_default();
            v.count += count;
            let first = v.first.get_or_insert_with(|| {
                format!("{count} runs neither finished nor paused after the heal phase (e.g. {})", stuck.join(", "))
            });
            if self.new_violation.is_none() {
                self.new_violation = Some(format!("I8: {first}"));
            }
        }
    }

    /// The object id of an effect of a run's step that is not succeeded (what a person finds when they look at the
    /// external system for a paused run).
    pub fn paused_effect(&self, run_id: &str) -> Option<String> {
        let run = self.runs.get(run_id)?;
        run.keys
            .values()
            .find(|k| !k.succeeded && k.effects > 0)
            .and_then(|k| k.objects.as_ref().map(|objects| objects.first().to_string()))
    }

    /// Up to `count` runs that have not finished, for diagnosis: the first in string order (as a `BTreeMap` lists them).
    pub fn unfinished_runs(&self, count: usize) -> Vec<String> {
        let mut ids: Vec<&str> = self.runs.keys().map(CompactString::as_str).collect();
        ids.sort_unstable();
        ids.into_iter().take(count).map(str::to_owned).collect()
    }

    pub fn runs_in_flight(&self) -> usize {
        self.runs.len()
    }

    pub fn invariants(&self, determinism_checked: bool) -> BTreeMap<String, InvariantResult> {
        INVARIANTS
            .iter()
            .map(|id| {
                let v = self.violations.get(id).cloned().unwrap_or_default();
                let checked = *id != "I9" || determinism_checked;
                (
                    (*id).to_owned(),
                    InvariantResult {
                        holds: v.count == 0,
                        violations: v.count,
                        first_violation: v.first,
                        checked,
                        checked_runs: None,
                    },
                )
            })
            .collect()
    }

    /// Duplicates by class. Under the rules (`residual_by_lookup`), a duplicate that a lookup missed because the
    /// first effect was still invisible past the lag bound belongs to the residual class, `lookup-before-create`,
    /// whatever the action's own class (a keyed action past its key retention falls back to its lookup). Under the
    /// naive policy nothing looks anything up, so every duplicate stays with its action's class.
    pub fn duplicates(&self, residual_by_lookup: bool) -> Duplicates {
        let mut d = Duplicates::default();
        for (i, c) in self.counters.iter().enumerate() {
            d.total += c.duplicates;
            let residual = if residual_by_lookup { c.residual_duplicates } else { 0 };
            let own = c.duplicates - residual;
            if own > 0 || residual == 0 {
                *d.by_class.entry(self.actions[i].class.clone()).or_default() += own;
            }
            if residual > 0 {
                *d.by_class.entry(RESIDUAL_CLASS.to_owned()).or_default() += residual;
            }
        }
        d
    }

    pub fn latency(&self) -> Latency {
        let h = &self.latency;
        Latency {
            p50_ms: h.value_at_quantile(0.5),
            p90_ms: h.value_at_quantile(0.9),
            p99_ms: h.value_at_quantile(0.99),
            p999_ms: h.value_at_quantile(0.999),
            max_ms: h.max(),
        }
    }

    pub fn action_names(&self) -> &[String] {
        &self.action_names
    }

    pub fn action_info(&self, index: usize) -> &ActionInfo {
        &self.actions[index]
    }
}

/// The class the article's residual duplicates belong to: lookups that missed a write still invisible to reads.
pub const RESIDUAL_CLASS: &str = "lookup-before-create";

/// A recorded plan's fingerprint, for the trace and for I7 (a plan in force never changes): XXH3-128 of its bytes, as
/// the trace hash is (a fingerprint compared within one simulation, not a commitment).
pub type PlanHash = [u8; 16];

/// [`PlanHash`] of a plan's recorded bytes.
pub fn plan_hash(plan: &[u8]) -> PlanHash {
    xxhash_rust::xxh3::xxh3_128(plan).to_le_bytes()
}

/// A write of a multi-write step reports its step id as `step#index`; plans are recorded per step.
fn step_base(step_id: &str) -> &str {
    // A byte scan: step ids are a few bytes long, shorter than `split_once`'s `memchr` set-up.
    match step_id.bytes().position(|b| b == b'#') {
        Some(at) => &step_id[..at],
        None => step_id,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// The state of a run's `key` (an engine event's key, of `action` in step `step_id`), created on first sight. Takes
/// the run's key map, not the run, so the caller can still change the run's other fields meanwhile.
fn key_state<'a>(keys: &'a mut VecMap<Key, KeyState>, key: &Key, action: usize, step_id: &str) -> &'a mut KeyState {
    keys.get_or_insert_with(key, |k| *k, || KeyState { action, step_id: step_id.into(), ..KeyState::default() })
}

/// The run's state, created on first sight; looks up by `&str` first so the hot path allocates nothing.
fn run_state<'a>(runs: &'a mut FastMap<CompactString, RunState>, run_id: &str) -> &'a mut RunState {
    if !runs.contains_key(run_id) {
        runs.insert(run_id.into(), RunState::default());
    }
    runs.get_mut(run_id).expect("inserted above")
}

#[cfg(test)]
mod tests {
    use super::step_base;

    #[test]
    fn a_plan_recorded_again_must_be_the_same_plan() {
        use super::{ActionInfo, Checker, plan_hash};
        use engine::event::Event;
        use engine::key::Key;
        let info = ActionInfo { class: "keyed".into(), lag_bound_ms: None, at_most_once: false };
        let actions = std::collections::BTreeMap::from([("api.a".to_string(), info)]);
        let mut checker = Checker::new(&actions, ["w".to_string()].into(), 2, 1_000);
        fn plan<'a>(key: &'a Key, plan: &'a [u8]) -> Event<'a> {
            Event::PlanRecorded { run_id: "r1", step_id: "w", key, writes: 1, reused: false, plan }
        }
        let (key, edited_key) = (Key([1; 32]), Key([2; 32]));
        let i7 = |checker: &Checker| checker.invariants(false)["I7"].violations;
        checker.on_event(0, 1, &Event::RunStarted { run_id: "r1", workflow: "wf" }, None);
        let first: &[u8] = br#"[{"action":"api.a","inputs":{"n":1}}]"#;
        checker.on_event(0, 2, &plan(&key, first), None);
        // Reported again (another worker, a re-drive), by its hash or not: the same plan.
        checker.on_event(1, 3, &plan(&key, first), Some(&plan_hash(first)));
        assert_eq!(i7(&checker), 0);
        // Another key (edited inputs) may have another plan.
        checker.on_event(1, 4, &plan(&edited_key, br#"[]"#), None);
        assert_eq!(i7(&checker), 0);
        // The same key with a plan that differs in one byte: replaced.
        checker.on_event(0, 5, &plan(&key, br#"[{"action":"api.a","inputs":{"n":2}}]"#), None);
        assert_eq!(i7(&checker), 1);
        assert_ne!(plan_hash(b"a"), plan_hash(b"b"));
    }

    #[test]
    fn a_writes_index_is_cut_from_the_step_id() {
        assert_eq!(step_base("charge#0"), "charge");
        assert_eq!(step_base("charge#12#3"), "charge");
        assert_eq!(step_base("charge"), "charge");
        assert_eq!(step_base("#1"), "");
        assert_eq!(step_base("café#2"), "café");
    }
}
