//! Message ids (spec message-format.md §8): the offset msgId (store host + physical offset,
//! uppercase hex) and the producer-style `UNIQ_KEY` generator the broker uses when a message
//! arrives without one.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use super::MessageError;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// The two uppercase hex digits of `b`.
fn hex_pair(b: u8) -> [u8; 2] {
    [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xF)]]
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        let [hi, lo] = hex_pair(b);
        out.push(char::from(hi));
        out.push(char::from(lo));
    }
}

/// Longest offset msgId: an IPv6 store host.
const OFFSET_MSG_ID_MAX: usize = 56;

/// An offset msgId formatted on the stack: the send answer carries one per message.
pub struct OffsetMsgId {
    bytes: [u8; OFFSET_MSG_ID_MAX],
    len: usize,
}

impl OffsetMsgId {
    /// The id of a record stored at `physical_offset` on `store_host`.
    pub fn new(store_host: SocketAddr, physical_offset: i64) -> OffsetMsgId {
        let mut id = OffsetMsgId {
            bytes: [0; OFFSET_MSG_ID_MAX],
            len: 0,
        };
        match store_host.ip().to_canonical() {
            IpAddr::V4(v4) => id.push_hex(&v4.octets()),
            IpAddr::V6(v6) => id.push_hex(&v6.octets()),
        }
        id.push_hex(&i32::from(store_host.port()).to_be_bytes());
        id.push_hex(&physical_offset.to_be_bytes());
        id
    }

    fn push_hex(&mut self, bytes: &[u8]) {
        for (&b, pair) in bytes.iter().zip(self.bytes[self.len..].chunks_exact_mut(2)) {
            pair.copy_from_slice(&hex_pair(b));
        }
        self.len += 2 * bytes.len();
    }

    /// The id's text (32 hex chars for IPv4, 56 for IPv6).
    pub fn as_str(&self) -> &str {
        // Only hex digits were written.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

/// The offset msgId (32 hex chars for IPv4, 56 for IPv6).
pub fn offset_msg_id(store_host: SocketAddr, physical_offset: i64) -> String {
    OffsetMsgId::new(store_host, physical_offset)
        .as_str()
        .to_owned()
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decodes an offset msgId into (store host, physical offset). Length 32 → IPv4, 56 → IPv6.
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), MessageError> {
    let bad = |reason| MessageError::BadMessageId {
        id: id.chars().take(64).collect(),
        reason,
    };
    let ip_len = match id.len() {
        32 => 4,
        56 => 16,
        _ => return Err(bad("length must be 32 or 56")),
    };
    let mut raw = [0u8; 28];
    let n = id.len() / 2;
    for (i, pair) in id.as_bytes().chunks_exact(2).enumerate() {
        let hi = hex_val(pair[0]).ok_or_else(|| bad("not hex"))?;
        let lo = hex_val(pair[1]).ok_or_else(|| bad("not hex"))?;
        raw[i] = (hi << 4) | lo;
    }
    let raw = &raw[..n];
    let ip = if ip_len == 4 {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        let mut a = [0u8; 16];
        a.copy_from_slice(&raw[..16]);
        IpAddr::V6(Ipv6Addr::from(a))
    };
    let mut port = [0u8; 4];
    port.copy_from_slice(&raw[ip_len..ip_len + 4]);
    let port = i32::from_be_bytes(port);
    let port = u16::try_from(port).map_err(|_| bad("port out of range"))?;
    let mut off = [0u8; 8];
    off.copy_from_slice(&raw[ip_len + 4..ip_len + 12]);
    Ok((SocketAddr::new(ip, port), i64::from_be_bytes(off)))
}

/// Days since 1970-01-01 → (year, month, day) of the proleptic Gregorian calendar (UTC).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    // Howard Hinnant's civil-from-days algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let d = doy - (153 * mp + 2) / 5 + 1;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

/// Days since the epoch of the first day of (year, month).
fn days_of_month_start(y: i64, m: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

const DAY_MS: i64 = 86_400_000;

/// (start of the UTC month containing `now_ms`, start of the next month), in ms.
pub fn month_bounds_ms(now_ms: i64) -> (i64, i64) {
    let (y, m, _) = civil_from_days(now_ms.div_euclid(DAY_MS));
    let start = days_of_month_start(y, m) * DAY_MS;
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (start, days_of_month_start(ny, nm) * DAY_MS)
}

/// Generates `UNIQ_KEY` values: fixed prefix (ip, pid, per-process random) + ms since the
/// start of the current month + a wrapping counter (§8.2). The month is taken in UTC (Java
/// uses local time); the broker treats the id as opaque, only uniqueness matters.
#[derive(Debug)]
pub struct UniqKeyGenerator {
    prefix: String,
    state: Mutex<UniqState>,
}

#[derive(Debug)]
struct UniqState {
    month_start_ms: i64,
    next_month_ms: i64,
    counter: u16,
}

impl UniqKeyGenerator {
    /// A generator for this process: `ip`, low 16 bits of `pid`, and `instance` in place of
    /// Java's class-loader hash (any per-process random value).
    pub fn new(ip: IpAddr, pid: u32, instance: i32) -> Self {
        let mut prefix = String::with_capacity(40);
        match ip.to_canonical() {
            IpAddr::V4(v4) => push_hex(&mut prefix, &v4.octets()),
            IpAddr::V6(v6) => push_hex(&mut prefix, &v6.octets()),
        }
        push_hex(&mut prefix, &(pid as u16).to_be_bytes());
        push_hex(&mut prefix, &instance.to_be_bytes());
        Self {
            prefix,
            state: Mutex::new(UniqState {
                month_start_ms: 0,
                next_month_ms: i64::MIN,
                counter: 0,
            }),
        }
    }

    /// The next id, for a message stored at wall-clock `now_ms`.
    pub fn next_id(&self, now_ms: i64) -> UniqKey {
        let (since_month, counter) = {
            let mut st = match self.state.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            if now_ms >= st.next_month_ms || now_ms < st.month_start_ms {
                let (start, next) = month_bounds_ms(now_ms);
                st.month_start_ms = start;
                st.next_month_ms = next;
            }
            let c = st.counter;
            st.counter = st.counter.wrapping_add(1);
            ((now_ms - st.month_start_ms) as i32, c)
        };
        let mut id = UniqKeyText::new();
        id.push(&self.prefix);
        id.push_hex(&since_month.to_be_bytes());
        id.push_hex(&counter.to_be_bytes());
        id.finish()
    }
}

/// Longest `UNIQ_KEY` kept without a heap allocation: the broker's own ids are 32 hex chars
/// (56 with an IPv6 host), and so are the ids RocketMQ clients generate.
const UNIQ_KEY_INLINE: usize = 64;

/// A `UNIQ_KEY` value, held inline when it is no longer than the generated ones, since
/// every send carries one from the properties to the response.
#[derive(Clone)]
pub struct UniqKey(UniqKeyRepr);

#[derive(Clone)]
enum UniqKeyRepr {
    Inline {
        bytes: [u8; UNIQ_KEY_INLINE],
        len: u8,
    },
    Heap(String),
}

impl UniqKey {
    /// `s` as a key (inline when short enough).
    pub fn new(s: &str) -> UniqKey {
        let mut t = UniqKeyText::new();
        t.push(s);
        t.finish()
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only whole `&str`s and hex digits are ever written inline.
            UniqKeyRepr::Inline { bytes, len } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            UniqKeyRepr::Heap(s) => s,
        }
    }
}

impl std::ops::Deref for UniqKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for UniqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for UniqKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for UniqKey {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A [`UniqKey`] being written: inline until it outgrows [`UNIQ_KEY_INLINE`].
struct UniqKeyText {
    bytes: [u8; UNIQ_KEY_INLINE],
    len: usize,
    heap: Option<String>,
}

impl UniqKeyText {
    fn new() -> UniqKeyText {
        UniqKeyText {
            bytes: [0; UNIQ_KEY_INLINE],
            len: 0,
            heap: None,
        }
    }

    /// The inline bytes `self.len..self.len + n`, if still inline and they fit.
    fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        match self.heap {
            None => self.bytes.get_mut(self.len..self.len + n),
            Some(_) => None,
        }
    }

    /// The text moved to the heap (once), for what no longer fits inline.
    fn spill(&mut self) -> &mut String {
        let (bytes, len) = (&self.bytes, self.len);
        self.heap.get_or_insert_with(|| {
            let mut h = String::with_capacity(2 * UNIQ_KEY_INLINE);
            h.push_str(std::str::from_utf8(&bytes[..len]).unwrap_or_default());
            h
        })
    }

    fn push(&mut self, s: &str) {
        if let Some(dst) = self.room(s.len()) {
            dst.copy_from_slice(s.as_bytes());
            self.len += s.len();
        } else {
            self.spill().push_str(s);
        }
    }

    fn push_hex(&mut self, b: &[u8]) {
        if let Some(dst) = self.room(2 * b.len()) {
            for (pair, &x) in dst.chunks_exact_mut(2).zip(b) {
                pair[0] = HEX[usize::from(x >> 4)];
                pair[1] = HEX[usize::from(x & 0xF)];
            }
            self.len += 2 * b.len();
        } else {
            push_hex(self.spill(), b);
        }
    }

    fn finish(self) -> UniqKey {
        match self.heap {
            Some(h) => UniqKey(UniqKeyRepr::Heap(h)),
            // len <= UNIQ_KEY_INLINE = 64 fits a u8.
            None => UniqKey(UniqKeyRepr::Inline {
                bytes: self.bytes,
                len: self.len as u8,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_vector() {
        let host: SocketAddr = "192.168.0.20:30911".parse().unwrap();
        let id = offset_msg_id(host, 48);
        assert_eq!(id, "C0A80014000078BF0000000000000030");
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (host, 48));
        assert_eq!(
            decode_offset_msg_id("c0a80014000078bf0000000000000030").unwrap(),
            (host, 48)
        );
    }

    #[test]
    fn ipv6_round_trip_and_errors() {
        let host: SocketAddr = "[2001:db8::1]:10911".parse().unwrap();
        let id = offset_msg_id(host, 1 << 40);
        assert_eq!(id.len(), 56);
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (host, 1 << 40));
        assert!(decode_offset_msg_id("XYZ").is_err());
        assert!(decode_offset_msg_id("G0A80014000078BF0000000000000030").is_err());
        assert!(decode_offset_msg_id("C0A80014FFFFFFFF0000000000000030").is_err());
        assert!(decode_offset_msg_id("C0A8001400007€BF000000000000003").is_err());
    }

    #[test]
    fn month_bounds() {
        // 2023-11-14T22:13:20Z
        let (start, next) = month_bounds_ms(1_700_000_000_000);
        assert_eq!(start, 1_698_796_800_000); // 2023-11-01
        assert_eq!(next, 1_701_388_800_000); // 2023-12-01
        let (s, n) = month_bounds_ms(1_703_980_800_000); // 2023-12-31
        assert_eq!((s, n), (1_701_388_800_000, 1_704_067_200_000));
        assert_eq!(month_bounds_ms(0), (0, 31 * DAY_MS));
    }

    #[test]
    fn uniq_keys_are_unique_and_shaped_like_java() {
        let g = UniqKeyGenerator::new("192.168.0.10".parse().unwrap(), 0x1F94, 0x18B4_AAC2);
        let a = g.next_id(1_698_796_800_000);
        let b = g.next_id(1_698_796_800_000);
        assert_eq!(a, "C0A8000A1F9418B4AAC2000000000000");
        assert_eq!(b, "C0A8000A1F9418B4AAC2000000000001");
        let c = g.next_id(1_698_796_800_000 + 0x1234);
        assert_eq!(&c[20..28], "00001234");
        let v6 = UniqKeyGenerator::new("2001:db8::1".parse().unwrap(), 1, 2).next_id(0);
        assert_eq!(v6.len(), 56);
        assert!(v6.starts_with("20010DB8"));
    }

    #[test]
    fn uniq_keys_of_any_length_keep_their_text() {
        for n in [0, 1, 32, 63, 64, 65, 200] {
            let s: String = ('a'..='z').cycle().take(n).collect();
            assert_eq!(UniqKey::new(&s), s.as_str());
        }
        assert_eq!(UniqKey::new("é→ü").as_str(), "é→ü");
    }
}
