//! Every entry of the catalogue runs by name and meets its expectation at several seeds (simulation configuration
//! only: `cargo sim-test -p scenarios`). Step counts are small so the suite fits CI; `flowsim check --profile
//! release` runs the same expectations at scale.
#![cfg(madsim)]

use engine::executor::Policy;
use scenarios::catalogue::{CATALOGUE, Expect};
use scenarios::run::{RunArgs, execute, prepare, verdict};

const SEEDS: [u64; 2] = [1, 2];
const STEPS: u64 = 1_500;

#[test]
fn every_scenario_meets_its_expectation() {
    let mut failures = Vec::new();
    for scenario in CATALOGUE.iter().filter(|s| s.name != "month") {
        for seed in SEEDS {
            let args = RunArgs::quiet(scenario.name, seed, Some(STEPS));
            let prepared = prepare(scenario.name, seed, Some(STEPS)).expect("a catalogue scenario prepares");
            let (results, _) = execute(&args, &prepared, false);
            assert!(results.steps > 0, "{} seed {seed} did nothing", scenario.name);
            let verdict = verdict(&results, scenario.expect, Policy::Rules);
            match (scenario.expect, verdict) {
                (Expect::CanaryFails, Err(reason)) if reason.contains("expected of the canary") => {}
                (Expect::CanaryFails, other) => failures.push(format!("canary seed {seed}: {other:?}")),
                (_, Ok(())) => {}
                (_, Err(reason)) => {
                    failures.push(format!("{} seed {seed}: {reason}\n  {}", scenario.name, results.repro))
                }
            }
        }
    }
    assert!(failures.is_empty(), "scenarios that broke their promise:\n{}", failures.join("\n"));
}

#[test]
fn the_month_profile_resolves_to_the_documented_rates() {
    let prepared = prepare("month", 1, None).expect("the month prepares");
    assert_eq!(prepared.steps, 48_000_000);
    let p = &prepared.profile;
    assert!((p.world.run_rate_per_s - 7.7).abs() < 1e-9);
    for name in ["payments", "contacts", "ledgerly", "payouts", "email"] {
        let c = &p.connectors[name];
        let indeterminate = c.timeout_after_commit_p + c.error_after_commit_p;
        assert!((indeterminate - 1.1e-5).abs() < 1e-12, "{name}: {indeterminate}");
    }
}
