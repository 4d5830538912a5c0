//! RocketMQ's CRC: CRC-32 (IEEE, zlib polynomial) with the top bit cleared.

/// Masked CRC-32 as RocketMQ stores it (`crc & 0x7FFF_FFFF`).
pub fn masked_crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes) & 0x7FFF_FFFF
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn hello_matches_the_spec_vector() {
        assert_eq!(super::masked_crc32(b"Hello"), 0x77D1_8982);
    }
}
