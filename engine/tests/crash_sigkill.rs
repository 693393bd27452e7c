//! A crash test with a real process: a child writes to an on-disk SQLite ledger and is killed with SIGKILL at a
//! random (seeded) moment, many times; after each kill the ledger is reopened and every record the child reported
//! as committed must be there and intact.
//!
//! The child is this very test binary, re-executed (`std::env::current_exe()`) with [`CHILD_ENV`] set: the one test
//! below sees it and acts as the writer. The child reports a record (one line on stdout, which goes to a file, so
//! no pipe can fill and stall it) only after the ledger call returned `Ok`:
//! - durable claims (`Claim::durable`), committed at once;
//! - completions of durable claims, committed at once;
//! - keyed (non-durable) claims and completions that wait in a group-commit batch, reported only after `flush()`.
//!
//! A record may be further along than reported (killed between the commit and the line), never behind.
//! Seed: [`SEED_ENV`] overrides the default seed; the seed is printed first.
#![cfg(not(madsim))] // A real process and a real file; the simulation build has nothing to add here.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use engine::key::Key;
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Claim, Claimed, Completion, Ledger, Status};

const CHILD_ENV: &str = "FLOW_CRASH_WRITER_DB";
const ITERATION_ENV: &str = "FLOW_CRASH_WRITER_ITERATION";
const SEED_ENV: &str = "FLOW_CRASH_SEED";
const SEED_DEFAULT: u64 = 0x5EED_C0DE;
const ITERATION_COUNT: u64 = 40;
/// The kill comes this long after the spawn, drawn uniformly from the seed. The child needs a few milliseconds to
/// start, so early kills also hit it while it opens (or migrates) the ledger.
const KILL_DELAY_MS_MIN: u64 = 2;
const KILL_DELAY_MS_MAX: u64 = 120;
/// The child writes at most this many records per life, so a kill that never came would still end the test.
const CHILD_RECORD_COUNT_MAX: u64 = 1_000_000;
const GROUP_COMMIT_OPS_MAX: usize = 64;

/// splitmix64: a tiny seeded generator, so the test draws nothing from the environment.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn key_of(iteration: u64, index: u64) -> Key {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&iteration.to_le_bytes());
    buf[8..].copy_from_slice(&index.to_le_bytes());
    Key(*blake3::hash(&buf).as_bytes())
}

fn run_id_of(iteration: u64, index: u64) -> String {
    format!("run-{iteration}-{}", index / 10)
}

fn output_of(iteration: u64, index: u64) -> Vec<u8> {
    format!("{{\"id\":\"ch_{iteration}_{index}\"}}").into_bytes()
}

fn options() -> Options {
    Options { group_commit_ops_max: GROUP_COMMIT_OPS_MAX, ..Options::default() }
}

/// Every third record is keyed (non-durable, flushed before it is reported), the rest durable.
fn is_durable(index: u64) -> bool {
    !index.is_multiple_of(3)
}

/// The writer child: claims and completes records until it is killed, reporting each after it is committed.
fn writer(db: &Path, iteration: u64) {
    let ledger = SqliteLedger::open(db, options()).expect("the child opens the ledger");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The harness may have left "test NAME ... " without a newline on stdout: start the reports on a fresh line.
    writeln!(out).expect("report");
    for index in 0..CHILD_RECORD_COUNT_MAX {
        let key = key_of(iteration, index);
        let run_id = run_id_of(iteration, index);
        let durable = is_durable(index);
        let claim = Claim {
            key,
            run_id: &run_id,
            step_id: "charge",
            action: "stripe.create_charge",
            inputs_hash: key.0,
            worker: "child",
            now_ms: index,
            lease_ms: 30_000,
            expected_fence: 0,
            expected_status: None,
            durable,
            walk: None,
        };
        assert_eq!(ledger.claim(&claim).expect("claim"), Claimed::Granted { fence: 1, attempt: 1 });
        if !durable {
            ledger.flush().expect("flush");
        }
        writeln!(out, "claimed {index}").and_then(|()| out.flush()).expect("report");
        let output = output_of(iteration, index);
        ledger.complete(&key, 1, Completion::Succeeded { output }, index + 1).expect("complete");
        if !durable {
            ledger.flush().expect("flush");
        }
        writeln!(out, "completed {index}").and_then(|()| out.flush()).expect("report");
    }
}

/// What the child reported in one life: indexes claimed and indexes completed.
#[derive(Debug, Default)]
struct Reported {
    claimed: Vec<u64>,
    completed: Vec<u64>,
}

fn parse_report(text: &str) -> Reported {
    let mut reported = Reported::default();
    // Only whole lines count: the last one may have been cut by the kill.
    let whole = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    for line in whole.lines() {
        if let Some(index) = line.strip_prefix("claimed ") {
            reported.claimed.push(index.parse().expect("a claimed index"));
        } else if let Some(index) = line.strip_prefix("completed ") {
            reported.completed.push(index.parse().expect("a completed index"));
        }
        // Other lines are the test harness's own.
    }
    reported
}

/// Checks every reported record of one life against the reopened ledger.
fn verify(ledger: &SqliteLedger, iteration: u64, reported: &Reported) {
    for &index in &reported.claimed {
        let key = key_of(iteration, index);
        let record = ledger
            .get(&key)
            .expect("read")
            .unwrap_or_else(|| panic!("iteration {iteration}: claimed record {index} was lost"));
        assert_eq!(
            (
                record.run_id.as_str(),
                record.step_id.as_str(),
                record.owner.as_str(),
                record.fence,
                record.attempt_count
            ),
            (run_id_of(iteration, index).as_str(), "charge", "child", 1, 1),
            "iteration {iteration}: record {index} damaged"
        );
        assert_eq!(record.inputs_hash, key.0);
        assert!(matches!(record.status, Status::Started | Status::Succeeded), "record {index}: {:?}", record.status);
    }
    for &index in &reported.completed {
        let record = ledger.get(&key_of(iteration, index)).expect("read").expect("completed record present");
        assert_eq!(
            (record.status, record.output),
            (Status::Succeeded, Some(output_of(iteration, index))),
            "iteration {iteration}: completed record {index} lost its outcome"
        );
    }
}

#[test]
fn sigkill_loses_no_reported_record() {
    if let Ok(db) = std::env::var(CHILD_ENV) {
        let iteration = std::env::var(ITERATION_ENV).expect("iteration").parse().expect("iteration number");
        writer(Path::new(&db), iteration);
        return;
    }
    let seed = std::env::var(SEED_ENV).map(|s| s.parse().expect("a numeric seed")).unwrap_or(SEED_DEFAULT);
    println!("crash_sigkill: seed {seed} (reproduce with {SEED_ENV}={seed})");
    let mut rng = SplitMix64(seed);
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("ledger.sqlite");
    let exe = std::env::current_exe().expect("the test binary");
    let mut all: Vec<(u64, Reported)> = Vec::new();
    for iteration in 0..ITERATION_COUNT {
        let delay_ms = KILL_DELAY_MS_MIN + rng.next() % (KILL_DELAY_MS_MAX - KILL_DELAY_MS_MIN + 1);
        let report_path = dir.path().join(format!("report-{iteration}.txt"));
        let report = std::fs::File::create(&report_path).expect("report file");
        let mut child = Command::new(&exe)
            .args(["sigkill_loses_no_reported_record", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &db)
            .env(ITERATION_ENV, iteration.to_string())
            .stdout(Stdio::from(report))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the writer");
        std::thread::sleep(Duration::from_millis(delay_ms));
        child.kill().expect("SIGKILL the writer");
        let status = child.wait().expect("reap the writer");
        assert!(
            !status.success(),
            "iteration {iteration}: the writer ended by itself ({status}) instead of being killed"
        );
        let reported = parse_report(&std::fs::read_to_string(&report_path).expect("read the report"));
        let ledger = SqliteLedger::open(&db, options())
            .unwrap_or_else(|e| panic!("iteration {iteration} (seed {seed}): reopening after SIGKILL failed: {e}"));
        verify(&ledger, iteration, &reported);
        println!(
            "iteration {iteration}: killed after {delay_ms} ms, {} claims and {} completions reported, all present",
            reported.claimed.len(),
            reported.completed.len()
        );
        all.push((iteration, reported));
    }
    // Nothing committed earlier was lost by a later crash (or recovery) either.
    let ledger = SqliteLedger::open(&db, options()).expect("final reopen");
    for (iteration, reported) in &all {
        verify(&ledger, *iteration, reported);
    }
    let lives_with_records = all.iter().filter(|(_, r)| !r.completed.is_empty()).count();
    let completed: usize = all.iter().map(|(_, r)| r.completed.len()).sum();
    println!("crash_sigkill: {completed} completions over {lives_with_records} lives with records, all present");
    // The test only means something if the kills landed while the child was writing.
    assert!(
        lives_with_records as u64 >= ITERATION_COUNT / 2,
        "only {lives_with_records} of {ITERATION_COUNT} lives got to write before the kill"
    );
}
