//! `flow show`: everything the ledger holds about one run, as one JSON document, for a person deciding about a paused
//! run or looking into a reported duplicate; and its refusals. The run is made by the engine on an on-disk ledger.
#![cfg(not(madsim))]

mod common;

use common::*;
use engine::connector::Connector;
use engine::ledger::sqlite::{Options, SqliteLedger, Synchronous};
use engine::ledger::{Ledger, RunStatus};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

/// A new ledger at `path` (fixture writes: no fsync per commit).
fn ledger_at(path: &Path) -> Arc<SqliteLedger> {
    Arc::new(SqliteLedger::open(path, Options { synchronous: Synchronous::Normal, ..Options::default() }).unwrap())
}

/// `flow show`'s document of `run` in the ledger at `file`, which must be shown with nothing on standard error.
fn shown(file: &str, run: &str) -> Value {
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", run]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    // The document nests stored documents three levels down: deeper than serde_json alone reads.
    engine::doc::from_str_deep(&stdout, 200).unwrap_or_else(|e| panic!("not JSON: {e}: {stdout}"))
}

/// A charge that succeeded, then a payout (at most once) whose answer was lost after it committed: the run paused at
/// the payout. `show` gives the run, both keys with their attempts and outcomes, the payout marked as where the run
/// waits, and, once a person marked it done (`flow resolve`), the decision; the file is only read.
#[tokio::test]
async fn show_gives_the_run_its_keys_and_the_decisions_about_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    let bank = Scripted::new(
        "bank",
        vec![keyed("charge", 60_000, false), at_most_once("payout")],
        &[Fate::Apply, Fate::ApplyThenTimeout],
    );
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "bank.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "payout", "action": "bank.payout", "inputs": {"to": "{{trigger.email}}"}}
    ]});
    let e = engine(config("w1"), ledger.clone(), Recorder::new(), &[bank.clone() as Arc<dyn Connector>], &[], &[wf]);
    let trigger = engine::doc!({"amount": 5, "email": "a@example.com"});
    assert_eq!(e.start_run("wf", "r1", &trigger).await.unwrap(), RunStatus::Paused);
    let records = ledger.run_steps("r1").unwrap();
    drop(e);
    drop(ledger);

    let before = snapshot(dir.path());
    let doc = shown(file, "r1");
    assert_eq!(snapshot(dir.path()), before, "show changed the directory");
    assert_eq!(doc["run_id"], "r1");
    assert_eq!(doc["workflow"], "wf");
    assert_eq!(doc["status"], "paused");
    assert!(doc["reason"].as_str().unwrap().contains("at-most-once action may have applied"), "{doc:#}");
    assert_eq!(doc["replays"], 0);
    assert_eq!(doc["trigger"], json!({"amount": 5, "email": "a@example.com"}));
    assert!(doc["created"].as_str().unwrap().ends_with('Z'), "{doc:#}");
    let steps = doc["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{doc:#}");
    let (charge, payout) = (&steps[0], &steps[1]);
    assert_eq!(
        (&charge["step"], &charge["action"], &charge["status"], &charge["attempts"]),
        (&json!("charge"), &json!("bank.charge"), &json!("succeeded"), &json!(1))
    );
    assert_eq!(charge["output"]["id"], 1, "the API's answer as stored: {doc:#}");
    assert_eq!(charge.get("error"), None);
    assert_eq!(charge.get("paused_here"), None, "only the key the run waits at");
    assert_eq!((&payout["step"], &payout["status"]), (&json!("payout"), &json!("unknown")));
    assert_eq!(payout["paused_here"], true);
    assert_eq!(payout["error"], "timeout after commit");
    assert_eq!(payout.get("output"), None);
    assert_eq!(payout["owner"], "w1");
    for (step, record) in steps.iter().zip(&records) {
        assert_eq!(step["key"], record.key.to_string());
        assert_eq!(step["fence"], record.fence);
        assert_eq!(step["inputs_hash"], engine::key::Key(record.inputs_hash).to_string());
    }
    assert_eq!(doc["decisions"], json!([]));
    assert_eq!(doc["replay_history"], json!([]));

    let (code, _, stderr) =
        flow(&["resolve", "--ledger", file, "--run", "r1", "--mark-done", r#"{"id":"p-9"}"#, "--by", "pat"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    let doc = shown(file, "r1");
    assert_eq!(doc["status"], "running");
    let decisions = doc["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{doc:#}");
    assert_eq!(
        (&decisions[0]["by"], &decisions[0]["decision"], &decisions[0]["output"], &decisions[0]["key"]),
        (&json!("pat"), &json!("mark-done"), &json!({"id": "p-9"}), &doc["steps"][1]["key"])
    );
    assert_eq!(doc["steps"][1].get("paused_here"), None, "the run no longer waits");
}

/// Stored text that would rewrite a terminal or forge a line (DEL, a C1 control, a line separator, a bidirectional
/// override, which JSON leaves raw inside a string) is written with JSON's own `\uXXXX`: the same document.
#[test]
fn show_escapes_what_json_leaves_raw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    let text = "a\u{2028}b\u{202e}c\u{7f}\u{9b}31m";
    let trigger = serde_json::to_vec(&json!({"n": text})).unwrap();
    let mut run = run_record("r1", RunStatus::Succeeded, &trigger);
    (run.reason, run.created_ms) = (Some(format!("why: {text}")), 1_714_564_800_123);
    ledger.create_run(run).unwrap();
    drop(ledger);
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "r1"]);
    assert_eq!((code, stderr.as_str()), (0, ""));
    for raw in ['\u{2028}', '\u{202e}', '\u{7f}', '\u{9b}'] {
        assert!(!stdout.contains(raw), "{raw:?} written raw: {stdout:?}");
    }
    assert!(stdout.contains(r#""n": "a\u2028b\u202ec\u007f\u009b31m""#), "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["trigger"]["n"], text);
    assert_eq!(doc["reason"], format!("why: {text}"));
    assert_eq!(doc["created"], "2024-05-01T12:00:00.123Z");
    assert_eq!(doc["steps"], json!([]));
}

/// A blank `--run` is refused before the file is opened, a run the ledger does not hold is named, and a file that is
/// not a ledger is refused: each exit 2, nothing on standard output, the directory as it was.
#[test]
fn show_refuses_what_names_no_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    drop(ledger_at(&path));
    let before = snapshot(dir.path());
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", " "]);
    assert_eq!((code, stdout.as_str(), stderr.as_str()), (2, "", "flow: --run must name a run\n"));
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "nope"]);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert!(stderr.contains("no run \"nope\" in this ledger"), "{stderr}");
    let other = dir.path().join("notes.txt");
    std::fs::write(&other, "not a ledger").unwrap();
    let (code, stdout, stderr) = flow(&["show", "--ledger", other.to_str().unwrap(), "--run", "r1"]);
    assert_eq!((code, stdout.as_str()), (2, ""), "{stderr}");
    std::fs::remove_file(&other).unwrap();
    assert_eq!(snapshot(dir.path()), before);
}

/// Stored outputs as the engine reads them: one as deep as a canonical document may be (128 levels, which serde_json
/// alone does not read) as JSON, a string output as a string, and a damaged one (not JSON) as an object saying it is
/// unreadable, which no output is taken for. A step row the ledger cannot read is named in the refusal (exit 1).
#[test]
fn show_reads_stored_outputs_as_the_engine_does_and_names_a_damaged_row() {
    use engine::ledger::{Claim, Claimed, Completion};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    ledger.create_run(run_record("r1", RunStatus::Running, b"{}")).unwrap();
    let deep = (0..engine::canonical::DEPTH_MAX).fold(json!(1), |inner, _| json!([inner]));
    let outputs = [br#""po_1""#.to_vec(), deep.to_string().into_bytes(), br#""damaged""#.to_vec()];
    for (n, output) in outputs.iter().enumerate() {
        let key = engine::key::Key([n as u8 + 1; 32]);
        let claim = Claim { now_ms: 10 + n as u64, ..fixture_claim(key, "r1", "s") };
        assert!(matches!(ledger.claim(&claim).unwrap(), Claimed::Granted { .. }));
        ledger.complete(&key, 1, Completion::Succeeded { output: output.clone() }, 20).unwrap();
    }
    drop(ledger);
    let damage = |sql: &str| rusqlite::Connection::open(&path).unwrap().execute(sql, []).unwrap();
    damage("UPDATE steps SET output = CAST('po_1' AS BLOB) WHERE output = CAST('\"damaged\"' AS BLOB)");
    let doc = shown(file, "r1");
    let outputs: Vec<&Value> = doc["steps"].as_array().unwrap().iter().map(|s| &s["output"]).collect();
    assert_eq!(outputs[0], &json!("po_1"));
    assert_eq!(outputs[1], &deep, "read as JSON, 128 levels deep");
    assert_eq!(outputs[2]["unreadable"], "po_1", "{doc:#}");
    assert!(outputs[2]["why"].as_str().unwrap().contains("expected value"), "{doc:#}");
    damage("UPDATE steps SET status = 'bogus' WHERE output = CAST('\"po_1\"' AS BLOB)");
    let (code, stdout, stderr) = flow(&["show", "--ledger", file, "--run", "r1"]);
    assert_eq!((code, stdout.as_str()), (1, ""), "{stderr}");
    let key = engine::key::Key([1; 32]);
    assert!(
        stderr.contains(&format!("the step record of key {key} of run \"r1\": unknown step status \"bogus\"")),
        "{stderr}"
    );
}

/// A damaged step record whose fence is 2^63 − 1, in a run that has a plan: `show` answers at once (it looks for an
/// earlier attempt's late answer at the last 10,000 fences, while any plan is left), and the plan is listed. (Found
/// by QA, stop 51: it hashed a marker for every fence below, and ran for ever.)
#[test]
fn show_of_a_damaged_fence_ends() {
    use engine::ledger::Claimed;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    ledger.create_run(run_record("r1", RunStatus::Running, b"{}")).unwrap();
    let key = engine::key::Key([1; 32]);
    assert!(matches!(ledger.claim(&fixture_claim(key, "r1", "s")).unwrap(), Claimed::Granted { .. }));
    ledger.record_plan("r1", &engine::key::Key([2; 32]), br#"["a plan"]"#, 11).unwrap();
    drop(ledger);
    rusqlite::Connection::open(&path).unwrap().execute("UPDATE steps SET fence = 9223372036854775807", []).unwrap();
    let (code, stdout, stderr) = flow_in_time(&["show", "--ledger", file, "--run", "r1"]);
    assert_eq!((code, stderr.as_str()), (0, ""), "{stdout}");
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["steps"][0]["fence"], json!(9223372036854775807u64), "{stdout}");
    assert_eq!(doc["plans"][0]["plan"], json!(["a plan"]), "{stdout}");
}

/// `SqliteLedger::read_together`, which `show` reads through: its reads see one state of the file while a worker
/// commits meanwhile, and the reads after it see the new state; the reader writes nothing.
#[test]
fn reads_taken_together_see_one_state_of_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let ledger = ledger_at(&path);
    ledger.create_run(run_record("r", RunStatus::Running, b"{}")).unwrap();
    // A worker has the ledger open (its -wal and -shm are there), as when a person looks at a live ledger.
    let reader = SqliteLedger::open_read_only(&path, Options::default()).unwrap();
    let worker = rusqlite::Connection::open(&path).unwrap();
    let status = |l: &SqliteLedger| l.get_run("r").map(|run| run.expect("the run").status);
    let seen = reader
        .read_together(|l| {
            let before = status(l)?;
            worker.execute("UPDATE runs SET status = 'paused', reason = 'x' WHERE run_id = 'r'", []).unwrap();
            Ok((before, status(l)?))
        })
        .unwrap();
    assert_eq!(seen, (RunStatus::Running, RunStatus::Running), "one state inside");
    assert_eq!(status(&reader).unwrap(), RunStatus::Paused, "the worker's commit after it");
    drop(ledger);
}

/// The plan a writes step recorded before its first write is shown under the step's key, its writes among the steps
/// with their own keys; a keyed key retried after a timeout shows when it was first attempted (filed among the plans
/// under a key of its own, which is not listed as a plan).
#[tokio::test]
async fn show_gives_the_plans_and_a_retried_keys_first_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flow.db");
    let file = path.to_str().unwrap();
    let ledger = ledger_at(&path);
    let bank = Scripted::new(
        "bank",
        vec![keyed("charge", 60_000, false), keyed("notify", 60_000, false)],
        &[Fate::ApplyThenTimeout],
    );
    let wf = json!({"name": "wf", "steps": [
        {"id": "charge", "action": "bank.charge", "inputs": {"amount": "{{trigger.amount}}"}},
        {"id": "tell", "writes": [
            {"action": "bank.notify", "inputs": {"n": 1}},
            {"action": "bank.notify", "inputs": {"n": 2}}
        ]}
    ]});
    let e = engine(config("w1"), ledger.clone(), Recorder::new(), &[bank.clone() as Arc<dyn Connector>], &[], &[wf]);
    assert_eq!(e.start_run("wf", "r1", &engine::doc!({"amount": 5})).await.unwrap(), RunStatus::Succeeded);
    drop(e);
    drop(ledger);
    let doc = shown(file, "r1");
    let steps = doc["steps"].as_array().unwrap();
    let ids: Vec<&str> = steps.iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert_eq!(ids, ["charge", "tell", "tell"], "{doc:#}");
    let charge = &steps[0];
    assert_eq!(charge["attempts"], 2);
    let (first, last) = (charge["first_attempt"].as_str().unwrap(), charge["last_attempt"].as_str().unwrap());
    assert!(first < last, "first {first}, last {last}");
    assert_eq!(steps[1].get("first_attempt"), None, "only a retried keyed key has one");
    let plans = doc["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 1, "the writes step's plan, not the first attempt's slot: {doc:#}");
    assert_eq!(
        plans[0]["plan"],
        json!([{"action": "bank.notify", "inputs": {"n": 1}}, {"action": "bank.notify", "inputs": {"n": 2}}])
    );
    assert!(steps.iter().all(|s| s["key"] != plans[0]["key"]), "filed under the step's key, not a write's");
}
