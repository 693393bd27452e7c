//! flowsim's deterministic world: the engine inside madsim, fake connectors as their own nodes, crash injection,
//! the streaming invariant checker, the trace hash, and the results type every report is made from.

pub mod results;
