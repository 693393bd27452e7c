//! The SQLite ledger (rusqlite, bundled SQLite). OWNER: ledger work stream.
