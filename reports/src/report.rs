//! The duplicate-rate report: from one or more results files to `report.md`, `report.html` and `report.json`.
//!
//! The work is split into a pure core and a thin driver. [`build_report`] turns results into a [`Report`] (every
//! figure, each rate with its exact 95 % bounds; this is `report.json`); [`render_markdown`] and [`render_html`] lay the
//! same [`Block`]s out for GitHub and for a browser; [`write_report`] and [`load_results`] do the file I/O.
//!
//! Results are grouped by policy and each group merged by summing counts ([`sim::results::Results::merge`]); the
//! first group (`rules` when present) is the one the guarantees table and a baseline diff are about. Residual
//! duplicates against the lag bound are taken from the unmerged inputs, because a merge of different lag bounds
//! forgets the bound.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sim::results::{Latency, Results};

use crate::rates::{Change, Rate, significant};
use crate::svg::{Bar, BarChart, Series, escape};

/// The value of `report_format` in `report.json`; lets [`load_results`] tell a report from a results file.
pub const REPORT_FORMAT: &str = "flow-report/1";

/// The most single runs listed one by one in the report; beyond it only runs that broke an invariant are listed.
const RUNS_LISTED_MAX: usize = 50;

/// Operating errors of the report: unreadable or malformed input, unwritable output.
#[derive(Debug)]
pub enum Error {
    /// No results were given.
    NoResults,
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not results JSON (nor a `report.json`); `line` and `column` are 1-based, 0 when unknown.
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoResults => write!(f, "no results to report on: give at least one results JSON file"),
            Error::Read { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            Error::Parse { path, line, column, message } if *line > 0 => {
                write!(f, "{}:{line}:{column}: not a flowsim results file: {message}", path.display())
            }
            Error::Parse { path, message, .. } => {
                write!(f, "{}: not a flowsim results file: {message}", path.display())
            }
            Error::Write { path, source } => write!(f, "cannot write {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Read { source, .. } | Error::Write { source, .. } => Some(source),
            Error::NoResults | Error::Parse { .. } => None,
        }
    }
}

/// `report.json`: every figure of the report.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// Always [`REPORT_FORMAT`].
    pub report_format: String,
    /// One section per policy, `rules` first, then `naive`, then any other.
    pub policies: Vec<PolicySection>,
    /// Residual duplicates of lookup actions against their lag bound (first policy), when several bounds were run.
    pub lag_series: Vec<LagSeries>,
    /// The single runs that went in, in order.
    pub runs: Vec<RunSummary>,
    pub baseline: Option<BaselineDiff>,
}

/// The merged figures of one policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PolicySection {
    pub policy: String,
    pub duplicates: Rate,
    /// Runs in which a customer could see a retry, out of all runs.
    pub visible_retries: Rate,
    pub by_class: Vec<ClassRow>,
    /// The public guarantees table.
    pub actions: Vec<ActionRow>,
    pub invariants: Vec<InvariantRow>,
    /// The merged results themselves (what `--baseline` reads back from a `report.json`).
    pub results: Results,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClassRow {
    pub class: String,
    /// The real count; `duplicates.events` is capped at the steps (see [`rate`]).
    pub duplicate_count: u64,
    /// Duplicates per write step of the actions in this class (of all steps when no action has the class).
    pub duplicates: Rate,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ActionRow {
    pub action: String,
    pub class: String,
    pub safeguards: Vec<String>,
    /// The real count; `duplicates.events` is capped at the steps (see [`rate`]).
    pub duplicate_count: u64,
    pub duplicates: Rate,
    pub lag_bound_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InvariantRow {
    pub id: String,
    pub holds: bool,
    /// False when no run checked it (I9 without `--check-determinism`): `holds` then claims nothing.
    #[serde(default = "checked_by_default")]
    pub checked: bool,
    /// When only some of the merged runs checked it (`flowsim check` checks I9 on seed 1 of each scenario): how many
    /// did, of `runs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_runs: Option<u64>,
    /// The runs merged into the section.
    #[serde(default)]
    pub runs: u64,
    pub violations: u64,
    pub first_violation: Option<String>,
}

impl InvariantRow {
    /// `(checked in 11 of 22 runs)` when only some runs checked it, else empty.
    fn partly(&self) -> String {
        self.checked_runs.map_or_else(String::new, |n| format!(" (checked in {n} of {} runs)", self.runs))
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LagSeries {
    pub action: String,
    pub points: Vec<LagPoint>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LagPoint {
    pub lag_bound_ms: u64,
    /// The real count; `duplicates.events` is capped at the steps (see [`rate`]).
    pub duplicate_count: u64,
    pub duplicates: Rate,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunSummary {
    pub scenario: String,
    pub seed: u64,
    pub policy: String,
    pub steps: u64,
    pub duplicates: u64,
    pub all_hold: bool,
    pub repro: String,
}

/// The first policy's figures against a previous release's.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BaselineDiff {
    pub baseline_policy: String,
    pub total: Change,
    pub by_class: Vec<NamedChange>,
    pub actions: Vec<NamedChange>,
    /// Invariants that held in the baseline and are broken now.
    pub invariants_newly_broken: Vec<String>,
    /// Significant rate regressions plus newly broken invariants.
    pub regression_count: usize,
    /// Said under the diff where its two sides differ in what they simulated (e.g. the baseline covers other
    /// scenarios), so a reader of the published report sees it, not only whoever ran the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NamedChange {
    pub name: String,
    pub change: Change,
}

/// A rate of `events` in `trials`. Above one event per trial (only a canary gets there: one key can have several
/// duplicates) the events are capped at the trials, so the rate reads "every step" rather than failing the report.
fn rate(events: u64, trials: u64) -> Rate {
    Rate::new(events.min(trials), trials).expect("events are capped at trials")
}

/// Policies in report order: `rules`, `naive`, then the rest alphabetically.
fn policy_rank(policy: &str) -> (u8, &str) {
    match policy {
        "rules" => (0, policy),
        "naive" => (1, policy),
        other => (2, other),
    }
}

/// Duplicates and steps by guarantee class. A class's steps are those of its actions (none when its actions never
/// ran: the row then says "no steps" rather than claiming the evidence of steps taken elsewhere); a class in the
/// duplicate counts without any action of its own (e.g. `canary`) is measured against all steps.
fn class_rows(results: &Results) -> Vec<ClassRow> {
    let mut steps_by_class: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for stats in results.actions.values() {
        let entry = steps_by_class.entry(stats.class.as_str()).or_default();
        entry.0 += stats.steps;
        entry.1 += stats.duplicates;
    }
    let mut classes: Vec<&str> = steps_by_class.keys().copied().collect();
    for class in results.duplicates.by_class.keys() {
        if !classes.contains(&class.as_str()) {
            classes.push(class);
        }
    }
    classes.sort_unstable();
    classes
        .into_iter()
        .map(|class| {
            let (trials, action_duplicates) = steps_by_class.get(class).copied().unwrap_or((results.steps, 0));
            let duplicates = results.duplicates.by_class.get(class).copied().unwrap_or(action_duplicates);
            ClassRow { class: class.to_string(), duplicate_count: duplicates, duplicates: rate(duplicates, trials) }
        })
        .collect()
}

fn policy_section(results: Results) -> PolicySection {
    PolicySection {
        policy: results.policy.clone(),
        duplicates: rate(results.duplicates.total, results.steps),
        visible_retries: rate(results.runs_with_visible_retry, results.runs),
        by_class: class_rows(&results),
        actions: results
            .actions
            .iter()
            .map(|(action, stats)| ActionRow {
                action: action.clone(),
                class: stats.class.clone(),
                safeguards: stats.safeguards.clone(),
                duplicate_count: stats.duplicates,
                duplicates: rate(stats.duplicates, stats.steps),
                lag_bound_ms: stats.lag_bound_ms,
            })
            .collect(),
        invariants: {
            // I1, I2, …, I10: by length first, so the numbers read in order.
            let mut ids: Vec<(&String, &sim::results::InvariantResult)> = results.invariants.iter().collect();
            ids.sort_by_key(|(id, _)| (id.len(), id.as_str()));
            ids.into_iter()
                .map(|(id, i)| InvariantRow {
                    id: id.clone(),
                    holds: i.holds,
                    checked: i.checked,
                    checked_runs: i.checked_runs,
                    runs: results.merged_runs.max(1),
                    violations: i.violations,
                    first_violation: i.first_violation.clone(),
                })
                .collect()
        },
        results,
    }
}

/// The lag points of the inputs of one policy. A report.json's section brings its report's series: its merged results
/// forget the bound of an action run at several (and keep it when there was one, which is then not a series of it).
fn lag_series<I: AsInput>(inputs: &[&I]) -> Vec<LagSeries> {
    let mut by_action: BTreeMap<&str, BTreeMap<u64, (u64, u64)>> = BTreeMap::new();
    for input in inputs {
        let carried = input.lag_series().unwrap_or_default();
        for series in carried {
            for point in &series.points {
                let entry = by_action.entry(series.action.as_str()).or_default().entry(point.lag_bound_ms).or_default();
                entry.0 += point.duplicates.trials;
                entry.1 += point.duplicate_count;
            }
        }
        for (action, stats) in &input.results().actions {
            if let Some(bound) = stats.lag_bound_ms
                && !carried.iter().any(|s| s.action == *action)
            {
                let entry = by_action.entry(action.as_str()).or_default().entry(bound).or_default();
                entry.0 += stats.steps;
                entry.1 += stats.duplicates;
            }
        }
    }
    by_action
        .into_iter()
        .filter(|(_, points)| points.len() >= 2)
        .map(|(action, points)| LagSeries {
            action: action.to_string(),
            points: points
                .into_iter()
                .map(|(lag_bound_ms, (steps, duplicates))| LagPoint {
                    lag_bound_ms,
                    duplicate_count: duplicates,
                    duplicates: rate(duplicates, steps),
                })
                .collect(),
        })
        .collect()
}

fn baseline_diff(baseline: &Results, current: &PolicySection) -> BaselineDiff {
    let old = policy_section(baseline.clone());
    let total = Change::new(old.duplicates, current.duplicates);
    let by_class: Vec<NamedChange> = current
        .by_class
        .iter()
        .map(|row| {
            let before = old.by_class.iter().find(|o| o.class == row.class).map_or(rate(0, 0), |o| o.duplicates);
            NamedChange { name: row.class.clone(), change: Change::new(before, row.duplicates) }
        })
        .collect();
    let actions: Vec<NamedChange> = current
        .actions
        .iter()
        .map(|row| {
            let before = old.actions.iter().find(|o| o.action == row.action).map_or(rate(0, 0), |o| o.duplicates);
            NamedChange { name: row.action.clone(), change: Change::new(before, row.duplicates) }
        })
        .collect();
    let invariants_newly_broken: Vec<String> = current
        .invariants
        .iter()
        .filter(|now| !now.holds && old.invariants.iter().find(|o| o.id == now.id).is_none_or(|o| o.holds))
        .map(|now| now.id.clone())
        .collect();
    let regression_count = usize::from(total.regression)
        + by_class.iter().filter(|c| c.change.regression).count()
        + actions.iter().filter(|c| c.change.regression).count()
        + invariants_newly_broken.len();
    BaselineDiff {
        baseline_policy: old.policy,
        total,
        by_class,
        actions,
        invariants_newly_broken,
        regression_count,
        note: None,
    }
}

/// One input of a report: a run's results (or a merge's), or a policy section of an earlier `report.json`. A section's
/// merged results forget which runs went in and the lag bounds that differed between them; the report.json still
/// lists both, so its section brings them ([`parse_all_inputs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub results: Results,
    /// The runs listed for these results: `None` for a run's own results (listed as themselves). A report.json's
    /// first section carries every run that report listed (all its policies'), and its other sections none.
    pub runs: Option<Vec<RunSummary>>,
    /// A report.json's first section: that report's lag series (of its first policy, the section's own).
    pub lag_series: Option<Vec<LagSeries>>,
}

impl From<Results> for Input {
    fn from(results: Results) -> Input {
        Input { results, runs: None, lag_series: None }
    }
}

/// What the report builder reads of one input, borrowed: a run's own [`Results`] (which lists itself and brings no lag
/// series) or an [`Input`]. [`build_report`] and [`build_report_from`] share the builder without copying any results.
trait AsInput {
    fn results(&self) -> &Results;
    /// The runs listed for these results; `None` lists the results themselves (see [`Input::runs`]).
    fn runs(&self) -> Option<&[RunSummary]> {
        None
    }
    /// The lag series a report.json's first section brings (see [`Input::lag_series`]).
    fn lag_series(&self) -> Option<&[LagSeries]> {
        None
    }
}

impl AsInput for Results {
    fn results(&self) -> &Results {
        self
    }
}

impl AsInput for Input {
    fn results(&self) -> &Results {
        &self.results
    }
    fn runs(&self) -> Option<&[RunSummary]> {
        self.runs.as_deref()
    }
    fn lag_series(&self) -> Option<&[LagSeries]> {
        self.lag_series.as_deref()
    }
}

/// Every figure of the report for `results` (grouped by policy and merged), against `baseline` when given.
pub fn build_report(results: &[Results], baseline: Option<&Results>) -> Result<Report, Error> {
    build(results, baseline)
}

/// [`build_report`] on inputs that may be an earlier report's sections.
pub fn build_report_from(inputs: &[Input], baseline: Option<&Results>) -> Result<Report, Error> {
    build(inputs, baseline)
}

/// The builder of [`build_report`] and [`build_report_from`].
fn build<I: AsInput>(inputs: &[I], baseline: Option<&Results>) -> Result<Report, Error> {
    if inputs.is_empty() {
        return Err(Error::NoResults);
    }
    let mut groups: BTreeMap<(u8, &str), Vec<&I>> = BTreeMap::new();
    for input in inputs {
        groups.entry(policy_rank(&input.results().policy)).or_default().push(input);
    }
    let policies: Vec<PolicySection> = groups
        .values()
        .map(|group| {
            let merged = Results::merge_all(group.iter().map(|i| i.results())).expect("a group is never empty");
            policy_section(merged)
        })
        .collect();
    let first_group = groups.values().next().expect("inputs are not empty");
    let lag_series = lag_series(first_group);
    let baseline = baseline.map(|b| baseline_diff(b, &policies[0]));
    let runs = inputs
        .iter()
        .flat_map(|input| match input.runs() {
            Some(runs) => runs.to_vec(),
            None => {
                let r = input.results();
                vec![RunSummary {
                    scenario: r.scenario.clone(),
                    seed: r.seed,
                    policy: r.policy.clone(),
                    steps: r.steps,
                    duplicates: r.duplicates.total,
                    all_hold: r.all_hold(),
                    repro: r.repro.clone(),
                }]
            }
        })
        .collect();
    Ok(Report { report_format: REPORT_FORMAT.to_string(), policies, lag_series, runs, baseline })
}

/// A piece of the report, laid out by both renderers. Text is plain; each renderer escapes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Heading(String),
    Paragraph(String),
    List(Vec<String>),
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
    },
    /// HTML only (Markdown on GitHub would strip inline SVG).
    Chart(BarChart),
}

fn checked_by_default() -> bool {
    true
}

/// The headline's line when no invariant broke: says which were not checked rather than counting them as held.
fn invariants_held(rows: &[InvariantRow]) -> String {
    let unchecked: Vec<&str> = rows.iter().filter(|i| !i.checked).map(|i| i.id.as_str()).collect();
    let partly: Vec<String> = rows
        .iter()
        .filter(|i| i.checked && i.checked_runs.is_some())
        .map(|i| format!("{}{}", i.id, i.partly()))
        .collect();
    let partly = if partly.is_empty() { String::new() } else { format!("; {}", partly.join(", ")) };
    if unchecked.is_empty() {
        return format!("Invariants: all {} held{partly}", rows.len());
    }
    format!(
        "Invariants: all {} checked held{partly}; not checked: {} (I9, determinism, is checked by flowsim run \
         --check-determinism and by flowsim check)",
        rows.len() - unchecked.len(),
        unchecked.join(", ")
    )
}

/// `1 result`, `22 results`.
fn results_count(n: usize) -> String {
    format!("{n} result{}", if n == 1 { "" } else { "s" })
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A share as a percentage. Near 100 % the complement decides the precision, so 99.98 % is not rounded to 100 %.
fn percent(x: f64) -> String {
    if (0.99..1.0).contains(&x) {
        let complement = significant((1.0 - x) * 100.0, 2);
        let decimals = complement.split_once('.').map_or(0, |(_, d)| d.len());
        return format!("{:.*} %", decimals, x * 100.0);
    }
    format!("{} %", significant(x * 100.0, 4))
}

/// The measured rate column: "0" or "2.4 per million (95 % CI …)".
fn measured(rate: &Rate) -> String {
    if rate.trials == 0 {
        "no steps".to_string()
    } else if rate.events == 0 {
        "0".to_string()
    } else {
        rate.describe()
    }
}

/// The upper-bound column: "6.2 per 100 million".
fn upper(rate: &Rate) -> String {
    if rate.trials == 0 {
        return "—".to_string();
    }
    let scale = crate::rates::Scale::for_value(rate.upper_95);
    format!("{} {}", scale.format(rate.upper_95), scale.name)
}

fn rate_bar(rate: &Rate) -> Bar {
    let per = 1e6;
    let label = if rate.events == 0 {
        format!("0 (≤ {})", significant(rate.upper_95 * per, 2))
    } else {
        significant(rate.point * per, 2)
    };
    Bar { value: rate.point * per, whisker: Some((rate.interval_95.low * per, rate.interval_95.high * per)), label }
}

fn latency_values(l: &Latency) -> [u64; 5] {
    [l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms]
}

/// The scenarios named, each once, in order: what a report's first line lists, and what a baseline is compared by.
pub fn scenario_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    names.into_iter().collect::<std::collections::BTreeSet<_>>().into_iter().collect()
}

/// The report as blocks, in reading order.
pub fn blocks(report: &Report) -> Vec<Block> {
    let mut out = Vec::new();
    let first = &report.policies[0];
    let scenarios = scenario_names(report.runs.iter().map(|r| r.scenario.as_str()));
    out.push(Block::Paragraph(format!(
        "Scenarios: {}. {} merged by summing counts; policies: {}. Every rate carries its exact \
         (Clopper–Pearson) 95 % interval; a measured zero is stated with its one-sided 95 % upper bound.",
        scenarios.join(", "),
        results_count(report.runs.len()),
        report.policies.iter().map(|p| p.policy.as_str()).collect::<Vec<_>>().join(", ")
    )));

    for section in &report.policies {
        let r = &section.results;
        out.push(Block::Heading(format!("Headline ({})", section.policy)));
        let broken: Vec<String> = section
            .invariants
            .iter()
            .filter(|i| !i.holds)
            .map(|i| format!("{} ({} violations)", i.id, i.violations))
            .collect();
        out.push(Block::List(vec![
            format!("Steps: {} in {} runs", thousands(r.steps), thousands(r.runs)),
            format!("Duplicate side effects: {}", section.duplicates.describe()),
            format!(
                "Runs without a retry a customer can see: {} ({} of {})",
                percent(1.0 - section.visible_retries.point),
                thousands(r.runs.saturating_sub(r.runs_with_visible_retry)),
                thousands(r.runs)
            ),
            format!("Automatic retries enabled for {} of actions", percent(r.auto_retry_coverage)),
            format!(
                "Paused runs: {}; failed runs: {}; paused steps a person resolved: {}",
                thousands(r.paused_runs),
                thousands(r.failed_runs),
                thousands(r.person_resolutions)
            ),
            format!(
                "Extra lookups made because of the rules: {} (simulated cost {} ms in all{})",
                thousands(r.extra_lookups),
                thousands(r.extra_lookup_ms_total),
                if r.extra_lookups == 0 {
                    String::new()
                } else {
                    format!(
                        ", {} ms per lookup",
                        significant(r.extra_lookup_ms_total as f64 / r.extra_lookups as f64, 3)
                    )
                }
            ),
            if broken.is_empty() {
                invariants_held(&section.invariants)
            } else {
                format!("Invariants BROKEN: {}", broken.join(", "))
            },
        ]));
    }

    out.push(Block::Heading(format!("Guarantees by connector ({})", first.policy)));
    out.push(Block::Table {
        header: ["Action", "Class", "Safeguards", "Steps", "Duplicates", "Measured rate", "95 % upper bound"]
            .map(String::from)
            .to_vec(),
        rows: first
            .actions
            .iter()
            .map(|a| {
                let safeguards = if a.safeguards.is_empty() { "none".to_string() } else { a.safeguards.join("; ") };
                vec![
                    a.action.clone(),
                    a.class.clone(),
                    safeguards,
                    thousands(a.duplicates.trials),
                    thousands(a.duplicate_count),
                    measured(&a.duplicates),
                    upper(&a.duplicates),
                ]
            })
            .collect(),
    });

    out.push(Block::Heading("Duplicates by guarantee class".to_string()));
    out.push(Block::Table {
        header: ["Policy", "Class", "Steps", "Duplicates", "Measured rate", "95 % upper bound"]
            .map(String::from)
            .to_vec(),
        rows: report
            .policies
            .iter()
            .flat_map(|p| {
                p.by_class.iter().map(|c| {
                    vec![
                        p.policy.clone(),
                        c.class.clone(),
                        thousands(c.duplicates.trials),
                        thousands(c.duplicate_count),
                        measured(&c.duplicates),
                        upper(&c.duplicates),
                    ]
                })
            })
            .collect(),
    });
    let mut classes: Vec<String> =
        report.policies.iter().flat_map(|p| p.by_class.iter().map(|c| c.class.clone())).collect();
    classes.sort_unstable();
    classes.dedup();
    out.push(Block::Chart(BarChart {
        log_scale: false,
        title: "Duplicates per million steps by guarantee class".to_string(),
        y_label: "duplicates per million steps (95 % CI)".to_string(),
        series: report
            .policies
            .iter()
            .map(|p| Series {
                name: p.policy.clone(),
                bars: classes
                    .iter()
                    .map(|class| {
                        // A class with no steps has no rate to draw (its interval is all of 0..1).
                        let row = p.by_class.iter().find(|c| &c.class == class && c.duplicates.trials > 0);
                        row.map(|c| rate_bar(&c.duplicates))
                    })
                    .collect(),
            })
            .collect(),
        categories: classes,
    }));

    if !report.lag_series.is_empty() {
        out.push(Block::Heading(format!("Residual duplicates against the lag bound ({})", first.policy)));
        out.push(Block::Table {
            header: ["Action", "Lag bound", "Steps", "Duplicates", "Measured rate", "95 % upper bound"]
                .map(String::from)
                .to_vec(),
            rows: report
                .lag_series
                .iter()
                .flat_map(|s| {
                    s.points.iter().map(|p| {
                        vec![
                            s.action.clone(),
                            format!("{} ms", thousands(p.lag_bound_ms)),
                            thousands(p.duplicates.trials),
                            thousands(p.duplicate_count),
                            measured(&p.duplicates),
                            upper(&p.duplicates),
                        ]
                    })
                })
                .collect(),
        });
        let mut bounds: Vec<u64> =
            report.lag_series.iter().flat_map(|s| s.points.iter().map(|p| p.lag_bound_ms)).collect();
        bounds.sort_unstable();
        bounds.dedup();
        out.push(Block::Chart(BarChart {
            log_scale: false,
            title: "Residual duplicates against the lag bound".to_string(),
            y_label: "duplicates per million steps (95 % CI)".to_string(),
            series: report
                .lag_series
                .iter()
                .map(|s| Series {
                    name: s.action.clone(),
                    bars: bounds
                        .iter()
                        .map(|b| s.points.iter().find(|p| p.lag_bound_ms == *b).map(|p| rate_bar(&p.duplicates)))
                        .collect(),
                })
                .collect(),
            categories: bounds.iter().map(|b| format!("{} ms", thousands(*b))).collect(),
        }));
    }

    out.push(Block::Heading("Step latency (simulated milliseconds)".to_string()));
    out.push(Block::Paragraph(
        "From a step's first attempt to its succeeded record. A merge keeps the largest of each percentile over the \
         merged results, so these are upper bounds when several results were merged."
            .to_string(),
    ));
    let percentile_names = ["p50", "p90", "p99", "p99.9", "max"];
    out.push(Block::Table {
        header: std::iter::once("Policy").chain(percentile_names).map(String::from).collect(),
        rows: report
            .policies
            .iter()
            .map(|p| {
                std::iter::once(p.policy.clone())
                    .chain(latency_values(&p.results.latency).iter().map(|v| thousands(*v)))
                    .collect()
            })
            .collect(),
    });
    out.push(Block::Chart(BarChart {
        title: "Step latency percentiles".to_string(),
        y_label: "simulated ms (log scale)".to_string(),
        log_scale: true,
        categories: percentile_names.map(String::from).to_vec(),
        series: report
            .policies
            .iter()
            .map(|p| Series {
                name: p.policy.clone(),
                bars: latency_values(&p.results.latency)
                    .iter()
                    .map(|v| Some(Bar { value: *v as f64, whisker: None, label: thousands(*v) }))
                    .collect(),
            })
            .collect(),
    }));

    out.push(Block::Heading("Invariants".to_string()));
    out.push(Block::Table {
        header: ["Policy", "Invariant", "Holds", "Violations", "First violation"].map(String::from).to_vec(),
        rows: report
            .policies
            .iter()
            .flat_map(|p| {
                p.invariants.iter().map(|i| {
                    vec![
                        p.policy.clone(),
                        i.id.clone(),
                        match (i.holds, i.checked) {
                            (false, _) => "NO".to_string(),
                            (true, true) => format!("yes{}", i.partly()),
                            (true, false) => "not checked".to_string(),
                        },
                        thousands(i.violations),
                        i.first_violation.clone().unwrap_or_default(),
                    ]
                })
            })
            .collect(),
    });

    if let Some(diff) = &report.baseline {
        out.push(Block::Heading("Against the baseline".to_string()));
        out.push(Block::Paragraph(format!(
            "{} significant regression(s). A rate is flagged when it is higher than the baseline's ({} policy) with a \
             one-sided p-value below {} (exact conditional binomial test on the duplicate counts); an invariant is \
             flagged when it held in the baseline and is broken now.",
            diff.regression_count,
            diff.baseline_policy,
            crate::rates::REGRESSION_P_VALUE_MAX
        )));
        if let Some(note) = &diff.note {
            out.push(Block::Paragraph(format!("Note: {note}")));
        }
        let row = |name: &str, c: &Change| {
            vec![
                name.to_string(),
                measured(&c.baseline),
                measured(&c.current),
                significant(c.p_value, 2),
                if c.regression { "REGRESSION" } else { "ok" }.to_string(),
            ]
        };
        let mut rows = vec![row("all steps", &diff.total)];
        rows.extend(diff.by_class.iter().map(|c| row(&format!("class {}", c.name), &c.change)));
        rows.extend(diff.actions.iter().map(|c| row(&c.name, &c.change)));
        out.push(Block::Table {
            header: ["Figure", "Baseline", "Now", "p-value", "Verdict"].map(String::from).to_vec(),
            rows,
        });
        if !diff.invariants_newly_broken.is_empty() {
            out.push(Block::Paragraph(format!(
                "REGRESSION: invariants broken now that held in the baseline: {}",
                diff.invariants_newly_broken.join(", ")
            )));
        }
    }

    out.push(Block::Heading("Runs".to_string()));
    let failing: Vec<&RunSummary> = report.runs.iter().filter(|r| !r.all_hold).collect();
    let listed: Vec<&RunSummary> =
        if report.runs.len() <= RUNS_LISTED_MAX { report.runs.iter().collect() } else { failing.clone() };
    out.push(Block::Paragraph(format!(
        "{}, {} with a broken invariant{}.",
        results_count(report.runs.len()),
        failing.len(),
        if listed.len() < report.runs.len() { " (only those are listed)" } else { "" }
    )));
    out.push(Block::Table {
        header: ["Scenario", "Seed", "Policy", "Steps", "Duplicates", "Invariants", "Reproduce with"]
            .map(String::from)
            .to_vec(),
        rows: listed
            .iter()
            .map(|r| {
                // A merge of several runs (a sweep's bound, a report.json given as input) has no one command;
                // its seed is only the first run's.
                let several = r.repro == sim::results::MIXED;
                vec![
                    r.scenario.clone(),
                    if several { sim::results::MIXED.to_string() } else { r.seed.to_string() },
                    r.policy.clone(),
                    thousands(r.steps),
                    thousands(r.duplicates),
                    if r.all_hold { "held" } else { "BROKEN" }.to_string(),
                    if several { "(several runs: see their own results)".to_string() } else { r.repro.clone() },
                ]
            })
            .collect(),
    });
    out
}

const TITLE: &str = "Flow duplicate-rate report";

/// Escapes text for a GitHub Markdown table cell or paragraph (pipes, markup characters, line breaks).
fn markdown_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' | '\\' | '*' | '_' | '`' | '[' | ']' | '#' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// The report for GitHub.
pub fn render_markdown(report: &Report) -> String {
    let mut md = format!("# {TITLE}\n\n");
    for block in blocks(report) {
        match block {
            Block::Heading(text) => {
                let _ = writeln!(md, "## {}\n", markdown_text(&text));
            }
            Block::Paragraph(text) => {
                let _ = writeln!(md, "{}\n", markdown_text(&text));
            }
            Block::List(items) => {
                for item in items {
                    let _ = writeln!(md, "- {}", markdown_text(&item));
                }
                md.push('\n');
            }
            Block::Table { header, rows } => {
                let line = |cells: &[String]| {
                    format!("| {} |\n", cells.iter().map(|c| markdown_text(c)).collect::<Vec<_>>().join(" | "))
                };
                md.push_str(&line(&header));
                let _ = writeln!(md, "|{}", "---|".repeat(header.len()));
                for row in &rows {
                    md.push_str(&line(row));
                }
                md.push('\n');
            }
            Block::Chart(_) => {}
        }
    }
    md
}

/// The report as one self-contained HTML page with inline SVG charts.
pub fn render_html(report: &Report) -> String {
    let mut html = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{TITLE}</title>\n<style>\n\
         body {{ font-family: sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}\n\
         table {{ border-collapse: collapse; margin: 1em 0; }}\n\
         th, td {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}\n\
         th {{ background: #f3f3f3; }}\n\
         figure {{ margin: 1em 0; }}\n\
         </style>\n</head>\n<body>\n<h1>{TITLE}</h1>\n"
    );
    for block in blocks(report) {
        match block {
            Block::Heading(text) => {
                let _ = writeln!(html, "<h2>{}</h2>", escape(&text));
            }
            Block::Paragraph(text) => {
                let _ = writeln!(html, "<p>{}</p>", escape(&text));
            }
            Block::List(items) => {
                html.push_str("<ul>\n");
                for item in items {
                    let _ = writeln!(html, "<li>{}</li>", escape(&item));
                }
                html.push_str("</ul>\n");
            }
            Block::Table { header, rows } => {
                html.push_str("<table>\n<thead><tr>");
                for h in &header {
                    let _ = write!(html, "<th>{}</th>", escape(h));
                }
                html.push_str("</tr></thead>\n<tbody>\n");
                for row in &rows {
                    html.push_str("<tr>");
                    for cell in row {
                        let _ = write!(html, "<td>{}</td>", escape(cell));
                    }
                    html.push_str("</tr>\n");
                }
                html.push_str("</tbody>\n</table>\n");
            }
            Block::Chart(chart) => {
                let _ = writeln!(html, "<figure>{}</figure>", chart.render());
            }
        }
    }
    html.push_str("</body>\n</html>\n");
    html
}

/// The report's JSON (`report.json`).
pub fn render_json(report: &Report) -> String {
    // Every field serialises (no maps with non-string keys, no non-finite floats: rates lie in 0..=1).
    serde_json::to_string_pretty(report).expect("a Report serialises to JSON")
}

/// Writes `report.md`, `report.html` and `report.json` for `results` (against `baseline`) into `out_dir`, creating
/// it if needed.
pub fn write_report(results: &[Results], baseline: Option<&Results>, out_dir: &Path) -> Result<(), Error> {
    write_built(&build_report(results, baseline)?, out_dir)
}

/// Writes the three files of a report already built ([`write_report`]).
pub fn write_built(report: &Report, out_dir: &Path) -> Result<(), Error> {
    crate::files::make_dir(out_dir).map_err(|source| Error::Write { path: out_dir.to_path_buf(), source })?;
    let files = [
        (out_dir.join("report.md"), render_markdown(report)),
        (out_dir.join("report.html"), render_html(report)),
        (out_dir.join("report.json"), render_json(report) + "\n"),
    ];
    // All three or none: a failure leaves the directory's earlier report whole.
    crate::files::write_all(files.iter().map(|(path, text)| (path.as_path(), text.as_bytes())))
        .map_err(|e| Error::Write { path: e.path, source: e.source })
}

/// Reads a results JSON file (`flowsim run --json`), or a `report.json`, whose first policy's merged results it
/// returns (so a previous release's report can serve as `--baseline`; [`parse_all_results`] gives every policy's).
pub fn load_results(path: impl AsRef<Path>) -> Result<Results, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    parse_results(&text, path)
}

/// Refuses results whose counts contradict each other (a hand-edited or corrupted file): the report would print
/// nonsense from them, a share above 100 % or a count that wrapped around.
pub fn check_counts(r: &Results) -> Result<(), String> {
    for (name, count) in [
        ("runs_with_visible_retry", r.runs_with_visible_retry),
        ("paused_runs", r.paused_runs),
        ("failed_runs", r.failed_runs),
    ] {
        if count > r.runs {
            return Err(format!("{name} = {count} is more than runs = {}", r.runs));
        }
    }
    // A run ends paused or failed, not both: their sum is at most the runs.
    if r.paused_runs.saturating_add(r.failed_runs) > r.runs {
        return Err(format!(
            "paused_runs = {} and failed_runs = {} add up to more than runs = {} (a run ends paused or failed, not both)",
            r.paused_runs, r.failed_runs, r.runs
        ));
    }
    let action_steps: u64 = r.actions.values().map(|a| a.steps).fold(0, u64::saturating_add);
    if action_steps != r.steps {
        return Err(format!("the actions' steps add up to {action_steps}, not to steps = {}", r.steps));
    }
    let action_duplicates: u64 = r.actions.values().map(|a| a.duplicates).fold(0, u64::saturating_add);
    if action_duplicates != r.duplicates.total {
        return Err(format!(
            "the actions' duplicates add up to {action_duplicates}, not to duplicates.total = {}",
            r.duplicates.total
        ));
    }
    use sim::results::{LEDGERS, MIXED};
    if r.runs == 0 && r.steps > 0 {
        return Err(format!("steps = {} with runs = 0: every step belongs to a run", r.steps));
    }
    if !(0.0..=1.0).contains(&r.auto_retry_coverage) {
        return Err(format!("auto_retry_coverage = {} is not a share between 0 and 1", r.auto_retry_coverage));
    }
    const CLASSES: [&str; 4] = ["keyed", "lookup-before-create", "at-most-once", "canary"];
    let merged = r.merged_runs > 1;
    for (name, a) in &r.actions {
        let known = CLASSES.contains(&a.class.as_str()) || (merged && a.class == MIXED);
        if !known {
            return Err(format!(
                "action {name:?} has the class {:?}, not one of {} (or {MIXED} in a merge)",
                a.class,
                CLASSES.join(", ")
            ));
        }
        if a.duplicates > a.effects {
            return Err(format!(
                "action {name:?} has duplicates = {}, more than its effects = {} (a duplicate is an effect)",
                a.duplicates, a.effects
            ));
        }
        if a.residual_duplicates > a.duplicates {
            return Err(format!(
                "action {name:?} has residual_duplicates = {}, more than its duplicates = {}",
                a.residual_duplicates, a.duplicates
            ));
        }
    }
    let l = &r.latency;
    let percentiles = [l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms];
    if percentiles.windows(2).any(|w| w[0] > w[1]) {
        return Err(format!(
            "latency percentiles p50 {} p90 {} p99 {} p99.9 {} max {} ms are not in order",
            l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
        ));
    }
    // Every run checks every invariant (I9 may be marked not checked); a merge keeps the rule that one holds exactly
    // when it has no violation.
    let ids: Vec<&str> = r.invariants.keys().map(String::as_str).collect();
    if let Some(missing) = sim::checker::INVARIANTS.iter().find(|id| !ids.contains(id)) {
        return Err(format!("invariant {missing} is missing: every run reports I1 to I10"));
    }
    if let Some(unknown) = ids.iter().find(|id| !sim::checker::INVARIANTS.contains(id)) {
        return Err(format!("invariant {unknown} is not one of I1 to I10"));
    }
    for (id, i) in &r.invariants {
        if i.holds != (i.violations == 0) {
            return Err(format!(
                "invariant {id} has holds = {} with {} violations: it holds exactly when it has none",
                i.holds, i.violations
            ));
        }
        if let Some(n) = i.checked_runs
            && (n == 0 || n > r.merged_runs.max(1) || !i.checked)
        {
            return Err(format!(
                "invariant {id} has checked_runs = {n} (checked = {}) in a merge of {} runs",
                i.checked,
                r.merged_runs.max(1)
            ));
        }
    }
    if !["rules", "naive", MIXED].contains(&r.policy.as_str()) {
        return Err(format!("policy = {:?} is not rules, naive or {MIXED} (a merge of both)", r.policy));
    }
    if !LEDGERS.contains(&r.ledger.as_str()) && r.ledger != MIXED {
        return Err(format!("ledger = {:?} is not memory, sqlite or {MIXED} (a merge of both)", r.ledger));
    }
    if let Some(ledgers) = &r.trace_ledgers {
        let named: Vec<&str> = ledgers.split(',').collect();
        let (l, h) = (named.len(), r.trace_hashes().count());
        if l != h {
            return Err(format!("trace_ledgers names {l} ledgers for {h} trace hashes"));
        }
        if let Some(bad) = named.iter().find(|l| !LEDGERS.contains(l)) {
            return Err(format!("trace_ledgers names the ledger {bad:?}, not memory or sqlite"));
        }
        // Written only in a merge of both ledgers' runs, which names each.
        if r.ledger != MIXED || !LEDGERS.iter().all(|l| named.contains(l)) {
            return Err(format!(
                "trace_ledgers = {ledgers:?} with ledger = {:?}: only a merge of both ledgers' runs names them",
                r.ledger
            ));
        }
    }
    Ok(())
}

/// [`load_results`] on text already read; `path` names the source in errors.
pub fn parse_results(text: &str, path: &Path) -> Result<Results, Error> {
    Ok(parse_all_results(text, path)?.swap_remove(0))
}

/// The results a file holds, never none: a results file's one, or each policy section's merged results of a
/// `report.json`, in the report's order (the `rules` policy first). `path` names the source in errors.
pub fn parse_all_results(text: &str, path: &Path) -> Result<Vec<Results>, Error> {
    Ok(parse_all_inputs(text, path)?.into_iter().map(|input| input.results).collect())
}

/// [`parse_all_results`], with what a `report.json` lists beside its sections' results (see [`Input`]).
pub fn parse_all_inputs(text: &str, path: &Path) -> Result<Vec<Input>, Error> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| parse_error(path, e))?;
    // Typed from the text, not from `value`, which keeps the last of a member given twice: the text's parse refuses it.
    inputs(is_report(&value), Source::Text(text), path)
}

/// [`parse_all_inputs`] on the `value` already parsed from `text`, read from `value` rather than parsed again (`text`
/// only places an error, as [`parse_all_inputs`] would). `value` keeps the last of a member given twice, which
/// [`parse_all_inputs`] refuses: give it only text already held to have none (`flowsim report` checks it strictly).
pub fn parse_all_inputs_from(value: serde_json::Value, text: &str, path: &Path) -> Result<Vec<Input>, Error> {
    inputs(is_report(&value), Source::Value(value, text), path)
}

/// A `serde_json` error of the file at `path`.
fn parse_error(path: &Path, e: serde_json::Error) -> Error {
    Error::Parse { path: path.to_path_buf(), line: e.line(), column: e.column(), message: e.to_string() }
}

/// Whether a file's JSON is a report.json, known by its format or its sections: one that lost `report_format` is
/// named as a report.
fn is_report(value: &serde_json::Value) -> bool {
    value.get("report_format").is_some() || value.get("policies").is_some()
}

/// What a file's typed contents are read from, once its text has parsed as JSON.
enum Source<'a> {
    /// The text, parsed again, which refuses a member given twice.
    Text(&'a str),
    /// The `Value` parsed from the text; the text is parsed again only to place an error.
    Value(serde_json::Value, &'a str),
}

impl Source<'_> {
    fn read<T: serde::de::DeserializeOwned>(self, path: &Path) -> Result<T, Error> {
        match self {
            Source::Text(text) => serde_json::from_str(text).map_err(|e| parse_error(path, e)),
            // A `Value`'s error has no line and column. The text's parse, which reads a document as the `Value` does
            // but for a member given twice, fails alike and gives them.
            Source::Value(value, text) => serde_json::from_value(value)
                .map_err(|e| parse_error(path, serde_json::from_str::<T>(text).err().unwrap_or(e))),
        }
    }
}

/// The inputs of a file: a report.json's sections (`report`), else its one results.
fn inputs(report: bool, source: Source<'_>, path: &Path) -> Result<Vec<Input>, Error> {
    if report {
        let report: Report = source.read(path)?;
        let refuse = |message: String| Error::Parse { path: path.to_path_buf(), line: 0, column: 0, message };
        if report.report_format != REPORT_FORMAT {
            return Err(refuse(format!(
                "report format {:?}, this build reads {REPORT_FORMAT:?}",
                report.report_format
            )));
        }
        if report.policies.is_empty() {
            return Err(refuse("the report has no policy sections".to_string()));
        }
        // Every report lists the runs it was made of: without them a report of it would name no scenario.
        if report.runs.is_empty() {
            return Err(refuse(
                "the report lists no runs (`runs` is empty), though it has policy sections".to_string(),
            ));
        }
        // A section holds its policy's results: a contradiction would count them under another policy.
        if let Some(p) = report.policies.iter().find(|p| p.policy != p.results.policy) {
            return Err(refuse(format!(
                "the {:?} policy section holds results of the policy {:?}",
                p.policy, p.results.policy
            )));
        }
        let (mut runs, mut lag_series) = (Some(report.runs), Some(report.lag_series));
        return Ok(report
            .policies
            .into_iter()
            .map(|p| Input {
                results: p.results,
                runs: Some(runs.take().unwrap_or_default()),
                lag_series: lag_series.take(),
            })
            .collect());
    }
    Ok(vec![Input::from(source.read::<Results>(path)?)])
}

/// The policy whose section a report puts first, and diffs against a baseline: `rules` when `results` hold it.
pub fn first_policy<'a>(results: impl IntoIterator<Item = &'a Results>) -> Option<&'a str> {
    results.into_iter().map(|r| policy_rank(&r.policy)).min().map(|(_, policy)| policy)
}
