//! `flowsim sweep`: the price of the lookup safeguard, measured.
//!
//! A lookup-before-create connector is safe only if the engine waits out the connector's read-after-write lag before
//! a lookup may conclude "not created". The wait is the lag bound the integration declares (the knob
//! `connectors.NAME.lookup_wait_ms`; unset, the documented bound). A longer bound leaves fewer writes still invisible
//! at the lookup (fewer residual duplicates) and makes every step that needs the lookup slower. The sweep runs one
//! scenario at several bounds and seeds and prints both sides, with exact intervals, so a team can pick its bound
//! with numbers.
//!
//! For each bound it writes `bound-<ms>.toml` (the scenario with the bound set: a profile file `flowsim run
//! --scenario` takes, so every point replays on its own) and `bound-<ms>.json` (the seeds' results merged), and it
//! writes `sweep.md` with the table. `flowsim report --out DIR DIR/bound-*.json` charts residual duplicates against
//! the bound.

use sim::results::Results;
use std::path::PathBuf;

/// Steps per simulation when neither `--steps` nor the scenario file sets them.
pub const STEPS_DEFAULT: u64 = 50_000;

/// The arguments of `flowsim sweep`.
#[derive(clap::Args, Debug, Clone)]
pub struct SweepArgs {
    /// A catalogue name or a profile file: the lag and fault profile the bounds are tried against.
    #[arg(long, default_value = "lookup-lag-over-bound")]
    pub scenario: String,
    /// The lookup connector whose declared lag bound is swept.
    #[arg(long, default_value = "ledgerly")]
    pub connector: String,
    /// The bounds to try, in simulated milliseconds, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "0,5000,30000,120000,600000,3600000")]
    pub bounds_ms: Vec<u64>,
    /// Seeds per bound (`1..=seeds`); the same seeds for every bound.
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Steps per simulation, at most 10^12 (default: the scenario file's `steps` if it sets them, else 50,000).
    #[arg(long)]
    pub steps: Option<u64>,
    /// Simulations run at once, each on its own thread.
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// The directory for the profile files, results and `sweep.md`.
    #[arg(long, default_value = "sweep")]
    pub out: PathBuf,
}

/// The scenario text with `connectors.<connector>.lookup_wait_ms = bound_ms` set (merged into the TOML, so a scenario
/// that already configures the connector keeps its other knobs). Errors name the problem.
pub fn profile_text(scenario_text: &str, connector: &str, bound_ms: u64, steps: Option<u64>) -> Result<String, String> {
    let mut table: toml::Table = scenario_text.parse().map_err(|e| format!("the scenario is not TOML: {e}"))?;
    // A point's file replays on its own the steps its point ran (`--steps` may have overridden the file's own).
    if let Some(steps) = steps {
        let steps = i64::try_from(steps).map_err(|_| format!("{steps} steps is too many"))?;
        table.insert("steps".to_owned(), toml::Value::Integer(steps));
    }
    let connectors = table
        .entry("connectors")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or("`connectors` in the scenario is not a table")?;
    let knobs = connectors
        .entry(connector)
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
        .as_table_mut()
        .ok_or_else(|| format!("`connectors.{connector}` in the scenario is not a table"))?;
    let bound = i64::try_from(bound_ms).map_err(|_| format!("bound {bound_ms} ms is too large"))?;
    knobs.insert("lookup_wait_ms".to_owned(), toml::Value::Integer(bound));
    let body = toml::to_string(&table).map_err(|e| format!("cannot write the profile: {e}"))?;
    Ok(format!("# flowsim sweep: {connector}'s declared lag bound set to {bound_ms} ms\n{body}"))
}

/// One row of the sweep table: one bound, every seed merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub bound_ms: u64,
    /// Steps of the swept connector's lookup actions, and their duplicates (all residual when the invariants hold).
    pub steps: u64,
    pub duplicates: u64,
    pub rate: reports::Rate,
    /// Step latency over every action (simulated ms; the largest of the seeds' percentiles).
    pub p99_ms: u64,
    pub p999_ms: u64,
    /// Lookups made, and the mean simulated time one took (the read itself, not the wait before it).
    pub lookups: u64,
    pub invariants_hold: bool,
}

/// The table row of one bound's merged results.
pub fn row(bound_ms: u64, connector: &str, results: &Results) -> Result<Row, String> {
    let prefix = format!("{connector}.");
    let (steps, duplicates, lookups) = results
        .actions
        .iter()
        .filter(|(name, stats)| name.starts_with(&prefix) && stats.lag_bound_ms.is_some())
        .fold((0, 0, 0), |(s, d, l), (_, stats)| (s + stats.steps, d + stats.duplicates, l + stats.lookups));
    let rate = reports::Rate::new(duplicates, steps).map_err(|e| format!("bound {bound_ms} ms: {e}"))?;
    Ok(Row {
        bound_ms,
        steps,
        duplicates,
        rate,
        p99_ms: results.latency.p99_ms,
        p999_ms: results.latency.p999_ms,
        lookups,
        invariants_hold: results.all_hold(),
    })
}

/// The bounds whose points simulated exactly the same events (the same trace hash for every seed), in groups of two
/// or more, in the order given: a bound that never made a lookup wait changes nothing.
pub fn same_simulations(bounds_ms: &[u64], trace_hashes: &[String]) -> Vec<Vec<u64>> {
    let mut groups: Vec<(&str, Vec<u64>)> = Vec::new();
    for (bound, hash) in bounds_ms.iter().zip(trace_hashes) {
        match groups.iter_mut().find(|(h, _)| *h == hash.as_str()) {
            Some((_, group)) => group.push(*bound),
            None => groups.push((hash, vec![*bound])),
        }
    }
    groups.into_iter().map(|(_, group)| group).filter(|group| group.len() > 1).collect()
}

/// What the table says under groups of [`same_simulations`].
pub fn alike_note(alike: &[Vec<u64>], connector: &str) -> String {
    let groups: Vec<String> =
        alike.iter().map(|group| group.iter().map(|b| bound(*b)).collect::<Vec<_>>().join(", ")).collect();
    format!(
        "**The bounds {} simulated the same events** (the same trace hash for every seed): no lookup of \
         `{connector}` waited long enough in these runs for the bound to matter. More steps or seeds, or a scenario \
         whose lag reaches the bounds, would tell them apart. A report counts each simulation once, so chart one \
         bound of each.",
        groups.join("; and ")
    )
}

/// The sweep table in Markdown.
pub fn table(scenario: &str, connector: &str, seeds: u64, steps: u64, rows: &[Row]) -> String {
    let mut out = format!(
        "# Lookup safeguard sweep: `{connector}` in `{scenario}`\n\n{} × {steps} steps per bound. \
         Duplicates are per step of `{connector}`'s lookup actions, with the exact (Clopper–Pearson) 95 % interval \
         and one-sided upper bound. Latency is over every step, in simulated time.\n\n\
         | declared bound | steps | duplicates | per million (95 % CI) | upper bound per million | step p99 | step p99.9 | lookups | invariants |\n\
         |---:|---:|---:|---|---:|---:|---:|---:|---|\n",
        crate::output::count(seeds, "seed", "seeds")
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} ({:.1}–{:.1}) | {:.1} | {} | {} | {} | {} |\n",
            bound(r.bound_ms),
            r.steps,
            r.duplicates,
            r.rate.point * 1e6,
            r.rate.interval_95.low * 1e6,
            r.rate.interval_95.high * 1e6,
            r.rate.upper_95 * 1e6,
            duration(r.p99_ms),
            duration(r.p999_ms),
            r.lookups,
            if r.invariants_hold { "hold" } else { "BROKEN" },
        ));
    }
    out
}

/// A declared bound, exactly: `2 min` or `1 h` when it is a whole number of them, else in milliseconds (`1001 ms`; a
/// rounded `1.0 s` would name two bounds alike).
fn bound(ms: u64) -> String {
    match ms {
        ms if ms > 0 && ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms > 0 && ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms > 0 && ms % 1000 == 0 => format!("{} s", ms / 1000),
        0 => "0".to_owned(),
        ms => format!("{ms} ms"),
    }
}

/// `90 s`, `2 min`, `1 h`, `350 ms`: the unit that reads best.
fn duration(ms: u64) -> String {
    match ms {
        0 => "0".to_owned(),
        ms if ms % 3_600_000 == 0 => format!("{} h", ms / 3_600_000),
        ms if ms % 60_000 == 0 => format!("{} min", ms / 60_000),
        ms if ms >= 10_000 => format!("{:.0} s", ms as f64 / 1000.0),
        ms if ms >= 1_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{ms} ms"),
    }
}

/// Checks the arguments; errors name the problem (exit 2).
pub fn validate(args: &SweepArgs) -> Result<(), String> {
    if args.bounds_ms.is_empty() {
        return Err("--bounds-ms needs at least one bound".into());
    }
    let mut sorted = args.bounds_ms.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != args.bounds_ms.len() {
        return Err("--bounds-ms lists a bound twice".into());
    }
    if args.seeds == 0 || args.seeds > crate::check::SEEDS_MAX {
        return Err(format!("--seeds must be between 1 and {}", crate::check::SEEDS_MAX));
    }
    if let Some(steps) = args.steps {
        crate::run::steps_in_range("--steps", steps)?;
    }
    if args.jobs == 0 || args.jobs > crate::check::JOBS_MAX {
        return Err(format!("--jobs must be between 1 and {}", crate::check::JOBS_MAX));
    }
    if !sim::workflows::CONNECTOR_NAMES.contains(&args.connector.as_str()) {
        return Err(format!(
            "unknown connector {:?}; known: {}",
            args.connector,
            sim::workflows::CONNECTOR_NAMES.join(", ")
        ));
    }
    Ok(())
}

/// Checks that the sweep can measure `connector` in `profile` (the scenario's), and says why not: the connector must
/// be among the profile's, have an action with a lookup (the swept bound is how long a lookup waits), and the mix must
/// run one of those actions. Otherwise every bound's row counts no step at all: a table of zeros and empty intervals
/// that looks like a measurement.
pub fn check_connector(profile: &sim::profile::Profile, connector: &str, scenario: &str) -> Result<(), String> {
    use engine::workflow::StepKind;
    use std::collections::BTreeSet;
    let lookups: Vec<String> = sim::workflows::action_infos(profile)
        .into_iter()
        .filter(|(_, info)| info.lag_bound_ms.is_some())
        .map(|(action, _)| action)
        .collect();
    // The actions the mix runs; an agent step's are chosen by the planner as it runs, so it may run any of them.
    let mut run = BTreeSet::new();
    let mut agent = false;
    let in_mix = |name: &str| profile.mix.get(name).is_some_and(|weight| *weight > 0.0);
    for workflow in sim::workflows::compiled_for(profile).into_iter().filter(|w| in_mix(&w.name)) {
        for step in workflow.steps {
            match step.kind {
                StepKind::Action { action, .. } => {
                    run.insert(action);
                }
                StepKind::Writes(writes) => run.extend(writes.into_iter().map(|(action, _)| action)),
                StepKind::Agent { .. } => agent = true,
            }
        }
    }
    let connector_of = |action: &str| action.split_once('.').map_or(action.to_owned(), |(c, _)| c.to_owned());
    let with_lookup: BTreeSet<String> = lookups.iter().map(|a| connector_of(a)).collect();
    let sweepable: BTreeSet<String> =
        lookups.iter().filter(|a| agent || run.contains(*a)).map(|a| connector_of(a)).collect();
    let list = |set: &BTreeSet<String>| {
        if set.is_empty() { "none".to_owned() } else { set.iter().cloned().collect::<Vec<_>>().join(", ") }
    };
    if !profile.connectors.contains_key(connector) {
        let known: Vec<&str> = profile.connectors.keys().map(String::as_str).collect();
        return Err(format!(
            "--connector {connector} is not in scenario {scenario}'s profile (its connectors: {}); the sweep can \
             measure: {}",
            known.join(", "),
            list(&sweepable)
        ));
    }
    let prefix = format!("{connector}.");
    let own: Vec<&str> = lookups.iter().filter(|a| a.starts_with(&prefix)).map(String::as_str).collect();
    if own.is_empty() {
        return Err(format!(
            "--connector {connector} has no lookup action; the sweep measures lookup lag bounds (connectors with one: \
             {}; in scenario {scenario}'s mix: {})",
            list(&with_lookup),
            list(&sweepable)
        ));
    }
    if !sweepable.contains(connector) {
        return Err(format!(
            "--connector {connector}: scenario {scenario}'s mix runs none of its lookup actions ({}), so the sweep \
             would measure nothing; connectors the mix runs a lookup of: {}",
            own.join(", "),
            list(&sweepable)
        ));
    }
    Ok(())
}

/// Runs `flowsim sweep`; returns the exit code (1 if an invariant broke at some bound).
pub fn main(args: &SweepArgs) -> i32 {
    match validate(args).and_then(|()| sweep(args)) {
        Ok(code) => code,
        Err(e) => {
            errln!("flowsim sweep: {e}");
            2
        }
    }
}

#[cfg(not(madsim))]
fn sweep(_args: &SweepArgs) -> Result<i32, String> {
    Err("this binary was built without `--cfg madsim`, so it cannot simulate. Run it through the cargo alias: \
         `cargo flowsim sweep ...` (and check that RUSTFLAGS is not set: it overrides the alias's cfg)"
        .into())
}

/// A run may have to wait out the declared bound at more than one of its steps (and again after a crash), and every
/// run must be finished or paused before the heal phase ends (I8). A bound beyond a quarter of the heal phase is
/// refused: its I8 failure would be the sweep's own doing, not the engine's.
pub fn check_bounds_fit_the_heal(bounds_ms: &[u64], heal_s_max: u64) -> Result<(), String> {
    let limit_ms = heal_s_max.saturating_mul(1000) / 4;
    match bounds_ms.iter().find(|b| **b > limit_ms) {
        Some(b) => Err(format!(
            "bound {b} ms is more than a quarter of the scenario's heal phase (world.heal_s_max = {heal_s_max} s, so \
             at most {limit_ms} ms): a run may wait out the bound at several steps, and must end before the heal \
             does (I8). Give smaller bounds, or a scenario file with a longer heal_s_max"
        )),
        None => Ok(()),
    }
}

/// Refuses an output directory that holds another sweep's points (`bound-<ms>.json` or `.toml` for a bound this sweep
/// does not measure): the charting command this sweep prints, `report DIR/bound-*.json`, would merge them with its
/// own. Files of this sweep's own bounds are rewritten, so running the same sweep again into its directory is fine.
#[cfg_attr(not(madsim), allow(dead_code, reason = "only a simulating build sweeps"))]
fn check_no_other_sweep(out: &std::path::Path, bounds_ms: &[u64]) -> Result<(), String> {
    let Ok(entries) = std::fs::read_dir(out) else { return Ok(()) };
    let mut others: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| {
            let bound = name.strip_prefix("bound-").and_then(|n| n.strip_suffix(".json").or(n.strip_suffix(".toml")));
            bound.is_some_and(|b| b.parse::<u64>().map_or(true, |b| !bounds_ms.contains(&b)))
        })
        .collect();
    if others.is_empty() {
        return Ok(());
    }
    others.sort();
    Err(format!(
        "{} holds another sweep's points ({}), which `report {}/bound-*.json` would merge with this one's; give --out \
         an empty directory or remove them",
        out.display(),
        others.join(", "),
        out.display()
    ))
}

#[cfg(madsim)]
fn sweep(args: &SweepArgs) -> Result<i32, String> {
    use crate::catalogue::Expect;
    use crate::run::ScenarioSource;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let source = crate::run::scenario_source(&args.scenario)?;
    let text = source.text.clone();
    // A connector the sweep cannot measure is refused before anything is written or run. The scenario is judged as
    // its points will be, with the connector's lookup wait set (its own may be unset, and its lag tail long: the
    // lag the sweep measures the bounds against).
    // (A connector the scenario does not have is not added: it is refused below.)
    let spec = crate::catalogue::parse(&text, &args.scenario)?;
    // The points replace the swept connector's own lookup wait; a wrong one is still a wrong file.
    let own_wait = spec.get("connectors").and_then(|c| c.get(&args.connector)).and_then(|c| c.get("lookup_wait_ms"));
    if let Some(v) = own_wait.filter(|v| v.as_integer().is_none_or(|i| i < 0)) {
        return Err(format!(
            "{}: connectors.{}.lookup_wait_ms = {v} must be a whole number of 0 or more (each point of the sweep \
             replaces it with its bound)",
            args.scenario, args.connector
        ));
    }
    // (Nor is a wait set on a connector that looks nothing up, which the profile would refuse: `check_connector`
    // says why the sweep cannot measure it.)
    let base = crate::catalogue::base_for(&spec);
    let judged = if base.connectors.contains_key(&args.connector) && sim::workflows::has_lookup(&base, &args.connector)
    {
        profile_text(&text, &args.connector, args.bounds_ms.first().copied().unwrap_or(0), None)?
    } else {
        text.clone()
    };
    // Steps as `run` takes them: `--steps`, else the file's own `steps`, else the sweep's default.
    let judged = ScenarioSource { text: judged, steps_default: STEPS_DEFAULT, ..source };
    let crate::run::Prepared { profile, steps, .. } = crate::run::prepare_source(judged, 1, args.steps)?;
    check_connector(&profile, &args.connector, &args.scenario)?;
    check_bounds_fit_the_heal(&args.bounds_ms, profile.world.heal_s_max)?;
    check_no_other_sweep(&args.out, &args.bounds_ms)?;
    reports::files::make_dir(&args.out).map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    // Every file the sweep writes is checked before the first is written: none may be the scenario it reads (a
    // profile file of an earlier sweep in the same directory), and each must be writable.
    let files: Vec<PathBuf> = args.bounds_ms.iter().map(|b| args.out.join(format!("bound-{b}.toml"))).collect();
    let outputs: Vec<Option<PathBuf>> = files
        .iter()
        .cloned()
        .chain(args.bounds_ms.iter().map(|b| args.out.join(format!("bound-{b}.json"))))
        .chain([args.out.join("sweep.md")])
        .map(Some)
        .collect();
    let inputs: Vec<&std::path::Path> = crate::run::scenario_file(&args.scenario).into_iter().collect();
    crate::output::check_all(&outputs, &inputs)?;
    // Every point's profile file, checked with every seed (each draws the knobs the scenario leaves open) and then
    // written (all of them or none): a bad scenario fails before any simulation runs.
    let mut profiles = Vec::new();
    for (&bound, path) in args.bounds_ms.iter().zip(&files) {
        path.to_str().ok_or("the output path is not UTF-8")?;
        // Named as the user wrote it: the point's file is not written yet.
        let name = format!("{} with connectors.{}.lookup_wait_ms = {bound}", args.scenario, args.connector);
        let text = profile_text(&text, &args.connector, bound, Some(steps))?;
        for seed in 1..=args.seeds {
            // As `scenario_source` reads the point's file when it runs.
            let point = ScenarioSource {
                name: name.clone(),
                text: text.clone(),
                expect: Expect::ResidualOnly,
                steps_default: 0,
            };
            crate::run::prepare_source(point, seed, Some(steps)).map_err(|e| format!("seed {seed}: {e}"))?;
        }
        profiles.push(text);
    }
    reports::files::write_all(files.iter().map(PathBuf::as_path).zip(profiles.iter().map(|t| t.as_bytes())))
        .map_err(|e| e.to_string())?;
    let points: Vec<(usize, u64)> =
        (0..files.len()).flat_map(|b| (1..=args.seeds).map(move |seed| (b, seed))).collect();
    outln!(
        "flowsim sweep: {} in {}: {} × {} × {} steps on {}",
        args.connector,
        args.scenario,
        crate::output::count(files.len() as u64, "bound", "bounds"),
        crate::output::count(args.seeds, "seed", "seeds"),
        steps,
        crate::output::count(args.jobs as u64, "thread", "threads")
    );
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<Results, String>>>> = points.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.min(points.len()) {
            std::thread::Builder::new()
                .name("flowsim-sweep".into())
                .spawn_scoped(scope, || {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&(b, seed)) = points.get(i) else { break };
                        let scenario = files[b].to_str().expect("checked UTF-8 above").to_owned();
                        let outcome = crate::run::prepare(&scenario, seed, Some(steps)).map(|prepared| {
                            let run_args = crate::run::RunArgs::quiet(&scenario, seed, Some(steps));
                            crate::run::execute(&run_args, &prepared, false).0
                        });
                        outln!("  bound {} ms seed {seed} done", args.bounds_ms[b]);
                        *slots[i].lock().expect("no sweep thread panicked holding a slot") = Some(outcome);
                    }
                })
                .expect("a sweep thread starts");
        }
    });
    let mut by_bound: Vec<Vec<Results>> = vec![Vec::new(); files.len()];
    for ((b, _), slot) in points.iter().zip(slots) {
        let outcome = slot.into_inner().expect("no sweep thread panicked").expect("every point ran");
        by_bound[*b].push(outcome?);
    }
    let mut rows = Vec::new();
    let mut written = Vec::new();
    let mut hashes = Vec::new();
    for (b, results) in by_bound.iter().enumerate() {
        let merged = Results::merge_all(results.iter()).expect("at least one seed per bound");
        let path = args.out.join(format!("bound-{}.json", args.bounds_ms[b]));
        let json = serde_json::to_string_pretty(&merged).expect("results serialise");
        written.push((path, json + "\n"));
        rows.push(row(args.bounds_ms[b], &args.connector, &merged)?);
        hashes.push(merged.trace_hash);
    }
    let alike = same_simulations(&args.bounds_ms, &hashes);
    let mut table = table(&args.scenario, &args.connector, args.seeds, steps, &rows);
    if !alike.is_empty() {
        table += &format!("\n{}\n", alike_note(&alike, &args.connector));
    }
    let path = args.out.join("sweep.md");
    written.push((path.clone(), table.clone()));
    // Every result file and the table, or none of them (a file written in place, such as a device, comes last and
    // may still fail after the others are written). The table is printed either way.
    outln!("{table}");
    reports::files::write_all(written.iter().map(|(path, text)| (path.as_path(), text.as_bytes())))
        .map_err(|e| e.to_string())?;
    // The directory is quoted for the shell where it needs to be, and the glob after it is left for the shell.
    let out = args.out.to_string_lossy();
    // Points that simulated the same events are one simulation to `report`, which counts each once: name one of each.
    let inputs = if alike.is_empty() {
        format!("{}/bound-*.json", crate::shell::quote(&out))
    } else {
        let repeated: Vec<u64> = alike.iter().flat_map(|group| group[1..].iter().copied()).collect();
        let kept = args.bounds_ms.iter().filter(|b| !repeated.contains(b));
        kept.map(|b| crate::shell::quote(&format!("{out}/bound-{b}.json")).into_owned()).collect::<Vec<_>>().join(" ")
    };
    outln!(
        "wrote {} (and bound-*.toml, bound-*.json); chart it with: cargo flowsim report --out {} {inputs}",
        path.display(),
        crate::shell::quote(&format!("{out}/report")),
    );
    Ok(if rows.iter().all(|r| r.invariants_hold) { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_beyond_a_quarter_of_the_heal_is_refused_in_one_readable_sentence() {
        assert_eq!(check_bounds_fit_the_heal(&[100, 1_000], 4), Ok(()));
        let error = check_bounds_fit_the_heal(&[100, 1_001], 4).expect_err("over a quarter");
        assert!(error.starts_with("bound 1001 ms is more than a quarter"), "{error}");
        assert!(error.contains("heal_s_max = 4 s, so at most 1000 ms): a run"), "{error}");
        assert!(!error.contains("  "), "{error}");
    }

    #[test]
    fn bounds_that_simulated_the_same_events_are_grouped() {
        let h = |s: &str| s.to_owned();
        let bounds = [0, 5_000, 60_000, 120_000];
        assert!(same_simulations(&bounds, &[h("a"), h("b"), h("c"), h("d")]).is_empty());
        assert_eq!(
            same_simulations(&bounds, &[h("a"), h("b"), h("a"), h("b")]),
            [vec![0, 60_000], vec![5_000, 120_000]]
        );
        let note = alike_note(&same_simulations(&bounds, &[h("a"), h("a"), h("c"), h("d")]), "payments");
        assert!(note.starts_with("**The bounds 0, 5 s simulated the same events**"), "{note}");
        assert!(note.contains("`payments`") && !note.contains("  "), "{note}");
    }

    #[test]
    fn profile_text_merges_into_an_existing_connector_table() {
        let text = "[mix]\ncheckout = 1.0\n[connectors.ledgerly]\nincident_p = 0.05\n";
        let out = profile_text(text, "ledgerly", 30_000, None).unwrap();
        let table: toml::Table = out.parse().unwrap();
        let ledgerly = &table["connectors"]["ledgerly"];
        assert_eq!(ledgerly["incident_p"].as_float(), Some(0.05));
        assert_eq!(ledgerly["lookup_wait_ms"].as_integer(), Some(30_000));
        assert_eq!(table["mix"]["checkout"].as_float(), Some(1.0));
    }

    #[test]
    fn profile_text_adds_the_connector_table_when_missing() {
        let out = profile_text("[world]\nworkers = 2\n", "contacts", 0, None).unwrap();
        let table: toml::Table = out.parse().unwrap();
        assert_eq!(table["connectors"]["contacts"]["lookup_wait_ms"].as_integer(), Some(0));
        assert_eq!(table["world"]["workers"].as_integer(), Some(2));
    }

    #[test]
    fn profile_text_names_a_bad_scenario() {
        assert!(profile_text("connectors = 3\n", "ledgerly", 1, None).unwrap_err().contains("not a table"));
        assert!(profile_text("[[", "ledgerly", 1, None).unwrap_err().contains("not TOML"));
    }

    #[test]
    fn swept_profile_resolves_with_the_declared_bound() {
        let text = crate::catalogue::find("lookup-lag-over-bound").unwrap().text;
        let spec = crate::catalogue::parse(&profile_text(text, "ledgerly", 45_000, None).unwrap(), "t").unwrap();
        let profile = sim::profile::resolve(&crate::catalogue::base_for(&spec), &spec, 1, true).unwrap();
        let ledgerly = &profile.connectors["ledgerly"];
        assert_eq!(ledgerly.lookup_wait_ms, Some(45_000));
        assert_eq!(ledgerly.declared_lag_bound_ms(), 45_000);
        // Unset, the declared bound is the documented one.
        let plain = crate::run::prepare("lookup-lag-over-bound", 1, None).unwrap().profile;
        assert_eq!(plain.connectors["ledgerly"].lookup_wait_ms, None);
        assert_eq!(plain.connectors["ledgerly"].declared_lag_bound_ms(), plain.connectors["ledgerly"].lag_bound_ms());
    }

    #[test]
    fn row_counts_only_the_swept_connectors_lookup_actions() {
        let mut results = Results::default();
        let stats = |steps, duplicates, bound: Option<u64>| sim::results::ActionStats {
            steps,
            duplicates,
            lag_bound_ms: bound,
            lookups: steps,
            ..Default::default()
        };
        results.actions.insert("ledgerly.record_entry".into(), stats(1_000_000, 3, Some(30_000)));
        results.actions.insert("contacts.create_contact".into(), stats(500, 9, Some(10_000)));
        results.actions.insert("ledgerly.other".into(), stats(7, 7, None));
        let r = row(30_000, "ledgerly", &results).unwrap();
        assert_eq!((r.steps, r.duplicates, r.lookups), (1_000_000, 3, 1_000_000));
        assert!((r.rate.point - 3e-6).abs() < 1e-12);
        assert!(r.rate.upper_95 > r.rate.point);
        let md = table("s", "ledgerly", 2, 10, &[r]);
        assert!(md.contains("| 30 s | 1000000 | 3 | 3.0 ("), "{md}");
    }

    #[test]
    fn an_output_directory_with_another_sweeps_points_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        check_no_other_sweep(&dir.path().join("missing"), &[0]).expect("a directory still to be made");
        std::fs::write(dir.path().join("bound-0.json"), "{}").expect("write");
        std::fs::write(dir.path().join("sweep.md"), "").expect("write");
        check_no_other_sweep(dir.path(), &[0, 1000]).expect("this sweep's own bound");
        std::fs::write(dir.path().join("bound-5000.toml"), "").expect("write");
        let e = check_no_other_sweep(dir.path(), &[0, 1000]).expect_err("another sweep's point");
        assert!(e.contains("holds another sweep's points (bound-5000.toml)"), "{e}");
    }

    #[test]
    fn only_a_connector_with_a_lookup_action_the_mix_runs_can_be_swept() {
        let profile = crate::run::prepare("lookup-lag-over-bound", 1, None).unwrap().profile;
        assert_eq!(check_connector(&profile, "ledgerly", "s"), Ok(()));
        for connector in ["payouts", "email"] {
            let e = check_connector(&profile, connector, "s").unwrap_err();
            let needle = "has no lookup action; the sweep measures lookup lag bounds (connectors with one: contacts, \
                          ledgerly, payments; in scenario s's mix: ledgerly)";
            assert!(e.contains(needle), "{e}");
        }
        // Both have a lookup action, but the scenario's mix (checkout) runs neither.
        for (connector, actions) in [("payments", "payments.create_customer"), ("contacts", "contacts.create_contact")]
        {
            let e = check_connector(&profile, connector, "s").unwrap_err();
            assert!(e.contains(&format!("s's mix runs none of its lookup actions ({actions})")), "{e}");
        }
        let e = check_connector(&profile, "canary", "s").unwrap_err();
        assert!(e.contains("--connector canary is not in scenario s's profile"), "{e}");
        // An agent step's writes are the planner's choice at run time: any lookup action may run.
        let mixed = crate::run::prepare("mixed", 1, None).unwrap().profile;
        for connector in ["ledgerly", "contacts", "payments"] {
            assert_eq!(check_connector(&mixed, connector, "mixed"), Ok(()), "{connector}");
        }
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(0), "0");
        assert_eq!(duration(350), "350 ms");
        assert_eq!(duration(5_000), "5.0 s");
        assert_eq!(duration(30_000), "30 s");
        assert_eq!(duration(120_000), "2 min");
        assert_eq!(duration(3_600_000), "1 h");
        assert_eq!(duration(90_400), "90 s");
    }

    #[test]
    fn bad_arguments_are_named() {
        let good = SweepArgs {
            scenario: "lookup-lag-over-bound".into(),
            connector: "ledgerly".into(),
            bounds_ms: vec![0, 1000],
            seeds: 1,
            steps: Some(10),
            jobs: 1,
            out: "x".into(),
        };
        assert!(validate(&good).is_ok());
        let bad = |f: fn(&mut SweepArgs), needle: &str| {
            let mut a = good.clone();
            f(&mut a);
            let e = validate(&a).unwrap_err();
            assert!(e.contains(needle), "{e}");
        };
        bad(|a| a.bounds_ms.clear(), "at least one bound");
        bad(|a| a.bounds_ms = vec![5, 5], "twice");
        bad(|a| a.seeds = 0, "--seeds");
        bad(|a| a.steps = Some(0), "--steps");
        bad(|a| a.jobs = 0, "--jobs");
        bad(|a| a.connector = "nope".into(), "unknown connector");
    }
}
