//! The scenario catalogue, its proptest strategies, and the `flowsim` command line.

pub mod catalogue;
pub mod check;
pub mod cli;
pub mod output;
pub mod reference;
pub mod report_cmd;
pub mod run;
pub mod search;
pub mod sweep;
