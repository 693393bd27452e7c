//! A process may hold several connections to one ledger file (an embedder's worker pools, or `flow resolve`'s
//! read-only look before it writes). POSIX drops every lock a process holds on a file when any descriptor of that
//! file is closed, so opening a ledger must not open and close the ledger's files itself: the first connection would
//! lose the shared lock that tells other processes its log index is in use, and another process could then reset the
//! index under it ("disk I/O error", or SIGBUS).

use engine::ledger::Ledger;
use engine::ledger::sqlite::{Options, SqliteLedger};
use std::path::Path;
use std::process::Command;

/// Whether another process finds the `-shm`'s "dead man's switch" byte (offset 128: SQLite's `UNIX_SHM_DMS`, taken
/// shared by every connection while it has the index mapped) held; `None` where python3 cannot say.
fn index_in_use(shm: &Path) -> Option<bool> {
    let probe = "import fcntl, os, sys\n\
                 fd = os.open(sys.argv[1], os.O_RDWR)\n\
                 try:\n    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)\n    print('free')\n\
                 except OSError:\n    print('held')\n";
    let out = Command::new("python3").arg("-c").arg(probe).arg(shm).output().ok()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "held" => Some(true),
        "free" => Some(false),
        _ => None,
    }
}

#[test]
fn opening_a_ledger_again_keeps_the_locks_of_this_process_s_open_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.sqlite");
    let first = SqliteLedger::open(&path, Options::default()).unwrap();
    first.paused_runs().unwrap();
    let shm = dir.path().join("ledger.sqlite-shm");
    let Some(held) = index_in_use(&shm) else {
        eprintln!("skipped: python3 cannot probe the lock here");
        return;
    };
    assert!(held, "the open connection holds its index");
    let second = SqliteLedger::open(&path, Options::default()).unwrap();
    assert_eq!(index_in_use(&shm), Some(true), "the first connection's lock was dropped by the second open");
    let read_only = SqliteLedger::open_read_only(&path, Options::default()).unwrap();
    drop(second);
    assert_eq!(index_in_use(&shm), Some(true));
    drop((first, read_only));
}
