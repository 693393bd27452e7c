//! The workflow format as a definition's author meets it: which definitions are read and which are refused, and what
//! the refusal says.

use engine::doc::Doc;
use engine::workflow::{StepKind, Template, Workflow, render};
use serde_json::json;

/// A one-step TOML workflow with these inputs.
fn toml_with_inputs(inputs: &str) -> String {
    format!("name = \"w\"\n[[steps]]\nid = \"a\"\naction = \"c.x\"\ninputs = {inputs}\n")
}

/// The inputs template of the first step, which must be an action step.
fn first_inputs(wf: &Workflow) -> &Template {
    let StepKind::Action { inputs, .. } = &wf.steps[0].kind else { panic!("an action step") };
    inputs
}

/// A TOML number is read exactly when the canonical JSON parser reads its JSON twin: the literal is judged, not the
/// double toml rounds it to. `9007199254740993.0` is the integer 2^53 + 1, which a double would merge with 2^53, and
/// `1e-400` a non-zero number a double would merge with 0; `1152921504606847000` is the canonical spelling of the
/// double 2^60, which JSON reads, while no double holds it exactly.
#[test]
fn a_toml_number_is_read_exactly_when_its_json_twin_is() {
    let cases = [
        // (TOML literal, the same number in JSON)
        ("9007199254740993.0", "9007199254740993.0"),
        ("9007199254740993", "9007199254740993"),
        ("9.007199254740993e15", "9.007199254740993e15"),
        ("9_007_199_254_740_993.0", "9007199254740993.0"),
        ("1e-400", "1e-400"),
        ("-1e-400", "-1e-400"),
        ("1e-324", "1e-324"),
        ("1152921504606847000", "1152921504606847000"),
        ("+1_152_921_504_606_847_000", "1152921504606847000"),
        ("1152921504606846999", "1152921504606846999"),
        ("9007199254740992.0", "9007199254740992.0"),
        ("9007199254740993.5", "9007199254740993.5"),
        ("-9223372036854775808", "-9223372036854775808"),
        ("9223372036854775807", "9223372036854775807"),
        ("0x7fff_ffff_ffff_ffff", "9223372036854775807"),
        ("0x20_0000_0000_0001", "9007199254740993"),
        ("0x20_0000_0000_0000", "9007199254740992"),
        ("0o17", "15"),
        ("0b101", "5"),
        ("5e-324", "5e-324"),
        ("1e23", "1e23"),
        ("+0.5", "0.5"),
        ("-0.0", "-0.0"),
        ("1E+2", "1E+2"),
    ];
    for (toml_literal, json_literal) in cases {
        let json_text =
            format!(r#"{{"name": "w", "steps": [{{"id": "a", "action": "c.x", "inputs": {{"n": {json_literal}}}}}]}}"#);
        let from_json = Workflow::from_json(&json_text);
        let from_toml = Workflow::from_toml(&toml_with_inputs(&format!("{{ n = {toml_literal} }}")));
        match (&from_toml, &from_json) {
            (Ok(t), Ok(j)) => {
                // Read alike, the two render the same inputs, so they are keyed alike.
                let empty = Doc::object([]);
                assert_eq!(
                    render(first_inputs(t), &empty, &[]),
                    render(first_inputs(j), &empty, &[]),
                    "{toml_literal}"
                );
            }
            (Err(t), Err(_)) => {
                // Refused, naming where the number is and how it is written.
                let says = format!("steps[0].inputs.n = {toml_literal}: ");
                assert!(t.to_string().contains(&says), "{toml_literal}: {t}");
            }
            _ => panic!("TOML {toml_literal} gives {from_toml:?}, JSON {json_literal} gives {from_json:?}"),
        }
    }
}

/// The cases of the QA finding, with what the refusal says: the canonical parser's own reason.
#[test]
fn a_toml_number_the_canonical_parser_refuses_is_refused_with_its_reason() {
    let err = Workflow::from_toml(&toml_with_inputs("{ big = 9007199254740993.0, tiny = 1e-400 }")).expect_err("big");
    assert!(
        err.to_string().contains(
            "steps[0].inputs.big = 9007199254740993.0: number 9007199254740993.0: the integer 9007199254740993 cannot \
             be represented exactly as an IEEE-754 double (the nearest is 9007199254740992)"
        ),
        "{err}"
    );
    let err = Workflow::from_toml(&toml_with_inputs("{ list = [1, { tiny = 1e-400 }] }")).expect_err("tiny");
    assert!(
        err.to_string().contains("steps[0].inputs.list[1].tiny = 1e-400: number 1e-400 is outside the range"),
        "{err}"
    );
    let err = Workflow::from_toml(&toml_with_inputs("{ f = -inf }")).expect_err("-inf");
    assert!(err.to_string().contains("steps[0].inputs.f = -inf: not a number JSON can hold"), "{err}");
    // toml itself refuses a float that overflows, at the literal.
    let err = Workflow::from_toml(&toml_with_inputs("{ n = 1e400 }")).expect_err("1e400");
    assert!(err.to_string().contains("n = 1e400") && err.to_string().contains("overflowed"), "{err}");
    // Inside a write's inputs, too.
    let text = "name = \"w\"\n[[steps]]\nid = \"a\"\nwrites = [{ action = \"c.x\", inputs = { n = 1e-400 } }]\n";
    let err = Workflow::from_toml(text).expect_err("in a write");
    assert!(err.to_string().contains("steps[0].writes[0].inputs.n = 1e-400"), "{err}");
    // The spelling of 2^60 is read, as JSON reads it, and keyed as JSON keys it.
    let wf = Workflow::from_toml(&toml_with_inputs("{ big = 1152921504606847000 }")).expect("2^60's spelling");
    let rendered = render(first_inputs(&wf), &Doc::object([]), &[]);
    assert_eq!(engine::canonical::to_vec(&rendered).unwrap(), br#"{"big":1152921504606847000}"#);
    assert_eq!(rendered, json!({"big": 1152921504606847000_u64}));
}

/// A step id a template could not name is refused, naming the id: `pay.customer` would be read as step `pay` by
/// `{{steps.pay.customer.output.id}}`, and the error would then blame a step "pay" that does not exist.
#[test]
fn a_step_id_a_template_could_not_name_is_refused() {
    let def = |id: &str| {
        json!({"name": "w", "steps": [
            {"id": id, "action": "c.x", "inputs": {}},
            {"id": "later", "action": "c.y", "inputs": {"v": format!("{{{{steps.{id}.output.id}}}}")}}
        ]})
        .to_string()
    };
    let err = Workflow::from_json(&def("pay.customer")).expect_err("a dotted id");
    assert_eq!((err.step.as_str(), err.field.as_str()), ("pay.customer", "id"), "{err}");
    assert!(
        err.to_string().contains(
            "step id \"pay.customer\" holds '.', which separates the segments of a reference: \
             `{{steps.pay.customer.output}}` would name step \"pay\". A step id holds no whitespace, `.`,"
        ),
        "{err}"
    );
    for id in ["a b", " a", "a ", "a\tb", "a{", "a}", "{{a}}", "a}}b", "a[0]", "]", "a\u{a0}b"] {
        let err = Workflow::from_json(&def(id)).expect_err(id);
        assert_eq!((err.step.as_str(), err.field.as_str()), (id, "id"), "{id:?}: {err}");
        assert!(err.to_string().contains(&format!("step id {id:?} holds ")), "{id:?}: {err}");
    }
    // Names with letters, digits, `-` and `_` (in any script) are read, and a later step names them.
    for id in ["pay", "pay_customer", "pay-customer", "Pay2", "2", "ünïcødé", "a@b:c"] {
        let wf = Workflow::from_json(&def(id)).expect(id);
        assert_eq!(wf.outputs_referenced(), [true, false], "{id}");
    }
    // The same in TOML.
    let text = "name = \"w\"\n[[steps]]\nid = \"pay.customer\"\naction = \"c.x\"\n";
    let err = Workflow::from_toml(text).expect_err("a dotted id in TOML");
    assert_eq!((err.step.as_str(), err.field.as_str()), ("pay.customer", "id"), "{err}");
}

/// A volatile path that names nothing the step sends (a typo, say) is refused, naming the path and the fields there
/// are; one that names a field, or reaches into a value a reference renders, is read.
#[test]
fn a_volatile_path_that_names_no_input_field_is_refused() {
    let action = |volatile: &str| {
        json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "volatile": [volatile], "inputs": {
            "email": "{{trigger.email}}", "requested_at": "{{trigger.at}}", "amount": 5, "memo": "for {{trigger.name}}",
            "meta": {"trace": "{{trigger.trace}}", "note": "x"}, "fixed": {"at": 1}, "from": "{{trigger.meta}}"
        }}]})
        .to_string()
    };
    for (path, says) in [
        (
            "reqested_at",
            "\"reqested_at\" names no input field: `inputs` has `amount`, `email`, `fixed`, `from`, `memo`, `meta`, \
             `requested_at`",
        ),
        ("meta.trce", "\"meta.trce\" names no input field: `inputs.meta` has `note`, `trace`"),
        ("fixed.on", "\"fixed.on\" names no input field: `inputs.fixed` has `at`"),
        ("amount.cents", "\"amount.cents\" names no input field: `inputs.amount` is not an object"),
        ("memo.x", "\"memo.x\" names no input field: `inputs.memo` is not an object"),
        ("meta.note.id", "\"meta.note.id\" names no input field: `inputs.meta.note` is not an object"),
    ] {
        let err = Workflow::from_json(&action(path)).expect_err(path);
        assert_eq!((err.step.as_str(), err.field.as_str()), ("a", "volatile"), "{path}: {err}");
        assert!(err.message.contains(says), "{path}: {err}");
    }
    // A field, at any depth, and a path into what a reference renders (which may hold any field), are read.
    for path in ["requested_at", "meta", "meta.trace", "fixed.at", "from.anything", "from.a.b", "meta.trace.id"] {
        Workflow::from_json(&action(path)).expect(path);
    }
    // A step with no inputs has no fields to name.
    let bare = json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "volatile": ["at"]}]}).to_string();
    let err = Workflow::from_json(&bare).expect_err("no inputs");
    assert!(err.message.contains("\"at\" names no input field: `inputs` has no fields"), "{err}");
    // A writes step: the path is left out of every write's inputs, so one write that has the field is enough.
    let writes = |volatile: &str| {
        json!({"name": "w", "steps": [{"id": "a", "volatile": [volatile], "writes": [
            {"action": "c.x", "inputs": {"to": "{{trigger.email}}"}},
            {"action": "c.y", "inputs": {"amount": 1, "requested_at": "{{trigger.at}}"}}
        ]}]})
        .to_string()
    };
    Workflow::from_json(&writes("requested_at")).expect("in the second write");
    let err = Workflow::from_json(&writes("requsted_at")).expect_err("in no write");
    assert_eq!((err.step.as_str(), err.field.as_str()), ("a", "volatile"), "{err}");
    assert!(
        err.message.contains(
            "\"requsted_at\" names no input field: `writes[0].inputs` has `to`; `writes[1].inputs` has `amount`, \
             `requested_at`"
        ),
        "{err}"
    );
    // An agent step's paths are left out of the writes its planner proposes too, which only the run knows.
    let agent = json!({"name": "w", "steps": [
        {"id": "a", "planner": "p", "volatile": ["requested_at"], "inputs": {"email": "{{trigger.email}}"}}
    ]});
    Workflow::from_json(&agent.to_string()).expect("an agent step's paths are not checked");
    // In TOML as in JSON.
    let text = "name = \"w\"\n[[steps]]\nid = \"a\"\naction = \"c.x\"\nvolatile = [\"requsted_at\"]\n\
                inputs = { requested_at = \"{{trigger.at}}\" }\n";
    let err = Workflow::from_toml(text).expect_err("a typo in TOML");
    assert!(err.to_string().contains("\"requsted_at\" names no input field: `inputs` has `requested_at`"), "{err}");
}

/// The example error in `signup.toml`'s comment is what the engine prints for the mistake the comment describes.
#[test]
fn the_example_error_in_signup_toml_is_the_one_printed() {
    let text = include_str!("../workflows/signup.toml");
    let documented: Vec<&str> = (text.lines())
        .skip_while(|line| !line.starts_with("# Validation errors name"))
        .skip_while(|line| !line.starts_with("#   "))
        .map_while(|line| line.strip_prefix("#   "))
        .collect();
    assert!(!documented.is_empty(), "the example error follows the comment");
    let documented = documented.join(" ");
    // The mistake: the customer of welcome's first write names step "nope".
    let first_write = concat!(
        r#"{ action = "mailer.send_email", "#,
        r#"inputs = { to = "{{trigger.email}}", template = "welcome", customer = "{{steps.customer.output.id}}" } }"#
    );
    assert!(text.contains(first_write), "welcome's first write as the test knows it");
    let wrong = text.replace(first_write, &first_write.replace("steps.customer", "steps.nope"));
    let err = Workflow::from_toml(&wrong).expect_err("a reference to no earlier step");
    assert_eq!(err.to_string(), documented);
}

/// `{{{{` writes a literal `{{` in an input string, wherever the string is; `}}` outside a reference needs no escape.
/// No reference starts with `{`, so `{{{{` never opened a valid reference: templates without it read as before.
#[test]
fn escaped_braces_write_a_literal_pair() {
    let wf = Workflow::from_json(
        &json!({"name": "w", "steps": [
            {"id": "a", "action": "c.x", "inputs": {
                "shown": "{{{{trigger.n}}",
                "mixed": "x {{{{ y {{trigger.n}} }} {{{{{{{{",
                "five": "{{{{{",
                "nested": {"list": ["{{{{steps.a.output}}", 1], "plain": "}}}}"},
                "inside_a_path": "{{trigger.a{{{{b}}",
                "spaced": "{{ trigger.n }}"
            }},
            {"id": "b", "action": "c.y", "inputs": {"literal_only": "{{{{steps.a.output.id}}"}}
        ]})
        .to_string(),
    )
    .expect("valid");
    let trigger = engine::doc!({"n": 7, "a{{{{b": "deep"});
    assert_eq!(
        render(first_inputs(&wf), &trigger, &[]),
        json!({
            "shown": "{{trigger.n}}",
            "mixed": "x {{ y 7 }} {{{{",
            "five": "{{{",
            "nested": {"list": ["{{steps.a.output}}", 1], "plain": "}}}}"},
            "inside_a_path": "deep",
            "spaced": 7
        })
    );
    let StepKind::Action { inputs, .. } = &wf.steps[1].kind else { panic!("an action step") };
    assert_eq!(render(inputs, &trigger, &[]), json!({"literal_only": "{{steps.a.output.id}}"}));
    // An escaped reference names no step.
    assert_eq!(wf.outputs_referenced(), [false, false]);
    // A part of the inputs with only escapes in it is a literal, as one with none is.
    assert!(matches!(inputs, Template::Literal(_)), "{inputs:?}");
    // Three braces still open a reference that starts with `{`, which is refused as before, saying how to write it
    // (another template language's raw-value form `{{{x}}}` is the likely intent).
    for (text, shown) in [
        ("{{{trigger.n}}}", "{{{trigger.n}}}"),
        ("x{{{trigger.n}} y}", "{{{trigger.n}}"),
        ("a {{{trigger.n", "{{{trigger.n"),
    ] {
        let err = Workflow::from_json(
            &json!({"name": "w", "steps": [{"id": "a", "action": "c.x", "inputs": {"v": text}}]}).to_string(),
        )
        .expect_err("three braces");
        assert_eq!(err.step, "a");
        assert!(err.message.contains(&format!("at `v`: `{shown}` opens a reference with three braces")), "{err}");
        assert!(err.message.contains("a reference is written `{{trigger...}}`"), "{err}");
    }
}
