//! The message byte layer: pure functions over bytes, no IO, no clocks (callers pass times).
//!
//! * [`record`]: the stored record (§2) — encode into a reusable `BytesMut`, decode zero-copy
//!   ([`RecordView`] over `&[u8]`, [`StoredMessage`] over `Bytes`), patch queue/physical
//!   offsets and the store timestamp in place.
//! * [`properties`]: the `key 0x01 value 0x02` string (§5) and the reserved keys.
//! * [`tag`]: consume-queue tag code (Java `String.hashCode`, §6).
//! * [`batch`]: SEND_BATCH_MESSAGE bodies (§7.1).
//! * [`msg_id`]: offset msgId (§8.1) and `UNIQ_KEY` generation (§8.2).
//! * [`sysflag`], [`topic`]: flag bits, topic names and validation.
//!
//! Invariants: decoders never panic and never allocate proportionally to untrusted lengths;
//! the encoder checks every limit before writing a byte.

pub mod batch;
pub mod crc;
mod error;
pub mod msg_id;
pub mod properties;
pub mod record;
pub mod sysflag;
pub mod tag;
pub mod topic;

pub use batch::{decode_batch, BatchElement};
pub use crc::masked_crc32;
pub use error::MessageError;
pub use msg_id::{decode_offset_msg_id, offset_msg_id, UniqKeyGenerator};
pub use properties::{find_property, keys, MessageProperties};
pub use record::{
    decode_records, encode_record, patch_physical_offset, patch_queue_offset,
    patch_store_timestamp, CrcCheck, MagicPolicy, MessageLimits, RecordFields, RecordView,
    StoredMessage,
};
pub use tag::{java_string_hash, tag_code};
