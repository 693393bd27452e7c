//! Fault profiles: every knob of a fake's misbehaviour, with names that put units last.
//!
//! [`FaultProfile::default()`] is a perfectly behaved API: no latency, no faults, no lag, no rate limit, keys kept
//! 24 h. Each fault is turned up by its own knob; [`FaultProfile::validate`] names the first bad knob.
//!
//! Per call the fakes draw one [`Draws`] from the profile: the latency (split into the request half and the response
//! half), at most one fault, and the read-after-write lag of whatever the call creates. Faults are mutually exclusive
//! and drawn with one uniform number in the order reset, rate limit, fail-before-commit, timeout-after-commit,
//! error-after-commit, so each fault at probability one produces exactly its own behaviour (validation requires the
//! fault probabilities to sum to at most one).
//!
//! The lag distribution is a mixture: with `incident_p` an incident lag uniform in
//! `[lag_ms_tail_max, incident_lag_ms_max]`; else with `lag_tail_p` a tail lag uniform in
//! `[lag_ms_median, lag_ms_tail_max]`; else an exponential body with median `lag_ms_median`, capped at
//! `lag_ms_tail_max`. Outside incidents `lag_ms_tail_max` is therefore a true bound (the bound a connector documents),
//! and incidents exceed it (Stripe: "normally searchable within a minute, up to an hour late during incidents").

use crate::rng::Rng;

/// One day in milliseconds.
pub const DAY_MS: u64 = 86_400_000;

/// Every knob of a fake API. Unset knobs keep their default (serde `default`); an unknown knob is an error.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultProfile {
    /// Median round-trip latency of one call (log-normal); 0 means instantaneous.
    pub latency_ms_median: u64,
    /// 99th percentile of the round trip; at or below the median means a constant latency.
    pub latency_ms_p99: u64,
    /// Connection reset before the request was sent: `NotApplied`, retryable; the API never saw it.
    pub reset_before_send_p: f64,
    /// A 429 with `Retry-After: retry_after_ms`: `NotApplied`, retryable, never stored under a key.
    pub rate_limit_p: f64,
    pub retry_after_ms: u64,
    /// A 503 the API answers before executing anything: `NotApplied`, retryable, never stored under a key.
    pub fail_before_commit_p: f64,
    /// The write commits, the response is lost: the call returns `Indeterminate("timeout")` `timeout_ms` after it
    /// was sent.
    pub timeout_after_commit_p: f64,
    pub timeout_ms: u64,
    /// The write commits, the API answers 500: `Indeterminate`. A keyed API stores the 500 under the key and replays
    /// it to every retry with that key while the key is retained.
    pub error_after_commit_p: f64,
    /// Read-after-write lag of searches (see the module doc for the mixture).
    pub lag_ms_median: u64,
    pub lag_tail_p: f64,
    pub lag_ms_tail_max: u64,
    pub incident_p: f64,
    pub incident_lag_ms_max: u64,
    /// How long a keyed API keeps an idempotency key and its stored response.
    pub key_retention_ms: u64,
    /// Requests admitted per one-second window; 0 means unlimited. Requests over the limit get a 429 with the
    /// rest of the window as `retry_after_ms`.
    pub rate_limit_per_s: u64,
    /// Webhook delivery knobs.
    pub webhooks: WebhookProfile,
    /// The lag bound the connector's integration declares to the engine: how long after an attempt the engine waits
    /// before a lookup may conclude "not created". Unset: the documented bound ([`FaultProfile::lag_bound_ms`]).
    /// Setting it apart from the lag itself is what `flowsim sweep` does, to price the safeguard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup_wait_ms: Option<u64>,
}

impl Default for FaultProfile {
    fn default() -> Self {
        Self {
            latency_ms_median: 0,
            latency_ms_p99: 0,
            reset_before_send_p: 0.0,
            rate_limit_p: 0.0,
            retry_after_ms: 1_000,
            fail_before_commit_p: 0.0,
            timeout_after_commit_p: 0.0,
            timeout_ms: 30_000,
            error_after_commit_p: 0.0,
            lag_ms_median: 0,
            lag_tail_p: 0.0,
            lag_ms_tail_max: 0,
            incident_p: 0.0,
            incident_lag_ms_max: 0,
            key_retention_ms: DAY_MS,
            rate_limit_per_s: 0,
            webhooks: WebhookProfile::default(),
            lookup_wait_ms: None,
        }
    }
}

/// Webhook delivery knobs (Stripe: at least once, retried with backoff for up to 3 days, no ordering, sometimes two
/// distinct events for one change).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookProfile {
    /// A second delivery of the same event id `duplicate_spacing_ms` after a successful one.
    pub duplicate_p: f64,
    pub duplicate_spacing_ms: u64,
    /// The receiver fails a delivery (modelled outage or error); the sender redelivers with backoff.
    pub receiver_failure_p: f64,
    /// First redelivery delay; it doubles per attempt up to `redelivery_backoff_ms_max`.
    pub redelivery_backoff_ms_base: u64,
    pub redelivery_backoff_ms_max: u64,
    /// The sender gives up when the next attempt would fall later than this after the first.
    pub redelivery_ms_max: u64,
    /// Each first delivery is delayed uniformly in `[0, reorder_ms_max]`, so events overtake each other.
    pub reorder_ms_max: u64,
    /// Two distinct event objects (two event ids) for one change.
    pub twin_event_p: f64,
}

impl Default for WebhookProfile {
    fn default() -> Self {
        Self {
            duplicate_p: 0.0,
            duplicate_spacing_ms: 1_000,
            receiver_failure_p: 0.0,
            redelivery_backoff_ms_base: 60_000,
            redelivery_backoff_ms_max: 6 * 3_600_000,
            redelivery_ms_max: 3 * DAY_MS,
            reorder_ms_max: 0,
            twin_event_p: 0.0,
        }
    }
}

/// A knob with a value that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A probability outside `0..=1` (or not a number).
    ProbabilityOutOfRange { knob: &'static str },
    /// Fault probabilities are exclusive and must sum to at most one.
    FaultProbabilitiesExceedOne,
    /// `knob` must be at least `other`.
    LessThan { knob: &'static str, other: &'static str },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::ProbabilityOutOfRange { knob } => {
                write!(f, "fault profile: `{knob}` must be a probability in 0..=1")
            }
            Error::FaultProbabilitiesExceedOne => write!(
                f,
                "fault profile: reset_before_send_p + rate_limit_p + fail_before_commit_p + timeout_after_commit_p + \
                 error_after_commit_p must be at most 1"
            ),
            Error::LessThan { knob, other } => write!(f, "fault profile: `{knob}` must be at least `{other}`"),
        }
    }
}

impl std::error::Error for Error {}

fn check_p(knob: &'static str, p: f64) -> Result<(), Error> {
    if (0.0..=1.0).contains(&p) { Ok(()) } else { Err(Error::ProbabilityOutOfRange { knob }) }
}

impl FaultProfile {
    /// A profile with every knob at zero except key retention: a perfectly behaved API.
    pub fn perfect() -> Self {
        Self::default()
    }

    /// The first bad knob, if any.
    pub fn validate(&self) -> Result<(), Error> {
        let probabilities = [
            ("reset_before_send_p", self.reset_before_send_p),
            ("rate_limit_p", self.rate_limit_p),
            ("fail_before_commit_p", self.fail_before_commit_p),
            ("timeout_after_commit_p", self.timeout_after_commit_p),
            ("error_after_commit_p", self.error_after_commit_p),
            ("lag_tail_p", self.lag_tail_p),
            ("incident_p", self.incident_p),
            ("webhooks.duplicate_p", self.webhooks.duplicate_p),
            ("webhooks.receiver_failure_p", self.webhooks.receiver_failure_p),
            ("webhooks.twin_event_p", self.webhooks.twin_event_p),
        ];
        for (knob, p) in probabilities {
            check_p(knob, p)?;
        }
        let fault_sum = self.reset_before_send_p
            + self.rate_limit_p
            + self.fail_before_commit_p
            + self.timeout_after_commit_p
            + self.error_after_commit_p;
        if fault_sum > 1.0 + 1e-9 {
            return Err(Error::FaultProbabilitiesExceedOne);
        }
        if self.lag_tail_p + self.incident_p > 1.0 + 1e-9 {
            return Err(Error::ProbabilityOutOfRange { knob: "lag_tail_p + incident_p" });
        }
        if self.latency_ms_p99 != 0 && self.latency_ms_p99 < self.latency_ms_median {
            return Err(Error::LessThan { knob: "latency_ms_p99", other: "latency_ms_median" });
        }
        if self.lag_ms_tail_max < self.lag_ms_median {
            return Err(Error::LessThan { knob: "lag_ms_tail_max", other: "lag_ms_median" });
        }
        if self.incident_p > 0.0 && self.incident_lag_ms_max < self.lag_ms_tail_max {
            return Err(Error::LessThan { knob: "incident_lag_ms_max", other: "lag_ms_tail_max" });
        }
        let w = &self.webhooks;
        if w.redelivery_backoff_ms_max < w.redelivery_backoff_ms_base {
            return Err(Error::LessThan {
                knob: "webhooks.redelivery_backoff_ms_max",
                other: "webhooks.redelivery_backoff_ms_base",
            });
        }
        if w.receiver_failure_p > 0.0 && w.redelivery_backoff_ms_base == 0 {
            return Err(Error::LessThan { knob: "webhooks.redelivery_backoff_ms_base", other: "1" });
        }
        Ok(())
    }

    /// The bound on read-after-write lag outside incidents: what a connector documents as its lag bound.
    pub fn lag_bound_ms(&self) -> u64 {
        self.lag_ms_tail_max.max(self.lag_ms_median)
    }

    /// The lag bound declared to the engine: `lookup_wait_ms` when set, else the documented bound.
    pub fn declared_lag_bound_ms(&self) -> u64 {
        self.lookup_wait_ms.unwrap_or_else(|| self.lag_bound_ms())
    }

    /// One read-after-write lag (see the module doc). Draws nothing when every lag knob is zero.
    pub fn sample_lag_ms(&self, rng: &mut Rng) -> u64 {
        if self.lag_ms_median == 0 && self.lag_ms_tail_max == 0 && self.incident_lag_ms_max == 0 {
            return 0;
        }
        let u = rng.unit_f64();
        if u < self.incident_p {
            rng.range_inclusive(self.lag_ms_tail_max, self.incident_lag_ms_max)
        } else if u < self.incident_p + self.lag_tail_p {
            rng.range_inclusive(self.lag_ms_median, self.lag_ms_tail_max)
        } else if self.lag_ms_median == 0 {
            0
        } else {
            let mean = self.lag_ms_median as f64 / std::f64::consts::LN_2;
            (rng.exponential(mean).round() as u64).min(self.lag_ms_tail_max)
        }
    }

    /// One call's draws: latency halves, at most one fault, the lag of what it creates.
    pub fn sample_draws(&self, rng: &mut Rng) -> Draws {
        let latency_ms = rng.log_normal_ms(self.latency_ms_median, self.latency_ms_p99);
        let request_ms = latency_ms / 2;
        let response_ms = latency_ms - request_ms;
        let fault = self.sample_fault(rng);
        let lag_ms = self.sample_lag_ms(rng);
        Draws { fault, request_ms, response_ms, lag_ms }
    }

    fn sample_fault(&self, rng: &mut Rng) -> Fault {
        let u = rng.unit_f64();
        let table = [
            (self.reset_before_send_p, Fault::ResetBeforeSend),
            (self.rate_limit_p, Fault::RateLimited),
            (self.fail_before_commit_p, Fault::FailBeforeCommit),
            (self.timeout_after_commit_p, Fault::TimeoutAfterCommit),
            (self.error_after_commit_p, Fault::ErrorAfterCommit),
        ];
        let mut cumulative = 0.0;
        for (p, fault) in table {
            cumulative += p;
            if u < cumulative {
                return fault;
            }
        }
        Fault::None
    }
}

/// The one fault (if any) a call suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The connection reset before the request was sent; the API never saw it.
    ResetBeforeSend,
    /// 429 with retry-after, before anything executed.
    RateLimited,
    /// 503 before anything executed.
    FailBeforeCommit,
    /// The request executed (and committed), the response was lost; the caller times out.
    TimeoutAfterCommit,
    /// The request executed (and committed), the API answered 500.
    ErrorAfterCommit,
}

/// What one call drew: when it reaches the API, its fault, and the lag of what it creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Draws {
    pub fault: Fault,
    /// The request half of the latency: the request reaches the API this long after it was sent.
    pub request_ms: u64,
    /// The response half: the answer reaches the caller this long after the API handled the request.
    pub response_ms: u64,
    /// What this call creates becomes searchable this long after it commits.
    pub lag_ms: u64,
}

impl Draws {
    /// No latency, no fault, no lag.
    pub const CLEAN: Draws = Draws { fault: Fault::None, request_ms: 0, response_ms: 0, lag_ms: 0 };

    /// Clean draws with this fault.
    pub fn with_fault(fault: Fault) -> Draws {
        Draws { fault, ..Draws::CLEAN }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_perfect() {
        let p = FaultProfile::default();
        assert_eq!(p.validate(), Ok(()));
        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            assert_eq!(p.sample_draws(&mut rng), Draws::CLEAN);
        }
    }

    #[test]
    fn validate_names_the_bad_knob() {
        type Case = (fn(&mut FaultProfile), Error);
        let cases: &[Case] = &[
            (|p| p.rate_limit_p = 1.5, Error::ProbabilityOutOfRange { knob: "rate_limit_p" }),
            (|p| p.incident_p = -0.1, Error::ProbabilityOutOfRange { knob: "incident_p" }),
            (|p| p.webhooks.duplicate_p = f64::NAN, Error::ProbabilityOutOfRange { knob: "webhooks.duplicate_p" }),
            (
                |p| {
                    p.timeout_after_commit_p = 0.6;
                    p.error_after_commit_p = 0.6;
                },
                Error::FaultProbabilitiesExceedOne,
            ),
            (
                |p| {
                    p.latency_ms_median = 100;
                    p.latency_ms_p99 = 50;
                },
                Error::LessThan { knob: "latency_ms_p99", other: "latency_ms_median" },
            ),
            (|p| p.lag_ms_median = 100, Error::LessThan { knob: "lag_ms_tail_max", other: "lag_ms_median" }),
            (
                |p| {
                    p.lag_ms_tail_max = 100;
                    p.incident_p = 0.1;
                },
                Error::LessThan { knob: "incident_lag_ms_max", other: "lag_ms_tail_max" },
            ),
        ];
        for (mutate, expected) in cases {
            let mut p = FaultProfile::default();
            mutate(&mut p);
            assert_eq!(p.validate().as_ref(), Err(expected));
        }
    }

    #[test]
    fn each_fault_at_one_is_drawn_every_time() {
        type Case = (fn(&mut FaultProfile), Fault);
        let cases: &[Case] = &[
            (|p| p.reset_before_send_p = 1.0, Fault::ResetBeforeSend),
            (|p| p.rate_limit_p = 1.0, Fault::RateLimited),
            (|p| p.fail_before_commit_p = 1.0, Fault::FailBeforeCommit),
            (|p| p.timeout_after_commit_p = 1.0, Fault::TimeoutAfterCommit),
            (|p| p.error_after_commit_p = 1.0, Fault::ErrorAfterCommit),
        ];
        let mut rng = Rng::new(5);
        for (mutate, fault) in cases {
            let mut p = FaultProfile::default();
            mutate(&mut p);
            assert_eq!(p.validate(), Ok(()));
            for _ in 0..500 {
                assert_eq!(p.sample_draws(&mut rng).fault, *fault);
            }
        }
    }

    #[test]
    fn lag_respects_the_tail_bound_outside_incidents_and_incidents_exceed_it() {
        let mut p =
            FaultProfile { lag_ms_median: 2_000, lag_tail_p: 0.05, lag_ms_tail_max: 60_000, ..Default::default() };
        assert_eq!(p.validate(), Ok(()));
        let mut rng = Rng::new(8);
        let lags: Vec<u64> = (0..20_000).map(|_| p.sample_lag_ms(&mut rng)).collect();
        assert!(lags.iter().all(|&l| l <= 60_000));
        let mut sorted = lags.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        assert!((1_700..=2_600).contains(&median), "median {median}");
        p.incident_p = 1.0;
        p.lag_tail_p = 0.0;
        p.incident_lag_ms_max = 3_600_000;
        assert!((0..1000).map(|_| p.sample_lag_ms(&mut rng)).all(|l| (60_000..=3_600_000).contains(&l)));
    }

    #[test]
    fn serde_rejects_unknown_knobs_and_fills_defaults() {
        let p: FaultProfile = serde_json::from_str(r#"{"rate_limit_p":0.5,"webhooks":{"duplicate_p":0.1}}"#).unwrap();
        assert_eq!(p.rate_limit_p, 0.5);
        assert_eq!(p.key_retention_ms, DAY_MS);
        assert_eq!(p.webhooks.duplicate_spacing_ms, 1_000);
        let err = serde_json::from_str::<FaultProfile>(r#"{"rate_limit":0.5}"#).unwrap_err();
        assert!(err.to_string().contains("rate_limit"), "{err}");
    }
}
