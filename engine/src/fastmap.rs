//! Hash maps for lookups on hot paths, with a fixed hasher.
//!
//! The determinism rule (`DESIGN.md`, `clippy.toml`) forbids `std`'s `HashMap` because its iteration order changes
//! from process to process. These maps hash with `foldhash`'s fixed seed instead, so even their iteration order is
//! the same for the same build and the same sequence of inserts and removals. They are still only for maps that are
//! looked up, inserted into and removed from: when order decides behaviour or output (expiry queues, listings,
//! anything printed), use a `BTreeMap` or sort first.
//!
//! Why: a B-tree lookup with string keys walks a few nodes and compares strings at each, and on a simulation's large,
//! cold maps each node is a cache miss. A hash lookup is one probe. The ledger, the fakes and the checker look a run
//! or a key up several times per step.

#![expect(clippy::disallowed_types, reason = "the one place the fixed-seed hash map is defined; see above")]

/// A `HashMap` with a fixed hasher: see the module documentation for when it may be used.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::FixedState>;

/// A `HashSet` with a fixed hasher: see the module documentation for when it may be used.
pub type FastSet<T> = std::collections::HashSet<T, foldhash::fast::FixedState>;
