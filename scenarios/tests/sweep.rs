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

/// Webhook windows short enough for a 100 s heal phase, every connector's, and a payments lag bound that fits in it
/// after a crashed worker's lease (45 s) and a call; `extra` adds to the profile.
#[cfg(madsim)]
fn short_heal_profile(extra: &str) -> String {
    let mut text = String::from("[world]\nheal_s_max = 100\n[mix]\ncheckout = 1.0\n");
    text += "[connectors.payments]\nlag_ms_tail_max = 10000\n";
    for c in ["payments", "contacts", "ledgerly", "email"] {
        text += &format!(
            "[connectors.{c}.webhooks]\nredelivery_ms_max = 1000\nreorder_ms_max = 0\nduplicate_spacing_ms = 1000\n"
        );
    }
    text + extra
}

/// The scenario is judged as its points will be: the swept connector's own lookup wait, unset and so the lag bound
/// (here its tail, longer than the heal phase), is replaced by each point's bound, so the sweep runs.
#[cfg(madsim)]
#[test]
fn a_scenario_is_judged_with_the_bound_each_point_sets() {
    let dir = temp_dir("sweep-judged");
    let file = dir.join("scenario.toml");
    let text = short_heal_profile(
        "[connectors.payouts.webhooks]\nredelivery_ms_max = 1000\nreorder_ms_max = 0\nduplicate_spacing_ms = 1000\n\
         [connectors.ledgerly]\nlag_ms_tail_max = 120000\nincident_lag_ms_max = 120000\n",
    );
    std::fs::write(&file, text).expect("write");
    let out = dir.join("out");
    let (scenario, out) = (path_str(&file), path_str(&out));
    let args = ["sweep", "--scenario", scenario, "--bounds-ms", "0,5000", "--seeds", "1", "--steps", "1000", "--out"];
    let o = flowsim(&[&args[..], &[out]].concat());
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    // Its own lookup wait, which each point replaces, must still be a wait.
    std::fs::write(&file, format!("{}lookup_wait_ms = -5\n", std::fs::read_to_string(&file).expect("read")))
        .expect("write");
    let o = flowsim(&[&args[..], &[out]].concat());
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("connectors.ledgerly.lookup_wait_ms = -5 must be a whole number"), "{}", o.stderr);
}

/// Steps as `run` takes them: a scenario file's own `steps` when `--steps` is not given (the sweep ran 50,000 steps
/// per point whatever the file said), and `--steps` over it.
#[cfg(madsim)]
#[test]
fn a_scenario_file_s_steps_are_the_sweep_s_unless_steps_is_given() {
    let dir = temp_dir("sweep-file-steps");
    let file = dir.join("scenario.toml");
    let catalogue = scenarios::catalogue::find("lookup-lag-over-bound").expect("in the catalogue").text;
    std::fs::write(&file, format!("steps = 1500\n{catalogue}")).expect("write");
    let sweep = |out: &str, steps: &[&str]| {
        let args = ["sweep", "--scenario", path_str(&file), "--bounds-ms", "0,5000", "--seeds", "1", "--out", out];
        let o = flowsim(&[&args[..], steps].concat());
        assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
        o.stdout
    };
    let stdout = sweep(path_str(&dir.join("file")), &[]);
    assert!(stdout.contains("1 seed × 1500 steps"), "{stdout}");
    let table = std::fs::read_to_string(dir.join("file").join("sweep.md")).expect("written");
    assert!(table.contains("× 1500 steps per bound"), "{table}");
    let stdout = sweep(path_str(&dir.join("flag")), &["--steps", "1200"]);
    assert!(stdout.contains("× 1200 steps"), "{stdout}");
    // Each point's file replays the steps its point ran, on its own.
    let point = std::fs::read_to_string(dir.join("flag").join("bound-5000.toml")).expect("written");
    assert!(point.lines().any(|l| l == "steps = 1200"), "{point}");
    let table = std::fs::read_to_string(dir.join("flag").join("sweep.md")).expect("written");
    assert!(table.contains("1 seed × 1200 steps per bound"), "{table}");
}

/// A bound no lookup waited on changes nothing: its points are the same simulations as another bound's. The table says
/// so, and the report command the sweep prints names one bound of each (a report counts a simulation once, so the
/// glob it printed before was refused).
#[cfg(madsim)]
#[test]
fn bounds_that_simulated_the_same_events_are_named_and_charted_once() {
    let dir = temp_dir("sweep-alike");
    let out = path_str(&dir);
    let o = flowsim(&[
        "sweep",
        "--scenario",
        "mixed",
        "--connector",
        "payments",
        "--bounds-ms",
        "0,60000",
        "--seeds",
        "2",
        "--steps",
        "2000",
        "--out",
        out,
    ]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    let table = std::fs::read_to_string(dir.join("sweep.md")).expect("written");
    assert!(table.contains("**The bounds 0, 1 min simulated the same events**"), "{table}");
    let line = o.stdout.lines().find(|l| l.contains("chart it with:")).expect("a report command");
    assert!(line.ends_with(&format!("--out {out}/report {out}/bound-0.json")), "{line}");
    let report = flowsim(&["report", "--out", path_str(&dir.join("report")), path_str(&dir.join("bound-0.json"))]);
    assert_eq!(report.code, 0, "{}{}", report.stdout, report.stderr);
}

/// Every seed's draws are checked before any simulation runs: a knob the scenario leaves open that one seed draws
/// into a refusal stops the sweep with nothing written but the empty directory.
#[cfg(madsim)]
#[test]
fn a_refusal_for_any_seed_comes_before_the_first_simulation() {
    let dir = temp_dir("sweep-seeds");
    let file = dir.join("scenario.toml");
    // payouts' reorder window is drawn; seed 2 draws one that pushes a delivery past the heal phase.
    let text =
        short_heal_profile("[connectors.payouts.webhooks]\nredelivery_ms_max = 95000\nduplicate_spacing_ms = 1000\n");
    std::fs::write(&file, text).expect("write");
    let out = dir.join("out");
    let (scenario, out_str) = (path_str(&file), path_str(&out));
    let args = ["sweep", "--scenario", scenario, "--bounds-ms", "0,1000", "--seeds", "3", "--steps", "1000", "--out"];
    let o = flowsim(&[&args[..], &[out_str]].concat());
    assert_eq!(o.code, 2, "{}{}", o.stdout, o.stderr);
    let point = format!("seed 2: {scenario} with connectors.ledgerly.lookup_wait_ms = 0: connectors.payouts.webhooks");
    assert!(o.stderr.contains(&point), "{}", o.stderr);
    assert!(o.stderr.contains("(drawn from seed 2)"), "{}", o.stderr);
    assert!(!o.stdout.contains("done"), "no point ran: {}", o.stdout);
    assert_eq!(std::fs::read_dir(&out).expect("made").count(), 0, "nothing written");
}

/// A run that succeeds while a second drive of it waits out the lease the first took meets I8: the waiting drive
/// learns the run ended only when the lease runs out, which may be after a short heal phase. Seed 2 of this profile
/// has 42 such runs (they were counted as stuck, and a sweep over such a scenario showed broken rows).
#[cfg(madsim)]
#[test]
fn a_run_that_ended_while_a_drive_waits_on_its_lease_meets_i8() {
    let dir = temp_dir("ended-while-driven");
    let file = dir.join("scenario.toml");
    let text = short_heal_profile(
        "[connectors.payouts.webhooks]\nredelivery_ms_max = 1000\nreorder_ms_max = 0\nduplicate_spacing_ms = 1000\n\
         [connectors.ledgerly]\nlag_ms_tail_max = 10000\nlookup_wait_ms = 15000\n",
    );
    std::fs::write(&file, text).expect("write");
    let o = flowsim(&["run", "--scenario", path_str(&file), "--seed", "2", "--steps", "1000"]);
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("I8 ok"), "{}", o.stdout);
}
