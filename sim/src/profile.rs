//! Scenario profiles: every knob of a simulation, and how the seed fills the ones a profile leaves open.
//!
//! A profile is written as TOML (a scenario of the catalogue, or a file a user writes). Knobs it sets are used as
//! written; every knob it leaves open is drawn from the seed within the range [`KNOB_RANGES`] gives (swarm testing:
//! each seed explores another corner of the fault space), then the whole resolved profile is printed at the start of
//! a run and stored in the results. Unknown knobs are an error that names them.

use connectors_fake::profile::FaultProfile;
use connectors_fake::rng::Rng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The world's own knobs (the fakes' knobs are [`FaultProfile`]s, one per connector).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorldKnobs {
    /// Worker nodes running the engine.
    pub workers: u32,
    /// Runs in flight at once (back-pressure on the traffic generator): bounds memory.
    pub runs_in_flight_max: u32,
    /// New runs per simulated second (Poisson arrivals).
    pub run_rate_per_s: f64,
    /// Share of runs started by a webhook delivery rather than an API call.
    pub webhook_share: f64,
    /// Deduplicate webhook deliveries by (object id, event type) as well as by event id.
    pub webhook_dedup_by_object: bool,
    /// Mean simulated seconds between random worker crashes during chaos; 0 turns them off.
    pub crash_interval_s_mean: f64,
    /// How long a crashed worker stays down.
    pub restart_delay_ms: u64,
    /// Probability that a worker crashes at a given crash point (before a call, after a call before its outcome is
    /// recorded, between a plan and its first write, while planning, during webhook intake).
    pub crash_point_p: f64,
    /// A restarted worker does not crash at a crash point until it has been up this long: a restart walks every run
    /// of the worker past its crash points again, and without a grace period that turns into a crash storm.
    pub crash_point_grace_ms: u64,
    /// Mean simulated seconds between network cuts between one worker and the fakes; 0 turns them off.
    pub cut_interval_s_mean: f64,
    pub cut_ms: u64,
    /// Mean simulated seconds between pauses of a worker (a long GC, a stalled VM) longer than its lease; 0: none.
    pub stall_interval_s_mean: f64,
    pub stall_ms: u64,
    /// Share of runs dispatched to two workers at once (both drive it; leases must keep one execution per key).
    pub double_dispatch_share: f64,
    /// Share of succeeded runs replayed with edited inputs.
    pub replay_share: f64,
    /// Share of paused runs a person resolves (after `person_delay_ms`), looking at the external system.
    pub person_share: f64,
    pub person_delay_ms: u64,
    /// The engine's lease on a key.
    pub lease_ms: u64,
    /// The bound on the heal phase: every run must be finished or paused by then (I8).
    pub heal_s_max: u64,
    /// How long the front door keeps webhook inbox rows; an hourly housekeeping task drops older ones, as a
    /// deployment would. Shorter than the senders' redelivery window, and a late redelivery starts a second run (I6).
    pub webhook_retention_ms: u64,
}

impl Default for WorldKnobs {
    fn default() -> Self {
        WorldKnobs {
            workers: 3,
            runs_in_flight_max: 1_000,
            run_rate_per_s: 200.0,
            webhook_share: 0.2,
            webhook_dedup_by_object: true,
            crash_interval_s_mean: 0.0,
            restart_delay_ms: 2_000,
            crash_point_p: 0.0,
            crash_point_grace_ms: 1_000,
            cut_interval_s_mean: 0.0,
            cut_ms: 5_000,
            stall_interval_s_mean: 0.0,
            stall_ms: 60_000,
            double_dispatch_share: 0.0,
            replay_share: 0.0,
            person_share: 0.0,
            person_delay_ms: 600_000,
            lease_ms: 45_000,
            heal_s_max: 5 * 86_400,
            // Four days: past the three days real senders redeliver for.
            webhook_retention_ms: 4 * 86_400_000,
        }
    }
}

/// A resolved profile: every knob has a value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub world: WorldKnobs,
    /// Workflow name → weight in the traffic mix.
    pub mix: BTreeMap<String, f64>,
    /// Connector name → its fault profile.
    pub connectors: BTreeMap<String, FaultProfile>,
    /// Workflows the profile defines beside the built-in ones, by name, in the engine's workflow format
    /// (`[workflows.NAME]` with `name = "NAME"` and `[[workflows.NAME.steps]]`); the mix may name them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workflows: BTreeMap<String, engine::workflow::WorkflowDef>,
}

/// How an open knob is drawn: uniformly from `[low, high]`, with probability `zero_p` of being exactly zero (so
/// swarm testing also explores runs where a fault is entirely absent).
#[derive(Debug, Clone, Copy)]
pub struct KnobRange {
    pub path: &'static str,
    pub low: f64,
    pub high: f64,
    pub zero_p: f64,
    pub integer: bool,
}

const fn p(path: &'static str, high: f64) -> KnobRange {
    KnobRange { path, low: 0.0, high, zero_p: 0.3, integer: false }
}

const fn ms(path: &'static str, low: f64, high: f64) -> KnobRange {
    KnobRange { path, low, high, zero_p: 0.0, integer: true }
}

/// The open knobs the seed draws, with their ranges. `*` stands for every connector of the profile.
pub const KNOB_RANGES: &[KnobRange] = &[
    p("connectors.*.reset_before_send_p", 0.02),
    p("connectors.*.rate_limit_p", 0.02),
    p("connectors.*.fail_before_commit_p", 0.02),
    p("connectors.*.timeout_after_commit_p", 0.02),
    p("connectors.*.error_after_commit_p", 0.01),
    p("connectors.*.webhooks.duplicate_p", 0.2),
    p("connectors.*.webhooks.receiver_failure_p", 0.05),
    p("connectors.*.webhooks.twin_event_p", 0.05),
    ms("connectors.*.webhooks.reorder_ms_max", 0.0, 10_000.0),
    KnobRange { path: "world.crash_interval_s_mean", low: 30.0, high: 600.0, zero_p: 0.2, integer: false },
    p("world.crash_point_p", 0.002),
    KnobRange { path: "world.cut_interval_s_mean", low: 60.0, high: 1_200.0, zero_p: 0.3, integer: false },
    ms("world.cut_ms", 500.0, 20_000.0),
];

/// A profile as written: any subset of the knobs.
pub type ProfileSpec = toml::Table;

/// Why a profile cannot be used. The message names the knob.
#[derive(Debug, Clone, PartialEq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

/// Fills the open knobs of `spec` from `seed` (see [`KNOB_RANGES`]) over `base`, then applies `spec`.
/// `base` supplies the connectors and the mix a scenario starts from.
pub fn resolve(base: &Profile, spec: &ProfileSpec, seed: u64, swarm: bool) -> Result<Profile, Error> {
    let mut value = toml::Value::try_from(base).map_err(|e| Error(format!("cannot encode the base profile: {e}")))?;
    if swarm {
        let mut rng = Rng::new(seed).fork_named("profile");
        let connectors: Vec<String> = base.connectors.keys().cloned().collect();
        for range in KNOB_RANGES {
            let paths: Vec<String> = if range.path.contains('*') {
                connectors.iter().map(|c| range.path.replace('*', c)).collect()
            } else {
                vec![range.path.to_owned()]
            };
            for path in paths {
                // Draw even when the spec sets the knob, so one knob set by hand leaves every other draw unchanged.
                let drawn = draw(range, &mut rng);
                if !spec_sets(spec, &path) {
                    set_path(&mut value, &path, drawn)?;
                }
            }
        }
    }
    merge(&mut value, &toml::Value::Table(spec.clone()), "")?;
    let profile: Profile =
        value.try_into().map_err(|e: toml::de::Error| Error(format!("bad profile: {}", e.message())))?;
    for (name, fault) in &profile.connectors {
        fault.validate().map_err(|e| match e {
            connectors_fake::profile::Error::FaultProbabilitiesExceedOne => {
                Error(format!("connectors.{name}: {e}: {}", exclusive_faults(spec, name, fault, seed, swarm)))
            }
            e => Error(format!("connectors.{name}: {e}")),
        })?;
    }
    // Which knobs came from the seed, for messages that name them.
    let drawn = |path: &str| swarm && !spec_sets(spec, path) && is_drawn_knob(path);
    validate_world(&profile, &|path: &str| drawn(path).then(|| format!(" (drawn from seed {seed})")))?;
    crate::workflows::validate_lookup_waits(&profile).map_err(Error)?;
    crate::workflows::validate_defined(&profile).map_err(Error)?;
    validate_chained_waits(&profile)?;
    Ok(profile)
}

/// The knob that sets the lag bound a lookup of connector `c` waits out, as a message names it.
fn lag_knob(c: &FaultProfile) -> &'static str {
    match c.lookup_wait_ms {
        Some(_) => "lookup_wait_ms",
        None if c.lag_ms_tail_max >= c.lag_ms_median => {
            "lag_ms_tail_max (the lag bound a lookup waits out while lookup_wait_ms is unset)"
        }
        None => "lag_ms_median (the lag bound a lookup waits out while lookup_wait_ms is unset)",
    }
}

/// The latency a call of connector `c` may take (the p99 when it draws from a spread, else the median it always
/// takes), with the knob that sets it.
fn latency_knob(c: &FaultProfile) -> (&'static str, u64) {
    if c.latency_ms_p99 > c.latency_ms_median {
        ("latency_ms_p99", c.latency_ms_p99)
    } else {
        ("latency_ms_median", c.latency_ms_median)
    }
}

/// [`validate_world`] refuses every wait a run may have to sit out whole after the chaos that is as long as the heal
/// phase. Some follow one another, though: a key a crashed worker held is taken over once its lease expires, a new
/// owner's lookup waits out the connector's lag bound from that expiry and takes its latency, and the call then takes
/// its own. Each alone may fit while together they do not, and every run such a crash left would fail I8 for the
/// profile's doing (found by QA, stop 51: a lease and a lookup wait of 600 s each, in a heal phase of 1,000 s, failed
/// I8). So do a call in doubt, a person's delay and the call the person sends again; and a lookup must leave a create
/// time to be sent within half its lease.
fn validate_chained_waits(profile: &Profile) -> Result<(), Error> {
    let w = &profile.world;
    let heal_ms = w.heal_s_max.saturating_mul(1000);
    for (name, c) in &profile.connectors {
        // None of these knobs is drawn from the seed: the check's answer is the profile's, at every seed.
        let knob = |path: String, ms: u64| (format!("{path} {ms}"), ms);
        let mut terms = vec![knob("world.lease_ms".to_owned(), w.lease_ms)];
        let (latency, ms) = latency_knob(c);
        let looks = crate::workflows::has_lookup(profile, name);
        if looks {
            // The lookup is a call of its own, with its latency, before the create.
            terms.push(knob(format!("connectors.{name}.{}", lag_knob(c)), c.declared_lag_bound_ms()));
            terms.push(knob(format!("connectors.{name}.{latency} (the lookup)"), ms));
        }
        terms.push(knob(format!("connectors.{name}.{latency}"), ms));
        let sum = |terms: &[(String, u64)]| {
            let total = terms.iter().fold(0u64, |sum, (_, ms)| sum.saturating_add(*ms));
            let named: Vec<&str> = terms.iter().map(|(text, _)| text.as_str()).collect();
            (total, format!("{} = {total} ms", named.join(" + ")))
        };
        let (total, named) = sum(&terms);
        if total >= heal_ms {
            let then = if looks { "the lease, then the lookup's lag bound, then the lookup" } else { "the lease" };
            return Err(Error(format!(
                "{named} is not shorter than the heal phase (world.heal_s_max = {} s): a key of {name} that a \
                 crashed worker held waits out {then}, then its call, after the chaos ends, and its run could not \
                 end within the heal phase (I8); shorten them, or lengthen heal_s_max",
                w.heal_s_max
            )));
        }
        // A create is sent only while half its lease is left (the other half is the request's transit), and the
        // lookup before it is made after the claim: where even the fastest lookups take half the lease, no create is
        // ever sent, every attempt "not sent" until they run out (found by QA, stop 51). Latencies are log-normal
        // about the median, so the fastest 1 % take median² / p99 or less; where only some lookups are that slow,
        // their attempts are sent again, and the profile may pass.
        let fastest_ms = if c.latency_ms_p99 > c.latency_ms_median {
            let median = u128::from(c.latency_ms_median);
            u64::try_from(median * median / u128::from(c.latency_ms_p99)).unwrap_or(u64::MAX)
        } else {
            c.latency_ms_median
        };
        // Half the lease as the engine reckons it, in whole milliseconds (found by QA, stop 51: an odd lease_ms).
        if looks && fastest_ms >= w.lease_ms / 2 {
            return Err(Error(format!(
                "connectors.{name}: even its fastest lookups take about {fastest_ms} ms (latency_ms_median {}, \
                 latency_ms_p99 {}), not shorter than half of world.lease_ms {}: a create is sent only while half its \
                 lease is left, and the lookup before it takes that long, so about 1 % of creates or fewer would be \
                 sent; lengthen lease_ms to more than twice the latency",
                c.latency_ms_median, c.latency_ms_p99, w.lease_ms
            )));
        }
        // A run whose call was in flight as the chaos ended, answered (or timed out) as indeterminate, waits for a
        // person, who sends it again (found by QA, stop 51: 2 days, 3 and 2 in a heal phase of 5).
        if w.person_share > 0.0 {
            let first = if c.timeout_ms > ms {
                knob(format!("connectors.{name}.timeout_ms"), c.timeout_ms)
            } else {
                knob(format!("connectors.{name}.{latency}"), ms)
            };
            let terms = [
                first,
                knob("world.person_delay_ms".to_owned(), w.person_delay_ms),
                knob(format!("connectors.{name}.{latency} (the person's retry)"), ms),
            ];
            let (total, named) = sum(&terms);
            if total >= heal_ms {
                return Err(Error(format!(
                    "{named} is not shorter than the heal phase (world.heal_s_max = {} s): a run whose call to {name} \
                     ends in doubt as the chaos ends waits for its answer, then for a person, then for the call the \
                     person sends again, and could not end within the heal phase (I8); shorten them, or lengthen \
                     heal_s_max",
                    w.heal_s_max
                )));
            }
        }
    }
    Ok(())
}

/// The connector's exclusive fault probabilities as they came out, each marked as set by the profile or drawn from the
/// seed, and what to do: a profile that sets one of them may be refused for the draws of the others, which differ
/// from seed to seed.
fn exclusive_faults(spec: &ProfileSpec, connector: &str, fault: &FaultProfile, seed: u64, swarm: bool) -> String {
    const EXCLUSIVE: [&str; 5] = [
        "reset_before_send_p",
        "rate_limit_p",
        "fail_before_commit_p",
        "timeout_after_commit_p",
        "error_after_commit_p",
    ];
    let values = serde_json::to_value(fault).unwrap_or_default();
    let mut sum = 0.0;
    let mut drawn_any = false;
    let terms: Vec<String> = EXCLUSIVE
        .iter()
        .map(|knob| {
            let v = values.get(*knob).and_then(serde_json::Value::as_f64).unwrap_or(0.0);
            sum += v;
            let path = format!("connectors.{connector}.{knob}");
            let drawn = swarm && !spec_sets(spec, &path) && is_drawn_knob(&path);
            drawn_any |= drawn && v > 0.0;
            format!("{knob} {v}{}", if drawn { format!(" (drawn from seed {seed})") } else { String::new() })
        })
        .collect();
    let advice = if drawn_any {
        "; the drawn ones change with the seed: set them in the profile too (0 for none) to fix the sum"
    } else {
        ""
    };
    format!("here {} = {sum}{advice}", terms.join(" + "))
}

/// The longest heal phase a profile may ask for, in seconds: a year (its milliseconds must not overflow the clock).
const HEAL_S_MAX: u64 = 365 * 86_400;

/// The slowest traffic a profile may ask for.
const RUN_RATE_PER_S_MIN: f64 = 0.001;

/// Whether a knob the profile leaves open at `path` is drawn from the seed (it has a range in [`KNOB_RANGES`]).
fn is_drawn_knob(path: &str) -> bool {
    KNOB_RANGES.iter().any(|r| {
        let (ours, theirs) = (path.split('.'), r.path.split('.'));
        ours.clone().count() == theirs.clone().count() && ours.zip(theirs).all(|(a, b)| b == "*" || a == b)
    })
}

/// Checks the world's knobs, and the connectors' against the world's heal phase. `drawn` says, for a knob's path,
/// what to add to its name in a message: that the seed drew it, or nothing.
fn validate_world(profile: &Profile, drawn: &dyn Fn(&str) -> Option<String>) -> Result<(), Error> {
    let w = &profile.world;
    let shares = [
        ("world.webhook_share", w.webhook_share),
        ("world.crash_point_p", w.crash_point_p),
        ("world.double_dispatch_share", w.double_dispatch_share),
        ("world.replay_share", w.replay_share),
        ("world.person_share", w.person_share),
    ];
    for (name, v) in shares {
        if !(0.0..=1.0).contains(&v) {
            return Err(Error(format!("{name} = {v} is not a probability in 0..=1")));
        }
    }
    if w.workers == 0 || w.workers > 64 {
        return Err(Error(format!("world.workers = {} must be between 1 and 64", w.workers)));
    }
    if w.runs_in_flight_max == 0 {
        return Err(Error("world.runs_in_flight_max must be at least 1".into()));
    }
    // Slower than this, the world's hourly housekeeping runs so often between two runs that a simulation of a few
    // steps takes minutes of wall time (1e-9 ran past 30 s for 20 steps).
    if !(w.run_rate_per_s >= RUN_RATE_PER_S_MIN && w.run_rate_per_s.is_finite()) {
        return Err(Error(format!(
            "world.run_rate_per_s = {} must be a number of at least {RUN_RATE_PER_S_MIN} (one run per 1,000 \
             simulated seconds)",
            w.run_rate_per_s
        )));
    }
    let means = [
        ("world.crash_interval_s_mean", w.crash_interval_s_mean),
        ("world.cut_interval_s_mean", w.cut_interval_s_mean),
        ("world.stall_interval_s_mean", w.stall_interval_s_mean),
    ];
    for (name, v) in means {
        if !(v >= 0.0 && v.is_finite()) {
            return Err(Error(format!("{name} = {v} must be a number of seconds of 0 or more (0 turns it off)")));
        }
    }
    // The heal phase is the bound on a run's end (I8), and the simulation's end: it must have room for something to
    // end in, and every webhook delivery must fall inside it. A delivery scheduled after the end would never be
    // made, and its change never checked for starting exactly one run (I6).
    if w.heal_s_max == 0 || w.heal_s_max > HEAL_S_MAX {
        return Err(Error(format!(
            "world.heal_s_max = {} must be between 1 and {HEAL_S_MAX} (seconds the heal phase may last: a year)",
            w.heal_s_max
        )));
    }
    let heal_ms = w.heal_s_max * 1000;
    let late: Vec<String> = profile
        .connectors
        .iter()
        .filter(|(_, c)| {
            let h = &c.webhooks;
            h.reorder_ms_max.saturating_add(h.redelivery_ms_max).saturating_add(h.duplicate_spacing_ms) >= heal_ms
        })
        .map(|(name, _)| name.clone())
        .collect();
    if late.len() > 1 {
        return Err(Error(format!(
            "the webhook deliveries of connectors {} may come later than the heal phase lasts (world.heal_s_max = {} \
             s; a delivery may come reorder_ms_max + redelivery_ms_max + duplicate_spacing_ms after its change): they \
             could fall after the simulation's end, unchecked; shorten those knobs of each, or lengthen heal_s_max",
            late.join(", "),
            w.heal_s_max
        )));
    }
    if let Some(name) = late.first() {
        let h = &profile.connectors[name].webhooks;
        let latest_ms = h.reorder_ms_max.saturating_add(h.redelivery_ms_max).saturating_add(h.duplicate_spacing_ms);
        let term = |knob: &str, v: u64| {
            let from = drawn(&format!("connectors.{name}.webhooks.{knob}")).unwrap_or_default();
            format!("{knob} {v}{from}")
        };
        let terms = [
            term("reorder_ms_max", h.reorder_ms_max),
            term("redelivery_ms_max", h.redelivery_ms_max),
            term("duplicate_spacing_ms", h.duplicate_spacing_ms),
        ];
        let advice = if terms.iter().any(|t| t.ends_with(')')) {
            "; the drawn ones change with the seed: set them in the profile too"
        } else {
            ""
        };
        return Err(Error(format!(
            "connectors.{name}.webhooks: a delivery may come {latest_ms} ms after its change ({}), not within the heal \
             phase (world.heal_s_max = {} s): it could fall after the simulation's end, unchecked; shorten them or \
             lengthen heal_s_max{advice}",
            terms.join(" + "),
            w.heal_s_max
        )));
    }
    // A run may have to sit out one of these waits whole after the chaos ends: a call takes its latency (the p99 when
    // it draws from a spread, else the median it always takes), an answer lost at its end arrives as a timeout
    // `timeout_ms` later, a rate-limited call is retried `retry_after_ms` later, a lookup waits out the declared lag
    // bound, a crashed worker's key is taken over once its lease expires, and a person decides about a paused run
    // `person_delay_ms` after it reaches their desk (the run is in flight until then: the desk is part of the world).
    // A wait as long as the heal phase leaves its run no time to end in, so its I8 failure would be the profile's
    // doing, not the engine's.
    let waits = profile.connectors.iter().flat_map(|(name, c)| {
        let latency = latency_knob(c);
        [
            (format!("connectors.{name}.{}", latency.0), latency.1),
            (format!("connectors.{name}.timeout_ms"), c.timeout_ms),
            (format!("connectors.{name}.retry_after_ms"), c.retry_after_ms),
            (format!("connectors.{name}.{}", lag_knob(c)), c.declared_lag_bound_ms()),
        ]
    });
    let lease = std::iter::once(("world.lease_ms".to_owned(), w.lease_ms));
    let person = (w.person_share > 0.0).then(|| ("world.person_delay_ms".to_owned(), w.person_delay_ms));
    if let Some((name, ms)) = waits.chain(lease).chain(person).find(|(_, ms)| *ms >= heal_ms) {
        return Err(Error(format!(
            "{name}: {ms} ms is not shorter than the heal phase (world.heal_s_max = {} s): a run may have to wait \
             that long after the chaos ends, and could not end within the heal phase (I8); shorten it, or lengthen \
             heal_s_max",
            w.heal_s_max
        )));
    }
    // A lease of zero expires as it is taken: every key would fail as "half the lease was spent".
    if w.lease_ms == 0 {
        return Err(Error("world.lease_ms must be at least 1".into()));
    }
    if let Some((name, v)) = profile.mix.iter().find(|(_, v)| !(**v >= 0.0 && v.is_finite())) {
        return Err(Error(format!("mix.{name} = {v} must be a finite weight of 0 or more")));
    }
    let total: f64 = profile.mix.values().sum();
    if !total.is_finite() {
        return Err(Error(format!("the mix's weights add up to {total}: scale them down")));
    }
    if total <= 0.0 {
        return Err(Error("mix must give at least one workflow a positive weight".into()));
    }
    Ok(())
}

fn draw(range: &KnobRange, rng: &mut Rng) -> toml::Value {
    let zero = rng.chance(range.zero_p);
    let u = rng.unit_f64();
    let x = if zero { 0.0 } else { range.low + (range.high - range.low) * u };
    if range.integer { toml::Value::Integer(x.round() as i64) } else { toml::Value::Float((x * 1e6).round() / 1e6) }
}

fn spec_sets(spec: &ProfileSpec, path: &str) -> bool {
    let mut table = spec;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        match table.get(*part) {
            None => return false,
            Some(toml::Value::Table(t)) if i + 1 < parts.len() => table = t,
            Some(_) => return i + 1 == parts.len(),
        }
    }
    false
}

fn set_path(value: &mut toml::Value, path: &str, new: toml::Value) -> Result<(), Error> {
    let mut current = value;
    let parts: Vec<&str> = path.split('.').collect();
    for part in &parts[..parts.len() - 1] {
        current = current
            .as_table_mut()
            .and_then(|t| t.get_mut(*part))
            .ok_or_else(|| Error(format!("knob {path}: no table {part}")))?;
    }
    let table = current.as_table_mut().ok_or_else(|| Error(format!("knob {path}: not a table")))?;
    table.insert(parts[parts.len() - 1].to_owned(), new);
    Ok(())
}

/// A connector knob that may be left unset: its default is derived from other knobs.
struct OptionalKnob {
    name: &'static str,
    /// The value the run uses and where it comes from, when the profile leaves the knob unset; `None` when it is set.
    unset: fn(&FaultProfile) -> Option<String>,
    /// A value of the knob's type, which a value set in a profile is checked against ([`knob_value`]).
    like: toml::Value,
}

/// Every optional connector knob, the one list both the merge (which lets a profile set one that is absent from the
/// encoded defaults) and [`knobs_to_print`] (which prints each one left unset with its derived value) read.
const OPTIONAL_CONNECTOR_KNOBS: &[OptionalKnob] = &[OptionalKnob {
    name: "lookup_wait_ms",
    unset: |c| {
        c.lookup_wait_ms.is_none().then(|| format!("{} (unset: the documented lag bound)", c.declared_lag_bound_ms()))
    },
    like: toml::Value::Integer(0),
}];

fn merge(into: &mut toml::Value, from: &toml::Value, at: &str) -> Result<(), Error> {
    match (into, from) {
        (toml::Value::Table(into), toml::Value::Table(from)) => {
            for (k, v) in from {
                let path = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                match into.get_mut(k) {
                    Some(existing) if existing.is_table() && v.is_table() => merge(existing, v, &path)?,
                    Some(existing) if existing.is_table() => return Err(Error(format!("{path} must be a table"))),
                    Some(existing) => *existing = knob_value(existing, v, &path)?,
                    None if at == "mix" && !matches!(v, toml::Value::Float(_) | toml::Value::Integer(_)) => {
                        return Err(Error(format!("{path} = {v} must be a number (the workflow's weight)")));
                    }
                    None if at == "connectors"
                        || at == "mix"
                        || at == "workflows"
                        || (at.is_empty() && k == "workflows") =>
                    {
                        into.insert(k.clone(), v.clone());
                    }
                    // Optional knobs are absent from the encoded base while unset.
                    None if at.starts_with("connectors.") && OPTIONAL_CONNECTOR_KNOBS.iter().any(|o| o.name == k) => {
                        let like = &OPTIONAL_CONNECTOR_KNOBS.iter().find(|o| o.name == k).expect("found above").like;
                        into.insert(k.clone(), knob_value(like, v, &path)?);
                    }
                    None => return Err(Error(format!("unknown knob {path}"))),
                }
            }
            Ok(())
        }
        _ => Err(Error(format!("{at} must be a table"))),
    }
}

/// The knobs held in 32 bits (the rest of the integer knobs are 64-bit, which a TOML integer of 0 or more always fits).
const U32_KNOBS: [&str; 2] = ["world.workers", "world.runs_in_flight_max"];

/// A knob's new value, checked against the type of its default so that a wrong one is named here (the profile's
/// deserialisation would say only "invalid type"). Integers are accepted where floats are expected (`rate = 1`).
fn knob_value(default: &toml::Value, v: &toml::Value, path: &str) -> Result<toml::Value, Error> {
    use toml::Value::{Boolean, Float, Integer, String};
    match (default, v) {
        (Float(_), Integer(i)) => Ok(Float(*i as f64)),
        (Float(_), Float(_)) | (Boolean(_), Boolean(_)) | (String(_), String(_)) => Ok(v.clone()),
        (Integer(_), Integer(i)) if U32_KNOBS.contains(&path) && *i > i64::from(u32::MAX) => {
            Err(Error(format!("{path} = {v} must be a whole number from 0 to {}", u32::MAX)))
        }
        (Integer(_), Integer(i)) if *i >= 0 => Ok(v.clone()),
        (Integer(_), _) => Err(Error(format!("{path} = {v} must be a whole number of 0 or more"))),
        (Float(_), _) => Err(Error(format!("{path} = {v} must be a number"))),
        (Boolean(_), _) => Err(Error(format!("{path} = {v} must be true or false"))),
        _ => Err(Error(format!("{path} = {v} must be a {}", default.type_str()))),
    }
}

/// The resolved profile as a flat map `path → value`, for printing and for the results.
pub fn knobs(profile: &Profile) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    let value = serde_json::to_value(profile).unwrap_or(serde_json::Value::Null);
    flatten(&value, String::new(), &mut out);
    out
}

/// Every knob as `flowsim run` prints it before a run: [`knobs`], plus each optional knob the profile leaves unset
/// (absent from [`knobs`], whose map the results keep as the profile resolved) with the value the run uses and where
/// it comes from, `connectors.NAME.lookup_wait_ms = 10000 (unset: the documented lag bound)`. Printing only: the
/// results and the trace are unchanged.
pub fn knobs_to_print(profile: &Profile) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = knobs(profile).into_iter().map(|(k, v)| (k, v.to_string())).collect();
    for (name, connector) in &profile.connectors {
        for knob in OPTIONAL_CONNECTOR_KNOBS {
            if let Some(value) = (knob.unset)(connector) {
                out.insert(format!("connectors.{name}.{}", knob.name), value);
            }
        }
    }
    out
}

fn flatten(value: &serde_json::Value, prefix: String, out: &mut BTreeMap<String, serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(v, path, out);
            }
        }
        other => {
            out.insert(prefix, other.clone());
        }
    }
}
