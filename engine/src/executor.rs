//! The executor: applies the three rules to a run. OWNER: executor work stream.
