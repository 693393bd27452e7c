//! The scenario catalogue, its proptest strategies, and the `flowsim` command line.

pub mod catalogue;
pub mod cli;
pub mod run;
pub mod search;
