//! Output files written so that a failure loses nothing: every file of a set is first written whole into a temporary
//! file beside it, and only once all of them are written are they renamed into place. A full disk, a directory in a
//! file's place or a refused permission then leaves every earlier file as it was (a report's `report.md` new and its
//! `report.json` old, say, is never the outcome), and a reader never sees a half-written file.
//!
//! The temporary files and their renames are `tempfile`'s (`NamedTempFile::persist`), which removes a temporary file
//! that is not persisted. The target of a symbolic link is written, not the link (the link stays a link). A file a
//! rename would not replace faithfully is written in place instead, after every other file of the set is written and
//! before any is renamed: a device or stream (`/dev/null`, `/dev/full`, `/dev/stdout`, `/proc/self/fd/1`), a file with
//! a second hard link or another owner or group, and a file in a directory this process may not create files in.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// A file of the set could not be written; nothing of the set was renamed into place before it.
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

enum Staged<'a> {
    /// Written, waiting to be renamed to `target`.
    Renamed { file: tempfile::NamedTempFile, target: PathBuf, shown: &'a Path },
    /// Written in place once every staged file is written: appended to a device or stream, else truncated.
    InPlace { path: &'a Path, bytes: &'a [u8], append: bool },
}

/// Writes every `(path, bytes)` of `files`, or (on an error before the renames) none of them.
pub fn write_all<'a>(files: impl IntoIterator<Item = (&'a Path, &'a [u8])>) -> Result<(), WriteError> {
    let mut staged = Vec::new();
    for (path, bytes) in files {
        let error = |source| WriteError { path: path.to_path_buf(), source };
        // A link is followed, so that its target is written and the link stays.
        let target = match std::fs::symlink_metadata(path) {
            Ok(m) if m.file_type().is_symlink() => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            _ => path.to_path_buf(),
        };
        let existing = match std::fs::metadata(&target) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(error(e)),
        };
        // A rename would not write through a device or a stream (`/dev/stdout` leads to the file the shell
        // redirected it to, which a rename would unlink from under the shell): these are written in place.
        // Appended: `/dev/stdout` opened anew has an offset of its own, and truncating or writing from the start
        // would overwrite what the stream (a redirected log) already holds.
        let append = path.starts_with("/dev") || path.starts_with("/proc");
        if append || existing.as_ref().is_some_and(|m| !m.is_file()) {
            staged.push(Staged::InPlace { path, bytes, append });
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
                staged.push(Staged::InPlace { path, bytes, append });
                continue;
            }
            Err(e) => return Err(error(e)),
        };
        if let Some(existing) = &existing {
            let new = file.as_file().metadata().map_err(error)?;
            if !replaceable(existing, &new) {
                // Dropped, so removed.
                drop(file);
                staged.push(Staged::InPlace { path, bytes, append });
                continue;
            }
        }
        file.write_all(bytes).and_then(|()| file.flush()).map_err(error)?;
        if let Some(existing) = existing {
            std::fs::set_permissions(file.path(), existing.permissions()).map_err(error)?;
        }
        staged.push(Staged::Renamed { file, target, shown: path });
    }
    for s in &staged {
        if let Staged::InPlace { path, bytes, append } = *s {
            let write = if append {
                std::fs::OpenOptions::new().append(true).open(path).and_then(|mut f| f.write_all(bytes))
            } else {
                std::fs::write(path, bytes)
            };
            write.map_err(|source| WriteError { path: path.to_path_buf(), source })?;
        }
    }
    for s in staged {
        if let Staged::Renamed { file, target, shown } = s {
            file.persist(&target).map_err(|e| WriteError { path: shown.to_path_buf(), source: e.error })?;
        }
    }
    Ok(())
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
    fn a_file_with_a_second_hard_link_is_written_in_place() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (a, b) = (dir.path().join("keep.json"), dir.path().join("latest.json"));
        std::fs::write(&a, b"old").expect("write");
        std::fs::hard_link(&a, &b).expect("link");
        write_all([(b.as_path(), &b"new"[..])]).expect("written");
        assert_eq!(std::fs::read(&a).expect("read"), b"new", "both names still name one file");
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
