//! Fake connectors that misbehave like real APIs, with ground truth for the simulator's checker.
//!
//! - [`rng`]: the seeded PRNG all randomness of the fakes (and of the simulator) comes from.
//! - [`profile`]: [`profile::FaultProfile`], every fault knob; the default is a perfectly behaved API.
//! - [`truth`]: [`truth::Effect`], the record of a committed write, pushed into an [`truth::EffectSink`].
//! - [`webhooks`]: the events each change emits and their delivery schedule (duplicates, redelivery, reordering,
//!   twin events).
//! - [`server`]: the synchronous core shared by the fakes (faults, rate limit, latency split) and the async adapter
//!   that makes any fake an `engine::connector::Connector`.
//! - The fakes: [`payments`] (Stripe-like, keyed), [`contacts`] (HubSpot-like, lookup-before-create),
//!   [`at_most_once`] (payouts, email), [`ledgerly`] (confirm-before-visible), [`canary`] (claims keys, ignores them).

pub mod at_most_once;
pub mod canary;
pub mod contacts;
pub mod ledgerly;
pub mod payments;
pub mod profile;
pub mod rng;
pub mod server;
pub mod truth;
pub mod webhooks;
