//! Hand-written JSON encoder for PUSH requests: the replication hot path.
//!
//! Produces exactly the bytes of the serde path (`impl Serialize for PushEntryRequest`, spec
//! dledger.md §3.4): same member order, numbers as decimal, bodies as padded standard base64
//! written straight into a buffer sized up front. Strings that would need JSON escaping fall
//! back to serde_json for that string, so escaping rules stay serde_json's. The tests below
//! compare both paths.

use base64::Engine as _;
use std::io::Write as _;

use super::messages::{DLedgerEntry, PushEntryRequest};

/// Appends the decimal form of `n`.
fn num(buf: &mut Vec<u8>, n: i64) {
    // Writing into a Vec cannot fail.
    let _ = write!(buf, "{n}");
}

/// Appends `s` as a JSON string.
fn string(buf: &mut Vec<u8>, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    } else if serde_json::to_writer(&mut *buf, s).is_err() {
        buf.extend_from_slice(b"\"\""); // unreachable for a Vec writer
    }
}

fn entry(buf: &mut Vec<u8>, e: &DLedgerEntry) {
    buf.extend_from_slice(b"{\"body\":\"");
    let b64 = base64::engine::general_purpose::STANDARD;
    let start = buf.len();
    let len = base64::encoded_len(e.body.len(), true).unwrap_or(0);
    buf.resize(start + len, 0);
    let written = b64.encode_slice(&e.body, &mut buf[start..]).unwrap_or(0);
    buf.truncate(start + written);
    buf.extend_from_slice(b"\",\"bodyCrc\":");
    num(buf, i64::from(e.body_crc));
    buf.extend_from_slice(b",\"chainCrc\":");
    num(buf, i64::from(e.chain_crc));
    buf.extend_from_slice(b",\"channel\":");
    num(buf, i64::from(e.channel));
    buf.extend_from_slice(b",\"index\":");
    num(buf, e.index);
    buf.extend_from_slice(b",\"magic\":");
    num(buf, i64::from(e.magic));
    buf.extend_from_slice(b",\"pos\":");
    num(buf, e.pos);
    buf.extend_from_slice(b",\"size\":");
    num(buf, i64::from(e.size));
    buf.extend_from_slice(b",\"term\":");
    num(buf, e.term);
    buf.push(b'}');
}

fn opt_member(buf: &mut Vec<u8>, key: &[u8], v: &Option<String>) {
    if let Some(v) = v {
        buf.extend_from_slice(key);
        string(buf, v);
    }
}

/// JSON body of a PUSH request, byte-identical to `serde_json::to_vec(r)`.
pub(crate) fn encode_push_request(r: &PushEntryRequest) -> Vec<u8> {
    let batch = !r.batch_entry.is_empty();
    let entries = r.entries();
    let bodies: usize = entries.iter().map(|e| e.body.len()).sum();
    let mut buf = Vec::with_capacity(400 + bodies / 3 * 4 + entries.len() * 160);
    let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
    let first = entries.first().map_or(-1, |e| e.index);
    let last = entries.last().map_or(-1, |e| e.index);
    let total: i64 = if batch {
        r.batch_entry.iter().map(|e| i64::from(e.size)).sum()
    } else {
        0
    };
    buf.extend_from_slice(if batch {
        b"{\"batch\":true,\"batchEntry\":["
    } else {
        b"{\"batch\":false,\"batchEntry\":["
    });
    for (i, e) in r.batch_entry.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        entry(&mut buf, e);
    }
    buf.extend_from_slice(b"],\"code\":");
    num(&mut buf, i64::from(r.code.0));
    buf.extend_from_slice(b",\"commitIndex\":");
    num(&mut buf, r.commit_index);
    buf.extend_from_slice(b",\"count\":");
    num(&mut buf, i64::from(count));
    if let Some(e) = &r.entry {
        buf.extend_from_slice(b",\"entry\":");
        entry(&mut buf, e);
    }
    buf.extend_from_slice(b",\"firstEntryIndex\":");
    num(&mut buf, first);
    opt_member(&mut buf, b",\"group\":", &r.group);
    buf.extend_from_slice(b",\"lastEntryIndex\":");
    num(&mut buf, last);
    opt_member(&mut buf, b",\"leaderId\":", &r.leader_id);
    opt_member(&mut buf, b",\"localId\":", &r.local_id);
    opt_member(&mut buf, b",\"remoteId\":", &r.remote_id);
    buf.extend_from_slice(b",\"term\":");
    num(&mut buf, r.term);
    buf.extend_from_slice(b",\"totalSize\":");
    num(&mut buf, total);
    buf.extend_from_slice(b",\"type\":");
    string(&mut buf, r.push_type.as_str());
    buf.push(b'}');
    buf
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::log::LogEntry;
    use crate::core::messages::{DLedgerCode, PushType};
    use bytes::Bytes;

    fn entry_at(i: i64, body: &[u8]) -> DLedgerEntry {
        DLedgerEntry::from(&LogEntry {
            index: i,
            term: 7,
            pos: i * 1000,
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
                    entry_at(100 + i as i64, &body)
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

    #[test]
    fn fast_output_decodes_back_and_bodies_accept_null_and_escapes() {
        use crate::core::messages::{Request, REQUEST_CODE_PUSH};
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
