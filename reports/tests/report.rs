//! Rendering of synthetic results: the guarantees table and the "95 % upper bound" wording in Markdown, inline SVG
//! charts in HTML, a JSON that round-trips, a baseline diff that flags regressions, and clear load errors.

mod common;

use std::path::Path;

use common::{naive, rules};
use reports::report::{Report, parse_results, render_html, render_json, render_markdown};
use reports::{Error, Results, build_report, load_results, write_report};

fn month() -> Vec<Results> {
    vec![rules(1, 500, 3), rules(2, 60_000, 0), naive(3), naive(4)]
}

/// A directory `name` that does not exist yet, inside a temporary directory removed (with it) when the guard drops.
fn out_dir(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let parent = tempfile::Builder::new().prefix("flow-reports-test-").tempdir().expect("a temp dir");
    let dir = parent.path().join(name);
    (parent, dir)
}

#[test]
fn markdown_has_the_guarantees_table_and_upper_bounds() {
    let md = render_markdown(&build_report(&month(), None).unwrap());
    for want in [
        "## Guarantees by connector (rules)",
        "| Action | Class | Safeguards | Steps | Duplicates | Measured rate | 95 % upper bound |",
        "| stripe.create\\_charge | keyed | idempotency key | 2,000,000 | 0 | 0 | 1.5 per million |",
        "| bank.payout | at-most-once | pause on indeterminate outcome | 100,000 | 0 | 0 | 30 per million |",
        "Duplicate side effects: 1 per million (95 % CI 0.21–3 per million)",
        "Duplicate side effects: 15 per million (95 % CI 11–20 per million)",
        "| stripe.create\\_customer | lookup-before-create | lookup by run id in metadata; wait out lag bound | 800,000 | 3 | 3.8 per million (95 % CI 0.77–11 per million) | 9.7 per million |",
        "| naive | keyed | 2,000,000 | 22 | 11 per million (95 % CI 6.9–17 per million) | 16 per million |",
        "Runs without a retry a customer can see: 99.99959 % (724,997 of 725,000)",
        "| rules | I2 | yes | 0 |  |\n| rules | I3 |",
        "| rules | I9 | yes | 0 |  |\n| rules | I10 |",
        "## Residual duplicates against the lag bound (rules)",
        "| stripe.create\\_customer | 60,000 ms | 400,000 | 0 | 0 | 7.5 per million |",
        "## Step latency",
        "| rules | 42 | 90 | 402 | 2,000 | 9,002 |",
        "Invariants: all 10 held",
        "Paused runs: 3; failed runs: 0; paused steps a person resolved: 1",
    ] {
        assert!(md.contains(want), "missing {want:?} in\n{md}");
    }
    assert!(!md.contains("<svg"), "GitHub strips inline SVG; the Markdown has none");
}

#[test]
fn a_zero_is_reported_with_its_upper_bound() {
    let one = rules(1, 500, 0);
    let mut big = one.clone();
    // 48 million steps, no duplicate: the article's month.
    big.steps = 48_000_000;
    let md = render_markdown(&build_report(&[big], None).unwrap());
    assert!(md.contains("Duplicate side effects: 0 (95 % upper bound 6.2 per 100 million)"), "{md}");
}

#[test]
fn html_is_self_contained_with_escaped_text_and_three_charts() {
    let mut runs = month();
    runs.push(common::results("month", 5, "rules", &[("x.y", "keyed", &["<script>"], 10, 0, None)], &["I1"]));
    let html = render_html(&build_report(&runs, None).unwrap());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg ").count(), 3, "class chart, lag chart, latency chart");
    assert_eq!(html.matches("<svg ").count(), html.matches("</svg>").count());
    assert!(html.contains("Duplicates per million steps by guarantee class"));
    assert!(html.contains("Residual duplicates against the lag bound"));
    assert!(html.contains("Step latency percentiles"));
    assert!(!html.contains("<script"), "text must be escaped");
    assert!(html.contains("&lt;script&gt;"));
    assert!(html.contains("key k5 has 2 effects | &lt;b&gt;"));
    assert!(
        !html.contains("http://")
            || html.matches("http://").count() == html.matches("xmlns=\"http://www.w3.org/2000/svg\"").count(),
        "no external resources"
    );
    assert!(html.contains("Invariants BROKEN: I1 (2 violations)"));
}

#[test]
fn json_round_trips_and_loads_back_as_a_baseline() {
    let runs = month();
    let report = build_report(&runs, None).unwrap();
    let json = render_json(&report);
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, report);
    let loaded = parse_results(&json, Path::new("report.json")).unwrap();
    assert_eq!(loaded, Results::merge_all(&runs[..2]).unwrap());
}

#[test]
fn write_report_writes_three_files_and_reads_back() {
    let (_guard, dir) = out_dir("write");
    let runs = month();
    write_report(&runs, None, &dir).unwrap();
    for name in ["report.md", "report.html", "report.json"] {
        assert!(std::fs::metadata(dir.join(name)).unwrap().len() > 1000, "{name}");
    }
    let one = dir.join("one.json");
    std::fs::write(&one, serde_json::to_string_pretty(&runs[0]).unwrap()).unwrap();
    assert_eq!(load_results(&one).unwrap(), runs[0]);
    assert_eq!(load_results(dir.join("report.json")).unwrap(), Results::merge_all(&runs[..2]).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn baseline_diff_flags_significant_regressions_only() {
    let before = Results::merge_all(&[rules(1, 500, 0), rules(2, 500, 1)]).unwrap();
    // (current runs, regressions expected)
    let table: Vec<(Vec<Results>, usize)> = vec![
        (vec![rules(1, 500, 1), rules(2, 500, 0)], 0),
        // 25 residual duplicates against 1 in as many steps: the total, the class and the action regress.
        (vec![rules(1, 500, 25), rules(2, 500, 0)], 3),
        (
            vec![common::results(
                "month",
                1,
                "rules",
                &[("bank.payout", "at-most-once", &[], 100_000, 0, None)],
                &["I4"],
            )],
            1,
        ),
    ];
    for (current, want) in table {
        let report = build_report(&current, Some(&before)).unwrap();
        let diff = report.baseline.as_ref().unwrap();
        assert_eq!(diff.regression_count, want, "{diff:#?}");
        let md = render_markdown(&report);
        assert!(md.contains("## Against the baseline"));
        assert_eq!(md.contains("REGRESSION"), want > 0, "{md}");
    }
}

#[test]
fn load_errors_name_the_file_and_the_problem() {
    let (_guard, dir) = out_dir("errors");
    std::fs::create_dir_all(&dir).unwrap();
    // (file content, expected text in the error)
    let table: &[(&str, &str)] = &[
        ("{\"scenario\": \"month\",\n  \"seed\": }", "bad.json:2:"),
        ("{\"scenario\": \"month\"}", "missing field"),
        (
            "{\"report_format\": \"flow-report/9\", \"policies\": [], \"lag_series\": [], \"runs\": [], \"baseline\": null}",
            "flow-report/9",
        ),
        ("[1, 2]", "bad.json"),
    ];
    for &(content, want) in table {
        let path = dir.join("bad.json");
        std::fs::write(&path, content).unwrap();
        let err = load_results(&path).unwrap_err();
        assert!(matches!(err, Error::Parse { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("bad.json") && text.contains(want), "{content:?}: {text}");
    }
    let missing = load_results(dir.join("absent.json")).unwrap_err();
    assert!(matches!(missing, Error::Read { .. }) && missing.to_string().contains("absent.json"), "{missing}");
    assert!(matches!(build_report(&[], None), Err(Error::NoResults)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn markdown_escapes_table_text_and_a_canary_does_not_break_the_report() {
    // The canary ignores keys: more duplicates than steps. The rate is capped at one per step, not an error.
    let canary = common::results(
        "canary",
        6,
        "rules",
        &[("canary.create", "canary", &["none | really"], 10, 25, None)],
        &["I1"],
    );
    let report = build_report(&[canary], None).unwrap();
    let row = &report.policies[0].actions[0];
    assert_eq!((row.duplicates.events, row.duplicates.trials, row.duplicates.point), (10, 10, 1.0));
    let md = render_markdown(&report);
    assert!(md.contains("| canary.create | canary | none \\| really | 10 | 25 | 100 per hundred"), "{md}");
    assert!(md.contains("| rules | I1 | NO | 2 | key k6 has 2 effects \\| &lt;b&gt; |"), "{md}");
    assert!(
        md.contains(
            "| canary | 6 | rules | 10 | 25 | BROKEN | cargo flowsim run --scenario canary --seed 6 --policy rules |"
        ),
        "{md}"
    );
}

#[test]
fn an_invariant_no_run_checked_is_not_reported_as_held() {
    // A plain `flowsim run` does not check I9 (determinism): its results say `checked: false`, `holds: true`.
    let unchecked = |mut r: Results| {
        r.invariants.get_mut("I9").expect("every invariant is listed").checked = false;
        r
    };
    let md = render_markdown(&build_report(&[unchecked(rules(1, 500, 0))], None).unwrap());
    assert!(md.contains("| rules | I9 | not checked | 0 |  |"), "{md}");
    assert!(md.contains("Invariants: all 9 checked held; not checked: I9"), "{md}");
    assert!(!md.contains("all 10 held"), "{md}");
    // Merged with a run that did check it (as `flowsim check` checks I9 on seed 1 only), it is reported as checked
    // by that many of the runs: neither "not checked" nor a plain "held".
    let md = render_markdown(&build_report(&[unchecked(rules(1, 500, 0)), rules(2, 500, 0)], None).unwrap());
    assert!(md.contains("| rules | I9 | yes (checked in 1 of 2 runs) | 0 |  |"), "{md}");
    assert!(md.contains("Invariants: all 10 held; I9 (checked in 1 of 2 runs)"), "{md}");
    // The count adds up over merges of merges, in any grouping.
    let three = [unchecked(rules(1, 500, 0)), rules(2, 500, 0), unchecked(rules(3, 500, 0))];
    let left = Results::merge_all([&Results::merge_all(&three[..2]).unwrap(), &three[2]]).unwrap();
    let right = Results::merge_all([&three[0], &Results::merge_all(&three[1..]).unwrap()]).unwrap();
    assert_eq!(left.invariants["I9"], right.invariants["I9"]);
    assert_eq!((left.invariants["I9"].checked, left.invariants["I9"].checked_runs), (true, Some(1)));
    let all = Results::merge_all(&[rules(1, 500, 0), rules(2, 500, 0)]).unwrap();
    assert_eq!((all.invariants["I9"].checked, all.invariants["I9"].checked_runs), (true, None));
    // A violation shows whatever else was not checked.
    let mut broken = unchecked(rules(1, 500, 0));
    let i9 = broken.invariants.get_mut("I9").unwrap();
    i9.holds = false;
    i9.violations = 1;
    let md = render_markdown(&build_report(&[broken], None).unwrap());
    assert!(md.contains("| rules | I9 | NO | 1 |"), "{md}");
    assert!(md.contains("Invariants BROKEN: I9 (1 violations)"), "{md}");
}

/// A report.json's section holds results of its own policy: one that holds another's is refused, since read back it
/// would count them under the wrong policy (or drop the section it claims to be).
#[test]
fn a_section_holding_another_policy_s_results_is_refused() {
    let report = build_report(&[rules(1, 500, 0), naive(1)], None).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
    let path = Path::new("r/report.json");
    let read = |json: &serde_json::Value| reports::report::parse_all_results(&json.to_string(), path);
    let policies: Vec<String> = read(&json).unwrap().into_iter().map(|r| r.policy).collect();
    assert_eq!(policies, ["rules", "naive"]);
    json["policies"][0]["results"]["policy"] = "naive".into();
    let error = read(&json).unwrap_err().to_string();
    assert!(
        error.contains("r/report.json")
            && error.contains("the \"rules\" policy section holds results of the policy \"naive\""),
        "{error}"
    );
}

/// A class whose actions never ran has no steps: its row says so, and it is not measured against the steps other
/// classes took (a payout-only run once reported "keyed: 2,000 steps, 0 duplicates" and an upper bound from them).
#[test]
fn a_class_whose_actions_never_ran_has_no_steps() {
    let payouts_only = common::results(
        "payouts",
        1,
        "rules",
        &[
            ("stripe.create_charge", "keyed", &["idempotency key"], 0, 0, None),
            ("bank.payout", "at-most-once", &["pause on indeterminate outcome"], 2_000, 0, None),
        ],
        &[],
    );
    let report = build_report(&[payouts_only], None).unwrap();
    let keyed = report.policies[0].by_class.iter().find(|c| c.class == "keyed").expect("a keyed row");
    assert_eq!((keyed.duplicates.trials, keyed.duplicate_count), (0, 0));
    let payout = report.policies[0].by_class.iter().find(|c| c.class == "at-most-once").expect("a payout row");
    assert_eq!(payout.duplicates.trials, 2_000);
    let md = render_markdown(&report);
    assert!(md.contains("| rules | keyed | 0 | 0 | no steps | — |"), "{md}");
    // The chart draws no bar (an interval of all of 0..1) for it.
    let html = render_html(&report);
    assert!(!html.contains("≤ 1,000,000") && !html.contains("≤ 1000000"), "{html}");
}

/// Results that contradict themselves are refused, naming the field (a hand-edited file would otherwise be reported
/// as "all held" with violations, a coverage of 750 %, or a class no engine has).
#[test]
fn results_that_contradict_themselves_are_refused() {
    use reports::report::check_counts;
    let good = rules(1, 500, 3);
    check_counts(&good).expect("a run's own results");
    let refused = |edit: &dyn Fn(&mut Results), says: &str| {
        let mut r = good.clone();
        edit(&mut r);
        let error = check_counts(&r).expect_err(says);
        assert!(error.contains(says), "{error}");
    };
    refused(&|r| r.invariants.get_mut("I1").unwrap().violations = 5, "invariant I1 has holds = true with 5 violations");
    refused(&|r| r.invariants.get_mut("I2").unwrap().holds = false, "invariant I2 has holds = false with 0");
    refused(&|r| drop(r.invariants.remove("I3")), "invariant I3 is missing");
    refused(
        &|r| {
            let i1 = r.invariants["I1"].clone();
            r.invariants.insert("I11".into(), i1);
        },
        "invariant I11 is not one of I1 to I10",
    );
    refused(&|r| r.invariants.get_mut("I9").unwrap().checked_runs = Some(3), "invariant I9 has checked_runs = 3");
    refused(&|r| r.auto_retry_coverage = 7.5, "auto_retry_coverage = 7.5 is not a share");
    refused(&|r| r.auto_retry_coverage = f64::NAN, "auto_retry_coverage = NaN");
    refused(&|r| r.actions.get_mut("bank.payout").unwrap().class = "bogus".into(), "has the class \"bogus\"");
    refused(&|r| r.actions.get_mut("bank.payout").unwrap().class = "(several)".into(), "has the class \"(several)\"");
    refused(
        &|r| r.actions.get_mut("stripe.create_customer").unwrap().effects = 1,
        "duplicates = 3, more than its effects = 1",
    );
    refused(&|r| r.latency.p50_ms = r.latency.max_ms + 1, "are not in order");
    refused(&|r| (r.paused_runs, r.failed_runs) = (r.runs / 2 + 1, r.runs / 2 + 1), "add up to more than runs");
    refused(
        &|r| r.actions.get_mut("stripe.create_customer").unwrap().residual_duplicates = 4,
        "residual_duplicates = 4, more than its duplicates = 3",
    );
    refused(
        &|r| {
            (r.runs, r.runs_with_visible_retry, r.paused_runs) = (0, 0, 0);
        },
        "with runs = 0",
    );
}

/// A report.json that lost its `report_format` is named as a report, not parsed as a run's results.
#[test]
fn a_report_without_its_format_is_named_as_a_report() {
    let mut value: serde_json::Value =
        serde_json::from_str(&render_json(&build_report(&month(), None).unwrap())).unwrap();
    value.as_object_mut().unwrap().remove("report_format");
    let error = parse_results(&value.to_string(), Path::new("r/report.json")).expect_err("no format");
    assert!(error.to_string().contains("missing field `report_format`"), "{error}");
}

/// A report.json whose run list is empty would make a report that names no scenario ("Scenarios: .").
#[test]
fn a_report_that_lists_no_runs_is_refused() {
    let mut value: serde_json::Value =
        serde_json::from_str(&render_json(&build_report(&month(), None).unwrap())).unwrap();
    value["runs"] = serde_json::json!([]);
    let error = parse_results(&value.to_string(), Path::new("r/report.json")).expect_err("no runs");
    assert!(error.to_string().contains("the report lists no runs"), "{error}");
}

/// `parse_all_inputs_from` reads a file from the `Value` already parsed from it as `parse_all_inputs` reads its text:
/// the same inputs, and the same errors, placed at the same line and column.
#[test]
fn inputs_read_from_a_value_are_those_read_from_the_text() {
    use reports::report::{parse_all_inputs, parse_all_inputs_from};
    let report = render_json(&build_report(&month(), None).unwrap());
    let run = serde_json::to_string_pretty(&rules(1, 500, 3)).unwrap();
    // (text, whether it is read)
    let texts = [
        (report.clone(), true),
        (run.clone(), true),
        (run.replacen("\"seed\": 1,", "\"seed\": 1, \"unknown\": [1, {}],", 1), true),
        (run.replacen("\"seed\": 1,", "\"seed\": \"one\",", 1), false),
        (run.replacen("\"steps\":", "\"steps_\":", 1), false),
        ("[1, 2]".to_string(), false),
        ("null".to_string(), false),
        (report.replacen("flow-report/1", "flow-report/9", 1), false),
        (report.replacen("\"point\":", "\"point\": \"x\", \"was\":", 1), false),
    ];
    let path = Path::new("r/report.json");
    for (text, read) in &texts {
        let value = serde_json::from_str(text).unwrap();
        match (parse_all_inputs(text, path), parse_all_inputs_from(value, text, path)) {
            (Ok(a), Ok(b)) if *read => assert_eq!(a, b),
            (Err(a), Err(b)) if !*read => {
                assert_eq!(a.to_string(), b.to_string());
                assert!(matches!((&a, &b), (Error::Parse { line: l, .. }, Error::Parse { line: m, .. }) if l == m));
            }
            (a, b) => panic!("{text}: {a:?} but {b:?}"),
        }
    }
    let (text, _) = &texts[3];
    let error = parse_all_inputs_from(serde_json::from_str(text).unwrap(), text, path).unwrap_err();
    assert!(matches!(error, Error::Parse { line: 3, column: 15, .. }), "{error:?}");
}
