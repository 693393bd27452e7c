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
pub mod one_or_more;
pub mod payments;
pub mod profile;
pub mod rng;
pub mod server;
pub mod truth;
pub mod webhooks;

use engine::clock::Clock;
use profile::FaultProfile;
use rng::Rng;
use server::{DynServer, Fake, FakeConnector, Server};
use std::sync::Arc;
use truth::EffectSink;

/// The catalogue of fakes, for building one by kind (scenarios name them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FakeKind {
    /// [`payments::Payments`]: keyed, `create_customer` (with lookup) and `charge`.
    Payments,
    /// [`contacts::Contacts`]: lookup-before-create, `create_contact`.
    Contacts,
    /// [`ledgerly::Ledgerly`]: confirm-before-visible lookup-before-create, `record_entry`.
    Ledgerly,
    /// [`at_most_once::AtMostOnce::payouts`]: `send_payout`.
    Payouts,
    /// [`at_most_once::AtMostOnce::email`]: `send_email`.
    Email,
    /// [`canary::Canary`]: declares keyed, ignores keys, `create`.
    Canary,
}

impl FakeKind {
    pub const ALL: [FakeKind; 6] = [
        FakeKind::Payments,
        FakeKind::Contacts,
        FakeKind::Ledgerly,
        FakeKind::Payouts,
        FakeKind::Email,
        FakeKind::Canary,
    ];

    /// The profile modelled on the public numbers of the API this fake imitates (faults at zero; scenarios turn
    /// them up).
    pub fn realistic_profile(self) -> FaultProfile {
        match self {
            FakeKind::Payments => payments::realistic_profile(),
            FakeKind::Contacts => contacts::realistic_profile(),
            FakeKind::Ledgerly => ledgerly::realistic_profile(),
            FakeKind::Payouts | FakeKind::Email | FakeKind::Canary => {
                FaultProfile { latency_ms_median: 50, latency_ms_p99: 500, ..FaultProfile::default() }
            }
        }
    }

    /// A synchronous server of this fake (panics on an invalid profile).
    pub fn server(self, name: &str, profile: FaultProfile) -> Box<dyn DynServer> {
        match self {
            FakeKind::Payments => Box::new(Server::new(payments::Payments::new(name, &profile), profile)),
            FakeKind::Contacts => Box::new(Server::new(contacts::Contacts::new(name, &profile), profile)),
            FakeKind::Ledgerly => Box::new(Server::new(ledgerly::Ledgerly::new(name, &profile), profile)),
            FakeKind::Payouts => Box::new(Server::new(at_most_once::AtMostOnce::payouts(name), profile)),
            FakeKind::Email => Box::new(Server::new(at_most_once::AtMostOnce::email(name), profile)),
            FakeKind::Canary => Box::new(Server::new(canary::Canary::new(name, &profile), profile)),
        }
    }

    /// An async connector of this fake over a new server. Share the returned `Arc` between workers: the API's
    /// state lives in it, outside any worker, so killing a worker never un-commits a write.
    pub fn connector(
        self,
        name: &str,
        profile: FaultProfile,
        rng: Rng,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn EffectSink>,
    ) -> Arc<dyn Fake> {
        match self {
            FakeKind::Payments => {
                Arc::new(FakeConnector::new(payments::Payments::new(name, &profile), profile, rng, clock, sink))
            }
            FakeKind::Contacts => {
                Arc::new(FakeConnector::new(contacts::Contacts::new(name, &profile), profile, rng, clock, sink))
            }
            FakeKind::Ledgerly => {
                Arc::new(FakeConnector::new(ledgerly::Ledgerly::new(name, &profile), profile, rng, clock, sink))
            }
            FakeKind::Payouts => {
                Arc::new(FakeConnector::new(at_most_once::AtMostOnce::payouts(name), profile, rng, clock, sink))
            }
            FakeKind::Email => {
                Arc::new(FakeConnector::new(at_most_once::AtMostOnce::email(name), profile, rng, clock, sink))
            }
            FakeKind::Canary => {
                Arc::new(FakeConnector::new(canary::Canary::new(name, &profile), profile, rng, clock, sink))
            }
        }
    }

    /// The action a workload calls on this fake to create something (its first action).
    pub fn create_action(self) -> &'static str {
        match self {
            FakeKind::Payments => payments::CREATE_CUSTOMER,
            FakeKind::Contacts => contacts::CREATE_CONTACT,
            FakeKind::Ledgerly => ledgerly::RECORD_ENTRY,
            FakeKind::Payouts => at_most_once::SEND_PAYOUT,
            FakeKind::Email => at_most_once::SEND_EMAIL,
            FakeKind::Canary => canary::CREATE,
        }
    }
}
