//! A cheap hasher for maps whose keys this process chooses itself: the waiters by opaque
//! (waiters.rs), the processors by request code (processor.rs) and the client's connections
//! by address (client.rs).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hasher for keys this process chooses itself (opaques are local counters, addresses come
/// from configuration and routes), so a multiplicative hash is enough: SipHash showed up on
/// every request.
#[derive(Default)]
pub(crate) struct LocalKeyHasher(u64);

impl LocalKeyHasher {
    fn mix(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for LocalKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.mix(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.mix(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
    fn write_i32(&mut self, v: i32) {
        self.mix(u64::from(v as u32));
    }
}

/// Map with [`LocalKeyHasher`].
pub(crate) type LocalKeyMap<K, V> = HashMap<K, V, BuildHasherDefault<LocalKeyHasher>>;
