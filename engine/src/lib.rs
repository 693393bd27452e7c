//! Flow's engine: every step of a run is keyed, recorded in a ledger, and executed exactly once in effect.
//!
//! The pieces, in the order a step meets them:
//! - [`canonical`]: RFC 8785 canonical JSON, the only form in which inputs are hashed or stored.
//! - [`key`]: the step key, `blake3(domain tag, run id, step id, canonical(inputs))`.
//! - [`ledger`]: the durable record of keys, attempts, outcomes, runs, plans and the webhook inbox.
//! - [`connector`]: the adapter to an external API, with a guarantee class per action and three-valued outcomes.
//! - [`executor`]: applies the three rules of `DESIGN.md` to a run.
//!
//! The engine never reads the wall clock ([`clock::Clock`] is injected), never draws randomness except from the
//! seed in its configuration, and knows nothing about simulation: the same code runs on real tokio and under madsim.

pub mod canonical;
pub mod clock;
pub mod connector;
pub mod decide;
pub mod doc;
pub mod event;
pub mod executor;
pub mod fastmap;
pub mod key;
pub mod ledger;
pub mod webhook;
pub mod workflow;
