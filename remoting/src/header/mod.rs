//! The two serializations of the RemotingCommand header (spec §4, §5).
//!
//! Owns: header bytes <-> command fields. Must not: touch the frame length words or the body.

pub mod binary;
pub mod json;
mod json_fast;
pub(crate) mod scan;
