//! JUnit XML of the gate: one test case per (scenario, seed); a failure carries the repro command.

use reports::{GateCase, junit};

fn case(scenario: &str, seed: u64, passed: bool, message: &str) -> GateCase {
    GateCase {
        scenario: scenario.to_string(),
        seed,
        passed,
        message: message.to_string(),
        repro: format!("cargo flowsim run --scenario {scenario} --seed {seed}"),
        duration_s: 1.5,
    }
}

#[test]
fn one_test_case_per_scenario_and_seed_with_the_repro_in_failures() {
    let xml = junit(
        &[
            case("month", 1, true, ""),
            case("month", 2, false, "I1 broken: key k has 2 effects <&>"),
            case("canary", 3, true, "canary failed as expected"),
        ],
        2.0,
    );
    assert_eq!(xml.matches("<testcase ").count(), 3, "{xml}");
    assert_eq!(xml.matches("<failure").count(), 1, "{xml}");
    assert!(xml.contains(r#"name="month seed=2""#), "{xml}");
    assert!(xml.contains(r#"classname="month""#), "{xml}");
    assert!(xml.contains("reproduce with: cargo flowsim run --scenario month --seed 2"), "{xml}");
    // Escaped by the serializer, never raw.
    assert!(xml.contains("2 effects &lt;&amp;&gt;"), "{xml}");
    assert!(xml.contains(r#"tests="3""#) && xml.contains(r#"failures="1""#), "{xml}");
}

#[test]
fn failure_message_names_the_reason_and_the_command() {
    let failed = case("month", 7, false, "");
    assert_eq!(failed.failure_message(), "failed\nreproduce with: cargo flowsim run --scenario month --seed 7");
    assert_eq!(junit(&[], 0.0).matches("<testcase").count(), 0);
}

/// The suite's time is the wall time the gate took, not the sum of its cases' times (they run side by side on
/// several threads); without a wall time, the sum stands.
#[test]
fn the_suite_time_is_the_wall_time() {
    let cases = [case("month", 1, true, ""), case("month", 2, true, ""), case("month", 3, true, "")];
    let suite_time = |xml: &str| {
        let suite = &xml[xml.find("<testsuite ").expect("a suite")..];
        let at = suite.find(" time=\"").expect("a suite time") + 7;
        suite[at..].split('"').next().expect("quoted").parse::<f64>().expect("seconds")
    };
    assert_eq!(suite_time(&junit(&cases, 2.0)), 2.0);
    assert_eq!(suite_time(&junit(&cases, f64::NAN)), 4.5);
    assert_eq!(suite_time(&junit(&cases, -1.0)), 4.5);
}
