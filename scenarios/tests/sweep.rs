//! `flowsim sweep`, run as the built binary. Under `cargo sim-test -p scenarios` the sweep really runs; in a normal
//! build only the refusal (exit 2, naming `cargo flowsim`) and the argument errors are tested.

mod common;

use common::{flowsim, path_str, temp_dir};

#[test]
fn bad_arguments_exit_2_naming_the_problem() {
    let dir = temp_dir("sweep-bad");
    let out = path_str(&dir);
    for (args, needle) in [
        (vec!["--connector", "nope"], "unknown connector"),
        (vec!["--bounds-ms", "5,5"], "twice"),
        (vec!["--bounds-ms", "five"], "invalid value"),
        (vec!["--seeds", "0"], "--seeds"),
        (vec!["--scenario", "no-such-scenario"], "no-such-scenario"),
    ] {
        let mut all = vec!["sweep", "--out", out, "--steps", "100"];
        all.extend(&args);
        let o = flowsim(&all);
        assert_eq!(o.code, 2, "{args:?}: {}{}", o.stdout, o.stderr);
        // Without the simulation cfg the binary refuses before looking at the scenario (exit 2 all the same).
        if cfg!(madsim) || needle != "no-such-scenario" {
            assert!(o.stderr.contains(needle), "{args:?}: stderr lacks {needle:?}: {}", o.stderr);
        }
    }
}

#[cfg(not(madsim))]
#[test]
fn without_the_simulation_cfg_the_sweep_refuses_naming_the_alias() {
    let dir = temp_dir("sweep-refuse");
    let o = flowsim(&["sweep", "--out", path_str(&dir), "--steps", "100"]);
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("cargo flowsim sweep"), "{}", o.stderr);
}

/// A declared bound of zero leaves the lag incidents of `lookup-lag-over-bound` to duplicate; an hour (the longest
/// incident) leaves none. Both points are written as replayable profile files and merged results.
#[cfg(madsim)]
#[test]
fn a_longer_bound_leaves_fewer_residual_duplicates() {
    let dir = temp_dir("sweep-run");
    let o = flowsim(&[
        "sweep",
        "--out",
        path_str(&dir),
        "--bounds-ms",
        "0,3600000",
        "--seeds",
        "1",
        "--steps",
        "4000",
        "--jobs",
        "2",
    ]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let duplicates = |bound: &str| -> u64 {
        let text = std::fs::read_to_string(dir.join(format!("bound-{bound}.json"))).expect("results written");
        let results: serde_json::Value = serde_json::from_str(&text).expect("results JSON");
        assert_eq!(
            results["actions"]["ledgerly.record_entry"]["lag_bound_ms"].as_u64().map(|b| b.to_string()),
            Some(bound.to_owned())
        );
        results["actions"]["ledgerly.record_entry"]["duplicates"].as_u64().expect("a duplicate count")
    };
    let (none, hour) = (duplicates("0"), duplicates("3600000"));
    assert!(none > 0, "no residual duplicate without a wait: the sweep measures nothing");
    assert_eq!(hour, 0, "an hour's wait outlasts every incident of the profile");
    let table = std::fs::read_to_string(dir.join("sweep.md")).expect("sweep.md written");
    assert!(table.contains("| 1 h |") && table.contains("| 0 |"), "{table}");
    // A point replays on its own from its profile file.
    let file = dir.join("bound-0.toml");
    let again = flowsim(&["run", "--scenario", path_str(&file), "--steps", "4000", "--seed", "1"]);
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert!(again.stdout.contains("knob connectors.ledgerly.lookup_wait_ms = 0"), "{}", again.stdout);
}

/// A connector the sweep cannot measure (not in the scenario's profile, no lookup action, or none its mix runs) is
/// refused before any simulation, with exit 2: its rows would count no step, a table of zeros with empty intervals.
#[cfg(madsim)]
#[test]
fn a_connector_without_a_lookup_action_is_refused_before_any_simulation() {
    let dir = temp_dir("sweep-connector");
    let out = dir.join("out");
    for (connector, needle) in [
        ("payouts", "--connector payouts has no lookup action; the sweep measures lookup lag bounds"),
        ("email", "--connector email has no lookup action"),
        ("payments", "--connector payments: scenario lookup-lag-over-bound's mix runs none of its lookup actions"),
        ("contacts", "--connector contacts: scenario lookup-lag-over-bound's mix runs none of its lookup actions"),
        ("canary", "--connector canary is not in scenario lookup-lag-over-bound's profile"),
    ] {
        let o =
            flowsim(&["sweep", "--connector", connector, "--seeds", "1", "--steps", "500", "--out", path_str(&out)]);
        assert_eq!(o.code, 2, "{connector}: {}{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(needle), "{connector}: stderr lacks {needle:?}: {}", o.stderr);
        assert!(o.stderr.contains(": ledgerly"), "{connector}: the one to sweep is named: {}", o.stderr);
        assert!(o.stdout.is_empty(), "{connector}: a simulation started: {}", o.stdout);
        assert!(!out.exists(), "{connector}: the output directory was made");
    }
}

/// A bound the heal phase cannot cover would break I8 for the sweep's own reason: refused, naming the knob. And no
/// point's file may be the scenario being read (an earlier sweep's profile file in the same directory): refused
/// before anything is written, the file left as it was.
#[cfg(madsim)]
#[test]
fn a_bound_beyond_the_heal_or_an_output_over_the_scenario_is_refused() {
    let dir = temp_dir("sweep-clash");
    let out = path_str(&dir);
    let o = flowsim(&["sweep", "--out", out, "--steps", "100", "--seeds", "1", "--bounds-ms", "0,604800000"]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("bound 604800000 ms") && o.stderr.contains("heal_s_max"), "{}", o.stderr);
    let scenario = dir.join("bound-0.toml");
    let text = "# kept\n[mix]\ncheckout = 1.0\n";
    std::fs::write(&scenario, text).expect("write the scenario");
    let o = flowsim(&[
        "sweep",
        "--scenario",
        path_str(&scenario),
        "--out",
        out,
        "--steps",
        "100",
        "--seeds",
        "1",
        "--bounds-ms",
        "0,5000",
    ]);
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("also an input"), "{}", o.stderr);
    assert_eq!(std::fs::read_to_string(&scenario).expect("read"), text);
    assert!(!dir.join("bound-5000.toml").exists(), "nothing is written");
}
