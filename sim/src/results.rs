//! The results of one simulation (the `--json` file of `flowsim run`), the one type `reports` reads.
//!
//! Every field except `wall_seconds`, `steps_per_second` and `peak_rss_bytes` is a function of the seed, the
//! scenario and the build: two runs of one seed serialise to byte-identical JSON once those three are equal.
//! Maps are `BTreeMap` so their order is fixed. Counts are plain sums, so results of shards (or of several seeds)
//! merge by adding them (see [`Results::merge`]).

use std::collections::{BTreeMap, BTreeSet};

/// A count of how often an invariant was broken.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InvariantResult {
    pub holds: bool,
    pub violations: u64,
    /// False when the invariant was not checked by this run (I9 is checked only with `--check-determinism` or by
    /// `flowsim check`); `holds` is then true and means nothing.
    #[serde(default = "yes")]
    pub checked: bool,
    /// In a merge of runs some of which checked it and some not (`flowsim check` checks I9 on seed 1 only): how
    /// many of the [`Results::merged_runs`] did. Absent when all of them did, or none (`checked` says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_runs: Option<u64>,
    /// A description of the first violation, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_violation: Option<String>,
}

/// Duplicates, in total and by guarantee class (`keyed`, `lookup-before-create`, `at-most-once`, plus `canary` for
/// the key-ignoring connector).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Duplicates {
    pub total: u64,
    pub by_class: BTreeMap<String, u64>,
}

/// What one connector action saw.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActionStats {
    /// `keyed`, `lookup-before-create`, `at-most-once`.
    pub class: String,
    /// The safeguards in force, for the public guarantees table (e.g. "idempotency key", "lookup after lag bound").
    pub safeguards: Vec<String>,
    /// Write steps (keys) that reached this action.
    pub steps: u64,
    /// Committed effects (the fake's ground truth).
    pub effects: u64,
    /// Second and later effects for one key.
    pub duplicates: u64,
    /// Of those, the ones a lookup missed because the first effect stayed invisible longer than the lag bound (the
    /// article's residual class). Counted under `lookup-before-create` in [`Duplicates::by_class`] under the rules,
    /// whatever the action's own class: a keyed action past its key retention falls back to its lookup.
    #[serde(default)]
    pub residual_duplicates: u64,
    pub calls: u64,
    pub lookups: u64,
    /// The lookup connector's visibility-lag bound, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_bound_ms: Option<u64>,
}

/// Step latency percentiles in simulated milliseconds (from the first attempt to the succeeded record).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Latency {
    pub p50_ms: u64,
    pub p90_ms: u64,
    pub p99_ms: u64,
    pub p999_ms: u64,
    pub max_ms: u64,
}

/// The results of one simulation, or the merge of several.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Results {
    pub scenario: String,
    pub seed: u64,
    /// `rules` or `naive`.
    pub policy: String,
    /// `memory` or `sqlite`.
    pub ledger: String,
    /// Step executions that reached a connector action (one per key).
    pub steps: u64,
    pub runs: u64,
    /// 128-bit XXH3 over the ordered event log (`trace::Trace`), lowercase hex. A merge joins the shards' hashes in
    /// order.
    pub trace_hash: String,
    /// In a merge of both ledgers' runs (`ledger` is `(several)`): the ledger of each trace hash, in the same order,
    /// joined with `,`. Absent otherwise, or when a merged input did not say (a file from before this field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_ledgers: Option<String>,
    pub effects: u64,
    pub duplicates: Duplicates,
    pub paused_runs: u64,
    pub failed_runs: u64,
    /// Runs in which a customer could see a retry (a pause).
    pub runs_with_visible_retry: u64,
    /// Paused steps a person resolved and the engine then applied the decision to (marked done with what the
    /// external system shows, or sent again); `world.person_share` of the paused runs get a person.
    #[serde(default)]
    pub person_resolutions: u64,
    /// Share of the catalogue's actions with automatic retries enabled, 0..=1.
    pub auto_retry_coverage: f64,
    /// Lookups made only because of the rules (the "extra read"), and the simulated time they cost.
    pub extra_lookups: u64,
    pub extra_lookup_ms_total: u64,
    pub latency: Latency,
    /// By `connector.action`.
    pub actions: BTreeMap<String, ActionStats>,
    /// By invariant id (`I1` … `I10`).
    pub invariants: BTreeMap<String, InvariantResult>,
    /// Worker crashes by cause: each crash point's name, and `random` for crashes at random times.
    #[serde(default)]
    pub crashes: BTreeMap<String, u64>,
    /// Every fault knob in force, after the seed filled the ones the profile left open.
    pub knobs: BTreeMap<String, serde_json::Value>,
    /// The command that reproduces this run exactly.
    pub repro: String,
    /// How many results were merged into this one (1 for a single run).
    #[serde(default = "one")]
    pub merged_runs: u64,
    pub simulated_seconds: f64,
    // Not deterministic: measured outside the simulation.
    pub wall_seconds: f64,
    pub steps_per_second: f64,
    pub peak_rss_bytes: u64,
}

fn yes() -> bool {
    true
}

fn one() -> u64 {
    1
}

/// The ledgers a simulation runs with, as a result names them (`world::LedgerKind::as_str`): a trace hash stands for
/// at most this many distinct measurements.
pub const LEDGERS: [&str; 2] = ["memory", "sqlite"];

/// What a merge writes into a text field whose inputs disagree.
pub const MIXED: &str = "(several)";

/// `a` if both agree, else [`MIXED`]. Associative: the result is `a` exactly when every input was `a`.
fn merge_text(a: &mut String, b: &str) {
    if a != b {
        *a = MIXED.to_string();
    }
}

impl Results {
    /// Did every invariant hold?
    pub fn all_hold(&self) -> bool {
        self.invariants.values().all(|i| i.holds)
    }

    /// Folds `other` into `self`, so that the results of shards (or of several seeds) add up to one.
    ///
    /// Counts are summed and maps merged key-wise. Text that differs (`scenario`, `policy`, `ledger`, `repro`, an
    /// action's `class`, a knob) becomes `"(several)"` ([`MIXED`]: no scenario, policy or command is named so);
    /// `seed` stays the first one's. Trace hashes are joined in order with `,` (and, in a merge of both ledgers, their
    /// ledgers in `trace_ledgers`). Figures that cannot be summed are merged so that the merge stays associative
    /// (merging shard merges gives the same as merging every run at once): latency percentiles keep the larger value
    /// (a conservative bound; exact percentiles would need histograms), `peak_rss_bytes` the larger, an action's
    /// `lag_bound_ms` stays only if equal, `auto_retry_coverage` stays if equal and is otherwise the mean weighted by
    /// runs. `steps_per_second` is recomputed from the summed steps and wall seconds.
    pub fn merge(&mut self, other: &Results) {
        let ledgers = self.hash_ledgers().zip(other.hash_ledgers()).map(|(ours, theirs)| {
            let all: Vec<&str> = ours.into_iter().chain(theirs).collect();
            all.join(",")
        });
        merge_text(&mut self.scenario, &other.scenario);
        merge_text(&mut self.policy, &other.policy);
        merge_text(&mut self.ledger, &other.ledger);
        self.trace_ledgers = ledgers.filter(|_| self.ledger == MIXED);
        merge_text(&mut self.repro, &other.repro);
        // Weighted before `runs` is summed below.
        if self.auto_retry_coverage != other.auto_retry_coverage {
            let runs_total = self.runs + other.runs;
            self.auto_retry_coverage = if runs_total == 0 {
                self.auto_retry_coverage.min(other.auto_retry_coverage)
            } else {
                (self.auto_retry_coverage * self.runs as f64 + other.auto_retry_coverage * other.runs as f64)
                    / runs_total as f64
            };
        }
        self.steps += other.steps;
        self.runs += other.runs;
        self.trace_hash = match (self.trace_hash.is_empty(), other.trace_hash.is_empty()) {
            (_, true) => std::mem::take(&mut self.trace_hash),
            (true, false) => other.trace_hash.clone(),
            (false, false) => format!("{},{}", self.trace_hash, other.trace_hash),
        };
        self.effects += other.effects;
        self.duplicates.total += other.duplicates.total;
        for (class, count) in &other.duplicates.by_class {
            *self.duplicates.by_class.entry(class.clone()).or_default() += count;
        }
        self.paused_runs += other.paused_runs;
        self.failed_runs += other.failed_runs;
        self.runs_with_visible_retry += other.runs_with_visible_retry;
        self.person_resolutions += other.person_resolutions;
        self.extra_lookups += other.extra_lookups;
        self.extra_lookup_ms_total += other.extra_lookup_ms_total;
        let (l, o) = (&mut self.latency, &other.latency);
        l.p50_ms = l.p50_ms.max(o.p50_ms);
        l.p90_ms = l.p90_ms.max(o.p90_ms);
        l.p99_ms = l.p99_ms.max(o.p99_ms);
        l.p999_ms = l.p999_ms.max(o.p999_ms);
        l.max_ms = l.max_ms.max(o.max_ms);
        for (name, theirs) in &other.actions {
            match self.actions.get_mut(name) {
                None => {
                    self.actions.insert(name.clone(), theirs.clone());
                }
                Some(ours) => ours.merge(theirs),
            }
        }
        // How many runs of each side checked an invariant; a side without it did not check it.
        let (our_runs, their_runs) = (self.merged_runs.max(1), other.merged_runs.max(1));
        let checked_in = |i: Option<&InvariantResult>, runs: u64| {
            i.map_or(0, |i| i.checked_runs.unwrap_or(if i.checked { runs } else { 0 }))
        };
        let ids: BTreeSet<&String> = self.invariants.keys().chain(other.invariants.keys()).collect();
        for id in ids.into_iter().cloned().collect::<Vec<String>>() {
            let theirs = other.invariants.get(&id);
            let checked = checked_in(self.invariants.get(&id), our_runs) + checked_in(theirs, their_runs);
            let ours = self.invariants.entry(id).or_insert_with(|| InvariantResult {
                holds: true,
                violations: 0,
                checked: false,
                checked_runs: None,
                first_violation: None,
            });
            if let Some(theirs) = theirs {
                ours.holds &= theirs.holds;
                ours.violations += theirs.violations;
                if ours.first_violation.is_none() {
                    ours.first_violation.clone_from(&theirs.first_violation);
                }
            }
            // Checked when any merged run checked it, and how many did when not all (a violation shows all the same:
            // `holds`).
            ours.checked = checked > 0;
            ours.checked_runs = (checked > 0 && checked < our_runs + their_runs).then_some(checked);
        }
        for (cause, count) in &other.crashes {
            *self.crashes.entry(cause.clone()).or_default() += count;
        }
        for (knob, theirs) in &other.knobs {
            match self.knobs.get_mut(knob) {
                None => {
                    self.knobs.insert(knob.clone(), theirs.clone());
                }
                Some(ours) if ours != theirs => *ours = serde_json::Value::String(MIXED.to_string()),
                Some(_) => {}
            }
        }
        // A result that predates `merged_runs` (or was built with `Default`) still stands for one run.
        self.merged_runs = self.merged_runs.max(1) + other.merged_runs.max(1);
        self.simulated_seconds += other.simulated_seconds;
        self.wall_seconds += other.wall_seconds;
        self.steps_per_second = if self.wall_seconds > 0.0 { self.steps as f64 / self.wall_seconds } else { 0.0 };
        self.peak_rss_bytes = self.peak_rss_bytes.max(other.peak_rss_bytes);
    }

    /// The trace hashes, each with its ledger when known: a merge of both ledgers' runs names them only when every
    /// input did ([`Results::trace_ledgers`]).
    pub fn hashes_with_ledgers(&self) -> impl Iterator<Item = (&str, Option<&str>)> {
        let ledgers = self.hash_ledgers();
        self.trace_hashes().enumerate().map(move |(i, h)| (h, ledgers.as_ref().and_then(|l| l.get(i).copied())))
    }

    /// The ledger of each trace hash, in order, or `None` when this is a merge of both ledgers' runs that does not
    /// say which is which.
    fn hash_ledgers(&self) -> Option<Vec<&str>> {
        match &self.trace_ledgers {
            Some(ledgers) => Some(ledgers.split(',').collect()),
            None if self.ledger == MIXED => None,
            None => Some(vec![self.ledger.as_str(); self.trace_hashes().count()]),
        }
    }

    /// The trace hashes: one for a single run, each merged run's in order for a merge (none for an empty result).
    pub fn trace_hashes(&self) -> impl Iterator<Item = &str> {
        self.trace_hash.split(',').filter(|h| !h.is_empty())
    }

    /// The merge of `all` in order ([`Results::merge`]), or `None` when `all` is empty.
    pub fn merge_all<'a>(all: impl IntoIterator<Item = &'a Results>) -> Option<Results> {
        let mut all = all.into_iter();
        let mut merged = all.next()?.clone();
        for r in all {
            merged.merge(r);
        }
        Some(merged)
    }
}

impl ActionStats {
    /// Folds `other` (the same action in another run) into `self`; see [`Results::merge`].
    pub fn merge(&mut self, other: &ActionStats) {
        merge_text(&mut self.class, &other.class);
        // Union in order of first appearance: associative, and unchanged when both agree.
        for safeguard in &other.safeguards {
            if !self.safeguards.contains(safeguard) {
                self.safeguards.push(safeguard.clone());
            }
        }
        self.steps += other.steps;
        self.effects += other.effects;
        self.duplicates += other.duplicates;
        self.residual_duplicates += other.residual_duplicates;
        self.calls += other.calls;
        self.lookups += other.lookups;
        if self.lag_bound_ms != other.lag_bound_ms {
            self.lag_bound_ms = None;
        }
    }
}
