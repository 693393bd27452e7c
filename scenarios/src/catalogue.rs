//! The named scenario catalogue (a public contract: the names are used by scripts and CI).
//!
//! Each scenario is a profile written in the same TOML a user writes for `--scenario FILE`: the knobs it sets are
//! fixed, every knob it leaves open is drawn from the seed (see `sim::profile::KNOB_RANGES`). A scenario file may
//! also carry `expect` (what `--policy rules` must show) and `base` (start from another scenario's connectors and
//! mix); both are optional in a user's file.

use sim::profile::{Profile, ProfileSpec, WorldKnobs};
use std::collections::BTreeMap;

/// What a scenario promises under `--policy rules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every invariant holds; no duplicate anywhere.
    AllHold,
    /// Every invariant holds; residual duplicates on lookup connectors whose lag exceeded the bound are allowed.
    ResidualOnly,
    /// The canary: duplicates must be found and `run` must exit 1.
    CanaryFails,
}

/// One entry of the catalogue.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub stresses: &'static str,
    pub expect: Expect,
    /// Steps of a default run.
    pub steps_default: u64,
    /// The profile text (TOML).
    pub text: &'static str,
}

/// The catalogue.
pub const CATALOGUE: &[Scenario] = &[
    Scenario {
        name: "mixed",
        stresses: "the default: a production-like mix of every connector class and fault, about a million steps",
        expect: Expect::ResidualOnly,
        steps_default: 1_000_000,
        text: r#"
[world]
crash_interval_s_mean = 300.0
crash_point_p = 0.0005
double_dispatch_share = 0.01
replay_share = 0.01
person_share = 0.5
"#,
    },
    Scenario {
        name: "keyed-timeout-after-commit",
        stresses: "keyed writes whose responses are lost after commit",
        expect: Expect::AllHold,
        steps_default: 200_000,
        text: r#"
[mix]
checkout = 1.0
signup = 1.0
[connectors.payments]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
[connectors.ledgerly]
lag_ms_tail_max = 5000
incident_p = 0.0
"#,
    },
    Scenario {
        name: "duplicate-webhooks",
        stresses: "deliveries repeated a second apart, days later, reordered, twin events",
        expect: Expect::AllHold,
        steps_default: 200_000,
        text: r#"
[world]
webhook_share = 1.0
[mix]
signup = 1.0
[connectors.payments.webhooks]
duplicate_p = 0.3
receiver_failure_p = 0.1
reorder_ms_max = 30000
twin_event_p = 0.1
"#,
    },
    Scenario {
        name: "lookup-lag-under-bound",
        stresses: "lookup connectors whose lag stays under the safeguard bound",
        expect: Expect::AllHold,
        steps_default: 200_000,
        text: r#"
[mix]
signup = 1.0
onboard = 1.0
[connectors.contacts]
timeout_after_commit_p = 0.05
incident_p = 0.0
[connectors.payments]
incident_p = 0.0
"#,
    },
    Scenario {
        name: "lookup-lag-over-bound",
        stresses: "lag tail beyond the bound (the article's residual class)",
        expect: Expect::ResidualOnly,
        steps_default: 200_000,
        text: r#"
[mix]
checkout = 1.0
[connectors.ledgerly]
timeout_after_commit_p = 0.05
incident_p = 0.05
"#,
    },
    Scenario {
        name: "at-most-once-indeterminate",
        stresses: "indeterminate outcomes on at-most-once actions",
        expect: Expect::AllHold,
        steps_default: 100_000,
        text: r#"
[mix]
payout = 1.0
signup = 0.2
[connectors.payouts]
timeout_after_commit_p = 0.05
error_after_commit_p = 0.02
[connectors.email]
timeout_after_commit_p = 0.05
"#,
    },
    Scenario {
        name: "agent-crash",
        stresses: "crashes while planning and between actions",
        expect: Expect::AllHold,
        steps_default: 100_000,
        text: r#"
[world]
crash_point_p = 0.01
crash_interval_s_mean = 60.0
[mix]
assist = 1.0
onboard = 0.5
"#,
    },
    Scenario {
        name: "edit-and-replay",
        stresses: "replays with some inputs edited",
        expect: Expect::AllHold,
        steps_default: 100_000,
        text: r#"
[world]
replay_share = 0.5
[mix]
checkout = 1.0
signup = 1.0
"#,
    },
    Scenario {
        name: "key-expiry",
        stresses: "retries arriving after the key retention window",
        expect: Expect::AllHold,
        steps_default: 100_000,
        text: r#"
[world]
cut_interval_s_mean = 30.0
cut_ms = 20000
[mix]
signup = 1.0
checkout = 1.0
[connectors.payments]
key_retention_ms = 2000
timeout_after_commit_p = 0.05
"#,
    },
    Scenario {
        name: "lease-takeover",
        stresses: "two workers reaching one step; stale leases",
        expect: Expect::AllHold,
        steps_default: 100_000,
        text: r#"
[world]
double_dispatch_share = 0.5
stall_interval_s_mean = 60.0
stall_ms = 60000
lease_ms = 10000
"#,
    },
    Scenario {
        name: "crash-points",
        stresses: "a worker crash at every crash point",
        expect: Expect::ResidualOnly,
        steps_default: 200_000,
        text: r#"
[world]
crash_point_p = 0.01
"#,
    },
    Scenario {
        name: "month",
        stresses: "48 million steps at the production mix, calibrated to the article (see the profile's comments)",
        expect: Expect::ResidualOnly,
        steps_default: 48_000_000,
        text: MONTH,
    },
    Scenario {
        name: "canary",
        stresses: "the key-ignoring API",
        expect: Expect::CanaryFails,
        steps_default: 20_000,
        text: r#"
[mix]
canary = 1.0
[connectors.canary]
timeout_after_commit_p = 0.05
"#,
    },
];

/// The connectors and the traffic mix every scenario starts from.
pub fn base_profile(with_canary: bool) -> Profile {
    let mut connectors = BTreeMap::new();
    for name in sim::workflows::CONNECTOR_NAMES {
        if *name == "canary" && !with_canary {
            continue;
        }
        connectors.insert((*name).to_owned(), sim::workflows::kind_of(name).realistic_profile());
    }
    let mix = [("signup", 4.0), ("checkout", 3.0), ("payout", 1.0), ("onboard", 1.0), ("assist", 1.0)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    Profile { world: WorldKnobs::default(), mix, connectors, workflows: BTreeMap::new() }
}

pub fn find(name: &str) -> Option<&'static Scenario> {
    CATALOGUE.iter().find(|s| s.name == name)
}

/// Parses a scenario text: the spec, and whether it names a `[mix]` (which then replaces the base mix).
///
/// A key given twice in one table (a knob, a mix weight, a workflow's table or a member of its inputs) is refused,
/// as TOML requires: the error names the file, the key and its line, then shows toml's own report.
pub fn parse(text: &str, origin: &str) -> Result<ProfileSpec, String> {
    let spec = parse_toml(text, origin)?;
    // A workflow's inputs are keyed: a number no key could be derived from is refused here, as in a workflow file,
    // judged by its literal text (a parsed float has lost it: `9007199254740993.0` would read as `...992`).
    if spec.contains_key("workflows") {
        engine::workflow::check_toml_number_literals(text, "workflows").map_err(|e| format!("{origin}: {e}"))?;
    }
    Ok(spec)
}

fn parse_toml(text: &str, origin: &str) -> Result<ProfileSpec, String> {
    text.parse::<toml::Table>().map_err(|e| {
        // toml says only "duplicate key" and points at it: name it, so the first line reads on its own.
        let repeated = e.span().filter(|_| e.message().starts_with("duplicate key"));
        match repeated.and_then(|span| Some((text.get(span.clone())?, span.start))) {
            Some((key, start)) => {
                let line = text[..start].matches('\n').count() + 1;
                format!("{origin}: duplicate key `{key}` at line {line}: a table holds each key once\n{e}")
            }
            None => format!("{origin}: {e}"),
        }
    })
}

/// The base profile for a spec: a spec with its own `[mix]` replaces the base mix instead of adding to it.
pub fn base_for(spec: &ProfileSpec) -> Profile {
    let with_canary = spec.get("connectors").and_then(|c| c.get("canary")).is_some()
        || spec.get("mix").and_then(|m| m.get("canary")).is_some();
    let mut base = base_profile(with_canary);
    if spec.contains_key("mix") {
        base.mix.clear();
    }
    base
}

/// The calibrated month. Every rate below is a physical rate of the world (per call, per second), derived from the
/// article's public figures; the duplicate rates, pause share and coverage are *measured* by the run, not set.
///
/// - Volume: 48 M steps a month is 48e6 / (30 × 86,400 s) ≈ 18.5 steps/s. The mix below averages ≈ 2.4 writes per
///   run, so runs arrive at 18.5 / 2.4 ≈ 7.7 per simulated second.
/// - "A rare failure every few minutes": one failure per ~3 minutes at 18.5 steps/s is one per ~3,300 steps, about
///   3e-4 per step. Most failures are definite (a 503 or a 429 before the API did anything, a reset before send):
///   ≈ 2.5e-4 per call in all, split evenly between fail-before-commit, rate limits and resets.
/// - Indeterminate outcomes (the ones that can duplicate): before the rules the article saw ≈ 1 duplicate per 90,000
///   steps, and a naive engine duplicates on every indeterminate outcome it retries, so indeterminate outcomes are
///   ≈ 1.1e-5 per call: timeout after commit 6e-6, error after commit 5e-6.
/// - Worker crashes: one every 6 simulated hours (a deploy, an OOM kill); crash points at 1e-6 per point.
/// - Read-after-write lag: the fakes' public numbers (payments search normally within a minute; contacts a few
///   seconds; ledgerly confirms before it is visible, documented bound 2 minutes). How often a write stays invisible
///   past the documented bound is published nowhere, so it is the one rate fitted to the article: under the rules a
///   duplicate needs an indeterminate write (as above) on a lookup connector *and* a lag past the bound. Contacts is
///   unique on email, so a second create adopts the first and never duplicates; ledgerly is the lookup connector that
///   can. The naive month measured 70 duplicates on ledgerly in 47.6 M steps (its indeterminate writes, since naive
///   duplicates on each); the article's 1 per 4.2 M is ≈ 11 in that volume, so ≈ 11 / 70 ≈ 16 % of ledgerly's writes
///   must be late past its bound (`incident_p = 0.16`, up to an hour): the article's "handful of APIs that confirm a
///   write before it is visible to reads". Payments' customer search: 0.05 % late; contacts: never. The rules rate is
///   therefore a calibration, not a prediction; what the month predicts is where the residual falls (ledgerly only),
///   the share of runs a customer sees retried, and that keyed and at-most-once actions never duplicate.
const MONTH: &str = r#"
[world]
run_rate_per_s = 7.7
runs_in_flight_max = 2000
webhook_share = 0.1
crash_interval_s_mean = 21600.0
crash_point_p = 0.000001
cut_interval_s_mean = 0.0
stall_interval_s_mean = 0.0
double_dispatch_share = 0.0
replay_share = 0.0
person_share = 1.0
person_delay_ms = 3600000

[mix]
signup = 4.0
checkout = 3.0
payout = 0.5
onboard = 1.0
assist = 1.0

[connectors.payments]
fail_before_commit_p = 0.00008
rate_limit_p = 0.00008
reset_before_send_p = 0.00008
timeout_after_commit_p = 0.000006
error_after_commit_p = 0.000005
incident_p = 0.0005
[connectors.payments.webhooks]
duplicate_p = 0.01
receiver_failure_p = 0.001
twin_event_p = 0.001
reorder_ms_max = 2000

[connectors.contacts]
fail_before_commit_p = 0.00008
rate_limit_p = 0.00008
reset_before_send_p = 0.00008
timeout_after_commit_p = 0.000006
error_after_commit_p = 0.000005
incident_p = 0.0

[connectors.ledgerly]
fail_before_commit_p = 0.00008
rate_limit_p = 0.00008
reset_before_send_p = 0.00008
timeout_after_commit_p = 0.000006
error_after_commit_p = 0.000005
incident_p = 0.16

[connectors.payouts]
fail_before_commit_p = 0.00008
rate_limit_p = 0.00008
reset_before_send_p = 0.00008
timeout_after_commit_p = 0.000006
error_after_commit_p = 0.000005

[connectors.email]
fail_before_commit_p = 0.00008
rate_limit_p = 0.00008
reset_before_send_p = 0.00008
timeout_after_commit_p = 0.000006
error_after_commit_p = 0.000005
"#;
