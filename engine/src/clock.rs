//! The engine's only source of time.
//!
//! Times are milliseconds since the Unix epoch as `u64`. The engine stores them in the ledger (lease expiries, the
//! moment of an attempt), so they must mean the same thing to every worker; under madsim the simulation supplies a
//! clock driven by the runtime's virtual time.

/// A source of the current time, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// The wall clock, for embedding the engine in a real service.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods, reason = "the production clock is the one place that reads the wall clock")]
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// A clock that reads the async runtime's clock (`tokio::time::Instant`): real time on tokio, virtual time under
/// madsim (and under a paused tokio clock in tests). `epoch_ms` is the wall time the runtime's start stands for.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeClock {
    start: tokio::time::Instant,
    epoch_ms: u64,
}

impl RuntimeClock {
    #[allow(
        clippy::disallowed_methods,
        reason = "the runtime's clock: madsim's virtual time under the simulation (where tokio's Instant is std's, \
                  intercepted), tokio's clock otherwise"
    )]
    pub fn new(epoch_ms: u64) -> Self {
        Self { start: tokio::time::Instant::now(), epoch_ms }
    }
}

impl Clock for RuntimeClock {
    #[allow(clippy::disallowed_methods, reason = "see RuntimeClock::new")]
    fn now_ms(&self) -> u64 {
        self.epoch_ms + tokio::time::Instant::now().duration_since(self.start).as_millis() as u64
    }
}
