//! A profile file with a wrong knob is refused before any simulation, with a message that names the knob and what
//! it must be (the CLI turns it into exit 2).

use scenarios::run::prepare;

fn error_of(toml: &str) -> String {
    error_with_steps(toml, Some(100))
}

fn error_with_steps(toml: &str, steps: Option<u64>) -> String {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    std::fs::write(&file, toml).expect("write the profile");
    match prepare(file.to_str().expect("a UTF-8 path"), 1, steps) {
        Ok(_) => panic!("accepted:\n{toml}"),
        Err(e) => e,
    }
}

#[test]
fn wrong_knobs_are_named_with_what_they_must_be() {
    let cases = [
        ("[connectors.payments]\ntimeout_after_commit_p = \"0.1\"\n", "connectors.payments.timeout_after_commit_p"),
        ("[connectors.payments]\ntimeout_after_commit_p = \"0.1\"\n", "must be a number"),
        ("[world]\nworkers = -1\n", "world.workers = -1 must be a whole number of 0 or more"),
        (
            "[world]\nruns_in_flight_max = 4294967296\n",
            "world.runs_in_flight_max = 4294967296 must be a whole number from 0 to 4294967295",
        ),
        ("[world]\nlease_ms = 1.5\n", "world.lease_ms = 1.5 must be a whole number"),
        ("[world]\nwebhook_dedup_by_object = 1\n", "world.webhook_dedup_by_object = 1 must be true or false"),
        ("[[world]]\nworkers = 2\n", "world must be a table"),
        ("[world]\nlease_ms = 0\n", "world.lease_ms must be at least 1"),
        ("[world]\ncrash_interval_s_mean = -1.0\n", "world.crash_interval_s_mean = -1 must be a number of seconds"),
        ("[world]\nstall_interval_s_mean = nan\n", "world.stall_interval_s_mean = NaN"),
        ("[mix]\nsignup = 1.0\ncheckout = -1.0\n", "mix.checkout = -1 must be a finite weight of 0 or more"),
        ("[mix]\nsignup = 1.0\ncheckout = inf\n", "mix.checkout = inf must be a finite weight"),
        ("[mix]\nsignup = 1e308\ncheckout = 1e308\n", "the mix's weights add up to inf"),
        ("[mix]\nsignup = \"a lot\"\n", "mix.signup = \"a lot\" must be a number"),
        ("[world]\nrun_rate_per_s = 1e-9\n", "world.run_rate_per_s = 0.000000001 must be a number of at least 0.001"),
        // A wait a run may have to sit out whole must be shorter than the heal phase it must end within (I8).
        (
            "[connectors.payments]\ntimeout_ms = 432000000\n",
            "connectors.payments.timeout_ms: 432000000 ms is not shorter than the heal phase (world.heal_s_max = 432000 s)",
        ),
        (
            "[connectors.payments]\nretry_after_ms = 1000000000000\n",
            "connectors.payments.retry_after_ms: 1000000000000",
        ),
        (
            "[connectors.contacts]\nlag_ms_tail_max = 1000000000000\nincident_lag_ms_max = 1000000000000\n",
            "connectors.contacts.lag_ms_tail_max (the lag bound a lookup waits out while lookup_wait_ms is unset): \
             1000000000000 ms",
        ),
        ("[connectors.ledgerly]\nlookup_wait_ms = 432000000\n", "connectors.ledgerly.lookup_wait_ms: 432000000 ms"),
        ("[world]\nlease_ms = 432000000\n", "world.lease_ms: 432000000 ms is not shorter than the heal phase"),
        // A person deciding after the heal phase leaves the run at their desk, in flight, at the end.
        (
            "[world]\nperson_share = 0.5\nperson_delay_ms = 604800000\n",
            "world.person_delay_ms: 604800000 ms is not shorter than the heal phase",
        ),
        // A call that takes longer than the heal phase cannot end within it.
        (
            "[connectors.payments]\nlatency_ms_median = 1000000000\nlatency_ms_p99 = 1000000000\n",
            "connectors.payments.latency_ms_median: 1000000000 ms is not shorter than the heal phase",
        ),
        ("[connectors.email]\nlatency_ms_p99 = 432000000\n", "connectors.email.latency_ms_p99: 432000000 ms"),
        // Waits that follow one another after a crash: each fits, together they do not (QA, stop 51).
        (
            "[world]\nlease_ms = 300000000\n[connectors.contacts]\nlookup_wait_ms = 200000000\n\
             latency_ms_median = 100\nlatency_ms_p99 = 100\n",
            "world.lease_ms 300000000 + connectors.contacts.lookup_wait_ms 200000000 + \
             connectors.contacts.latency_ms_median (the lookup) 100 + connectors.contacts.latency_ms_median 100 = \
             500000200 ms is not shorter than the heal phase (world.heal_s_max = 432000 s): a key of contacts that a \
             crashed worker held waits out the lease, then the lookup's lag bound, then the lookup, then its call",
        ),
        (
            "[world]\nlease_ms = 200000002\n[connectors.payments]\nlookup_wait_ms = 31999998\n\
             latency_ms_median = 100000000\nlatency_ms_p99 = 100000000\n",
            "= 432000000 ms is not shorter than the heal phase",
        ),
        // A lookup that takes half the lease leaves no create ever sent.
        (
            "[world]\nlease_ms = 1000\n[connectors.contacts]\nlatency_ms_median = 500\nlatency_ms_p99 = 500\n",
            "connectors.contacts: even its fastest lookups take about 500 ms (latency_ms_median 500, latency_ms_p99 \
             500), not shorter than half of world.lease_ms 1000: a create is sent only while half its lease is left",
        ),
        (
            "[world]\nlease_ms = 1000\n[connectors.contacts]\nlatency_ms_median = 600\nlatency_ms_p99 = 720\n",
            "even its fastest lookups take about 500 ms",
        ),
        // Half an odd lease in whole milliseconds, as the engine reckons it.
        (
            "[world]\nlease_ms = 1001\n[connectors.contacts]\nlatency_ms_median = 500\nlatency_ms_p99 = 500\n",
            "not shorter than half of world.lease_ms 1001",
        ),
        // A call in doubt as the chaos ends, a person, and the call the person sends again.
        (
            "[world]\nperson_share = 0.5\nperson_delay_ms = 431970000\n",
            "connectors.contacts.timeout_ms 30000 + world.person_delay_ms 431970000 + connectors.contacts.latency_ms_p99 \
             (the person's retry) 600 = 432000600 ms is not shorter than the heal phase (world.heal_s_max = 432000 s): a \
             run whose call to contacts ends in doubt as the chaos ends waits for its answer, then for a person",
        ),
        (
            "[world]\nlease_ms = 1000\n[connectors.payouts]\nlatency_ms_median = 431999000\nlatency_ms_p99 = 431999000\n",
            "world.lease_ms 1000 + connectors.payouts.latency_ms_median 431999000 = 432000000 ms is not shorter than the \
             heal phase (world.heal_s_max = 432000 s): a key of payouts that a crashed worker held waits out the lease, \
             then its call",
        ),
        // The bound a lookup waits out, on a connector that looks nothing up.
        (
            "[connectors.payouts]\nlookup_wait_ms = 5000\n",
            "connectors.payouts.lookup_wait_ms = 5000: payouts has no lookup action, so the bound a lookup waits out \
             would change nothing; connectors with one: contacts, ledgerly, payments",
        ),
        // An optional knob is named when its value is of the wrong kind, like every other.
        ("[connectors.contacts]\nlookup_wait_ms = -5\n", "connectors.contacts.lookup_wait_ms = -5 must be a whole"),
        ("[connectors.contacts]\nlookup_wait_ms = 5.5\n", "connectors.contacts.lookup_wait_ms = 5.5 must be a whole"),
        ("[connectors.contacts]\nlookup_wait_ms = \"5\"\n", "connectors.contacts.lookup_wait_ms = \"5\" must be"),
    ];
    for (toml, want) in cases {
        let error = error_of(toml);
        assert!(error.contains(want), "for\n{toml}the error {error:?} does not say {want:?}");
    }
}

/// Every integer knob given a value past 32 bits is accepted, or refused with a message that names it: never with the
/// profile deserialiser's bare "invalid value … expected u32".
#[test]
fn an_integer_knob_too_large_for_its_type_is_named() {
    let mixed = prepare("mixed", 1, Some(100)).expect("the catalogue's mixed");
    let integer_knobs: Vec<String> = sim::profile::knobs(&mixed.profile)
        .into_iter()
        .filter(|(path, v)| v.is_u64() && !path.starts_with("mix."))
        .map(|(path, _)| path)
        .collect();
    assert!(integer_knobs.len() > 10, "{integer_knobs:?}");
    for path in integer_knobs {
        let (table, knob) = path.rsplit_once('.').expect("a knob's path has a table");
        let toml = format!("[{table}]\n{knob} = 4294967296\n");
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("profile.toml");
        std::fs::write(&file, &toml).expect("write the profile");
        if let Err(e) = prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)) {
            assert!(e.contains(knob) && !e.contains("bad profile"), "{path}: {e}");
        }
    }
}

/// A wait 1 ms shorter than the heal phase fits, and so do the waits that follow a crash, a lease, a lookup's lag bound,
/// the lookup and the call, together 1 ms shorter; a person's delay counts only when a person looks at paused runs.
#[test]
fn waits_within_the_heal_phase_are_accepted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    for toml in [
        "[world]\nperson_share = 0.5\nperson_delay_ms = 431000000\n",
        "[world]\nperson_share = 0.0\nperson_delay_ms = 604800000\n",
        "[world]\nlease_ms = 200000002\n[connectors.payments]\nlookup_wait_ms = 31999997\n\
         latency_ms_median = 100000000\nlatency_ms_p99 = 100000000\n",
        "[world]\nlease_ms = 1000\n[connectors.payouts]\nlatency_ms_median = 431998999\nlatency_ms_p99 = 431998999\n",
        // Half the lookups slower than half the lease: some creates are sent late, and sent again (QA, stop 51).
        "[world]\nlease_ms = 1000\n[connectors.contacts]\nlatency_ms_median = 500\nlatency_ms_p99 = 600\n",
    ] {
        std::fs::write(&file, toml).expect("write");
        if let Err(e) = prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)) {
            panic!("refused:\n{toml}{e}");
        }
    }
}

#[test]
fn integers_still_set_float_knobs_and_zero_weights_are_fine() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    std::fs::write(&file, "[world]\nrun_rate_per_s = 20\n[mix]\nsignup = 1\ncheckout = 0\n").expect("write");
    let prepared = prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)).expect("a valid profile");
    assert_eq!(prepared.profile.world.run_rate_per_s, 20.0);
}

#[test]
fn a_defined_workflow_naming_a_trigger_field_no_trigger_carries_is_refused() {
    let workflow = |field: &str| {
        format!(
            "[mix]\nrefund = 1.0\n[workflows.refund]\nname = \"refund\"\n[[workflows.refund.steps]]\n\
             id = \"refund-customer\"\naction = \"payments.create_customer\"\n\
             inputs = {{ email = \"{{{{trigger.{field}}}}}\" }}\n"
        )
    };
    let error = error_of(&workflow("emial"));
    assert!(error.contains("{{trigger.emial}} names a field the simulation's triggers do not carry"), "{error}");
    assert!(error.contains("email, name, amount"), "{error}");
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    std::fs::write(&file, workflow("email")).expect("write");
    prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)).expect("a field every trigger carries");
    // The list is the triggers' own members.
    let trigger = sim::workflows::trigger("signup", 1, &mut connectors_fake::rng::Rng::new(1));
    let members: Vec<&str> = trigger.as_object().expect("an object").members().iter().map(|(k, _)| &**k).collect();
    let mut fields = sim::workflows::TRIGGER_FIELDS.to_vec();
    fields.sort_unstable();
    let mut members = members;
    members.sort_unstable();
    assert_eq!(members, fields);
}

/// The contacts API is unique on email and the fake forgets a run's contacts when it ends: a defined workflow must
/// create each run's contact with the run's own email (QA: a constant email gave 917 false I2 failures in 1,000 steps).
#[test]
fn a_contact_created_with_an_email_not_the_run_s_own_is_refused() {
    let action = |inputs: &str| {
        format!(
            "[mix]\nx = 1.0\n[workflows.x]\nname = \"x\"\n[[workflows.x.steps]]\nid = \"s1\"\n\
             action = \"contacts.create_contact\"\ninputs = {inputs}\n"
        )
    };
    let writes = |email: &str| {
        format!(
            "[mix]\nx = 1.0\n[workflows.x]\nname = \"x\"\n[[workflows.x.steps]]\nid = \"s1\"\nwrites = [\n\
             {{ action = \"email.send_email\", inputs = {{ to = \"{{{{trigger.email}}}}\" }} }},\n\
             {{ action = \"contacts.create_contact\", inputs = {{ email = \"{email}\" }} }},\n]\n"
        )
    };
    let refused = [
        (action("{ email = \"same@example.com\" }"), "workflows.x, step \"s1\": contacts.create_contact's email"),
        (action("{ email = \"same@example.com\" }"), "does not carry {{trigger.email}}"),
        (action("{ email = \"{{trigger.name}}@example.com\" }"), "does not carry {{trigger.email}}"),
        (action("{ email = 5 }"), "contacts.create_contact's email 5 does not carry"),
        (action("{ name = \"{{trigger.name}}\" }"), "contacts.create_contact needs an `email` input"),
        (writes("same@example.com"), "workflows.x, step \"s1\": contacts.create_contact's email"),
    ];
    for (toml, want) in refused {
        let error = error_of(&toml);
        assert!(error.contains(want), "for\n{toml}the error {error:?} does not say {want:?}");
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    for toml in [
        action("{ email = \"{{trigger.email}}\" }"),
        action("{ email = \"crm+{{ trigger.email }}\" }"),
        writes("{{trigger.email}}"),
    ] {
        std::fs::write(&file, &toml).expect("write");
        if let Err(e) = prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)) {
            panic!("refused:\n{toml}{e}");
        }
    }
}

#[test]
fn steps_zero_in_a_file_is_named_as_the_file_s() {
    let error = error_with_steps("steps = 0\n", None);
    assert!(error.contains("profile.toml: steps must be at least 1"), "{error}");
    assert!(error_with_steps("", Some(0)).contains("--steps must be at least 1"));
    // `--steps` overrides the file's steps, and a wrong one is refused all the same.
    assert!(error_with_steps("steps = -5\n", Some(100)).contains("profile.toml: steps must be at least 1"));
    assert!(error_with_steps("steps = \"many\"\n", Some(100)).contains("profile.toml: steps must be an integer"));
}

/// A step count no machine could simulate is taken for a slip, from the command line or a file; the largest allowed
/// passes.
#[test]
fn steps_beyond_the_most_one_command_simulates_are_refused() {
    let max = scenarios::run::STEPS_MAX;
    let error = error_with_steps("", Some(u64::MAX));
    assert!(error.contains(&format!("--steps = {} is more than {max}", u64::MAX)), "{error}");
    let error = error_with_steps(&format!("steps = {}\n", max + 1), Some(100));
    assert!(error.contains(&format!("profile.toml: steps = {} is more than {max}", max + 1)), "{error}");
    prepare("mixed", 1, Some(max)).expect("the most steps one command simulates");
}

/// A number in a defined workflow's inputs that no key could be derived from (TOML's `nan` would become JSON's
/// `null`) is refused, naming where it is.
#[test]
fn a_defined_workflow_with_a_number_no_key_holds_is_refused() {
    let workflow = |value: &str| {
        format!(
            "[mix]\nrefund = 1.0\n[workflows.refund]\nname = \"refund\"\n[[workflows.refund.steps]]\n\
             id = \"refund-customer\"\naction = \"payments.create_customer\"\n\
             inputs = {{ email = \"{{{{trigger.email}}}}\", f = {value} }}\n"
        )
    };
    // Judged by the literal, as the canonical JSON parser judges it: a float that is an integer no double holds too
    // (read as a double, `9007199254740993.0` would key as `...992`), and a float too small for any.
    let cases = [
        ("nan", "workflows.refund.steps[0].inputs.f = nan: not a number JSON can hold"),
        ("9007199254740993", "f = 9007199254740993: number 9007199254740993"),
        ("9007199254740993.0", "f = 9007199254740993.0: number 9007199254740993.0"),
        ("1e-400", "f = 1e-400: number 1e-400"),
    ];
    for (value, says) in cases {
        let error = error_of(&workflow(value));
        assert!(error.contains("profile.toml") && error.contains(says), "{value}: {error}");
    }
}

/// A key given twice in one table is refused (TOML holds each key once; plain serde_json would keep the last), and the
/// error names the file, the key and its line.
#[test]
fn a_key_given_twice_is_named_with_its_file_and_line() {
    let workflow = "[workflows.refund]\nname = \"refund\"\n[[workflows.refund.steps]]\nid = \"refund-customer\"\n\
                    action = \"payments.create_customer\"\n";
    let cases = [
        ("steps = 200\nsteps = 300\n".to_owned(), "duplicate key `steps` at line 2"),
        ("[mix]\nsignup = 1.0\nsignup = 2.0\n".to_owned(), "duplicate key `signup` at line 3"),
        ("[mix]\nsignup = 1.0\n[mix]\ncheckout = 1.0\n".to_owned(), "duplicate key `mix` at line 3"),
        ("[world]\nworkers = 2\n\"workers\" = 3\n".to_owned(), "duplicate key `\"workers\"` at line 3"),
        (
            format!("[mix]\nrefund = 1.0\n{workflow}inputs = {{ email = \"{{{{trigger.email}}}}\", email = \"x\" }}\n"),
            "duplicate key `email` at line 8",
        ),
        (
            format!("[mix]\nrefund = 1.0\n{workflow}[workflows.refund]\nname = \"x\"\n"),
            "duplicate key `refund` at line 8",
        ),
    ];
    for (toml, want) in cases {
        let error = error_of(&toml);
        // The file as it was given (a full temporary path), then the key.
        assert!(error.contains(&format!("/profile.toml: {want}")), "for\n{toml}the error is {error:?}");
    }
}

/// A workflow the profile defines but the mix gives no weight would never run: refused, naming it and both ways out.
/// A weight of 0 written in the mix is a deliberate choice and stays allowed.
#[test]
fn a_defined_workflow_the_mix_leaves_out_is_refused() {
    let workflow = "[workflows.refund]\nname = \"refund\"\n[[workflows.refund.steps]]\nid = \"refund-customer\"\n\
                    action = \"payments.create_customer\"\ninputs = { email = \"{{trigger.email}}\" }\n";
    for (mix, says) in [("[mix]\nsignup = 1.0\n", "its [mix]"), ("", "the built-in mix (it has no [mix])")] {
        let error = error_of(&format!("{mix}{workflow}"));
        for want in [
            "workflow \"refund\" is defined ([workflows.refund])",
            says,
            "gives it no weight",
            "add it to [mix] (for example `refund = 1.0`) or remove [workflows.refund]",
        ] {
            assert!(error.contains(want), "{mix:?}: {error:?} lacks {want:?}");
        }
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("profile.toml");
    std::fs::write(&file, format!("[mix]\nsignup = 1.0\nrefund = 0\n{workflow}")).expect("write");
    let prepared = prepare(file.to_str().expect("a UTF-8 path"), 1, Some(100)).expect("a weight of 0 is a choice");
    assert_eq!(prepared.profile.mix.get("refund"), Some(&0.0));
}

/// The exclusive fault probabilities must sum to at most one; a profile that sets one of them high may be refused for
/// what the seed drew for the others. The message shows every term, which ones the seed drew, and what to do.
#[test]
fn a_fault_sum_over_one_names_the_terms_the_seed_drew() {
    let error = error_of("[connectors.payments]\nfail_before_commit_p = 1.0\n");
    assert!(error.contains("connectors.payments") && error.contains("fail_before_commit_p 1 +"), "{error}");
    assert!(error.contains("(drawn from seed 1)") && error.contains("set them in the profile too"), "{error}");
    assert!(!error.contains("fail_before_commit_p 1 (drawn"), "the set knob is not marked drawn: {error}");
}

/// Every webhook delivery must fall inside the heal phase, or its change would never be checked (I6); a heal phase of
/// zero leaves no run room to end.
#[test]
fn a_delivery_beyond_the_heal_phase_or_no_heal_phase_is_refused() {
    let error = error_of("[connectors.payments.webhooks]\nreorder_ms_max = 864000000\n");
    assert!(error.contains("connectors.payments.webhooks") && error.contains("heal_s_max"), "{error}");
    for heal in ["0", "18446744073709552"] {
        let error = error_of(&format!("[world]\nheal_s_max = {heal}\n"));
        assert!(error.contains(&format!("world.heal_s_max = {heal} must be between 1 and")), "{error}");
    }
    // A heal phase shorter than every connector's default redelivery window names them all.
    let error = error_of("[world]\nheal_s_max = 100\n");
    assert!(error.contains("connectors contacts, ") && error.contains("payments"), "{error}");
    // A term the seed drew is said to be, since another seed draws another value.
    let error = error_of(
        "[connectors.payments.webhooks]\nredelivery_ms_max = 431999999\nduplicate_spacing_ms = 0\n\
         [world]\nheal_s_max = 432000\n",
    );
    assert!(error.contains("(reorder_ms_max "), "{error}");
    assert!(error.contains(" (drawn from seed 1) + redelivery_ms_max 431999999 + duplicate_spacing_ms 0)"), "{error}");
    assert!(error.ends_with("the drawn ones change with the seed: set them in the profile too"), "{error}");
}
