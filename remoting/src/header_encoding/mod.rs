//! The two serializations of the RemotingCommand header (spec §4, §5).
//!
//! Owns: header bytes <-> command fields. Must not: touch the frame length words or the body.

pub mod binary;
pub mod json;
mod json_fast;
pub(crate) mod scan;

/// A top-level key of a JSON header that decoding acts on; every other key is skipped. Shared
/// by the fast parser and the general (serde) one, so both know the same keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeaderKey {
    Code,
    Language,
    Version,
    Opaque,
    Flag,
    Remark,
    ExtFields,
    Other,
}

impl HeaderKey {
    /// The key named `name` (case-sensitive, as Java's fastjson field names).
    pub(crate) fn of(name: &str) -> HeaderKey {
        match name {
            "code" => HeaderKey::Code,
            "language" => HeaderKey::Language,
            "version" => HeaderKey::Version,
            "opaque" => HeaderKey::Opaque,
            "flag" => HeaderKey::Flag,
            "remark" => HeaderKey::Remark,
            "extFields" => HeaderKey::ExtFields,
            _ => HeaderKey::Other,
        }
    }
}
