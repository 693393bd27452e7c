//! Helpers shared by the tests that run the built `flowsim` binary.
#![allow(dead_code, reason = "each test file uses its own subset")]

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub fn flowsim(args: &[&str]) -> Output {
    // The repository root, so the default budget file `budgets/release.toml` is found as in CI.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(env!("CARGO_BIN_EXE_flowsim"))
        .args(args)
        .current_dir(root)
        .env("CI", "1")
        .output()
        .expect("the flowsim binary runs");
    Output {
        code: output.status.code().expect("flowsim exits with a code"),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("temp paths are UTF-8")
}

/// A temporary directory named for the test, emptied first.
pub fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flowsim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}
