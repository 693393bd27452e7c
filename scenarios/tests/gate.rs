//! `flowsim check` and `flowsim report`, run as the built binary on a tiny gate (one seed, a few hundred steps per
//! case). Under `cargo sim-test -p scenarios` the binary has the madsim cfg and the gate really runs; in a normal
//! build only the refusal (exit 2, naming `cargo flowsim`) is tested, because that binary cannot simulate.

mod common;

use common::{flowsim, path_str, temp_dir};

const GOOD_BUDGETS: &str = "invariant_violations_max = 0\nkeyed_duplicates_max = 0\nat_most_once_duplicates_max = 0\n\
                            residual_rate_upper_95_max = 1.0\n";

#[test]
fn malformed_budget_files_exit_2_naming_the_line() {
    let dir = temp_dir("malformed");
    let table: &[(&str, String, &[&str])] = &[
        ("unknown field", format!("{GOOD_BUDGETS}residual_max = 1\n"), &["line 5", "residual_max"]),
        ("wrong type", GOOD_BUDGETS.replace("keyed_duplicates_max = 0", "keyed_duplicates_max = \"0\""), &["line 2"]),
        (
            "missing field",
            GOOD_BUDGETS.replace("at_most_once_duplicates_max = 0\n", ""),
            &["at_most_once_duplicates_max"],
        ),
        ("not toml", "invariant_violations_max = = 0\n".to_string(), &["line 1"]),
        (
            "out of range",
            GOOD_BUDGETS.replace("residual_rate_upper_95_max = 1.0", "residual_rate_upper_95_max = 2.5"),
            &["line 4: residual_rate_upper_95_max = 2.5 must lie in 0..=1"],
        ),
    ];
    for (name, text, needles) in table {
        let path = dir.join(format!("{}.toml", name.replace(' ', "-")));
        std::fs::write(&path, text).expect("write budgets");
        let out = flowsim(&["check", "--seeds", "1", "--steps", "10", "--budgets", path_str(&path)]);
        assert_eq!(out.code, 2, "{name}: {}{}", out.stdout, out.stderr);
        for needle in *needles {
            assert!(out.stderr.contains(needle), "{name}: {:?} lacks {needle:?}", out.stderr);
        }
    }
    let missing = flowsim(&["check", "--budgets", "/nonexistent/budgets.toml"]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("/nonexistent/budgets.toml"), "{}", missing.stderr);
}

#[test]
fn report_refuses_missing_and_malformed_inputs() {
    let dir = temp_dir("report-bad");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"steps\": ").expect("write");
    let out_dir = dir.join("out");
    for input in [dir.join("missing.json"), bad] {
        let out = flowsim(&["report", path_str(&input), "--out", path_str(&out_dir)]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains(path_str(&input)), "{:?} does not name {}", out.stderr, input.display());
    }
}

#[test]
fn output_files_that_cannot_be_written_are_exit_2_before_any_case_runs() {
    let dir = temp_dir("check-outputs");
    let missing = dir.join("missing").join("junit.xml");
    for (option, path) in [("--junit", missing.as_path()), ("--json", dir.as_ref())] {
        let out = flowsim(&["check", "--seeds", "1", "--steps", "10", option, path_str(path)]);
        assert_eq!(out.code, 2, "{option}: {}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains(path_str(path)), "{option}: {:?} does not name {}", out.stderr, path.display());
        assert!(!out.stdout.contains("cases on"), "{option} was checked only after the cases ran: {}", out.stdout);
    }
}

/// An output over the budget file it reads, or two outputs that are one file through a link, are refused before any
/// case runs, and every file is left as it was.
#[test]
fn an_output_over_an_input_or_over_another_output_is_refused() {
    let dir = temp_dir("check-clash");
    let budgets = dir.join("budgets.toml");
    std::fs::write(&budgets, GOOD_BUDGETS).expect("write budgets");
    let link = dir.join("link.xml");
    std::os::unix::fs::symlink(&budgets, &link).expect("symlink");
    for (args, says) in [
        (vec!["--budgets", path_str(&budgets), "--json", path_str(&budgets)], "also an input"),
        (vec!["--budgets", path_str(&budgets), "--junit", path_str(&link)], "also an input"),
        (vec!["--json", path_str(&budgets), "--junit", path_str(&link)], "are one file"),
    ] {
        let mut all = vec!["check", "--seeds", "1", "--steps", "10"];
        all.extend(&args);
        let out = flowsim(&all);
        assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert_eq!(std::fs::read_to_string(&budgets).expect("read"), GOOD_BUDGETS, "{args:?}");
    }
}

#[cfg(not(madsim))]
#[test]
fn check_without_the_simulation_cfg_exits_2_naming_the_alias() {
    let out = flowsim(&["check", "--seeds", "1", "--steps", "10"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("cargo flowsim"), "{}", out.stderr);
}

#[cfg(madsim)]
mod simulated {
    use super::common::Output;
    use super::*;
    use std::path::Path;

    /// Steps per case of the tiny gate: enough for every scenario to reach its connectors, small enough for a debug
    /// build of the simulation.
    const TINY: &[&str] = &["check", "--seeds", "1", "--steps", "300"];

    fn tiny(extra: &[&str]) -> Output {
        let args: Vec<&str> = TINY.iter().chain(extra).copied().collect();
        flowsim(&args)
    }

    /// report.json without the figures measured outside the simulation (wall time, speed, memory).
    fn report_figures(dir: &Path) -> serde_json::Value {
        fn strip(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::Object(map) => {
                    for key in ["wall_seconds", "steps_per_second", "peak_rss_bytes"] {
                        map.remove(key);
                    }
                    map.values_mut().for_each(strip);
                }
                serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
                _ => {}
            }
        }
        let text = std::fs::read_to_string(dir.join("report.json")).expect("report.json written");
        let mut value: serde_json::Value = serde_json::from_str(&text).expect("report.json is JSON");
        strip(&mut value);
        value
    }

    #[test]
    fn the_tiny_gate_passes_with_the_repository_budgets_and_reports() {
        let dir = temp_dir("pass");
        let (json, junit, out_dir) = (dir.join("check.json"), dir.join("junit.xml"), dir.join("report"));
        let out = tiny(&["--json", path_str(&json), "--junit", path_str(&junit)]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let xml = std::fs::read_to_string(&junit).expect("junit written");
        assert!(xml.contains("canary seed=1") && xml.contains("mixed seed=1"), "{xml}");
        assert!(!xml.contains("<failure"), "{xml}");
        let check: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json written")).expect("check JSON");
        assert_eq!(check["check_format"], "flow-check/1");
        assert_eq!(check["passed"], true);
        assert!(check["merged"]["steps"].as_u64().expect("merged steps") > 0);

        let report = flowsim(&["report", path_str(&json), "--out", path_str(&out_dir)]);
        assert_eq!(report.code, 0, "{}{}", report.stdout, report.stderr);
        for name in ["report.md", "report.html", "report.json"] {
            let text = std::fs::read_to_string(out_dir.join(name)).expect(name);
            assert!(!text.is_empty(), "{name} is empty");
        }
        assert!(std::fs::read_to_string(out_dir.join("report.html")).expect("html").contains("<svg"));
    }

    #[test]
    fn a_budget_tightened_below_the_measured_rate_fails_with_the_repro_command() {
        let dir = temp_dir("tight");
        let budgets = dir.join("tight.toml");
        // No residual duplicate allowed, judged on an upper bound no finite sample can get under.
        std::fs::write(
            &budgets,
            GOOD_BUDGETS.replace("residual_rate_upper_95_max = 1.0", "residual_rate_upper_95_max = 1e-12"),
        )
        .expect("write budgets");
        let junit = dir.join("junit.xml");
        let out = tiny(&["--budgets", path_str(&budgets), "--junit", path_str(&junit)]);
        assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("reproduce with: cargo flowsim run --scenario"), "{}", out.stdout);
        let xml = std::fs::read_to_string(&junit).expect("junit written");
        assert!(xml.contains("<failure"), "{xml}");
        assert!(xml.contains("reproduce with: cargo flowsim run --scenario"), "{xml}");
        assert!(xml.contains("upper bound"), "{xml}");
        assert!(out.stdout.contains("budgets are judged by `flowsim check` only"), "{}", out.stdout);
    }

    #[test]
    fn outside_the_workspace_the_default_budgets_are_the_built_in_copy() {
        let dir = temp_dir("elsewhere");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowsim"))
            .args(TINY)
            .current_dir(&dir)
            .env("CI", "1")
            .output()
            .expect("the flowsim binary runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("budgets budgets/release.toml (the copy built into flowsim)"), "{stdout}");
    }

    #[test]
    fn two_shards_merge_into_the_unsharded_report() {
        let dir = temp_dir("shards");
        let mut jsons = Vec::new();
        for (name, shard) in [("all", None), ("s0", Some("0/2")), ("s1", Some("1/2"))] {
            let json = dir.join(format!("{name}.json"));
            let mut args = vec!["--json", path_str(&json)];
            if let Some(s) = shard {
                args.extend(["--shard", s]);
            }
            let out = tiny(&args);
            assert_eq!(out.code, 0, "{name}: {}{}", out.stdout, out.stderr);
            jsons.push(json);
        }
        let (whole, parts) = (dir.join("whole"), dir.join("parts"));
        let out = flowsim(&["report", path_str(&jsons[0]), "--out", path_str(&whole)]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        // The shards given in reverse order: the report puts cases back in suite order.
        let out = flowsim(&["report", path_str(&jsons[2]), path_str(&jsons[1]), "--out", path_str(&parts)]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(report_figures(&whole), report_figures(&parts));
        // A shard given twice would count its cases twice, and so would a shard beside the whole, or a report beside
        // what it was made from.
        let out = flowsim(&["report", path_str(&jsons[1]), path_str(&jsons[1]), "--out", path_str(&parts)]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains("is given twice"), "{}", out.stderr);
        let report_json = whole.join("report.json");
        for pair in [[&jsons[0], &jsons[1]], [&report_json, &jsons[2]]] {
            let out = flowsim(&["report", path_str(pair[0]), path_str(pair[1]), "--out", path_str(&dir.join("x"))]);
            assert_eq!(out.code, 2, "{pair:?}: {}", out.stderr);
            assert!(out.stderr.contains("counted once"), "{pair:?}: {}", out.stderr);
        }
        // The canary alone is no rate to report.
        let canary = dir.join("canary.json");
        let out = tiny(&["--shard", "11/12", "--json", path_str(&canary)]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        let out = flowsim(&["report", path_str(&canary), "--out", path_str(&dir.join("y"))]);
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains("leaves out the canary"), "{}", out.stderr);
    }

    /// `report` exits 1 when what it reports shows an invariant broken under the rules policy (the naive policy is the
    /// "before" and breaks them by design), and writes all three files or none.
    #[test]
    fn report_exits_1_on_a_broken_invariant_and_writes_all_or_nothing() {
        let dir = temp_dir("report-verdict");
        let broken = dir.join("canary.json");
        let out = flowsim(&["run", "--scenario", "canary", "--steps", "300", "--json", path_str(&broken)]);
        assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
        let out_dir = dir.join("report");
        let out = flowsim(&["report", path_str(&broken), "--out", path_str(&out_dir)]);
        assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
        assert!(out.stdout.contains("invariants broken under the rules policy"), "{}", out.stdout);
        // The same figures as the naive policy's: the "before", whose broken invariants are the point.
        let mut naive: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&broken).expect("read")).expect("JSON");
        naive["policy"] = "naive".into();
        naive["repro"] = "cargo flowsim run --scenario canary --steps 300 --policy naive".into();
        let naive_file = dir.join("naive.json");
        std::fs::write(&naive_file, serde_json::to_string(&naive).expect("JSON")).expect("write");
        let other = dir.join("other");
        let out = flowsim(&["report", path_str(&naive_file), "--out", path_str(&other)]);
        assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
        // A directory where report.html goes: exit 2, and the earlier report.md stays as it was.
        std::fs::remove_file(other.join("report.html")).expect("remove");
        std::fs::create_dir(other.join("report.html")).expect("mkdir");
        let before = std::fs::read(other.join("report.md")).expect("read");
        let out = flowsim(&["report", path_str(&broken), "--out", path_str(&other)]);
        assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
        assert_eq!(std::fs::read(other.join("report.md")).expect("read"), before, "report.md was replaced");
        // An input inside --out, where the report would write over it.
        std::fs::copy(&broken, out_dir.join("report.json")).expect("copy");
        let out = flowsim(&["report", path_str(&out_dir.join("report.json")), "--out", path_str(&out_dir)]);
        assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
        assert!(out.stderr.contains("also an input"), "{}", out.stderr);
    }
}
