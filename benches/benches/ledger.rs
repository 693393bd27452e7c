//! Ledger speed: "find + record" of one step, i.e. `get` + `claim` + `complete` (succeeded) on a fresh key, the
//! ledger work of one step that the engine does. Throughput is in steps per second (one element = one step).
//!
//! Targets (from the ledger brief): in-memory ≥ 1 M/s; SQLite `:memory:` ≥ 150 k/s with group commit;
//! SQLite file (WAL, `synchronous=NORMAL`) ≥ 40 k/s with group commit. A durable (at-most-once) claim commits at
//! once, and a ledger file's default (`synchronous=FULL`) fsyncs every commit; that figure is shown beside the batched
//! ones for comparison.
//!
//! Wall time by default; with `FLOW_BENCH_CPU_TIME=1`, the benchmark thread's CPU time (on a shared machine the
//! wall time mostly measures the wait for a core). The file variants' CPU time leaves out time blocked on I/O.
//!
//! Keys are spread pseudo-randomly (like blake3 keys). Ten steps share a run, created before its first step (each
//! claim checks its run is still running, as the engine's do); a run is forgotten 100 runs after
//! its last step, so the ledger stays at a steady size (~1,000 records) and `forget_run` is part of the cost
//! (amortised over its run's steps), as in a long simulation.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::key::Key;
use engine::ledger::memory::MemoryLedger;
use engine::ledger::sqlite::{Options, SqliteLedger, Synchronous};
use engine::ledger::{Claim, Claimed, Completion, Ledger, RunRecord, RunStatus};

const STEPS_PER_RUN: u64 = 10;
const RUNS_KEPT: u64 = 100;
const GROUP_COMMIT_OPS_MAX: usize = 1_000;
/// The cached variants' read cache: far above the ~1,000 records the workload keeps, so it never fills.
const CACHE_ENTRIES: usize = 1 << 16;
/// Set it to measure the CPU time of the benchmark thread instead of wall time (Linux): on a machine shared with
/// other jobs the wall time mostly measures waiting for a core.
const CPU_TIME_ENV: &str = "FLOW_BENCH_CPU_TIME";

/// The CPU time this thread has run, from `/proc/thread-self/schedstat` (first field, nanoseconds).
fn thread_cpu_time_ns() -> u64 {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").expect("FLOW_BENCH_CPU_TIME needs Linux /proc");
    text.split_whitespace().next().and_then(|n| n.parse().ok()).expect("schedstat starts with the run time in ns")
}

/// Feeds fresh keys and run ids to one ledger.
struct Workload {
    step: u64,
    run_ids: Vec<String>,
    output: Completion,
}

impl Workload {
    fn new() -> Self {
        // A ring of run id strings, so the loop does not measure `format!`.
        let run_ids = (0..RUNS_KEPT + 1).map(|i| format!("run-{i:08}")).collect();
        Self { step: 0, run_ids, output: Completion::Succeeded { output: br#"{"id":"ch_1234567890"}"#.to_vec() } }
    }

    fn key(step: u64) -> Key {
        // splitmix64 over the step number, four times: spread like a hash, cheap to make.
        let mut bytes = [0u8; 32];
        let mut x = step;
        for chunk in bytes.chunks_exact_mut(8) {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        Key(bytes)
    }

    /// One step: find, claim, complete; every `STEPS_PER_RUN` steps, forget the run `RUNS_KEPT` runs back.
    fn step(&mut self, ledger: &dyn Ledger, durable: bool) {
        let step = self.step;
        self.step += 1;
        let run = step / STEPS_PER_RUN;
        let ring = self.run_ids.len() as u64;
        let key = Self::key(step);
        let run_id = &self.run_ids[(run % ring) as usize];
        if step.is_multiple_of(STEPS_PER_RUN) {
            // A run is created (running) before its first step, as the engine does: each claim checks its run.
            let run = RunRecord {
                run_id: run_id.as_str().into(),
                workflow: "signup".into(),
                status: RunStatus::Running,
                trigger: br#"{"email":"a@example.com"}"#.to_vec(),
                reason: None,
                created_ms: step,
                updated_ms: step,
                replays: 0,
            };
            assert!(ledger.create_run(run).expect("create run"));
        }
        assert!(ledger.get(&key).expect("get").is_none());
        let claim = Claim {
            key,
            run_id,
            step_id: "charge",
            action: "stripe.create_charge",
            inputs_hash: key.0,
            worker: "w1",
            now_ms: step,
            lease_ms: 30_000,
            expected_fence: 0,
            expected_status: None,
            durable,
            walk: Some(0),
        };
        let Claimed::Granted { fence, .. } = ledger.claim(&claim).expect("claim") else {
            panic!("a fresh key was not granted");
        };
        ledger.complete(&key, fence, self.output.clone(), step).expect("complete");
        if step % STEPS_PER_RUN == STEPS_PER_RUN - 1 && run >= RUNS_KEPT {
            ledger.forget_run(&self.run_ids[((run - RUNS_KEPT) % ring) as usize]).expect("forget");
        }
    }
}

fn bench_one(c: &mut Criterion, name: &str, ledger: &dyn Ledger, durable: bool) {
    let mut group = c.benchmark_group("find+record");
    group.throughput(Throughput::Elements(1));
    let mut workload = Workload::new();
    if std::env::var_os(CPU_TIME_ENV).is_some() {
        group.bench_function(name, |b| {
            b.iter_custom(|iterations| {
                let start_ns = thread_cpu_time_ns();
                for _ in 0..iterations {
                    workload.step(black_box(ledger), durable);
                }
                Duration::from_nanos(thread_cpu_time_ns() - start_ns)
            })
        });
    } else {
        group.bench_function(name, |b| b.iter(|| workload.step(black_box(ledger), durable)));
    }
    group.finish();
    ledger.flush().expect("flush");
}

fn ledgers(c: &mut Criterion) {
    bench_one(c, "memory", &MemoryLedger::new(), false);

    let batched = Options { group_commit_ops_max: GROUP_COMMIT_OPS_MAX, ..Options::default() };
    bench_one(c, "sqlite_memory_batched", &SqliteLedger::open_in_memory(batched.clone()).expect("open"), false);
    bench_one(c, "sqlite_memory_unbatched", &SqliteLedger::open_in_memory(Options::default()).expect("open"), false);
    // With the read cache, as the simulation runs it: the find is served from memory, the claim and the completion
    // are one statement each.
    let cached = Options { cache_entries: CACHE_ENTRIES, ..batched.clone() };
    bench_one(c, "sqlite_memory_batched_cached", &SqliteLedger::open_in_memory(cached).expect("open"), false);

    let dir = tempfile::tempdir().expect("temp dir");
    let file = |name: &str, options: Options| SqliteLedger::open(&dir.path().join(name), options).expect("open");
    // The brief's target is for `synchronous=NORMAL`; a file's default is FULL (measured by the durable variant).
    let normal = Options { synchronous: Synchronous::Normal, ..batched.clone() };
    bench_one(c, "sqlite_file_wal_batched", &file("batched.sqlite", normal.clone()), false);
    let exclusive = Options { exclusive: true, ..normal };
    bench_one(c, "sqlite_file_wal_batched_exclusive", &file("exclusive.sqlite", exclusive.clone()), false);
    let exclusive_cached = Options { cache_entries: CACHE_ENTRIES, ..exclusive };
    bench_one(c, "sqlite_file_wal_batched_exclusive_cached", &file("cached.sqlite", exclusive_cached), false);
    bench_one(c, "sqlite_file_wal_durable", &file("durable.sqlite", batched), true);
}

fn config() -> Criterion {
    // Short runs: the machine is shared; the medians are stable enough at this size.
    Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3))
}

criterion_group! { name = benches; config = config(); targets = ledgers }
criterion_main!(benches);
