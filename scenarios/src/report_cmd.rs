//! `flowsim report FILE... --out DIR [--baseline OLD.json]`: the duplicate-rate report of `reports::write_report`.
//!
//! An input is either a results file (`flowsim run --json`, or a `report.json`) or a `flowsim check --json` file
//! (`check_format` = [`crate::check::CHECK_FORMAT`]). A check file contributes each of its non-canary cases' results;
//! the cases of every check file given are put in suite order (by case index), so the shards of a sweep make the
//! same report as the unsharded sweep. Plain results files come first, in the order given. A case index given twice
//! is refused: it would count one simulation twice.

use crate::catalogue::Expect;
use crate::check::{CHECK_FORMAT, CheckFile, expect_name};
use sim::results::Results;
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

/// The results of the inputs, in report order. Errors name the file (exit 2).
pub fn collect(inputs: &[PathBuf]) -> Result<Vec<Results>, String> {
    let mut plain = Vec::new();
    let mut cases: BTreeMap<u64, (Results, &Path)> = BTreeMap::new();
    for path in inputs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format!("{}:{}:{}: not JSON: {e}", path.display(), e.line(), e.column()))?;
        if value.get("check_format").is_none() {
            plain.push(reports::report::parse_results(&text, path).map_err(|e| e.to_string())?);
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
        for case in file.cases.into_iter().filter(|c| c.expect != expect_name(Expect::CanaryFails)) {
            if let Some((_, first)) = cases.get(&case.index) {
                return Err(format!(
                    "{}: case {} ({}) is also in {}: a case must be counted once",
                    path.display(),
                    case.index,
                    case.verdict.name(),
                    first.display()
                ));
            }
            // A case whose simulation panicked has no results to count (its failure is in the check's verdicts).
            if let Some(results) = case.results {
                cases.insert(case.index, (results, path));
            }
        }
    }
    plain.extend(cases.into_values().map(|(r, _)| r));
    Ok(plain)
}

/// Runs `flowsim report` and returns the exit code.
pub fn main(args: &ReportArgs) -> i32 {
    let results = match collect(&args.inputs) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flowsim report: {e}");
            return 2;
        }
    };
    let baseline = match args.baseline.as_ref().map(reports::load_results).transpose() {
        Ok(b) => b,
        Err(e) => {
            eprintln!("flowsim report: baseline: {e}");
            return 2;
        }
    };
    if let Err(e) = reports::write_report(&results, baseline.as_ref(), &args.out) {
        eprintln!("flowsim report: {e}");
        return 2;
    }
    outln!("flowsim report: {} results written to {}", results.len(), args.out.display());
    0
}
