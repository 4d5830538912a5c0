//! Hand-written JSON codec for PUSH requests: the replication hot path.
//!
//! Encoder: produces exactly the bytes of the serde path (`impl Serialize for
//! PushEntryRequest`, spec dledger.md §3.4): same member order, numbers as decimal, bodies as
//! padded standard base64 written straight into a buffer sized up front. Strings that would
//! need JSON escaping fall back to serde_json for that string, so escaping rules stay
//! serde_json's.
//!
//! Decoder: a strict scanner for the usual shape of a PUSH body (members in any order, plain
//! strings, integer numbers, canonical base64 bodies), which decodes every body of a push into
//! one shared buffer and hands each entry a slice of it (one allocation per push, no
//! intermediate strings). Anything it does not recognise — escapes, floats, unknown members
//! holding objects, duplicates, ordinals, trailing bytes — makes it answer `None`, and the
//! caller uses the serde path, which is the reference for what is accepted and how.
//! The tests below compare both paths on both sides.

use bytes::{Bytes, BytesMut};

use super::b64::{self, OutBuf};
use super::messages::{DLedgerCode, DLedgerEntry, PushEntryRequest, PushType};

/// Appends the decimal form of `n` (as `Display` writes it, without the formatting machinery).
fn num(buf: &mut impl OutBuf, n: i64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = n.unsigned_abs();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        buf.put_byte(b'-');
    }
    buf.put(&digits[i..]);
}

/// Appends `s` as a JSON string.
fn string(buf: &mut impl OutBuf, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        buf.put_byte(b'"');
        buf.put(s.as_bytes());
        buf.put_byte(b'"');
    } else {
        // Serializing a string into a Vec cannot fail; `""` would only stand in for the
        // impossible.
        buf.put(&serde_json::to_vec(s).unwrap_or_else(|_| b"\"\"".to_vec()));
    }
}

/// Appends one entry object exactly as serde writes it. Pushes to different followers carry
/// the same entry objects, so callers may cache this output (see
/// [`encode_push_request_with`]).
pub(crate) fn encode_entry(buf: &mut impl OutBuf, e: &DLedgerEntry) {
    buf.put(b"{\"body\":\"");
    b64::encode_into(buf, &e.body);
    buf.put(b"\",\"bodyCrc\":");
    num(buf, i64::from(e.body_crc));
    buf.put(b",\"chainCrc\":");
    num(buf, i64::from(e.chain_crc));
    buf.put(b",\"channel\":");
    num(buf, i64::from(e.channel));
    buf.put(b",\"index\":");
    num(buf, e.index);
    buf.put(b",\"magic\":");
    num(buf, i64::from(e.magic));
    buf.put(b",\"pos\":");
    num(buf, e.pos);
    buf.put(b",\"size\":");
    num(buf, i64::from(e.size));
    buf.put(b",\"term\":");
    num(buf, e.term);
    buf.put_byte(b'}');
}

fn opt_member(buf: &mut impl OutBuf, key: &[u8], v: &Option<String>) {
    if let Some(v) = v {
        buf.put(key);
        string(buf, v);
    }
}

/// JSON body of a PUSH request, byte-identical to `serde_json::to_vec(r)`.
pub(crate) fn encode_push_request(r: &PushEntryRequest) -> Vec<u8> {
    let mut buf = Vec::with_capacity(encoded_size_hint(r));
    encode_push_request_with(&mut buf, r, encode_entry);
    buf
}

/// Room to reserve for the JSON of `r` (a little more than it takes, usually).
pub(crate) fn encoded_size_hint(r: &PushEntryRequest) -> usize {
    let entries = r.entries();
    let bodies: usize = entries.iter().map(|e| e.body.len()).sum();
    400 + bodies / 3 * 4 + entries.len() * 160
}

/// As [`encode_push_request`], appending to `buf`, with `entry` appending each entry object:
/// it must append exactly what [`encode_entry`] would (a cached copy of it, say).
pub(crate) fn encode_push_request_with<B: OutBuf>(
    buf: &mut B,
    r: &PushEntryRequest,
    mut entry: impl FnMut(&mut B, &DLedgerEntry),
) {
    let batch = !r.batch_entry.is_empty();
    let entries = r.entries();
    let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
    let first = entries.first().map_or(-1, |e| e.index);
    let last = entries.last().map_or(-1, |e| e.index);
    let total: i64 = if batch {
        r.batch_entry.iter().map(|e| i64::from(e.size)).sum()
    } else {
        0
    };
    buf.put(if batch {
        b"{\"batch\":true,\"batchEntry\":["
    } else {
        b"{\"batch\":false,\"batchEntry\":["
    });
    for (i, e) in r.batch_entry.iter().enumerate() {
        if i > 0 {
            buf.put_byte(b',');
        }
        entry(buf, e);
    }
    buf.put(b"],\"code\":");
    num(buf, i64::from(r.code.0));
    buf.put(b",\"commitIndex\":");
    num(buf, r.commit_index);
    buf.put(b",\"count\":");
    num(buf, i64::from(count));
    if let Some(e) = &r.entry {
        buf.put(b",\"entry\":");
        entry(buf, e);
    }
    buf.put(b",\"firstEntryIndex\":");
    num(buf, first);
    opt_member(buf, b",\"group\":", &r.group);
    buf.put(b",\"lastEntryIndex\":");
    num(buf, last);
    opt_member(buf, b",\"leaderId\":", &r.leader_id);
    opt_member(buf, b",\"localId\":", &r.local_id);
    opt_member(buf, b",\"remoteId\":", &r.remote_id);
    buf.put(b",\"term\":");
    num(buf, r.term);
    buf.put(b",\"totalSize\":");
    num(buf, total);
    buf.put(b",\"type\":");
    string(buf, r.push_type.as_str());
    buf.put_byte(b'}');
}

/// Cursor over a JSON text for the strict PUSH scanner. Every method answers `None` when the
/// input leaves the recognised subset (module docs).
struct Scan<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, b: u8) -> Option<()> {
        (self.peek()? == b).then(|| self.i += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.ws();
        let end = self.i + word.len();
        (self.s.get(self.i..end)? == word).then(|| self.i = end)
    }

    /// The raw content of a string without escapes or control characters.
    fn raw_str(&mut self) -> Option<&'a [u8]> {
        let raw = self.unchecked_str()?;
        if raw.iter().any(|&b| b == b'\\' || b < 0x20) {
            return None;
        }
        Some(raw)
    }

    /// The bytes up to the next `"`, unchecked: only for callers that reject `\\` and control
    /// characters themselves.
    fn unchecked_str(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        let len = quote_offset(&self.s[start..])?;
        self.i = start + len + 1;
        Some(&self.s[start..start + len])
    }

    /// A string holding canonical base64, decoded into the front of `out` while its end is
    /// found (one pass over long bodies); returns the decoded length. An escape or control
    /// character is outside the base64 alphabet, so the decoder refuses it.
    fn base64_str(&mut self, out: &mut [u8]) -> Option<usize> {
        self.eat(b'"')?;
        let (chars, n) = b64::decode_until_quote(&self.s[self.i..], out)?;
        self.i += chars + 1;
        Some(n)
    }

    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.raw_str()?).ok().map(str::to_owned)
    }

    fn opt_string(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.string().map(Some)
    }

    /// An integer as JSON writes it (no fraction, exponent or leading zeros).
    fn int(&mut self) -> Option<i64> {
        self.ws();
        let neg = self.s.get(self.i) == Some(&b'-');
        let start = self.i + usize::from(neg);
        let mut end = start;
        while self.s.get(end).is_some_and(u8::is_ascii_digit) {
            end += 1;
        }
        let digits = &self.s[start..end];
        let leading_zero = digits.len() > 1 && digits[0] == b'0';
        // serde_json reads `-0` as a float: leave it to serde.
        let minus_zero = neg && digits == b"0";
        if digits.is_empty() || digits.len() > 19 || leading_zero || minus_zero {
            return None;
        }
        if matches!(self.s.get(end), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        let mut v: i64 = 0;
        for &d in digits {
            v = v.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
        }
        self.i = end;
        Some(if neg { -v } else { v })
    }

    fn int32(&mut self) -> Option<i32> {
        i32::try_from(self.int()?).ok()
    }

    /// Skips a number, `true`, `false`, `null` or a plain string (ignored members).
    fn skip_scalar(&mut self) -> Option<()> {
        match self.peek()? {
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'"' => self.raw_str().map(|_| ()),
            _ => self.int().map(|_| ()),
        }
    }

    /// Walks the members of an object, calling `member` with each key; `member` consumes the
    /// value. Duplicate keys are left to serde (which refuses known ones).
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.raw_str()?;
            self.eat(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// Offset of the first `"` in `s`, eight bytes at a time.
fn quote_offset(s: &[u8]) -> Option<usize> {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quotes = LOW * u64::from(b'"');
    let mut chunks = s.chunks_exact(8);
    let mut off = 0;
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w) ^ quotes;
        let found = x.wrapping_sub(LOW) & !x & HIGH;
        if found != 0 {
            return Some(off + (found.trailing_zeros() / 8) as usize);
        }
        off += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'"')
        .map(|p| off + p)
}

/// Members seen in one object, to leave duplicates to serde.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    fn first(&mut self, bit: u32) -> Option<()> {
        let fresh = self.0 & (1 << bit) == 0;
        self.0 |= 1 << bit;
        fresh.then_some(())
    }
}

/// An entry object exactly as [`encode_entry`] writes it (every member, in that order, no
/// escapes): read by matching the member names as literals instead of scanning keys. `None`
/// for anything else; the caller then rereads the object from its start.
fn scan_entry_canonical(p: &mut Scan<'_>, bodies: &mut BytesMut) -> Option<DLedgerEntry> {
    p.literal(b"{\"body\":")?;
    let n = p.base64_str(&mut bodies[..])?;
    p.literal(b",\"bodyCrc\":")?;
    let body_crc = p.int32()?;
    p.literal(b",\"chainCrc\":")?;
    let chain_crc = p.int32()?;
    p.literal(b",\"channel\":")?;
    let channel = p.int32()?;
    p.literal(b",\"index\":")?;
    let index = p.int()?;
    p.literal(b",\"magic\":")?;
    let magic = p.int32()?;
    p.literal(b",\"pos\":")?;
    let pos = p.int()?;
    p.literal(b",\"size\":")?;
    let size = p.int32()?;
    p.literal(b",\"term\":")?;
    let term = p.int()?;
    p.literal(b"}")?;
    Some(DLedgerEntry {
        body: bodies.split_to(n).freeze(),
        body_crc,
        chain_crc,
        channel,
        index,
        magic,
        pos,
        size,
        term,
    })
}

/// One entry object; its body is decoded into the front of `bodies` (zeroed room for every
/// body still to come) and split off from it.
fn scan_entry(p: &mut Scan<'_>, bodies: &mut BytesMut) -> Option<DLedgerEntry> {
    let start = p.i;
    if let Some(e) = scan_entry_canonical(p, bodies) {
        return Some(e);
    }
    p.i = start;
    let mut e = DLedgerEntry {
        body: Bytes::new(),
        body_crc: 0,
        chain_crc: 0,
        channel: 0,
        index: -1,
        magic: 1,
        pos: -1,
        size: 0,
        term: -1,
    };
    let mut seen = Seen::default();
    p.object(|p, key| {
        match key {
            b"body" => {
                seen.first(0)?;
                if p.peek()? == b'n' {
                    p.literal(b"null")?;
                } else {
                    let n = p.base64_str(&mut bodies[..])?;
                    e.body = bodies.split_to(n).freeze();
                }
            }
            b"bodyCrc" => (seen.first(1)?, e.body_crc = p.int32()?).1,
            b"chainCrc" => (seen.first(2)?, e.chain_crc = p.int32()?).1,
            b"channel" => (seen.first(3)?, e.channel = p.int32()?).1,
            b"index" => (seen.first(4)?, e.index = p.int()?).1,
            b"magic" => (seen.first(5)?, e.magic = p.int32()?).1,
            b"pos" => (seen.first(6)?, e.pos = p.int()?).1,
            b"size" => (seen.first(7)?, e.size = p.int32()?).1,
            b"term" => (seen.first(8)?, e.term = p.int()?).1,
            _ => p.skip_scalar()?,
        }
        Some(())
    })?;
    Some(e)
}

/// Decodes a PUSH request body on the fast path; `None` means "use serde" (module docs).
#[cfg(test)]
pub(crate) fn decode_push_request(json: &[u8]) -> Option<PushEntryRequest> {
    decode_push_request_in(json, &mut BytesMut::new())
}

/// As [`decode_push_request`], with the bodies decoded into memory taken from `scratch`:
/// the entries' bodies are slices split off it, and once they are all dropped the next call
/// reuses the same memory (`BytesMut::reserve` reclaims it) instead of allocating afresh.
pub(crate) fn decode_push_request_in(
    json: &[u8],
    scratch: &mut BytesMut,
) -> Option<PushEntryRequest> {
    let mut r = PushEntryRequest {
        batch_entry: Vec::new(),
        code: DLedgerCode::SUCCESS,
        commit_index: -1,
        entry: None,
        group: None,
        leader_id: None,
        local_id: None,
        remote_id: None,
        term: -1,
        push_type: PushType::APPEND,
    };
    // Every body is shorter than 3/4 of the text that encodes it: room for all, zeroed once,
    // each body decoded into its front and split off.
    scratch.clear();
    scratch.resize(json.len() / 4 * 3 + 4, 0);
    let bodies = scratch;
    let mut p = Scan { s: json, i: 0 };
    let mut seen = Seen::default();
    p.object(|p, key| {
        match key {
            b"batchEntry" => {
                seen.first(0)?;
                p.eat(b'[')?;
                if p.peek()? == b']' {
                    p.i += 1;
                    return Some(());
                }
                loop {
                    r.batch_entry.push(scan_entry(p, bodies)?);
                    match p.peek()? {
                        b',' => p.i += 1,
                        b']' => {
                            p.i += 1;
                            return Some(());
                        }
                        _ => return None,
                    }
                }
            }
            b"code" => (seen.first(1)?, r.code = DLedgerCode(p.int32()?)).1,
            b"commitIndex" => (seen.first(2)?, r.commit_index = p.int()?).1,
            b"entry" => {
                seen.first(3)?;
                if p.peek()? == b'n' {
                    p.literal(b"null")?;
                } else {
                    r.entry = Some(scan_entry(p, bodies)?);
                }
            }
            b"group" => (seen.first(4)?, r.group = p.opt_string()?).1,
            b"leaderId" => (seen.first(5)?, r.leader_id = p.opt_string()?).1,
            b"localId" => (seen.first(6)?, r.local_id = p.opt_string()?).1,
            b"remoteId" => (seen.first(7)?, r.remote_id = p.opt_string()?).1,
            b"term" => (seen.first(8)?, r.term = p.int()?).1,
            b"type" => {
                seen.first(9)?;
                let name = std::str::from_utf8(p.raw_str()?).ok()?;
                r.push_type = PushType::ALL.iter().copied().find(|t| t.as_str() == name)?;
            }
            _ => p.skip_scalar()?,
        }
        Some(())
    })?;
    p.ws();
    (p.i == json.len()).then_some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Index, LogEntry, Pos, Term};
    use crate::wire::messages::{DLedgerCode, PushType};
    use bytes::Bytes;

    fn entry_at(i: u64, body: &[u8]) -> DLedgerEntry {
        DLedgerEntry::from(&LogEntry {
            index: Index(i),
            term: Term(7),
            pos: Pos(i * 1000),
            body: Bytes::copy_from_slice(body),
        })
    }

    fn req(
        batch: Vec<DLedgerEntry>,
        single: Option<DLedgerEntry>,
        kind: PushType,
    ) -> PushEntryRequest {
        PushEntryRequest {
            batch_entry: batch,
            code: DLedgerCode::SUCCESS,
            commit_index: 41,
            entry: single,
            group: Some("RaftNode00".into()),
            leader_id: Some("n0".into()),
            local_id: Some("n0".into()),
            remote_id: Some("n1".into()),
            term: 7,
            push_type: kind,
        }
    }

    /// Differential test: the fast path and serde produce the same bytes.
    #[test]
    fn matches_serde_byte_for_byte() {
        let seed: u64 = std::env::var("PUSH_JSON_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed);
        println!("push_json seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut cases = vec![
            req(Vec::new(), None, PushType::COMMIT),
            req(Vec::new(), Some(entry_at(0, b"")), PushType::COMPARE),
            req(Vec::new(), Some(entry_at(3, b"x")), PushType::TRUNCATE),
            req(Vec::new(), Some(entry_at(5, b"hello")), PushType::APPEND),
        ];
        for n in 1..40usize {
            let batch = (0..n)
                .map(|i| {
                    let len = (next() % 1500) as usize;
                    let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    entry_at(100 + i as u64, &body)
                })
                .collect();
            cases.push(req(batch, None, PushType::APPEND));
        }
        let mut odd = req(vec![entry_at(1, b"ab")], None, PushType::APPEND);
        odd.group = Some("g\"q\\\n\u{1}é".into());
        odd.leader_id = None;
        odd.local_id = Some(String::new());
        odd.remote_id = None;
        odd.code = DLedgerCode(-1);
        odd.commit_index = i64::MIN;
        odd.term = i64::MAX;
        cases.push(odd);
        for r in &cases {
            let fast = encode_push_request(r);
            let slow = serde_json::to_vec(r).unwrap();
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(slow).unwrap()
            );
        }
    }

    fn serde_decode(json: &[u8]) -> Option<PushEntryRequest> {
        serde_json::from_slice(json).ok()
    }

    /// Differential test of the decoder: on our own output and on mutations of it, the fast
    /// path either defers (`None`) or agrees with serde exactly — and it never defers on the
    /// encoder's own output.
    #[test]
    fn fast_decoder_agrees_with_serde_or_defers() {
        let seed: u64 = std::env::var("PUSH_JSON_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0xdec0de);
        println!("push_json decoder seed {seed}");
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut texts: Vec<Vec<u8>> = Vec::new();
        for n in 0..12usize {
            let batch: Vec<DLedgerEntry> = (0..n)
                .map(|i| {
                    let len = (next() % 40) as usize;
                    let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    entry_at(5 + i as u64, &body)
                })
                .collect();
            let r = req(batch, None, PushType::APPEND);
            let json = encode_push_request(&r);
            assert_eq!(
                decode_push_request(&json),
                Some(r),
                "own output must take the fast path"
            );
            texts.push(json);
        }
        for kind in [PushType::COMMIT, PushType::COMPARE, PushType::TRUNCATE] {
            let single = (kind != PushType::COMMIT).then(|| entry_at(3, b"xyz"));
            let r = req(Vec::new(), single, kind);
            let json = encode_push_request(&r);
            assert_eq!(decode_push_request(&json), Some(r));
            texts.push(json);
        }
        let handmade: [&[u8]; 12] = [
            br#"{}"#,
            br#" { "type" : "COMMIT" , "term" : 3 } "#,
            br#"{"entry":null,"group":null,"batchEntry":[]}"#,
            br#"{"entry":{"body":null,"index":2},"extra":true,"more":null,"n":-5}"#,
            br#"{"entry":{"body":"Pz8\/Pw=="}}"#,
            br#"{"type":1}"#,
            br#"{"term":1.0}"#,
            br#"{"term":01}"#,
            br#"{"term":1,"term":2}"#,
            br#"{"group":"a"b"}"#,
            br#"{"obj":{"a":1}}"#,
            br#"{"batchEntry":[{"body":"QQ=="},{"body":"QUI="}]} x"#,
        ];
        texts.extend(handmade.iter().map(|t| t.to_vec()));
        let alphabet = b"{}[]\":,0123456789-+.eE \\/=AQnulltruefalse";
        let mut checked = 0;
        for t in &texts {
            let mutations: Vec<Vec<u8>> = (0..300)
                .map(|_| {
                    let mut m = t.clone();
                    if m.is_empty() {
                        return m;
                    }
                    for _ in 0..(1 + next() % 3) {
                        let at = (next() % m.len() as u64) as usize;
                        match next() % 4 {
                            0 => m[at] = alphabet[(next() % alphabet.len() as u64) as usize],
                            1 => m.insert(at, alphabet[(next() % alphabet.len() as u64) as usize]),
                            2 => {
                                m.remove(at);
                            }
                            _ => m.truncate(at),
                        }
                        if m.is_empty() {
                            break;
                        }
                    }
                    m
                })
                .chain(std::iter::once(t.clone()))
                .collect();
            for m in mutations {
                let slow = serde_decode(&m);
                if let Some(fast) = decode_push_request(&m) {
                    assert_eq!(Some(fast), slow, "{}", String::from_utf8_lossy(&m));
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "too few fast-path cases: {checked}");
    }

    #[test]
    fn fast_output_decodes_back_and_bodies_accept_null_and_escapes() {
        use crate::wire::messages::{Request, REQUEST_CODE_PUSH};
        let r = req(
            vec![entry_at(1, b"\xff\xfe?>"), entry_at(2, b"")],
            None,
            PushType::APPEND,
        );
        let back = Request::decode_body(REQUEST_CODE_PUSH, &encode_push_request(&r))
            .unwrap()
            .unwrap();
        assert_eq!(back, Request::Push(r));
        let e: DLedgerEntry = serde_json::from_str(r#"{"body":null}"#).unwrap();
        assert!(e.body.is_empty());
        let e: DLedgerEntry = serde_json::from_str(r#"{"body":"Pz8\/Pw=="}"#).unwrap();
        assert_eq!(&e.body[..], b"????");
        assert!(serde_json::from_str::<DLedgerEntry>(r#"{"body":"!!"}"#).is_err());
    }
}
