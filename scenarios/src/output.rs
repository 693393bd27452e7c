//! Output files are checked before the work that fills them: a simulation of an hour, or a release gate, must not
//! end in "cannot write" with its results gone. Standard output is written through `out!` and `outln!`, which a
//! reader that has gone (`flowsim run | head -1`) cannot turn into a panic: the exit code still carries the verdict.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once a write to standard output failed: later output is dropped rather than failing again.
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output, as `print!` does, but returns quietly where `print!` panics. A reader that
/// closed the pipe wants no more output, so nothing is said; any other failure (a full disk behind a redirect) is
/// said once on standard error. Either way the command goes on and exits with the code its work earned.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    if STDOUT_FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    // An output file appended to standard output's file through a description of its own (`--json /dev/stdout >
    // out.txt`) lies past this description's offset: moved to the end first, so this line follows it rather than
    // landing on top of it (found by QA, stop 51: `report` and `sweep` overwrote a report's start). Nothing is
    // buffered here: every write is flushed.
    #[cfg(unix)]
    if reports::files::take_stdout_appended() {
        use std::io::Seek as _;
        use std::os::fd::AsFd as _;
        if let Ok(fd) = stdout.as_fd().try_clone_to_owned() {
            let _ = std::fs::File::from(fd).seek(std::io::SeekFrom::End(0));
        }
    }
    // Flushed here, not at exit, so that a failure is seen now and where it can be handled.
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush())
        && !STDOUT_FAILED.swap(true, Ordering::Relaxed)
        && e.kind() != ErrorKind::BrokenPipe
    {
        write_stderr(format_args!("flowsim: cannot write standard output: {e}\n"));
    }
}

/// Writes `args` to standard error, as `eprint!` does, but returns quietly where `eprint!` panics (`flowsim canon
/// 2>&1 | head -c 5` closes it early): there is no one left to tell, and the exit code still says what happened.
pub fn write_stderr(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// `eprintln!` through `write_stderr`: no panic when standard error is gone.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through `write_stdout`: no panic when standard output is gone. (`lib.rs` declares this module first,
/// with `#[macro_use]`, so every module of the crate has it.)
#[cfg_attr(not(madsim), allow(unused_macros, reason = "only the commands that simulate print a partial line"))]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!($($arg)*))
    };
}

/// `println!` through `write_stdout`: no panic when standard output is gone.
macro_rules! outln {
    () => {
        $crate::output::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `1 seed`, `3 seeds`: a count and its noun.
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Checks that `path` can be written as a file, and says why not: it is a directory, its directory does not exist,
/// or the system refuses to open it for writing. An existing file is opened for writing without being truncated, so
/// its contents stay as they are until the real write; a path that does not exist yet is created to prove it can be,
/// and removed again.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err("an output file's name is empty".into());
    }
    // A symbolic link's target is what is written (`reports::files::write_all`), made if it is not there yet: the
    // checks below are of it, and name the link. (A path through `/proc` is its own target: the system follows it.)
    let target = reports::files::reach(path).target;
    let path = target.as_path();
    if path.is_dir() {
        return Err(format!("cannot write {shown}: it is a directory"));
    }
    if path.as_os_str().as_encoded_bytes().ends_with(b"/") {
        return Err(format!("cannot write {shown}: a file's name cannot end in /"));
    }
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let why = if dir.exists() { "is not a directory" } else { "does not exist" };
        return Err(format!("cannot write {shown}: {} {why}", dir.display()));
    }
    match OpenOptions::new().write(true).create_new(true).open(path) {
        Ok(file) => {
            drop(file);
            std::fs::remove_file(path).map_err(|e| format!("cannot remove the probe of {shown}: {e}"))
        }
        // An existing file is opened for writing, not truncated.
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            OpenOptions::new().write(true).open(path).map(drop).map_err(|e| format!("cannot write {shown}: {e}"))
        }
        Err(e) => Err(format!("cannot write {shown}: {e}")),
    }
}

/// Whether `a` and `b` name one file: the same file on disk when both exist (through links, `./x` and `x`, hard
/// links), else the same absolute path once the directory is resolved.
pub fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    if let (Ok(x), Ok(y)) = (std::fs::metadata(a), std::fs::metadata(b)) {
        use std::os::unix::fs::MetadataExt as _;
        return (x.dev(), x.ino()) == (y.dev(), y.ino());
    }
    // Through its links (to a file not made yet, which the write makes: `reports::files::reach`).
    let resolved = |p: &Path| {
        let p = reports::files::reach(p).target;
        let p = std::path::absolute(&p).unwrap_or(p);
        match (p.parent().and_then(|d| std::fs::canonicalize(d).ok()), p.file_name()) {
            (Some(dir), Some(name)) => dir.join(name),
            _ => p,
        }
    };
    resolved(a) == resolved(b)
}

/// [`check_writable`] for each of the outputs given, which must be distinct files, none of them one of the command's
/// `inputs`: two outputs written to one path would leave only the last (`run --json x --trace x` kept the trace and
/// lost the results), and an output written over an input (`check --budgets b.toml --json b.toml`) would destroy it.
pub fn check_all<'a>(
    outputs: impl IntoIterator<Item = &'a Option<std::path::PathBuf>>,
    inputs: &[&Path],
) -> Result<(), String> {
    let paths: Vec<&std::path::PathBuf> = outputs.into_iter().flatten().collect();
    for (i, a) in paths.iter().enumerate() {
        if let Some(b) = paths[i + 1..].iter().find(|b| same_file(a, b)) {
            return Err(format!(
                "{} and {} are one file: each output needs a file of its own",
                a.display(),
                b.display()
            ));
        }
    }
    refuse_inputs(paths.iter().map(|p| p.as_path()), inputs)?;
    refuse_stdout_file(paths.iter().map(|p| p.as_path()))?;
    paths.into_iter().try_for_each(|p| check_writable(p))
}

/// Refuses an output that is the file standard output is redirected to (`run --json f > f`), unless it is written
/// through standard output itself (`/dev/stdout`, appended to): renamed into place, it would replace that file, and
/// every line the command printed there would be lost (found by QA, stop 51).
pub fn refuse_stdout_file<'a>(outputs: impl IntoIterator<Item = &'a Path>) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        let Ok(stdout) = std::fs::metadata("/proc/self/fd/1") else { return Ok(()) };
        if !stdout.is_file() {
            return Ok(());
        }
        for output in outputs.into_iter().filter(|output| !reports::files::reach(output).through_proc) {
            if std::fs::metadata(output).is_ok_and(|m| (m.dev(), m.ino()) == (stdout.dev(), stdout.ino())) {
                return Err(format!(
                    "{} is the file standard output is redirected to: written there, it would replace what the \
                     command prints; give another file, or /dev/stdout to have it follow the printed lines",
                    output.display()
                ));
            }
        }
    }
    #[cfg(not(unix))]
    let _ = outputs;
    Ok(())
}

/// Refuses an output that is one of the command's `inputs` (see [`same_file`]): writing it would destroy what was
/// read. Checks names only, so it also serves outputs whose directory is yet to be made.
pub fn refuse_inputs<'a>(outputs: impl IntoIterator<Item = &'a Path>, inputs: &[&Path]) -> Result<(), String> {
    for output in outputs {
        if let Some(input) = inputs.iter().find(|input| same_file(output, input)) {
            return Err(format!(
                "{} is also an input of this command ({}): writing it would destroy what was read",
                output.display(),
                input.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_file_in_an_existing_directory_can_be_written_and_is_not_left_behind() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("results.json");
        check_writable(&path).expect("writable");
        assert!(!path.exists(), "the probe is removed");
    }

    #[test]
    fn an_existing_file_keeps_its_contents() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("results.json");
        std::fs::write(&path, b"earlier").expect("write");
        check_writable(&path).expect("writable");
        assert_eq!(std::fs::read(&path).expect("read"), b"earlier");
    }

    /// A link to a file not yet made is writable (its target is made by the write), and the check leaves the link
    /// dangling as it was; a link into a directory that does not exist is refused, naming the link. (Found by QA,
    /// stop 51: "cannot write dang.json: No such file or directory", the target's directory there.)
    #[cfg(unix)]
    #[test]
    fn a_link_to_a_file_not_yet_made_is_writable() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let link = dir.path().join("dang.json");
        std::os::unix::fs::symlink(dir.path().join("new.json"), &link).expect("symlink");
        check_writable(&link).expect("writable");
        assert!(!dir.path().join("new.json").exists(), "the probe is removed");
        assert!(std::fs::symlink_metadata(&link).expect("stat").file_type().is_symlink());
        let nowhere = dir.path().join("nowhere.json");
        std::os::unix::fs::symlink(dir.path().join("missing/new.json"), &nowhere).expect("symlink");
        let e = check_writable(&nowhere).expect_err("refused");
        assert!(e.starts_with(&format!("cannot write {}: ", nowhere.display())) && e.contains("does not exist"), "{e}");
    }

    /// Two outputs, one a link to a file not made yet and the other that file, are one file: refused. (Found by QA,
    /// stop 51: `--json dl --trace new.json`, `dl -> new.json`, kept the trace and lost the results.)
    #[cfg(unix)]
    #[test]
    fn a_link_to_a_file_not_yet_made_and_that_file_are_one_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (link, file) = (dir.path().join("dl"), dir.path().join("new.json"));
        std::os::unix::fs::symlink("new.json", &link).expect("symlink");
        let e = check_all([&Some(link.clone()), &Some(file)], &[]).expect_err("refused");
        assert!(e.contains("are one file"), "{e}");
        check_all([&Some(link), &Some(dir.path().join("other.json"))], &[]).expect("two files");
    }

    #[test]
    fn two_outputs_to_one_file_are_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("out.json");
        let again = dir.path().join(".").join("out.json");
        let e = check_all([&Some(path.clone()), &None, &Some(again)], &[]).expect_err("refused");
        assert!(e.contains("are one file"), "{e}");
        check_all([&Some(path), &Some(dir.path().join("trace.txt"))], &[]).expect("two files");
    }

    #[cfg(unix)]
    #[test]
    fn one_file_through_a_link_or_as_an_input_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (real, link) = (dir.path().join("s1"), dir.path().join("s2"));
        std::fs::write(&real, b"kept").expect("write");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        let e = check_all([&Some(real.clone()), &Some(link.clone())], &[]).expect_err("refused");
        assert!(e.contains("are one file"), "{e}");
        let budgets = dir.path().join("budgets.toml");
        std::fs::write(&budgets, b"[x]").expect("write");
        let e =
            check_all([&Some(dir.path().join(".").join("budgets.toml"))], &[budgets.as_path()]).expect_err("refused");
        assert!(e.contains("also an input"), "{e}");
        let e = check_all([&Some(link)], &[real.as_path()]).expect_err("refused");
        assert!(e.contains("also an input"), "{e}");
        assert_eq!(std::fs::read(&real).expect("read"), b"kept");
        assert_eq!(std::fs::read(&budgets).expect("read"), b"[x]");
        check_all([&Some(dir.path().join("new.json"))], &[budgets.as_path()]).expect("another file");
    }

    #[test]
    fn a_missing_directory_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("nope").join("results.json");
        let e = check_writable(&path).expect_err("refused");
        assert!(e.contains("nope") && e.contains("does not exist"), "{e}");
    }

    #[test]
    fn a_file_in_the_place_of_the_directory_is_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::write(dir.path().join("plain"), b"").expect("write");
        let e = check_writable(&dir.path().join("plain").join("x.json")).expect_err("refused");
        assert!(e.contains("is not a directory"), "{e}");
    }

    #[test]
    fn a_directory_is_not_a_file() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let e = check_writable(dir.path()).expect_err("refused");
        assert!(e.contains("it is a directory"), "{e}");
    }

    #[test]
    fn a_name_ending_in_a_slash_is_named_as_such() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let e = check_writable(&dir.path().join("nodir/")).expect_err("refused");
        assert!(e.contains("cannot end in /"), "{e}");
        assert_eq!(count(1u64, "seed", "seeds"), "1 seed");
        assert_eq!(count(3u64, "seed", "seeds"), "3 seeds");
    }

    #[test]
    fn an_empty_name_is_refused() {
        assert!(check_writable(Path::new("")).is_err());
        assert!(check_all([&None, &Some(std::path::PathBuf::new())], &[]).is_err());
        assert!(check_all([&None, &None], &[]).is_ok());
    }
}
