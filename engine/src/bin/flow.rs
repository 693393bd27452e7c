//! `flow`: the admin command line for a person resolving paused runs in an on-disk ledger.
//!
//! ```text
//! flow paused  --ledger FILE
//! flow resolve --ledger FILE --run ID (--mark-done JSON | --retry | --abort) --by NAME
//! ```
//!
//! `resolve` records the decision against the key the run paused at ([`engine::executor::record_resolution`]); an
//! abort fails the run at once, a mark-done or retry sets it running so the next worker that resumes unfinished runs
//! applies it. Exit codes: 0 done, 1 the ledger refused (unknown run, not paused, storage error), 2 bad usage.

use clap::{ArgGroup, Parser, Subcommand};
use engine::clock::{Clock, SystemClock};
use engine::ledger::sqlite::{Options, SqliteLedger};
use engine::ledger::{Ledger, Resolution};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(name = "flow", about = "Inspect and resolve paused Flow runs")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List paused runs: id, workflow, reason.
    Paused {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
    },
    /// Record a person's decision about a paused run.
    #[command(group(ArgGroup::new("decision").required(true).args(["mark_done", "retry", "abort"])))]
    Resolve {
        /// The engine's on-disk SQLite ledger file.
        #[arg(long, value_name = "FILE")]
        ledger: PathBuf,
        /// The paused run's id (as `flow paused` lists it).
        #[arg(long, value_name = "ID")]
        run: String,
        /// The effect happened: this JSON is the step's output.
        #[arg(long, value_name = "JSON")]
        mark_done: Option<String>,
        /// Send it once more.
        #[arg(long)]
        retry: bool,
        /// Give up: the run fails with "aborted by NAME".
        #[arg(long)]
        abort: bool,
        /// Who decided (recorded with the resolution).
        #[arg(long, value_name = "NAME")]
        by: String,
    },
}

fn open(path: &Path) -> Result<SqliteLedger, String> {
    if !path.exists() {
        return Err(format!("no ledger at {}", path.display()));
    }
    SqliteLedger::open(path, Options::default()).map_err(|e| format!("{}: {e}", path.display()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Paused { ledger } => {
            let ledger = match open(&ledger) {
                Ok(l) => l,
                Err(e) => return fail(2, &e),
            };
            let ids = match ledger.paused_runs() {
                Ok(ids) => ids,
                Err(e) => return fail(1, &e.to_string()),
            };
            for id in ids {
                match ledger.get_run(&id) {
                    Ok(Some(run)) => println!("{}\t{}\t{}", run.run_id, run.workflow, run.reason.unwrap_or_default()),
                    Ok(None) => {}
                    Err(e) => return fail(1, &e.to_string()),
                }
            }
            ExitCode::SUCCESS
        }
        Command::Resolve { ledger, run, mark_done, retry, abort, by } => {
            let resolution = match (mark_done, retry, abort) {
                (Some(json), false, false) => match serde_json::from_str(&json) {
                    Ok(output) => Resolution::MarkDone { output },
                    Err(e) => return fail(2, &format!("--mark-done is not valid JSON: {e}")),
                },
                (None, true, false) => Resolution::Retry,
                (None, false, true) => Resolution::Abort,
                _ => return fail(2, "give exactly one of --mark-done, --retry, --abort"),
            };
            let ledger = match open(&ledger) {
                Ok(l) => l,
                Err(e) => return fail(2, &e),
            };
            match engine::executor::record_resolution(&ledger, &run, &resolution, &by, SystemClock.now_ms()) {
                Ok(status) => {
                    println!("run {run} is now {}", status.as_str());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(1, &e.to_string()),
            }
        }
    }
}

fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("flow: {message}");
    ExitCode::from(code)
}
