//! The in-memory ledger: the same contract as SQLite, kept in ordered maps. OWNER: ledger work stream.
