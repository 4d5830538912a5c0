//! Message ids (message-format.md §8): the offset id (store host + physical offset) and the
//! producer's unique id (`UNIQ_KEY`).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::ClientError;

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        let _ = write!(out, "{b:02X}");
    }
}

/// Offset message id: address bytes + port (int32) + physical offset (int64), uppercase hex.
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    let mut out = String::with_capacity(56);
    match store_host.ip() {
        IpAddr::V4(ip) => push_hex(&mut out, &ip.octets()),
        IpAddr::V6(ip) => push_hex(&mut out, &ip.octets()),
    }
    push_hex(&mut out, &i32::from(store_host.port()).to_be_bytes());
    push_hex(&mut out, &physical_offset.to_be_bytes());
    out
}

/// Decodes an offset message id (32 hex chars for IPv4, 56 for IPv6).
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), ClientError> {
    let bad = || ClientError::BadMsgId(id.to_owned());
    if !id.is_ascii() || (id.len() != 32 && id.len() != 56) {
        return Err(bad());
    }
    let bytes: Vec<u8> = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16))
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let ip_len = if id.len() == 32 { 4 } else { 16 };
    let ip = if ip_len == 4 {
        IpAddr::V4(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]))
    } else {
        let mut b = [0u8; 16];
        b.copy_from_slice(&bytes[..16]);
        IpAddr::V6(Ipv6Addr::from(b))
    };
    let mut port = [0u8; 4];
    port.copy_from_slice(&bytes[ip_len..ip_len + 4]);
    let port = u16::try_from(i32::from_be_bytes(port)).map_err(|_| bad())?;
    let mut off = [0u8; 8];
    off.copy_from_slice(&bytes[ip_len + 4..ip_len + 12]);
    Ok((SocketAddr::new(ip, port), i64::from_be_bytes(off)))
}

/// Generates `UNIQ_KEY` values: IPv4 address, pid, a per-process random word, ms since the
/// generator started (Java: since the start of the month) and a wrapping counter.
#[derive(Debug)]
pub struct UniqIdGenerator {
    prefix: String,
    start_ms: u64,
    counter: AtomicU16,
}

impl UniqIdGenerator {
    /// A generator for this process and `ip`.
    pub fn new(ip: Ipv4Addr) -> UniqIdGenerator {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let pid = std::process::id();
        // A per-process random word (Java: the class loader hash): time and pid mixed.
        let salt = (now as u32 ^ pid.rotate_left(16)).wrapping_mul(0x9E37_79B9);
        let mut prefix = String::with_capacity(20);
        push_hex(&mut prefix, &ip.octets());
        push_hex(&mut prefix, &(pid as u16).to_be_bytes());
        push_hex(&mut prefix, &salt.to_be_bytes());
        UniqIdGenerator {
            prefix,
            start_ms: now,
            counter: AtomicU16::new(0),
        }
    }

    /// The next id (32 uppercase hex characters).
    pub fn next_id(&self) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let elapsed = now.saturating_sub(self.start_ms) as u32;
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut out = String::with_capacity(32);
        out.push_str(&self.prefix);
        push_hex(&mut out, &elapsed.to_be_bytes());
        push_hex(&mut out, &n.to_be_bytes());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_id_matches_spec_and_round_trips() {
        let addr: SocketAddr = "192.168.0.20:30911".parse().unwrap();
        let id = offset_msg_id(addr, 48);
        assert_eq!(id, "C0A80014000078BF0000000000000030");
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (addr, 48));
        let v6: SocketAddr = "[::1]:30911".parse().unwrap();
        let id6 = offset_msg_id(v6, 1 << 40);
        assert_eq!(id6.len(), 56);
        assert_eq!(decode_offset_msg_id(&id6).unwrap(), (v6, 1 << 40));
        for bad in [
            "",
            "XYZ",
            "C0A80014000078BF000000000000003",
            "é0A80014000078BF000000000000003",
        ] {
            assert!(decode_offset_msg_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn uniq_ids_are_distinct_and_well_formed() {
        let g = UniqIdGenerator::new(Ipv4Addr::LOCALHOST);
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| g.next_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 32);
            assert!(id.starts_with("7F000001"));
            assert!(id
                .chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_lowercase()));
        }
    }
}
