//! `flowsim bench` as the built binary. The simulations run only under `cargo sim-test`.
#![cfg(madsim)]

mod common;

use common::flowsim;

/// A bench too short for the process's CPU time (counted in 10 ms ticks) leaves out no figure without a word: each
/// ledger has its steps-per-CPU-second line, a median or why there is none, and the memory ledger's comparison with
/// the bare loop ends the output either way (a QA report: `bench --steps 1 --repeat 1` and `--steps 500 --repeat 2`
/// dropped both lines silently). A run of one step takes about a millisecond, far under the ten ticks a figure needs.
#[test]
fn a_bench_too_short_for_cpu_time_still_prints_every_line() {
    let out = flowsim(&["bench", "--steps", "1", "--repeat", "2"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    for ledger in ["memory", "sqlite"] {
        let head = format!("  ledger {ledger:<7} ");
        let cpu: Vec<&str> =
            out.stdout.lines().filter(|l| l.starts_with(&head) && l.contains("steps per CPU-second")).collect();
        assert_eq!(cpu.len(), 1, "{ledger}: {}", out.stdout);
        // A simulation of one step takes far under ten ticks (0.1 s), so it is never measured.
        let not_measured = cpu[0].contains("steps per CPU-second not measured: ")
            && cpu[0].contains("too short to measure CPU time (under 10 ticks of 10 ms); give --steps ");
        assert!(not_measured, "{}", cpu[0]);
    }
    let last = out.stdout.lines().last().expect("a last line");
    assert!(last.starts_with("  memory ledger    "), "{}", out.stdout);
    assert!(
        last.contains("fraction of the bare loop not measured: ")
            && last.contains("too short to measure CPU time (under 10 ticks of 10 ms); give --steps "),
        "{last}"
    );
}

/// `bench --help` says that CPU time is counted in 10 ms ticks, so that a short bench's missing figures are expected.
#[test]
fn bench_help_names_the_resolution_of_cpu_time() {
    let out = flowsim(&["bench", "--help"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("ticks of 10 ms"), "{}", out.stdout);
}
