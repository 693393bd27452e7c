//! Webhook intake: signature checks and deduplicated run starts. OWNER: executor work stream.
