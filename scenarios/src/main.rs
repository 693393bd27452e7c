//! `flowsim`: the deterministic simulation and chaos harness of the Flow engine. See `DESIGN.md` for the contract.

/// mimalloc behind a per-thread cache of freed small blocks (`flow-alloc`): the simulation's many short-lived small
/// allocations cost about a third of a run under glibc malloc, and mimalloc's own free lists miss the cache.
/// Allocation addresses never reach behaviour or output (ordered maps only), so this changes speed, not results.
#[global_allocator]
static ALLOCATOR: flow_alloc::Allocator = flow_alloc::Allocator;

fn main() {
    flow_alloc::keep_freed_memory();
    flow_alloc::sqlite_on_mimalloc().expect("SQLite's allocator is set before SQLite starts");
    std::process::exit(scenarios::cli::main());
}
