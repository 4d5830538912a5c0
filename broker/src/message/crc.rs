//! RocketMQ's "CRC": standard CRC-32 (zlib polynomial) with the top bit cleared.

/// Masked CRC-32 as stored in BODYCRC (spec message-format.md §1).
pub fn masked_crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data) & 0x7FFF_FFFF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_matches_spec_example() {
        assert_eq!(crc32fast::hash(b"Hello"), 0xF7D1_8982);
        assert_eq!(masked_crc32(b"Hello"), 0x77D1_8982);
        assert_eq!(masked_crc32(b"Hello"), 2_010_220_930);
    }
}
