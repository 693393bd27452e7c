//! The harness's promises about seeds, tested on real simulations (simulation configuration only:
//! `cargo sim-test -p scenarios`).
//!
//! - the same seed twice gives the same trace hash and byte-identical results (apart from the wall-time figures);
//!   different seeds differ; the memory and SQLite ledgers give the same trace;
//! - the canary connector makes `flowsim run` exit 1 with a repro command, and that command reproduces the same
//!   trace hash;
//! - `--policy naive` on a timeout-after-commit profile shows duplicates that `--policy rules` does not.
#![cfg(madsim)]

use engine::executor::Policy;
use scenarios::run::{RunArgs, deterministic_bytes, execute, prepare};
use sim::results::Results;
use std::process::Command;

fn args(scenario: &str, seed: u64, steps: u64, policy: Policy) -> RunArgs {
    RunArgs { policy, ..RunArgs::quiet(scenario, seed, Some(steps)) }
}

fn simulate(args: &RunArgs) -> Results {
    let prepared = prepare(&args.scenario, args.seed, args.steps).expect("a catalogue scenario prepares");
    execute(args, &prepared, false).0
}

#[test]
fn same_seed_same_trace_and_results_different_seed_differs() {
    let a = simulate(&args("mixed", 11, 3_000, Policy::Rules));
    let b = simulate(&args("mixed", 11, 3_000, Policy::Rules));
    assert_eq!(a.trace_hash, b.trace_hash, "one seed, two trace hashes");
    assert_eq!(deterministic_bytes(&a), deterministic_bytes(&b), "one seed, two results");
    let c = simulate(&args("mixed", 12, 3_000, Policy::Rules));
    assert_ne!(a.trace_hash, c.trace_hash, "two seeds, one trace hash");
    assert!(a.steps > 2_000, "the run did the work it was asked for: {} steps", a.steps);
}

#[test]
fn sqlite_ledger_is_deterministic_too() {
    let mut run = args("crash-points", 5, 1_500, Policy::Rules);
    run.ledger = "sqlite".into();
    let a = simulate(&run);
    let b = simulate(&run);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert!(a.all_hold(), "invariants: {:?}", a.invariants);
}

/// The two ledgers keep the same records, so a simulation cannot tell them apart: the same seed gives the same trace
/// with either. With SQLite the world runs the read cache, and this debug build reads SQLite too at every read the
/// cache serves and asserts that they agree; so these runs check the cache, its `forget_run` and the
/// statements behind it, through crashes, takeovers, webhook intake and agents' plans.
#[test]
fn sqlite_and_memory_ledgers_simulate_alike() {
    for scenario in ["crash-points", "lease-takeover", "duplicate-webhooks", "agent-crash"] {
        let memory = simulate(&args(scenario, 21, 4_000, Policy::Rules));
        let mut run = args(scenario, 21, 4_000, Policy::Rules);
        run.ledger = "sqlite".into();
        let sqlite = simulate(&run);
        assert_eq!(memory.trace_hash, sqlite.trace_hash, "{scenario}: the ledgers' traces differ");
        assert!(sqlite.all_hold(), "{scenario}: invariants {:?}", sqlite.invariants);
    }
}

#[test]
fn shards_merge_deterministically() {
    let mut run = args("mixed", 3, 3_000, Policy::Rules);
    run.jobs = 2;
    let a = simulate(&run);
    let b = simulate(&run);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.merged_runs, 2);
}

#[test]
fn canary_fails_the_run_and_its_repro_reproduces_the_trace() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("canary.json");
    let out = Command::new(env!("CARGO_BIN_EXE_flowsim"))
        .args(["run", "--scenario", "canary", "--seed", "7", "--steps", "1500", "--json"])
        .arg(&json)
        .output()
        .expect("flowsim runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "the canary must fail the run:\n{stdout}");
    let first: Results = serde_json::from_slice(&std::fs::read(&json).expect("results written")).expect("results JSON");
    assert!(first.duplicates.by_class.get("canary").copied().unwrap_or(0) > 0, "the canary made no duplicate");
    let repro = stdout
        .lines()
        .find_map(|l| l.strip_prefix("reproduce with: "))
        .unwrap_or_else(|| panic!("no repro command in:\n{stdout}"));
    let repro_args: Vec<&str> =
        repro.strip_prefix("cargo flowsim ").expect("a cargo flowsim command").split(' ').collect();
    let json2 = dir.path().join("again.json");
    let again = Command::new(env!("CARGO_BIN_EXE_flowsim"))
        .args(&repro_args)
        .arg("--json")
        .arg(&json2)
        .output()
        .expect("flowsim runs");
    assert_eq!(again.status.code(), Some(1));
    let second: Results =
        serde_json::from_slice(&std::fs::read(&json2).expect("results written")).expect("results JSON");
    assert_eq!(first.trace_hash, second.trace_hash, "the repro command did not reproduce the run");
}

#[test]
fn naive_policy_duplicates_where_the_rules_do_not() {
    let rules = simulate(&args("keyed-timeout-after-commit", 21, 4_000, Policy::Rules));
    let naive = simulate(&args("keyed-timeout-after-commit", 21, 4_000, Policy::Naive));
    let keyed = |r: &Results| r.duplicates.by_class.get("keyed").copied().unwrap_or(0);
    assert_eq!(keyed(&rules), 0, "rules: {:?}", rules.duplicates);
    assert!(keyed(&naive) > 0, "naive showed no keyed duplicate: {:?}", naive.duplicates);
    assert!(rules.all_hold(), "rules broke invariants: {:?}", rules.invariants);
    assert!(!naive.invariants["I1"].holds, "the checker did not flag the naive duplicates");
}

#[test]
fn bad_scenario_and_knob_are_exit_2_with_a_message() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_flowsim")).args(["run", "--scenario", "no-such"]).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no scenario named \"no-such\""));
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, "[world]\nworkers = 2\nwarp_speed = 9\n").expect("write");
    let out =
        Command::new(env!("CARGO_BIN_EXE_flowsim")).args(["run", "--scenario"]).arg(&file).output().expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("warp_speed"), "{}", String::from_utf8_lossy(&out.stderr));
    // A key given twice, and a defined workflow the mix leaves out: exit 2, naming the file and the key or workflow.
    let workflow = "[workflows.refund]\nname = \"refund\"\n[[workflows.refund.steps]]\nid = \"refund-customer\"\n\
                    action = \"payments.create_customer\"\ninputs = { email = \"{{trigger.email}}\" }\n";
    let cases = [
        ("twice.toml", format!("[mix]\nrefund = 1.0\nrefund = 2.0\n{workflow}"), "duplicate key `refund` at line 3"),
        ("unused.toml", format!("[mix]\nsignup = 1.0\n{workflow}"), "workflow \"refund\" is defined"),
    ];
    for (name, text, says) in cases {
        let file = dir.path().join(name);
        std::fs::write(&file, text).expect("write");
        let out = Command::new(env!("CARGO_BIN_EXE_flowsim"))
            .args(["run", "--steps", "200", "--scenario"])
            .arg(&file)
            .output()
            .expect("runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{name}: {stdout}{stderr}");
        assert!(stderr.contains(&*file.to_string_lossy()) && stderr.contains(says), "{name}: {stderr}");
        assert!(!stdout.contains("trace hash"), "{name}: {stdout}");
    }
    // A blank run id for --trace-run names no run: refused before the simulation (it ran to the end to find none).
    for blank in ["", "  "] {
        let out = Command::new(env!("CARGO_BIN_EXE_flowsim"))
            .args(["run", "--steps", "200", "--trace", "t.txt", "--trace-run", blank])
            .current_dir(dir.path())
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{blank:?}: {stderr}");
        assert!(stderr.contains("is blank: give the run's id"), "{blank:?}: {stderr}");
        assert!(!dir.path().join("t.txt").exists());
    }
}

#[test]
fn output_files_that_cannot_be_written_are_exit_2_before_the_run() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let missing = dir.path().join("missing").join("results.json");
    let cases = [("--json", missing.as_path(), "does not exist"), ("--trace", dir.path(), "it is a directory")];
    for (option, path, why) in cases {
        let out = Command::new(env!("CARGO_BIN_EXE_flowsim"))
            .args(["run", "--steps", "2000", option])
            .arg(path)
            .output()
            .expect("runs");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.status.code(), Some(2), "{option}: {stdout}{stderr}");
        assert!(stderr.contains(&*path.to_string_lossy()) && stderr.contains(why), "{option}: {stderr}");
        // Refused before simulating: no run was started, so nothing was lost.
        assert!(!stdout.contains("trace hash"), "{option} was checked only after the run: {stdout}");
    }
    assert!(!missing.parent().expect("a parent").exists(), "the check created nothing");
}

/// Every shard numbers its runs from run-0: with `--jobs`, a violation names its shard, and the readable trace is the
/// one of the shard that broke the invariant (not always shard 0's), around its first violation.
#[test]
fn with_shards_the_trace_is_of_the_shard_that_broke_an_invariant() {
    let mut run = args("canary", 10, 400, Policy::Rules);
    run.jobs = 2;
    run.trace = Some(std::path::PathBuf::from("trace.txt"));
    let prepared = prepare(&run.scenario, run.seed, run.steps).expect("a catalogue scenario prepares");
    let (results, trace) = execute(&run, &prepared, false);
    let first = results.invariants["I1"].first_violation.clone().expect("the canary duplicates");
    let shard = first.split(':').next().expect("a prefix").to_owned();
    assert!(shard.starts_with("shard ") && shard.ends_with(" of 2"), "{first}");
    let trace = trace.expect("a trace was asked for");
    assert!(trace.starts_with(&format!("# {shard} ")), "the trace is not of {shard}:\n{trace}");
    assert!(trace.contains("!!! first violation"), "{trace}");
    // With --trace-run, the run's events in every shard, each under its shard's heading.
    run.trace_run = Some("run-6".into());
    let (_, trace) = execute(&run, &prepared, false);
    let trace = trace.expect("a trace was asked for");
    assert!(trace.starts_with("# shard 0 of 2") && trace.contains("\n# shard 1 of 2"), "{trace}");
}
