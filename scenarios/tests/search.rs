//! The proptest search: over the rules policy a budgeted search finds no failure; with the canary in the strategy it
//! finds the canary's duplicates and shrinks them to a minimal case. Simulations run only under `--cfg madsim`:
//! `cargo sim-test -p scenarios --test search`. `FLOWSIM_SEARCH_CASES` sets the budget of the rules search
//! (default [`CASES_CI`]), `FLOWSIM_SEARCH_SEED` the seed of its case generator.
#![cfg(madsim)]

use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use scenarios::search::{self, Case, SearchArgs};

/// Cases of the rules search in CI: a madsim debug build runs a case of up to 2,000 steps in about a second.
const CASES_CI: u32 = 24;
/// Cases the canary search may need to find its failure (it stops at the first).
const CANARY_CASES_MAX: u32 = 64;

#[test]
fn rules_search_finds_no_failure() {
    let cases = search::cases_from_env(CASES_CI).expect("FLOWSIM_SEARCH_CASES is a number");
    let seed = search::seed_from_env().expect("FLOWSIM_SEARCH_SEED is a number");
    // The tests run in the source tree: its committed regression file runs first.
    let args = SearchArgs { cases, canary: false, seed, regressions: Some(search::REGRESSIONS_PATH) };
    match search::search(&args, &|_, _, _| {}) {
        search::Outcome::Held { cases: held, simulations, steps, repeats } => {
            assert_eq!(held, cases);
            assert!(steps >= u64::from(cases), "every case ran steps ({steps})");
            let tried = simulations + repeats;
            assert!(tried >= u64::from(cases), "every case ran a simulation or was met before ({tried} for {cases})");
        }
        search::Outcome::Failed { case, reason, trace_hash, .. } => {
            panic!("{}", search::report_failure(&case, &reason, trace_hash.as_deref(), &tempfile_dir()))
        }
        search::Outcome::Aborted(reason) => panic!("proptest gave up: {reason}"),
    }
}

/// The canary search fails on the canary's duplicates only (another failure, found by the rules search, must not
/// take over the shrinking), through `TestRunner` directly so the minimal input can be inspected.
fn canary_search(seed: u64) -> (Case, String) {
    let args = SearchArgs { cases: CANARY_CASES_MAX, canary: true, seed, regressions: None };
    let mut runner = TestRunner::new_with_rng(search::config(&args), search::test_rng(seed));
    let result = runner.run(&search::cases(true), |case| {
        let results = search::simulate(&case).map_err(TestCaseError::fail)?;
        match results.duplicates.by_class.get("canary").copied().unwrap_or(0) {
            0 => Ok(()),
            n => Err(TestCaseError::fail(format!("{n} canary duplicates"))),
        }
    });
    match result {
        Err(TestError::Fail(reason, case)) => {
            let case = search::minimise(case, search::SHRINK_ITERS_MAX, |c| canary_duplicates(c) > 0);
            (case, reason.message().to_owned())
        }
        Ok(()) => panic!("{CANARY_CASES_MAX} cases found no canary duplicate: the search is blind"),
        Err(TestError::Abort(reason)) => panic!("proptest gave up: {reason}"),
    }
}

fn canary_duplicates(case: &Case) -> u64 {
    let results = search::simulate(case).expect("a shrunk variant runs");
    results.duplicates.by_class.get("canary").copied().unwrap_or(0)
}

/// A case met again (proptest's shrinking tries some more than once) has its first simulation's verdict and is not
/// simulated again; every other case is simulated. Checked against the cases `search` reports, by their files' text.
#[test]
fn a_case_met_again_is_not_simulated_again() {
    let args = SearchArgs { cases: CANARY_CASES_MAX, canary: true, seed: 0, regressions: None };
    let tried = std::cell::RefCell::new(Vec::new());
    let outcome = search::search(&args, &|case, result, repeat| {
        tried.borrow_mut().push((case.file_text(), result.clone(), repeat));
    });
    let search::Outcome::Failed { simulations, repeats, .. } = outcome else {
        panic!("the canary search must fail: {outcome:?}")
    };
    let tried = tried.into_inner();
    let mut first = std::collections::BTreeMap::new();
    for (text, result, repeat) in &tried {
        match first.get(text) {
            Some(verdict) => {
                assert!(repeat, "a case met again was simulated again");
                assert_eq!(verdict, result, "a case met again got another verdict");
            }
            None => {
                assert!(!repeat, "a case met for the first time was not simulated");
                first.insert(text.clone(), result.clone());
            }
        }
    }
    let met_again = (tried.len() - first.len()) as u64;
    assert!(met_again > 0, "this search's shrinking meets no case twice: the test shows nothing");
    // `minimise` judges more cases after proptest's shrinking; its repeats and simulations count too.
    assert!(repeats >= met_again, "{repeats} repeats counted, {met_again} seen");
    assert!(simulations >= first.len() as u64, "{simulations} simulations for {} distinct cases", first.len());
}

#[test]
fn canary_search_finds_duplicates_and_shrinks_them() {
    let (case, reason) = canary_search(0);
    let shown = search::one_line(&case);
    assert!(reason.contains("canary duplicates"), "{reason}");
    // The canary's workflow at weight 1, no generated workflow, the fewest steps, few faults.
    assert_eq!(case.mix.get("canary"), Some(&1), "{shown}");
    assert!(case.workflows.is_empty(), "{shown}");
    assert_eq!(case.steps, search::STEPS_MIN, "{shown}");
    assert!(case.fault_count() <= 2, "{shown}");
    // Minimal: without any one of its other workflows or faults the canary shows no duplicate (what is left is needed
    // for the failure, e.g. another workflow's runs that put a random crash on a canary call).
    for workflow in case.mix.keys().filter(|w| *w != "canary") {
        let mut smaller = case.clone();
        smaller.mix.remove(workflow);
        assert_eq!(canary_duplicates(&smaller), 0, "{shown} still fails without {workflow}: not minimal");
    }
    for (connector, set) in &case.connector_faults {
        for index in set.keys() {
            let mut smaller = case.clone();
            smaller.connector_faults.get_mut(connector).expect("present").remove(index);
            assert_eq!(canary_duplicates(&smaller), 0, "{shown} still fails without fault {connector}/{index}");
        }
    }
    for index in case.world_faults.keys() {
        let mut smaller = case.clone();
        smaller.world_faults.remove(index);
        assert_eq!(canary_duplicates(&smaller), 0, "{shown} still fails without world fault {index}");
    }
    // The profile written for the replay says the same: every other connector's fault knobs are 0.
    let prepared = case.prepare().expect("the shrunk case resolves");
    for (name, fault) in &prepared.profile.connectors {
        if name == "canary" {
            continue;
        }
        let ps = [
            fault.reset_before_send_p,
            fault.rate_limit_p,
            fault.fail_before_commit_p,
            fault.timeout_after_commit_p,
            fault.error_after_commit_p,
            fault.webhooks.duplicate_p,
            fault.webhooks.receiver_failure_p,
            fault.webhooks.twin_event_p,
        ];
        assert!(ps.iter().all(|p| *p == 0.0), "{name}: {ps:?} in {shown}");
    }
    // The replay command resolves the file to the profile the search ran (no knob drawn from the seed).
    let dir = tempfile_dir();
    let path = case.write(&dir, None).expect("the case file is written");
    let command = case.command(&path);
    assert!(command.starts_with("cargo flowsim run --scenario "), "{command}");
    let from_file =
        scenarios::run::prepare(path.to_str().expect("a UTF-8 path"), case.seed, None).expect("the file resolves");
    assert_eq!(from_file.profile, prepared.profile);
    assert_eq!(from_file.steps, case.steps);
    // And it fails again.
    let again = search::simulate(&case).expect("the case runs");
    assert!(again.duplicates.by_class.get("canary").copied().unwrap_or(0) > 0);
}

/// A failure prints the trace hash of its shrunk case's simulation after the command, and the case file carries it:
/// the printed file, run the way `flowsim run --scenario FILE --seed S --steps N --policy rules` runs it (its own
/// `prepare` and `execute`), gives that hash again, so a user can check that the repro is the run the search saw.
#[test]
fn a_failure_prints_the_trace_hash_its_command_reproduces() {
    // At search seed 7 the greedy removals after proptest's shrinking change the case: the hash must be the final
    // case's, not that of the failure proptest stopped at.
    let args = SearchArgs { cases: CANARY_CASES_MAX, canary: true, seed: 7, regressions: None };
    // The last failure proptest showed, which is where its shrinking stopped (the removals after it show nothing).
    let last_failure = std::cell::RefCell::new(None);
    let outcome = search::search(&args, &|case, result, _| {
        if result.is_err() {
            *last_failure.borrow_mut() = Some(case.clone());
        }
    });
    let search::Outcome::Failed { case, reason, trace_hash, .. } = outcome else {
        panic!("the canary search must fail: {outcome:?}")
    };
    assert_ne!(last_failure.into_inner().as_ref(), Some(&case), "the removals changed nothing: the test shows less");
    let hash = trace_hash.expect("the shrunk case was simulated");
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a temp dir");
    let printed = search::report_failure(&case, &reason, Some(&hash), dir.path());
    let lines: Vec<&str> = printed.lines().collect();
    let command = lines.iter().find_map(|l| l.strip_prefix("reproduce with: ")).expect("a repro line");
    let after = lines.iter().skip_while(|l| !l.starts_with("reproduce with: ")).nth(1);
    assert_eq!(after, Some(&&*format!("  trace hash {hash}; the command above reproduces it")), "{printed}");
    // The command's words, as a shell splits them (the temp dir's path needs no quoting).
    assert!(!command.contains(['\'', '"', '\\']), "{command}");
    let words: Vec<&str> = command.split_whitespace().collect();
    let value = |flag: &str| words.iter().position(|w| *w == flag).map(|i| words[i + 1]).expect(flag);
    assert_eq!(&words[..3], ["cargo", "flowsim", "run"], "{command}");
    assert_eq!(value("--policy"), "rules");
    let (file, seed, steps) = (value("--scenario"), value("--seed"), value("--steps"));
    let text = std::fs::read_to_string(file).expect("the case file");
    assert!(text.contains(&format!("\n# Trace hash of its simulation: {hash}; ")), "{text}");
    let (seed, steps) = (seed.parse().expect("a seed"), steps.parse().expect("steps"));
    let prepared = scenarios::run::prepare(file, seed, Some(steps)).expect("the file resolves");
    let (results, _) =
        scenarios::run::execute(&scenarios::run::RunArgs::quiet(file, seed, Some(steps)), &prepared, false);
    assert_eq!(results.trace_hash, hash, "the printed command ran another simulation");
    assert!(results.duplicates.by_class.get("canary").copied().unwrap_or(0) > 0, "and it fails again");
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("search-test");
    std::fs::create_dir_all(&dir).expect("the test directory is created");
    dir
}

/// The CLI run outside any workspace (a copied binary) writes into no path of the machine it was built on: no
/// regression file, and failing cases would go to `flowsim-search` in the current directory, or to `--out`.
#[test]
fn the_cli_outside_a_workspace_uses_the_current_directory() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let run = |extra: &[&str]| flowsim_search(dir.path(), &[&["--cases", "1"], extra].concat(), &[]);
    let (code, stdout, stderr) = run(&[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let first = stdout.lines().next().expect("a first line");
    assert!(first.contains("regressions not used (the current directory is in no Flow workspace)"), "{first}");
    let cases = dir.path().join("flowsim-search");
    assert!(first.ends_with(&format!("failing cases to {}", cases.display())), "{first}");
    assert!(!first.contains(env!("CARGO_MANIFEST_DIR")), "{first}");
    assert_eq!(std::fs::read_dir(dir.path()).expect("list").count(), 0, "a search that held wrote nothing");
    let (code, stdout, stderr) = run(&["--out", "mine"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.lines().next().expect("a first line").ends_with("failing cases to mine"), "{stdout}");
    std::fs::write(dir.path().join("plain"), "x").expect("write");
    let (code, stdout, stderr) = run(&["--out", "plain"]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(stderr.contains("--out plain: it is not a directory"), "{stderr}");
    assert!(stdout.is_empty(), "refused before any case: {stdout}");
}

/// The failures the search has found (`docs/search.md`, "Failures found so far"), pinned as cases. The regression
/// file keeps proptest's seeds, but a seed means a case only under the strategy that drew it: a strategy that grew
/// a part since (generated workflows, persons) draws another case from the same seed. These stay the cases they were.
#[test]
fn the_failures_found_so_far_hold_as_pinned_cases() {
    use search::{Extra, GenStep, GenWorkflow};
    let stalls = search::WORLD_FAULTS.iter().position(|f| f.name == "stalls").expect("the stalls fault");
    let contacts = search::GEN_ACTIONS.iter().position(|(a, _)| *a == "contacts.create_contact").expect("contacts");
    let base = Case {
        seed: 0,
        steps: 0,
        mix: [("assist".to_owned(), 1)].into(),
        connector_faults: Default::default(),
        world_faults: Default::default(),
        canary: false,
        workflows: Vec::new(),
        persons: None,
    };
    let cases = [
        // I8 after the heal: a stall aborted with its worker paused left the worker's runs running for ever.
        ("I8, stalls + heal", Case { seed: 68691, steps: 765, world_faults: [(stalls, 10)].into(), ..base.clone() }),
        // I2: a workflow creating one email's contact twice; the second step adopts the first's contact.
        (
            "I2, one contact created twice",
            Case {
                seed: 84920,
                steps: 200,
                workflows: vec![GenWorkflow {
                    weight: 1,
                    steps: vec![
                        GenStep::Action { action: contacts, extras: Vec::<Extra>::new(), stamped: false },
                        GenStep::Writes(vec![(contacts, Vec::new())]),
                    ],
                }],
                ..base.clone()
            },
        ),
    ];
    for (name, case) in cases {
        assert_eq!(search::check(&case), Ok(()), "{name}: {}", search::one_line(&case));
    }
}

/// `flowsim search ARGS` run in `dir` (with no `CI`, and the search's variables only as `env` sets them): its exit
/// code, standard output and standard error.
fn flowsim_search(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flowsim"))
        .arg("search")
        .args(args)
        .current_dir(dir)
        .env_remove("CI")
        .env_remove(search::CASES_ENV)
        .env_remove(search::SEED_ENV)
        .envs(env.iter().copied())
        .output()
        .expect("flowsim runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A canary search must fail: the canary is a connector with a known duplicate bug, so one in which every case held
/// is blind to it and exits 1 saying so (as `flowsim check` fails a canary that passes), never "every invariant held".
/// One case at search seed 0 finds no duplicate.
#[test]
fn a_canary_search_that_finds_nothing_fails() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (code, stdout, stderr) = flowsim_search(dir.path(), &["--canary", "--cases", "1"], &[]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let last = stdout.lines().last().expect("a last line");
    assert!(last.starts_with("flowsim search: FAILED: the canary search found no failure in 1 case ("), "{stdout}");
    assert!(last.ends_with("): the search is blind to the canary's duplicates; give more --cases"), "{stdout}");
    assert!(!stdout.contains("every invariant held"), "{stdout}");
    // Without the canary, a search in which every case held passes.
    let (code, stdout, stderr) = flowsim_search(dir.path(), &["--cases", "1"], &[]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("flowsim search: every invariant held in 1 case ("), "{stdout}");
}

/// A number of cases of 0 is refused, naming where it came from: `--cases`, or `FLOWSIM_SEARCH_CASES` when the flag
/// was not given (a QA report: the variable's 0 was blamed on `--cases`, which had not been typed).
#[test]
fn zero_cases_are_refused_naming_where_the_number_came_from() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (code, stdout, stderr) = flowsim_search(dir.path(), &[], &[(search::CASES_ENV, "0")]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stderr, "flowsim search: FLOWSIM_SEARCH_CASES=\"0\": the number of cases must be at least 1\n");
    assert!(stdout.is_empty(), "{stdout}");
    for env in [&[][..], &[(search::CASES_ENV, "0")], &[(search::CASES_ENV, "5")]] {
        let (code, stdout, stderr) = flowsim_search(dir.path(), &["--cases", "0"], env);
        assert_eq!(code, Some(2), "{stdout}{stderr}");
        assert_eq!(stderr, "flowsim search: --cases must be at least 1\n", "{env:?}");
    }
    let (code, _, stderr) = flowsim_search(dir.path(), &[], &[(search::CASES_ENV, "many")]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("FLOWSIM_SEARCH_CASES=\"many\" is not a number of cases"), "{stderr}");
}
