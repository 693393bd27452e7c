//! flowsim's deterministic world: the engine inside madsim, fake connectors whose state outlives any worker, crash
//! injection, the streaming invariant checker, the trace hash, and the results type every report is made from.

pub mod checker;
pub mod profile;
pub mod results;
pub mod trace;
pub mod vecmap;
pub mod workflows;
#[cfg(madsim)]
pub mod world;

/// Progress counters readable from outside the simulation (the progress bar), updated by the world.
#[derive(Debug, Default)]
pub struct Progress {
    pub steps_started: std::sync::atomic::AtomicU64,
    pub runs_finished: std::sync::atomic::AtomicU64,
    pub done: std::sync::atomic::AtomicBool,
}
