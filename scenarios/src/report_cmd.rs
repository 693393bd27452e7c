//! `flowsim report FILE... --out DIR [--baseline OLD.json]`: the duplicate-rate report of `reports::write_report`.
//!
//! An input is either a results file (`flowsim run --json`, or a `report.json`) or a `flowsim check --json` file
//! (`check_format` = [`crate::check::CHECK_FORMAT`]). A check file contributes each of its non-canary cases' results;
//! the cases of every check file given are put in suite order (by case index), so the shards of a sweep make the
//! same report as the unsharded sweep. Plain results files come first, in the order given.
//!
//! A simulation given twice is refused, whichever files hold it (the same file twice, a `report.json` beside one of
//! its inputs, overlapping shards): it would be counted twice, and its doubled sample would narrow every interval.
//! A simulation is known by its trace hash (each shard's, for a merge) and its ledger: the two ledgers simulate the
//! same events, so their runs of one seed share a hash and are still two measurements. A merge of both ledgers'
//! runs names each hash's ledger (`trace_ledgers`); beside a merge from before that field, which does not, a
//! duplicate is found only when a hash occurs more often than there are ledgers.
//!
//! Exit codes: 0 when the report is written and shows nothing wrong; 1 when it is written and shows an invariant
//! broken under the `rules` policy (the `naive` policy is the "before" and breaks them by design) or a regression
//! against the baseline; 2 when an input is bad or a file cannot be written (nothing is written then, unless the
//! failure is a file written in place, such as a device, which comes after the others are written; the findings are
//! printed all the same).

use crate::catalogue::Expect;
use crate::check::{CHECK_FORMAT, CheckFile, expect_name};
use sim::results::{LEDGERS, MIXED, Results};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The arguments of `flowsim report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Results JSON files (`flowsim run --json`, `flowsim check --json`, or a `report.json`).
    #[arg(required = true)]
    pub inputs: Vec<PathBuf>,
    /// The directory to write report.md, report.html and report.json into.
    #[arg(long)]
    pub out: PathBuf,
    /// A previous release's results or report.json to diff against.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
}

/// One result and where it came from.
struct Input<'a> {
    /// The result as read: a run's (or a merge's) results, or a policy section of a `report.json`.
    parsed: reports::report::Input,
    path: &'a Path,
    /// The position of its file among the inputs given.
    file: usize,
}

/// The results of the inputs, in report order. Errors name the file (exit 2).
pub fn collect(inputs: &[PathBuf]) -> Result<Vec<reports::report::Input>, String> {
    let mut plain = Vec::new();
    // (case index, file order): shards of one suite fall into suite order; cases of different suites that share an
    // index both stay.
    let mut cases: Vec<(u64, usize, Input<'_>)> = Vec::new();
    let mut suites: Vec<(String, &Path)> = Vec::new();
    let mut canary_only = Vec::new();
    for (order, path) in inputs.iter().enumerate() {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if text.starts_with('\u{feff}') {
            return Err(format!(
                "{}: starts with a UTF-8 byte order mark, which JSON text has none of",
                path.display()
            ));
        }
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{}:{}:{}: not JSON: {e}", path.display(), e.line(), e.column()))?;
        // serde_json keeps the last of a member given twice; a results file never has one. This strict parse only
        // checks: the file is read from `value`.
        engine::canonical::canonicalize_bytes(text.as_bytes())
            .map_err(|e| format!("{}: not a flowsim results file: {e}", path.display()))?;
        if value.get("check_format").is_none() {
            // A report.json holds a section per policy: each is counted.
            let all = reports::report::parse_all_inputs_from(value, &text, path).map_err(|e| e.to_string())?;
            plain.extend(all.into_iter().map(|parsed| Input { parsed, path, file: order }));
            continue;
        }
        let file: CheckFile =
            serde_json::from_value(value).map_err(|e| format!("{}: not a flowsim check file: {e}", path.display()))?;
        if file.check_format != CHECK_FORMAT {
            return Err(format!(
                "{}: check format {:?}, this build reads {CHECK_FORMAT:?}",
                path.display(),
                file.check_format
            ));
        }
        suites.push((format!("profile {}, {} seeds, {} steps", file.profile, file.seeds, file.steps), path));
        let before = cases.len();
        for case in file.cases.into_iter().filter(|c| c.expect != expect_name(Expect::CanaryFails)) {
            // A case whose simulation panicked has no results to count (its failure is in the check's verdicts).
            if let Some(results) = case.results {
                cases.push((case.index, order, Input { parsed: results.into(), path, file: order }));
            }
        }
        if cases.len() == before {
            canary_only.push(path);
        }
    }
    cases.sort_by_key(|(index, order, _)| (*index, *order));
    plain.extend(cases.into_iter().map(|(_, _, input)| input));
    if plain.is_empty()
        && let Some(path) = canary_only.first()
    {
        return Err(format!(
            "{} holds no results to report on: a report leaves out the canary (the harness's self-test, not a rate) \
             and cases whose simulation panicked",
            path.display()
        ));
    }
    for input in &plain {
        reports::report::check_counts(&input.parsed.results).map_err(|e| format!("{}: {e}", input.path.display()))?;
    }
    refuse_twice_counted(&plain)?;
    suites.dedup_by(|a, b| a.0 == b.0);
    if suites.len() > 1 {
        let listed: Vec<String> = suites.iter().map(|(s, path)| format!("{} ({s})", path.display())).collect();
        outln!("flowsim report: note: the check files come from different suites: {}", listed.join("; "));
    }
    Ok(plain.into_iter().map(|input| input.parsed).collect())
}

/// Refuses a simulation counted twice (see the module's doc). A merge of both ledgers' runs names the ledger of each
/// of its hashes (`trace_ledgers`); one from before that field does not, and a hash of it is refused when it occurs
/// more often than there are ledgers, or twice with one known ledger.
fn refuse_twice_counted(inputs: &[Input<'_>]) -> Result<(), String> {
    let mut seen: BTreeMap<&str, Vec<(Option<&str>, &Input<'_>)>> = BTreeMap::new();
    for input in inputs {
        let r = &input.parsed.results;
        for (hash, ledger) in r.hashes_with_ledgers() {
            let earlier = seen.entry(hash).or_default();
            let same_ledger = earlier.iter().find(|(l, _)| ledger.is_some() && *l == ledger);
            let clash = same_ledger.or_else(|| earlier.get(LEDGERS.len() - 1));
            if let Some((_, first)) = clash {
                // Named by whichever side is a single run: a merge's seed is only its first run's.
                let single = [r, &first.parsed.results].into_iter().find(|r| r.merged_runs <= 1);
                let which = single.map_or_else(
                    || "a simulation".to_owned(),
                    |r| format!("the simulation of {} seed {}", r.scenario, r.seed),
                );
                let what = format!("{which} ({} ledger, trace hash {hash})", ledger.unwrap_or(MIXED));
                return Err(if first.file == input.file {
                    format!("{} holds {what} more than once: it would be counted twice", input.path.display())
                } else if first.path == input.path {
                    format!("{} is given twice: {what} would be counted twice", input.path.display())
                } else {
                    format!(
                        "{}: {what} is also in {}: a simulation must be counted once",
                        input.path.display(),
                        first.path.display()
                    )
                });
            }
            earlier.push((ledger, input));
        }
    }
    Ok(())
}

/// Whether the report shows something wrong: an invariant broken under the `rules` policy, or a regression against the
/// baseline. Returns what to say.
fn what_is_wrong(report: &reports::Report) -> Vec<String> {
    let mut wrong = Vec::new();
    for section in report.policies.iter().filter(|p| p.policy != "naive") {
        let broken: Vec<&str> = section.invariants.iter().filter(|i| !i.holds).map(|i| i.id.as_str()).collect();
        if !broken.is_empty() {
            wrong.push(format!("invariants broken under the {} policy: {}", section.policy, broken.join(", ")));
        }
    }
    if let Some(diff) = &report.baseline
        && diff.regression_count > 0
    {
        wrong.push(format!("{} regression(s) against the baseline", diff.regression_count));
    }
    wrong
}

/// Runs `flowsim report` and returns the exit code.
pub fn main(args: &ReportArgs) -> i32 {
    match report(args) {
        Ok(code) => code,
        Err(e) => {
            errln!("flowsim report: {e}");
            2
        }
    }
}

fn report(args: &ReportArgs) -> Result<i32, String> {
    let outputs: Vec<PathBuf> = ["report.md", "report.html", "report.json"].iter().map(|n| args.out.join(n)).collect();
    let inputs: Vec<&Path> = args.inputs.iter().chain(&args.baseline).map(PathBuf::as_path).collect();
    // Only the names are compared here (the directory may not exist yet): an input inside --out would be replaced.
    crate::output::refuse_inputs(outputs.iter().map(PathBuf::as_path), &inputs)?;
    crate::output::refuse_stdout_file(outputs.iter().map(PathBuf::as_path))?;
    let inputs = collect(&args.inputs)?;
    /// The scenarios of `policy`'s runs, each once: a report.json's sections name theirs through its run list.
    fn scenarios<'a>(inputs: &'a [reports::report::Input], policy: &str) -> Vec<&'a str> {
        let names = inputs.iter().flat_map(|input| match &input.runs {
            Some(runs) => runs.iter().filter(|r| r.policy == policy).map(|r| r.scenario.as_str()).collect(),
            None => Vec::from_iter((input.results.policy == policy).then_some(input.results.scenario.as_str())),
        });
        reports::report::scenario_names(names)
    }
    // Said in the report, under the diff, as well as here.
    let mut note = None;
    let baseline = match &args.baseline {
        None => None,
        Some(path) => {
            let all = collect(std::slice::from_ref(path)).map_err(|e| format!("baseline: {e}"))?;
            // The report diffs its first policy's section against the baseline's results of that policy.
            let policy = reports::report::first_policy(inputs.iter().map(|i| &i.results))
                .ok_or("the inputs hold no results to report on")?;
            let (old, new) = (scenarios(&all, policy), scenarios(&inputs, policy));
            let all: Vec<&Results> = all.iter().map(|i| &i.results).filter(|r| r.policy == policy).collect();
            if all.is_empty() {
                return Err(format!(
                    "baseline: {} holds no results of the {policy} policy, which the diff compares",
                    path.display()
                ));
            }
            // Said when both sides name their scenarios (a merge, such as a sweep's bound, does not).
            if old != new && !old.iter().chain(&new).any(|s| *s == MIXED) {
                let said = note.insert(format!(
                    "the baseline covers {}, these results {}: the diff compares different traffic",
                    old.join(", "),
                    new.join(", ")
                ));
                outln!("flowsim report: note: {said}");
            }
            Results::merge_all(all)
        }
    };
    let mut report = reports::report::build_report_from(&inputs, baseline.as_ref()).map_err(|e| e.to_string())?;
    if let Some(diff) = &mut report.baseline {
        diff.note = note;
    }
    // The findings are printed whatever the write does: a file written in place last (a device) may still fail.
    let written = reports::report::write_built(&report, &args.out);
    if written.is_ok() {
        outln!(
            "flowsim report: {} result{} written to {}",
            report.runs.len(),
            if report.runs.len() == 1 { "" } else { "s" },
            args.out.display()
        );
    }
    let wrong = what_is_wrong(&report);
    for w in &wrong {
        outln!("flowsim report: {w}");
    }
    written.map_err(|e| e.to_string())?;
    Ok(if wrong.is_empty() { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every invariant held, as a run reports them.
    fn held() -> BTreeMap<String, sim::results::InvariantResult> {
        let held = sim::results::InvariantResult { holds: true, checked: true, ..Default::default() };
        sim::checker::INVARIANTS.iter().map(|id| (id.to_string(), held.clone())).collect()
    }

    /// The result of `hashes` in the file at position `file` among the inputs.
    fn input<'a>(file: usize, path: &'a Path, ledger: &str, hashes: &str) -> Input<'a> {
        let results = Results {
            ledger: ledger.into(),
            trace_hash: hashes.into(),
            scenario: "mixed".into(),
            ..Default::default()
        };
        Input { parsed: results.into(), path, file }
    }

    /// The merge of `parts` (ledger, hash), as `report` would read it from a report.json.
    fn merged<'a>(file: usize, path: &'a Path, parts: &[(&str, &str)]) -> Input<'a> {
        let all: Vec<Results> =
            parts.iter().map(|(ledger, hash)| input(file, path, ledger, hash).parsed.results).collect();
        Input { parsed: Results::merge_all(&all).expect("parts").into(), path, file }
    }

    #[test]
    fn a_simulation_is_counted_once_whichever_files_hold_it() {
        let (m1, s1, both, other) =
            (Path::new("m1.json"), Path::new("s1.json"), Path::new("ms/report.json"), Path::new("mx/report.json"));
        let ok = |inputs: &[Input<'_>]| refuse_twice_counted(inputs).is_ok();
        // The two ledgers' runs of one seed share a hash and are two measurements, alone or merged.
        assert!(ok(&[input(0, m1, "memory", "h"), input(1, s1, "sqlite", "h")]));
        assert!(ok(&[input(0, both, MIXED, "h,h")]));
        // A merge of a SQLite run of seed 1 and a memory run of seed 2, beside the memory run of seed 1.
        assert!(ok(&[input(0, other, MIXED, "h,h2"), input(1, m1, "memory", "h")]));
        // The same run twice, or beside a merge that holds both ledgers' runs of it.
        assert!(!ok(&[input(0, m1, "memory", "h"), input(1, m1, "memory", "h")]));
        assert!(!ok(&[input(0, both, MIXED, "h,h"), input(1, m1, "memory", "h")]));
        assert!(!ok(&[input(0, m1, "memory", "h"), input(1, both, MIXED, "h,h")]));
        assert!(!ok(&[input(0, Path::new("jobs.json"), "memory", "a,b"), input(1, m1, "memory", "b")]));
        // A merge of both ledgers says which hash is which: the memory run of seed 1 beside a merge of it and a SQLite
        // run of seed 2 is refused (a merge that did not say, above, lets it through), the SQLite one is not.
        let mixed = merged(0, other, &[("memory", "h"), ("sqlite", "h2")]);
        assert_eq!(mixed.parsed.results.ledger, MIXED);
        assert_eq!(mixed.parsed.results.trace_ledgers.as_deref(), Some("memory,sqlite"));
        assert!(!ok(&[merged(0, other, &[("memory", "h"), ("sqlite", "h2")]), input(1, m1, "memory", "h")]));
        assert!(ok(&[merged(0, other, &[("memory", "h"), ("sqlite", "h2")]), input(1, s1, "sqlite", "h")]));
        assert!(!ok(&[merged(0, both, &[("memory", "h"), ("sqlite", "h")]), input(1, s1, "sqlite", "h")]));
        // One ledger's merge names no ledgers: its `ledger` says it.
        assert_eq!(merged(0, other, &[("memory", "h"), ("memory", "h2")]).parsed.results.trace_ledgers, None);
    }

    /// A clash inside a merge is named by the single run's seed, not by the merge's (its first run's).
    #[test]
    fn a_clash_is_named_by_the_single_run_s_seed() {
        let (single, merge) = (Path::new("s2.json"), Path::new("a/report.json"));
        let mut run = input(0, single, "sqlite", "h2");
        run.parsed.results.seed = 2;
        let mut parts: Vec<Results> = [("memory", "h1"), ("sqlite", "h2")]
            .iter()
            .map(|(ledger, hash)| input(1, merge, ledger, hash).parsed.results)
            .collect();
        parts[0].seed = 1;
        parts[1].seed = 2;
        let both = Input { parsed: Results::merge_all(&parts).expect("parts").into(), path: merge, file: 1 };
        assert_eq!(both.parsed.results.seed, 1);
        let error = refuse_twice_counted(&[run, both]).expect_err("counted twice");
        assert!(error.contains("the simulation of mixed seed 2 (sqlite ledger, trace hash h2)"), "{error}");
    }

    /// Every policy section of a report.json is counted, and a baseline is read for the policy the report diffs.
    #[test]
    fn a_report_json_contributes_every_policy() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let results = |policy: &str, hash: &str| Results {
            policy: policy.into(),
            ledger: "memory".into(),
            trace_hash: hash.into(),
            scenario: "mixed".into(),
            invariants: held(),
            ..Default::default()
        };
        let report = reports::build_report(&[results("rules", "r1"), results("naive", "n1")], None).expect("built");
        let path = dir.path().join("report.json");
        std::fs::write(&path, reports::report::render_json(&report)).expect("write");
        let all = collect(std::slice::from_ref(&path)).expect("read");
        let policies: Vec<&str> = all.iter().map(|r| r.results.policy.as_str()).collect();
        assert_eq!(policies, ["rules", "naive"]);
        // Beside one of its inputs, the naive run is refused as counted twice.
        let naive = dir.path().join("naive.json");
        std::fs::write(&naive, serde_json::to_string(&results("naive", "n1")).expect("json")).expect("write");
        let error = collect(&[path, naive]).expect_err("counted twice");
        assert!(error.contains("trace hash n1"), "{error}");
    }

    /// A report.json fed back in keeps what its sections' merged results forget: the runs it listed (so the report
    /// names their scenarios) and its residual duplicates against lag bounds that differed between runs.
    #[test]
    fn a_report_json_fed_back_keeps_its_runs_and_lag_series() {
        use sim::results::ActionStats;
        let dir = tempfile::tempdir().expect("a temp dir");
        let run = |scenario: &str, seed: u64, bound: u64, duplicates: u64| {
            let action = ActionStats {
                class: "lookup-before-create".into(),
                steps: 1_000,
                effects: 1_000 + duplicates,
                duplicates,
                lag_bound_ms: Some(bound),
                ..Default::default()
            };
            Results {
                scenario: scenario.into(),
                seed,
                policy: "rules".into(),
                ledger: "memory".into(),
                trace_hash: format!("h{seed}"),
                steps: 1_000,
                runs: 500,
                invariants: held(),
                actions: [("contacts.create".to_owned(), action)].into(),
                duplicates: sim::results::Duplicates { total: duplicates, ..Default::default() },
                ..Default::default()
            }
        };
        let (a, b, c) = (run("lag-a", 1, 5_000, 3), run("lag-b", 2, 60_000, 1), run("lag-b", 3, 60_000, 0));
        let first = reports::build_report(&[a.clone(), b.clone()], None).expect("built");
        assert_eq!(first.lag_series.len(), 1, "two bounds make a series");
        let path = dir.path().join("report.json");
        std::fs::write(&path, reports::report::render_json(&first)).expect("write");
        // Alone, it reports what it reported.
        let again = reports::report::build_report_from(&collect(std::slice::from_ref(&path)).expect("read"), None)
            .expect("built");
        assert_eq!(again.lag_series, first.lag_series);
        assert_eq!(again.runs, first.runs);
        assert!(reports::report::render_markdown(&again).contains("Scenarios: lag-a, lag-b"));
        // Beside a further run, its points add to the series as the runs' own would.
        let later = dir.path().join("c.json");
        std::fs::write(&later, serde_json::to_string(&c).expect("json")).expect("write");
        let fed = reports::report::build_report_from(&collect(&[path, later]).expect("read"), None).expect("built");
        let direct = reports::build_report(&[a, b, c], None).expect("built");
        assert_eq!(fed.lag_series, direct.lag_series);
        assert_eq!(fed.runs, direct.runs);
    }

    /// The note that the baseline covers other scenarios is in the report itself (report.md and report.json), not
    /// only printed: whoever reads the published report must see that the diff compares different traffic.
    #[test]
    fn the_baseline_s_other_traffic_is_said_in_the_report() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let results = |scenario: &str, hash: &str| Results {
            scenario: scenario.into(),
            policy: "rules".into(),
            ledger: "memory".into(),
            trace_hash: hash.into(),
            invariants: held(),
            ..Default::default()
        };
        let (now, old) = (dir.path().join("now.json"), dir.path().join("old.json"));
        std::fs::write(&now, serde_json::to_string(&results("canary", "c1")).expect("json")).expect("write");
        std::fs::write(&old, serde_json::to_string(&results("mixed", "m1")).expect("json")).expect("write");
        let out = dir.path().join("report");
        let args = ReportArgs { inputs: vec![now.clone()], out: out.clone(), baseline: Some(old.clone()) };
        assert_eq!(report(&args), Ok(0));
        let said = "the baseline covers mixed, these results canary: the diff compares different traffic";
        let md = std::fs::read_to_string(out.join("report.md")).expect("written");
        assert!(md.contains(&format!("Note: {said}")), "{md}");
        let json = std::fs::read_to_string(out.join("report.json")).expect("written");
        assert!(json.contains(said), "{json}");
        // The same traffic on both sides: no note.
        let args = ReportArgs { inputs: vec![now.clone()], out: out.clone(), baseline: Some(now) };
        assert_eq!(report(&args), Ok(0));
        let md = std::fs::read_to_string(out.join("report.md")).expect("written");
        assert!(!md.contains("Note:"), "{md}");
    }
}
