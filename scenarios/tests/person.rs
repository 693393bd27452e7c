//! A person resolving paused runs (`world.person_share`), tested on a real simulation (simulation configuration
//! only: `cargo sim-test -p scenarios`): the person's wait is not a worker's, so crashes while they take their time
//! do not cancel their decision.
#![cfg(madsim)]

use scenarios::run::{RunArgs, execute, prepare};

/// Payouts only (at-most-once, so every indeterminate outcome pauses its run), a person for every paused run after
/// ten simulated minutes, and a worker crash about every twenty seconds of the chaos: a wait of ten minutes rarely
/// outlives the worker it started on.
const CRASHES_WHILE_A_PERSON_LOOKS: &str = r#"
[world]
person_share = 1.0
person_delay_ms = 600000
crash_interval_s_mean = 20.0
crash_point_p = 0.0
cut_interval_s_mean = 0.0
stall_interval_s_mean = 0.0
[mix]
payout = 1.0
[connectors.payouts]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
"#;

/// Every run sent to two workers at once, and a person who decides within a fifth of a second: the second drive of a
/// paused run is often still alive when the person decides.
const A_QUICK_PERSON_AND_TWO_DRIVES: &str = r#"
[world]
person_share = 1.0
person_delay_ms = 200
double_dispatch_share = 1.0
crash_interval_s_mean = 20.0
crash_point_p = 0.0
cut_interval_s_mean = 0.0
stall_interval_s_mean = 0.0
[mix]
payout = 1.0
[connectors.payouts]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
"#;

/// Workers stalled past their lease (a minute, about every five seconds) and every run driven twice: a drive that
/// started before a pause can outlive it and carry the run on while the person is still looking.
const A_STALLED_DRIVE_OUTLIVES_THE_PAUSE: &str = r#"
[world]
person_share = 1.0
person_delay_ms = 60000
double_dispatch_share = 1.0
crash_interval_s_mean = 20.0
crash_point_p = 0.0
stall_interval_s_mean = 5.0
stall_ms = 60000
cut_interval_s_mean = 10.0
replay_share = 0.1
[mix]
payout = 2.0
assist = 1.0
signup = 1.0
checkout = 1.0
[connectors.payouts]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
[connectors.email]
timeout_after_commit_p = 0.03
"#;

fn simulate(profile: &str, seed: u64, steps: u64) -> sim::results::Results {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("person.toml");
    std::fs::write(&path, profile).expect("write the profile");
    let args = RunArgs::quiet(path.to_str().expect("UTF-8 temp path"), seed, Some(steps));
    let prepared = prepare(&args.scenario, args.seed, args.steps).expect("the profile resolves");
    execute(&args, &prepared, false).0
}

#[test]
fn a_person_resolves_paused_runs_whatever_crashes_their_workers() {
    let results = simulate(CRASHES_WHILE_A_PERSON_LOOKS, 1, 20_000);
    assert!(results.all_hold(), "{:?}", results.invariants);
    assert!(results.crashes.values().sum::<u64>() >= 3, "the profile must crash workers: {:?}", results.crashes);
    // Every run that paused got a person; a run stays paused only if it pauses again after their decision.
    assert!(
        results.person_resolutions >= 100 && results.paused_runs * 20 < results.person_resolutions,
        "{} paused runs were resolved, {} stayed paused",
        results.person_resolutions,
        results.paused_runs
    );
}

/// A drive that started before the person's decision and ended after it would leave the run at the desk, neither
/// finished nor driven (I8 after the heal phase): the person decides only while no worker drives the run.
#[test]
fn a_second_drive_of_a_run_does_not_strand_it_at_the_desk() {
    for seed in [1, 2] {
        let results = simulate(A_QUICK_PERSON_AND_TWO_DRIVES, seed, 20_000);
        assert!(results.all_hold(), "seed {seed}: {:?}", results.invariants);
        assert!(results.person_resolutions >= 100, "seed {seed}: {} resolved", results.person_resolutions);
    }
}

/// A person who finds the run no longer paused has nothing to decide (as `flow resolve` says): that is not an engine
/// error, and the run finishes or is driven on from where the other drive left it.
#[test]
fn a_person_who_finds_the_run_carried_on_leaves_it_be() {
    let results = simulate(A_STALLED_DRIVE_OUTLIVES_THE_PAUSE, 2, 20_000);
    assert!(results.all_hold(), "{:?}", results.invariants);
    assert!(results.person_resolutions >= 100, "{} resolved", results.person_resolutions);
}
