//! flowsim's deterministic world: the engine inside madsim, fake connectors whose state outlives any worker, crash
//! injection, the streaming invariant checker, the trace hash, and the results type every report is made from.

pub mod checker;
pub mod results;
pub mod trace;
pub mod profile;
pub mod workflows;
#[cfg(madsim)]
pub mod world;
