//! Reports over results JSON. OWNER: reports work stream.
