//! Workflows defined in a profile file (`[workflows.NAME]`, the engine's workflow format): they resolve beside the
//! built-in ones, the mix may name them, and every mistake is refused with a message that names it.

use scenarios::run::prepare;

const REFUND: &str = r#"
[mix]
refund = 1.0

[workflows.refund]
name = "refund"
[[workflows.refund.steps]]
id = "refund-customer"
action = "payments.create_customer"
inputs = { email = "{{trigger.email}}" }
[[workflows.refund.steps]]
id = "refund-records"
writes = [
  { action = "ledgerly.record_entry", inputs = { amount = "{{trigger.amount}}", reference = "{{steps.refund-customer.output.id}}" } },
  { action = "email.send_email", inputs = { to = "{{trigger.email}}" } },
]
[[workflows.refund.steps]]
id = "refund-agent"
planner = "support-agent"
inputs = { email = "{{trigger.email}}" }
"#;

/// Writes the profile to `NAME.toml` in a temporary directory (removed afterwards) and resolves it.
fn resolve(name: &str, text: &str) -> Result<scenarios::run::Prepared, String> {
    let dir = tempfile::Builder::new().prefix("flowsim-defined-").tempdir().expect("a temp dir");
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).expect("write the profile");
    prepare(path.to_str().expect("UTF-8 temp path"), 1, Some(1_000))
}

#[test]
fn a_defined_workflow_resolves_and_counts_its_writes_and_plan_steps() {
    let prepared = resolve("refund", REFUND).expect("the profile resolves");
    let profile = &prepared.profile;
    assert!(sim::workflows::is_workflow_in(profile, "refund"));
    // One action step, two writes, and an agent step (two writes expected).
    assert_eq!(sim::workflows::expected_writes(profile, "refund"), 5);
    let plan_steps = sim::workflows::plan_steps(profile);
    assert!(plan_steps.contains("refund-records") && plan_steps.contains("refund-agent"));
    assert!(!plan_steps.contains("refund-customer"));
    let names: Vec<String> = sim::workflows::compiled_for(profile).into_iter().map(|w| w.name).collect();
    assert!(names.contains(&"refund".to_owned()) && names.contains(&"signup".to_owned()), "{names:?}");
    // The definition is printed with the knobs, so a run shows exactly what it ran.
    let knobs = sim::profile::knobs(profile);
    assert!(knobs.contains_key("workflows.refund.steps"), "{:?}", knobs.keys().collect::<Vec<_>>());
}

#[test]
fn mistakes_in_a_defined_workflow_are_named() {
    let cases: &[(&str, String, &[&str])] = &[
        (
            "name differs",
            REFUND.replace("name = \"refund\"", "name = \"other\""),
            &["workflows.refund", "must be \"refund\""],
        ),
        (
            "unknown action",
            REFUND.replace("payments.create_customer", "payments.refund"),
            &["refund-customer", "unknown action \"payments.refund\""],
        ),
        ("shadows a built-in", REFUND.replace("refund", "signup"), &["built-in workflow"]),
        (
            "step id of another workflow",
            REFUND
                .replace("id = \"refund-customer\"", "id = \"customer\"")
                .replace("steps.refund-customer", "steps.customer"),
            &["step id \"customer\"", "signup"],
        ),
        (
            "later step referenced",
            REFUND.replace(
                "{{trigger.email}}\" }\n[[workflows.refund.steps]]\nid = \"refund-records\"",
                "{{steps.refund-agent.output.id}}\" }\n[[workflows.refund.steps]]\nid = \"refund-records\"",
            ),
            &["refund-customer", "refund-agent"],
        ),
        ("another planner", REFUND.replace("support-agent", "gpt"), &["refund-agent", "the only planner"]),
        ("unknown field", REFUND.replace("planner = ", "planer = "), &["planer"]),
        (
            "mix names nothing",
            REFUND.replace("refund = 1.0", "refnud = 1.0"),
            &["unknown workflow \"refnud\"", "refund"],
        ),
    ];
    for (what, text, needles) in cases {
        let e = match resolve(&what.replace(' ', "-"), text) {
            Ok(_) => panic!("{what}: resolved, but it is wrong"),
            Err(e) => e,
        };
        for needle in *needles {
            assert!(e.contains(needle), "{what}: {e:?} lacks {needle:?}");
        }
    }
}
