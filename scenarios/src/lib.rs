//! The scenario catalogue, its proptest strategies, and the `flowsim` command line.

// `print!` panics when standard output is a closed pipe (`flowsim run | head -1`); `out!` and `outln!` do not.
#![warn(clippy::print_stdout)]

// First, so that its `out!` and `outln!` (stdout without a panic on a closed pipe) are in scope in every module.
#[macro_use]
pub mod output;
pub mod catalogue;
pub mod check;
pub mod cli;
pub mod reference;
pub mod report_cmd;
pub mod run;
pub mod search;
pub mod shell;
pub mod sweep;
