//! Typed errors of the message byte layer: every rejection names the numbers that matter.

/// Why a message could not be encoded, decoded or parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The buffer ends before the field/record it announces.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    /// TOTALSIZE is negative or smaller than the fixed part of a record.
    #[error("bad total size {size}")]
    BadTotalSize { size: i32 },
    /// MAGICCODE is not a message magic.
    #[error("bad magic code {found:#010x}")]
    BadMagic { found: u32 },
    /// A classic commit-log end-of-file blank (`0xCBD43194`) instead of a message.
    #[error("blank record of {size} bytes")]
    Blank { size: i32 },
    /// TOTALSIZE disagrees with the size recomputed from the lengths inside.
    #[error("size mismatch: declared {declared}, computed {computed}")]
    SizeMismatch { declared: i64, computed: i64 },
    /// A length field inside the record is negative.
    #[error("negative length {len} in field {field}")]
    NegativeLength { field: &'static str, len: i64 },
    /// The stored body CRC does not match the body.
    #[error("body crc mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    /// A field is longer than its limit (body vs maxMessageSize, properties vs int16, ...).
    #[error("{field} too long: {len} > {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    /// A text field is not valid UTF-8.
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    /// A property key or value contains a separator byte (0x01 / 0x02) or the key is empty.
    #[error("property {key:?} cannot be encoded: {reason}")]
    BadProperty { key: String, reason: &'static str },
    /// A topic name breaks the broker's naming rules.
    #[error("illegal topic {topic:?}: {reason}")]
    IllegalTopic { topic: String, reason: &'static str },
    /// An id string (offset msgId) is not what it should be.
    #[error("bad message id {id:?}: {reason}")]
    BadMessageId { id: String, reason: &'static str },
}
