//! Pure byte layouts of the DLedger files (spec/dledger.md §2). No IO, no allocation past the
//! caller's buffers, no panics on any input.
//!
//! * [`entry`]: 48-byte data entry header, blank record, CRCs.
//! * [`index`]: 32-byte index entry.
//! * [`checkpoint`]: `checkpoint` properties file (end and committed index).
//! * [`member_state`]: `currterm` properties file (term and vote).

pub mod checkpoint;
pub mod crc;
pub mod entry;
pub mod index;
pub mod member_state;
mod properties;

/// A small state file (`checkpoint`, `currterm`) that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateFileError {
    /// Not UTF-8 text.
    #[error("state file is not UTF-8 text")]
    NotText,
    /// A key's value is not a valid number.
    #[error("bad value {value:?} for key {key}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
    },
    /// A required key is absent.
    #[error("missing key {0}")]
    MissingKey(&'static str),
}
