//! Helpers shared by the tests that run the built `flowsim` binary.
#![allow(dead_code, reason = "each test file uses its own subset")]

use std::os::unix::fs::PermissionsExt;
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

/// Runs `scripts/NAME` (a Python script) with `python3` and `args`, with `path_first` put first on `PATH` when given
/// (for stub tools). Every outcome the tests look at is one the script means, so a Python traceback fails the test.
pub fn python_script(name: &str, args: &[&str], path_first: Option<&Path>) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("scripts").join(name);
    let mut command = Command::new("python3");
    command.arg(&script).args(args);
    if let Some(dir) = path_first {
        command.env("PATH", format!("{}:{}", path_str(dir), std::env::var("PATH").unwrap_or_default()));
    }
    let output = command.output().unwrap_or_else(|e| panic!("python3 runs scripts/{name}: {e}"));
    let out = Output {
        code: output.status.code().unwrap_or_else(|| panic!("scripts/{name} exits with a code")),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    };
    assert!(!out.stderr.contains("Traceback"), "scripts/{name} crashed:\n{}", out.stderr);
    out
}

/// Writes an executable shell script `dir/name` with `body` after the shebang (a stub binary or tool).
pub fn executable(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}")).expect("write a stub");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("make a stub executable");
    path
}
