//! Reports over flowsim results: duplicate rates with exact (Clopper–Pearson) 95 % bounds, the public guarantees
//! table, Markdown/HTML (inline SVG)/JSON reports with a diff against a baseline, and JUnit XML for the release gate.
//!
//! Invariant: this crate reads `sim`'s results type only; it never links `engine`, so a report can be made
//! anywhere the results JSON files are.
//!
//! The CLI (`flowsim report`, `flowsim check`) uses [`load_results`], [`write_report`] and [`junit`].

pub mod files;
pub mod junit;
pub mod rates;
pub mod report;
pub mod svg;

pub use junit::{GateCase, junit};
pub use rates::Rate;
pub use report::{Error, Report, build_report, load_results, write_report};
pub use sim::results::Results;
