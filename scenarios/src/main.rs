//! `flowsim`: the deterministic simulation and chaos harness of the Flow engine. See `DESIGN.md` for the contract.

/// mimalloc: the simulation's many short-lived small allocations cost about a third of a run under glibc malloc.
/// Allocation addresses never reach behaviour or output (ordered maps only), so this changes speed, not results.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(scenarios::cli::main());
}
