//! placeholder until the crate's issue lands
