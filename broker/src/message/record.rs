//! The stored message record (spec message-format.md §2): encode into a reusable `BytesMut`,
//! decode zero-copy, and patch broker-assigned fields in already-encoded bytes.
//!
//! Layout (IPv4 hosts, magic v1; `*` shifts by +12 per IPv6 host):
//!
//! | offset | width | field |
//! | --- | --- | --- |
//! | 0 | 4 | TOTALSIZE |
//! | 4 | 4 | MAGICCODE |
//! | 8 | 4 | BODYCRC |
//! | 12 | 4 | QUEUEID |
//! | 16 | 4 | FLAG |
//! | 20 | 8 | QUEUEOFFSET |
//! | 28 | 8 | PHYSICALOFFSET |
//! | 36 | 4 | SYSFLAG |
//! | 40 | 8 | BORNTIMESTAMP |
//! | 48 | 8/20 | BORNHOST |
//! | 56* | 8 | STORETIMESTAMP |
//! | 64* | 8/20 | STOREHOSTADDRESS |
//! | 72* | 4 | RECONSUMETIMES |
//! | 76* | 8 | PREPARED TRANSACTION OFFSET |
//! | 84* | 4+n | BODY |
//! | … | 1+t / 2+t | TOPIC |
//! | … | 2+p | PROPERTIES |

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use bytes::{BufMut, Bytes, BytesMut};

use super::properties::{find_property, keys, MAX_PROPERTIES_LEN};
use super::{crc::masked_crc32, sysflag, tag, MessageError};

/// Magic of a v1 record (1-byte topic length).
pub const MAGIC_V1: u32 = 0xDAA3_20A7;
/// Magic of a v2 record (2-byte topic length, 5.x).
pub const MAGIC_V2: u32 = 0xDAA3_20AB;
/// Magic of a classic commit-log end-of-file blank.
pub const MAGIC_BLANK: u32 = 0xCBD4_3194;

/// Byte offset of TOTALSIZE.
pub const TOTAL_SIZE_POS: usize = 0;
/// Byte offset of MAGICCODE.
pub const MAGIC_POS: usize = 4;
/// Byte offset of BODYCRC.
pub const BODY_CRC_POS: usize = 8;
/// Byte offset of QUEUEID.
pub const QUEUE_ID_POS: usize = 12;
/// Byte offset of FLAG.
pub const FLAG_POS: usize = 16;
/// Byte offset of QUEUEOFFSET (patched by the commit-log adapter under its append lock).
pub const QUEUE_OFFSET_POS: usize = 20;
/// Byte offset of PHYSICALOFFSET (patched by the DLedger append hook with `pos + 48`).
pub const PHYSICAL_OFFSET_POS: usize = 28;
/// Byte offset of SYSFLAG.
pub const SYS_FLAG_POS: usize = 36;
/// Byte offset of BORNTIMESTAMP.
pub const BORN_TIMESTAMP_POS: usize = 40;
/// Byte offset of BORNHOST.
pub const BORN_HOST_POS: usize = 48;
/// Encoded width of an IPv4 host (4 address bytes + int32 port).
pub const HOST_V4_LEN: usize = 8;
/// Encoded width of an IPv6 host (16 address bytes + int32 port).
pub const HOST_V6_LEN: usize = 20;
/// Size of the smallest possible record (IPv4/IPv4/v1, empty body, topic and properties).
pub const MIN_RECORD_LEN: usize = 91;
/// DLedger entry header length: a record's PHYSICALOFFSET is its entry `pos` + this.
pub const DLEDGER_ENTRY_HEADER_LEN: i64 = 48;
/// Default `maxMessageSize` (4 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

// Compile-time checks that the offset table above is consistent.
const _: () = assert!(PHYSICAL_OFFSET_POS == QUEUE_OFFSET_POS + 8);
const _: () = assert!(BORN_HOST_POS == BORN_TIMESTAMP_POS + 8);
const _: () = assert!(MIN_RECORD_LEN == BORN_HOST_POS + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2);

/// The commit-log physical offset of the message held by the DLedger entry at `pos`.
pub fn physical_offset_of_entry(pos: i64) -> i64 {
    pos + DLEDGER_ENTRY_HEADER_LEN
}

/// Limits enforced by the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    /// `maxMessageSize`: the largest body accepted.
    pub max_body_bytes: usize,
    /// Longest topic (bytes).
    pub max_topic_bytes: usize,
    /// Longest properties string (bytes, at most 32767).
    pub max_properties_bytes: usize,
}

impl Default for MessageLimits {
    fn default() -> Self {
        Self {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_topic_bytes: super::topic::RETRY_OR_DLQ_TOPIC_MAX_LEN,
            max_properties_bytes: MAX_PROPERTIES_LEN,
        }
    }
}

/// Which magic the encoder writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MagicPolicy {
    /// v1 unless the topic needs more than 127 bytes (5.x `autoMessageVersionOnTopicLen`).
    #[default]
    Auto,
    /// Always v1 (broker→client pushes, §7.2); topics over 127 bytes are rejected.
    V1Only,
}

/// Everything a stored record holds, borrowed: the send request's fields plus what the broker
/// fills in. The IPv6 sysflag bits are derived from the host addresses by the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordFields<'a> {
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    /// Already-encoded properties string (§5).
    pub properties: &'a [u8],
}

fn canonical(addr: &SocketAddr) -> (IpAddr, u16) {
    (addr.ip().to_canonical(), addr.port())
}

fn put_host(out: &mut BytesMut, ip: &IpAddr, port: u16) {
    match ip {
        IpAddr::V4(v4) => out.put_slice(&v4.octets()),
        IpAddr::V6(v6) => out.put_slice(&v6.octets()),
    }
    out.put_i32(i32::from(port));
}

/// Size of the record these lengths produce (spec §2 size formula).
pub fn record_len(
    born_v6: bool,
    store_v6: bool,
    body_len: usize,
    topic_len_size: usize,
    topic_len: usize,
    properties_len: usize,
) -> usize {
    let host = |v6| if v6 { HOST_V6_LEN } else { HOST_V4_LEN };
    4 + 4
        + 4
        + 4
        + 4
        + 8
        + 8
        + 4
        + 8
        + host(born_v6)
        + 8
        + host(store_v6)
        + 4
        + 8
        + 4
        + body_len
        + topic_len_size
        + topic_len
        + 2
        + properties_len
}

/// Appends one record to `out` and returns its size. Computes BODYCRC, sets/clears the IPv6
/// sysflag bits from the addresses, and picks the magic per `magic`. Nothing is written when a
/// limit is exceeded.
pub fn encode_record(
    fields: &RecordFields<'_>,
    limits: &MessageLimits,
    magic: MagicPolicy,
    out: &mut BytesMut,
) -> Result<usize, MessageError> {
    let too_long = |field, len, max| Err(MessageError::TooLong { field, len, max });
    if fields.body.len() > limits.max_body_bytes {
        return too_long("body", fields.body.len(), limits.max_body_bytes);
    }
    let max_props = limits.max_properties_bytes.min(MAX_PROPERTIES_LEN);
    if fields.properties.len() > max_props {
        return too_long("properties", fields.properties.len(), max_props);
    }
    let topic = fields.topic.as_bytes();
    let max_topic = limits.max_topic_bytes.min(i16::MAX as usize);
    if topic.len() > max_topic {
        return too_long("topic", topic.len(), max_topic);
    }
    let v1 = topic.len() <= 127;
    if !v1 && magic == MagicPolicy::V1Only {
        return too_long("topic", topic.len(), 127);
    }
    let (born_ip, born_port) = canonical(&fields.born_host);
    let (store_ip, store_port) = canonical(&fields.store_host);
    let mut sys_flag = fields.sys_flag & !(sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6);
    if born_ip.is_ipv6() {
        sys_flag |= sysflag::BORNHOST_V6;
    }
    if store_ip.is_ipv6() {
        sys_flag |= sysflag::STOREHOSTADDRESS_V6;
    }
    let total = record_len(
        born_ip.is_ipv6(),
        store_ip.is_ipv6(),
        fields.body.len(),
        if v1 { 1 } else { 2 },
        topic.len(),
        fields.properties.len(),
    );
    let total_i32 = i32::try_from(total).map_err(|_| MessageError::TooLong {
        field: "record",
        len: total,
        max: i32::MAX as usize,
    })?;

    out.reserve(total);
    out.put_i32(total_i32);
    out.put_u32(if v1 { MAGIC_V1 } else { MAGIC_V2 });
    out.put_u32(masked_crc32(fields.body));
    out.put_i32(fields.queue_id);
    out.put_i32(fields.flag);
    out.put_i64(fields.queue_offset);
    out.put_i64(fields.physical_offset);
    out.put_i32(sys_flag);
    out.put_i64(fields.born_timestamp);
    put_host(out, &born_ip, born_port);
    out.put_i64(fields.store_timestamp);
    put_host(out, &store_ip, store_port);
    out.put_i32(fields.reconsume_times);
    out.put_i64(fields.prepared_transaction_offset);
    // Lengths were bounded above, so these casts cannot truncate.
    out.put_i32(fields.body.len() as i32);
    out.put_slice(fields.body);
    if v1 {
        out.put_u8(topic.len() as u8);
    } else {
        out.put_i16(topic.len() as i16);
    }
    out.put_slice(topic);
    out.put_i16(fields.properties.len() as i16);
    out.put_slice(fields.properties);
    Ok(total)
}

fn put_i64_at(record: &mut [u8], pos: usize, v: i64) -> Result<(), MessageError> {
    let have = record.len();
    let slot = record
        .get_mut(pos..pos + 8)
        .ok_or(MessageError::Truncated {
            need: pos + 8,
            have,
        })?;
    slot.copy_from_slice(&v.to_be_bytes());
    Ok(())
}

/// Overwrites QUEUEOFFSET of an encoded record.
pub fn patch_queue_offset(record: &mut [u8], queue_offset: i64) -> Result<(), MessageError> {
    put_i64_at(record, QUEUE_OFFSET_POS, queue_offset)
}

/// Overwrites PHYSICALOFFSET of an encoded record.
pub fn patch_physical_offset(record: &mut [u8], physical_offset: i64) -> Result<(), MessageError> {
    put_i64_at(record, PHYSICAL_OFFSET_POS, physical_offset)
}

/// The leader's append hook (Java's DLedgerCommitLog): writes PHYSICALOFFSET = `pos` + 48
/// into the record held by the entry at `pos`, before CRCs and replication, so every read
/// path serves the stored bytes as they are. Bodies too short to be a record (the election
/// no-op) are left alone. Both `LedgerOptions::append_hook` and the in-memory test log apply it.
pub fn stamp_physical_offset(pos: i64, record: &mut [u8]) {
    let _ = patch_physical_offset(record, physical_offset_of_entry(pos));
}

/// Byte offset of STORETIMESTAMP for a record with this sysflag.
pub fn store_timestamp_pos(sys_flag: i32) -> usize {
    BORN_HOST_POS
        + if sys_flag & sysflag::BORNHOST_V6 != 0 {
            HOST_V6_LEN
        } else {
            HOST_V4_LEN
        }
}

fn get_array<const N: usize>(record: &[u8], pos: usize) -> Result<[u8; N], MessageError> {
    record
        .get(pos..pos + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(MessageError::Truncated {
            need: pos + N,
            have: record.len(),
        })
}

/// SYSFLAG of an encoded record.
pub fn read_sys_flag(record: &[u8]) -> Result<i32, MessageError> {
    get_array::<4>(record, SYS_FLAG_POS).map(i32::from_be_bytes)
}

/// QUEUEOFFSET of an encoded record.
pub fn read_queue_offset(record: &[u8]) -> Result<i64, MessageError> {
    get_array::<8>(record, QUEUE_OFFSET_POS).map(i64::from_be_bytes)
}

/// STORETIMESTAMP of an encoded record (for time lookups without a full decode).
pub fn read_store_timestamp(record: &[u8]) -> Result<i64, MessageError> {
    let pos = store_timestamp_pos(read_sys_flag(record)?);
    get_array::<8>(record, pos).map(i64::from_be_bytes)
}

/// Overwrites STORETIMESTAMP of an encoded record (set at append time).
pub fn patch_store_timestamp(record: &mut [u8], store_timestamp: i64) -> Result<(), MessageError> {
    let pos = store_timestamp_pos(read_sys_flag(record)?);
    put_i64_at(record, pos, store_timestamp)
}

/// Whether the declared TOTALSIZE at the start of `buf` is fully present; `Ok(None)` means
/// "need more bytes" (fewer than 4 available).
pub fn peek_total_size(buf: &[u8]) -> Option<i32> {
    get_array::<4>(buf, TOTAL_SIZE_POS)
        .ok()
        .map(i32::from_be_bytes)
}

/// Cursor over one record whose length is already known; running past it means the lengths
/// inside disagree with TOTALSIZE.
struct Cursor<'a> {
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MessageError> {
        match self.rec.get(self.pos..self.pos.saturating_add(n)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(MessageError::SizeMismatch {
                declared: self.rec.len() as i64,
                computed: self.pos as i64 + n as i64,
            }),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], MessageError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, MessageError> {
        Ok(self.array::<1>()?[0])
    }
    fn i16(&mut self) -> Result<i16, MessageError> {
        self.array().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Result<i32, MessageError> {
        self.array().map(i32::from_be_bytes)
    }
    fn u32(&mut self) -> Result<u32, MessageError> {
        self.array().map(u32::from_be_bytes)
    }
    fn i64(&mut self) -> Result<i64, MessageError> {
        self.array().map(i64::from_be_bytes)
    }
    fn host(&mut self, v6: bool) -> Result<SocketAddr, MessageError> {
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))
        };
        // Java stores the port as an int32; only the low 16 bits are meaningful.
        let port = self.i32()? as u16;
        Ok(SocketAddr::new(ip, port))
    }
    fn len_prefixed(&mut self, len: i64, field: &'static str) -> Result<&'a [u8], MessageError> {
        if len < 0 {
            return Err(MessageError::NegativeLength { field, len });
        }
        self.take(len as usize)
    }
}

/// Bytes from the start of a record through BODYLENGTH when both hosts are IPv4 (every
/// record of an IPv4 deployment): shorter than [`MIN_RECORD_LEN`], so always present.
const V4_FIXED_LEN: usize = BORN_HOST_POS + HOST_V4_LEN + 8 + HOST_V4_LEN + 4 + 8 + 4;
const _: () = assert!(V4_FIXED_LEN <= MIN_RECORD_LEN);

/// The fixed-width fields between MAGICCODE and the body.
#[cfg_attr(test, derive(Debug, PartialEq))]
struct FixedFields {
    body_crc: u32,
    queue_id: i32,
    flag: i32,
    queue_offset: i64,
    physical_offset: i64,
    sys_flag: i32,
    born_timestamp: i64,
    born_host: SocketAddr,
    store_timestamp: i64,
    store_host: SocketAddr,
    reconsume_times: i32,
    prepared_transaction_offset: i64,
    body_len: i32,
}

/// `N` bytes at constant `pos` of a fixed-size prefix: no bounds check once inlined.
#[inline(always)]
fn be<const N: usize, const L: usize>(head: &[u8; L], pos: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&head[pos..pos + N]);
    a
}

impl FixedFields {
    /// The fields at their fixed offsets, read from one checked prefix (the dispatcher parses
    /// every record on every member); `None` for a record with an IPv6 host.
    #[inline]
    fn read_v4(rec: &[u8]) -> Option<FixedFields> {
        let h: &[u8; V4_FIXED_LEN] = rec.first_chunk()?;
        let sys_flag = i32::from_be_bytes(be(h, SYS_FLAG_POS));
        if sys_flag & (sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6) != 0 {
            return None;
        }
        let host = |pos: usize| {
            let ip = Ipv4Addr::from(be::<4, V4_FIXED_LEN>(h, pos));
            // Java stores the port as an int32; only the low 16 bits are meaningful.
            let port = i32::from_be_bytes(be(h, pos + 4)) as u16;
            SocketAddr::new(IpAddr::V4(ip), port)
        };
        const STORE_TS: usize = BORN_HOST_POS + HOST_V4_LEN;
        const STORE_HOST: usize = STORE_TS + 8;
        const RECONSUME: usize = STORE_HOST + HOST_V4_LEN;
        const PREPARED: usize = RECONSUME + 4;
        const BODY_LEN: usize = PREPARED + 8;
        Some(FixedFields {
            body_crc: u32::from_be_bytes(be(h, BODY_CRC_POS)),
            queue_id: i32::from_be_bytes(be(h, QUEUE_ID_POS)),
            flag: i32::from_be_bytes(be(h, FLAG_POS)),
            queue_offset: i64::from_be_bytes(be(h, QUEUE_OFFSET_POS)),
            physical_offset: i64::from_be_bytes(be(h, PHYSICAL_OFFSET_POS)),
            sys_flag,
            born_timestamp: i64::from_be_bytes(be(h, BORN_TIMESTAMP_POS)),
            born_host: host(BORN_HOST_POS),
            store_timestamp: i64::from_be_bytes(be(h, STORE_TS)),
            store_host: host(STORE_HOST),
            reconsume_times: i32::from_be_bytes(be(h, RECONSUME)),
            prepared_transaction_offset: i64::from_be_bytes(be(h, PREPARED)),
            body_len: i32::from_be_bytes(be(h, BODY_LEN)),
        })
    }

    /// The same fields read one by one, for any host widths; the cursor is left at the body.
    fn read_any(rec: &[u8]) -> Result<(FixedFields, Cursor<'_>), MessageError> {
        let mut c = Cursor {
            rec,
            pos: BODY_CRC_POS,
        };
        let body_crc = c.u32()?;
        let queue_id = c.i32()?;
        let flag = c.i32()?;
        let queue_offset = c.i64()?;
        let physical_offset = c.i64()?;
        let sys_flag = c.i32()?;
        let born_timestamp = c.i64()?;
        let born_host = c.host(sys_flag & sysflag::BORNHOST_V6 != 0)?;
        // Fields of a struct literal are evaluated in the order written: wire order.
        let f = FixedFields {
            body_crc,
            queue_id,
            flag,
            queue_offset,
            physical_offset,
            sys_flag,
            born_timestamp,
            born_host,
            store_timestamp: c.i64()?,
            store_host: c.host(sys_flag & sysflag::STOREHOSTADDRESS_V6 != 0)?,
            reconsume_times: c.i32()?,
            prepared_transaction_offset: c.i64()?,
            body_len: c.i32()?,
        };
        Ok((f, c))
    }
}

/// Whether to verify BODYCRC while decoding (recovery/rebuild does, pull paths need not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrcCheck {
    Verify,
    Skip,
}

/// A decoded record borrowing its variable-length parts from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub total_size: i32,
    pub magic: u32,
    pub body_crc: u32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: &'a [u8],
    pub topic: &'a str,
    pub properties: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Decodes the record at the start of `buf` (trailing bytes are ignored). Never panics.
    pub fn parse(buf: &'a [u8], crc: CrcCheck) -> Result<Self, MessageError> {
        let total_size = i32::from_be_bytes(get_array::<4>(buf, TOTAL_SIZE_POS)?);
        let magic = u32::from_be_bytes(get_array::<4>(buf, MAGIC_POS)?);
        if magic == MAGIC_BLANK {
            return Err(MessageError::Blank { size: total_size });
        }
        if magic != MAGIC_V1 && magic != MAGIC_V2 {
            return Err(MessageError::BadMagic { found: magic });
        }
        if total_size < MIN_RECORD_LEN as i32 {
            return Err(MessageError::BadTotalSize { size: total_size });
        }
        let total = total_size as usize;
        let rec = buf.get(..total).ok_or(MessageError::Truncated {
            need: total,
            have: buf.len(),
        })?;
        let (fixed, mut c) = match FixedFields::read_v4(rec) {
            Some(f) => (
                f,
                Cursor {
                    rec,
                    pos: V4_FIXED_LEN,
                },
            ),
            None => FixedFields::read_any(rec)?,
        };
        let body = c.len_prefixed(i64::from(fixed.body_len), "body")?;
        let topic_len = if magic == MAGIC_V1 {
            // Java reads a signed byte; lengths 128..255 come out negative.
            i64::from(c.u8()? as i8)
        } else {
            i64::from(c.i16()?)
        };
        let topic = c.len_prefixed(topic_len, "topic")?;
        let props_len = c.i16()?;
        let properties = c.len_prefixed(i64::from(props_len), "properties")?;
        if c.pos != total {
            return Err(MessageError::SizeMismatch {
                declared: i64::from(total_size),
                computed: c.pos as i64,
            });
        }
        let topic =
            std::str::from_utf8(topic).map_err(|_| MessageError::InvalidUtf8 { field: "topic" })?;
        if crc == CrcCheck::Verify {
            let actual = masked_crc32(body);
            if actual != fixed.body_crc {
                return Err(MessageError::CrcMismatch {
                    expected: fixed.body_crc,
                    actual,
                });
            }
        }
        Ok(Self {
            total_size,
            magic,
            body_crc: fixed.body_crc,
            queue_id: fixed.queue_id,
            flag: fixed.flag,
            queue_offset: fixed.queue_offset,
            physical_offset: fixed.physical_offset,
            sys_flag: fixed.sys_flag,
            born_timestamp: fixed.born_timestamp,
            born_host: fixed.born_host,
            store_timestamp: fixed.store_timestamp,
            store_host: fixed.store_host,
            reconsume_times: fixed.reconsume_times,
            prepared_transaction_offset: fixed.prepared_transaction_offset,
            body,
            topic,
            properties,
        })
    }

    /// The effective value of a property, without allocating.
    pub fn property(&self, key: &str) -> Option<&'a [u8]> {
        find_property(self.properties, key)
    }

    /// Consume-queue tag code of this record (§6); 0 when there is no `TAGS`.
    pub fn tag_code(&self) -> i64 {
        self.property(keys::TAGS).map_or(0, tag::tag_code_of_bytes)
    }

    /// Fields for re-encoding (e.g. a broker→client push or a copy under another topic).
    pub fn fields(&self) -> RecordFields<'a> {
        RecordFields {
            queue_id: self.queue_id,
            flag: self.flag,
            queue_offset: self.queue_offset,
            physical_offset: self.physical_offset,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            store_timestamp: self.store_timestamp,
            store_host: self.store_host,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body: self.body,
            topic: self.topic,
            properties: self.properties,
        }
    }
}

/// A decoded record that shares the input `Bytes` (no copies of body/topic/properties).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub total_size: i32,
    pub magic: u32,
    pub body_crc: u32,
    pub queue_id: i32,
    pub flag: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub sys_flag: i32,
    pub born_timestamp: i64,
    pub born_host: SocketAddr,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    pub reconsume_times: i32,
    pub prepared_transaction_offset: i64,
    pub body: Bytes,
    /// UTF-8 validated at decode; see [`StoredMessage::topic`].
    topic: Bytes,
    pub properties: Bytes,
    /// The whole record (TOTALSIZE bytes), e.g. to copy into a pull response.
    pub raw: Bytes,
}

impl StoredMessage {
    /// Decodes the record at the start of `buf`.
    pub fn decode(buf: &Bytes, crc: CrcCheck) -> Result<Self, MessageError> {
        let v = RecordView::parse(buf, crc)?;
        Ok(Self {
            total_size: v.total_size,
            magic: v.magic,
            body_crc: v.body_crc,
            queue_id: v.queue_id,
            flag: v.flag,
            queue_offset: v.queue_offset,
            physical_offset: v.physical_offset,
            sys_flag: v.sys_flag,
            born_timestamp: v.born_timestamp,
            born_host: v.born_host,
            store_timestamp: v.store_timestamp,
            store_host: v.store_host,
            reconsume_times: v.reconsume_times,
            prepared_transaction_offset: v.prepared_transaction_offset,
            body: buf.slice_ref(v.body),
            topic: buf.slice_ref(v.topic.as_bytes()),
            properties: buf.slice_ref(v.properties),
            raw: buf.slice(..v.total_size as usize),
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        std::str::from_utf8(&self.topic).unwrap_or_default()
    }

    /// Borrowed view of the same record.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            total_size: self.total_size,
            magic: self.magic,
            body_crc: self.body_crc,
            queue_id: self.queue_id,
            flag: self.flag,
            queue_offset: self.queue_offset,
            physical_offset: self.physical_offset,
            sys_flag: self.sys_flag,
            born_timestamp: self.born_timestamp,
            born_host: self.born_host,
            store_timestamp: self.store_timestamp,
            store_host: self.store_host,
            reconsume_times: self.reconsume_times,
            prepared_transaction_offset: self.prepared_transaction_offset,
            body: &self.body,
            topic: self.topic(),
            properties: &self.properties,
        }
    }

    /// The effective value of a property.
    pub fn property(&self, key: &str) -> Option<&[u8]> {
        find_property(&self.properties, key)
    }
}

/// Decodes a pull-response body (`record || record || ...`) like the Java client: records in
/// order, stopping after the first one that does not decode (that error is yielded once).
pub fn decode_records(body: Bytes, crc: CrcCheck) -> RecordIter {
    RecordIter {
        rest: body,
        crc,
        done: false,
    }
}

/// Iterator returned by [`decode_records`].
#[derive(Debug)]
pub struct RecordIter {
    rest: Bytes,
    crc: CrcCheck,
    done: bool,
}

impl Iterator for RecordIter {
    type Item = Result<StoredMessage, MessageError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.rest.is_empty() {
            return None;
        }
        match StoredMessage::decode(&self.rest, self.crc) {
            Ok(m) => {
                let n = m.total_size as usize;
                self.rest = self.rest.slice(n..);
                Some(Ok(m))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The fixed-offset read agrees with the field-by-field one wherever it answers, and
        /// answers for every long-enough prefix without an IPv6 host bit.
        #[test]
        fn fixed_offset_read_agrees_with_the_cursor(
            bytes in proptest::collection::vec(any::<u8>(), 0..120)
        ) {
            let v6 = sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6;
            match FixedFields::read_v4(&bytes) {
                Some(fast) => {
                    let (slow, c) = FixedFields::read_any(&bytes).expect("cursor read");
                    prop_assert_eq!(fast, slow);
                    prop_assert_eq!(c.pos, V4_FIXED_LEN);
                }
                None => prop_assert!(
                    bytes.len() < V4_FIXED_LEN
                        || i32::from_be_bytes(be(bytes.first_chunk::<V4_FIXED_LEN>().unwrap(), SYS_FLAG_POS)) & v6 != 0
                ),
            }
        }
    }
}
