//! Connectors: the engine's adapters to external APIs.
//!
//! A connector declares, per action, its [`GuaranteeClass`]; the executor's behaviour is a function of that class
//! and the three-valued [`Outcome`] of each call (as in Jepsen histories: applied, not applied, indeterminate).

use crate::doc::Doc;
use crate::key::Key;
use std::future::Future;
use std::pin::Pin;

/// A boxed future, so connectors can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// `Box::pin(make())`, with the future built in its heap block: the block is allocated before `make` runs, so the
/// optimiser can write the future's captured values straight into it (release builds do; `docs/speed.md`, stop 17).
/// `Box::pin(future)` builds the whole future on the stack first and then copies all of it (its size is that of its
/// largest state, mostly not yet written) into a block that is usually cold: a cache miss per 64 bytes. The simulator
/// paid that per drive and per connector call. The result is the same either way; only the copy differs.
#[inline(always)]
pub fn pin_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// What an action can promise about repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum GuaranteeClass {
    /// The API honours idempotency keys and keeps them for `retention_ms`.
    Keyed { retention_ms: u64 },
    /// No keys, but the engine can search for an earlier create; a create becomes searchable within `lag_bound_ms`
    /// (the connector's documented visibility-lag bound).
    LookupBeforeCreate { lag_bound_ms: u64 },
    /// Neither keys nor a lookup: never retried automatically after an indeterminate outcome.
    AtMostOnce,
}

impl GuaranteeClass {
    pub fn name(&self) -> &'static str {
        match self {
            GuaranteeClass::Keyed { .. } => "keyed",
            GuaranteeClass::LookupBeforeCreate { .. } => "lookup-before-create",
            GuaranteeClass::AtMostOnce => "at-most-once",
        }
    }
}

/// One action of a connector.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ActionSpec {
    pub name: String,
    pub class: GuaranteeClass,
    /// A keyed action may also offer a lookup (used when a retry falls outside the key retention window).
    /// Always true for `LookupBeforeCreate`, false for `AtMostOnce`.
    pub has_lookup: bool,
    /// How long after a write its lookup is guaranteed to see it, for a keyed action's lookup (a search index that
    /// lags, like a metadata search). `LookupBeforeCreate` carries its bound in the class; 0 means immediate.
    #[serde(default)]
    pub lookup_lag_bound_ms: u64,
}

impl ActionSpec {
    /// How long after a write its lookup is guaranteed to see it (whatever the class).
    pub fn lookup_lag_bound(&self) -> u64 {
        match self.class {
            GuaranteeClass::LookupBeforeCreate { lag_bound_ms } => lag_bound_ms,
            _ => self.lookup_lag_bound_ms,
        }
    }

    /// Are automatic retries on by default for this action (keyed and lookup-before-create only)?
    pub fn auto_retry(&self) -> bool {
        !matches!(self.class, GuaranteeClass::AtMostOnce)
    }
}

/// One call to a connector.
///
/// JSON that crosses the connector boundary (the inputs, an applied call's answer, a lookup's find) is a [`Doc`],
/// shared, not copied: a simulated connector hands the request to another task and keeps the answer it gives, and
/// cloning a `Doc` is a reference count.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub action: &'a str,
    pub inputs: &'a Doc,
    /// The key of this write; sent as the idempotency key where the API takes one, put in metadata where it can be
    /// searched for.
    pub key: &'a Key,
    pub run_id: &'a str,
    /// Counts from 1.
    pub attempt: u32,
}

/// A definite failure: the call did not apply. A failed lookup ([`LookupOutcome::Failed`]) says the same of the
/// search, which wrote nothing and answered nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApplied {
    pub error: String,
    /// May the same request succeed later (a 503, a 429, a reset before it left)? False when no repeat can (a 400,
    /// a 403, a 404): the engine then does not retry it.
    pub retryable: bool,
    /// The API's retry-after, if it gave one: no retry is sent sooner.
    pub retry_after_ms: Option<u64>,
}

impl NotApplied {
    /// A failure the same request may get past later, with no retry-after.
    pub fn retryable(error: impl Into<String>) -> Self {
        Self { error: error.into(), retryable: true, retry_after_ms: None }
    }

    /// A failure no repeat of the request can get past.
    pub fn permanent(error: impl Into<String>) -> Self {
        Self { error: error.into(), retryable: false, retry_after_ms: None }
    }
}

/// What one call did, as far as the caller can know.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Applied, with the API's answer.
    Applied(Doc),
    /// Definitely not applied.
    NotApplied(NotApplied),
    /// Maybe applied: a timeout, a reset after send, a 5xx after the request left.
    Indeterminate(String),
    /// The key was used before with different parameters (`idempotency_error`): a bug signal. The step fails
    /// loudly; it is never "fixed" by retrying under a new key.
    KeyReusedWithDifferentPayload(String),
    /// A concurrent request with the same key is in flight (409): wait and retry with the same key.
    KeyInFlight,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum LookupOutcome {
    /// An earlier create of this write, with the API's record of it (adopted as the output).
    Found(Doc),
    NotFound,
    /// The search itself failed; nothing can be concluded about an earlier create. Like a call's definite failure
    /// it says whether searching again may succeed, and when: a search that cannot ever succeed (a bad query, a 403)
    /// is `retryable: false`, and a step whose earlier attempts all definitely did not apply then fails at once
    /// instead of spending its attempts (after an attempt that may have applied, the run pauses for a person at once).
    Failed(NotApplied),
}

/// An adapter to an external API.
pub trait Connector: Send + Sync {
    /// The connector's name, the first half of `connector.action` in workflows.
    fn name(&self) -> &str;
    fn actions(&self) -> &[ActionSpec];
    fn call<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, Outcome>;
    /// Searches for an earlier create of this write. Only called for actions with `has_lookup`.
    fn lookup<'a>(&'a self, request: Request<'a>) -> BoxFuture<'a, LookupOutcome>;

    fn action(&self, name: &str) -> Option<&ActionSpec> {
        self.actions().iter().find(|a| a.name == name)
    }
}
