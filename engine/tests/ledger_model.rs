//! Model-based check that the two ledgers agree: random sequences of operations on a few keys and runs are applied
//! to the in-memory ledger and to SQLite (`:memory:`, once group-committed and once with every write its own
//! transaction, so one-statement writes run in autocommit), and every result (value or error) and the state of every
//! key after every operation must be identical. The contract suite says what is right; this finds the sequences
//! nobody wrote down where the two would differ.

use engine::key::Key;
use engine::ledger::memory::MemoryLedger;
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Claim, Completion, Ledger, RunRecord, RunStatus, Status};
use proptest::prelude::*;

const KEY_COUNT: u8 = 4;
const RUN_COUNT: u8 = 2;

#[derive(Debug, Clone)]
enum Op {
    /// Claim with the fence as read (`fresh`) or a guessed one, expecting a status (an index into `STATUSES`) or not.
    Claim {
        key: u8,
        worker: u8,
        now_ms: u64,
        durable: bool,
        fence: Option<u64>,
        status: Option<u8>,
    },
    Complete {
        key: u8,
        fence: u64,
        kind: u8,
        now_ms: u64,
    },
    Renew {
        key: u8,
        fence: u64,
        lease_expiry_ms: u64,
    },
    Plan {
        key: u8,
        plan: u8,
    },
    CreateRun {
        run: u8,
        status: u8,
    },
    SetRunStatus {
        run: u8,
        status: u8,
    },
    Forget {
        run: u8,
    },
    /// Begins a replay with the trigger `{"t":trigger}` at `now_ms`.
    Replay {
        run: u8,
        trigger: u8,
        now_ms: u64,
    },
    Flush,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            0..KEY_COUNT,
            0..2u8,
            0..400u64,
            any::<bool>(),
            proptest::option::of(0..4u64),
            proptest::option::of(0..4u8)
        )
            .prop_map(|(key, worker, now_ms, durable, fence, status)| Op::Claim {
                key,
                worker,
                now_ms,
                durable,
                fence,
                status
            }),
        4 => (0..KEY_COUNT, 0..4u64, 0..4u8, 0..400u64)
            .prop_map(|(key, fence, kind, now_ms)| Op::Complete { key, fence, kind, now_ms }),
        1 => (0..KEY_COUNT, 0..4u64, 0..400u64)
            .prop_map(|(key, fence, lease_expiry_ms)| Op::Renew { key, fence, lease_expiry_ms }),
        1 => (0..KEY_COUNT, 0..3u8).prop_map(|(key, plan)| Op::Plan { key, plan }),
        1 => (0..RUN_COUNT, 0..5u8).prop_map(|(run, status)| Op::CreateRun { run, status }),
        1 => (0..RUN_COUNT, 0..5u8).prop_map(|(run, status)| Op::SetRunStatus { run, status }),
        1 => (0..RUN_COUNT).prop_map(|run| Op::Forget { run }),
        1 => (0..RUN_COUNT, 0..3u8, 0..400u64).prop_map(|(run, trigger, now_ms)| Op::Replay { run, trigger, now_ms }),
        1 => Just(Op::Flush),
    ]
}

const STATUSES: [Status; 4] = [Status::Started, Status::Succeeded, Status::Failed, Status::Unknown];

fn key(n: u8) -> Key {
    Key([n; 32])
}

/// Keys 0 and 1 belong to run 0, the others to run 1.
fn run_of_key(n: u8) -> String {
    format!("run-{}", n / 2)
}

fn run_status(n: u8) -> RunStatus {
    [RunStatus::Pending, RunStatus::Running, RunStatus::Succeeded, RunStatus::Failed, RunStatus::Paused][n as usize % 5]
}

/// Applies `op` and renders its result, so the two ledgers' answers can be compared as text.
fn apply(l: &dyn Ledger, op: &Op) -> String {
    match *op {
        Op::Claim { key: k, worker, now_ms, durable, fence, status } => {
            let expected_fence = match fence {
                Some(f) => f,
                None => l.get(&key(k)).unwrap().map_or(0, |r| r.fence),
            };
            let run_id = run_of_key(k);
            let worker = format!("w{worker}");
            let claim = Claim {
                key: key(k),
                run_id: &run_id,
                step_id: "s",
                action: "c.a",
                inputs_hash: [k; 32],
                worker: &worker,
                now_ms,
                lease_ms: 100,
                expected_fence,
                expected_status: status.map(|n| STATUSES[n as usize]),
                durable,
                walk: None,
            };
            format!("{:?}", l.claim(&claim))
        }
        Op::Complete { key: k, fence, kind, now_ms } => {
            let completion = match kind {
                0 => Completion::Succeeded { output: b"out-a".to_vec() },
                1 => Completion::Succeeded { output: b"out-b".to_vec() },
                2 => Completion::Failed { error: "declined".into() },
                _ => Completion::Unknown { reason: "timeout".into() },
            };
            format!("{:?}", l.complete(&key(k), fence, completion, now_ms))
        }
        Op::Renew { key: k, fence, lease_expiry_ms } => format!("{:?}", l.renew(&key(k), fence, lease_expiry_ms)),
        Op::Plan { key: k, plan } => format!("{:?}", l.record_plan(&run_of_key(k), &key(k), &[plan], 1)),
        Op::CreateRun { run, status } => {
            let record = RunRecord {
                run_id: format!("run-{run}").into(),
                workflow: "wf".into(),
                status: run_status(status),
                trigger: b"{}".to_vec(),
                reason: None,
                created_ms: 1,
                updated_ms: 1,
                replays: 0,
            };
            format!("{:?}", l.create_run(record.clone()))
        }
        Op::SetRunStatus { run, status } => {
            format!("{:?}", l.set_run_status(&format!("run-{run}"), run_status(status), Some("why"), 2))
        }
        Op::Forget { run } => format!("{:?}", l.forget_run(&format!("run-{run}"))),
        Op::Replay { run, trigger, now_ms } => {
            let trigger = format!("{{\"t\":{trigger}}}");
            format!("{:?}", l.begin_replay(&format!("run-{run}"), trigger.as_bytes(), now_ms))
        }
        Op::Flush => format!("{:?}", l.flush()),
    }
}

/// Everything observable, rendered.
fn state(l: &dyn Ledger) -> String {
    let mut out = String::new();
    for k in 0..KEY_COUNT {
        out += &format!("{:?} {:?}\n", l.get(&key(k)).unwrap(), l.get_plan(&key(k)).unwrap());
    }
    for run in 0..RUN_COUNT {
        let run_id = format!("run-{run}");
        out += &format!("{:?} {:?}\n", l.get_run(&run_id).unwrap(), l.replay_history(&run_id).unwrap());
    }
    out += &format!("{:?} {:?}\n", l.unfinished_runs().unwrap(), l.paused_runs().unwrap());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn memory_and_sqlite_agree(ops in proptest::collection::vec(op(), 1..60)) {
        let memory = MemoryLedger::new();
        let grouped = SqliteLedger::open_in_memory(Options { group_commit_ops_max: 8, ..Options::default() }).unwrap();
        let single = SqliteLedger::open_in_memory(Options::default()).unwrap();
        // With the read cache: one that holds every row, and one of three records that keeps filling and emptying.
        let cached =
            SqliteLedger::open_in_memory(Options { group_commit_ops_max: 8, cache_entries: 1 << 16, ..Options::default() })
                .unwrap();
        let tiny = SqliteLedger::open_in_memory(Options { cache_entries: 3, ..Options::default() }).unwrap();
        let sqlite: [(&str, &dyn Ledger); 4] =
            [("grouped", &grouped), ("one-write", &single), ("cached", &cached), ("tiny-cache", &tiny)];
        for (i, op) in ops.iter().enumerate() {
            let m = apply(&memory, op);
            for (name, ledger) in sqlite {
                prop_assert_eq!(&m, &apply(ledger, op), "{} SQLite, op {} {:?}", name, i, op);
            }
            let expected = state(&memory);
            for (name, ledger) in sqlite {
                prop_assert_eq!(&expected, &state(ledger), "{} SQLite, state after op {} {:?}", name, i, op);
            }
        }
    }
}
