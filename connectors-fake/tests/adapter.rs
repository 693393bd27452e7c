//! The async adapter ([`connectors_fake::server::FakeConnector`]) as the engine sees it: an
//! `engine::connector::Connector` that sleeps its latency on the runtime's timer, commits at arrival in state outside
//! any worker, and tells the sink. The timing tests run under madsim (`cargo sim-test -p connectors-fake`); a
//! zero-latency smoke test runs on real tokio.

use connectors_fake::FakeKind;
use connectors_fake::profile::FaultProfile;
use connectors_fake::rng::Rng;
use connectors_fake::truth::RecordingSink;
use engine::clock::{Clock, RuntimeClock};
use engine::connector::{LookupOutcome, Outcome, Request};
use engine::key::Key;
use std::sync::Arc;

const EPOCH_MS: u64 = 1_700_000_000_000;

fn inputs() -> engine::doc::Doc {
    engine::doc!({ "email": "ada@example.com", "amount": 500 })
}

#[cfg(not(madsim))]
#[tokio::test]
async fn zero_latency_calls_work_on_real_tokio() {
    for kind in FakeKind::ALL {
        let sink = Arc::new(RecordingSink::new());
        let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(EPOCH_MS));
        let fake = kind.connector("fake", FaultProfile::default(), Rng::new(1), clock, sink.clone());
        let key = Key([7; 32]);
        let inputs = inputs();
        let request = Request { action: kind.create_action(), inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
        let outcome = fake.call(request).await;
        assert!(matches!(outcome, Outcome::Applied(_)), "{kind:?}: {outcome:?}");
        assert_eq!(sink.effects_for(&key), 1, "{kind:?}");
        if fake.action(kind.create_action()).expect("declared").has_lookup {
            assert!(matches!(fake.lookup(request).await, LookupOutcome::Found(_)), "{kind:?}");
        }
        fake.forget_run("run-1");
        assert_eq!(fake.record_count(), 0, "{kind:?}");
    }
}

#[cfg(madsim)]
mod simulated {
    use super::*;
    use connectors_fake::server::{Fake, TIMEOUT};
    use std::time::Duration;

    fn fake(kind: FakeKind, profile: FaultProfile) -> (Arc<dyn Fake>, Arc<RecordingSink>, Arc<dyn Clock>) {
        let sink = Arc::new(RecordingSink::new());
        let clock: Arc<dyn Clock> = Arc::new(RuntimeClock::new(EPOCH_MS));
        (kind.connector("fake", profile, Rng::new(3), clock.clone(), sink.clone()), sink, clock)
    }

    /// A constant 100 ms round trip: 50 ms there, 50 back.
    fn constant_latency() -> FaultProfile {
        FaultProfile { latency_ms_median: 100, ..FaultProfile::default() }
    }

    #[madsim::test]
    async fn a_call_commits_at_arrival_and_returns_after_the_round_trip() {
        let (fake, sink, clock) = fake(FakeKind::Payments, constant_latency());
        let key = Key([1; 32]);
        let inputs = inputs();
        let request = Request { action: "create_customer", inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
        let start_ms = clock.now_ms();
        let outcome = fake.call(request).await;
        assert!(matches!(outcome, Outcome::Applied(_)));
        assert_eq!(clock.now_ms() - start_ms, 100);
        let effects = sink.effects();
        assert_eq!(effects.len(), 1);
        assert_eq!(effects[0].committed_ms - start_ms, 50);
        assert_eq!(sink.events().len(), 1, "one webhook event per change");
    }

    #[madsim::test]
    async fn a_timeout_after_commit_returns_after_timeout_ms_with_the_write_committed() {
        let profile = FaultProfile { timeout_after_commit_p: 1.0, timeout_ms: 30_000, ..constant_latency() };
        let (fake, sink, clock) = fake(FakeKind::Payments, profile);
        let key = Key([2; 32]);
        let inputs = inputs();
        let request = Request { action: "charge", inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
        let start_ms = clock.now_ms();
        assert_eq!(fake.call(request).await, Outcome::Indeterminate(TIMEOUT.into()));
        assert_eq!(clock.now_ms() - start_ms, 30_000);
        assert_eq!(sink.effects_for(&key), 1);
    }

    #[madsim::test]
    async fn a_call_taken_apart_and_served_late_at_its_arrival_time_is_the_same_call() {
        // Two fakes from the same seed: one called whole, the other through `draw`, a sleep of both halves of the
        // latency, and only then `serve_call` at the time the request arrived (what the simulator's network does:
        // it serves a request before anything can observe the API later than its arrival, here when the answer is
        // due). Latencies vary and a third of the responses are lost after commit, so both halves of the wait are
        // exercised; the effects must be the same, committed at the same times.
        let profile = FaultProfile {
            latency_ms_median: 100,
            latency_ms_p99: 900,
            timeout_after_commit_p: 0.3,
            timeout_ms: 30_000,
            ..FaultProfile::default()
        };
        let (whole, whole_sink, clock) = fake(FakeKind::Payments, profile.clone());
        let (halves, halves_sink, _) = fake(FakeKind::Payments, profile);
        let mut timeouts = 0;
        let mut arrivals = Vec::new();
        for i in 0..40u8 {
            let key = Key([i; 32]);
            let inputs = inputs();
            let request = Request { action: "charge", inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
            let start_ms = clock.now_ms();
            let outcome = whole.call(request).await;
            let whole_ms = clock.now_ms() - start_ms;
            let start_ms = clock.now_ms();
            let draws = halves.draw();
            let arrival_ms = start_ms + draws.request_ms;
            arrivals.push(arrival_ms);
            tokio::time::sleep(Duration::from_millis(draws.request_ms + halves.wait_ms(&draws))).await;
            let served = halves.serve_call(&request, &draws, arrival_ms);
            assert_eq!(served, outcome, "call {i}");
            assert_eq!(clock.now_ms() - start_ms, whole_ms, "call {i}");
            timeouts += usize::from(outcome == Outcome::Indeterminate(TIMEOUT.into()));
        }
        assert!(timeouts > 0 && timeouts < 40, "{timeouts} of 40 timed out");
        // Committed at the arrival, not when served, and visible after the same lag as the whole call's.
        let committed: Vec<u64> = halves_sink.effects().iter().map(|e| e.committed_ms).collect();
        assert_eq!(committed, arrivals);
        let lags =
            |sink: &RecordingSink| sink.effects().iter().map(|e| e.visible_ms - e.committed_ms).collect::<Vec<_>>();
        assert_eq!(lags(&whole_sink), lags(&halves_sink));
        assert_eq!(whole_sink.effects().len(), 40, "every charge commits, lost response or not");
    }

    /// Kills a worker node in the middle of a call, at `kill_after_ms` after it started; returns the number of
    /// effects committed for the key, and then what a retry from another worker sees.
    async fn kill_worker_mid_call(kind: FakeKind, kill_after_ms: u64) -> (usize, Outcome, usize) {
        let (fake, sink, _clock) = fake(kind, FaultProfile { latency_ms_median: 1_000, ..FaultProfile::default() });
        let key = Key([9; 32]);
        let action = kind.create_action();
        let handle = madsim::runtime::Handle::current();
        let worker = handle.create_node().name("worker").build();
        let in_worker = fake.clone();
        worker.spawn(async move {
            let inputs = inputs();
            let request = Request { action, inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
            in_worker.call(request).await
        });
        tokio::time::sleep(Duration::from_millis(kill_after_ms)).await;
        handle.kill(worker.id());
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let after_kill = sink.effects_for(&key);
        let inputs = inputs();
        let retry = Request { action, inputs: &inputs, key: &key, run_id: "run-1", attempt: 2 };
        let outcome = fake.call(retry).await;
        (after_kill, outcome, sink.effects_for(&key))
    }

    #[madsim::test]
    async fn killing_a_worker_after_arrival_never_uncommits_the_write() {
        // Killed at 700 ms: the request arrived at 500 ms, so the write is committed; a keyed retry replays it.
        let (after_kill, retry, total) = kill_worker_mid_call(FakeKind::Payments, 700).await;
        assert_eq!(after_kill, 1);
        assert!(matches!(retry, Outcome::Applied(_)), "{retry:?}");
        assert_eq!(total, 1, "the keyed retry replays, no duplicate");
        // The canary ignores the key: the same retry is a duplicate, which the harness must catch.
        let (after_kill, _, total) = kill_worker_mid_call(FakeKind::Canary, 700).await;
        assert_eq!((after_kill, total), (1, 2));
    }

    #[madsim::test]
    async fn killing_a_worker_before_arrival_sends_nothing() {
        let (after_kill, retry, total) = kill_worker_mid_call(FakeKind::Payments, 200).await;
        assert_eq!(after_kill, 0);
        assert!(matches!(retry, Outcome::Applied(_)));
        assert_eq!(total, 1);
    }

    #[madsim::test]
    async fn lookups_see_a_lagged_create_only_after_its_lag() {
        let profile =
            FaultProfile { lag_ms_median: 5_000, lag_ms_tail_max: 5_000, lag_tail_p: 1.0, ..constant_latency() };
        let (fake, sink, clock) = fake(FakeKind::Ledgerly, profile);
        let key = Key([4; 32]);
        let inputs = inputs();
        let request = Request { action: "record_entry", inputs: &inputs, key: &key, run_id: "run-1", attempt: 1 };
        assert!(matches!(fake.call(request).await, Outcome::Applied(_)), "confirmed before visible");
        assert_eq!(fake.lookup(request).await, LookupOutcome::NotFound);
        let visible_ms = sink.effects()[0].visible_ms;
        let wait_ms = visible_ms.saturating_sub(clock.now_ms());
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        assert!(matches!(fake.lookup(request).await, LookupOutcome::Found(_)));
    }
}
