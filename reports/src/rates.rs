//! Rates of rare events (duplicates per step) with exact confidence bounds, and a test for regressions.
//!
//! A rate is `events` out of `trials`. Its 95 % interval is the exact Clopper–Pearson one: the two-sided bounds are
//! the 2.5 % and 97.5 % quantiles of `Beta(x, n − x + 1)` and `Beta(x + 1, n − x)`, and the one-sided upper bound is the
//! 95 % quantile of `Beta(x + 1, n − x)`. At `x = 0` and `x = n` the bounds have closed forms (`1 − α^(1/n)` and
//! `α^(1/n)`), used directly because they are exact and cheap. A zero is therefore never reported bare: zero
//! duplicates in 48 million steps is "0 (95 % upper bound 6.2 per 100 million)".
//!
//! Regressions ([`regression_p_value`]) are judged with the exact conditional binomial test for two Poisson rates:
//! given `k = x_old + x_new` events in all, under "the rate did not change" `x_new` is `Binomial(k, n_new / (n_old +
//! n_new))`; the one-sided p-value is `P(X ≥ x_new)`. Duplicates are rare events in very many steps, where the
//! Poisson model is accurate and this test is the standard exact one (it is what Fisher's exact test tends to).

/// One minus the confidence level of every interval here (95 %).
pub const ALPHA: f64 = 0.05;

/// The p-value below which a worse rate counts as a significant regression.
pub const REGRESSION_P_VALUE_MAX: f64 = 0.05;

/// Operating errors of this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// More events than trials: the counts cannot come from one rate.
    EventsExceedTrials { events: u64, trials: u64 },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::EventsExceedTrials { events, trials } => {
                write!(f, "{events} events in {trials} trials: a rate cannot have more events than trials")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A closed interval of rates, both ends in `0..=1`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// `events` out of `trials`, with its bounds.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Rate {
    pub events: u64,
    pub trials: u64,
    /// `events / trials`; 0 when there were no trials.
    pub point: f64,
    /// Clopper–Pearson two-sided 95 % interval.
    pub interval_95: Interval,
    /// Clopper–Pearson one-sided 95 % upper bound (the figure budgets are judged on).
    pub upper_95: f64,
}

impl Rate {
    /// The rate of `events` in `trials`. No trials means nothing is known: the interval is `[0, 1]`.
    pub fn new(events: u64, trials: u64) -> Result<Rate, Error> {
        if events > trials {
            return Err(Error::EventsExceedTrials { events, trials });
        }
        let point = if trials == 0 { 0.0 } else { events as f64 / trials as f64 };
        Ok(Rate {
            events,
            trials,
            point,
            interval_95: Interval {
                low: lower_bound(events, trials, ALPHA / 2.0),
                high: upper_bound(events, trials, ALPHA / 2.0),
            },
            upper_95: upper_bound(events, trials, ALPHA),
        })
    }

    /// The rate in words for a report: "0 (95 % upper bound 6.2 per 100 million)", or "11 per million (95 % CI 9.8–12
    /// per million)". The scale is chosen so that the leading figure is at least 1 where possible.
    pub fn describe(&self) -> String {
        if self.trials == 0 {
            return "no steps".to_string();
        }
        if self.events == 0 {
            let scale = Scale::for_value(self.upper_95);
            return format!("0 (95 % upper bound {} {})", scale.format(self.upper_95), scale.name);
        }
        let scale = Scale::for_value(self.point);
        format!(
            "{} {} (95 % CI {}–{} {})",
            scale.format(self.point),
            scale.name,
            scale.format(self.interval_95.low),
            scale.format(self.interval_95.high),
            scale.name
        )
    }

    /// The point estimate per million trials (the unit of the charts).
    pub fn per_million(&self) -> f64 {
        self.point * 1e6
    }
}

/// A unit to state a small rate in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub per: f64,
    pub name: &'static str,
}

/// The units a rate may be stated in, finest last.
const SCALES: [Scale; 5] = [
    Scale { per: 1e2, name: "per hundred" },
    Scale { per: 1e4, name: "per 10 thousand" },
    Scale { per: 1e6, name: "per million" },
    Scale { per: 1e8, name: "per 100 million" },
    Scale { per: 1e10, name: "per 10 billion" },
];

impl Scale {
    /// The coarsest unit in which `rate` reads as at least 1 (the finest for smaller rates).
    pub fn for_value(rate: f64) -> Scale {
        SCALES.iter().copied().find(|s| rate * s.per >= 1.0).unwrap_or(SCALES[SCALES.len() - 1])
    }

    /// `rate` in this unit, with two significant figures.
    pub fn format(&self, rate: f64) -> String {
        significant(rate * self.per, 2)
    }
}

/// `x` with `digits` significant figures, without exponent notation and without trailing zeros after the point
/// (6.24 → "6.2", 11.1 → "11", 0.0625 → "0.062", 1234 → "1200").
pub fn significant(x: f64, digits: u32) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = digits as i32 - 1 - magnitude;
    if decimals <= 0 {
        let unit = 10f64.powi(-decimals);
        return format!("{}", (x / unit).round() * unit);
    }
    let text = format!("{:.*}", decimals as usize, x);
    if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.').to_string() } else { text }
}

/// The Clopper–Pearson lower bound with tail probability `tail`.
fn lower_bound(events: u64, trials: u64, tail: f64) -> f64 {
    if events == 0 {
        return 0.0;
    }
    if events == trials {
        return tail.powf(1.0 / trials as f64);
    }
    beta_quantile(events as f64, (trials - events + 1) as f64, tail)
}

/// The Clopper–Pearson upper bound with tail probability `tail`.
fn upper_bound(events: u64, trials: u64, tail: f64) -> f64 {
    if trials == 0 || events == trials {
        return 1.0;
    }
    if events == 0 {
        // 1 − tail^(1/n), written with exp_m1 so that it keeps its precision for large n.
        return -(tail.ln() / trials as f64).exp_m1();
    }
    beta_quantile((events + 1) as f64, (trials - events) as f64, 1.0 - tail)
}

/// Bisection steps for a quantile: each halves the bracket, so 200 reach far below the smallest positive double's
/// spacing near any rate we report; the loop stops earlier once the bracket stops shrinking.
const BISECTION_STEPS_MAX: u32 = 200;

/// The `p` quantile of `Beta(a, b)`, found by bisection on the regularised incomplete beta function.
///
/// statrs's own `inverse_cdf` (AS 64 with Newton steps from a start clamped to ≥ 1e-4) was measured to be very slow
/// and inaccurate for the shapes that matter here (a few events in tens of millions of steps: quantiles near 1e-8),
/// while the forward function is accurate, so the inversion is done here.
fn beta_quantile(a: f64, b: f64, p: f64) -> f64 {
    let (mut low, mut high) = (0.0_f64, 1.0_f64);
    for _ in 0..BISECTION_STEPS_MAX {
        // The geometric mean splits the bracket in log space while the low end is tiny, so a quantile near 1e-8 is
        // found with full relative precision; the arithmetic mean takes over once the low end is 0.
        let mid = if low > 0.0 { (low * high).sqrt() } else { high / 2.0 };
        if mid <= low || mid >= high {
            break;
        }
        if statrs::function::beta::beta_reg(a, b, mid) < p {
            low = mid;
        } else {
            high = mid;
        }
        if high - low <= high * 1e-13 {
            break;
        }
    }
    (low + high) / 2.0
}

/// The one-sided p-value that `new` has a higher rate than `old` (exact conditional binomial test, see the module
/// doc). 1 when there is nothing to compare (no events, or no trials on a side).
pub fn regression_p_value(old: &Rate, new: &Rate) -> f64 {
    let events_total = old.events + new.events;
    if new.events == 0 || old.trials == 0 || new.trials == 0 {
        return 1.0;
    }
    let share_new = new.trials as f64 / (old.trials + new.trials) as f64;
    // P(X ≥ x) for X ~ Binomial(k, p) is the regularised incomplete beta I_p(x, k − x + 1).
    let p = statrs::function::beta::beta_reg(new.events as f64, (events_total - new.events + 1) as f64, share_new);
    p.clamp(0.0, 1.0)
}

/// A comparison of one rate between a baseline and now.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Change {
    pub baseline: Rate,
    pub current: Rate,
    /// One-sided p-value for "the current rate is higher".
    pub p_value: f64,
    /// Higher now, with `p_value < REGRESSION_P_VALUE_MAX`.
    pub regression: bool,
}

impl Change {
    pub fn new(baseline: Rate, current: Rate) -> Change {
        let p_value = regression_p_value(&baseline, &current);
        let regression = current.point > baseline.point && p_value < REGRESSION_P_VALUE_MAX;
        Change { baseline, current, p_value, regression }
    }
}
