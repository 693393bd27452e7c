//! `flowsim search`: proptest generates scenario specs (a workflow mix, fault knobs per connector, world faults, a
//! seed and a small step count), runs each as one simulation, and checks that every invariant held
//! ([`crate::run::verdict`] under `--policy rules`, which allows the residual duplicates of lookup connectors whose lag
//! exceeded the bound). A failure is shrunk toward a small, readable case: fewer workflows, fewer faults, lower
//! probabilities, fewer steps.
//!
//! Every knob the swarm would otherwise draw from the seed (`sim::profile::KNOB_RANGES`) is written explicitly into
//! the spec (zero unless the case sets it), so a case means exactly what it says and shrinking a fault away really
//! turns it off. A failure is written as a profile file and printed as the `cargo flowsim run` command that replays
//! it, with the trace hash of its simulation (in the file too), which the replay prints again; the failing proptest
//! seed is saved in `scenarios/proptest-regressions/` (never when `CI` is set).
//!
//! Where the CLI reads and writes ([`Places`]): the workspace is the current directory or its nearest ancestor holding
//! the Flow workspace (`Cargo.toml` and `scenarios/Cargo.toml`), as found at run time, never the build machine's
//! source tree. Inside one, failing cases go to its `target/flowsim-search/` and the regression file is its
//! `scenarios/proptest-regressions/search.txt`, used only if it exists there; outside any workspace (a copied binary
//! run elsewhere), cases go to `flowsim-search/` in the current directory and no regression file is used.
//! `--out DIR` puts the cases in DIR either way.
//!
//! The connector lag knobs (`lag_*`, `incident_*`) keep each connector's realistic values: lag is what a lookup
//! connector is, not an injected fault.

use crate::catalogue::{self, Expect};
use crate::run::Prepared;
use proptest::prelude::*;
use proptest::test_runner::{Config, FailurePersistence, FileFailurePersistence, PersistedSeed};
use sim::profile::{self, ProfileSpec};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Fewest steps of a generated case: the floor shrinking reduces the step count toward.
pub const STEPS_MIN: u64 = 200;
/// Most steps of a generated case (small: a search runs many cases, each a whole simulation).
pub const STEPS_MAX: u64 = 2_000;
/// Most fault knobs set on one connector in one case.
pub const FAULTS_PER_CONNECTOR_MAX: usize = 3;
/// Most world faults in one case.
pub const WORLD_FAULTS_MAX: usize = 3;
/// Levels of a fault: level `l` in `1..=LEVELS_MAX` sets `l / LEVELS_MAX` of the fault's maximum.
pub const LEVELS_MAX: u32 = 10;
/// Most weight of one workflow in the mix (weights shrink toward 1).
pub const WEIGHT_MAX: u32 = 4;
/// Shrinking runs at most this many extra simulations.
pub const SHRINK_ITERS_MAX: u32 = 400;
/// Cases of `flowsim search` by default (about 2 s in the release build); `--cases` or `FLOWSIM_SEARCH_CASES`
/// overrides it.
pub const CASES_DEFAULT: u32 = 200;
/// The regression file, relative to the workspace's root: seeds of failures found, replayed first by every search
/// over the rules policy.
pub const REGRESSIONS_FILE: &str = "scenarios/proptest-regressions/search.txt";
/// The regression file of the source tree this crate was built from: for its tests, which always run in that tree.
/// The CLI never uses it (see [`Places`]).
pub const REGRESSIONS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proptest-regressions/search.txt");
/// Where failing cases are written as profile files inside a workspace, relative to its root.
pub const CASES_DIR_IN_WORKSPACE: &str = "target/flowsim-search";
/// Where failing cases are written outside any workspace, relative to the current directory.
pub const CASES_DIR_ELSEWHERE: &str = "flowsim-search";
/// The environment variable for the number of cases of a search run by tests.
pub const CASES_ENV: &str = "FLOWSIM_SEARCH_CASES";
/// The environment variable for the seed of the search's own random generator.
pub const SEED_ENV: &str = "FLOWSIM_SEARCH_SEED";

/// One fault knob of a connector: its path in `[connectors.NAME]` and its value at the highest level.
#[derive(Debug, Clone, Copy)]
pub struct FaultKnob {
    pub path: &'static str,
    pub max: f64,
    pub integer: bool,
}

const fn pk(path: &'static str, max: f64) -> FaultKnob {
    FaultKnob { path, max, integer: false }
}

/// The connector fault knobs a case may set (every fault the fakes inject except lag, see the module doc).
pub const CONNECTOR_FAULTS: &[FaultKnob] = &[
    pk("reset_before_send_p", 0.02),
    pk("rate_limit_p", 0.02),
    pk("fail_before_commit_p", 0.02),
    pk("timeout_after_commit_p", 0.05),
    pk("error_after_commit_p", 0.02),
    pk("webhooks.duplicate_p", 0.3),
    pk("webhooks.receiver_failure_p", 0.1),
    pk("webhooks.twin_event_p", 0.1),
    FaultKnob { path: "webhooks.reorder_ms_max", max: 30_000.0, integer: true },
];

/// A world knob a fault sets, and its value at a level.
pub type WorldKnobAt = (&'static str, fn(u32) -> f64);

/// A world fault: the knobs it sets at level `l` (of [`LEVELS_MAX`]); a fault absent from a case sets them to 0.
#[derive(Debug, Clone, Copy)]
pub struct WorldFault {
    pub name: &'static str,
    pub knobs: &'static [WorldKnobAt],
}

/// A mean interval: more level, more often; level 1 is the rarest (the simplest case to read).
fn every_s(base_s: f64, level: u32) -> f64 {
    round6(base_s * f64::from(LEVELS_MAX) / f64::from(level))
}

fn share(max: f64, level: u32) -> f64 {
    round6(max * f64::from(level) / f64::from(LEVELS_MAX))
}

/// The world faults a case may switch on. Intervals are seconds of simulated time: a case of a few thousand steps
/// lasts about ten simulated seconds of traffic, then heals.
pub const WORLD_FAULTS: &[WorldFault] = &[
    WorldFault { name: "crashes", knobs: &[("crash_interval_s_mean", |l| every_s(2.0, l))] },
    WorldFault { name: "crash_points", knobs: &[("crash_point_p", |l| share(0.01, l))] },
    WorldFault { name: "cuts", knobs: &[("cut_interval_s_mean", |l| every_s(2.0, l)), ("cut_ms", |_| 5_000.0)] },
    WorldFault { name: "stalls", knobs: &[("stall_interval_s_mean", |l| every_s(3.0, l)), ("stall_ms", |_| 60_000.0)] },
    WorldFault { name: "double_dispatch", knobs: &[("double_dispatch_share", |l| share(0.2, l))] },
    WorldFault { name: "replays", knobs: &[("replay_share", |l| share(0.2, l))] },
];

/// How long a case's person takes before deciding about a paused run: a case's traffic lasts about ten simulated
/// seconds, so their decisions land both during the chaos and in the heal phase.
pub const PERSON_DELAY_MS: u64 = 3_000;

/// A person resolving paused runs, a share `level / LEVELS_MAX` of them ([`Case::persons`]). Set like a world fault,
/// but kept out of [`WORLD_FAULTS`], whose indices the strategy draws: it is generated after every other part.
pub const PERSONS: WorldFault = WorldFault {
    name: "persons",
    knobs: &[("person_share", |l| share(1.0, l)), ("person_delay_ms", |_| PERSON_DELAY_MS as f64)],
};

/// World knobs that are integers in `WorldKnobs` (the others are floats).
const WORLD_INTEGER_KNOBS: &[&str] = &["cut_ms", "stall_ms", "person_delay_ms"];

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// One generated case. Its `Debug` form is what the regression file records next to the seed.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// The simulation seed.
    pub seed: u64,
    pub steps: u64,
    /// Workflow → weight (at least one workflow).
    pub mix: BTreeMap<String, u32>,
    /// Connector → fault knob (index into [`CONNECTOR_FAULTS`]) → level. Absent: 0.
    pub connector_faults: BTreeMap<String, BTreeMap<usize, u32>>,
    /// World fault (index into [`WORLD_FAULTS`]) → level. Absent: off.
    pub world_faults: BTreeMap<usize, u32>,
    /// Whether the canary connector is in the world.
    pub canary: bool,
    /// Workflows generated for this case, named `gen1`, `gen2`, … and added to the mix (they shrink away first).
    pub workflows: Vec<GenWorkflow>,
    /// A person resolves paused runs ([`PERSONS`]: `world.person_share` = level / 10, after [`PERSON_DELAY_MS`]).
    /// Absent: nobody does. Generated after every other part, so the cases of earlier builds (and the regression
    /// file's seeds) keep all the rest.
    pub persons: Option<u32>,
}

/// Most generated workflows in one case.
pub const GEN_WORKFLOWS_MAX: usize = 2;
/// Most steps of a generated workflow.
pub const GEN_STEPS_MAX: usize = 4;
/// Most writes of a generated multi-write step.
pub const GEN_WRITES_MAX: usize = 3;
/// Most extra input fields on one generated write.
pub const GEN_EXTRAS_MAX: usize = 2;

/// The actions a generated step may call, and the inputs each needs (the fakes validate them). The canary's action
/// is left out: the canary search must find the canary's own workflow, not a generated one.
pub const GEN_ACTIONS: &[(&str, &[(&str, &str)])] = &[
    ("payments.create_customer", &[("email", "{{trigger.email}}")]),
    ("payments.charge", &[("amount", "{{trigger.amount}}")]),
    ("contacts.create_contact", &[("email", "{{trigger.email}}")]),
    ("ledgerly.record_entry", &[("amount", "{{trigger.amount}}")]),
    ("payouts.send_payout", &[("amount", "{{trigger.amount}}"), ("destination", "{{trigger.email}}")]),
    ("email.send_email", &[("to", "{{trigger.email}}")]),
];

/// A generated workflow: its weight in the mix and its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct GenWorkflow {
    pub weight: u32,
    pub steps: Vec<GenStep>,
}

/// A generated step. Shrinking prefers the earlier variants: a single write is the simplest.
#[derive(Debug, Clone, PartialEq)]
pub enum GenStep {
    /// One write (an index into [`GEN_ACTIONS`]), with extra inputs; `stamped` adds a volatile `requested_at` field
    /// (sent, left out of the key).
    Action { action: usize, extras: Vec<Extra>, stamped: bool },
    /// Several writes, whose plan is recorded before the first.
    Writes(Vec<(usize, Vec<Extra>)>),
    /// An agent step: the fake planner proposes the writes.
    Agent,
}

/// An extra input field of a generated write: where its value comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Extra {
    Name,
    Ticket,
    Amount,
    /// The `id` in the output of an earlier single-write step (the n-th, modulo how many there are); a literal when
    /// there is none.
    Earlier(u8),
    /// A constant string.
    Literal(u8),
}

impl GenWorkflow {
    /// The workflow in the engine's format, named `name`, its step ids prefixed with it.
    pub fn def(&self, name: &str) -> engine::workflow::WorkflowDef {
        use engine::workflow::{StepDef, WorkflowDef, WriteDef};
        let mut singles: Vec<String> = Vec::new();
        let mut steps = Vec::with_capacity(self.steps.len());
        for (i, step) in self.steps.iter().enumerate() {
            let id = format!("{name}-s{}", i + 1);
            let (action, inputs, writes, planner, volatile) = match step {
                GenStep::Action { action, extras, stamped } => {
                    let mut inputs = gen_inputs(*action, extras, &singles);
                    if *stamped {
                        inputs["requested_at"] = serde_json::json!("{{trigger.requested_at}}");
                    }
                    let volatile = if *stamped { vec!["requested_at".to_owned()] } else { Vec::new() };
                    (Some(GEN_ACTIONS[*action].0.to_owned()), Some(inputs), None, None, volatile)
                }
                GenStep::Writes(writes) => {
                    let writes = writes
                        .iter()
                        .map(|(action, extras)| WriteDef {
                            action: GEN_ACTIONS[*action].0.to_owned(),
                            inputs: Some(gen_inputs(*action, extras, &singles)),
                        })
                        .collect();
                    (None, None, Some(writes), None, Vec::new())
                }
                GenStep::Agent => (
                    None,
                    Some(serde_json::json!({ "email": "{{trigger.email}}", "ticket": "{{trigger.ticket}}" })),
                    None,
                    Some(sim::workflows::PLANNER.to_owned()),
                    Vec::new(),
                ),
            };
            if matches!(step, GenStep::Action { .. }) {
                singles.push(id.clone());
            }
            steps.push(StepDef { id, action, inputs, writes, planner, volatile });
        }
        WorkflowDef { name: name.to_owned(), description: Some("generated by flowsim search".into()), steps }
    }
}

/// The inputs of a generated write: the action's required fields, then the extras as `x1`, `x2`, ….
fn gen_inputs(action: usize, extras: &[Extra], earlier: &[String]) -> serde_json::Value {
    let mut inputs = serde_json::Map::new();
    for (field, template) in GEN_ACTIONS[action].1 {
        inputs.insert((*field).to_owned(), serde_json::json!(template));
    }
    for (j, extra) in extras.iter().enumerate() {
        let value = match extra {
            Extra::Name => "{{trigger.name}}".to_owned(),
            Extra::Ticket => "{{trigger.ticket}}".to_owned(),
            Extra::Amount => "{{trigger.amount}}".to_owned(),
            Extra::Earlier(n) if !earlier.is_empty() => {
                format!("{{{{steps.{}.output.id}}}}", earlier[usize::from(*n) % earlier.len()])
            }
            Extra::Earlier(n) | Extra::Literal(n) => format!("note-{n} for {{{{trigger.email}}}}"),
        };
        inputs.insert(format!("x{}", j + 1), serde_json::json!(value));
    }
    serde_json::Value::Object(inputs)
}

/// The name of the `i`-th (0-based) generated workflow.
pub fn gen_name(i: usize) -> String {
    format!("gen{}", i + 1)
}

impl Case {
    /// How many fault knobs the case sets, connectors and world together.
    pub fn fault_count(&self) -> usize {
        self.connector_faults.values().map(BTreeMap::len).sum::<usize>() + self.world_levels().count()
    }

    /// The world faults the case sets, with their levels, and its person ([`PERSONS`]) last.
    fn world_levels(&self) -> impl Iterator<Item = (&'static WorldFault, u32)> + '_ {
        let faults = self.world_faults.iter().map(|(index, level)| (&WORLD_FAULTS[*index], *level));
        faults.chain(self.persons.map(|level| (&PERSONS, level)))
    }

    /// The connectors of the world the case runs in.
    pub fn connectors(&self) -> Vec<&'static str> {
        connectors(self.canary)
    }

    /// The profile spec (without `steps`): every knob the swarm would draw is set, to 0 unless the case sets it.
    pub fn spec(&self) -> ProfileSpec {
        let mut world = toml::Table::new();
        let levels =
            WORLD_FAULTS.iter().enumerate().map(|(index, fault)| (fault, self.world_faults.get(&index).copied()));
        for (fault, level) in levels.chain([(&PERSONS, self.persons)]) {
            for (knob, value) in fault.knobs {
                let v = level.map_or(0.0, value);
                world.insert((*knob).to_owned(), knob_value(v, WORLD_INTEGER_KNOBS.contains(knob)));
            }
        }
        let mut connectors = toml::Table::new();
        for name in self.connectors() {
            let mut table = toml::Table::new();
            let set = self.connector_faults.get(name);
            for (index, knob) in CONNECTOR_FAULTS.iter().enumerate() {
                let level = set.and_then(|s| s.get(&index)).copied().unwrap_or(0);
                let v = knob.max * f64::from(level) / f64::from(LEVELS_MAX);
                insert_path(&mut table, knob.path, knob_value(v, knob.integer));
            }
            connectors.insert(name.to_owned(), toml::Value::Table(table));
        }
        let mut mix: toml::Table =
            self.mix.iter().map(|(w, weight)| (w.clone(), toml::Value::Float(f64::from(*weight)))).collect();
        let mut spec = ProfileSpec::new();
        if !self.workflows.is_empty() {
            let mut workflows = toml::Table::new();
            for (i, workflow) in self.workflows.iter().enumerate() {
                let name = gen_name(i);
                let def = toml::Value::try_from(workflow.def(&name)).expect("a generated workflow encodes as TOML");
                workflows.insert(name.clone(), def);
                mix.insert(name, toml::Value::Float(f64::from(workflow.weight)));
            }
            spec.insert("workflows".into(), toml::Value::Table(workflows));
        }
        spec.insert("world".into(), toml::Value::Table(world));
        spec.insert("mix".into(), toml::Value::Table(mix));
        spec.insert("connectors".into(), toml::Value::Table(connectors));
        spec
    }

    /// The profile file that replays the case (`steps` included), with a header saying what it sets. It is the case's
    /// identity: two cases with one text are one case (see `Verdicts`).
    pub fn file_text(&self) -> String {
        self.file_text_traced(None)
    }

    /// [`Case::file_text`] with, when given, a comment line holding the trace hash of the case's simulation, which
    /// `flowsim run --scenario FILE --seed S --steps N` of the file prints again (its summary's `trace hash`).
    pub fn file_text_traced(&self, trace_hash: Option<&str>) -> String {
        let mut summary = Vec::new();
        for (connector, set) in &self.connector_faults {
            for (index, level) in set {
                let knob = CONNECTOR_FAULTS[*index];
                summary.push(format!("connectors.{connector}.{} level {level}/{LEVELS_MAX}", knob.path));
            }
        }
        for (fault, level) in self.world_levels() {
            summary.push(format!("world {} level {level}/{LEVELS_MAX}", fault.name));
        }
        if summary.is_empty() {
            summary.push("none".into());
        }
        let generated = if self.workflows.is_empty() {
            String::new()
        } else {
            format!(" Generated workflows: {}.", gen_summary(&self.workflows))
        };
        let traced = match trace_hash {
            Some(hash) => format!(
                "# Trace hash of its simulation: {hash}; `flowsim run --scenario THIS-FILE --seed {} --steps {}` \
                 reproduces it.\n",
                self.seed, self.steps
            ),
            None => String::new(),
        };
        let mut spec = self.spec();
        spec.insert("steps".into(), toml::Value::Integer(i64::try_from(self.steps).expect("steps fit in i64")));
        format!(
            "# A case found by `flowsim search` (seed {}). Faults set: {}.{generated}\n\
             # Every other fault knob is written as 0 so that no knob is drawn from the seed.\n{traced}{}",
            self.seed,
            summary.join(", "),
            toml::to_string(&spec).expect("a spec serialises")
        )
    }

    /// The resolved profile, exactly as `flowsim run --scenario FILE` resolves the file of [`Case::file_text`].
    pub fn prepare(&self) -> Result<Prepared, String> {
        let spec = self.spec();
        let base = catalogue::base_for(&spec);
        let profile = profile::resolve(&base, &spec, self.seed, true).map_err(|e| e.to_string())?;
        Ok(Prepared { name: "search".into(), expect: Expect::ResidualOnly, profile, steps: self.steps })
    }

    /// Writes [`Case::file_text_traced`] under `dir` as `case-HASH.toml`, HASH naming the case (its
    /// [`Case::file_text`]); returns its path.
    pub fn write(&self, dir: &std::path::Path, trace_hash: Option<&str>) -> std::io::Result<std::path::PathBuf> {
        let hash = blake3::hash(self.file_text().as_bytes()).to_hex();
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("case-{}.toml", &hash.as_str()[..12]));
        std::fs::write(&path, self.file_text_traced(trace_hash))?;
        Ok(path)
    }

    /// The command that replays the case from its file, quoted for a POSIX shell.
    pub fn command(&self, path: &std::path::Path) -> String {
        let (path, seed, steps) = (path.to_string_lossy(), self.seed.to_string(), self.steps.to_string());
        let mut words = vec!["cargo", "flowsim", "run", "--scenario", &path, "--seed", &seed, "--steps", &steps];
        words.extend(["--policy", "rules"]);
        crate::shell::join(words)
    }
}

fn knob_value(v: f64, integer: bool) -> toml::Value {
    if integer { toml::Value::Integer(v.round() as i64) } else { toml::Value::Float(round6(v)) }
}

fn insert_path(table: &mut toml::Table, path: &str, value: toml::Value) {
    match path.split_once('.') {
        None => {
            table.insert(path.to_owned(), value);
        }
        Some((head, rest)) => {
            let inner = table.entry(head.to_owned()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let inner = inner.as_table_mut().expect("a knob path goes through tables only");
            insert_path(inner, rest, value);
        }
    }
}

/// The connectors of the world: every connector, the canary only when asked for.
pub fn connectors(canary: bool) -> Vec<&'static str> {
    sim::workflows::CONNECTOR_NAMES.iter().copied().filter(|c| canary || *c != "canary").collect()
}

/// The workflows a mix draws from: every built-in workflow, the canary's only when asked for.
pub fn workflows(canary: bool) -> Vec<&'static str> {
    sim::workflows::WORKFLOWS.iter().map(|(n, _)| *n).filter(|w| canary || *w != "canary").collect()
}

/// The strategy of cases. Shrinking works field by field in this order: the mix (fewer workflows, then weights
/// toward 1), the step count (toward [`STEPS_MIN`]), the connector faults (fewer, then lower), the world faults
/// (fewer, then lower). The simulation seed does not shrink (another seed is another case, not a simpler one).
pub fn cases(canary: bool) -> impl Strategy<Value = Case> {
    let workflows = workflows(canary);
    let connectors = connectors(canary);
    let n_workflows = workflows.len();
    let mix = (
        proptest::sample::subsequence(workflows.clone(), 1..=n_workflows),
        proptest::collection::vec(1..=WEIGHT_MAX, n_workflows),
    )
        .prop_map(move |(chosen, weights)| {
            chosen
                .into_iter()
                .map(|w| {
                    let index = workflows.iter().position(|x| *x == w).expect("a chosen workflow is in the list");
                    (w.to_owned(), weights[index])
                })
                .collect::<BTreeMap<String, u32>>()
        });
    let one_connector =
        proptest::collection::btree_map(0..CONNECTOR_FAULTS.len(), 1..=LEVELS_MAX, 0..=FAULTS_PER_CONNECTOR_MAX);
    let connector_faults = proptest::collection::vec(one_connector, connectors.len()).prop_map(move |sets| {
        connectors
            .iter()
            .zip(sets)
            .filter(|(_, set)| !set.is_empty())
            .map(|(c, set)| ((*c).to_owned(), set))
            .collect::<BTreeMap<String, BTreeMap<usize, u32>>>()
    });
    let world_faults = proptest::collection::btree_map(0..WORLD_FAULTS.len(), 1..=LEVELS_MAX, 0..=WORLD_FAULTS_MAX);
    let seed = any::<u64>().no_shrink().prop_map(|s| s % 1_000_000);
    let persons = proptest::option::of(1..=LEVELS_MAX);
    (gen_workflows(), mix, STEPS_MIN..=STEPS_MAX, connector_faults, world_faults, seed, persons).prop_map(
        move |(workflows, mix, steps, connector_faults, world_faults, seed, persons)| Case {
            seed,
            steps,
            mix,
            connector_faults,
            world_faults,
            canary,
            workflows,
            persons,
        },
    )
}

/// Generated workflows: up to [`GEN_WORKFLOWS_MAX`] of up to [`GEN_STEPS_MAX`] steps, each a single write, a
/// multi-write step or an agent step, with extra inputs from the trigger, earlier outputs or constants. They shrink
/// first (toward none), then toward fewer and simpler steps.
pub fn gen_workflows() -> impl Strategy<Value = Vec<GenWorkflow>> {
    let extra = prop_oneof![
        Just(Extra::Name),
        Just(Extra::Ticket),
        Just(Extra::Amount),
        any::<u8>().prop_map(Extra::Earlier),
        any::<u8>().prop_map(Extra::Literal),
    ];
    let extras = proptest::collection::vec(extra, 0..=GEN_EXTRAS_MAX);
    let write = (0..GEN_ACTIONS.len(), extras.clone());
    let step = prop_oneof![
        4 => (0..GEN_ACTIONS.len(), extras, any::<bool>())
            .prop_map(|(action, extras, stamped)| GenStep::Action { action, extras, stamped }),
        2 => proptest::collection::vec(write, 1..=GEN_WRITES_MAX).prop_map(GenStep::Writes),
        1 => Just(GenStep::Agent),
    ];
    let workflow = (1..=WEIGHT_MAX, proptest::collection::vec(step, 1..=GEN_STEPS_MAX))
        .prop_map(|(weight, steps)| GenWorkflow { weight, steps });
    proptest::collection::vec(workflow, 0..=GEN_WORKFLOWS_MAX)
}

/// The regression file, read always and written only outside CI (`CI` unset): a CI run that finds a failure prints
/// the seed line instead, so a person decides whether to commit it.
#[derive(Debug, Clone, PartialEq)]
pub struct Regressions {
    file: FileFailurePersistence,
    write: bool,
}

impl Regressions {
    pub fn new(path: &'static str) -> Self {
        Regressions { file: FileFailurePersistence::Direct(path), write: std::env::var_os("CI").is_none() }
    }
}

impl FailurePersistence for Regressions {
    fn load_persisted_failures2(&self, source_file: Option<&'static str>) -> Vec<PersistedSeed> {
        self.file.load_persisted_failures2(source_file)
    }

    fn save_persisted_failure2(
        &mut self,
        source_file: Option<&'static str>,
        seed: PersistedSeed,
        shrunken: &dyn fmt::Debug,
    ) {
        if self.write {
            self.file.save_persisted_failure2(source_file, seed, shrunken);
        } else {
            errln!("flowsim search: CI is set, so the regression file is not written; the failing seed is: {seed}");
        }
    }

    fn box_clone(&self) -> Box<dyn FailurePersistence> {
        Box::new(self.clone())
    }

    fn eq(&self, other: &dyn FailurePersistence) -> bool {
        other.as_any().downcast_ref::<Self>().is_some_and(|o| o == self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// What a search was asked to do.
#[derive(Debug, Clone)]
pub struct SearchArgs {
    /// New cases to generate (persisted regressions run first, on top).
    pub cases: u32,
    /// Put the canary connector and workflow into the strategy.
    pub canary: bool,
    /// Seed of proptest's own generator (which cases are generated).
    pub seed: u64,
    /// The regression file to read (and write, outside CI), or none.
    pub regressions: Option<&'static str>,
}

/// The Flow workspace `dir` is in: `dir` or its nearest ancestor holding `Cargo.toml` and `scenarios/Cargo.toml`.
pub fn workspace_of(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| d.join("Cargo.toml").is_file() && d.join("scenarios/Cargo.toml").is_file())
        .map(Path::to_path_buf)
}

/// Where a search run from directory `cwd` reads and writes (the rule is in the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Places {
    /// The workspace `cwd` is in, if any.
    pub workspace: Option<PathBuf>,
    /// The default directory for failing cases.
    pub cases_dir: PathBuf,
    /// The regression file, when the workspace has one.
    pub regressions: Option<PathBuf>,
}

impl Places {
    pub fn from(cwd: &Path) -> Self {
        let workspace = workspace_of(cwd);
        let cases_dir = match &workspace {
            Some(root) => root.join(CASES_DIR_IN_WORKSPACE),
            None => cwd.join(CASES_DIR_ELSEWHERE),
        };
        let regressions = workspace.as_ref().map(|root| root.join(REGRESSIONS_FILE)).filter(|path| path.is_file());
        Places { workspace, cases_dir, regressions }
    }

    /// Why no regression file is used, for the search's first line.
    pub fn no_regressions_because(&self) -> String {
        match &self.workspace {
            Some(root) => format!("not used (no {})", root.join(REGRESSIONS_FILE).display()),
            None => "not used (the current directory is in no Flow workspace)".to_owned(),
        }
    }
}

/// Refuses a cases directory that could not be made or written, before any simulation: a path that is a file, or
/// under one, or an existing directory that cannot be written. A directory that does not exist yet is made only when
/// a failure is written.
pub fn check_cases_dir(dir: &Path) -> Result<(), String> {
    if dir.as_os_str().is_empty() {
        return Err("--out must name a directory".into());
    }
    if dir.exists() {
        if !dir.is_dir() {
            return Err(format!("--out {}: it is not a directory", dir.display()));
        }
        let probe = dir.join(".flowsim-search-probe");
        return crate::output::check_writable(&probe).map_err(|e| format!("--out {}: {e}", dir.display()));
    }
    match dir.ancestors().skip(1).find(|a| a.as_os_str().is_empty() || a.exists()) {
        Some(a) if !a.as_os_str().is_empty() && !a.is_dir() => {
            Err(format!("--out {}: {} is not a directory", dir.display(), a.display()))
        }
        _ => Ok(()),
    }
}

/// A search's proptest configuration.
pub fn config(args: &SearchArgs) -> Config {
    Config {
        cases: args.cases,
        max_shrink_iters: SHRINK_ITERS_MAX,
        // A case is a whole simulation: it never rejects, and time is bounded by the case and shrink budgets.
        max_global_rejects: 0,
        failure_persistence: args
            .regressions
            .map(|path| Box::new(Regressions::new(path)) as Box<dyn FailurePersistence>),
        ..Config::default()
    }
}

/// A deterministic proptest generator for `seed`.
pub fn test_rng(seed: u64) -> proptest::test_runner::TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &bytes)
}

/// The number of cases from [`CASES_ENV`], or `default`. A value that is not a number, or is 0, is an error naming
/// the variable (not `--cases`, which it stands in for).
pub fn cases_from_env(default: u32) -> Result<u32, String> {
    match std::env::var(CASES_ENV) {
        Ok(v) => match v.trim().parse() {
            Ok(0) => Err(format!("{CASES_ENV}={v:?}: the number of cases must be at least 1")),
            Ok(cases) => Ok(cases),
            Err(_) => Err(format!("{CASES_ENV}={v:?} is not a number of cases")),
        },
        Err(_) => Ok(default),
    }
}

/// The search seed from [`SEED_ENV`], or 0.
pub fn seed_from_env() -> Result<u64, String> {
    match std::env::var(SEED_ENV) {
        Ok(v) => v.trim().parse().map_err(|_| format!("{SEED_ENV}={v:?} is not a seed")),
        Err(_) => Ok(0),
    }
}

/// Runs one case as a simulation under `--policy rules` and the memory ledger.
#[cfg(madsim)]
pub fn simulate(case: &Case) -> Result<sim::results::Results, String> {
    let prepared = case.prepare().map_err(|e| format!("the case does not resolve (a bug in the strategy): {e}"))?;
    let args = crate::run::RunArgs::quiet("search", case.seed, Some(case.steps));
    Ok(crate::run::execute(&args, &prepared, false).0)
}

/// The property: every invariant held (residual duplicates of lookups past their lag bound allowed). The reason
/// when not.
#[cfg(madsim)]
pub fn check(case: &Case) -> Result<(), String> {
    let results = simulate(case)?;
    crate::run::verdict(&results, Expect::ResidualOnly, engine::executor::Policy::Rules)
}

/// How a search ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every case held.
    Held { cases: u32, simulations: u64, steps: u64, repeats: u64 },
    /// A failure, shrunk: the minimal case, why it failed, the trace hash of its simulation (none when it did not
    /// resolve, so never ran), how many simulations (and steps) the search ran in all, and how many cases it met
    /// again and answered from the first simulation of each.
    Failed { case: Case, reason: String, trace_hash: Option<String>, simulations: u64, steps: u64, repeats: u64 },
    /// proptest gave up (it should not: cases are never rejected).
    Aborted(String),
}

/// A case's verdict and its simulation's trace hash, by the text of its file: a case is its file ([`Case::file_text`]
/// holds every knob, the seed and the steps), and a simulation is deterministic, so a case met again (proptest's
/// shrinking tries a value it cannot make simpler more than once, and `minimise` may meet a case proptest tried) has
/// the verdict of its first simulation, and is not simulated again.
#[cfg(madsim)]
#[derive(Default)]
struct Verdicts {
    /// Case text → its verdict and its simulation's trace hash (none when the case did not resolve).
    seen: BTreeMap<String, (Result<(), String>, Option<String>)>,
    simulations: u64,
    steps: u64,
    repeats: u64,
}

#[cfg(madsim)]
impl Verdicts {
    /// The case's verdict, and whether it was met before.
    fn judge(&mut self, case: &Case) -> (Result<(), String>, bool) {
        let text = case.file_text();
        if let Some((verdict, _)) = self.seen.get(&text) {
            self.repeats += 1;
            return (verdict.clone(), true);
        }
        self.simulations += 1;
        let (verdict, trace_hash) = match simulate(case) {
            Ok(results) => {
                self.steps += results.steps;
                let verdict = crate::run::verdict(&results, Expect::ResidualOnly, engine::executor::Policy::Rules);
                (verdict, Some(results.trace_hash))
            }
            Err(e) => (Err(e), None),
        };
        self.seen.insert(text, (verdict.clone(), trace_hash));
        (verdict, false)
    }

    /// The trace hash of a case judged before (none when it was not, or did not resolve).
    fn trace_hash(&self, case: &Case) -> Option<String> {
        self.seen.get(&case.file_text()).and_then(|(_, hash)| hash.clone())
    }
}

/// What a search tells its caller of each case proptest tries: the case, its result, and whether it was met before
/// (and so not simulated again).
pub type OnCase<'a> = dyn Fn(&Case, &Result<(), String>, bool) + 'a;

/// Runs a search. Every simulation is counted; `on_case` sees each case proptest tries.
#[cfg(madsim)]
pub fn search(args: &SearchArgs, on_case: &OnCase<'_>) -> Outcome {
    use proptest::test_runner::{TestCaseError, TestError, TestRunner};
    let mut runner = TestRunner::new_with_rng(config(args), test_rng(args.seed));
    let verdicts = std::cell::RefCell::new(Verdicts::default());
    let result = runner.run(&cases(args.canary), |case| {
        let (result, repeat) = verdicts.borrow_mut().judge(&case);
        on_case(&case, &result, repeat);
        result.map_err(TestCaseError::fail)
    });
    let mut verdicts = verdicts.into_inner();
    match result {
        Ok(()) => Outcome::Held {
            cases: args.cases,
            simulations: verdicts.simulations,
            steps: verdicts.steps,
            repeats: verdicts.repeats,
        },
        Err(TestError::Fail(reason, case)) => {
            // proptest shrinks each part once, in order; a part it kept may have become unneeded after a later part
            // shrank. Finish with removals until none keeps the failure.
            let mut reason = reason.message().to_owned();
            let case = minimise(case, SHRINK_ITERS_MAX, |c| match verdicts.judge(c).0 {
                Err(r) => {
                    reason = r;
                    true
                }
                Ok(()) => false,
            });
            // The case was judged (proptest's last failure, or a smaller case that failed too): its hash is kept.
            let trace_hash = verdicts.trace_hash(&case);
            let Verdicts { simulations, steps, repeats, .. } = verdicts;
            Outcome::Failed { case, reason, trace_hash, simulations, steps, repeats }
        }
        Err(TestError::Abort(reason)) => Outcome::Aborted(reason.message().to_owned()),
    }
}

/// The cases one removal smaller than `case`: without one generated workflow, one step of one, one workflow of the
/// mix (at least one workflow stays), one connector fault, one world fault; and each fault at level 1.
pub fn one_smaller(case: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for i in 0..case.workflows.len() {
        let mut c = case.clone();
        c.workflows.remove(i);
        out.push(c);
        for s in 0..case.workflows[i].steps.len() {
            if case.workflows[i].steps.len() > 1 {
                let mut c = case.clone();
                c.workflows[i].steps.remove(s);
                out.push(c);
            }
        }
    }
    if case.mix.len() > 1 {
        for workflow in case.mix.keys() {
            let mut c = case.clone();
            c.mix.remove(workflow);
            out.push(c);
        }
    }
    for (connector, set) in &case.connector_faults {
        for (index, level) in set {
            let mut c = case.clone();
            let faults = c.connector_faults.get_mut(connector).expect("iterating its keys");
            faults.remove(index);
            if faults.is_empty() {
                c.connector_faults.remove(connector);
            }
            out.push(c);
            if *level > 1 {
                let mut c = case.clone();
                c.connector_faults.get_mut(connector).expect("iterating its keys").insert(*index, 1);
                out.push(c);
            }
        }
    }
    for (index, level) in &case.world_faults {
        let mut c = case.clone();
        c.world_faults.remove(index);
        out.push(c);
        if *level > 1 {
            let mut c = case.clone();
            c.world_faults.insert(*index, 1);
            out.push(c);
        }
    }
    if let Some(level) = case.persons {
        out.push(Case { persons: None, ..case.clone() });
        if level > 1 {
            out.push(Case { persons: Some(1), ..case.clone() });
        }
    }
    out
}

/// Greedy removal after proptest's shrinking: take the first one-smaller case that still fails, repeat until none
/// does (the case is then 1-minimal for removals) or `budget` checks were spent.
pub fn minimise(case: Case, budget: u32, mut fails: impl FnMut(&Case) -> bool) -> Case {
    let mut case = case;
    let mut spent = 0;
    'smaller: loop {
        for candidate in one_smaller(&case) {
            if spent >= budget {
                break 'smaller;
            }
            spent += 1;
            if fails(&candidate) {
                case = candidate;
                continue 'smaller;
            }
        }
        break;
    }
    case
}

/// Writes a failing case's file under `dir` and returns the lines to print: what failed, the file, the command, and
/// the trace hash of the case's simulation (`trace_hash`, which the file carries too), which the command reproduces.
pub fn report_failure(case: &Case, reason: &str, trace_hash: Option<&str>, dir: &Path) -> String {
    let traced =
        trace_hash.map_or_else(String::new, |hash| format!("  trace hash {hash}; the command above reproduces it\n"));
    match case.write(dir, trace_hash) {
        Ok(path) => {
            let path = path.canonicalize().unwrap_or(path);
            format!(
                "flowsim search: FAILED: {reason}\n  shrunk case: {}\n  written to {}\nreproduce with: {}\n{traced}",
                one_line(case),
                path.display(),
                case.command(&path)
            )
        }
        Err(e) => format!(
            "flowsim search: FAILED: {reason}\n  shrunk case: {}\n  (cannot write it under {}: {e})\n{}",
            one_line(case),
            dir.display(),
            case.file_text_traced(trace_hash)
        ),
    }
}

/// A case on one line, for progress output.
pub fn one_line(case: &Case) -> String {
    let mix: Vec<String> = case.mix.iter().map(|(w, n)| format!("{w}×{n}")).collect();
    let mut faults = Vec::new();
    for (connector, set) in &case.connector_faults {
        for (index, level) in set {
            faults.push(format!("{connector}.{}@{level}", CONNECTOR_FAULTS[*index].path));
        }
    }
    for (fault, level) in case.world_levels() {
        faults.push(format!("{}@{level}", fault.name));
    }
    let mut line =
        format!("seed {} steps {} mix [{}] faults [{}]", case.seed, case.steps, mix.join(" "), faults.join(" "));
    if !case.workflows.is_empty() {
        line.push_str(&format!(" workflows [{}]", gen_summary(&case.workflows)));
    }
    line
}

/// `gen1×2: charge, plan(contact+email), agent`: each generated workflow's weight and steps, short.
pub fn gen_summary(workflows: &[GenWorkflow]) -> String {
    let short = |action: usize| GEN_ACTIONS[action].0.split_once('.').map_or("?", |(_, a)| a).to_owned();
    workflows
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let steps: Vec<String> = w
                .steps
                .iter()
                .map(|s| match s {
                    GenStep::Action { action, .. } => short(*action),
                    GenStep::Writes(writes) => {
                        let names: Vec<String> = writes.iter().map(|(a, _)| short(*a)).collect();
                        format!("plan({})", names.join("+"))
                    }
                    GenStep::Agent => "agent".to_owned(),
                })
                .collect();
            format!("{}×{}: {}", gen_name(i), w.weight, steps.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `flowsim search`: exit 0 when every case held, 1 on a failure (shrunk, written, printed), 2 on bad input.
/// Failing cases go to `out`, else to the default of [`Places`] for the current directory.
pub fn main(cases: Option<u32>, canary: bool, seed: Option<u64>, out: Option<PathBuf>) -> i32 {
    // The variable stands in for `--cases` when that is not given; an error names whichever set the value.
    let cases = match cases {
        Some(0) => Err("--cases must be at least 1".to_owned()),
        Some(cases) => Ok(cases),
        None => cases_from_env(CASES_DEFAULT),
    };
    let cases = match cases {
        Ok(c) => c,
        Err(e) => {
            errln!("flowsim search: {e}");
            return 2;
        }
    };
    let seed = match seed.map_or_else(seed_from_env, Ok) {
        Ok(s) => s,
        Err(e) => {
            errln!("flowsim search: {e}");
            return 2;
        }
    };
    let cwd = match std::env::current_dir() {
        Ok(cwd) => cwd,
        Err(e) => {
            errln!("flowsim search: cannot read the current directory: {e}");
            return 2;
        }
    };
    let places = Places::from(&cwd);
    let out = out.unwrap_or_else(|| places.cases_dir.clone());
    if let Err(e) = check_cases_dir(&out) {
        errln!("flowsim search: {e}");
        return 2;
    }
    // The canary's failure is expected: it is never saved among the rules policy's regressions.
    let (regressions, shown) = match (&places.regressions, canary) {
        (_, true) => (None, "not used (a canary search)".to_owned()),
        (None, false) => (None, places.no_regressions_because()),
        (Some(path), false) => match path.to_str() {
            // proptest names its file by a `&'static str`: one per process.
            Some(text) => (Some(&*Box::leak(text.to_owned().into_boxed_str())), text.to_owned()),
            None => (None, format!("not used ({} is not a UTF-8 path)", path.display())),
        },
    };
    let args = SearchArgs { cases, canary, seed, regressions };
    run_search(&args, &shown, &out)
}

#[cfg(not(madsim))]
fn run_search(_args: &SearchArgs, _regressions: &str, _out: &Path) -> i32 {
    errln!(
        "flowsim: this binary was built without `--cfg madsim`, so it cannot simulate.\n\
         Run it through the cargo alias: `cargo flowsim search ...` (and check that RUSTFLAGS is not set)."
    );
    2
}

#[cfg(madsim)]
fn run_search(args: &SearchArgs, regressions: &str, out: &Path) -> i32 {
    outln!(
        "flowsim search: {} cases, search seed {}, canary {}, steps {STEPS_MIN}..={STEPS_MAX}, \
         regressions {regressions}, failing cases to {}",
        args.cases,
        args.seed,
        args.canary,
        out.display()
    );
    let count = std::sync::atomic::AtomicU64::new(0);
    let outcome = search(args, &|case, result, repeat| {
        let n = count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let mark = if result.is_ok() { "ok" } else { "FAIL" };
        let again = if repeat { " (met before: not simulated again)" } else { "" };
        outln!("  {n:>4} {mark:<4} {}{again}", one_line(case));
    });
    match outcome {
        Outcome::Held { cases, simulations, steps, repeats } => {
            let ran = format!(" ({simulations} simulations, {steps} steps{})", repeats_note(repeats));
            if args.canary {
                // The canary has a known duplicate bug: a canary search that finds nothing cannot see it, as `flowsim
                // check` fails a canary that passes.
                outln!("flowsim search: FAILED: {}", canary_held(cases, &ran));
                return 1;
            }
            outln!("flowsim search: every invariant held in {}{ran}", cases_text(cases));
            0
        }
        Outcome::Failed { case, reason, trace_hash, simulations, steps, repeats } => {
            outln!("flowsim search: shrunk; {simulations} simulations ({steps} steps) in all{}", repeats_note(repeats));
            out!("{}", report_failure(&case, &reason, trace_hash.as_deref(), out));
            1
        }
        Outcome::Aborted(reason) => {
            outln!("flowsim search: proptest gave up: {reason}");
            1
        }
    }
}

/// Why a canary search in which every case held failed (`ran` says what it ran, after the cases): the canary is a
/// connector with a known duplicate bug, so a search that finds nothing is blind to it.
pub fn canary_held(cases: u32, ran: &str) -> String {
    format!(
        "the canary search found no failure in {}{ran}: the search is blind to the canary's duplicates; give more \
         --cases",
        cases_text(cases)
    )
}

/// `1 case`, `2 cases`.
fn cases_text(cases: u32) -> String {
    if cases == 1 { "1 case".to_owned() } else { format!("{cases} cases") }
}

/// How many cases the search met again (empty when none): each was answered from its first simulation.
#[cfg(madsim)]
fn repeats_note(repeats: u64) -> String {
    match repeats {
        0 => String::new(),
        1 => "; 1 case met again, not simulated again".to_owned(),
        n => format!("; {n} cases met again, not simulated again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest! {
        #![proptest_config(Config { cases: 64, failure_persistence: None, ..Config::default() })]

        /// Every knob the swarm draws is set by the spec: two simulation seeds resolve a case to one profile, and its
        /// file resolves (through `flowsim run`'s own path) to that profile again.
        #[test]
        fn a_case_draws_nothing_from_the_seed(case in cases(true).boxed().prop_union(cases(false).boxed())) {
            let prepared = case.prepare().map_err(TestCaseError::fail)?;
            let mut other = case.clone();
            other.seed = case.seed + 1;
            prop_assert_eq!(&other.prepare().map_err(TestCaseError::fail)?.profile, &prepared.profile);
            let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
            let path = case.write(dir.path(), Some("0123abcd")).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let from_file = crate::run::prepare(path.to_str().expect("a UTF-8 path"), case.seed + 7, None)
                .map_err(TestCaseError::fail)?;
            prop_assert_eq!(&from_file.profile, &prepared.profile);
            prop_assert_eq!(from_file.steps, case.steps);
            prop_assert!((STEPS_MIN..=STEPS_MAX).contains(&case.steps));
            prop_assert!(!case.mix.is_empty());
            // Generated workflows are in the profile and the mix, under their names.
            for i in 0..case.workflows.len() {
                prop_assert!(prepared.profile.workflows.contains_key(&gen_name(i)));
                prop_assert!(prepared.profile.mix.contains_key(&gen_name(i)));
            }
            prop_assert_eq!(case.canary, case.connectors().contains(&"canary"));
        }
    }

    /// (case, knob path, value in the resolved profile) for hand-written cases: levels scale as documented, and what a
    /// case does not set is 0.
    #[test]
    fn levels_map_to_knob_values() {
        let mut case = Case {
            seed: 1,
            steps: STEPS_MIN,
            mix: [("canary".to_owned(), 1)].into_iter().collect(),
            connector_faults: [("canary".to_owned(), [(3, 2)].into_iter().collect())].into_iter().collect(),
            world_faults: [(1, 5)].into_iter().collect(),
            canary: true,
            workflows: Vec::new(),
            persons: None,
        };
        let table: &[(&str, serde_json::Value)] = &[
            ("connectors.canary.timeout_after_commit_p", serde_json::json!(0.01)),
            ("connectors.canary.error_after_commit_p", serde_json::json!(0.0)),
            ("connectors.payments.timeout_after_commit_p", serde_json::json!(0.0)),
            ("connectors.payments.webhooks.reorder_ms_max", serde_json::json!(0)),
            ("world.crash_point_p", serde_json::json!(0.005)),
            ("world.crash_interval_s_mean", serde_json::json!(0.0)),
            ("world.cut_interval_s_mean", serde_json::json!(0.0)),
            ("world.person_share", serde_json::json!(0.0)),
            ("mix.canary", serde_json::json!(1.0)),
        ];
        let knobs = profile::knobs(&case.prepare().expect("resolves").profile);
        for (path, want) in table {
            assert_eq!(knobs.get(*path), Some(want), "{path}");
        }
        assert!(!knobs.contains_key("mix.signup"));
        case.world_faults = [(0, 10)].into_iter().collect();
        let knobs = profile::knobs(&case.prepare().expect("resolves").profile);
        assert_eq!(knobs.get("world.crash_interval_s_mean"), Some(&serde_json::json!(2.0)));
        assert_eq!(case.fault_count(), 2);
        case.persons = Some(3);
        let knobs = profile::knobs(&case.prepare().expect("resolves").profile);
        assert_eq!(knobs.get("world.person_share"), Some(&serde_json::json!(0.3)));
        assert_eq!(knobs.get("world.person_delay_ms"), Some(&serde_json::json!(PERSON_DELAY_MS)));
        assert_eq!(case.fault_count(), 3);
    }

    /// Greedy minimisation removes everything the failure does not need, lowers the levels it keeps to 1, and stops
    /// at its budget.
    #[test]
    fn minimise_removes_what_the_failure_does_not_need() {
        let generated = |steps: usize| GenWorkflow {
            weight: 2,
            steps: (0..steps)
                .map(|a| GenStep::Action { action: a, extras: vec![Extra::Name], stamped: false })
                .collect(),
        };
        let big = Case {
            seed: 9,
            steps: STEPS_MAX,
            mix: [("canary", 3), ("signup", 2), ("payout", 1)].into_iter().map(|(w, n)| (w.to_owned(), n)).collect(),
            connector_faults: [("payments".to_owned(), [(0, 4), (3, 7)].into_iter().collect())].into_iter().collect(),
            world_faults: [(0, 5), (1, 9)].into_iter().collect(),
            canary: true,
            workflows: vec![generated(3), generated(2)],
            persons: Some(4),
        };
        // The failure needs the canary in the mix, the crash points, and a generated step calling payments.charge.
        let fails = |c: &Case| {
            c.mix.contains_key("canary")
                && c.world_faults.contains_key(&1)
                && c.workflows.iter().any(|w| w.steps.iter().any(|s| matches!(s, GenStep::Action { action: 1, .. })))
        };
        let mut checks = 0;
        let small = minimise(big.clone(), 1_000, |c| {
            checks += 1;
            fails(c)
        });
        assert!(fails(&small));
        assert_eq!(small.mix.keys().collect::<Vec<_>>(), ["canary"]);
        assert!(small.connector_faults.is_empty());
        assert_eq!(small.world_faults, [(1, 1)].into_iter().collect());
        assert_eq!(small.persons, None);
        assert_eq!(small.workflows.len(), 1);
        assert_eq!(small.workflows[0].steps.len(), 1);
        for smaller in one_smaller(&small) {
            assert!(!fails(&smaller), "not minimal: {}", one_line(&smaller));
        }
        assert!(checks < 100, "{checks} checks");
        // A budget of one check takes at most one step.
        let one = minimise(big.clone(), 1, fails);
        assert!(one_smaller(&big).contains(&one) || one == big);
    }

    /// The places a search uses come from the directory it runs in, never from the source tree it was built in:
    /// inside a workspace (its root or below) its `target/flowsim-search` and its regression file, if it has one;
    /// elsewhere `flowsim-search` in the current directory and no regression file.
    #[test]
    fn places_follow_the_current_directory() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path().join("flow");
        let below = root.join("scenarios").join("src");
        std::fs::create_dir_all(&below).expect("dirs");
        std::fs::write(root.join("Cargo.toml"), "[workspace]\n").expect("write");
        std::fs::write(root.join("scenarios/Cargo.toml"), "[package]\n").expect("write");
        for cwd in [&root, &below] {
            let places = Places::from(cwd);
            assert_eq!(places.workspace.as_deref(), Some(root.as_path()));
            assert_eq!(places.cases_dir, root.join("target/flowsim-search"));
            assert_eq!(places.regressions, None, "no regression file yet, so none is made");
            assert!(places.no_regressions_because().contains(REGRESSIONS_FILE), "{}", places.no_regressions_because());
        }
        std::fs::create_dir_all(root.join("scenarios/proptest-regressions")).expect("dir");
        std::fs::write(root.join(REGRESSIONS_FILE), "").expect("write");
        assert_eq!(Places::from(&below).regressions, Some(root.join(REGRESSIONS_FILE)));
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("dir");
        let places = Places::from(&elsewhere);
        assert_eq!(places, Places { workspace: None, cases_dir: elsewhere.join("flowsim-search"), regressions: None });
        assert!(places.no_regressions_because().contains("no Flow workspace"));
        // This crate's own tree is a workspace, found from the directory the tests run in.
        let here = Places::from(Path::new(env!("CARGO_MANIFEST_DIR")));
        assert_eq!(
            here.regressions.map(|p| p.canonicalize().expect("exists")),
            Some(Path::new(REGRESSIONS_PATH).canonicalize().expect("the committed file"))
        );
    }

    /// `--out` is checked before any simulation: a file, or a path under one, is refused; a directory that does not
    /// exist yet is fine (and not made until a failure is written).
    #[test]
    fn a_cases_dir_that_cannot_be_one_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").expect("write");
        let e = check_cases_dir(&file).expect_err("a file");
        assert!(e.contains("plain") && e.contains("not a directory"), "{e}");
        let e = check_cases_dir(&file.join("cases")).expect_err("under a file");
        assert!(e.contains("plain is not a directory"), "{e}");
        assert!(check_cases_dir(Path::new("")).is_err());
        let fresh = dir.path().join("new").join("cases");
        check_cases_dir(&fresh).expect("a directory to be made");
        assert!(!fresh.exists() && !dir.path().join("new").exists(), "nothing is made before a failure");
        check_cases_dir(dir.path()).expect("an existing directory");
        assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 1, "the probe is removed");
        check_cases_dir(Path::new("relative-cases")).expect("a relative directory to be made");
    }

    /// A failure's file goes where it is told, and the printed command names it.
    #[test]
    fn report_failure_writes_into_the_directory_given() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let out = dir.path().join("cases");
        let case = Case {
            seed: 1,
            steps: STEPS_MIN,
            mix: [("signup".to_owned(), 1)].into_iter().collect(),
            connector_faults: BTreeMap::new(),
            world_faults: BTreeMap::new(),
            canary: false,
            workflows: Vec::new(),
            persons: None,
        };
        let text = report_failure(&case, "a reason", Some("f00d"), &out);
        let files: Vec<PathBuf> = std::fs::read_dir(&out).expect("made").map(|e| e.expect("entry").path()).collect();
        assert_eq!(files.len(), 1);
        let shown = files[0].canonicalize().expect("exists");
        assert!(text.contains(&format!("written to {}", shown.display())), "{text}");
        assert!(text.contains("a reason"), "{text}");
        // The trace hash follows the command, and the file carries it in a comment.
        assert!(
            text.ends_with(&format!("{}\n  trace hash f00d; the command above reproduces it\n", case.command(&shown)))
        );
        let file = std::fs::read_to_string(&shown).expect("read");
        assert!(file.lines().any(|l| l.starts_with("# Trace hash of its simulation: f00d;")), "{file}");
        // The file is named by the case, whatever its hash.
        assert_eq!(case.write(dir.path(), None).expect("written").file_name(), shown.file_name());
        assert_eq!(
            std::fs::read_to_string(dir.path().join(shown.file_name().expect("a name"))).expect("read"),
            case.file_text()
        );
    }

    /// A canary search in which every case held says it failed, and why, as `flowsim check` fails a canary that
    /// passes.
    #[test]
    fn a_canary_search_that_finds_nothing_is_blind() {
        assert_eq!(
            canary_held(1, ""),
            "the canary search found no failure in 1 case: the search is blind to the canary's duplicates; give more \
             --cases"
        );
        assert!(canary_held(64, " (70 simulations)").contains("no failure in 64 cases (70 simulations): the search"));
    }

    /// The regression file only writes outside CI; it loads the committed seeds either way.
    #[test]
    fn the_committed_regression_file_loads() {
        let seeds = Regressions::new(REGRESSIONS_PATH).load_persisted_failures2(None);
        assert!(!seeds.is_empty(), "the committed file holds the I8 stall case");
    }
}
