//! What one fake call costs, so the simulator's budget (~400 k steps/s per core, i.e. ~2.5 µs per step for
//! everything) can be checked: the PRNG, one call's draws from a faulty profile, and the synchronous core of each
//! fake handling a create (keyed replay included for payments), with each run forgotten as it finishes so state stays
//! small, as in a long simulation.

use connectors_fake::FakeKind;
use connectors_fake::profile::{Draws, FaultProfile};
use connectors_fake::rng::Rng;
use criterion::{Criterion, criterion_group, criterion_main};
use engine::connector::Request;
use engine::key::Key;
use std::hint::black_box;

fn rng(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    c.bench_function("rng/next_u64", |b| b.iter(|| black_box(rng.next_u64())));
    let profile = FaultProfile {
        latency_ms_median: 40,
        latency_ms_p99: 400,
        timeout_after_commit_p: 1e-4,
        error_after_commit_p: 1e-4,
        lag_ms_median: 2_000,
        lag_tail_p: 0.01,
        lag_ms_tail_max: 60_000,
        ..FaultProfile::default()
    };
    c.bench_function("profile/sample_draws", |b| b.iter(|| black_box(profile.sample_draws(&mut rng))));
}

fn handle(c: &mut Criterion) {
    let inputs = engine::doc!({ "email": "ada@example.com", "amount": 1200 });
    for kind in FakeKind::ALL {
        let mut server = kind.server("bench", FaultProfile::default());
        let mut n: u64 = 0;
        let mut run_ids: Vec<String> = (0..1024).map(|i| format!("run-{i}")).collect();
        run_ids.shrink_to_fit();
        c.bench_function(&format!("handle/{kind:?}"), |b| {
            b.iter(|| {
                n += 1;
                let mut key = Key([0; 32]);
                key.0[..8].copy_from_slice(&n.to_le_bytes());
                let run_id = &run_ids[(n % 1024) as usize];
                let request = Request { action: kind.create_action(), inputs: &inputs, key: &key, run_id, attempt: 1 };
                let handled = server.handle(n, &request, &Draws::CLEAN);
                black_box(handled);
                // Keep state small: forget the run that will be reused next.
                server.forget_run(&run_ids[((n + 1) % 1024) as usize]);
            })
        });
    }
}

fn config() -> Criterion {
    // Short runs: the machine is shared; medians are what the report quotes.
    Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
}

criterion_group! { name = benches; config = config(); targets = rng, handle }
criterion_main!(benches);
