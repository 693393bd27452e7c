//! The scenario catalogue, its proptest strategies, and the `flowsim` command line.

pub mod cli;
