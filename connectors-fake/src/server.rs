//! The machinery every fake shares: a synchronous [`Server`] around a fake's business logic ([`Api`]), and the
//! async adapter [`FakeConnector`] that makes it an `engine::connector::Connector`.
//!
//! ## Timing model
//! A call draws its [`Draws`] (latency, at most one fault, lag) from the adapter's [`Rng`], then:
//! 1. sleeps the request half of the latency (`tokio::time::sleep`: simulated under madsim);
//! 2. the request reaches the API: [`Server::handle`] runs at `now_ms` read from the injected clock, and a write
//!    commits right there, in state shared by every worker (`Arc<Mutex<Server>>` owned by the simulator's world),
//!    with `committed_ms` = arrival time. Its [`Effect`] (and webhook event) go to the sink at once;
//! 3. sleeps the response half (or, when the response is lost, until `timeout_ms` after the send) and returns.
//!
//! A worker killed during step 1 never sent its request (as with a connection dropped before the server read it);
//! one killed during step 3 leaves the write committed. That is the real API's behaviour, and it costs two timer
//! sleeps per call and no spawned task. A keyed API holds a key "in flight" from arrival until the response leaves
//! (`arrival + response_ms`): a same-key request arriving in between gets `KeyInFlight` (409).
//!
//! ## Faults (see [`crate::profile`])
//! Reset before send, 429 and 503 are answered before the business logic runs: nothing commits, nothing is stored
//! under a key. A timeout after commit runs the business logic and then loses the response
//! (`Indeterminate("timeout")`), whatever the answer was. An error after commit strikes only a request that
//! committed something: the caller gets `Indeterminate` (a keyed API also stores the 500 under the key).
//! The rate limit (`rate_limit_per_s`) counts requests that reach the API in fixed one-second windows.

use crate::one_or_more::OneOrMore;
use crate::profile::{Draws, Fault, FaultProfile};
use crate::rng::Rng;
use crate::truth::{Effect, EffectSink};
use crate::webhooks::WebhookEvent;
use engine::clock::Clock;
use engine::connector::{ActionSpec, BoxFuture, Connector, LookupOutcome, NotApplied, Outcome, Request, pin_in_place};
use engine::doc::{Doc, Obj, Str};
use engine::ledger::CompactString;
use smallvec::{SmallVec, smallvec};
// A spin lock: a fake's state is locked around every request but never contended in the simulation (one thread), and
// releasing a spin lock is a plain store where std's `Mutex` swaps atomically (docs/speed.md, stop 27).
use spin::Mutex;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// The answer a keyed API stores for an error after commit, and the outcome the caller sees.
pub const ERROR_AFTER_COMMIT: &str = "500 internal server error";
pub const TIMEOUT: &str = "timeout";
pub const RESET_BEFORE_SEND: &str = "connection reset before send";
pub const RATE_LIMITED: &str = "429 too many requests";
pub const FAIL_BEFORE_COMMIT: &str = "503 service unavailable";

/// What the API did with one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    /// What the caller sees (before the response half of the latency).
    pub outcome: Outcome,
    /// The write this request committed, if any (ground truth).
    pub effect: Option<Effect>,
    /// The webhook event of that change, if the API sends webhooks.
    pub event: Option<WebhookEvent>,
}

impl Handled {
    pub fn outcome(outcome: Outcome) -> Self {
        Self { outcome, effect: None, event: None }
    }

    /// The answer to a request for an action this API does not have: a definite 404, never retried.
    pub fn unknown_action(request: &Request<'_>) -> Self {
        Self::outcome(not_applied(&format!("404 unknown action `{}`", request.action), false, None))
    }
}

/// The object an API creates: `members`, then the request's `fields` that are present in its inputs, copied by name
/// (`email` of a customer, `amount` of a ledger entry). A created object carries the fields its API is documented to
/// return, not a copy of every parameter: the inputs tree is the caller's, and a deep copy of it in every stored
/// object was a tenth of the simulation's allocations.
pub fn created_object<const N: usize>(members: [(&'static str, Doc); N], inputs: &Doc, fields: &[&'static str]) -> Doc {
    let mut all: Vec<(Str, Doc)> = Vec::with_capacity(N + fields.len());
    all.extend(members.into_iter().map(|(name, value)| (Str::from_static(name), value)));
    for &field in fields {
        if let Some(value) = inputs.get(field) {
            all.push((Str::from_static(field), value.clone()));
        }
    }
    Doc::Object(Obj::new(all))
}

/// A definite, never-stored failure.
pub fn not_applied(error: &str, retryable: bool, retry_after_ms: Option<u64>) -> Outcome {
    Outcome::NotApplied(NotApplied { error: error.to_string(), retryable, retry_after_ms })
}

/// What the business logic of one request gets to know besides the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// Arrival time: a write commits now.
    pub now_ms: u64,
    /// What this request creates becomes searchable `lag_ms` after it commits.
    pub lag_ms: u64,
    /// The response leaves the API `response_ms` after arrival (a keyed API holds the key in flight until then).
    pub response_ms: u64,
    /// The API will answer 500 if this request commits.
    pub error_after_commit: bool,
}

/// A fake API's business logic: a synchronous state machine with explicit times.
pub trait Api: Send + 'static {
    /// The connector's name.
    fn name(&self) -> &Arc<str>;
    fn actions(&self) -> &[ActionSpec];
    /// Runs `request`, which reached the API and was not failed before executing.
    fn execute(&mut self, cx: Context, request: &Request<'_>) -> Handled;
    /// Searches for an earlier create of this write (what the real search would see at `now_ms`). Every fake's
    /// failed search is retryable, with no retry-after: the simulation models transient search failures (and the
    /// engine never searches for an action without a lookup, which some fakes answer with a failure too).
    fn search(&mut self, now_ms: u64, request: &Request<'_>) -> LookupOutcome;
    /// Drops every record of `run_id` (keys, objects): the simulator calls this once the run is finished and
    /// checked, so state stays bounded.
    fn forget_run(&mut self, run_id: &str);
    /// How many records the API holds (keys plus objects), to show that memory stays bounded.
    fn record_count(&self) -> usize;
}

/// Fixed one-second windows.
#[derive(Debug, Clone, Default)]
struct RateLimiter {
    window_start_ms: u64,
    admitted_count: u64,
}

impl RateLimiter {
    const WINDOW_MS: u64 = 1_000;

    /// `None` if admitted, else the wait until the window ends.
    fn admit(&mut self, now_ms: u64, per_s: u64) -> Option<u64> {
        if per_s == 0 {
            return None;
        }
        if now_ms >= self.window_start_ms + Self::WINDOW_MS {
            self.window_start_ms = now_ms - now_ms % Self::WINDOW_MS;
            self.admitted_count = 0;
        }
        if self.admitted_count < per_s {
            self.admitted_count += 1;
            None
        } else {
            Some((self.window_start_ms + Self::WINDOW_MS).saturating_sub(now_ms).max(1))
        }
    }
}

/// A fake API with its faults: the synchronous core the contract suite drives with explicit times.
#[derive(Debug)]
pub struct Server<A> {
    api: A,
    profile: FaultProfile,
    limiter: RateLimiter,
}

impl<A: Api> Server<A> {
    /// Panics on an invalid profile: validate profiles where they are read, with [`FaultProfile::validate`].
    pub fn new(api: A, profile: FaultProfile) -> Self {
        if let Err(error) = profile.validate() {
            panic!("invalid fault profile for connector `{}`: {error}", api.name());
        }
        Self { api, profile, limiter: RateLimiter::default() }
    }

    pub fn api(&self) -> &A {
        &self.api
    }

    pub fn api_mut(&mut self) -> &mut A {
        &mut self.api
    }

    pub fn profile(&self) -> &FaultProfile {
        &self.profile
    }

    /// A fault that stops the request before the business logic runs, or the rate limit.
    fn refuse(&mut self, now_ms: u64, fault: Fault) -> Option<Outcome> {
        match fault {
            Fault::ResetBeforeSend => return Some(not_applied(RESET_BEFORE_SEND, true, None)),
            Fault::RateLimited => return Some(not_applied(RATE_LIMITED, true, Some(self.profile.retry_after_ms))),
            Fault::FailBeforeCommit => return Some(not_applied(FAIL_BEFORE_COMMIT, true, None)),
            Fault::None | Fault::TimeoutAfterCommit | Fault::ErrorAfterCommit => {}
        }
        let retry_after_ms = self.limiter.admit(now_ms, self.profile.rate_limit_per_s)?;
        Some(not_applied(RATE_LIMITED, true, Some(retry_after_ms)))
    }

    /// Handles one call that reaches the API at `now_ms` with `draws`.
    pub fn handle(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> Handled {
        if let Some(outcome) = self.refuse(now_ms, draws.fault) {
            return Handled::outcome(outcome);
        }
        let cx = Context {
            now_ms,
            lag_ms: draws.lag_ms,
            response_ms: draws.response_ms,
            error_after_commit: draws.fault == Fault::ErrorAfterCommit,
        };
        let mut handled = self.api.execute(cx, request);
        if cx.error_after_commit && handled.effect.is_some() {
            handled.outcome = Outcome::Indeterminate(ERROR_AFTER_COMMIT.to_string());
        }
        if draws.fault == Fault::TimeoutAfterCommit {
            handled.outcome = Outcome::Indeterminate(TIMEOUT.to_string());
        }
        handled
    }

    /// Handles one lookup that reaches the API at `now_ms`; every fault makes the search fail. These failures are
    /// transient (retryable) and carry no retry-after, a rate limit's included: the fakes model search failures that
    /// pass, and the simulation has always waited out a failed search's backoff alone.
    pub fn lookup(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> LookupOutcome {
        if let Some(Outcome::NotApplied(refused)) = self.refuse(now_ms, draws.fault) {
            return LookupOutcome::Failed(NotApplied::retryable(refused.error));
        }
        match draws.fault {
            Fault::TimeoutAfterCommit => LookupOutcome::Failed(NotApplied::retryable(TIMEOUT)),
            Fault::ErrorAfterCommit => LookupOutcome::Failed(NotApplied::retryable(ERROR_AFTER_COMMIT)),
            _ => self.api.search(now_ms, request),
        }
    }

    pub fn forget_run(&mut self, run_id: &str) {
        self.api.forget_run(run_id);
    }
}

/// The shared state of one fake API: owned by the simulator's world, outside any worker.
pub type SharedServer<A> = Arc<Mutex<Server<A>>>;

/// Wraps a fake for sharing between adapters.
pub fn shared<A: Api>(api: A, profile: FaultProfile) -> SharedServer<A> {
    Arc::new(Mutex::new(Server::new(api, profile)))
}

/// A fake API as an engine connector: samples draws from its own [`Rng`], sleeps on the runtime's timer, reads time
/// from the injected clock, and tells the sink every committed effect.
pub struct FakeConnector<A> {
    name: Arc<str>,
    actions: Vec<ActionSpec>,
    server: SharedServer<A>,
    profile: FaultProfile,
    /// Set by [`Fake::heal`]: faults are off from then on.
    healed: AtomicBool,
    rng: Mutex<Rng>,
    clock: Arc<dyn Clock>,
    sink: Arc<dyn EffectSink>,
}

impl<A: Api> FakeConnector<A> {
    /// An adapter over a new server.
    pub fn new(api: A, profile: FaultProfile, rng: Rng, clock: Arc<dyn Clock>, sink: Arc<dyn EffectSink>) -> Self {
        Self::with_server(shared(api, profile), rng, clock, sink)
    }

    /// An adapter over an existing server (one per worker, all sharing the API's state).
    pub fn with_server(server: SharedServer<A>, rng: Rng, clock: Arc<dyn Clock>, sink: Arc<dyn EffectSink>) -> Self {
        let (name, actions, profile) = {
            let s = server.lock();
            (s.api.name().clone(), s.api.actions().to_vec(), s.profile.clone())
        };
        Self { name, actions, server, profile, rng: Mutex::new(rng), clock, sink, healed: AtomicBool::new(false) }
    }

    pub fn server(&self) -> &SharedServer<A> {
        &self.server
    }

    /// Drops every record of a finished run (see [`Api::forget_run`]).
    pub fn forget_run(&self, run_id: &str) {
        self.server.lock().forget_run(run_id);
    }
}

async fn sleep_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

impl<A: Api> Connector for FakeConnector<A> {
    fn name(&self) -> &str {
        &self.name
    }

    fn actions(&self) -> &[ActionSpec] {
        &self.actions
    }

    fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome> {
        pin_in_place(move || async move {
            let draws = Fake::draw(self);
            sleep_ms(draws.request_ms).await;
            let outcome = self.serve_call(&request, &draws, self.clock.now_ms());
            sleep_ms(self.wait_ms(&draws)).await;
            outcome
        })
    }

    fn lookup<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, LookupOutcome> {
        pin_in_place(move || async move {
            let draws = Fake::draw(self);
            sleep_ms(draws.request_ms).await;
            let found = self.serve_lookup(&request, &draws, self.clock.now_ms());
            sleep_ms(self.wait_ms(&draws)).await;
            found
        })
    }
}

/// `prefix` followed by `n` in decimal (`cus_12`): the ids the fakes mint on every create. `format!` goes through
/// the formatting machinery, several times the work for a string this simple. Held inline (`CompactString`, up to
/// 24 bytes): an id that only names an object in an effect or an event allocates nothing.
pub fn numbered(prefix: &str, n: u64) -> CompactString {
    let mut digits = itoa::Buffer::new();
    let mut out = CompactString::new(prefix);
    out.push_str(digits.format(n));
    out
}

/// The engine key as the fakes send and store it (idempotency keys, metadata): lowercase hex, on the stack, so a
/// lookup by it allocates nothing and a copy into a record allocates once.
pub fn key_hex(key: &engine::key::Key) -> engine::key::KeyHex {
    key.hex()
}

/// Records of created objects that a search can find by one term, indexed per run so finished runs can be dropped.
///
/// A term is held as its 128-bit XXH3 fingerprint, not as text: the terms are engine keys spelled in hex (64
/// characters) and emails, and as strings each insert made two heap blocks (the term under itself and under its run)
/// that a search and the run's end then read, cold. Two different terms share a fingerprint with a chance of about
/// 2^-128 per pair, far below anything a simulation of 10^8 steps meets; the memory ledger keys its inbox the same
/// way. A fingerprint is a function of the term alone, so searches find exactly what they found by text.
#[derive(Debug, Default)]
pub struct SearchIndex {
    // Looked up, never iterated in an order that matters: fixed-seed hash maps (`engine::fastmap`).
    /// The objects under one term, oldest first: almost always one (a second is a duplicate).
    by_term: engine::fastmap::FastMap<u128, OneOrMore<Indexed>>,
    /// Each run's terms (a run indexes one or two objects per API: held inline). Run ids up to 24 bytes are inline.
    terms_by_run: engine::fastmap::FastMap<CompactString, SmallVec<[u128; 2]>>,
}

/// One object in a [`SearchIndex`] (its id is in its record).
#[derive(Debug, Clone)]
pub struct Indexed {
    pub visible_ms: u64,
    /// Shared with the webhook event and (payments) the stored response, so a create copies its record once.
    pub record: Doc,
}

/// The 128-bit fingerprint a fake holds a long identifier by (a [`SearchIndex`]'s terms, payments' idempotency keys):
/// XXH3-128 of its bytes, inline where the text would be a heap block read cold at every lookup.
pub(crate) fn fingerprint(term: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128(term.as_bytes())
}

impl SearchIndex {
    pub fn insert(&mut self, run_id: &str, term: &str, object: Indexed) {
        let term = fingerprint(term);
        // The run's entry is looked up before one is made: `entry` would copy the run id on every insert.
        match self.terms_by_run.get_mut(run_id) {
            Some(terms) => terms.push(term),
            None => {
                self.terms_by_run.insert(run_id.into(), smallvec![term]);
            }
        }
        match self.by_term.entry(term) {
            Entry::Occupied(mut found) => found.get_mut().push(object),
            Entry::Vacant(slot) => {
                slot.insert(OneOrMore::new(object));
            }
        }
    }

    /// The oldest object under `term` that a search at `now_ms` sees.
    pub fn search(&self, term: &str, now_ms: u64) -> Option<&Indexed> {
        self.by_term.get(&fingerprint(term))?.iter().find(|o| o.visible_ms <= now_ms)
    }

    /// The oldest object under `term`, visible or not (what the primary store knows).
    pub fn committed(&self, term: &str) -> Option<&Indexed> {
        self.by_term.get(&fingerprint(term)).map(OneOrMore::first)
    }

    pub fn forget_run(&mut self, run_id: &str) {
        for term in self.terms_by_run.remove(run_id).unwrap_or_default() {
            self.by_term.remove(&term);
        }
    }

    pub fn len(&self) -> usize {
        self.by_term.values().map(OneOrMore::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_term.is_empty()
    }
}

/// A [`Server`] of any fake, as a trait object (for the contract suite and for a world holding many fakes).
pub trait DynServer: Send {
    fn name(&self) -> &str;
    fn actions(&self) -> &[ActionSpec];
    fn profile(&self) -> &FaultProfile;
    fn handle(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> Handled;
    fn lookup(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> LookupOutcome;
    fn forget_run(&mut self, run_id: &str);
    fn record_count(&self) -> usize;
}

impl<A: Api> DynServer for Server<A> {
    fn name(&self) -> &str {
        self.api.name()
    }

    fn actions(&self) -> &[ActionSpec] {
        self.api.actions()
    }

    fn profile(&self) -> &FaultProfile {
        &self.profile
    }

    fn handle(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> Handled {
        Server::handle(self, now_ms, request, draws)
    }

    fn lookup(&mut self, now_ms: u64, request: &Request<'_>, draws: &Draws) -> LookupOutcome {
        Server::lookup(self, now_ms, request, draws)
    }

    fn forget_run(&mut self, run_id: &str) {
        Server::forget_run(self, run_id);
    }

    fn record_count(&self) -> usize {
        self.api.record_count()
    }
}

/// A fake connector as the simulator holds it: an engine connector plus the memory controls.
pub trait Fake: Connector {
    /// Drops every record of a finished run (see [`Api::forget_run`]).
    fn forget_run(&self, run_id: &str);
    /// Turns every fault off for good (the simulation's heal phase); latency and ordinary lag stay.
    fn heal(&self);
    /// Records held (keys plus objects).
    fn record_count(&self) -> usize;

    // A call and a lookup taken apart at the request's arrival, for a caller that delivers requests itself (the
    // simulator's network): `call` is `draw`, a sleep of `request_ms`, `serve_call` at that instant, a sleep of
    // `wait_ms`. The arrival time is given, not read from the clock, so a caller may serve a request later than it
    // arrives (the simulator serves it before anything can observe the API at a later time) with the same result.

    /// The latency, fault and lag of the next request, drawn when it is sent.
    fn draw(&self) -> Draws;
    /// How long after its arrival the answer to a request with `draws` reaches the caller: the response half, or
    /// (a lost response) the rest of the caller's timeout.
    fn wait_ms(&self, draws: &Draws) -> u64;
    /// Serves a call that reaches the API at `at_ms`: a write commits, and its effect and event go to the sink.
    fn serve_call(&self, request: &Request<'_>, draws: &Draws, at_ms: u64) -> Outcome;
    /// Serves a lookup that reaches the API at `at_ms`.
    fn serve_lookup(&self, request: &Request<'_>, draws: &Draws, at_ms: u64) -> LookupOutcome;
}

impl<A: Api> Fake for FakeConnector<A> {
    fn forget_run(&self, run_id: &str) {
        FakeConnector::forget_run(self, run_id);
    }

    fn draw(&self) -> Draws {
        let mut rng = self.rng.lock();
        let mut draws = self.profile.sample_draws(&mut rng);
        if self.healed.load(std::sync::atomic::Ordering::Relaxed) {
            // The same draws as before (so healing does not shift the random stream), with the fault and the
            // incident-size lag taken away: latency and ordinary read-after-write lag are how the API works.
            draws.fault = Fault::None;
            draws.lag_ms = draws.lag_ms.min(self.profile.lag_ms_tail_max);
        }
        draws
    }

    fn wait_ms(&self, draws: &Draws) -> u64 {
        if draws.fault == Fault::TimeoutAfterCommit {
            self.profile.timeout_ms.saturating_sub(draws.request_ms)
        } else {
            draws.response_ms
        }
    }

    fn serve_call(&self, request: &Request<'_>, draws: &Draws, at_ms: u64) -> Outcome {
        let Handled { outcome, effect, event } = self.server.lock().handle(at_ms, request, draws);
        if let Some(effect) = effect {
            self.sink.effect(effect);
        }
        if let Some(event) = event {
            self.sink.webhook_event(event, at_ms);
        }
        outcome
    }

    fn serve_lookup(&self, request: &Request<'_>, draws: &Draws, at_ms: u64) -> LookupOutcome {
        self.server.lock().lookup(at_ms, request, draws)
    }

    fn heal(&self) {
        self.healed.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    fn record_count(&self) -> usize {
        self.server.lock().api.record_count()
    }
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn numbered_ids_match_format() {
        for n in [0, 1, 9, 10, 99, 12_345, 1_000_000, u64::MAX] {
            assert_eq!(numbered("cus_", n), format!("cus_{n}"));
        }
        assert_eq!(numbered("", 7), "7");
    }
}
