//! `scripts/rustc-pgo`, cargo's rustc wrapper in this workspace, run with `bash` on a stub "rustc": a shell script that
//! answers `-vV` with a commit hash and otherwise prints the arguments it was given, one per line. The wrapper is
//! copied into a scratch checkout (`scripts/` beside a `pgo/` of the test's making), because it finds the profile
//! next to itself. It must add the profile to the release simulation build only, and pass every other compilation on
//! unchanged.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Scratch, executable, path_str, temp_dir};

const COMMIT: &str = "59807616e1fa2540724bfbac14d7976d7e4a3860";

/// The arguments of the release simulation build of one crate, as cargo passes them (rustflags last).
const SIM_RELEASE: &[&str] =
    &["--crate-name", "engine", "--edition=2024", "-C", "opt-level=3", "-C", "lto", "--cfg", "madsim"];

/// A scratch checkout: the real wrapper in `scripts/`, a profile and its rustc's commit in `pgo/` (when `profile`),
/// and a stub rustc that reports `commit`.
fn checkout(name: &str, profile: bool, commit: &str) -> (Scratch, PathBuf) {
    let dir = temp_dir(name);
    std::fs::create_dir(dir.join("scripts")).expect("scripts/");
    let wrapper = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/rustc-pgo");
    std::fs::copy(wrapper, dir.join("scripts/rustc-pgo")).expect("copy the wrapper");
    if profile {
        std::fs::create_dir(dir.join("pgo")).expect("pgo/");
        std::fs::write(dir.join("pgo/flowsim.profdata"), b"stands in for a profile").expect("a profile");
        std::fs::write(dir.join("pgo/rustc-commit"), format!("{COMMIT}\n")).expect("its rustc");
    }
    let rustc = executable(
        &dir,
        "rustc",
        &format!(
            "if [ \"$1\" = -vV ]; then echo 'rustc 1.95.0'; echo 'commit-hash: {commit}'; exit 0; fi\n\
             printf '%s\\n' \"$@\"\n"
        ),
    );
    (dir, rustc)
}

/// Runs the wrapper in `dir` as cargo would (`rustc-pgo RUSTC ARGS...`); returns the arguments rustc received.
fn wrap(dir: &Path, rustc: &Path, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let output = Command::new("bash")
        .arg(dir.join("scripts/rustc-pgo"))
        .arg(rustc)
        .args(args)
        .env_remove("FLOWSIM_PGO")
        .envs(env.iter().copied())
        .output()
        .expect("bash runs scripts/rustc-pgo");
    assert!(output.status.success(), "the wrapper failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_owned).collect()
}

fn unchanged(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

#[test]
fn the_release_simulation_build_gets_the_profile_by_its_absolute_path_and_the_cfg_that_says_so() {
    let (dir, rustc) = checkout("pgo-on", true, COMMIT);
    let got = wrap(&dir, &rustc, SIM_RELEASE, &[]);
    let mut expected = unchanged(SIM_RELEASE);
    expected.extend([
        format!("-Cprofile-use={}/pgo/flowsim.profdata", path_str(&dir)),
        "-Cllvm-args=-no-pgo-warn-mismatch".to_owned(),
        "--cfg".to_owned(),
        "flowsim_pgo".to_owned(),
    ]);
    assert_eq!(got, expected);
    // The rustflags may come before cargo's own arguments too.
    let reordered = ["--cfg", "madsim", "--crate-name", "engine", "-C", "opt-level=3"];
    assert!(wrap(&dir, &rustc, &reordered, &[]).iter().any(|a| a.starts_with("-Cprofile-use=")));
}

#[test]
fn every_other_compilation_passes_through_unchanged() {
    let (dir, rustc) = checkout("pgo-other", true, COMMIT);
    let cases: &[&[&str]] = &[
        // the normal release build, the simulation's test build, a version probe
        &["--crate-name", "engine", "-C", "opt-level=3"],
        &["--crate-name", "engine", "-C", "opt-level=1", "--cfg", "madsim"],
        &["-vV"],
        // scripts/pgo's instrumented build and any build that brings its own profile
        &["--crate-name", "engine", "-C", "opt-level=3", "--cfg", "madsim", "-Cprofile-generate=/tmp/raw"],
        &["--crate-name", "engine", "-C", "opt-level=3", "--cfg", "madsim", "-Cprofile-use=/elsewhere.profdata"],
    ];
    for args in cases {
        let expected = if args == &["-vV"] {
            vec!["rustc 1.95.0".to_owned(), format!("commit-hash: {COMMIT}")]
        } else {
            unchanged(args)
        };
        assert_eq!(wrap(&dir, &rustc, args, &[]), expected, "args {args:?}");
    }
}

#[test]
fn no_profile_without_the_file_with_flowsim_pgo_0_or_with_another_rustc() {
    let (dir, rustc) = checkout("pgo-none", false, COMMIT);
    assert_eq!(wrap(&dir, &rustc, SIM_RELEASE, &[]), unchanged(SIM_RELEASE), "no pgo/ directory");

    let (dir, rustc) = checkout("pgo-off", true, COMMIT);
    assert_eq!(wrap(&dir, &rustc, SIM_RELEASE, &[("FLOWSIM_PGO", "0")]), unchanged(SIM_RELEASE), "FLOWSIM_PGO=0");
    assert!(wrap(&dir, &rustc, SIM_RELEASE, &[("FLOWSIM_PGO", "1")]).iter().any(|a| a == "flowsim_pgo"));

    // A profile is read only by the LLVM that wrote it: with another rustc the build goes on without it.
    let (dir, rustc) = checkout("pgo-other-rustc", true, "0000000000000000000000000000000000000000");
    assert_eq!(wrap(&dir, &rustc, SIM_RELEASE, &[]), unchanged(SIM_RELEASE), "another rustc");
}

#[test]
fn the_committed_profile_names_the_rustc_that_made_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let commit = std::fs::read_to_string(root.join("pgo/rustc-commit")).expect("pgo/rustc-commit is committed");
    let commit = commit.trim();
    assert!(commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()), "not a commit hash: {commit:?}");
    let profile = std::fs::metadata(root.join("pgo/flowsim.profdata")).expect("pgo/flowsim.profdata is committed");
    assert!(profile.len() > 0);
}
