//! Ground truth: every effect a fake commits, told to the simulator's checker as it happens.
//!
//! An [`Effect`] is a write that really happened in the fake API. It carries the engine's key as an out-of-band tag
//! for the checker alone: a fake's business logic never reads the tag unless the real API would (a keyed API sees the
//! key it was sent; a metadata search sees the metadata the connector wrote). Fakes push effects (and the webhook
//! events of each change) into an [`EffectSink`] the simulator provides, so the checker can consume them and drop
//! the records of finished runs: nothing here accumulates, and memory stays bounded for tens of millions of steps.

use crate::webhooks::WebhookEvent;
use engine::key::Key;
use engine::ledger::CompactString;
use spin::Mutex;
use std::sync::Arc;

/// One committed write in an external system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The engine's key of the write that caused it (out-of-band: for the checker only).
    pub key: Key,
    /// The connector's name (shared by every effect of one connector).
    pub connector: Arc<str>,
    pub action: Arc<str>,
    /// Inline up to 24 bytes (`CompactString`), as is the object id: an effect allocates nothing for either.
    pub run_id: CompactString,
    /// The id the API gave the created object (`cus_12`, `ch_7`, ...).
    pub object_id: CompactString,
    /// When the write committed in the API (the moment the request arrived), in ms since the epoch.
    pub committed_ms: u64,
    /// When reads (the connector's lookup) can first see it; equal to `committed_ms` where reads are immediate.
    pub visible_ms: u64,
}

impl Effect {
    /// The effect of `request`, which created `object_id` at `committed_ms`, searchable from `visible_ms`.
    pub fn of(
        connector: &Arc<str>,
        action: &Arc<str>,
        request: &engine::connector::Request<'_>,
        object_id: &str,
        committed_ms: u64,
        visible_ms: u64,
    ) -> Self {
        Effect {
            key: *request.key,
            connector: connector.clone(),
            action: action.clone(),
            run_id: request.run_id.into(),
            object_id: object_id.into(),
            committed_ms,
            visible_ms,
        }
    }
}

/// Receives the fakes' ground truth. Called synchronously, outside the fake's lock; must not block.
pub trait EffectSink: Send + Sync {
    fn effect(&self, effect: Effect);

    /// A change at `at_ms` emitted a webhook event; the simulator schedules its deliveries
    /// ([`crate::webhooks::delivery_schedule`]). Ignored by default.
    fn webhook_event(&self, _event: WebhookEvent, _at_ms: u64) {}
}

/// Drops everything (for benches and for callers that only want outcomes).
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EffectSink for NullSink {
    fn effect(&self, _effect: Effect) {}
}

/// Keeps everything in memory, for tests.
#[derive(Debug, Default)]
pub struct RecordingSink {
    effects: Mutex<Vec<Effect>>,
    events: Mutex<Vec<WebhookEvent>>,
}

impl RecordingSink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn effects(&self) -> Vec<Effect> {
        self.effects.lock().clone()
    }

    pub fn events(&self) -> Vec<WebhookEvent> {
        self.events.lock().clone()
    }

    /// How many effects carry `key`: more than one is a duplicate (invariant I1).
    pub fn effects_for(&self, key: &Key) -> usize {
        self.effects.lock().iter().filter(|e| &e.key == key).count()
    }
}

impl EffectSink for RecordingSink {
    fn effect(&self, effect: Effect) {
        self.effects.lock().push(effect);
    }

    fn webhook_event(&self, event: WebhookEvent, _at_ms: u64) {
        self.events.lock().push(event);
    }
}
