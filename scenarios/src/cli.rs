//! The `flowsim` command line. Exit codes: 0 everything held, 1 an invariant or budget failed, 2 bad usage or input.

use clap::{Parser, Subcommand};
use std::io::{Read, Write};

#[derive(Parser, Debug)]
#[command(name = "flowsim", version, about = "Deterministic simulation and chaos harness for the Flow engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run one simulation: a summary table, `--json` results, `--trace` around the first violation.
    Run {
        /// A catalogue name (see `flowsim scenarios`) or a profile file (TOML).
        #[arg(long, default_value = "mixed")]
        scenario: String,
        /// Every random draw of the run (knobs the profile leaves open, faults, traffic, timing) comes from it.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Steps (writes) to run, at most 10^12; the scenario's default when omitted.
        #[arg(long)]
        steps: Option<u64>,
        /// `rules`: the engine as designed; `naive` (the "before"): a fresh key per attempt, no lookups, retries
        /// everything.
        #[arg(long, value_enum, default_value_t = PolicyArg::Rules)]
        policy: PolicyArg,
        /// The engine's ledger: in memory, or SQLite (`:memory:`, the on-disk ledger's code).
        #[arg(long, value_enum, default_value_t = LedgerArg::Memory)]
        ledger: LedgerArg,
        /// Split the run into N shards on N threads, merged in shard order.
        #[arg(long, default_value_t = 1)]
        jobs: u32,
        /// Write the results JSON here.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Write the readable events around the first violation here.
        #[arg(long)]
        trace: Option<std::path::PathBuf>,
        /// With --trace: write every event of this run instead (from its start).
        #[arg(long, requires = "trace", value_parser = run_id_arg)]
        trace_run: Option<String>,
        /// Run twice and compare trace hashes and results (I9).
        #[arg(long)]
        check_determinism: bool,
    },
    /// Generate scenarios with proptest, check every invariant, shrink a failure to a replayable profile file.
    Search {
        /// New cases to run (default: $FLOWSIM_SEARCH_CASES, else 200).
        #[arg(long)]
        cases: Option<u32>,
        /// Put the canary connector and workflow into the strategy (the search must then fail).
        #[arg(long)]
        canary: bool,
        /// Seed of the case generator (default: $FLOWSIM_SEARCH_SEED, else 0).
        #[arg(long)]
        seed: Option<u64>,
        /// Directory for failing cases (default: target/flowsim-search in the Flow workspace the current directory
        /// is in, else flowsim-search in the current directory).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
    /// The release gate: the catalogue × seeds against a budget file (see docs/gate.md).
    Check(crate::check::CheckArgs),
    /// The lookup safeguard's trade-off: residual duplicates and step latency at several declared lag bounds.
    Sweep(crate::sweep::SweepArgs),
    /// The duplicate-rate report (report.md, report.html, report.json) from results files.
    Report(crate::report_cmd::ReportArgs),
    /// The scenario catalogue, one line each.
    Scenarios,
    /// Measure simulation speed with each ledger (one shard), and the yardsticks on this machine.
    ///
    /// With each ledger, median steps/s per core and steps per CPU-second; then a bare loop of key derivation and a
    /// hash-map ledger, the same loop under madsim and madsim alone, and the memory ledger's speed as a fraction of the
    /// bare loop's. CPU time is read from /proc/self/stat in ticks of 10 ms: a repetition shorter than ten ticks has no
    /// steps per CPU-second (one tick would move it by a tenth or more), and the lines of those figures say so and how many steps would be enough.
    Bench {
        /// A catalogue name or a profile file (TOML). Speed depends most on `world.runs_in_flight_max`: compare
        /// figures only at the same profile (docs/speed.md).
        #[arg(long, default_value = "mixed")]
        scenario: String,
        /// Steps of each repetition (its seed is 1), at most 10^12. A repetition needs at least ten 10 ms ticks of CPU
        /// time (some tens of thousands of steps) for a steps-per-CPU-second figure.
        #[arg(long, default_value_t = 200_000)]
        steps: u64,
        /// Repetitions per ledger and per yardstick loop; the median of an even number is the mean of the middle two.
        #[arg(long, default_value_t = 3)]
        repeat: u32,
    },
    /// Read JSON on stdin, write its RFC 8785 canonical bytes to stdout.
    Canon,
    /// Read a step's inputs (JSON) on stdin, print the step key in lowercase hex.
    Key {
        /// The run id.
        #[arg(long, value_name = "ID")]
        run: String,
        /// The step id within the run's workflow.
        #[arg(long, value_name = "ID")]
        step: String,
        /// Input paths left out of the key (`a.b.c`), comma separated.
        #[arg(long, value_delimiter = ',')]
        volatile: Vec<String>,
    },
}

/// A run id on the command line: not blank (no run is named so, and a typo that left it blank would run the whole
/// simulation to find nothing).
fn run_id_arg(value: &str) -> Result<String, String> {
    if value.trim().is_empty() {
        return Err(format!("{value:?} is blank: give the run's id (as the trace names it, e.g. run-7)"));
    }
    Ok(value.to_owned())
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum PolicyArg {
    Rules,
    Naive,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LedgerArg {
    Memory,
    Sqlite,
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    use clap::{CommandFactory, FromArgMatches};
    let parsed = Cli::command().try_get_matches().and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    // A `--scenario` the user typed that names the catalogue beside a file of that name: say which one runs. The
    // default name is not something the user chose, so a file that happens to share it gets no note.
    if let Some((command, sub)) = matches.subcommand() {
        let typed = sub
            .try_get_one::<String>("scenario")
            .ok()
            .flatten()
            .filter(|_| sub.value_source("scenario") == Some(clap::parser::ValueSource::CommandLine));
        if let Some(note) = typed.and_then(|scenario| crate::run::shadowed_file_note(command, scenario)) {
            errln!("{note}");
        }
    }
    match cli.command {
        Command::Run { scenario, seed, steps, policy, ledger, jobs, json, trace, trace_run, check_determinism } => {
            let args = crate::run::RunArgs {
                scenario,
                seed,
                steps,
                policy: match policy {
                    PolicyArg::Rules => engine::executor::Policy::Rules,
                    PolicyArg::Naive => engine::executor::Policy::Naive,
                },
                ledger: match ledger {
                    LedgerArg::Memory => "memory".into(),
                    LedgerArg::Sqlite => "sqlite".into(),
                },
                jobs,
                json,
                trace,
                trace_run,
                check_determinism,
                quiet: false,
            };
            run(&args)
        }
        Command::Bench { scenario, steps, repeat } => bench(&scenario, steps, repeat),
        Command::Search { cases, canary, seed, out } => crate::search::main(cases, canary, seed, out),
        // The listing is the command's whole answer: a write that fails (a full disk) exits 2, as `canon`'s and
        // `key`'s do. A reader that has what it wanted and closed the pipe (`flowsim scenarios | head -1`) is not a
        // failure of the listing.
        Command::Scenarios => {
            let listing: String =
                crate::catalogue::CATALOGUE.iter().map(|s| format!("{:<28} {}\n", s.name, s.stresses)).collect();
            write_answer("scenarios", listing.as_bytes(), ClosedPipe::Done)
        }
        Command::Check(args) => crate::check::main(&args),
        Command::Sweep(args) => crate::sweep::main(&args),
        Command::Report(args) => crate::report_cmd::main(&args),
        Command::Canon => canon(),
        Command::Key { run, step, volatile } => key(&run, &step, &volatile),
    }
}

fn read_stdin() -> Result<Vec<u8>, i32> {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        errln!("flowsim: cannot read standard input: {e}");
        return Err(2);
    }
    Ok(input)
}

fn canon() -> i32 {
    let input = match read_stdin() {
        Ok(i) => i,
        Err(code) => return code,
    };
    match engine::canonical::canonicalize_bytes(&input) {
        Ok(bytes) => write_answer("canon", &bytes, ClosedPipe::Failed),
        Err(e) => {
            errln!("flowsim canon: {e}");
            2
        }
    }
}

/// What a closed pipe means to a command whose output is its answer ([`write_answer`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClosedPipe {
    /// The answer did not arrive: exit 2 (`canon`, `key`).
    Failed,
    /// The reader has what it wanted (`flowsim scenarios | head -1`): exit 0.
    Done,
}

/// Writes the one answer of `canon`, `key` or `scenarios` to standard output. The answer is the whole point of the
/// command, so a failed write exits 2, said on standard error (a full disk); a closed pipe is quiet, and exits as
/// `closed_pipe` says.
fn write_answer(command: &str, bytes: &[u8], closed_pipe: ClosedPipe) -> i32 {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            if closed_pipe == ClosedPipe::Done {
                0
            } else {
                2
            }
        }
        Err(e) => {
            errln!("flowsim {command}: cannot write standard output: {e}");
            2
        }
    }
}

fn key(run: &str, step: &str, volatile: &[String]) -> i32 {
    if let Some(problem) = key_arguments_problem(run, step, volatile) {
        errln!("flowsim key: {problem}");
        return 2;
    }
    let input = match read_stdin() {
        Ok(i) => i,
        Err(code) => return code,
    };
    let canonical = match engine::canonical::canonicalize_bytes(&input) {
        Ok(c) => c,
        Err(e) => {
            errln!("flowsim key: {e}");
            return 2;
        }
    };
    let key = if volatile.is_empty() {
        engine::key::step_key_canonical(run, step, &canonical)
    } else {
        // Read back at the canonicaliser's own depth bound: serde_json alone stops a level short of it.
        let value: serde_json::Value = match engine::doc::from_slice(&canonical) {
            Ok(v) => v,
            Err(e) => {
                errln!("flowsim key: {e}");
                return 2;
            }
        };
        // A path the inputs lack leaves nothing out; the key is then the one the engine derives for such inputs,
        // but on the command line it is more likely a typo, so it is said.
        for path in volatile.iter().filter(|path| !names_a_member(&value, path)) {
            errln!("flowsim key: note: --volatile {path} names no member of these inputs; nothing is left out for it");
        }
        match engine::key::step_key_without(run, step, &value, volatile) {
            Ok(k) => k,
            Err(e) => {
                errln!("flowsim key: {e}");
                return 2;
            }
        }
    };
    write_answer("key", format!("{key}\n").as_bytes(), ClosedPipe::Failed)
}

/// What is wrong with `key`'s arguments, if anything: an empty run or step id, or a volatile path with an empty
/// segment (`''`, `a..b`, `.`), which could name no member.
fn key_arguments_problem(run: &str, step: &str, volatile: &[String]) -> Option<String> {
    if run.is_empty() {
        return Some("--run must not be empty".into());
    }
    // The engine refuses such a run id (`Engine::create_run`, `flow`): no key of it exists to compute.
    if !engine::ledger::names_someone(run) {
        return Some(format!("--run {run:?} is blank (only spaces or invisible characters): no run has that id"));
    }
    if step.is_empty() {
        return Some("--step must not be empty".into());
    }
    volatile.iter().find(|path| path.split('.').any(str::is_empty)).map(|path| {
        format!("--volatile {path:?} is not a path: it must be member names joined by dots (a.b,c), none empty")
    })
}

/// Does the dotted `path` name a member of `value` (objects walked by member name)?
fn names_a_member(value: &serde_json::Value, path: &str) -> bool {
    path.split('.').try_fold(value, |v, name| v.get(name)).is_some()
}

#[cfg(not(madsim))]
fn run(_args: &crate::run::RunArgs) -> i32 {
    errln!(
        "flowsim: this binary was built without `--cfg madsim`, so it cannot simulate (it would run in real time).\n\
         Run it through the cargo alias, which builds with the simulation cfg: `cargo flowsim run ...`.\n\
         If you did use the alias, check that RUSTFLAGS is not set in the environment: it overrides the alias's cfg."
    );
    2
}

#[cfg(madsim)]
fn run(args: &crate::run::RunArgs) -> i32 {
    use crate::run::*;
    use std::io::IsTerminal;
    if args.jobs == 0 || args.jobs > 256 {
        errln!("flowsim run: --jobs must be between 1 and 256");
        return 2;
    }
    // A scenario given as a file is read; no output may be written over it.
    let inputs: Vec<&std::path::Path> = scenario_file(&args.scenario).into_iter().collect();
    if let Err(e) = crate::output::check_all([&args.json, &args.trace], &inputs) {
        errln!("flowsim run: {e}");
        return 2;
    }
    let prepared = match prepare(&args.scenario, args.seed, args.steps) {
        Ok(p) => p,
        Err(e) => {
            errln!("flowsim run: {e}");
            return 2;
        }
    };
    // A shard with no step to take would simulate nothing and still add its trace hash to the results.
    if u64::from(args.jobs) > prepared.steps {
        errln!("flowsim run: --jobs {} is more than the {} steps: every shard needs a step", args.jobs, prepared.steps);
        return 2;
    }
    // Every run prints its seed and every knob first.
    outln!(
        "flowsim run: scenario {} seed {} policy {} ledger {} steps {} jobs {}",
        prepared.name,
        args.seed,
        sim_policy_name(args.policy),
        args.ledger,
        prepared.steps,
        args.jobs
    );
    for (knob, value) in sim::profile::knobs_to_print(&prepared.profile) {
        outln!("  knob {knob} = {value}");
    }
    let show_progress = std::io::stdout().is_terminal() && std::env::var_os("CI").is_none();
    let (mut results, trace) = execute(args, &prepared, show_progress);
    let mut determinism_error = None;
    if args.check_determinism {
        let (again, _) = execute(args, &prepared, false);
        let first = deterministic_bytes(&results);
        let second = deterministic_bytes(&again);
        if results.trace_hash != again.trace_hash || first != second {
            determinism_error = Some(format!(
                "two runs of seed {} differ: trace hashes {} and {}{}",
                args.seed,
                results.trace_hash,
                again.trace_hash,
                if first == second { "" } else { "; the results JSON differs too" }
            ));
        }
        let i9 = results.invariants.entry("I9".into()).or_default();
        i9.checked = true;
        i9.holds = determinism_error.is_none();
        i9.violations = u64::from(determinism_error.is_some());
        i9.first_violation = determinism_error.clone();
    }
    out!("{}", summary(&results));
    // The verdict and the repro line are printed before the files are written, so a failed write (checked for before
    // the run, so this is a full disk or the like) does not hide them: it is said after them, last, beside the exit
    // code it sets. Printed first, they also stay whole where an output is standard output itself (`--json
    // /dev/stdout > FILE`): the file is appended to, after them; printed after it, they overwrote its start.
    let code = match verdict(&results, prepared.expect, args.policy) {
        Ok(()) => {
            outln!("flowsim run: every invariant held");
            0
        }
        Err(reason) => {
            outln!("flowsim run: FAILED: {reason}");
            outln!("reproduce with: {}", results.repro);
            1
        }
    };
    let json = args.json.as_ref().map(|path| {
        let mut bytes = serde_json::to_vec_pretty(&results).expect("results serialise");
        bytes.push(b'\n');
        (path, bytes)
    });
    // A run id that no event names (a typo, or a run this seed never started) leaves a trace of headings only: say
    // so, in the file too, rather than hand over an empty trace as if the run had done nothing.
    let run_unseen =
        args.trace_run.as_ref().filter(|_| trace.as_deref().is_some_and(|t| !holds_an_event(t))).map(|run| {
            format!("--trace-run {run}: no event of this simulation names that run; the trace file holds none")
        });
    let trace = trace.map(|text| match &run_unseen {
        Some(note) => format!("{text}# {note}\n"),
        None => text,
    });
    let trace = args.trace.as_ref().zip(trace).map(|(path, text)| (path, text.into_bytes()));
    // Both files or neither.
    let written =
        reports::files::write_all(json.iter().chain(&trace).map(|(path, bytes)| (path.as_path(), bytes.as_slice())));
    if let Some(note) = &run_unseen {
        errln!("flowsim run: {note}");
    }
    match written {
        Ok(()) => code,
        Err(e) => {
            errln!("flowsim run: {e}");
            2
        }
    }
}

/// Does the readable trace hold an event? Its events are numbered lines (`#216 t=0.196s run-started ...`); its
/// headings start with `# `.
#[cfg(madsim)]
fn holds_an_event(trace: &str) -> bool {
    trace.lines().any(|line| line.strip_prefix('#').is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit())))
}

#[cfg(not(madsim))]
fn bench(_scenario: &str, _steps: u64, _repeat: u32) -> i32 {
    run(&crate::run::RunArgs::quiet("", 0, None))
}

/// The median of `rates` (of the two middle ones when their number is even) and the list, sorted, as text.
#[cfg(madsim)]
fn median_and_list(rates: &[f64]) -> (f64, String) {
    use statrs::statistics::{Data, Median};
    let mut sorted = rates.to_vec();
    sorted.sort_by(f64::total_cmp);
    let all: Vec<String> = sorted.iter().map(|r| format!("{r:.0}")).collect();
    (Data::new(sorted).median(), all.join(", "))
}

/// One ledger's repetitions in `flowsim bench`.
#[cfg(madsim)]
#[derive(Default)]
struct BenchSamples {
    wall_rates: Vec<f64>,
    cpu: crate::reference::CpuRates,
    /// An invariant the scenario expects to hold was violated in one of the repetitions.
    violated: bool,
}

/// A ledger's steps-per-CPU-second line in `flowsim bench`: the median of its repetitions of `steps` each, or, when
/// one was not measured (under ten ticks of CPU time, or unreadable), why not and how many steps would be enough. Never
/// nothing: a figure left out without a word reads as a bench that did not try.
#[cfg(madsim)]
fn cpu_line(ledger: &str, samples: &BenchSamples, steps: u64) -> String {
    match samples.cpu.not_measured() {
        None => {
            let (median, all) = median_and_list(&samples.cpu.rates);
            format!("  ledger {ledger:<7} median {median:>10.0} steps per CPU-second              (runs: {all})")
        }
        Some(why) => {
            format!("  ledger {ledger:<7} steps per CPU-second not measured: {why}{}", more_steps(samples, steps))
        }
    }
}

/// `; give --steps N or more` when a longer run would measure what `samples` did not (empty when its CPU time cannot
/// be read at all, which more steps do not change).
#[cfg(madsim)]
fn more_steps(samples: &BenchSamples, steps: u64) -> String {
    if samples.cpu.too_short == 0 {
        return String::new();
    }
    let (wall_median, _) = median_and_list(&samples.wall_rates);
    format!("; give --steps {} or more", crate::reference::steps_to_measure(steps, wall_median))
}

/// The last line of `flowsim bench`: the memory ledger's median steps per CPU-second as a fraction of the bare loop's
/// (`bare_median`), or why there is none.
#[cfg(madsim)]
fn bare_loop_line(memory: &BenchSamples, steps: u64, bare_median: Option<f64>) -> String {
    let head = "  memory ledger   ";
    match (memory.cpu.not_measured(), bare_median) {
        (Some(why), _) => format!("{head} fraction of the bare loop not measured: {why}{}", more_steps(memory, steps)),
        (None, None) => {
            format!("{head} fraction of the bare loop not measured: the bare loop's steps per CPU-second are missing")
        }
        (None, Some(bare_median)) => {
            let (memory_median, _) = median_and_list(&memory.cpu.rates);
            format!(
                "{head} {:.3} of the bare loop's steps per CPU-second (the issue's 400 k target is {:.3} of its 840 k)",
                memory_median / bare_median,
                400.0 / 840.0
            )
        }
    }
}

/// `flowsim bench`: the speed figures of the issue, measured, never asserted. Each repetition is a fresh simulation
/// with the same seed (so the same work); the median wall time gives steps/s on one core, and the process's CPU time
/// (user + system) gives steps per CPU-second, which waiting for a busy core does not inflate. The ledgers take
/// turns, repetition by repetition, so that a loud spell on a shared machine falls on both rather than on one.
#[cfg(madsim)]
fn bench(scenario: &str, steps: u64, repeat: u32) -> i32 {
    use crate::run::*;
    if repeat == 0 {
        errln!("flowsim bench: --repeat must be at least 1");
        return 2;
    }
    let prepared = match prepare(scenario, 1, Some(steps)) {
        Ok(p) => p,
        Err(e) => {
            errln!("flowsim bench: {e}");
            return 2;
        }
    };
    // The runs in flight are named because speed depends on them most (docs/speed.md, stop 23).
    outln!(
        "flowsim bench: scenario {scenario}, {steps} steps, at most {} runs in flight, {repeat} repetitions per \
         ledger, one shard (one core)",
        prepared.profile.world.runs_in_flight_max
    );
    // scripts/rustc-pgo sets the cfg when it builds with the committed profile; the figures differ by about a tenth.
    if cfg!(flowsim_pgo) {
        outln!("  build: profile-guided (pgo/flowsim.profdata, scripts/rustc-pgo)");
    } else {
        outln!("  build: without the profile (FLOWSIM_PGO=0, a rustc other than pgo/rustc-commit names, or no pgo/)");
    }
    use sim::results::LEDGERS;
    let mut samples: [BenchSamples; 2] = Default::default();
    for _ in 0..repeat {
        for (ledger, samples) in LEDGERS.iter().zip(&mut samples) {
            let args = RunArgs { ledger: (*ledger).to_owned(), ..RunArgs::quiet(scenario, 1, Some(steps)) };
            let cpu_before = process_cpu_seconds();
            let (results, _) = execute(&args, &prepared, false);
            samples.cpu.record(results.steps, cpu_before, process_cpu_seconds());
            samples.violated |= !results.all_hold() && prepared.expect == crate::catalogue::Expect::AllHold;
            samples.wall_rates.push(results.steps_per_second);
        }
    }
    for (ledger, samples) in LEDGERS.iter().zip(&samples) {
        let (median, all) = median_and_list(&samples.wall_rates);
        outln!("  ledger {ledger:<7} median {median:>10.0} steps/s per core, wall clock   (runs: {all})");
        // On a shared machine the wall clock also counts time spent waiting for a core; CPU time does not.
        outln!("{}", cpu_line(ledger, samples, steps));
        if samples.violated {
            outln!("  (an invariant was violated during the bench; run the scenario for details)");
        }
    }
    // Read before the reference loops, whose ledger of a million rows is larger than a simulation's state.
    outln!("  peak RSS {:.0} MiB", peak_rss_bytes() as f64 / 1_048_576.0);
    let [memory, _] = &samples;
    let bare_median = bench_reference(repeat);
    outln!("{}", bare_loop_line(memory, steps, bare_median));
    0
}

/// The yardsticks on this machine (`crate::reference`), `repeat` times each; returns the bare loop's median
/// steps per CPU-second, against which `bench` sets the memory ledger's: a ratio that means the same on a faster or
/// slower machine. `None` when it was not measured (a line says why).
#[cfg(madsim)]
fn bench_reference(repeat: u32) -> Option<f64> {
    use crate::reference::{CpuRates, RUNS, STEPS_PER_RUN, bare_loop, madsim_loop};
    use crate::run::process_cpu_seconds;
    let steps = u64::from(RUNS) * u64::from(STEPS_PER_RUN);
    outln!(
        "  reference: the issue's yardsticks on this machine ({RUNS} runs × {STEPS_PER_RUN} steps: key derivation of a \
         114-byte input and a hash-map ledger, nothing checked; scenarios/src/reference.rs)"
    );
    if process_cpu_seconds().is_none() {
        outln!("  reference loops not run: the process's CPU time cannot be read (/proc/self/stat)");
        return None;
    }
    // Records the CPU time of `work`, which returns the steps it did (all of them, or the loop is broken).
    let time = |rates: &mut CpuRates, work: &dyn Fn() -> u64| {
        let before = process_cpu_seconds();
        let recorded = work();
        rates.record(recorded, before, process_cpu_seconds());
        assert_eq!(recorded, steps, "a reference loop does every step once");
    };
    // Once untimed: the first loop to build a ledger of a million rows would also pay for the kernel's fresh pages,
    // which every later loop finds in the allocator.
    bare_loop(RUNS, STEPS_PER_RUN);
    let (mut bare, mut simulated, mut runtime_only) = (CpuRates::default(), CpuRates::default(), CpuRates::default());
    for _ in 0..repeat {
        time(&mut bare, &|| bare_loop(RUNS, STEPS_PER_RUN));
        time(&mut simulated, &|| madsim_loop(RUNS, STEPS_PER_RUN, true).0);
        time(&mut runtime_only, &|| madsim_loop(RUNS, STEPS_PER_RUN, false).0);
    }
    // A loop's figure, or why there is none (its size is fixed, so no advice on steps).
    let figure = |rates: &CpuRates, show: &dyn Fn(f64, String) -> String| match rates.not_measured() {
        None => {
            let (median, all) = median_and_list(&rates.rates);
            show(median, all)
        }
        Some(why) => format!("not measured: {why}"),
    };
    outln!(
        "  bare loop        {}",
        figure(&bare, &|median, all| format!(
            "median {median:>10.0} steps per CPU-second   (issue: about 840 k; runs: {all})"
        ))
    );
    outln!(
        "  under madsim     {}",
        figure(&simulated, &|median, all| format!(
            "median {median:>10.0} steps per CPU-second   (a 1 ms simulated sleep per step; runs: {all})"
        ))
    );
    outln!(
        "  madsim alone     {}",
        figure(&runtime_only, &|median, _| format!(
            "median {:>10.2} µs per step   (the sleeps without the work; issue: about 0.35 µs)",
            1e6 / median
        ))
    );
    bare.not_measured().is_none().then(|| median_and_list(&bare.rates).0)
}

#[cfg(all(test, madsim))]
mod tests {
    use super::{BenchSamples, bare_loop_line, cpu_line, median_and_list};
    use crate::reference::CpuRates;

    /// Repetitions too short for a tick of CPU time drop no line: the ledger's steps-per-CPU-second line and the
    /// bare-loop line say the runs were too short and how many steps would be enough (a QA report: `bench --steps 1
    /// --repeat 1` printed neither, without a word).
    #[test]
    fn a_bench_too_short_for_cpu_time_says_so_on_every_line_it_would_print() {
        let short = BenchSamples {
            wall_rates: vec![40_000.0, 60_000.0],
            cpu: CpuRates { rates: Vec::new(), too_short: 2, unreadable: 0 },
            violated: false,
        };
        let too_short = "both runs were too short to measure CPU time (under 10 ticks of 10 ms)";
        assert_eq!(
            cpu_line("memory", &short, 500),
            format!("  ledger memory  steps per CPU-second not measured: {too_short}; give --steps 50000 or more")
        );
        let line = bare_loop_line(&short, 500, Some(1e6));
        assert_eq!(
            line,
            format!(
                "  memory ledger    fraction of the bare loop not measured: {too_short}; give --steps 50000 or more"
            )
        );
        // Measured: the figures as before.
        let measured = BenchSamples {
            wall_rates: vec![90_000.0],
            cpu: CpuRates { rates: vec![100_000.0], too_short: 0, unreadable: 0 },
            violated: false,
        };
        assert!(cpu_line("sqlite", &measured, 200_000).contains("median     100000 steps per CPU-second"));
        assert!(
            bare_loop_line(&measured, 200_000, Some(1e6)).contains("0.100 of the bare loop's steps per CPU-second")
        );
        assert!(bare_loop_line(&measured, 200_000, None).contains("the bare loop's steps per CPU-second are missing"));
        // Unreadable CPU time: said, with no advice on steps, which would not help.
        let unreadable = BenchSamples { cpu: CpuRates { rates: Vec::new(), too_short: 0, unreadable: 1 }, ..measured };
        assert_eq!(
            cpu_line("memory", &unreadable, 200_000),
            "  ledger memory  steps per CPU-second not measured: the process's CPU time cannot be read (/proc/self/stat)"
        );
    }

    #[test]
    fn a_bench_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median_and_list(&[4.0, 1.0, 3.0, 2.0]), (2.5, "1, 2, 3, 4".to_owned()));
        assert_eq!(median_and_list(&[5.0, 1.0, 3.0]), (3.0, "1, 3, 5".to_owned()));
        assert_eq!(median_and_list(&[7.0]), (7.0, "7".to_owned()));
    }
}
