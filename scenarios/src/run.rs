//! `flowsim run` and `flowsim scenarios`.

use crate::catalogue::{self, Expect};
use engine::executor::Policy;
use sim::profile::{self, Profile};
use sim::results::Results;
#[cfg(madsim)]
use std::sync::Arc;

/// What `flowsim run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub scenario: String,
    pub seed: u64,
    pub steps: Option<u64>,
    pub policy: Policy,
    pub ledger: String,
    pub jobs: u32,
    pub json: Option<std::path::PathBuf>,
    pub trace: Option<std::path::PathBuf>,
    pub trace_run: Option<String>,
    pub check_determinism: bool,
    pub quiet: bool,
}

impl RunArgs {
    /// One quiet run of `scenario` at `seed` under the rules with the memory ledger on one shard, writing nothing:
    /// how the gate, the search, the sweep and the tests run a simulation. Change a field for anything else.
    pub fn quiet(scenario: &str, seed: u64, steps: Option<u64>) -> Self {
        RunArgs {
            scenario: scenario.to_owned(),
            seed,
            steps,
            policy: Policy::Rules,
            ledger: "memory".into(),
            jobs: 1,
            json: None,
            trace: None,
            trace_run: None,
            check_determinism: false,
            quiet: true,
        }
    }
}

/// A scenario ready to run: its name, expectation, resolved profile and step count.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub name: String,
    pub expect: Expect,
    pub profile: Profile,
    pub steps: u64,
}

/// A scenario as named on the command line: a catalogue entry, or a profile file.
pub struct ScenarioSource {
    pub name: String,
    pub text: String,
    pub expect: Expect,
    pub steps_default: u64,
}

/// What to tell a user whose `--scenario` names a catalogue scenario and also a file here: the bare name is the
/// catalogue's, and the file is not read.
pub fn shadowed_file_note(command: &str, scenario: &str) -> Option<String> {
    (catalogue::find(scenario).is_some() && std::path::Path::new(scenario).is_file()).then(|| {
        format!(
            "flowsim {command}: note: {scenario:?} is the catalogue's scenario; the file of that name here is not \
             read (write ./{scenario} to run the file)"
        )
    })
}

/// The file `--scenario` names, when it is read as one ([`scenario_source`]: a catalogue name is not): an input no
/// output may be written over.
pub fn scenario_file(scenario: &str) -> Option<&std::path::Path> {
    let path = std::path::Path::new(scenario);
    (path.is_file() && catalogue::find(scenario).is_none()).then_some(path)
}

/// Finds `scenario` in the catalogue, or else reads it as a file; the error names both places it looked.
pub fn scenario_source(scenario: &str) -> Result<ScenarioSource, String> {
    if let Some(s) = catalogue::find(scenario) {
        return Ok(ScenarioSource {
            name: s.name.to_owned(),
            text: s.text.to_owned(),
            expect: s.expect,
            steps_default: s.steps_default,
        });
    }
    let path = std::path::Path::new(scenario);
    if !path.exists() {
        let names: Vec<&str> = catalogue::CATALOGUE.iter().map(|s| s.name).collect();
        return Err(format!(
            "no scenario named {scenario:?} and no such file; the catalogue has: {}",
            names.join(", ")
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {scenario}: {e}"))?;
    Ok(ScenarioSource { name: scenario.to_owned(), text, expect: Expect::ResidualOnly, steps_default: 100_000 })
}

/// The most steps one command simulates: 10^12, weeks of CPU time at any speed this simulator has reached. More is
/// taken for a slip of the keyboard (and near `u64::MAX` the traffic's step count would wrap around).
pub const STEPS_MAX: u64 = 1_000_000_000_000;

/// `steps` if it is between 1 and [`STEPS_MAX`]; else an error naming `what` (`--steps`, or a file's `steps`).
pub fn steps_in_range(what: &str, steps: u64) -> Result<u64, String> {
    match steps {
        0 => Err(format!("{what} must be at least 1")),
        s if s > STEPS_MAX => Err(format!(
            "{what} = {s} is more than {STEPS_MAX} (10^12: weeks of CPU time; one simulation of this build takes at \
             most that many steps)"
        )),
        s => Ok(s),
    }
}

/// Resolves `--scenario NAME|FILE` for `seed`. Errors name the problem (exit 2).
pub fn prepare(scenario: &str, seed: u64, steps: Option<u64>) -> Result<Prepared, String> {
    prepare_source(scenario_source(scenario)?, seed, steps)
}

/// [`prepare`] for a scenario already read (or made: a sweep's point, before its file is written).
pub fn prepare_source(source: ScenarioSource, seed: u64, steps: Option<u64>) -> Result<Prepared, String> {
    let ScenarioSource { name, text, expect, steps_default } = source;
    let mut spec = catalogue::parse(&text, &name)?;
    // The file's own `steps` is checked even when `--steps` overrides it: a wrong value is a wrong file either way.
    let steps_file = match spec.remove("steps") {
        None => None,
        Some(v) => match v.as_integer().map(u64::try_from) {
            None => return Err(format!("{name}: steps must be an integer")),
            Some(Ok(s)) => Some(steps_in_range(&format!("{name}: steps"), s)?),
            Some(_) => return Err(format!("{name}: steps must be at least 1")),
        },
    };
    let steps = match steps {
        Some(s) => steps_in_range("--steps", s)?,
        None => steps_file.unwrap_or(steps_default),
    };
    let base = catalogue::base_for(&spec);
    if let Some(toml::Value::Table(connectors)) = spec.get("connectors") {
        for c in connectors.keys() {
            if !sim::workflows::CONNECTOR_NAMES.contains(&c.as_str()) {
                return Err(format!(
                    "{name}: unknown connector {c:?} in [connectors]; known: {}",
                    sim::workflows::CONNECTOR_NAMES.join(", ")
                ));
            }
        }
    }
    let profile = profile::resolve(&base, &spec, seed, true).map_err(|e| format!("{name}: {e}"))?;
    for workflow in profile.mix.keys() {
        if !sim::workflows::is_workflow_in(&profile, workflow) {
            let names: Vec<&str> = sim::workflows::WORKFLOWS
                .iter()
                .map(|(n, _)| *n)
                .chain(profile.workflows.keys().map(String::as_str))
                .collect();
            return Err(format!("{name}: unknown workflow {workflow:?} in [mix]; known: {}", names.join(", ")));
        }
    }
    // A workflow the profile defines and the mix leaves out would never run, silently. A weight of 0 written in the
    // mix is a choice; no weight at all is an oversight (a [mix] that forgot it, or none, so the built-in mix applies).
    if let Some(unused) = profile.workflows.keys().find(|w| !profile.mix.contains_key(*w)) {
        let mix = if spec.contains_key("mix") { "its [mix]" } else { "the built-in mix (it has no [mix])" };
        return Err(format!(
            "{name}: workflow {unused:?} is defined ([workflows.{unused}]) but {mix} gives it no weight, so no run \
             would use it: add it to [mix] (for example `{unused} = 1.0`) or remove [workflows.{unused}]"
        ));
    }
    Ok(Prepared { name, expect, profile, steps })
}

/// The command that reproduces a run exactly, quoted for a POSIX shell. A scenario file is named by its absolute
/// path: the command is run wherever the workspace is, where a path relative to another directory names nothing.
pub fn repro_command(args: &RunArgs, steps: u64) -> String {
    let scenario = match catalogue::find(&args.scenario) {
        Some(_) => args.scenario.clone(),
        // As `scenario_source` resolves it: not a catalogue name, so a file (left as given if it cannot be resolved).
        None => std::fs::canonicalize(&args.scenario)
            .ok()
            .and_then(|path| path.to_str().map(str::to_owned))
            .unwrap_or_else(|| args.scenario.clone()),
    };
    let (seed, steps, jobs) = (args.seed.to_string(), steps.to_string(), args.jobs.to_string());
    let mut words = vec!["cargo", "flowsim", "run", "--scenario", &scenario, "--seed", &seed, "--steps", &steps];
    words.extend(["--policy", sim_policy_name(args.policy), "--ledger", &args.ledger]);
    if args.jobs > 1 {
        words.extend(["--jobs", &jobs]);
    }
    crate::shell::join(words)
}

pub fn sim_policy_name(policy: Policy) -> &'static str {
    match policy {
        Policy::Rules => "rules",
        Policy::Naive => "naive",
    }
}

/// Is this outcome what the scenario promises? Returns the reason it is not.
pub fn verdict(results: &Results, expect: Expect, policy: Policy) -> Result<(), String> {
    let broken: Vec<String> = results
        .invariants
        .iter()
        .filter(|(_, r)| !r.holds)
        .map(|(id, r)| {
            format!("{id} ({} violations; first: {})", r.violations, r.first_violation.as_deref().unwrap_or("?"))
        })
        .collect();
    match (expect, policy) {
        (Expect::CanaryFails, _) => {
            if results.duplicates.by_class.get("canary").copied().unwrap_or(0) == 0 {
                return Err("the canary made no duplicate: the harness is broken".into());
            }
            Err(format!("invariants violated (expected of the canary): {}", broken.join("; ")))
        }
        _ if broken.is_empty() => Ok(()),
        _ => Err(format!("invariants violated: {}", broken.join("; "))),
    }
}

/// Peak resident set size of this process, from `/proc/self/status` (0 where unavailable).
pub fn peak_rss_bytes() -> u64 {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return 0 };
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time this process has used so far (user + system, every thread, in seconds), from `/proc/self/stat`; `None`
/// where that file is missing or unreadable. The kernel counts it in ticks of 1/100 s (`USER_HZ`, 100 on Linux).
pub fn process_cpu_seconds() -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, so utime (14) and stime (15) are at indexes 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The seed of shard `index` of a run split into shards.
pub fn shard_seed(seed: u64, index: u32) -> u64 {
    if index == 0 {
        return seed;
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"flowsim/shard");
    hasher.update(&seed.to_le_bytes());
    hasher.update(&index.to_le_bytes());
    let mut n = [0u8; 8];
    n.copy_from_slice(&hasher.finalize().as_bytes()[..8]);
    u64::from_le_bytes(n)
}

/// Results without the three wall-time figures, as canonical bytes: what must be identical for one seed and build.
pub fn deterministic_bytes(results: &Results) -> Vec<u8> {
    let mut r = results.clone();
    r.wall_seconds = 0.0;
    r.steps_per_second = 0.0;
    r.peak_rss_bytes = 0;
    serde_json::to_vec_pretty(&r).expect("results serialise")
}

/// Prints the summary table.
pub fn summary(results: &Results) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: String| out.push_str(&format!("  {k:<28} {v}\n"));
    out.push_str(&format!(
        "flowsim: scenario {} seed {} policy {} ledger {}\n",
        results.scenario, results.seed, results.policy, results.ledger
    ));
    line(&mut out, "steps", results.steps.to_string());
    line(&mut out, "runs", results.runs.to_string());
    line(&mut out, "effects", results.effects.to_string());
    let by: Vec<String> = results.duplicates.by_class.iter().map(|(k, v)| format!("{k} {v}")).collect();
    line(&mut out, "duplicates", format!("{} ({})", results.duplicates.total, by.join(", ")));
    line(&mut out, "paused runs", results.paused_runs.to_string());
    line(&mut out, "resolved by a person", results.person_resolutions.to_string());
    line(&mut out, "failed runs", results.failed_runs.to_string());
    line(&mut out, "runs with a visible retry", results.runs_with_visible_retry.to_string());
    line(&mut out, "auto-retry coverage", format!("{:.1} %", results.auto_retry_coverage * 100.0));
    line(
        &mut out,
        "extra lookups",
        format!("{} ({} ms simulated)", results.extra_lookups, results.extra_lookup_ms_total),
    );
    let l = &results.latency;
    line(
        &mut out,
        "step latency (sim ms)",
        format!("p50 {} p90 {} p99 {} p99.9 {} max {}", l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms),
    );
    if !results.crashes.is_empty() {
        let causes: Vec<String> = results.crashes.iter().map(|(cause, n)| format!("{cause} {n}")).collect();
        line(&mut out, "worker crashes", causes.join(", "));
    }
    line(&mut out, "simulated time", format!("{:.0} s", results.simulated_seconds));
    line(&mut out, "trace hash", results.trace_hash.clone());
    line(&mut out, "wall time", format!("{:.2} s ({:.0} steps/s)", results.wall_seconds, results.steps_per_second));
    line(&mut out, "peak RSS", format!("{:.0} MiB", results.peak_rss_bytes as f64 / 1048576.0));
    out.push_str("  invariants:");
    for (id, r) in &results.invariants {
        let mark = if !r.checked {
            "-"
        } else if r.holds {
            "ok"
        } else {
            "FAIL"
        };
        out.push_str(&format!(" {id} {mark}"));
    }
    out.push('\n');
    // Failing is a run's right end when its writes definitely did not apply (I8 holds), so this is no violation; but
    // a profile whose runs mostly fail exercises little, and is most often a workflow the fakes refuse (a missing
    // input, a lease shorter than the calls).
    if results.failed_runs * 2 > results.runs {
        out.push_str(&format!(
            "  note: {} of {} runs failed, so this simulation exercised little of what the invariants check; a \
             workflow whose calls the fakes refuse (a missing input) or a lease shorter than its calls does this \
             (`--trace-run RUN` shows one run's events)\n",
            results.failed_runs, results.runs
        ));
    }
    out
}

/// Runs the prepared scenario (split into `args.jobs` shards on as many threads) and fills the wall-time figures.
#[cfg(madsim)]
pub fn execute(args: &RunArgs, prepared: &Prepared, show_progress: bool) -> (Results, Option<String>) {
    use sim::world::{LedgerKind, WorldConfig, simulate};
    let jobs = args.jobs.max(1);
    let ledger = if args.ledger == "sqlite" { LedgerKind::Sqlite } else { LedgerKind::Memory };
    let repro = repro_command(args, prepared.steps);
    let configs: Vec<WorldConfig> = (0..jobs)
        .map(|i| WorldConfig {
            scenario: prepared.name.clone(),
            seed: shard_seed(args.seed, i),
            policy: args.policy,
            ledger,
            steps: prepared.steps / jobs as u64 + u64::from((i as u64) < prepared.steps % jobs as u64),
            profile: prepared.profile.clone(),
            keep_trace: args.trace.is_some(),
            trace_run: args.trace_run.clone(),
            repro: repro.clone(),
        })
        .collect();
    let progress: Vec<Arc<sim::Progress>> = (0..jobs).map(|_| Arc::new(sim::Progress::default())).collect();
    #[allow(clippy::disallowed_methods, reason = "wall time is measured outside the simulation, for the report only")]
    let started = std::time::Instant::now();
    let bar = show_progress.then(|| progress_bar(prepared.steps, progress.clone()));
    let mut outcomes: Vec<sim::world::Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .into_iter()
            .zip(progress.iter().cloned())
            .map(|(config, progress)| {
                std::thread::Builder::new()
                    .name("flowsim-shard".into())
                    .spawn_scoped(scope, move || simulate(config, progress))
                    .expect("a shard thread starts")
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    });
    if let Some(bar) = bar {
        bar.finish();
    }
    let wall_seconds = started.elapsed().as_secs_f64();
    let trace = shards_trace(&mut outcomes, args, &repro);
    let mut results = Results::merge_all(outcomes.iter().map(|o| &o.results)).expect("at least one shard");
    results.seed = args.seed;
    results.repro = repro;
    results.wall_seconds = wall_seconds;
    results.steps_per_second = if wall_seconds > 0.0 { results.steps as f64 / wall_seconds } else { 0.0 };
    results.peak_rss_bytes = peak_rss_bytes();
    (results, trace)
}

/// The readable trace of a run split into shards, and each shard's first violations named with their shard.
///
/// Every shard numbers its runs from `run-0`, so with more than one shard a run id alone is ambiguous: a violation's
/// description is prefixed with its shard, and the trace is the one of the first shard that broke an invariant (the
/// events around its first violation), or shard 0's when none did. With `--trace-run`, every shard's events of that
/// run id are kept, each under its shard's heading. A first violation that names a run is followed by the command
/// that traces that run ([`trace_run_hint`]); `repro` is the run's repro command.
#[cfg(madsim)]
fn shards_trace(outcomes: &mut [sim::world::Outcome], args: &RunArgs, repro: &str) -> Option<String> {
    let jobs = outcomes.len();
    let hint = |outcome: &sim::world::Outcome, shard: Option<usize>| match (&outcome.first_violation_run, &args.trace) {
        (Some(run), Some(file)) if args.trace_run.is_none() => trace_run_hint(run, shard, repro, file),
        _ => String::new(),
    };
    if jobs <= 1 {
        return outcomes.first().and_then(|o| o.trace_text.as_ref().map(|text| hint(o, None) + text));
    }
    for (i, outcome) in outcomes.iter_mut().enumerate() {
        for invariant in outcome.results.invariants.values_mut() {
            if let Some(first) = &mut invariant.first_violation {
                *first = format!("shard {i} of {jobs}: {first}");
            }
        }
    }
    let heading = |i: usize| format!("# shard {i} of {jobs} (its runs are numbered from run-0 like every shard's)\n");
    if args.trace_run.is_some() {
        let texts: Vec<String> = outcomes
            .iter()
            .enumerate()
            .filter_map(|(i, o)| o.trace_text.as_ref().map(|text| heading(i) + text))
            .collect();
        return (!texts.is_empty()).then(|| texts.concat());
    }
    let shard = outcomes.iter().position(|o| !o.results.all_hold()).unwrap_or(0);
    let outcome = &outcomes[shard];
    outcome.trace_text.as_ref().map(|text| heading(shard) + &hint(outcome, Some(shard)) + text)
}

/// The readable trace's first lines when its first violation names `run`: the trace keeps only the events just
/// before the violation, which may start after the run's first ones (an I1's first effect, long before its second),
/// and `--trace-run` gives every event of the run from its start. The command is the run's repro command `repro` with
/// `--trace-run RUN --trace FILE` ([`trace_run_file`]: beside the trace at hand, not over it). With shards, the
/// command's trace holds the run id of every shard, and the violation's is `shard`'s.
pub fn trace_run_hint(run: &str, shard: Option<usize>, repro: &str, trace: &std::path::Path) -> String {
    let file = trace_run_file(trace, run);
    let command = format!("{repro} {}", crate::shell::join(["--trace-run", run, "--trace", &file]));
    let whose = shard.map_or(String::new(), |i| format!(" (under shard {i}'s heading, whose run it is)"));
    format!(
        "# the first violation names run {run}, and the events below may start after its first ones: every event \
         of that run,\n# from its start, is in the trace this command writes{whose}:\n#   {command}\n"
    )
}

/// Where the `--trace-run` command of [`trace_run_hint`] writes: beside `trace`, the run id before its extension
/// (`t.txt` gives `t.run-53.txt`), so the trace at hand is not written over; a device or stream that exists and is no
/// file (`/dev/stdout`) is named as it is.
pub fn trace_run_file(trace: &std::path::Path, run: &str) -> String {
    if trace.exists() && !trace.is_file() {
        return trace.to_string_lossy().into_owned();
    }
    let stem = trace.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = match trace.extension() {
        Some(extension) => format!("{stem}.{run}.{}", extension.to_string_lossy()),
        None => format!("{stem}.{run}"),
    };
    trace.with_file_name(name).to_string_lossy().into_owned()
}

/// A progress bar with steps/s and ETA, fed from the shards' counters by a thread outside the simulation.
#[cfg(madsim)]
fn progress_bar(steps: u64, progress: Vec<Arc<sim::Progress>>) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(steps);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} steps {per_sec} ETA {eta}",
        )
        .expect("a valid progress template"),
    );
    let feeder = bar.clone();
    #[allow(
        clippy::disallowed_methods,
        reason = "the progress thread runs outside the simulation and reads no state of it but counters"
    )]
    std::thread::spawn(move || {
        loop {
            let started: u64 =
                progress.iter().map(|p| p.steps_started.load(std::sync::atomic::Ordering::Relaxed)).sum();
            feeder.set_position(started.min(steps));
            if progress.iter().all(|p| p.done.load(std::sync::atomic::Ordering::Relaxed)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    });
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulation whose runs mostly failed held every invariant, yet exercised little: the summary says so, and
    /// says nothing when at most half failed.
    #[test]
    fn the_summary_notes_a_simulation_whose_runs_mostly_failed() {
        let note = "note: 500 of 500 runs failed, so this simulation exercised little";
        let results = |failed| Results { runs: 500, failed_runs: failed, ..Results::default() };
        assert!(summary(&results(500)).contains(note), "{}", summary(&results(500)));
        assert!(summary(&results(251)).contains("note: 251 of 500 runs failed"));
        assert!(!summary(&results(250)).contains("note:"));
        assert!(!summary(&results(0)).contains("note:"));
    }

    #[test]
    fn cpu_time_counts_the_work_done() {
        let start = process_cpu_seconds().expect("/proc/self/stat is readable on Linux");
        // Spin until at least 0.1 s of CPU is counted (ten ticks), or give up after 30 s of wall time.
        #[allow(clippy::disallowed_methods, reason = "a test outside the simulation bounds its wait by wall time")]
        let began = std::time::Instant::now();
        let mut x: u64 = 1;
        while process_cpu_seconds().unwrap() - start < 0.1 {
            for i in 0..100_000u64 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
            }
            assert!(began.elapsed().as_secs() < 30, "0.1 s of CPU not counted within 30 s of spinning");
        }
        assert!(process_cpu_seconds().unwrap() >= start + 0.1);
    }
}
