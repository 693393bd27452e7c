//! `flowsim`: the deterministic simulation and chaos harness of the Flow engine. See `DESIGN.md` for the contract.

fn main() {
    std::process::exit(scenarios::cli::main());
}
