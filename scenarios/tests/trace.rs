//! The readable trace of `flowsim run --trace FILE` on real simulations (simulation configuration only:
//! `cargo sim-test -p scenarios`): what it marks at the end of a simulation, and how it names the drivers of runs.
#![cfg(madsim)]

use scenarios::run::{RunArgs, execute, prepare};

/// Payouts only (at-most-once, so an indeterminate outcome pauses its run), and no fault of the world's.
const PAUSING_PAYOUTS: &str = r#"
[world]
crash_interval_s_mean = 0.0
crash_point_p = 0.0
cut_interval_s_mean = 0.0
stall_interval_s_mean = 0.0
[mix]
payout = 1.0
[connectors.payouts]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
"#;

/// Runs a profile with `--trace`, after `adjust` changed its resolved knobs; returns the results and the trace.
fn traced(
    profile: &str,
    seed: u64,
    steps: u64,
    adjust: impl Fn(&mut sim::profile::Profile),
) -> (sim::results::Results, String) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, profile).expect("write the profile");
    let mut args = RunArgs::quiet(path.to_str().expect("UTF-8 temp path"), seed, Some(steps));
    args.trace = Some(dir.path().join("t.txt"));
    let mut prepared = prepare(&args.scenario, args.seed, args.steps).expect("the profile resolves");
    adjust(&mut prepared.profile);
    let (results, trace) = execute(&args, &prepared, false);
    // The readable trace is no part of the hash: the same run without it has the same one.
    args.trace = None;
    let (again, none) = execute(&args, &prepared, false);
    assert!(none.is_none());
    assert_eq!(results.trace_hash, again.trace_hash, "asking for the readable trace changed the hash");
    (results, trace.expect("a trace was asked for"))
}

/// Paused runs left at a person's desk for longer than the heal phase break I8 and nothing else. The trace marks
/// that as the first violation, with the results' description, after the events before it; the stuck runs it names
/// after it read as text, not as Rust's debug form. (Set on the resolved profile: a profile file with a person's
/// delay longer than the heal phase is refused, as no run could pass it.)
#[test]
fn runs_stranded_at_the_end_are_the_first_violation_the_trace_marks() {
    let (results, trace) = traced(PAUSING_PAYOUTS, 1, 2_000, |profile| {
        profile.world.person_share = 1.0;
        profile.world.person_delay_ms = 1_000_000_000;
    });
    let broken: Vec<&String> = results.invariants.iter().filter(|(_, r)| !r.holds).map(|(id, _)| id).collect();
    assert_eq!(broken, ["I8"], "{:?}", results.invariants);
    let first = results.invariants["I8"].first_violation.as_deref().expect("I8's first violation");
    assert!(first.contains("runs neither finished nor paused after the heal phase (e.g. run-"), "{first}");
    assert!(!trace.contains("# no violation"), "{trace}");
    let lines: Vec<&str> = trace.lines().collect();
    let mark = lines.iter().position(|l| l.starts_with("!!!")).unwrap_or_else(|| panic!("no mark in:\n{trace}"));
    assert_eq!(lines[mark], format!("!!! first violation: I8: {first}"));
    assert!(lines[..mark].iter().filter(|l| !l.starts_with("# ")).count() > 100, "the events before it:\n{trace}");
    let before = lines[mark - 1];
    assert!(before.contains(" end ") || before.contains(" run-ended-still-driven "), "marked at the end:\n{trace}");
    let stuck: Vec<&str> = lines[mark..].iter().copied().filter(|l| l.contains(" stuck-run ")).collect();
    assert_eq!(stuck.len(), 3, "{trace}");
    for line in stuck {
        assert!(line.contains(" status paused, reason \"") && line.ends_with("\"; drivers: person's desk"), "{line}");
    }
    assert!(!trace.contains("Some(") && !trace.contains("[("), "{trace}");
    // An effect names its action as every other event does, with its connector (QA, stop 51: the bare action).
    let effect = trace
        .lines()
        .find(|l| !l.starts_with("# ") && l.contains(" effect "))
        .unwrap_or_else(|| panic!("no effect in:\n{trace}"));
    assert!(effect.contains(" payouts.send_payout "), "{effect}");
}

/// The short heal phase of `tests/sweep.rs`: at seed 2 (and others) runs used to succeed while a second drive of
/// them slept out the lease the first had taken (`run-ended-still-driven`, which meets I8): the drive learnt of the
/// end only when the lease ran out. A drive waiting for another attempt's lease now looks at the key again and again
/// (`LEASE_WAIT_FIRST_LOOK_MS`, doubling), so it ends soon after the run: no run ends still driven, and every
/// invariant holds.
/// (The event's readable drivers are the stuck runs' text, checked above.)
#[test]
fn no_run_ends_while_a_drive_still_waits_out_a_lease() {
    let mut profile = String::from("[world]\nheal_s_max = 100\n[mix]\ncheckout = 1.0\n");
    // A payments lag bound that fits in the heal phase after a crashed worker's lease and a call.
    profile += "[connectors.payments]\nlag_ms_tail_max = 10000\n";
    for c in ["payments", "contacts", "ledgerly", "email", "payouts"] {
        profile += &format!(
            "[connectors.{c}.webhooks]\nredelivery_ms_max = 1000\nreorder_ms_max = 0\nduplicate_spacing_ms = 1000\n"
        );
    }
    profile += "[connectors.ledgerly]\nlag_ms_tail_max = 10000\nlookup_wait_ms = 15000\n";
    for seed in 1..=3 {
        let (results, trace) = traced(&profile, seed, 1_000, |_| {});
        assert!(results.all_hold(), "seed {seed}: {:?}", results.invariants);
        let ended: Vec<&str> =
            trace.lines().filter(|l| !l.starts_with("# ") && l.contains(" run-ended-still-driven ")).collect();
        assert!(ended.is_empty(), "seed {seed}: {ended:?}");
    }
}
