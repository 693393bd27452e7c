//! No code: the package holds the criterion benchmarks (`benches/`), kept out of the test builds.
