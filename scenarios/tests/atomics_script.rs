//! `scripts/atomics`, run with `python3` against stub `valgrind` and `objdump` put first on `PATH`: the stub
//! disassembly names which addresses hold atomic instructions, and the stub valgrind writes a callgrind profile (with
//! relative positions, a call's inclusive cost and another object's code) and prints a flowsim-like step count. So
//! what is tested is the script's own reading and adding up, on a machine without valgrind.

mod common;

use std::path::{Path, PathBuf};

use common::{Output, executable, path_str, temp_dir};

/// Runs the real script with `python3`, with `bin` first on `PATH`.
fn atomics(bin: &Path, args: &[&str]) -> Output {
    common::python_script("atomics", args, Some(bin))
}

/// Atomic: `lock` at 0x1000 and 0x100b, `xchg` with memory at 0x1007. Not: the `mov`, the `xchg` of two registers.
const DISASSEMBLY: &str = "\
0000000000001000 <alpha>:
    1000:\tlock incq (%rax)
    1004:\tmov    %rax,%rbx
    1007:\txchg   %eax,(%rbx)
    1009:\txchg   %eax,%ebx
    100b:\tlock cmpxchg %rcx,(%rdx)
";

/// A profile of `flowsim` (its object named by path): `alpha` executes 0x1000 20 times, 0x1007 5 times, 0x1009
/// 7 times and 0x100b 4 times, besides a call from 0x100b whose inclusive cost (999) must not count; `beta`
/// executes 0x100b 6 times; libc's code at the same addresses must not count either.
fn profile(flowsim: &Path) -> String {
    format!(
        "# callgrind format\nversion: 1\npositions: instr line\nevents: Ir\n\n\
         ob=(1) {}\nfl=(1) a.rs\nfn=(1) alpha\n0x1000 1 20\n+4 * 20\n+3 * 5\n+2 * 7\n\
         cfn=(3) gamma\ncalls=3 0x2000 1\n+2 * 999\n* * 4\n\n\
         fn=(2) beta\n0x100b 2 6\n\n\
         ob=(2) /usr/lib/x86_64-linux-gnu/libc.so.6\nfn=(4) memcpy\n0x1000 0 1000\n0x100b 0 1000\n\n\
         ob=(1)\nfn=(1)\n0x1007 1 1\n",
        path_str(flowsim)
    )
}

/// Puts stub `objdump` and `valgrind` in `dir/bin` (the valgrind prints `steps` as flowsim would) and a stub flowsim in
/// `dir`; returns (bin, flowsim).
fn stubs(dir: &Path, steps: Option<u32>) -> (PathBuf, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir(&bin).expect("a bin dir");
    let flowsim = executable(dir, "flowsim", "exit 0\n");
    std::fs::write(dir.join("profile"), profile(&flowsim)).expect("write the profile");
    std::fs::write(dir.join("disassembly"), DISASSEMBLY).expect("write the disassembly");
    executable(&bin, "objdump", &format!("cat '{}'\n", path_str(&dir.join("disassembly"))));
    let summary = match steps {
        Some(n) => format!("echo '  steps                        {n}'\n"),
        None => String::new(),
    };
    executable(
        &bin,
        "valgrind",
        &format!(
            "printf '%s\\n' \"$*\" > '{args}'\n\
             for a in \"$@\"; do case \"$a\" in --callgrind-out-file=*) cp '{profile}' \"${{a#*=}}\";; esac; done\n\
             {summary}",
            args = path_str(&dir.join("valgrind.args")),
            profile = path_str(&dir.join("profile")),
        ),
    );
    (bin, flowsim)
}

#[test]
fn counts_each_functions_atomic_instructions_per_step_and_nothing_else() {
    let dir = temp_dir("atomics-counts");
    let (bin, flowsim) = stubs(&dir, Some(10));
    let out = atomics(&bin, &[path_str(&flowsim), "--", "--steps", "10", "--seed", "3"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    // alpha: 20 + 5 + 4 (+ 1 when the profile names the object and function again), beta: 6.
    assert!(out.stdout.contains("atomic instructions: 36 (3.6 per step)"), "{}", out.stdout);
    let lines: Vec<&str> = out.stdout.lines().skip(2).map(str::trim).collect();
    assert_eq!(lines, ["3.00  alpha", "0.60  beta"]);
    let args = std::fs::read_to_string(dir.join("valgrind.args")).expect("valgrind ran");
    assert!(args.contains("--tool=callgrind --dump-instr=yes"), "{args}");
    assert!(args.trim_end().ends_with(&format!("{} run --steps 10 --seed 3", path_str(&flowsim))), "{args}");
}

#[test]
fn top_limits_the_functions_listed() {
    let dir = temp_dir("atomics-top");
    let (bin, flowsim) = stubs(&dir, Some(10));
    let out = atomics(&bin, &[path_str(&flowsim), "--top", "1"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 3, "{}", out.stdout);
    let args = std::fs::read_to_string(dir.join("valgrind.args")).expect("valgrind ran");
    assert!(args.trim_end().ends_with("run --steps 20000"), "the default run: {args}");
}

#[test]
fn bad_input_exits_2_naming_the_problem() {
    let dir = temp_dir("atomics-bad");
    let (bin, flowsim) = stubs(&dir, None);
    let missing = atomics(&bin, &[path_str(&dir.join("nope"))]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("is not an executable"), "{}", missing.stderr);
    let negative = atomics(&bin, &[path_str(&flowsim), "--top", "-1"]);
    assert_eq!(negative.code, 2);
    assert!(negative.stderr.contains("--top must be 0 or more"), "{}", negative.stderr);
    let no_steps = atomics(&bin, &[path_str(&flowsim)]);
    assert_eq!(no_steps.code, 2);
    assert!(no_steps.stderr.contains("printed no step count"), "{}", no_steps.stderr);
}
