//! Synthetic results shared by the report tests: a small catalogue with the three guarantee classes.

#![allow(dead_code)] // reason: each test file uses a different part of this module

use std::collections::BTreeMap;

use reports::Results;
use sim::results::{ActionStats, Duplicates, InvariantResult, Latency};

/// One action: (name, class, safeguards, steps, duplicates, lag bound).
pub type ActionSpec<'a> = (&'a str, &'a str, &'a [&'a str], u64, u64, Option<u64>);

/// A results value as one `flowsim run` would write it.
pub fn results(scenario: &str, seed: u64, policy: &str, actions: &[ActionSpec], broken: &[&str]) -> Results {
    let mut by_class: BTreeMap<String, u64> = BTreeMap::new();
    let mut map = BTreeMap::new();
    for &(name, class, safeguards, steps, duplicates, lag_bound_ms) in actions {
        *by_class.entry(class.to_string()).or_default() += duplicates;
        map.insert(
            name.to_string(),
            ActionStats {
                class: class.to_string(),
                safeguards: safeguards.iter().map(|s| s.to_string()).collect(),
                steps,
                effects: steps + duplicates,
                duplicates,
                residual_duplicates: if class == "lookup-before-create" { duplicates } else { 0 },
                calls: steps + duplicates + seed % 7,
                lookups: if class == "lookup-before-create" { steps } else { 0 },
                lag_bound_ms,
            },
        );
    }
    let steps: u64 = actions.iter().map(|a| a.3).sum();
    let total: u64 = actions.iter().map(|a| a.4).sum();
    let invariants = (1..=10)
        .map(|i| {
            let id = format!("I{i}");
            let bad = broken.contains(&id.as_str());
            let inv = InvariantResult {
                holds: !bad,
                violations: u64::from(bad) * 2,
                first_violation: bad.then(|| format!("key k{seed} has 2 effects | <b>")),
                checked: true,
                checked_runs: None,
            };
            (id, inv)
        })
        .collect();
    Results {
        scenario: scenario.to_string(),
        seed,
        policy: policy.to_string(),
        ledger: "memory".to_string(),
        steps,
        runs: steps / 4,
        trace_hash: format!("{seed:064x}"),
        trace_ledgers: None,
        effects: steps + total,
        duplicates: Duplicates { total, by_class },
        paused_runs: seed % 3,
        failed_runs: 0,
        runs_with_visible_retry: seed % 5,
        person_resolutions: seed % 2,
        auto_retry_coverage: 0.92,
        extra_lookups: steps / 10,
        extra_lookup_ms_total: steps * 4,
        latency: Latency { p50_ms: 40 + seed % 10, p90_ms: 90, p99_ms: 400 + seed, p999_ms: 2000, max_ms: 9000 + seed },
        actions: map,
        invariants,
        crashes: [("random".to_string(), seed % 3)].into_iter().collect(),
        knobs: [("crash_rate".to_string(), serde_json::json!(0.001))].into_iter().collect(),
        repro: format!("cargo flowsim run --scenario {scenario} --seed {seed} --policy {policy}"),
        merged_runs: 1,
        simulated_seconds: 3600.0,
        wall_seconds: 2.5,
        steps_per_second: steps as f64 / 2.5,
        peak_rss_bytes: 100_000_000 + seed,
    }
}

/// The `month` catalogue under the rules, with a residual class and lag bound `lag_bound_ms`.
pub fn rules(seed: u64, lag_bound_ms: u64, residual: u64) -> Results {
    results(
        "month",
        seed,
        "rules",
        &[
            (
                "stripe.create_customer",
                "lookup-before-create",
                &["lookup by run id in metadata", "wait out lag bound"],
                400_000,
                residual,
                Some(lag_bound_ms),
            ),
            ("stripe.create_charge", "keyed", &["idempotency key"], 1_000_000, 0, None),
            ("bank.payout", "at-most-once", &["pause on indeterminate outcome"], 50_000, 0, None),
        ],
        &[],
    )
}

/// The same catalogue before the rules.
pub fn naive(seed: u64) -> Results {
    results(
        "month",
        seed,
        "naive",
        &[
            ("stripe.create_customer", "lookup-before-create", &[], 400_000, 9, None),
            ("stripe.create_charge", "keyed", &[], 1_000_000, 11, None),
            ("bank.payout", "at-most-once", &[], 50_000, 2, None),
        ],
        &[],
    )
}
