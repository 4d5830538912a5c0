//! The consume-queue unit (spec message-format.md §11): 20 bytes, `physical offset i64 |
//! size i32 | tag code i64` big-endian, and the two special units (Java's pre-blank / a hole,
//! and the zeros of an unwritten unit).

/// Bytes per unit.
pub const CQ_UNIT_SIZE: usize = 20;

/// One consume-queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqUnit {
    /// Commit-log physical offset of the record (DLedger: entry pos + 48).
    pub physical_offset: i64,
    /// TOTALSIZE of the record.
    pub size: i32,
    /// Tag hash (§6) or, in `SCHEDULE_TOPIC_XXXX`, the delivery time.
    pub tag_code: i64,
}

/// Java's pre-blank unit, also what a hole is written as.
pub(super) const BLANK: CqUnit = CqUnit {
    physical_offset: 0,
    size: i32::MAX,
    tag_code: 0,
};

/// An unwritten unit.
pub(super) const ZERO: CqUnit = CqUnit {
    physical_offset: 0,
    size: 0,
    tag_code: 0,
};

impl CqUnit {
    /// The 20 stored bytes.
    pub fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut b = [0u8; CQ_UNIT_SIZE];
        b[0..8].copy_from_slice(&self.physical_offset.to_be_bytes());
        b[8..12].copy_from_slice(&self.size.to_be_bytes());
        b[12..20].copy_from_slice(&self.tag_code.to_be_bytes());
        b
    }

    /// Parses 20 stored bytes.
    pub fn decode(b: &[u8; CQ_UNIT_SIZE]) -> Self {
        let mut p = [0u8; 8];
        let mut s = [0u8; 4];
        let mut t = [0u8; 8];
        p.copy_from_slice(&b[0..8]);
        s.copy_from_slice(&b[8..12]);
        t.copy_from_slice(&b[12..20]);
        Self {
            physical_offset: i64::from_be_bytes(p),
            size: i32::from_be_bytes(s),
            tag_code: i64::from_be_bytes(t),
        }
    }

    /// A written unit (real or pre-blank); zeros/torn bytes are not.
    pub(super) fn is_written(&self) -> bool {
        self.physical_offset >= 0 && self.size > 0
    }

    /// A pre-blank unit or a hole: the same bytes as Java's pre-blank (`0, i32::MAX, 0`), so
    /// a reader that looks the record up finds none and moves on.
    pub fn is_blank(&self) -> bool {
        *self == BLANK
    }

    /// End of the record in the commit log.
    pub fn physical_end(&self) -> i64 {
        self.physical_offset + i64::from(self.size)
    }
}
