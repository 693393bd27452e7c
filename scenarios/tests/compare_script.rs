//! `scripts/compare`, run with `python3` on stub "binaries": small shell scripts that print a flowsim-like summary
//! (`  steps  N`, `  trace hash  HEX`) at once and record the arguments they were given. Exit codes: 0 when the
//! builds simulated the same thing, 1 when they did not, 2 on bad input or a run that printed no summary.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{Output, executable, path_str, temp_dir};

const HASH: &str = "9f2c4e61d0b83a57c1e9f04b6a2d7c3e8b5f1a0d4c6e92b7f3a8d1c5e0b4a697";
const OTHER_HASH: &str = "0b4a6979f2c4e61d0b83a57c1e9f04b6a2d7c3e8b5f1a0d4c6e92b7f3a8d1c5e";

/// Runs the real script with `python3`.
fn compare(args: &[&str]) -> Output {
    common::python_script("compare", args, None)
}

/// A stub flowsim that appends its arguments to `dir/name.args`, exits 3 unless called as `run --steps N ...`, and
/// otherwise prints a summary in flowsim's format with `steps` (shell text: `"$3"` echoes N back) and `hash`.
fn flowsim_stub(dir: &Path, name: &str, steps: &str, hash: &str) -> PathBuf {
    let args = dir.join(format!("{name}.args"));
    executable(
        dir,
        name,
        &format!(
            "printf '%s\\n' \"$*\" >> '{}'\n\
             [ \"$1\" = run ] && [ \"$2\" = --steps ] || exit 3\n\
             echo 'flowsim: scenario default seed 1 policy rules ledger memory'\n\
             echo \"  steps                        {steps}\"\n\
             echo '  runs                         3'\n\
             echo '  trace hash                   {hash}'\n\
             echo '  wall time                    0.00 s (0 steps/s)'\n",
            path_str(&args)
        ),
    )
}

/// The argument lines a stub recorded, one per run (none if it never ran).
fn recorded(dir: &Path, name: &str) -> Vec<String> {
    match std::fs::read_to_string(dir.join(format!("{name}.args"))) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("read the recorded arguments of {name}: {e}"),
    }
}

#[test]
fn same_hashes_exit_0_with_a_line_per_pair_and_the_extra_arguments_passed_on() {
    let dir = temp_dir("compare-same");
    let base = flowsim_stub(&dir, "baseline", "\"$3\"", HASH);
    let cand = flowsim_stub(&dir, "candidate", "\"$3\"", HASH);
    let out = compare(&[path_str(&base), path_str(&cand), "--pairs", "3", "--steps", "7", "--", "--ledger", "sqlite"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("same simulation             yes"), "{}", out.stdout);
    assert!(out.stdout.contains("steps per run               7"), "{}", out.stdout);
    let pairs: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("pair ")).collect();
    assert_eq!(pairs.len(), 3, "{}", out.stdout);
    for (n, line) in (1..).zip(&pairs) {
        assert!(line.starts_with(&format!("pair {n:>3}: ")), "{}", out.stdout);
    }
    for name in ["baseline", "candidate"] {
        assert_eq!(recorded(&dir, name), vec!["run --steps 7 --ledger sqlite"; 3], "{name}");
    }
}

#[test]
fn different_hashes_exit_1_after_the_full_summary_naming_each_pair() {
    let dir = temp_dir("compare-hashes");
    let base = flowsim_stub(&dir, "baseline", "\"$3\"", HASH);
    let cand = flowsim_stub(&dir, "candidate", "\"$3\"", OTHER_HASH);
    let out = compare(&[path_str(&base), path_str(&cand), "--pairs", "2", "--steps", "7"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("candidate / baseline time"), "{}", out.stdout);
    assert!(out.stdout.contains("same simulation             NO"), "{}", out.stdout);
    for pair in ["pair 1:", "pair 2:"] {
        assert!(
            out.stderr.contains(&format!("compare: {pair} the builds simulated different things")),
            "{}",
            out.stderr
        );
    }
    assert!(out.stderr.contains(&HASH[..16]) && out.stderr.contains(&OTHER_HASH[..16]), "{}", out.stderr);
}

#[test]
fn different_step_counts_exit_1() {
    let dir = temp_dir("compare-steps");
    let base = flowsim_stub(&dir, "baseline", "\"$3\"", HASH);
    let cand = flowsim_stub(&dir, "candidate", "8", HASH);
    let out = compare(&[path_str(&base), path_str(&cand), "--pairs", "1", "--steps", "7"]);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("same simulation             NO"), "{}", out.stdout);
    assert!(out.stderr.contains("pair 1: the builds simulated different things"), "{}", out.stderr);
}

#[test]
fn a_path_that_is_not_an_executable_file_exits_2_naming_it() {
    let dir = temp_dir("compare-not-executable");
    let good = flowsim_stub(&dir, "good", "\"$3\"", HASH);
    let plain = dir.join("plain");
    std::fs::write(&plain, "#!/bin/sh\n").expect("write a plain file");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("set its mode");
    let missing = dir.join("missing");
    for bad in [&plain, &missing, &dir.to_path_buf()] {
        for args in [[path_str(bad), path_str(&good)], [path_str(&good), path_str(bad)]] {
            let out = compare(&[args[0], args[1], "--pairs", "1", "--steps", "7"]);
            assert_eq!(out.code, 2, "{args:?}: {}{}", out.stdout, out.stderr);
            assert!(out.stderr.contains(&format!("{}: not an executable file", path_str(bad))), "{}", out.stderr);
        }
    }
    assert!(recorded(&dir, "good").is_empty(), "nothing runs when a binary is bad");
}

#[test]
fn a_run_without_a_summary_exits_2() {
    let dir = temp_dir("compare-no-summary");
    let good = flowsim_stub(&dir, "good", "\"$3\"", HASH);
    let silent = executable(&dir, "silent", "echo 'flowsim: this build cannot simulate'\nexit 2\n");
    let out = compare(&[path_str(&good), path_str(&silent), "--pairs", "2", "--steps", "7"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("without a summary"), "{}", out.stderr);
    assert!(out.stderr.contains(path_str(&silent)), "{}", out.stderr);
    assert!(!out.stdout.contains("same simulation"), "{}", out.stdout);
}

#[test]
fn zero_pairs_exit_2() {
    let dir = temp_dir("compare-zero-pairs");
    let base = flowsim_stub(&dir, "baseline", "\"$3\"", HASH);
    let cand = flowsim_stub(&dir, "candidate", "\"$3\"", HASH);
    let out = compare(&[path_str(&base), path_str(&cand), "--pairs", "0", "--steps", "7"]);
    assert_eq!(out.code, 2, "{}{}", out.stdout, out.stderr);
    assert!(out.stderr.contains("--pairs must be at least 1"), "{}", out.stderr);
    assert!(recorded(&dir, "baseline").is_empty() && recorded(&dir, "candidate").is_empty());
}
