//! What it costs to make a report: one exact Clopper–Pearson rate (bisection on the incomplete beta function), and
//! a whole report (build, Markdown, HTML with SVG, JSON) from 64 results of a four-action catalogue.

use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

use reports::Rate;
use reports::report::{build_report, render_html, render_json, render_markdown};
use sim::results::{ActionStats, Results};

fn results(seed: u64) -> Results {
    let mut r = Results {
        scenario: "month".into(),
        seed,
        policy: "rules".into(),
        steps: 4_000_000,
        runs: 1_000_000,
        ..Default::default()
    };
    for (i, class) in ["keyed", "lookup-before-create", "at-most-once", "lookup-before-create"].iter().enumerate() {
        let stats = ActionStats {
            class: class.to_string(),
            safeguards: vec!["idempotency key".into()],
            steps: 1_000_000,
            duplicates: seed % 3 * i as u64,
            lag_bound_ms: (*class == "lookup-before-create").then_some(500 * (seed % 4 + 1)),
            ..Default::default()
        };
        r.actions.insert(format!("connector{i}.create"), stats);
    }
    r.duplicates.total = r.actions.values().map(|a| a.duplicates).sum();
    r
}

fn benches(c: &mut Criterion) {
    c.bench_function("rate_42_in_48_million", |b| b.iter(|| Rate::new(black_box(42), black_box(48_000_000))));
    c.bench_function("rate_0_in_48_million", |b| b.iter(|| Rate::new(black_box(0), black_box(48_000_000))));
    let all: Vec<Results> = (0..64).map(results).collect();
    c.bench_function("report_64_results_md_html_json", |b| {
        b.iter(|| {
            let report = build_report(black_box(&all), None).unwrap();
            (render_markdown(&report).len(), render_html(&report).len(), render_json(&report).len())
        })
    });
}

criterion_group!(group, benches);
criterion_main!(group);
