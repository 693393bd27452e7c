//! Workflow definitions: named steps with templated inputs. OWNER: executor work stream.
