//! Output files written so that a failure loses nothing it need not: every file of a set is first written whole into a
//! temporary file beside it, and only once all of them are written are they renamed into place. A full disk, a
//! directory in a file's place or a refused permission then leaves every earlier file as it was (a report's
//! `report.md` new and its `report.json` old, say, is never the outcome), and a reader never sees a half-written file.
//!
//! The temporary files and their renames are `tempfile`'s (`NamedTempFile::persist`), which removes a temporary file
//! that is not persisted. The target of a symbolic link is written, not the link (the link stays a link). A file a
//! rename would not replace faithfully is written in place instead: a device or stream (`/dev/null`, `/dev/full`,
//! `/dev/stdout`, `/proc/self/fd/1`, or a link to one: [`reach`]), a file with a second hard link or another owner or group, and a file in a
//! directory this process may not create files in. Such a file is opened (not truncated) with the others' temporary
//! files, so one that cannot be opened stops the set before anything is written; but its write cannot be taken back,
//! so it comes after every other file of the set is renamed into place: a device that fails there (`/dev/full`, a full
//! disk under a file with two links) costs the set that file alone, never the files that could be written. Every file
//! of that last part is tried, and the first failure is returned.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A file of the set could not be written. A failure found before the renames (any but a write in place or a rename)
/// leaves every file of the set as it was; one in a write in place (or a rename, which one directory makes all but
/// impossible) comes after every other file of the set is written or tried.
#[derive(Debug)]
pub struct WriteError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Whether a rename of `new` (this process's temporary file) may replace the existing file `old` without losing
/// anything of it: one link, and (on Unix) the same owner and group as the new file gets.
fn replaceable(old: &std::fs::Metadata, new: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        old.nlink() == 1 && old.uid() == new.uid() && old.gid() == new.gid()
    }
    #[cfg(not(unix))]
    {
        let _ = (old, new);
        true
    }
}

/// A file of the set written whole into a temporary file beside its target, waiting to be renamed onto it.
struct Staged<'a> {
    file: tempfile::NamedTempFile,
    target: PathBuf,
    shown: &'a Path,
}

/// A file of the set to be written in place once every staged file is renamed, opened (not truncated) beforehand so
/// that one that cannot be opened stops the set before anything is written: appended to when it is a device or a
/// stream, else truncated first.
struct InPlace<'a> {
    file: std::fs::File,
    path: &'a Path,
    bytes: &'a [u8],
    truncate: bool,
    append: bool,
}

/// Set when a file appended to in place was this process's standard output itself (`--json /dev/stdout` with standard
/// output redirected to a file): appended through a file description of its own, past the offset standard output's
/// own writes go to. [`take_stdout_appended`] tells the command, which moves standard output to the end before it
/// writes there again, so that its next line does not land on top of what was appended.
static STDOUT_APPENDED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a write since the last call appended to the file standard output is (see [`STDOUT_APPENDED`]).
pub fn take_stdout_appended() -> bool {
    STDOUT_APPENDED.swap(false, std::sync::atomic::Ordering::Relaxed)
}

/// Whether `file` is the file standard output is (a regular file: a pipe or a terminal has no offset to move).
#[cfg(unix)]
fn is_stdout_file(file: &std::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (file.metadata(), std::fs::metadata("/proc/self/fd/1")) {
        (Ok(a), Ok(b)) => a.is_file() && (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

impl<'a> InPlace<'a> {
    fn open(
        path: &'a Path,
        bytes: &'a [u8],
        append: bool,
        existing: Option<&std::fs::Metadata>,
    ) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new().write(true).append(append).open(path)?;
        // A device is not truncated (`set_len` fails on one); a regular file is, as `std::fs::write` would.
        let truncate = !append && existing.is_some_and(std::fs::Metadata::is_file);
        Ok(Self { file, path, bytes, truncate, append })
    }

    fn write(mut self) -> Result<(), WriteError> {
        let write = if self.truncate { self.file.set_len(0) } else { Ok(()) };
        write
            .and_then(|()| self.file.write_all(self.bytes))
            .and_then(|()| self.file.flush())
            .map_err(|source| WriteError { path: self.path.to_path_buf(), source })?;
        #[cfg(unix)]
        if self.append && is_stdout_file(&self.file) {
            STDOUT_APPENDED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Where a write to a path lands ([`reach`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reach {
    /// The file to write: where the path's symbolic links lead, followed one by one (a link to a file not yet made
    /// leads to that file, which the write then makes, as the shell's `>` does); the path itself when it is no link,
    /// or when it passes through `/proc`.
    pub target: PathBuf,
    /// The path, or a link on its way, is in `/proc` (`/dev/stdout`, `/dev/fd/1`, `/proc/self/fd/1`, a link to one
    /// of them): a file this process holds open, such as the one the shell redirected standard output to, or a
    /// pipe. Its link text (`pipe:[N]`) is no path, and a rename would unlink a redirected file from under the
    /// shell: the path is opened as it is, for the system to follow, written in place and appended to (it has an
    /// offset of its own, and a redirected log's earlier lines stay).
    pub through_proc: bool,
}

/// Where a write to `path` lands: see [`Reach`]. Each step of the way is judged with its directory resolved (so
/// `../../proc/self/fd/1` and `/tmp/../dev/stdout` are what they name). A loop of links, or more than 40 of them, is
/// left to the write to refuse.
pub fn reach(path: &Path) -> Reach {
    // `at` with its directory resolved, when that directory exists.
    let resolved = |at: &Path| -> PathBuf {
        let (dir, name) = match (at.parent(), at.file_name()) {
            (Some(dir), Some(name)) if dir.as_os_str().is_empty() => (Path::new("."), name),
            (Some(dir), Some(name)) => (dir, name),
            _ => return at.to_path_buf(),
        };
        std::fs::canonicalize(dir).map_or_else(|_| at.to_path_buf(), |dir| dir.join(name))
    };
    let given = |through_proc| Reach { target: path.to_path_buf(), through_proc };
    let mut at = path.to_path_buf();
    for followed in 0..40 {
        let here = resolved(&at);
        if here.starts_with("/proc") {
            return given(true);
        }
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {}
            _ if followed == 0 => return given(false),
            _ => return Reach { target: std::fs::canonicalize(&at).unwrap_or(here), through_proc: false },
        }
        let Ok(next) = std::fs::read_link(&at) else { return given(false) };
        at = match at.parent() {
            Some(dir) if next.is_relative() => dir.join(next),
            _ => next,
        };
    }
    given(false)
}

/// Makes directory `dir` and its parents, as `std::fs::create_dir_all` does, saying so when `dir` is a file (where
/// `create_dir_all` says only "File exists").
pub fn make_dir(dir: &Path) -> std::io::Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(std::io::Error::new(std::io::ErrorKind::NotADirectory, "it is a file, not a directory"));
    }
    std::fs::create_dir_all(dir)
}

/// Writes every `(path, bytes)` of `files`: those that can be renamed into place all or none, then those written in
/// place (see the module's doc). An error before the renames leaves every file as it was; an error after them names
/// the file that failed, every other file of the set written.
pub fn write_all<'a>(files: impl IntoIterator<Item = (&'a Path, &'a [u8])>) -> Result<(), WriteError> {
    let mut staged = Vec::new();
    let mut in_place = Vec::new();
    for (path, bytes) in files {
        let error = |source| WriteError { path: path.to_path_buf(), source };
        // A link is followed, so that its target is written and the link stays.
        let Reach { target, through_proc } = reach(path);
        let existing = match std::fs::metadata(&target) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(error(e)),
        };
        // A rename would not write through a device or a stream, nor through a file this process holds open
        // (`/dev/stdout` leads to the file the shell redirected it to, which a rename would unlink from under the
        // shell): these are written in place. The latter are appended to: `/dev/stdout` opened anew has an offset of
        // its own, and truncating or writing from the start would overwrite what the stream (a redirected log)
        // already holds. A regular file under `/dev` (`/dev/shm`) is a file like any other.
        let append = through_proc;
        if existing.as_ref().is_some_and(std::fs::Metadata::is_dir) {
            return Err(error(std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a directory")));
        }
        let open_in_place = || InPlace::open(path, bytes, append, existing.as_ref()).map_err(error);
        if append || existing.as_ref().is_some_and(|m| !m.is_file()) {
            in_place.push(open_in_place()?);
            continue;
        }
        let dir = match target.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let name = target.file_name().map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
        let prefix = format!(".{name}.");
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix).suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            // What `std::fs::write` gives a new file (less the umask); an existing file's mode is copied below.
            builder.permissions(std::fs::Permissions::from_mode(0o666));
        }
        let mut file = match builder.tempfile_in(dir) {
            Ok(file) => file,
            // A directory this process may not create files in, holding a file it may write (a shared directory):
            // written in place, as the check before the work found it could be.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && existing.is_some() => {
                in_place.push(open_in_place()?);
                continue;
            }
            Err(e) => return Err(error(e)),
        };
        if let Some(existing) = &existing {
            let new = file.as_file().metadata().map_err(error)?;
            if !replaceable(existing, &new) {
                // Dropped, so removed.
                drop(file);
                in_place.push(open_in_place()?);
                continue;
            }
        }
        file.write_all(bytes).and_then(|()| file.flush()).map_err(error)?;
        if let Some(existing) = existing {
            std::fs::set_permissions(file.path(), existing.permissions()).map_err(error)?;
        }
        staged.push(Staged { file, target, shown: path });
    }
    // Every temporary file is written and every file to write in place is open: from here on each is tried whatever
    // happened to the one before, since a file already renamed or written cannot be taken back, and the first
    // failure is returned.
    let mut first_error = None;
    for Staged { file, target, shown } in staged {
        if let Err(e) = file.persist(&target) {
            first_error.get_or_insert(WriteError { path: shown.to_path_buf(), source: e.error });
        }
    }
    // Last, what cannot be taken back if it fails half-way (a device, a file with a second link): a failure here
    // costs the files renamed above nothing.
    for file in in_place {
        if let Err(e) = file.write() {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_written() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.md"));
        std::fs::write(&b, b"old").expect("write");
        write_all([(a.as_path(), &b"one"[..]), (b.as_path(), &b"two"[..])]).expect("written");
        assert_eq!(std::fs::read(&a).expect("read"), b"one");
        assert_eq!(std::fs::read(&b).expect("read"), b"two");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
    }

    #[test]
    fn a_failure_leaves_every_file_as_it_was() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.md"));
        std::fs::write(&a, b"old a").expect("write");
        // A directory in the second file's place: the first must not be replaced either.
        std::fs::create_dir(&b).expect("mkdir");
        let e = write_all([(a.as_path(), &b"new a"[..]), (b.as_path(), &b"new b"[..])]).expect_err("refused");
        assert_eq!(e.path, b);
        assert_eq!(std::fs::read(&a).expect("read"), b"old a");
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("list").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_stays_a_link_and_a_mode_is_kept() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (real, link) = (dir.path().join("real.json"), dir.path().join("link.json"));
        std::fs::write(&real, b"old").expect("write");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        std::os::unix::fs::symlink(&real, &link).expect("symlink");
        write_all([(link.as_path(), &b"new"[..])]).expect("written");
        assert!(std::fs::symlink_metadata(&link).expect("stat").file_type().is_symlink());
        assert_eq!(std::fs::read(&real).expect("read"), b"new");
        assert_eq!(std::fs::metadata(&real).expect("stat").permissions().mode() & 0o777, 0o640);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_to_a_file_not_yet_made_makes_it_and_stays_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        let link = dir.path().join("link.json");
        // Relative, through a second link: the file is made where the chain leads.
        std::os::unix::fs::symlink("hop.json", &link).expect("symlink");
        std::os::unix::fs::symlink("sub/new.json", dir.path().join("hop.json")).expect("symlink");
        write_all([(link.as_path(), &b"new"[..])]).expect("written");
        assert!(std::fs::symlink_metadata(&link).expect("stat").file_type().is_symlink());
        assert_eq!(std::fs::read(dir.path().join("sub/new.json")).expect("made"), b"new");
    }

    /// `/dev/stdout`, `/proc/self/fd/1`, a relative spelling of one and a link to one pass through `/proc`: left to the
    /// system to follow, whatever standard output is (a pipe's link text is `pipe:[N]`, no path). A device is not,
    /// and neither is a regular file under `/dev`. (Found by QA, stop 51: the first version followed the link text
    /// as a path, and a later one judged only the spelling given.)
    #[cfg(target_os = "linux")]
    #[test]
    fn what_passes_through_proc_is_left_to_the_system() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("out.json");
        std::os::unix::fs::symlink("/dev/stdout", &link).expect("symlink");
        let depth = dir.path().components().count();
        let relative = format!("{}proc/self/fd/1", "../".repeat(depth));
        for path in ["/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", "/tmp/../dev/stdout"].map(Path::new) {
            assert_eq!(reach(path), Reach { target: path.to_path_buf(), through_proc: true }, "{}", path.display());
        }
        assert!(reach(&dir.path().join(&relative)).through_proc, "{relative}");
        assert_eq!(reach(&link), Reach { target: link.clone(), through_proc: true });
        assert!(!reach(Path::new("/dev/null")).through_proc);
    }

    /// A link to a file this process holds open, through `/proc/self/fd/N`: the file is appended to, and the link
    /// stays a link. (Found by QA, stop 51: with a link to `/dev/stdout`, the link was replaced by a file.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_link_to_an_open_file_through_proc_is_appended_to_and_stays_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("log.txt");
        std::fs::write(&log, b"EARLIER\n").expect("write");
        let held = std::fs::OpenOptions::new().append(true).open(&log).expect("open");
        let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
        let link = dir.path().join("out.json");
        std::os::unix::fs::symlink(format!("/proc/self/fd/{fd}"), &link).expect("symlink");
        write_all([(link.as_path(), &b"new\n"[..])]).expect("written");
        assert!(std::fs::symlink_metadata(&link).expect("stat").file_type().is_symlink(), "the link stays");
        assert_eq!(std::fs::read(&log).expect("read"), b"EARLIER\nnew\n");
    }

    /// A regular file under `/dev` (`/dev/shm`) is written as any file is: made when it is not there, replaced whole
    /// when it is. (Found by QA, stop 51: a new one passed the check and then failed, an old one was appended to.)
    #[cfg(target_os = "linux")]
    #[test]
    fn a_regular_file_under_dev_is_a_file_like_any_other() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm here");
            return;
        };
        let file = dir.path().join("out.json");
        write_all([(file.as_path(), &b"first"[..])]).expect("made");
        write_all([(file.as_path(), &b"second"[..])]).expect("replaced");
        assert_eq!(std::fs::read(&file).expect("read"), b"second");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_with_a_second_hard_link_is_written_in_place() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("keep.json"), dir.path().join("latest.json"));
        std::fs::write(&a, b"old").expect("write");
        std::fs::hard_link(&a, &b).expect("link");
        write_all([(b.as_path(), &b"new"[..])]).expect("written");
        assert_eq!(std::fs::read(&a).expect("read"), b"new", "both names still name one file");
    }

    /// `/dev/full`, a device every write to fails with "no space left", where this system has one.
    fn dev_full() -> Option<&'static Path> {
        let full = Path::new("/dev/full");
        if full.exists() {
            Some(full)
        } else {
            eprintln!("skipped: this system has no /dev/full");
            None
        }
    }

    fn names(dir: &Path) -> Vec<std::ffi::OsString> {
        let mut names: Vec<_> = std::fs::read_dir(dir).expect("list").map(|e| e.expect("entry").file_name()).collect();
        names.sort();
        names
    }

    /// A device that fails is written after the files renamed into place, so they are written whatever it does, and
    /// the error names the device.
    #[test]
    fn a_failing_device_costs_the_other_files_nothing() {
        let Some(full) = dev_full() else { return };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.md"));
        std::fs::write(&a, b"old a").expect("write");
        let e = write_all([(a.as_path(), &b"new a"[..]), (full, &b"x"[..]), (b.as_path(), &b"new b"[..])])
            .expect_err("a full device");
        assert_eq!(e.path, full);
        assert_eq!(e.source.kind(), std::io::ErrorKind::StorageFull, "{e}");
        assert_eq!(std::fs::read(&a).expect("read"), b"new a");
        assert_eq!(std::fs::read(&b).expect("read"), b"new b");
        assert_eq!(names(dir.path()), ["a.json", "b.md"], "no temporary file is left");
    }

    /// A link to `/dev/full` in a report's directory (`report.md -> /dev/full`): the link is named, the other files
    /// are written, and every file written in place is tried after one failed.
    #[cfg(unix)]
    #[test]
    fn a_link_to_a_failing_device_costs_the_other_files_nothing() {
        let Some(full) = dev_full() else { return };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (md, html, json) = (dir.path().join("report.md"), dir.path().join("report.html"), dir.path().join("j"));
        std::os::unix::fs::symlink(full, &md).expect("symlink");
        // A second hard link: written in place too, after the device.
        let (kept, shared) = (dir.path().join("kept"), dir.path().join("shared"));
        std::fs::write(&kept, b"old").expect("write");
        std::fs::hard_link(&kept, &shared).expect("link");
        let set = [
            (md.as_path(), &b"md"[..]),
            (shared.as_path(), &b"shared"[..]),
            (html.as_path(), &b"html"[..]),
            (json.as_path(), &b"json"[..]),
        ];
        let e = write_all(set).expect_err("a full device");
        assert_eq!(e.path, md);
        assert!(e.to_string().contains("report.md"), "{e}");
        assert_eq!(std::fs::read(&html).expect("read"), b"html");
        assert_eq!(std::fs::read(&json).expect("read"), b"json");
        assert_eq!(std::fs::read(&kept).expect("read"), b"shared", "the file after the device is written too");
        assert!(std::fs::symlink_metadata(&md).expect("stat").file_type().is_symlink(), "the link stays");
        assert_eq!(names(dir.path()), ["j", "kept", "report.html", "report.md", "shared"], "no temporary is left");
    }

    /// A failure before the renames leaves a device untouched too: nothing of the set is written.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_failure_before_the_renames_writes_no_device() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (log, blocked) = (dir.path().join("log"), dir.path().join("blocked"));
        std::fs::write(&log, b"EARLIER\n").expect("write");
        std::fs::create_dir(&blocked).expect("mkdir");
        // `/proc/self/fd/N` of the open log: a stream, appended to in place.
        let file = std::fs::OpenOptions::new().append(true).open(&log).expect("open");
        let stream = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file)));
        let e = write_all([(stream.as_path(), &b"NEW\n"[..]), (blocked.as_path(), &b"x"[..])]).expect_err("refused");
        assert_eq!(e.path, blocked);
        drop(file);
        assert_eq!(std::fs::read(&log).expect("read"), b"EARLIER\n");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_device_is_written_in_place() {
        write_all([(Path::new("/dev/null"), &b"x"[..])]).expect("written");
        assert!(!std::fs::metadata("/dev/null").expect("stat").is_file(), "still the device");
        let e = write_all([(Path::new("/dev/full"), &b"x"[..])]).expect_err("a full device");
        assert_eq!(e.path, Path::new("/dev/full"));
    }
}
