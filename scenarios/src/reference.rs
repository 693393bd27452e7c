//! The yardsticks, measured on the machine at hand: `flowsim bench` runs them beside the simulation so that its
//! figures can be read against what this machine does at all.
//!
//! Issue #5 gives two figures "for scale": a bare synchronous loop doing only key derivation and a hash-map ledger does
//! about 840 k steps/s per core, and madsim itself costs about 0.35 µs per step. Figures like these were measured with
//! a prototype of the step loop: 1,000 concurrent runs × 1,000 steps, key derivation of a 114-byte canonical input, a
//! ledger find and record per step, and (under madsim) a simulated connector sleep per step. This module is a loop of
//! that shape, written against the engine's own key derivation ([`engine::key::step_key`]) and the fixed-seed hash map
//! its memory ledger uses ([`FastMap`]):
//!
//! - [`bare_loop`]: the runs take turns step by step on one thread, nothing else.
//! - [`madsim_loop`]: one madsim task per run doing the same steps, each followed by a 1 ms simulated sleep; or only
//!   the sleeps, which is what madsim itself costs per step.
//!
//! Neither checks anything, calls a fake or keeps a run's state beyond its ledger rows: they are the floor under any
//! simulation of the step loop, not a simulation.

use engine::fastmap::FastMap;
use engine::key::Key;
use serde_json::Value;

/// The prototype's shape: this many runs in flight, each of [`STEPS_PER_RUN`] steps.
pub const RUNS: u32 = 1_000;
pub const STEPS_PER_RUN: u32 = 1_000;

/// A run's inputs: an object whose canonical form is 114 bytes for a six-digit run number and step 1 (the prototype's
/// size), the step number being one of its members so every step keys different inputs.
fn inputs(run: u32) -> Value {
    serde_json::json!({
        "amount": 4_200,
        "country": "FR",
        "currency": "eur",
        "customer": format!("cus_{run:06}"),
        "email": format!("user-{run:06}@example.com"),
        "step": 1,
    })
}

/// One step: derive the key of `inputs` (with the step number set), find it in the ledger, and record an output when it
/// is not there. Returns whether it recorded.
fn step(ledger: &mut FastMap<Key, Vec<u8>>, run_id: &str, inputs: &mut Value, step: u32) -> bool {
    inputs["step"] = Value::from(step);
    let key = engine::key::step_key(run_id, "step", inputs).expect("the reference inputs are canonicalisable");
    if ledger.contains_key(&key) {
        return false;
    }
    ledger.insert(key, format!("{{\"id\":\"obj_{step}\"}}").into_bytes());
    true
}

fn run_id(run: u32) -> String {
    format!("run-{run:06}")
}

/// The bare loop: `runs` runs of `steps_per_run` steps, taking turns step by step. Returns the steps recorded (all of
/// them: every step keys different inputs).
pub fn bare_loop(runs: u32, steps_per_run: u32) -> u64 {
    let mut ledger = FastMap::default();
    let ids: Vec<String> = (0..runs).map(run_id).collect();
    let mut all_inputs: Vec<Value> = (0..runs).map(inputs).collect();
    let mut recorded = 0;
    for s in 0..steps_per_run {
        for (id, inputs) in ids.iter().zip(&mut all_inputs) {
            recorded += u64::from(step(&mut ledger, id, inputs, s));
        }
    }
    std::hint::black_box(&ledger);
    recorded
}

/// The same steps under madsim: one task per run, a 1 ms simulated sleep after each step (the connector call), the
/// ledger shared behind a lock. With `work` false the tasks only sleep, which is madsim's own cost per step. Returns
/// the steps done (recorded, or slept through without work) and the simulated time they took, in milliseconds.
#[cfg(madsim)]
pub fn madsim_loop(runs: u32, steps_per_run: u32, work: bool) -> (u64, u64) {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let runtime = madsim::runtime::Runtime::with_seed_and_config(1, madsim::Config::default());
    runtime.block_on(async move {
        let ledger = Arc::new(Mutex::new(FastMap::default()));
        // The runtime's own clock (simulated time since the runtime started).
        let time = madsim::time::TimeHandle::current();
        let start = time.elapsed();
        let tasks: Vec<_> = (0..runs)
            .map(|run| {
                let ledger = ledger.clone();
                madsim::task::spawn(async move {
                    let id = run_id(run);
                    let mut inputs = inputs(run);
                    let mut recorded = 0;
                    for s in 0..steps_per_run {
                        recorded += if work {
                            u64::from(step(&mut ledger.lock().expect("never poisoned"), &id, &mut inputs, s))
                        } else {
                            1
                        };
                        madsim::time::sleep(Duration::from_millis(1)).await;
                    }
                    recorded
                })
            })
            .collect();
        let mut recorded = 0;
        for task in tasks {
            recorded += task.await.expect("a reference task does not panic");
        }
        (recorded, (time.elapsed() - start).as_millis() as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inputs_are_the_prototypes_size() {
        let mut first = inputs(123_456);
        first["step"] = Value::from(1);
        assert_eq!(engine::canonical::to_vec(&first).unwrap().len(), 114);
    }

    #[test]
    fn every_step_of_every_run_is_recorded_once() {
        assert_eq!(bare_loop(7, 5), 35);
        // A step done again finds its key and records nothing.
        let mut ledger = FastMap::default();
        let mut inputs = inputs(1);
        assert!(step(&mut ledger, "run-1", &mut inputs, 3));
        assert!(!step(&mut ledger, "run-1", &mut inputs, 3));
        assert!(step(&mut ledger, "run-2", &mut inputs, 3));
        assert_eq!(ledger.len(), 2);
    }

    #[cfg(madsim)]
    #[test]
    fn the_madsim_loop_records_every_step_and_sleeps_once_per_step() {
        for work in [true, false] {
            let (done, simulated_ms) = madsim_loop(7, 5, work);
            assert_eq!(done, 35);
            // The runs sleep side by side: five 1 ms sleeps each, plus madsim's small per-poll advances.
            assert!((5..10).contains(&simulated_ms), "{simulated_ms} ms");
        }
    }
}
