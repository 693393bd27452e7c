//! `Results::merge`: shards' results add up to the unsharded figures, and merging is associative, so the report of
//! merged shards equals the report of every run at once.

mod common;

use common::{naive, rules};
use reports::{Results, build_report};

fn runs() -> Vec<Results> {
    vec![rules(1, 500, 3), rules(2, 500, 0), rules(3, 60_000, 1), rules(4, 60_000, 2)]
}

#[test]
fn merge_of_two_shards_equals_the_sum() {
    let all = runs();
    let merged = Results::merge_all(&all).unwrap();
    let sum = |f: fn(&Results) -> u64| all.iter().map(f).sum::<u64>();
    assert_eq!(merged.steps, sum(|r| r.steps));
    assert_eq!(merged.runs, sum(|r| r.runs));
    assert_eq!(merged.effects, sum(|r| r.effects));
    assert_eq!(merged.duplicates.total, 6);
    assert_eq!(merged.duplicates.by_class["lookup-before-create"], 6);
    assert_eq!(merged.duplicates.by_class["keyed"], 0);
    assert_eq!(merged.paused_runs, sum(|r| r.paused_runs));
    assert_eq!(merged.runs_with_visible_retry, sum(|r| r.runs_with_visible_retry));
    assert_eq!(merged.person_resolutions, sum(|r| r.person_resolutions));
    assert_eq!(merged.extra_lookup_ms_total, sum(|r| r.extra_lookup_ms_total));
    assert_eq!(merged.merged_runs, 4);
    assert_eq!(merged.actions["stripe.create_customer"].steps, 1_600_000);
    assert_eq!(merged.actions["stripe.create_customer"].duplicates, 6);
    // Two lag bounds were merged: the merged action no longer has one bound.
    assert_eq!(merged.actions["stripe.create_customer"].lag_bound_ms, None);
    assert_eq!(merged.actions["stripe.create_charge"].lag_bound_ms, None);
    assert_eq!(merged.scenario, "month");
    assert_eq!(merged.policy, "rules");
    assert_eq!(merged.seed, 1);
    assert_eq!(merged.repro, sim::results::MIXED);
    assert_eq!(merged.trace_hash, all.iter().map(|r| r.trace_hash.clone()).collect::<Vec<_>>().join(","));
    assert_eq!(merged.latency.max_ms, 9004);
    assert_eq!(merged.latency.p50_ms, 44);
    assert_eq!(merged.peak_rss_bytes, 100_000_004);
    assert_eq!(merged.wall_seconds, 10.0);
    assert_eq!(merged.steps_per_second, merged.steps as f64 / 10.0);
    assert!(merged.all_hold());

    let shard_1 = Results::merge_all(&all[..2]).unwrap();
    let shard_2 = Results::merge_all(&all[2..]).unwrap();
    let mut of_shards = shard_1.clone();
    of_shards.merge(&shard_2);
    assert_eq!(of_shards, merged);
    // Serialised, too (what `flowsim report` reads back).
    assert_eq!(serde_json::to_string(&of_shards).unwrap(), serde_json::to_string(&merged).unwrap());
}

#[test]
fn merged_shards_give_the_unsharded_report_figures() {
    let all = runs();
    let shards = [Results::merge_all(&all[..2]).unwrap(), Results::merge_all(&all[2..]).unwrap()];
    let unsharded = build_report(&all, None).unwrap();
    let sharded = build_report(&shards, None).unwrap();
    assert_eq!(sharded.policies, unsharded.policies);
}

#[test]
fn merge_marks_disagreement_and_keeps_broken_invariants() {
    let mut broken = common::results("month", 9, "rules", &[("x.y", "keyed", &[], 10, 0, None)], &["I4"]);
    broken.knobs.insert("crash_rate".to_string(), serde_json::json!(0.5));
    let mut merged = naive(8);
    merged.merge(&broken);
    assert_eq!(merged.policy, sim::results::MIXED);
    assert_eq!(merged.knobs["crash_rate"], serde_json::json!(sim::results::MIXED));
    assert!(!merged.invariants["I4"].holds);
    assert_eq!(merged.invariants["I4"].violations, 2);
    assert_eq!(merged.invariants["I4"].first_violation.as_deref(), Some("key k9 has 2 effects | <b>"));
    assert!(merged.invariants["I1"].holds);
    assert!(merged.actions.contains_key("x.y") && merged.actions.contains_key("bank.payout"));
}

#[test]
fn a_default_result_counts_as_one_run() {
    let mut merged = Results::default();
    merged.merge(&Results::default());
    assert_eq!(merged.merged_runs, 2);
    assert_eq!(Results::merge_all(&[]), None);
}

/// A merge of both ledgers' runs names each trace hash's ledger, whichever way the runs were grouped, and the names
/// survive a round trip through JSON; a merge of one ledger's runs names none (its `ledger` says it).
#[test]
fn a_merge_of_both_ledgers_names_the_ledger_of_each_hash_associatively() {
    let mut all = runs();
    all[1].ledger = "sqlite".into();
    all[3].ledger = "sqlite".into();
    let merged = Results::merge_all(&all).unwrap();
    assert_eq!(merged.ledger, sim::results::MIXED);
    assert_eq!(merged.trace_ledgers.as_deref(), Some("memory,sqlite,memory,sqlite"));
    for split in 1..all.len() {
        let mut of_parts = Results::merge_all(&all[..split]).unwrap();
        let back: Results = serde_json::from_str(&serde_json::to_string(&of_parts).unwrap()).unwrap();
        assert_eq!(back, of_parts);
        of_parts.merge(&Results::merge_all(&all[split..]).unwrap());
        assert_eq!(of_parts, merged, "split at {split}");
    }
    let hashes: Vec<(&str, Option<&str>)> = merged.hashes_with_ledgers().collect();
    assert_eq!(hashes[1], (all[1].trace_hash.as_str(), Some("sqlite")));
    assert_eq!(Results::merge_all(&runs()).unwrap().trace_ledgers, None);
    // A merge holding a part from before the field cannot say which hash is which.
    let mut old = Results::merge_all(&all[..2]).unwrap();
    old.trace_ledgers = None;
    old.merge(&all[2]);
    assert_eq!(old.trace_ledgers, None);
    assert!(old.hashes_with_ledgers().all(|(_, ledger)| ledger.is_none()));
}

/// `trace_ledgers` and `ledger` are read as a merge writes them; anything else is refused as a contradiction, since
/// `flowsim report` relies on them to count each simulation once.
#[test]
fn ledger_names_a_merge_could_not_have_written_are_refused() {
    use reports::report::check_counts;
    let mut all = runs();
    all[1].ledger = "sqlite".into();
    let merged = Results::merge_all(&all).unwrap();
    assert_eq!(check_counts(&merged), Ok(()));
    assert_eq!(check_counts(&all[0]), Ok(()));
    let with = |ledger: &str, ledgers: Option<&str>| {
        let mut r = merged.clone();
        r.ledger = ledger.into();
        r.trace_ledgers = ledgers.map(str::to_owned);
        check_counts(&r).expect_err("refused")
    };
    let m = sim::results::MIXED;
    assert!(with(m, Some("memory,sqlite,memory")).contains("names 3 ledgers for 4 trace hashes"));
    assert!(with(m, Some("memory,banana,memory,memory")).contains("the ledger \"banana\", not memory or sqlite"));
    assert!(with(m, Some("memory, sqlite,memory,memory")).contains("the ledger \" sqlite\""));
    assert!(with(m, Some("memory,memory,memory,memory")).contains("only a merge of both ledgers' runs names them"));
    assert!(with("memory", Some("memory,sqlite,memory,memory")).contains("with ledger = \"memory\""));
    assert!(with("banana", None).contains("ledger = \"banana\" is not memory, sqlite or (several)"));
    let mut r = all[0].clone();
    r.policy = "Rules".into();
    assert!(check_counts(&r).expect_err("refused").contains("policy = \"Rules\" is not rules, naive or (several)"));
}
