//! JUnit XML for the release gate: one test case per (scenario, seed), so that CI shows which seed failed, and a
//! failure whose message ends with the one command that reproduces it.

use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// The name of the suite (and of the report) in the XML.
pub const SUITE_NAME: &str = "flowsim check";

/// The verdict of the gate on one (scenario, seed).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GateCase {
    pub scenario: String,
    pub seed: u64,
    pub passed: bool,
    /// Why it failed (the broken invariant or the budget overrun); may be empty for a pass.
    pub message: String,
    /// The command that reproduces this run exactly.
    pub repro: String,
    /// Wall time the case took, in seconds (not deterministic; shown by CI only).
    pub duration_s: f64,
}

impl GateCase {
    /// The test case's name: `SCENARIO seed=N`.
    pub fn name(&self) -> String {
        format!("{} seed={}", self.scenario, self.seed)
    }

    /// The failure message as CI shows it: the reason, then the repro command on its own line.
    pub fn failure_message(&self) -> String {
        let reason = if self.message.is_empty() { "failed" } else { self.message.as_str() };
        format!("{reason}\nreproduce with: {}", self.repro)
    }
}

/// The JUnit XML of `cases`, in their order, as one suite. `wall_s` is the wall time the whole suite took, in
/// seconds: the suite's and the report's time. Cases run side by side on several threads, so it is less than the sum
/// of the cases' times; when it is not a time (negative, or not finite) that sum stands instead.
pub fn junit(cases: &[GateCase], wall_s: f64) -> String {
    let mut suite = TestSuite::new(SUITE_NAME);
    for case in cases {
        let status = if case.passed {
            TestCaseStatus::success()
        } else {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            // The attribute holds one line (an XML parser turns a newline in an attribute into a space, joining the
            // reason to the repro); the element's text holds both lines.
            let message = case.failure_message();
            let first_line = message.lines().next().unwrap_or_default().to_owned();
            status.set_message(first_line).set_type("gate").set_description(message);
            status
        };
        let mut test_case = TestCase::new(case.name(), status);
        test_case.set_classname(case.scenario.as_str());
        if case.duration_s.is_finite() && case.duration_s >= 0.0 {
            test_case.set_time(Duration::from_secs_f64(case.duration_s));
        }
        test_case.set_system_out(format!("repro: {}", case.repro));
        suite.add_test_case(test_case);
    }
    let total_s = if wall_s.is_finite() && wall_s >= 0.0 {
        wall_s
    } else {
        cases.iter().map(|c| c.duration_s).filter(|d| d.is_finite() && *d >= 0.0).sum()
    };
    suite.set_time(Duration::from_secs_f64(total_s));
    let mut report = Report::new(SUITE_NAME);
    report.set_time(Duration::from_secs_f64(total_s));
    report.add_test_suite(suite);
    // Serialising into memory fails only on a bug in the serializer (our strings are escaped by it).
    report.to_string().expect("JUnit XML serialises into a String")
}
