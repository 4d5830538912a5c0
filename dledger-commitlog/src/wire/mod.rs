//! The DLedger RPCs as they travel: request/response types, codes, and their JSON codec
//! (with the base64 entry bodies of PUSH), byte-compatible with Java DLedger (spec
//! `dledger.md` §5-§9).
//!
//! The consensus core imports these types the way raft-rs imports its message crate; the
//! runtime's transport and push cache encode and decode through here without reaching into
//! the core.

pub(crate) mod b64;
pub mod messages;
pub(crate) mod push_json;
