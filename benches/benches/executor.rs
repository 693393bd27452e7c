//! Measures the executor's hot path: steps per second of whole runs (10 keyed single-action steps each) with the
//! in-memory ledger and a connector that answers at once, on a current-thread tokio runtime; and the cost of one
//! pure decision. The simulator needs ~400 k steps/s per core from the engine; read the throughput line.

#[cfg(not(madsim))]
mod bench {
    use criterion::{Criterion, Throughput};
    use engine::clock::RuntimeClock;
    use engine::connector::{ActionSpec, BoxFuture, Connector, GuaranteeClass, LookupOutcome, Outcome, Request};
    use engine::decide::{self, Input, Policy, RetryPolicy};
    use engine::event::NoObserver;
    use engine::executor::{Engine, EngineConfig};
    use engine::key::Key;
    use engine::ledger::memory::MemoryLedger;
    use engine::ledger::{Ledger, Status, StepRecord};
    use engine::workflow::Workflow;
    use serde_json::json;
    use std::hint::black_box;
    use std::sync::Arc;

    const STEPS: usize = 10;

    struct Instant {
        actions: Vec<ActionSpec>,
    }

    impl Connector for Instant {
        fn name(&self) -> &str {
            "api"
        }
        fn actions(&self) -> &[ActionSpec] {
            &self.actions
        }
        fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
            Box::pin(async move { Outcome::Applied(engine::doc::Doc::object([("id", request.attempt.into())])) })
        }
        fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
            Box::pin(async move { LookupOutcome::NotFound })
        }
    }

    pub fn runs(c: &mut Criterion) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let ledger = Arc::new(MemoryLedger::new());
        let mut engine = rt.block_on(async {
            Engine::new(
                EngineConfig::new("bench"),
                ledger.clone(),
                Arc::new(RuntimeClock::new(0)),
                Arc::new(NoObserver),
            )
        });
        let actions = vec![ActionSpec {
            name: "charge".to_string(),
            class: GuaranteeClass::Keyed { retention_ms: 86_400_000 },
            has_lookup: false,
            lookup_lag_bound_ms: 0,
        }];
        engine.register_connector(Arc::new(Instant { actions }));
        let steps: Vec<_> = (0..STEPS)
            .map(|i| json!({"id": format!("s{i}"), "action": "api.charge", "inputs": {"email": "{{trigger.email}}", "n": i}}))
            .collect();
        let wf = Workflow::from_json(&json!({"name": "wf", "steps": steps}).to_string()).expect("valid");
        engine.register_workflow(wf).expect("registered");
        let trigger = engine::doc!({"email": "a@example.com"});
        let mut group = c.benchmark_group("executor");
        group.throughput(Throughput::Elements(STEPS as u64));
        let mut n = 0u64;
        group.bench_function("run of 10 keyed steps (elements = steps)", |b| {
            b.iter(|| {
                n += 1;
                let run_id = format!("r{n}");
                let status = rt.block_on(engine.start_run("wf", &run_id, &trigger)).expect("run");
                ledger.forget_run(&run_id).expect("forget");
                black_box(status)
            })
        });
        group.finish();

        let spec = ActionSpec {
            name: "a".to_string(),
            class: GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 10 },
            has_lookup: true,
            lookup_lag_bound_ms: 0,
        };
        let retry = RetryPolicy::default();
        let key = Key([1; 32]);
        let record = StepRecord {
            key,
            run_id: "r".into(),
            step_id: "s".into(),
            action: "c.a".into(),
            inputs_hash: [0; 32],
            attempt_count: 1,
            status: Status::Unknown,
            owner: "w".into(),
            lease_expiry_ms: 0,
            fence: 1,
            last_attempt_ms: 0,
            output: None,
            error: Some("timeout".to_string()),
        };
        c.bench_function("decide (lookup, unknown record)", |b| {
            b.iter(|| {
                decide::decide(black_box(&Input {
                    spec: &spec,
                    policy: Policy::Rules,
                    retry: &retry,
                    seed: 1,
                    key: &key,
                    record: Some(&record),
                    last: None,
                    first_attempt_ms: None,
                    now_ms: 1_000,
                    person_retry: false,
                }))
            })
        });
    }
}

#[cfg(not(madsim))]
criterion::criterion_group!(benches, bench::runs);
#[cfg(not(madsim))]
criterion::criterion_main!(benches);

#[cfg(madsim)]
fn main() {}
