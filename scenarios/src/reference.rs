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
//!
//! [`CpuRates`] keeps `bench`'s steps per CPU-second, of the simulations and of these loops alike: CPU time comes from
//! `/proc/self/stat` in ticks of [`CPU_TICK_S`], so a run shorter than [`CPU_TICKS_MIN`] ticks has no figure, and says so.

use engine::fastmap::FastMap;
use engine::key::Key;
use serde_json::Value;

/// The resolution of the process's CPU time as `/proc/self/stat` counts it (`crate::run::process_cpu_seconds`): ticks
/// of 1/100 s (`USER_HZ`, 100 on Linux). A run that used less than one tick may read as 0.
pub const CPU_TICK_S: f64 = 0.01;

/// CPU time a run should take for its steps per CPU-second to be worth reading: a tick is then 1 % of it.
pub const CPU_SECONDS_ENOUGH: f64 = 1.0;

/// The fewest ticks a run's CPU time must read for it to have a rate: with fewer, one tick more or less (the
/// counter's resolution) moves the figure by more than 10 %, so a run of one tick would read twice as fast as one of
/// two.
pub const CPU_TICKS_MIN: u32 = 10;

/// Steps per CPU-second of repeated runs, each timed by the process's CPU time before and after it. A run whose time
/// read as no tick, or could not be read, has no rate: it is counted, and [`CpuRates::not_measured`] says why the
/// figure is missing rather than leaving it out.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuRates {
    /// The rates of the runs that were measured.
    pub rates: Vec<f64>,
    /// Runs whose CPU time read as fewer than [`CPU_TICKS_MIN`] ticks.
    pub too_short: u32,
    /// Runs whose CPU time could not be read (no `/proc/self/stat`).
    pub unreadable: u32,
}

impl CpuRates {
    /// Records a run of `steps` between the CPU times `before` and `after` (in seconds, `None` when unreadable).
    pub fn record(&mut self, steps: u64, before: Option<f64>, after: Option<f64>) {
        match (before, after) {
            // The times are whole ticks, read as seconds: rounded, their difference is a whole number of ticks.
            (Some(before), Some(after)) if ((after - before) / CPU_TICK_S).round() >= f64::from(CPU_TICKS_MIN) => {
                self.rates.push(steps as f64 / (after - before))
            }
            (Some(_), Some(_)) => self.too_short += 1,
            _ => self.unreadable += 1,
        }
    }

    /// The runs recorded.
    pub fn runs(&self) -> u32 {
        self.rates.len() as u32 + self.too_short + self.unreadable
    }

    /// Why there is no figure, when some run was not measured (the median of the others would favour the slower
    /// runs); `None` when every run was.
    pub fn not_measured(&self) -> Option<String> {
        let runs = self.runs();
        // "the run was", "both runs were", "all 3 runs were", "1 of 3 runs was".
        let which = |n: u32| match (n, runs) {
            (_, 1) => "the run was".to_owned(),
            (2, 2) => "both runs were".to_owned(),
            (n, runs) if n == runs => format!("all {runs} runs were"),
            (1, runs) => format!("1 of {runs} runs was"),
            (n, runs) => format!("{n} of {runs} runs were"),
        };
        if self.unreadable > 0 {
            return Some(if self.unreadable == runs {
                "the process's CPU time cannot be read (/proc/self/stat)".to_owned()
            } else {
                format!("the CPU time of {} of {runs} runs could not be read (/proc/self/stat)", self.unreadable)
            });
        }
        (self.too_short > 0).then(|| {
            format!(
                "{} too short to measure CPU time (under {CPU_TICKS_MIN} ticks of {:.0} ms)",
                which(self.too_short),
                CPU_TICK_S * 1000.0
            )
        })
    }
}

/// A run of a few steps is mostly the simulation's setup, so its wall-clock speed says little about a longer run's:
/// [`steps_to_measure`] never asks for fewer steps than this.
pub const STEPS_TO_MEASURE_MIN: u64 = 10_000;

/// Steps that make a run long enough to measure its CPU time, for a run of `steps` that went at `steps_per_second`
/// (wall clock: an estimate, as a run too short for its CPU time has no other): about [`CPU_SECONDS_ENOUGH`] at that
/// speed, and at least ten times `steps` and [`STEPS_TO_MEASURE_MIN`], rounded up to two significant digits.
pub fn steps_to_measure(steps: u64, steps_per_second: f64) -> u64 {
    let by_speed = if steps_per_second.is_finite() { (steps_per_second * CPU_SECONDS_ENOUGH).ceil() as u64 } else { 0 };
    let enough = by_speed.max(steps.saturating_mul(10)).max(STEPS_TO_MEASURE_MIN);
    let unit = 10u64.pow(enough.ilog10().saturating_sub(1));
    enough.div_ceil(unit).saturating_mul(unit)
}

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

    /// A run under ten ticks of CPU time has no rate (one tick would be a tenth of it or more), and the figure of the
    /// runs says why it is missing (a QA report: `bench --steps 1` left out its steps-per-CPU-second lines without a
    /// word); a figure of some measured runs and some not is missing too.
    #[test]
    fn a_run_under_ten_ticks_is_said_to_be_too_short() {
        let mut rates = CpuRates::default();
        rates.record(500, Some(1.23), Some(1.23));
        assert_eq!(rates, CpuRates { rates: vec![], too_short: 1, unreadable: 0 });
        let said = rates.not_measured();
        assert_eq!(said.as_deref(), Some("the run was too short to measure CPU time (under 10 ticks of 10 ms)"));
        rates.record(500, Some(1.23), Some(1.23));
        let said = rates.not_measured();
        assert_eq!(said.as_deref(), Some("both runs were too short to measure CPU time (under 10 ticks of 10 ms)"));
        rates.record(1_000, Some(1.0), Some(1.5));
        assert_eq!(rates.rates, [2_000.0]);
        let said = rates.not_measured();
        assert_eq!(said.as_deref(), Some("2 of 3 runs were too short to measure CPU time (under 10 ticks of 10 ms)"));
        let all = CpuRates { rates: Vec::new(), too_short: 3, unreadable: 0 };
        let said = all.not_measured();
        assert_eq!(said.as_deref(), Some("all 3 runs were too short to measure CPU time (under 10 ticks of 10 ms)"));
        let mut measured = CpuRates::default();
        measured.record(1_000, Some(0.5), Some(0.6));
        measured.record(1_000, Some(0.5), Some(0.7));
        assert_eq!(measured.not_measured(), None);
        // One to nine ticks: a rate whose last digit of time is a tenth of it or more is not one.
        let mut coarse = CpuRates::default();
        coarse.record(1_000, Some(0.5), Some(0.51));
        coarse.record(1_000, Some(0.5), Some(0.59));
        assert_eq!(coarse, CpuRates { rates: vec![], too_short: 2, unreadable: 0 });
        measured.record(1_000, Some(0.5), Some(0.5));
        let said = measured.not_measured();
        assert_eq!(said.as_deref(), Some("1 of 3 runs was too short to measure CPU time (under 10 ticks of 10 ms)"));
        measured.record(1_000, None, Some(0.6));
        let said = measured.not_measured();
        assert_eq!(said.as_deref(), Some("the CPU time of 1 of 4 runs could not be read (/proc/self/stat)"));
        let mut unreadable = CpuRates::default();
        unreadable.record(1_000, Some(0.5), None);
        let said = unreadable.not_measured();
        assert_eq!(said.as_deref(), Some("the process's CPU time cannot be read (/proc/self/stat)"));
    }

    #[test]
    fn steps_to_measure_last_about_a_cpu_second() {
        // About a second at the speed seen, rounded up to two significant digits.
        assert_eq!(steps_to_measure(500, 123_456.0), 130_000);
        assert_eq!(steps_to_measure(20_000, 2_000_001.0), 2_100_000);
        // At least ten times the steps that were too short, and never fewer than the floor: a run of a few steps is
        // mostly setup, so its wall-clock speed understates a longer run's.
        assert_eq!(steps_to_measure(20_000, 50_000.0), 200_000);
        assert_eq!(steps_to_measure(1, 1_406.0), STEPS_TO_MEASURE_MIN);
        assert_eq!(steps_to_measure(7, 0.0), STEPS_TO_MEASURE_MIN);
        assert_eq!(steps_to_measure(7, f64::INFINITY), STEPS_TO_MEASURE_MIN);
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
