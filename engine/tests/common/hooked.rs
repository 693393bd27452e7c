//! A memory ledger that lets a test act at an exact moment of a drive: another worker, a person or a late answer
//! landing between two of the drive's ledger calls, or a slow commit. Each hook runs once, the first time its moment
//! comes; everything else is the memory ledger's own.

use engine::key::Key;
use engine::ledger::memory::MemoryLedger;
use engine::ledger::{
    Claim, Claimed, Completion, Delivery, Intake, Ledger, Replay, ReplayEntry, ResolutionRecord, Result, RunRecord,
    RunStatus, StepRecord,
};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

/// What a hook does, on the ledger under the wrapper (so it does not run the hooks again).
pub type Hook = Box<dyn FnOnce(&MemoryLedger) + Send>;

pub struct Hooked {
    pub inner: Arc<MemoryLedger>,
    /// Before the first time a run is set running (`set_run_status` or `finish_drive`).
    pub before_set_running: Mutex<Option<Hook>>,
    /// After the first completion that succeeds a key.
    pub after_success: Mutex<Option<Hook>>,
    /// Before the first read of a run's resolutions (`pending_resolution`: between a drive's read of a key and its
    /// claim of it).
    pub before_resolutions: Mutex<Option<Hook>>,
    /// The next two reads of a run's resolutions wait for each other (two drives take one decision at once); the
    /// count is of the reads that have reached the barrier.
    pub resolutions_barrier: Mutex<Option<(Arc<Barrier>, usize)>>,
    /// The first `finish_drive(.., Paused, ..)` stalls this long first (a slow commit, a descheduled thread).
    pub stall_pause: Mutex<Option<Duration>>,
    /// Every plan recorded (first-attempt markers too), as text.
    pub plans: Mutex<Vec<String>>,
}

impl Hooked {
    pub fn new(inner: Arc<MemoryLedger>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            before_set_running: Mutex::new(None),
            after_success: Mutex::new(None),
            before_resolutions: Mutex::new(None),
            resolutions_barrier: Mutex::new(None),
            stall_pause: Mutex::new(None),
            plans: Mutex::new(Vec::new()),
        })
    }

    /// Sets `slot`'s hook.
    pub fn on(slot: &Mutex<Option<Hook>>, hook: impl FnOnce(&MemoryLedger) + Send + 'static) {
        *slot.lock().unwrap() = Some(Box::new(hook));
    }

    fn fire(&self, slot: &Mutex<Option<Hook>>) {
        let hook = slot.lock().unwrap().take();
        if let Some(hook) = hook {
            hook(&self.inner);
        }
    }

    fn meet_at_resolutions(&self) {
        let barrier = {
            let mut slot = self.resolutions_barrier.lock().unwrap();
            let taken = slot.as_mut().map(|(barrier, reached)| {
                *reached += 1;
                (barrier.clone(), *reached)
            });
            if taken.as_ref().is_some_and(|(_, reached)| *reached >= 2) {
                *slot = None;
            }
            taken
        };
        if let Some((barrier, _)) = barrier {
            barrier.wait();
        }
    }
}

impl Ledger for Hooked {
    fn get(&self, key: &Key) -> Result<Option<StepRecord>> {
        self.inner.get(key)
    }
    fn claim(&self, claim: &Claim<'_>) -> Result<Claimed> {
        self.inner.claim(claim)
    }
    fn complete(&self, key: &Key, fence: u64, completion: Completion, now_ms: u64) -> Result<()> {
        let success = matches!(completion, Completion::Succeeded { .. });
        let done = self.inner.complete(key, fence, completion, now_ms);
        if success {
            self.fire(&self.after_success);
        }
        done
    }
    fn renew(&self, key: &Key, fence: u64, lease_expiry_ms: u64) -> Result<()> {
        self.inner.renew(key, fence, lease_expiry_ms)
    }
    fn record_plan(&self, run_id: &str, key: &Key, plan: &[u8], now_ms: u64) -> Result<Vec<u8>> {
        self.plans.lock().unwrap().push(String::from_utf8_lossy(plan).into_owned());
        self.inner.record_plan(run_id, key, plan, now_ms)
    }
    fn get_plan(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.inner.get_plan(key)
    }
    fn run_plans(&self, run_id: &str) -> Result<Vec<(Key, Vec<u8>)>> {
        self.inner.run_plans(run_id)
    }
    fn create_run(&self, run: RunRecord) -> Result<bool> {
        self.inner.create_run(run)
    }
    fn get_run(&self, run_id: &str) -> Result<Option<RunRecord>> {
        self.inner.get_run(run_id)
    }
    fn inspect_run(&self, run_id: &str, read: &mut dyn FnMut(Option<&RunRecord>)) -> Result<()> {
        self.inner.inspect_run(run_id, read)
    }
    fn set_run_status(&self, run_id: &str, status: RunStatus, reason: Option<&str>, now_ms: u64) -> Result<()> {
        if status == RunStatus::Running {
            self.fire(&self.before_set_running);
        }
        self.inner.set_run_status(run_id, status, reason, now_ms)
    }
    fn begin_replay(&self, run_id: &str, trigger: &[u8], now_ms: u64) -> Result<Replay> {
        self.inner.begin_replay(run_id, trigger, now_ms)
    }
    fn replay_history(&self, run_id: &str) -> Result<Vec<ReplayEntry>> {
        self.inner.replay_history(run_id)
    }
    fn run_steps(&self, run_id: &str) -> Result<Vec<StepRecord>> {
        self.inner.run_steps(run_id)
    }
    fn finish_drive(
        &self,
        run_id: &str,
        replays: u32,
        status: RunStatus,
        reason: Option<&str>,
        now_ms: u64,
    ) -> Result<bool> {
        match status {
            // A first drive sets its run running through `finish_drive` (conditionally).
            RunStatus::Running => self.fire(&self.before_set_running),
            RunStatus::Paused => {
                let stall = self.stall_pause.lock().unwrap().take();
                if let Some(stall) = stall {
                    std::thread::sleep(stall);
                }
            }
            _ => {}
        }
        self.inner.finish_drive(run_id, replays, status, reason, now_ms)
    }
    fn unfinished_runs(&self) -> Result<Vec<String>> {
        self.inner.unfinished_runs()
    }
    fn paused_runs(&self) -> Result<Vec<String>> {
        self.inner.paused_runs()
    }
    fn intake(&self, delivery: &Delivery<'_>, run: RunRecord) -> Result<Intake> {
        self.inner.intake(delivery, run)
    }
    fn record_rejected(&self, source: &str, event_id: &str, reason: &str, now_ms: u64) -> Result<()> {
        self.inner.record_rejected(source, event_id, reason, now_ms)
    }
    fn expire_inbox(&self, before_ms: u64) -> Result<u64> {
        self.inner.expire_inbox(before_ms)
    }
    fn record_resolution(&self, resolution: &ResolutionRecord, status: RunStatus, reason: Option<&str>) -> Result<()> {
        self.inner.record_resolution(resolution, status, reason)
    }
    fn resolutions(&self, run_id: &str) -> Result<Vec<ResolutionRecord>> {
        self.fire(&self.before_resolutions);
        self.meet_at_resolutions();
        self.inner.resolutions(run_id)
    }
    fn forget_run(&self, run_id: &str) -> Result<()> {
        self.inner.forget_run(run_id)
    }
    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }
}
