//! The engine as a library, on real tokio and an on-disk SQLite ledger: `engine/workflows/signup.toml` run against
//! three small in-process APIs, with the two failures the engine exists for, and a check that every effect happened
//! exactly once.
//!
//! ```text
//! cargo run -p engine --example signup [-- --ledger FILE]
//! ```
//!
//! 1. Worker `w1` drives run `signup-1`. Stripe commits the customer and then times out (an indeterminate outcome):
//!    the engine retries with the same idempotency key, and Stripe answers with the customer it made.
//! 2. HubSpot creates the contact, and `w1` dies before it records the outcome (a crash point; its drive never
//!    resumes).
//! 3. Worker `w2` opens the same ledger file and resumes unfinished runs. Once `w1`'s lease on the contact has
//!    expired, `w2` looks the contact up by email before creating one (HubSpot has no idempotency keys), finds it,
//!    and adopts it. The welcome email and invoice, and the onboarding agent's plan, then run once each.
//! 4. The same run started again replays every step from the ledger: no API is called.
//!
//! The ledger file is a temporary one unless `--ledger FILE` names one; `flow paused --ledger FILE` reads it. Run
//! with the same `--ledger` twice and the second run is all replay (the APIs here keep nothing between processes;
//! the ledger does).

#[cfg(madsim)]
fn main() {
    eprintln!(
        "the signup example runs on real tokio: build it without --cfg madsim (cargo run -p engine --example signup)"
    );
    std::process::exit(2);
}

#[cfg(not(madsim))]
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ledger = match args.as_slice() {
        [] => None,
        [flag, path] if flag == "--ledger" && !path.is_empty() => Some(std::path::PathBuf::from(path)),
        _ => {
            eprintln!("usage: signup [--ledger FILE]");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    match runtime.block_on(demo::run(ledger)) {
        Ok(report) => print!("{report}"),
        Err(e) => {
            eprintln!("signup example: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(not(madsim))]
mod demo {
    use engine::clock::RuntimeClock;
    use engine::connector::{
        ActionSpec, BoxFuture, Connector, GuaranteeClass, LookupOutcome, NotApplied, Outcome, Request,
    };
    use engine::doc::Doc;
    use engine::event::{CrashPoint, Event, Observer};
    use engine::executor::{Engine, EngineConfig, PlannedAction, Planner};
    use engine::key::Key;
    use engine::ledger::RunStatus;
    use engine::ledger::sqlite::{Options, SqliteLedger};
    use engine::workflow::Workflow;
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const RUN: &str = "signup-1";
    /// `w1`'s lease on a key: `w2` may take a key over only after it, so it is short here.
    const LEASE_MS: u64 = 300;

    /// What an API saw and did: calls and lookups made to it, and effects (objects created, emails sent) per action.
    #[derive(Default)]
    struct Tally {
        calls: u64,
        lookups: u64,
        effects: BTreeMap<String, u64>,
    }

    fn spec(name: &str, class: GuaranteeClass, has_lookup: bool) -> ActionSpec {
        ActionSpec { name: name.to_owned(), class, has_lookup, lookup_lag_bound_ms: 0 }
    }

    /// Stripe-like: every action honours an idempotency key (a repeat gets the first answer), and the first create
    /// commits and then times out.
    struct Stripe {
        actions: Vec<ActionSpec>,
        state: Mutex<(Tally, BTreeMap<Key, Doc>)>,
        time_out_once: AtomicBool,
    }

    impl Connector for Stripe {
        fn name(&self) -> &str {
            "stripe"
        }
        fn actions(&self) -> &[ActionSpec] {
            &self.actions
        }
        fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
            Box::pin(async move {
                let mut state = self.state.lock().expect("stripe");
                let (tally, by_key) = &mut *state;
                tally.calls += 1;
                if let Some(answer) = by_key.get(request.key) {
                    return Outcome::Applied(answer.clone());
                }
                *tally.effects.entry(request.action.to_owned()).or_default() += 1;
                let prefix = if request.action == "create_customer" { "cus_" } else { "in_" };
                let answer = Doc::object([("id", Doc::from(format!("{prefix}{}", by_key.len() + 1)))]);
                by_key.insert(*request.key, answer.clone());
                if self.time_out_once.swap(false, Ordering::Relaxed) {
                    return Outcome::Indeterminate("timed out after the API committed".into());
                }
                Outcome::Applied(answer)
            })
        }
        fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
            Box::pin(async { LookupOutcome::Failed("stripe offers no lookup here".into()) })
        }
    }

    /// HubSpot-like: no idempotency keys; contacts are found by email.
    struct HubSpot {
        actions: Vec<ActionSpec>,
        state: Mutex<(Tally, BTreeMap<String, Doc>)>,
    }

    impl HubSpot {
        fn created(&self) -> bool {
            !self.state.lock().expect("hubspot").1.is_empty()
        }
    }

    impl Connector for HubSpot {
        fn name(&self) -> &str {
            "hubspot"
        }
        fn actions(&self) -> &[ActionSpec] {
            &self.actions
        }
        fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
            Box::pin(async move {
                let mut state = self.state.lock().expect("hubspot");
                let (tally, by_email) = &mut *state;
                tally.calls += 1;
                let Some(email) = request.inputs.get("email").and_then(Doc::as_str) else {
                    let error = "400 email is required".to_owned();
                    return Outcome::NotApplied(NotApplied { error, retryable: false, retry_after_ms: None });
                };
                *tally.effects.entry(request.action.to_owned()).or_default() += 1;
                let contact = Doc::object([
                    ("id", Doc::from(format!("contact_{}", by_email.len() + 1))),
                    ("email", Doc::from(email)),
                ]);
                by_email.insert(email.to_owned(), contact.clone());
                Outcome::Applied(contact)
            })
        }
        fn lookup<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
            Box::pin(async move {
                let mut state = self.state.lock().expect("hubspot");
                state.0.lookups += 1;
                let email = request.inputs.get("email").and_then(Doc::as_str).unwrap_or_default();
                match state.1.get(email) {
                    Some(contact) => LookupOutcome::Found(contact.clone()),
                    None => LookupOutcome::NotFound,
                }
            })
        }
    }

    /// A mailer with neither keys nor a search: at most once, never retried without a person.
    struct Mailer {
        actions: Vec<ActionSpec>,
        tally: Mutex<Tally>,
    }

    impl Connector for Mailer {
        fn name(&self) -> &str {
            "mailer"
        }
        fn actions(&self) -> &[ActionSpec] {
            &self.actions
        }
        fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
            Box::pin(async move {
                let mut tally = self.tally.lock().expect("mailer");
                tally.calls += 1;
                let sent = tally.effects.entry(request.action.to_owned()).or_default();
                *sent += 1;
                Outcome::Applied(Doc::object([("id", Doc::from(format!("msg_{sent}")))]))
            })
        }
        fn lookup<'a>(&'a self, _request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
            Box::pin(async { LookupOutcome::Failed("the mailer has no search".into()) })
        }
    }

    /// The "onboarding" agent: proposes one invoice line for the customer's plan. The engine records the plan before
    /// the first write and never asks again once it is recorded.
    struct Onboarding;

    impl Planner for Onboarding {
        fn plan<'a>(
            &'a self,
            _run_id: &'a str,
            _step_id: &'a str,
            inputs: &'a Doc,
        ) -> BoxFuture<'a, Result<Vec<PlannedAction>, String>> {
            Box::pin(async move {
                let customer = inputs.get("customer").cloned().unwrap_or(Doc::Null);
                let plan = inputs.get("plan").and_then(Doc::as_str).unwrap_or("free").to_owned();
                Ok(vec![PlannedAction {
                    action: "stripe.create_invoice".into(),
                    inputs: Doc::object([
                        ("customer", customer),
                        ("amount", Doc::from(0u64)),
                        ("memo", Doc::from(format!("onboarding for the {plan} plan"))),
                    ]),
                }])
            })
        }
    }

    /// `w1`'s observer: kills the worker once HubSpot has created the contact, before the outcome is recorded (the
    /// engine's drive then never moves again), and says so.
    struct DiesAfterTheContact {
        hubspot: Arc<HubSpot>,
        died: Arc<tokio::sync::Notify>,
    }

    impl Observer for DiesAfterTheContact {
        fn event(&self, _event: &Event<'_>) {}
        fn halt_at(&self, point: CrashPoint, _run_id: &str, _key: &Key) -> bool {
            let halt = point == CrashPoint::AfterCallBeforeRecord && self.hubspot.created();
            if halt {
                self.died.notify_one();
            }
            halt
        }
    }

    struct NoCrash;

    impl Observer for NoCrash {
        fn event(&self, _event: &Event<'_>) {}
    }

    struct World {
        stripe: Arc<Stripe>,
        hubspot: Arc<HubSpot>,
        mailer: Arc<Mailer>,
    }

    impl World {
        fn new() -> Self {
            let keyed = GuaranteeClass::Keyed { retention_ms: 24 * 3_600_000 };
            World {
                stripe: Arc::new(Stripe {
                    actions: vec![spec("create_customer", keyed, false), spec("create_invoice", keyed, false)],
                    state: Mutex::default(),
                    time_out_once: AtomicBool::new(true),
                }),
                hubspot: Arc::new(HubSpot {
                    actions: vec![spec("create_contact", GuaranteeClass::LookupBeforeCreate { lag_bound_ms: 0 }, true)],
                    state: Mutex::default(),
                }),
                mailer: Arc::new(Mailer {
                    actions: vec![spec("send_email", GuaranteeClass::AtMostOnce, false)],
                    tally: Mutex::default(),
                }),
            }
        }

        fn engine(&self, worker: &str, ledger: &Path, observer: Arc<dyn Observer>) -> Result<Engine, String> {
            let ledger = SqliteLedger::open(ledger, Options::default()).map_err(|e| e.to_string())?;
            let mut config = EngineConfig::new(worker);
            config.lease_ms = LEASE_MS;
            // Short waits for a demonstration: the first retry after a timeout, and how long a request still in
            // transit might land (the engine looks up an earlier create only after that).
            config.retry.backoff_ms_base = 20;
            config.retry.request_transit_ms_max = 200;
            let clock = Arc::new(RuntimeClock::new(wall_ms()));
            let mut engine = Engine::new(config, Arc::new(ledger), clock, observer);
            engine.register_connector(self.stripe.clone());
            engine.register_connector(self.hubspot.clone());
            engine.register_connector(self.mailer.clone());
            engine.register_planner("onboarding", Arc::new(Onboarding));
            let text = include_str!("../workflows/signup.toml");
            engine
                .register_workflow(Workflow::from_toml(text).map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
            Ok(engine)
        }

        /// Calls, lookups and effects so far, per API.
        fn tallies(&self) -> Vec<(&'static str, u64, u64, BTreeMap<String, u64>)> {
            let s = self.stripe.state.lock().expect("stripe");
            let h = self.hubspot.state.lock().expect("hubspot");
            let m = self.mailer.tally.lock().expect("mailer");
            vec![
                ("stripe", s.0.calls, s.0.lookups, s.0.effects.clone()),
                ("hubspot", h.0.calls, h.0.lookups, h.0.effects.clone()),
                ("mailer", m.calls, m.lookups, m.effects.clone()),
            ]
        }

        fn effects(&self) -> BTreeMap<String, u64> {
            let mut all = BTreeMap::new();
            for (api, _, _, effects) in self.tallies() {
                for (action, n) in effects {
                    all.insert(format!("{api}.{action}"), n);
                }
            }
            all
        }

        fn calls(&self) -> u64 {
            self.tallies().iter().map(|t| t.1 + t.2).sum()
        }
    }

    /// The wall clock the ledger's timestamps count from (the runtime's clock measures from here on).
    #[allow(clippy::disallowed_methods, reason = "a real process on real time: the production clock")]
    fn wall_ms() -> u64 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    /// The whole demonstration; returns what it prints. An effect that did not happen exactly once is an error.
    pub async fn run(ledger: Option<PathBuf>) -> Result<String, String> {
        // A temporary ledger is removed when `scratch` drops, last, whichever way the demonstration ends.
        let scratch = match &ledger {
            Some(_) => None,
            None => Some(tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?),
        };
        let path = ledger.unwrap_or_else(|| scratch.as_ref().expect("a scratch dir").path().join("signup.db"));
        let world = World::new();
        let trigger = Doc::object([
            ("email", Doc::from("ada@example.com")),
            ("name", Doc::from("Ada")),
            ("plan", Doc::from("team")),
            ("received_at", Doc::from(wall_ms())),
        ]);
        let mut out = format!("ledger: {}\n", path.display());

        let died = Arc::new(tokio::sync::Notify::new());
        let observer = DiesAfterTheContact { hubspot: world.hubspot.clone(), died: died.clone() };
        let w1 = world.engine("w1", &path, Arc::new(observer))?;
        let first = tokio::select! {
            biased;
            () = died.notified() => None,
            status = w1.start_run("signup", RUN, &trigger) => Some(status),
        };
        drop(w1);
        let replayed = match first {
            None => {
                writeln!(out, "w1: drove {RUN}; died after HubSpot created the contact, before recording it").ok();
                false
            }
            Some(Ok(status)) => {
                writeln!(out, "w1: {RUN} was already {} in this ledger: every step replays", status.as_str()).ok();
                true
            }
            Some(Err(e)) => return Err(format!("w1: {e}")),
        };

        let w2 = world.engine("w2", &path, Arc::new(NoCrash))?;
        for (run, status) in w2.resume_unfinished().await.map_err(|e| format!("w2: {e}"))? {
            writeln!(out, "w2: resumed {run}: {}", status.as_str()).ok();
        }
        let before_again = world.calls();
        let again = w2.start_run("signup", RUN, &trigger).await.map_err(|e| format!("w2: {e}"))?;
        let calls_again = world.calls() - before_again;
        writeln!(out, "w2: started {RUN} again: {} with {calls_again} API calls (every step replayed)", again.as_str())
            .ok();

        writeln!(out, "\n{:<10} {:>6} {:>8}  effects", "api", "calls", "lookups").ok();
        for (api, calls, lookups, effects) in world.tallies() {
            let effects: Vec<String> = effects.iter().map(|(a, n)| format!("{a} ×{n}")).collect();
            writeln!(out, "{api:<10} {calls:>6} {lookups:>8}  {}", effects.join(", ")).ok();
        }

        let effects = world.effects();
        let expected: BTreeMap<String, u64> = if replayed {
            BTreeMap::new()
        } else {
            [
                ("hubspot.create_contact", 1),
                ("mailer.send_email", 1),
                ("stripe.create_customer", 1),
                ("stripe.create_invoice", 2),
            ]
            .into_iter()
            .map(|(a, n)| (a.to_owned(), n))
            .collect()
        };
        if again != RunStatus::Succeeded || calls_again != 0 || effects != expected {
            return Err(format!(
                "{out}\nexpected {expected:?} once, a succeeded run and no call on the second start; got {effects:?}, \
                 {}, {calls_again} calls",
                again.as_str()
            ));
        }
        if replayed {
            writeln!(out, "\nno API was called: the ledger holds every step's output").ok();
        } else {
            writeln!(out, "\nevery effect happened exactly once").ok();
        }
        Ok(out)
    }

    #[cfg(test)]
    mod tests {
        /// The example's own check: run in a scratch ledger, every effect once; then again on the same ledger
        /// file, from a fresh process's point of view (new APIs), all replay.
        #[test]
        fn every_effect_happens_once_and_a_second_start_replays() {
            let dir = tempfile::tempdir().expect("a temp dir");
            let path = dir.path().join("signup.db");
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            let first = rt.block_on(super::run(Some(path.clone()))).expect("the first run");
            assert!(first.contains("died after HubSpot created the contact"), "{first}");
            assert!(first.contains("every effect happened exactly once"), "{first}");
            let second = rt.block_on(super::run(Some(path))).expect("the second run");
            assert!(second.contains("already succeeded"), "{second}");
            assert!(second.contains("no API was called"), "{second}");
        }
    }
}
