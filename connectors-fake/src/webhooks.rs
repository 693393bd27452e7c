//! Webhook events and their delivery schedule, modelled on Stripe's public delivery behaviour: at least once;
//! retried with exponential backoff for up to 3 days while the receiver fails; no ordering guarantee; occasionally a
//! duplicate delivery of one event (about a second later); occasionally two distinct event objects (two event ids)
//! for one change.
//!
//! A fake emits one [`WebhookEvent`] per change (through [`crate::truth::EffectSink::webhook_event`]).
//! [`delivery_schedule`] is pure: given the event, the profile and an [`Rng`], it returns every delivery the sender
//! makes, at offsets from the change, sorted by offset. The simulator performs them. Receiver failures inside the
//! schedule are the *modelled* ones (`receiver_failure_p`); when the simulated receiver really fails (its worker is
//! down), the simulator asks [`redelivery_offset_ms`] for the next attempt.

use crate::profile::WebhookProfile;
use crate::rng::Rng;
use engine::doc::Doc;
use engine::ledger::CompactString;
use std::sync::Arc;

/// Every schedule has at most this many deliveries of one event object (attempts while failing, plus duplicates):
/// a bound on the loop; the 3-day horizon is reached well before it with the default backoff.
pub const DELIVERY_ATTEMPT_COUNT_MAX: u32 = 64;

/// One change in a fake API, as its webhook announces it. Nothing in it is copied per event or per delivery: the
/// source is the connector's shared name, the ids are held inline, the type is a constant and the payload is shared.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookEvent {
    /// The sending connector's name (the dedup namespace: the engine deduplicates by (source, event id)).
    pub source: Arc<str>,
    pub event_id: CompactString,
    pub object_id: CompactString,
    /// `customer.created`, `charge.succeeded`, ...
    pub event_type: &'static str,
    /// Shared: the fake keeps the same record, and every delivery of the event carries it.
    pub payload: Doc,
}

/// One delivery attempt of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// After the change, in ms.
    pub offset_ms: u64,
    /// The event id this delivery carries: the event's own, or the twin's (a second distinct event object).
    pub event_id: CompactString,
    /// Counts from 1 per event object; a duplicate repeats the attempt number it duplicates.
    pub attempt: u32,
    /// The modelled receiver fails this attempt (the sender will redeliver, if within the horizon).
    pub receiver_fails: bool,
    /// A spurious second delivery of an attempt that succeeded.
    pub duplicate: bool,
}

impl Delivery {
    /// The event as this delivery carries it (the twin has its own id and otherwise the same content).
    pub fn event_for(&self, event: &WebhookEvent) -> WebhookEvent {
        WebhookEvent { event_id: self.event_id.clone(), ..event.clone() }
    }
}

/// The delay of redelivery number `attempt` (the first redelivery is attempt 2): `base * 2^(attempt - 2)`, capped.
pub fn backoff_ms(profile: &WebhookProfile, attempt: u32) -> u64 {
    let doublings = attempt.saturating_sub(2).min(40);
    profile.redelivery_backoff_ms_base.saturating_mul(1u64 << doublings).min(profile.redelivery_backoff_ms_max)
}

/// When the sender tries again after attempt `failed_attempt` (made at `failed_offset_ms` after the change, the
/// first attempt at `first_offset_ms`) failed; `None` once the 3-day horizon is passed.
pub fn redelivery_offset_ms(
    profile: &WebhookProfile,
    failed_attempt: u32,
    first_offset_ms: u64,
    failed_offset_ms: u64,
) -> Option<u64> {
    if failed_attempt >= DELIVERY_ATTEMPT_COUNT_MAX {
        return None;
    }
    let next = failed_offset_ms.saturating_add(backoff_ms(profile, failed_attempt + 1));
    (next - first_offset_ms <= profile.redelivery_ms_max).then_some(next)
}

/// Every delivery of `event` and of its twin (if one is drawn), sorted by offset (ties keep generation order).
pub fn delivery_schedule(event: &WebhookEvent, profile: &WebhookProfile, rng: &mut Rng) -> Vec<Delivery> {
    let mut deliveries = Vec::with_capacity(2);
    schedule_object(&event.event_id, profile, rng, &mut deliveries);
    if rng.chance(profile.twin_event_p) {
        let mut twin_id = event.event_id.clone();
        twin_id.push_str("_twin");
        schedule_object(&twin_id, profile, rng, &mut deliveries);
    }
    deliveries.sort_by_key(|d| d.offset_ms);
    deliveries
}

fn schedule_object(event_id: &str, profile: &WebhookProfile, rng: &mut Rng, out: &mut Vec<Delivery>) {
    let first_offset_ms = rng.range_inclusive(0, profile.reorder_ms_max);
    let mut offset_ms = first_offset_ms;
    let mut attempt = 1;
    // Bounded by DELIVERY_ATTEMPT_COUNT_MAX through `redelivery_offset_ms`.
    loop {
        let fails = rng.chance(profile.receiver_failure_p);
        out.push(Delivery { offset_ms, event_id: event_id.into(), attempt, receiver_fails: fails, duplicate: false });
        if !fails {
            if rng.chance(profile.duplicate_p) {
                out.push(Delivery {
                    offset_ms: offset_ms + profile.duplicate_spacing_ms,
                    event_id: event_id.into(),
                    attempt,
                    receiver_fails: false,
                    duplicate: true,
                });
            }
            return;
        }
        match redelivery_offset_ms(profile, attempt, first_offset_ms, offset_ms) {
            Some(next) => {
                offset_ms = next;
                attempt += 1;
            }
            // The sender gives up: the event is never delivered (Stripe disables nothing here; it just stops).
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DAY_MS;

    fn event() -> WebhookEvent {
        WebhookEvent {
            source: "payments".into(),
            event_id: "evt_1".into(),
            object_id: "cus_1".into(),
            event_type: "customer.created",
            payload: engine::doc!({"id": "cus_1"}),
        }
    }

    #[test]
    fn perfect_profile_delivers_once_at_once() {
        let mut rng = Rng::new(1);
        let d = delivery_schedule(&event(), &WebhookProfile::default(), &mut rng);
        assert_eq!(
            d,
            vec![Delivery {
                offset_ms: 0,
                event_id: "evt_1".into(),
                attempt: 1,
                receiver_fails: false,
                duplicate: false
            }]
        );
    }

    #[test]
    fn duplicate_at_one_repeats_the_event_a_spacing_later() {
        let profile = WebhookProfile { duplicate_p: 1.0, ..Default::default() };
        let d = delivery_schedule(&event(), &profile, &mut Rng::new(2));
        assert_eq!(d.len(), 2);
        assert_eq!((d[1].offset_ms, d[1].event_id.as_str(), d[1].duplicate), (1_000, "evt_1", true));
    }

    #[test]
    fn twin_at_one_gives_a_second_distinct_event_id() {
        let profile = WebhookProfile { twin_event_p: 1.0, ..Default::default() };
        let d = delivery_schedule(&event(), &profile, &mut Rng::new(3));
        let ids: std::collections::BTreeSet<&str> = d.iter().map(|x| x.event_id.as_str()).collect();
        assert_eq!(ids.into_iter().collect::<Vec<_>>(), vec!["evt_1", "evt_1_twin"]);
        assert_eq!(d[1].event_for(&event()).object_id, "cus_1");
    }

    #[test]
    fn a_receiver_that_always_fails_is_retried_with_backoff_for_three_days_then_abandoned() {
        let profile = WebhookProfile { receiver_failure_p: 1.0, ..Default::default() };
        let d = delivery_schedule(&event(), &profile, &mut Rng::new(4));
        assert!(d.iter().all(|x| x.receiver_fails));
        assert!(d.len() > 5 && d.len() < DELIVERY_ATTEMPT_COUNT_MAX as usize, "{}", d.len());
        let last = d.last().unwrap().offset_ms;
        assert!(last <= 3 * DAY_MS && last > 2 * DAY_MS, "{last}");
        let gaps: Vec<u64> = d.windows(2).map(|w| w[1].offset_ms - w[0].offset_ms).collect();
        assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "backoff never shrinks: {gaps:?}");
        assert_eq!(gaps[0], 60_000);
    }

    #[test]
    fn reorder_window_spreads_first_deliveries() {
        let profile = WebhookProfile { reorder_ms_max: 10_000, ..Default::default() };
        let mut rng = Rng::new(5);
        let offsets: Vec<u64> =
            (0..200).map(|_| delivery_schedule(&event(), &profile, &mut rng)[0].offset_ms).collect();
        assert!(offsets.iter().all(|&o| o <= 10_000));
        assert!(offsets.windows(2).any(|w| w[1] < w[0]), "later changes must sometimes be delivered first");
    }

    #[test]
    fn redelivery_offsets_follow_the_backoff_and_stop_after_the_horizon() {
        let profile = WebhookProfile::default();
        // (failed attempt, first offset, failed offset) -> next offset
        let cases: &[(u32, u64, u64, Option<u64>)] = &[
            (1, 0, 0, Some(60_000)),
            (2, 0, 60_000, Some(180_000)),
            (3, 5_000, 185_000, Some(425_000)),
            (12, 0, 2 * DAY_MS, Some(2 * DAY_MS + 6 * 3_600_000)),
            (12, 0, 3 * DAY_MS - 1_000, None),
            (DELIVERY_ATTEMPT_COUNT_MAX, 0, 1_000, None),
        ];
        for &(attempt, first, failed, expected) in cases {
            assert_eq!(redelivery_offset_ms(&profile, attempt, first, failed), expected, "attempt {attempt}");
        }
    }
}
