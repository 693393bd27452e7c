//! How `write_report` writes its three files: all three or none when a file cannot be made (a directory in its place),
//! and, when a file written in place fails (`report.md` a link to `/dev/full`), the two that could be written are, and
//! the error names the one that could not.

mod common;

use common::{naive, rules};
use reports::{Error, write_report};

fn runs() -> Vec<reports::Results> {
    vec![rules(1, 500, 3), naive(2)]
}

fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_directory_in_a_file_s_place_leaves_the_earlier_report_whole() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("report");
    write_report(&runs()[..1], None, &dir).unwrap();
    let before = std::fs::read(dir.join("report.md")).unwrap();
    std::fs::remove_file(dir.join("report.json")).unwrap();
    std::fs::create_dir(dir.join("report.json")).unwrap();
    let e = write_report(&runs(), None, &dir).unwrap_err();
    assert!(matches!(&e, Error::Write { path, .. } if path.ends_with("report.json")), "{e}");
    assert_eq!(std::fs::read(dir.join("report.md")).unwrap(), before, "report.md was replaced");
    assert_eq!(names(&dir), ["report.html", "report.json", "report.md"], "no temporary file is left");
}

#[cfg(unix)]
#[test]
fn a_failing_device_costs_the_other_files_nothing() {
    let full = std::path::Path::new("/dev/full");
    if !full.exists() {
        eprintln!("skipped: this system has no /dev/full");
        return;
    }
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("report");
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(full, dir.join("report.md")).unwrap();
    let e = write_report(&runs(), None, &dir).unwrap_err();
    assert!(matches!(&e, Error::Write { path, .. } if path == &dir.join("report.md")), "{e}");
    assert!(e.to_string().contains("report.md"), "{e}");
    for name in ["report.html", "report.json"] {
        assert!(std::fs::metadata(dir.join(name)).unwrap().len() > 1000, "{name} is written");
    }
    assert!(std::fs::symlink_metadata(dir.join("report.md")).unwrap().file_type().is_symlink());
    assert_eq!(names(&dir), ["report.html", "report.json", "report.md"], "no temporary file is left");
}

/// An output directory that is a file is refused as one, and the file is left as it was. (Found by QA, stop 51: the
/// error said only "File exists", `create_dir_all`'s word for it.)
#[test]
fn an_output_directory_that_is_a_file_is_named_as_one() {
    let parent = tempfile::tempdir().unwrap();
    let file = parent.path().join("r1.json");
    std::fs::write(&file, b"{}").unwrap();
    let e = write_report(&runs(), None, &file).unwrap_err();
    assert_eq!(e.to_string(), format!("cannot write {}: it is a file, not a directory", file.display()));
    assert_eq!(std::fs::read(&file).unwrap(), b"{}");
}
