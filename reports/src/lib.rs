//! Reports over flowsim results: duplicate rates with exact (Clopper–Pearson) 95 % bounds, the public guarantees
//! table, Markdown/HTML (inline SVG)/JSON reports with a diff against a baseline, and JUnit XML for the release gate.
//!
//! Invariant: this crate reads `sim`'s results type only; it never links `engine`, so a report can be made
//! anywhere the results JSON files are.
//!
//! `flowsim report` reads its inputs itself (strictly, with check files and report.json beside results files) and uses
//! [`report::build_report_from`] and [`report::write_built`]; `flowsim check` uses [`junit()`]. [`load_results`] and
//! [`write_report`] serve a library caller holding results files (`reports/examples/report.rs`).

pub mod files;
pub mod junit;
pub mod rates;
pub mod report;
pub mod svg;

pub use junit::{GateCase, junit};
pub use rates::Rate;
pub use report::{Error, Report, build_report, load_results, write_report};
pub use sim::results::Results;
