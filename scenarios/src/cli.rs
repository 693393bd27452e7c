//! The `flowsim` command line. Exit codes: 0 everything held, 1 an invariant or budget failed, 2 bad usage or input.

use clap::{Parser, Subcommand};
use std::io::{Read, Write};

#[derive(Parser, Debug)]
#[command(name = "flowsim", version, about = "Deterministic simulation and chaos harness for the Flow engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Read JSON on stdin, write its RFC 8785 canonical bytes to stdout.
    Canon,
    /// Read a step's inputs (JSON) on stdin, print the step key in lowercase hex.
    Key {
        #[arg(long)]
        run: String,
        #[arg(long)]
        step: String,
        /// Input paths left out of the key (`a.b.c`), comma separated.
        #[arg(long, value_delimiter = ',')]
        volatile: Vec<String>,
    },
}

/// Runs the command line and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    match cli.command {
        Command::Canon => canon(),
        Command::Key { run, step, volatile } => key(&run, &step, &volatile),
    }
}

fn read_stdin() -> Result<Vec<u8>, i32> {
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut input) {
        eprintln!("flowsim: cannot read standard input: {e}");
        return Err(2);
    }
    Ok(input)
}

fn canon() -> i32 {
    let input = match read_stdin() {
        Ok(i) => i,
        Err(code) => return code,
    };
    match engine::canonical::canonicalize_bytes(&input) {
        Ok(bytes) => {
            let mut out = std::io::stdout().lock();
            if out.write_all(&bytes).and_then(|_| out.flush()).is_err() {
                return 2;
            }
            0
        }
        Err(e) => {
            eprintln!("flowsim canon: {e}");
            2
        }
    }
}

fn key(run: &str, step: &str, volatile: &[String]) -> i32 {
    let input = match read_stdin() {
        Ok(i) => i,
        Err(code) => return code,
    };
    let canonical = match engine::canonical::canonicalize_bytes(&input) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("flowsim key: {e}");
            return 2;
        }
    };
    let key = if volatile.is_empty() {
        engine::key::step_key_canonical(run, step, &canonical)
    } else {
        let value: serde_json::Value = match serde_json::from_slice(&canonical) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("flowsim key: {e}");
                return 2;
            }
        };
        match engine::key::step_key(run, step, &engine::key::without_volatile(&value, volatile)) {
            Ok(k) => k,
            Err(e) => {
                eprintln!("flowsim key: {e}");
                return 2;
            }
        }
    };
    println!("{key}");
    0
}
