//! Fake connectors with fault models and ground truth. OWNER: fakes work stream.
