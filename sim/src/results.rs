//! The results of one simulation (the `--json` file of `flowsim run`), the one type `reports` reads.
//!
//! Every field except `wall_seconds`, `steps_per_second` and `peak_rss_bytes` is a function of the seed, the
//! scenario and the build: two runs of one seed serialise to byte-identical JSON once those three are equal.
//! Maps are `BTreeMap` so their order is fixed. Counts are plain sums, so results of shards (or of several seeds)
//! merge by adding them (see [`Results::merge`]).

use std::collections::BTreeMap;

/// A count of how often an invariant was broken.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InvariantResult {
    pub holds: bool,
    pub violations: u64,
    /// False when the invariant was not checked by this run (I9 is checked only with `--check-determinism` or by
    /// `flowsim check`); `holds` is then true and means nothing.
    #[serde(default = "yes")]
    pub checked: bool,
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
    /// blake3 over the ordered event log, lowercase hex. A merge joins the shards' hashes in order.
    pub trace_hash: String,
    pub effects: u64,
    pub duplicates: Duplicates,
    pub paused_runs: u64,
    pub failed_runs: u64,
    /// Runs in which a customer could see a retry (a pause).
    pub runs_with_visible_retry: u64,
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

impl Results {
    /// Did every invariant hold?
    pub fn all_hold(&self) -> bool {
        self.invariants.values().all(|i| i.holds)
    }
}
