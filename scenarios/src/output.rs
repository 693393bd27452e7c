//! Output files are checked before the work that fills them: a simulation of an hour, or a release gate, must not
//! end in "cannot write" with its results gone.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::path::Path;

/// Checks that `path` can be written as a file, and says why not: it is a directory, its directory does not exist,
/// or the system refuses to open it for writing. An existing file is opened for writing without being truncated, so
/// its contents stay as they are until the real write; a path that does not exist yet is created to prove it can be,
/// and removed again.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() {
        return Err("an output file's name is empty".into());
    }
    if path.is_dir() {
        return Err(format!("cannot write {shown}: it is a directory"));
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

/// [`check_writable`] for each of the paths given.
pub fn check_all<'a>(paths: impl IntoIterator<Item = &'a Option<std::path::PathBuf>>) -> Result<(), String> {
    paths.into_iter().flatten().try_for_each(|p| check_writable(p))
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
    fn an_empty_name_is_refused() {
        assert!(check_writable(Path::new("")).is_err());
        assert!(check_all([&None, &Some(std::path::PathBuf::new())]).is_err());
        assert!(check_all([&None, &None]).is_ok());
    }
}
