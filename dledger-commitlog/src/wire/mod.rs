//! The DLedger RPCs as they travel: request/response types, codes, and their JSON codec
//! (with the base64 entry bodies of PUSH), byte-compatible with Java DLedger (spec
//! `dledger.md` §5-§9).
//!
//! Layering: `wire` depends on [`crate::types`] (the index/term/pos newtypes and
//! [`crate::types::LogEntry`]) and on nothing of the core; the consensus core imports these
//! types the way raft-rs imports its message crate, and the runtime's transport and push
//! cache encode and decode through here without reaching into the core.
//!
//! The structs keep DLedger's representation (`long` fields, `-1` for none), so the bytes
//! are exactly Java's; their typed accessors and constructors are the only place where an
//! RPC field turns into `Option<Index>` / `Option<Term>` and back.

pub(crate) mod b64;
pub mod messages;
pub(crate) mod push_json;

#[cfg(test)]
mod tests {
    /// The layering rule above, checked on the sources.
    #[test]
    fn wire_does_not_import_the_core() {
        for (file, src) in [
            ("b64.rs", include_str!("b64.rs")),
            ("messages.rs", include_str!("messages.rs")),
            ("push_json.rs", include_str!("push_json.rs")),
        ] {
            assert!(
                !src.contains("crate::core") && !src.contains("super::super"),
                "wire/{file} reaches into the core"
            );
        }
    }
}
