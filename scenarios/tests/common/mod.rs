//! Helpers shared by the tests that run the built `flowsim` binary.
#![allow(dead_code, reason = "each test file uses its own subset")]

use std::path::Path;
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

/// A fresh temporary directory whose name starts with the test's, removed with everything in it when dropped (so
/// test runs leave nothing behind). It derefs to its path.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

pub fn temp_dir(name: &str) -> Scratch {
    Scratch(tempfile::Builder::new().prefix(&format!("flowsim-test-{name}-")).tempdir().expect("a temp dir"))
}
