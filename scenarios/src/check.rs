//! `flowsim check`: the release gate. A gate suite is the catalogue × seeds; each case is one independent simulation
//! (`--policy rules --ledger memory`, one shard), judged against the scenario's promise and a budget file.
//!
//! The decision core is pure: [`cases`] lists the suite in a fixed order, [`shard_cases`] picks a deterministic slice,
//! [`judge`] turns one case's results and the budgets into a verdict. The driver ([`main`]) runs the cases on
//! `--jobs` threads and writes the outputs; results are stored by case index, so nothing depends on the thread count.
//!
//! Case order: scenario in catalogue order, then seed `1..=seeds`; case `i` is 0-based in that order. Shard `I/N`
//! runs the cases with `i % N == I`.
//!
//! `--json` writes a [`CheckFile`] (`check_format` = [`CHECK_FORMAT`]): every case's verdict and full results, plus
//! the merge of the non-canary cases. `flowsim report` reads it (and merges several shards' files by case index).

use crate::catalogue::{self, Expect};
use reports::{GateCase, Rate};
use sim::results::Results;
use std::path::{Path, PathBuf};

/// The value of `check_format` in a `flowsim check --json` file.
pub const CHECK_FORMAT: &str = "flow-check/1";

/// The budget file used when `--budgets` is not given (relative to the working directory, i.e. the repository).
pub const BUDGETS_DEFAULT: &str = "budgets/release.toml";
/// The default budgets as the binary was built with them, for a `check` run outside the workspace.
const BUDGETS_BUILT_IN: &str = include_str!("../../budgets/release.toml");

/// The guarantee class whose duplicates are judged on a rate (the article's residual class).
pub const RESIDUAL_CLASS: &str = "lookup-before-create";

/// The most threads `--jobs` may ask for.
pub const JOBS_MAX: usize = 64;

/// The most seeds per scenario `--seeds` may ask for (a sweep bigger than this is sharded instead).
pub const SEEDS_MAX: u64 = 100_000;

/// A gate profile: how many seeds and steps per case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateProfile {
    pub name: &'static str,
    /// Seeds per scenario (`1..=seeds`).
    pub seeds: u64,
    /// Steps per case; the canary runs at most its catalogue default (it only has to show duplicates).
    pub steps: u64,
    /// The first this-many seeds of every scenario run twice and must give identical results (I9).
    pub determinism_seeds: u64,
}

/// The gate of every pull request: 12 scenarios × 3 seeds × 30 k steps, plus one determinism re-run per scenario
/// (≈ 1.3 M steps; see `docs/gate.md` for the measured time).
pub const QUICK: GateProfile = GateProfile { name: "quick", seeds: 3, steps: 30_000, determinism_seeds: 1 };

/// The release gate: 12 scenarios × 20 seeds × 100 k steps, plus one determinism re-run per scenario (≈ 24 M steps;
/// measured 20 min on 2 cores including the build, 32 min when shared with a month run, see `docs/gate.md`).
pub const RELEASE: GateProfile = GateProfile { name: "release", seeds: 20, steps: 100_000, determinism_seeds: 1 };

/// Per-scenario caps on steps per case, so that one case cannot hold the gate up. Empty: `agent-crash` was capped at
/// 2 k steps while a crash storm (every restart walked ~300 runs past crash points at 1 % each, so a restarted worker
/// crashed again at once) made its cost grow with length; the crash-point grace period (`world.crash_point_grace_ms`)
/// removed the storm.
pub const STEPS_MAX_BY_SCENARIO: &[(&str, u64)] = &[];

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileArg {
    Quick,
    Release,
}

/// The arguments of `flowsim check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    #[arg(long, value_enum, default_value_t = ProfileArg::Quick)]
    pub profile: ProfileArg,
    /// The budget file (TOML); default `budgets/release.toml`.
    #[arg(long)]
    pub budgets: Option<PathBuf>,
    /// Write JUnit XML here (one test case per scenario and seed).
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Write the verdicts and results JSON here (readable by `flowsim report`).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Run only the cases `i` with `i % N == I` (0-based), e.g. `--shard 0/4`.
    #[arg(long, value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Seeds per scenario (overrides the profile).
    #[arg(long)]
    pub seeds: Option<u64>,
    /// Steps per case (overrides the profile).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Cases run at once, each on its own thread.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
}

/// A slice `index` of `count` of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

/// Parses `I/N` with `0 <= I < N`.
pub fn parse_shard(text: &str) -> Result<Shard, String> {
    let (i, n) = text.split_once('/').ok_or_else(|| format!("{text:?}: a shard is I/N, e.g. 0/4"))?;
    let index: u64 = i.trim().parse().map_err(|_| format!("{text:?}: the shard index {i:?} is not a number"))?;
    let count: u64 = n.trim().parse().map_err(|_| format!("{text:?}: the shard count {n:?} is not a number"))?;
    if count == 0 || index >= count {
        return Err(format!("{text:?}: need 0 <= I < N (shards are 0-based)"));
    }
    Ok(Shard { index, count })
}

/// The budget file. Every field is required except `paused_run_share_max`; unknown fields are refused.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Invariant violations allowed per case (the gate's rule: 0).
    pub invariant_violations_max: u64,
    /// Duplicates of `keyed` actions allowed per case.
    pub keyed_duplicates_max: u64,
    /// Duplicates of `at-most-once` actions allowed per case.
    pub at_most_once_duplicates_max: u64,
    /// The residual class's duplicates per step of its actions: the most the Clopper–Pearson 95 % upper bound of
    /// a case may reach.
    pub residual_rate_upper_95_max: f64,
    /// Cases with fewer steps of the residual class than this are not judged on its rate: their upper bound says
    /// nothing (0 in `n` has an upper bound of about `3 / n`). Default 0: every case is judged.
    #[serde(default)]
    pub residual_steps_min: u64,
    /// Paused runs / runs allowed per case, when given.
    #[serde(default)]
    pub paused_run_share_max: Option<f64>,
}

/// Operating errors of the gate (all exit 2).
#[derive(Debug)]
pub enum Error {
    Budgets { path: PathBuf, message: String },
    Usage(String),
    Write { path: PathBuf, source: std::io::Error },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Budgets { path, message } => write!(f, "budget file {}: {message}", path.display()),
            Error::Usage(message) => write!(f, "{message}"),
            Error::Write { path, source } => write!(f, "cannot write {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {}

/// Parses a budget file's text; the message names the line and field (toml's error carries the span).
pub fn parse_budgets(text: &str, path: &Path) -> Result<Budgets, Error> {
    let budgets: Budgets =
        toml::from_str(text).map_err(|e| Error::Budgets { path: path.to_path_buf(), message: e.to_string() })?;
    let share_ok = |x: f64| (0.0..=1.0).contains(&x);
    // Named with its line, as toml names the line of a parse error.
    let out_of_range = |field: &str, value: f64| {
        let line = text
            .lines()
            .position(|l| l.trim_start().strip_prefix(field).is_some_and(|rest| rest.trim_start().starts_with('=')))
            .map_or_else(String::new, |n| format!("line {}: ", n + 1));
        Error::Budgets { path: path.to_path_buf(), message: format!("{line}{field} = {value} must lie in 0..=1") }
    };
    if !share_ok(budgets.residual_rate_upper_95_max) {
        return Err(out_of_range("residual_rate_upper_95_max", budgets.residual_rate_upper_95_max));
    }
    if let Some(x) = budgets.paused_run_share_max.filter(|x| !share_ok(*x)) {
        return Err(out_of_range("paused_run_share_max", x));
    }
    Ok(budgets)
}

/// Reads and parses a budget file.
pub fn load_budgets(path: &Path) -> Result<Budgets, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Budgets { path: path.to_path_buf(), message: format!("cannot read: {e}") })?;
    parse_budgets(&text, path)
}

/// One case of the suite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// 0-based position in the whole (unsharded) suite.
    pub index: u64,
    pub scenario: &'static str,
    pub expect: Expect,
    pub seed: u64,
    pub steps: u64,
    /// Run twice and compare (I9).
    pub check_determinism: bool,
}

/// The whole suite in its fixed order (scenario in catalogue order, then seed).
pub fn cases(profile: &GateProfile) -> Vec<Case> {
    let mut out = Vec::new();
    for scenario in catalogue::CATALOGUE.iter().filter(|s| s.name != "month") {
        let cap = STEPS_MAX_BY_SCENARIO.iter().find(|(name, _)| *name == scenario.name).map_or(u64::MAX, |(_, m)| *m);
        let steps = if scenario.expect == Expect::CanaryFails {
            profile.steps.min(scenario.steps_default)
        } else {
            profile.steps.min(cap)
        };
        for seed in 1..=profile.seeds {
            out.push(Case {
                index: out.len() as u64,
                scenario: scenario.name,
                expect: scenario.expect,
                seed,
                steps,
                check_determinism: seed <= profile.determinism_seeds,
            });
        }
    }
    out
}

/// The cases of `shard` (all of them without one).
pub fn shard_cases(all: Vec<Case>, shard: Option<Shard>) -> Vec<Case> {
    match shard {
        None => all,
        Some(s) => all.into_iter().filter(|c| c.index % s.count == s.index).collect(),
    }
}

/// Duplicates per step of the residual class's actions (`None` when the case had no such step and no duplicate).
///
/// The trials are the steps of every action a lookup protects: the lookup-before-create ones, and keyed ones with a
/// lookup (their fallback past key retention), whose residual duplicates the results count under this class too.
pub fn residual_rate(results: &Results) -> Result<Option<Rate>, String> {
    let trials: u64 = results
        .actions
        .values()
        .filter(|a| a.class == RESIDUAL_CLASS || a.lag_bound_ms.is_some())
        .map(|a| a.steps)
        .sum();
    let events = results.duplicates.by_class.get(RESIDUAL_CLASS).copied().unwrap_or(0);
    if trials == 0 && events == 0 {
        return Ok(None);
    }
    Rate::new(events, trials).map(Some).map_err(|e| format!("{RESIDUAL_CLASS}: {e}"))
}

/// Judges one case: `Ok(())` or every reason it failed. Pure.
pub fn judge(results: &Results, expect: Expect, budgets: &Budgets) -> Result<(), Vec<String>> {
    let class = |c: &str| results.duplicates.by_class.get(c).copied().unwrap_or(0);
    if expect == Expect::CanaryFails {
        // The canary ignores keys: if the harness sees no duplicate there, it cannot see one anywhere.
        return if class("canary") > 0 {
            Ok(())
        } else {
            Err(vec!["the canary passed (no duplicate found): the harness cannot detect duplicates".into()])
        };
    }
    let mut reasons = Vec::new();
    if let Err(reason) = crate::run::verdict(results, expect, engine::executor::Policy::Rules) {
        reasons.push(reason);
    }
    let violations: u64 = results.invariants.values().map(|i| i.violations).sum();
    if violations > budgets.invariant_violations_max {
        reasons.push(format!("{violations} invariant violations (budget {})", budgets.invariant_violations_max));
    }
    for (name, max) in [("keyed", budgets.keyed_duplicates_max), ("at-most-once", budgets.at_most_once_duplicates_max)]
    {
        if class(name) > max {
            reasons.push(format!("{} {name} duplicates (budget {max})", class(name)));
        }
    }
    match residual_rate(results) {
        Ok(Some(rate))
            if rate.trials >= budgets.residual_steps_min && rate.upper_95 > budgets.residual_rate_upper_95_max =>
        {
            reasons.push(format!(
                "{RESIDUAL_CLASS} duplicates {} in {} steps: 95 % upper bound {:.3e} exceeds the budget {:.3e}",
                rate.events, rate.trials, rate.upper_95, budgets.residual_rate_upper_95_max
            ))
        }
        Ok(_) => {}
        Err(e) => reasons.push(e),
    }
    if let Some(max) = budgets.paused_run_share_max
        && results.runs > 0
    {
        let share = results.paused_runs as f64 / results.runs as f64;
        if share > max {
            reasons.push(format!("paused-run share {share:.4} exceeds the budget {max}"));
        }
    }
    if reasons.is_empty() { Ok(()) } else { Err(reasons) }
}

/// `expect` as written in the JSON.
pub fn expect_name(expect: Expect) -> &'static str {
    match expect {
        Expect::AllHold => "all-hold",
        Expect::ResidualOnly => "residual-only",
        Expect::CanaryFails => "canary-fails",
    }
}

/// One case in the `--json` file: its verdict (the JUnit fields) and its results.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CaseRecord {
    pub index: u64,
    pub expect: String,
    pub steps: u64,
    #[serde(flatten)]
    pub verdict: GateCase,
    /// `None` when the simulation panicked (a broken invariant asserted inside the engine or the simulator).
    pub results: Option<Results>,
}

/// The `--json` file of `flowsim check`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CheckFile {
    /// Always [`CHECK_FORMAT`].
    pub check_format: String,
    pub profile: String,
    pub seeds: u64,
    pub steps: u64,
    pub shard: Option<Shard>,
    pub budgets: Budgets,
    pub passed: bool,
    /// The cases this run made, by index.
    pub cases: Vec<CaseRecord>,
    /// The merge of every non-canary case (the canary is a self-test of the harness, not a rate to publish);
    /// `None` when there was none.
    pub merged: Option<Results>,
}

/// The resolved suite settings.
fn resolve(args: &CheckArgs) -> Result<(GateProfile, Budgets, PathBuf), Error> {
    let mut profile = match args.profile {
        ProfileArg::Quick => QUICK,
        ProfileArg::Release => RELEASE,
    };
    if let Some(seeds) = args.seeds {
        if seeds == 0 || seeds > SEEDS_MAX {
            return Err(Error::Usage(format!("--seeds must be between 1 and {SEEDS_MAX}")));
        }
        profile.seeds = seeds;
    }
    if let Some(steps) = args.steps {
        profile.steps = crate::run::steps_in_range("--steps", steps).map_err(Error::Usage)?;
    }
    if args.jobs == 0 || args.jobs > JOBS_MAX {
        return Err(Error::Usage(format!("--jobs must be between 1 and {JOBS_MAX}")));
    }
    match &args.budgets {
        Some(path) => Ok((profile, load_budgets(path)?, path.clone())),
        // The default file, as the working directory has it (the workspace's root, where `cargo flowsim` runs);
        // elsewhere the copy built into the binary, so `check` runs from any directory.
        // `symlink_metadata`: a link that leads nowhere is the workspace's file gone wrong, read (and refused as
        // unreadable) rather than silently replaced by the built-in copy.
        None if Path::new(BUDGETS_DEFAULT).symlink_metadata().is_ok() => {
            Ok((profile, load_budgets(Path::new(BUDGETS_DEFAULT))?, PathBuf::from(BUDGETS_DEFAULT)))
        }
        None => {
            let path = PathBuf::from(format!("{BUDGETS_DEFAULT} (the copy built into flowsim)"));
            Ok((profile, parse_budgets(BUDGETS_BUILT_IN, &path)?, path))
        }
    }
}

/// Runs `flowsim check` and returns the exit code.
pub fn main(args: &CheckArgs) -> i32 {
    let (profile, budgets, budgets_path) = match resolve(args) {
        Ok(r) => r,
        Err(e) => {
            errln!("flowsim check: {e}");
            return 2;
        }
    };
    if let Err(e) = crate::output::check_all([&args.junit, &args.json], &[budgets_path.as_path()]) {
        errln!("flowsim check: {e}");
        return 2;
    }
    let cases = shard_cases(cases(&profile), args.shard);
    let shard_text = args.shard.map_or_else(String::new, |s| format!(" shard {}/{}", s.index, s.count));
    outln!(
        "flowsim check: profile {} seeds {} steps {}{shard_text}: {} on {}, budgets {}",
        profile.name,
        profile.seeds,
        profile.steps,
        crate::output::count(cases.len() as u64, "case", "cases"),
        crate::output::count(args.jobs as u64, "thread", "threads"),
        budgets_path.display()
    );
    #[allow(clippy::disallowed_methods, reason = "wall time outside the simulations, for the JUnit suite's time only")]
    let started = std::time::Instant::now();
    let records = match run_cases(&cases, &budgets, args.jobs) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let failed: Vec<&CaseRecord> = records.iter().filter(|r| !r.verdict.passed).collect();
    for r in &failed {
        outln!("FAILED {}: {}", r.verdict.name(), r.verdict.message);
        outln!("  reproduce with: {}", r.verdict.repro);
    }
    if !failed.is_empty() {
        outln!(
            "(a repro replays its case exactly; budgets are judged by `flowsim check` only, so a case that failed \
             on a budget alone exits 0 there)"
        );
    }
    let merged = Results::merge_all(
        records.iter().filter(|r| r.expect != expect_name(Expect::CanaryFails)).filter_map(|r| r.results.as_ref()),
    );
    let file = CheckFile {
        check_format: CHECK_FORMAT.into(),
        profile: profile.name.into(),
        seeds: profile.seeds,
        steps: profile.steps,
        shard: args.shard,
        budgets,
        passed: failed.is_empty(),
        cases: records.clone(),
        merged,
    };
    let verdicts: Vec<GateCase> = records.iter().map(|r| r.verdict.clone()).collect();
    let outputs = [
        (&args.junit, reports::junit(&verdicts, started.elapsed().as_secs_f64())),
        (&args.json, serde_json::to_string_pretty(&file).expect("a check file serialises")),
    ];
    // The verdict is printed first, so a failed write (checked for before the cases ran: a full disk or the like)
    // does not hide it. Both files or neither.
    outln!("flowsim check: {} of {} cases passed", records.len() - failed.len(), records.len());
    let outputs = outputs.iter().filter_map(|(path, text)| path.as_ref().map(|p| (p.as_path(), text.as_bytes())));
    if let Err(e) = reports::files::write_all(outputs) {
        errln!("flowsim check: {}", Error::Write { path: e.path, source: e.source });
        return 2;
    }
    if failed.is_empty() { 0 } else { 1 }
}

#[cfg(not(madsim))]
fn run_cases(_cases: &[Case], _budgets: &Budgets, _jobs: usize) -> Result<Vec<CaseRecord>, i32> {
    errln!(
        "flowsim check: this binary was built without `--cfg madsim`, so it cannot simulate.\n\
         Run it through the cargo alias, which builds with the simulation cfg: `cargo flowsim check ...`.\n\
         If you did use the alias, check that RUSTFLAGS is not set in the environment: it overrides the alias's cfg."
    );
    Err(2)
}

/// Runs `cases` on `jobs` threads; the records come back in the cases' order whatever the threads did.
#[cfg(madsim)]
fn run_cases(cases: &[Case], budgets: &Budgets, jobs: usize) -> Result<Vec<CaseRecord>, i32> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mut prepared = Vec::with_capacity(cases.len());
    for case in cases {
        match crate::run::prepare(case.scenario, case.seed, Some(case.steps)) {
            Ok(p) => prepared.push(p),
            Err(e) => {
                errln!("flowsim check: {e}");
                return Err(2);
            }
        }
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<CaseRecord>>> = cases.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(cases.len()) {
            std::thread::Builder::new()
                .name("flowsim-check".into())
                .spawn_scoped(scope, || {
                    // Each worker takes the next case; at most `cases.len()` iterations in all.
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(case) = cases.get(i) else { break };
                        // A broken invariant panics loudly inside the simulation; the gate records it as this case's
                        // failure (with its repro command) instead of losing every other case's verdict.
                        let record = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            run_case(case, &prepared[i], budgets)
                        }))
                        .unwrap_or_else(|panic| panicked_case(case, panic.as_ref()));
                        outln!(
                            "  {:<5} {} seed={} ({:.1} s)",
                            if record.verdict.passed { "ok" } else { "FAIL" },
                            case.scenario,
                            case.seed,
                            record.verdict.duration_s
                        );
                        *slots[i].lock().expect("no worker panicked holding a slot") = Some(record);
                    }
                })
                .expect("a check thread starts");
        }
    });
    Ok(slots
        .into_iter()
        .map(|s| s.into_inner().expect("no worker panicked holding a slot").expect("every case ran"))
        .collect())
}

/// The `flowsim run` arguments of a case.
#[cfg(madsim)]
fn run_args(case: &Case) -> crate::run::RunArgs {
    crate::run::RunArgs {
        check_determinism: case.check_determinism,
        ..crate::run::RunArgs::quiet(case.scenario, case.seed, Some(case.steps))
    }
}

/// Runs one case (twice when it checks determinism) and judges it.
#[cfg(madsim)]
fn run_case(case: &Case, prepared: &crate::run::Prepared, budgets: &Budgets) -> CaseRecord {
    use crate::run::{deterministic_bytes, execute};
    let args = run_args(case);
    let (mut results, _) = execute(&args, prepared, false);
    let mut duration_s = results.wall_seconds;
    if case.check_determinism {
        let (again, _) = execute(&args, prepared, false);
        duration_s += again.wall_seconds;
        let same =
            results.trace_hash == again.trace_hash && deterministic_bytes(&results) == deterministic_bytes(&again);
        let i9 = results.invariants.entry("I9".into()).or_default();
        i9.checked = true;
        i9.holds = same;
        i9.violations = u64::from(!same);
        i9.first_violation = (!same).then(|| {
            format!(
                "two runs of seed {} differ: trace hashes {} and {}",
                case.seed, results.trace_hash, again.trace_hash
            )
        });
    }
    let verdict = judge(&results, case.expect, budgets);
    let message = verdict.err().map(|r| r.join("; "));
    let repro = results.repro.clone();
    case_record(case, message, repro, duration_s, Some(results))
}

/// A case's record: passed when there is no failure `message`.
#[cfg(madsim)]
fn case_record(
    case: &Case,
    message: Option<String>,
    repro: String,
    duration_s: f64,
    results: Option<Results>,
) -> CaseRecord {
    CaseRecord {
        index: case.index,
        expect: expect_name(case.expect).into(),
        steps: case.steps,
        verdict: GateCase {
            scenario: case.scenario.into(),
            seed: case.seed,
            passed: message.is_none(),
            message: message.unwrap_or_default(),
            repro,
            duration_s,
        },
        results,
    }
}

/// The record of a case whose simulation panicked.
#[cfg(madsim)]
fn panicked_case(case: &Case, panic: &(dyn std::any::Any + Send)) -> CaseRecord {
    let text = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("(a non-text panic payload)");
    let repro = crate::run::repro_command(&run_args(case), case.steps);
    case_record(case, Some(format!("the simulation panicked: {text}")), repro, 0.0, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_partition_the_suite() {
        let all = cases(&QUICK);
        for count in 1..=5u64 {
            let mut seen: Vec<u64> = (0..count)
                .flat_map(|index| shard_cases(all.clone(), Some(Shard { index, count })).into_iter().map(|c| c.index))
                .collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..all.len() as u64).collect::<Vec<_>>(), "{count} shards");
        }
    }

    /// `(index, count)` of a parsed shard, or `()` for a refusal.
    type ShardOrRefusal = Result<(u64, u64), ()>;

    #[test]
    fn shard_parsing() {
        let table: &[(&str, ShardOrRefusal)] = &[
            ("0/1", Ok((0, 1))),
            ("3/4", Ok((3, 4))),
            ("4/4", Err(())),
            ("0/0", Err(())),
            ("1", Err(())),
            ("a/2", Err(())),
        ];
        for (text, want) in table {
            let got = parse_shard(text).map(|s| (s.index, s.count)).map_err(|_| ());
            assert_eq!(&got, want, "{text}");
        }
    }

    #[test]
    fn the_repository_budgets_parse() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../budgets/release.toml");
        let budgets = load_budgets(&path).expect("budgets/release.toml parses");
        assert_eq!(budgets.invariant_violations_max, 0);
        assert_eq!(budgets.keyed_duplicates_max, 0);
        assert_eq!(budgets.at_most_once_duplicates_max, 0);
    }

    #[test]
    fn malformed_budgets_name_the_line_and_field() {
        let good = "invariant_violations_max = 0\nkeyed_duplicates_max = 0\nat_most_once_duplicates_max = 0\n\
                    residual_rate_upper_95_max = 0.01\n";
        let table: &[(String, &[&str])] = &[
            (format!("{good}surprise = 1\n"), &["line 5", "surprise"]),
            (good.replace("= 0.01", "= \"high\""), &["line 4", "residual_rate_upper_95_max"]),
            (good.replace("keyed_duplicates_max = 0\n", ""), &["keyed_duplicates_max"]),
            (good.replace("0.01", "2.0"), &["residual_rate_upper_95_max", "0..=1"]),
        ];
        assert!(parse_budgets(good, Path::new("b.toml")).is_ok());
        for (text, needles) in table {
            let message = parse_budgets(text, Path::new("b.toml")).expect_err(text).to_string();
            for needle in *needles {
                assert!(message.contains(needle), "{message:?} lacks {needle:?}");
            }
        }
    }

    fn results(by_class: &[(&str, u64)], lookup_steps: u64) -> Results {
        let mut r = Results { runs: 100, ..Results::default() };
        for (class, n) in by_class {
            r.duplicates.by_class.insert((*class).into(), *n);
            r.duplicates.total += n;
        }
        r.actions.insert(
            "contacts.create".into(),
            sim::results::ActionStats { class: RESIDUAL_CLASS.into(), steps: lookup_steps, ..Default::default() },
        );
        r
    }

    #[test]
    fn judging_cases() {
        let budgets = Budgets {
            invariant_violations_max: 0,
            keyed_duplicates_max: 0,
            at_most_once_duplicates_max: 0,
            // 0 in 10,000 has an upper bound of 3.0e-4; 5 in 10,000 of 1.05e-3.
            residual_rate_upper_95_max: 1e-3,
            residual_steps_min: 500,
            paused_run_share_max: Some(0.1),
        };
        let table: &[(&str, Expect, Results, Option<&str>)] = &[
            ("clean", Expect::AllHold, results(&[], 10_000), None),
            ("keyed dup", Expect::ResidualOnly, results(&[("keyed", 1)], 10_000), Some("1 keyed duplicates")),
            ("amo dup", Expect::ResidualOnly, results(&[("at-most-once", 2)], 10_000), Some("2 at-most-once")),
            ("residual in bound", Expect::ResidualOnly, results(&[(RESIDUAL_CLASS, 2)], 10_000), None),
            ("residual upper over", Expect::ResidualOnly, results(&[(RESIDUAL_CLASS, 5)], 10_000), Some("upper bound")),
            ("few steps", Expect::ResidualOnly, results(&[], 1_000), Some("upper bound")),
            ("too few to judge", Expect::ResidualOnly, results(&[(RESIDUAL_CLASS, 2)], 499), None),
            ("no lookups", Expect::ResidualOnly, results(&[], 0), None),
            ("canary found", Expect::CanaryFails, results(&[("canary", 3)], 0), None),
            ("canary passed", Expect::CanaryFails, results(&[], 0), Some("the canary passed")),
            ("paused", Expect::AllHold, Results { paused_runs: 11, ..results(&[], 10_000) }, Some("paused-run share")),
        ];
        for (name, expect, r, want) in table {
            match (judge(r, *expect, &budgets), want) {
                (Ok(()), None) => {}
                (Err(reasons), Some(needle)) => {
                    assert!(reasons.iter().any(|m| m.contains(needle)), "{name}: {reasons:?} lacks {needle:?}")
                }
                (got, want) => panic!("{name}: got {got:?}, wanted a failure containing {want:?}"),
            }
        }
    }
}
