//! Clopper–Pearson bounds and the regression test against reference values computed independently (mpmath, 40
//! digits: exact binomial tail sums solved by bisection), plus the wording of rates in reports.

use reports::rates::{Change, Error, Rate, regression_p_value, significant};

/// `got` within a relative `tolerance` of `want`.
fn close(got: f64, want: f64, tolerance: f64) -> bool {
    if want == 0.0 { got == 0.0 } else { ((got - want) / want).abs() <= tolerance }
}

#[test]
fn clopper_pearson_matches_reference_values() {
    // (events, trials, two-sided low, two-sided high, one-sided upper)
    let table: &[(u64, u64, f64, f64, f64)] = &[
        (1, 10, 0.0025285785, 0.44501612, 0.3941633),
        (5, 100, 0.016431879, 0.11283491, 0.10225338),
        (0, 10, 0.0, 0.30849711, 0.25886555),
        (10, 10, 0.69150289, 1.0, 1.0),
        (3, 1_000_000, 6.1867255e-7, 8.7672478e-6, 7.7536381e-6),
        (42, 48_000_000, 6.3062311e-7, 1.1827456e-6, 1.1317487e-6),
        (2, 4_200_000, 5.7668881e-8, 1.7201627e-6, 1.4989977e-6),
        (0, 48_000_000, 0.0, 7.6851652e-8, 6.2411087e-8),
    ];
    for &(events, trials, low, high, upper) in table {
        let r = Rate::new(events, trials).unwrap();
        let case = format!("{events}/{trials}: {r:?}");
        assert!(close(r.interval_95.low, low, 1e-6), "low {case}");
        assert!(close(r.interval_95.high, high, 1e-6), "high {case}");
        assert!(close(r.upper_95, upper, 1e-6), "upper {case}");
        assert!(r.interval_95.low <= r.point && r.point <= r.interval_95.high, "point inside {case}");
        assert!(r.upper_95 <= r.interval_95.high, "one-sided below two-sided {case}");
    }
}

#[test]
fn zero_events_have_closed_form_bounds() {
    for n in [1u64, 7, 1000, 4_200_000, 48_000_000, 10_000_000_000] {
        let r = Rate::new(0, n).unwrap();
        let nf = n as f64;
        assert!(close(r.upper_95, 1.0 - 0.05f64.powf(1.0 / nf), 1e-6), "one-sided {n}");
        assert!(close(r.interval_95.high, 1.0 - 0.025f64.powf(1.0 / nf), 1e-6), "two-sided {n}");
        assert_eq!(r.interval_95.low, 0.0);
    }
}

#[test]
fn no_trials_means_nothing_is_known_and_too_many_events_is_an_error() {
    let r = Rate::new(0, 0).unwrap();
    assert_eq!((r.point, r.interval_95.low, r.interval_95.high, r.upper_95), (0.0, 0.0, 1.0, 1.0));
    assert_eq!(r.describe(), "no steps");
    assert_eq!(Rate::new(3, 2), Err(Error::EventsExceedTrials { events: 3, trials: 2 }));
}

#[test]
fn rates_are_described_with_their_bounds() {
    let table: &[(u64, u64, &str)] = &[
        (0, 48_000_000, "0 (95 % upper bound 6.2 per 100 million)"),
        (0, 1000, "0 (95 % upper bound 30 per 10 thousand)"),
        (1, 90_000, "11 per million (95 % CI 0.28–62 per million)"),
        (42, 48_000_000, "88 per 100 million (95 % CI 63–120 per 100 million)"),
        (5, 100, "5 per hundred (95 % CI 1.6–11 per hundred)"),
    ];
    for &(events, trials, want) in table {
        assert_eq!(Rate::new(events, trials).unwrap().describe(), want, "{events}/{trials}");
    }
}

#[test]
fn significant_figures_table() {
    let table: &[(f64, u32, &str)] =
        &[(6.2411, 2, "6.2"), (11.1, 2, "11"), (0.0625, 2, "0.062"), (1234.0, 2, "1200"), (5.0, 2, "5"), (0.0, 2, "0")];
    for &(x, digits, want) in table {
        assert_eq!(significant(x, digits), want, "{x}");
    }
}

#[test]
fn regression_p_values_match_the_exact_conditional_binomial_test() {
    // (old events, old trials, new events, new trials, one-sided p-value)
    let table: &[(u64, u64, u64, u64, f64)] = &[
        (10, 1_000_000, 25, 1_000_000, 0.0083369239),
        (10, 1_000_000, 12, 1_000_000, 0.41590595),
        (0, 1_000_000, 3, 1_000_000, 0.125),
        (5, 1_000_000, 20, 2_000_000, 0.11195274),
    ];
    for &(xo, no, xn, nn, want) in table {
        let p = regression_p_value(&Rate::new(xo, no).unwrap(), &Rate::new(xn, nn).unwrap());
        assert!(close(p, want, 1e-6), "{xo}/{no} → {xn}/{nn}: p = {p}, want {want}");
    }
}

#[test]
fn only_significantly_worse_rates_are_regressions() {
    // (old events, old trials, new events, new trials, regression?)
    let table: &[(u64, u64, u64, u64, bool)] = &[
        (10, 1_000_000, 25, 1_000_000, true),
        (10, 1_000_000, 12, 1_000_000, false),
        (25, 1_000_000, 10, 1_000_000, false),
        (0, 48_000_000, 0, 48_000_000, false),
        (0, 48_000_000, 9, 48_000_000, true),
        (0, 0, 9, 48_000_000, false),
    ];
    for &(xo, no, xn, nn, want) in table {
        let change = Change::new(Rate::new(xo, no).unwrap(), Rate::new(xn, nn).unwrap());
        assert_eq!(change.regression, want, "{xo}/{no} → {xn}/{nn}: {change:?}");
    }
}
