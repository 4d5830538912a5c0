// Goal: the stored-record codec, offset msgId, consume-queue unit and batch element match the
// golden vectors of spec/message-format.md §14 byte for byte. Method: encode the spec's inputs,
// compare with the hex dumps; decode the dumps back and compare fields.

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

use std::net::SocketAddr;

use broker::message::record::{
    encode_record, patch_physical_offset, patch_queue_offset, patch_store_timestamp,
    physical_offset_of_entry, read_store_timestamp, CrcCheck, MagicPolicy, MessageLimits,
    RecordFields, RecordView, StoredMessage, MAGIC_V1, PHYSICAL_OFFSET_POS, QUEUE_OFFSET_POS,
};
use broker::message::{keys, offset_msg_id, sysflag, tag_code, MessageError};
use broker::store::consume_queue::CqUnit;
use bytes::{Bytes, BytesMut};

fn hex(dump: &str) -> Vec<u8> {
    dump.lines()
        .flat_map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>())
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

const RECORD_DUMP: &str = "\
0000  00 00 00 bb da a3 20 a7 77 d1 89 82 00 00 00 01
0010  00 00 00 00 00 00 00 00 00 00 00 05 00 00 00 00
0020  00 00 00 30 00 00 00 00 00 00 01 8b cf e5 68 00
0030  c0 a8 00 0a 00 00 d4 31 00 00 01 8b cf e5 68 7b
0040  c0 a8 00 14 00 00 78 bf 00 00 00 00 00 00 00 00
0050  00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
0060  70 69 63 54 65 73 74 00 52 43 4c 55 53 54 45 52
0070  01 52 61 66 74 43 6c 75 73 74 65 72 02 54 41 47
0080  53 01 54 61 67 41 02 55 4e 49 51 5f 4b 45 59 01
0090  43 30 41 38 30 30 30 41 31 46 39 34 31 38 42 34
00a0  41 41 43 32 30 30 30 30 30 30 30 30 30 30 30 30
00b0  02 57 41 49 54 01 74 72 75 65 02";

const PROPS: &[u8] = b"CLUSTER\x01RaftCluster\x02TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A1F9418B4AAC2000000000000\x02WAIT\x01true\x02";

fn born() -> SocketAddr {
    "192.168.0.10:54321".parse().unwrap()
}
fn store() -> SocketAddr {
    "192.168.0.20:30911".parse().unwrap()
}

fn golden_fields() -> RecordFields<'static> {
    RecordFields {
        queue_id: 1,
        flag: 0,
        queue_offset: 5,
        physical_offset: 48,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: born(),
        store_timestamp: 1_700_000_000_123,
        store_host: store(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: b"Hello",
        topic: "TopicTest",
        properties: PROPS,
    }
}

#[test]
fn stored_record_matches_golden_bytes() {
    let expect = hex(RECORD_DUMP);
    assert_eq!(expect.len(), 187);
    assert_eq!(PROPS.len(), 82);
    let mut buf = BytesMut::new();
    let n = encode_record(
        &golden_fields(),
        &MessageLimits::default(),
        MagicPolicy::Auto,
        &mut buf,
    )
    .unwrap();
    assert_eq!(n, 187);
    assert_eq!(&buf[..], &expect[..]);
}

#[test]
fn golden_bytes_decode_to_the_inputs() {
    let raw = Bytes::from(hex(RECORD_DUMP));
    let m = StoredMessage::decode(&raw, CrcCheck::Verify).unwrap();
    assert_eq!(m.total_size, 187);
    assert_eq!(m.magic, MAGIC_V1);
    assert_eq!(m.body_crc, 0x77D1_8982);
    assert_eq!(m.view().fields(), golden_fields());
    assert_eq!(m.topic(), "TopicTest");
    assert_eq!(m.property(keys::TAGS), Some(&b"TagA"[..]));
    assert_eq!(m.view().tag_code(), 2_598_919);
    assert_eq!(m.raw.len(), 187);
    assert_eq!(read_store_timestamp(&raw).unwrap(), 1_700_000_000_123);
}

#[test]
fn dledger_entry_zero_gives_physical_offset_48_and_the_spec_msg_id() {
    assert_eq!(physical_offset_of_entry(0), 48);
    assert_eq!(physical_offset_of_entry(235), 283);
    assert_eq!(
        offset_msg_id(store(), 48),
        "C0A80014000078BF0000000000000030"
    );
}

#[test]
fn patching_offsets_into_an_encoded_record() {
    let mut f = golden_fields();
    f.queue_offset = 0;
    f.physical_offset = 0;
    f.store_timestamp = 0;
    let mut buf = BytesMut::new();
    encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
    patch_queue_offset(&mut buf, 5).unwrap();
    patch_physical_offset(&mut buf, 48).unwrap();
    patch_store_timestamp(&mut buf, 1_700_000_000_123).unwrap();
    assert_eq!(&buf[..], &hex(RECORD_DUMP)[..]);
    assert_eq!(QUEUE_OFFSET_POS, 20);
    assert_eq!(PHYSICAL_OFFSET_POS, 28);
    assert!(patch_physical_offset(&mut [0u8; 30], 1).is_err());
}

#[test]
fn consume_queue_unit_matches_golden_bytes() {
    let u = CqUnit {
        physical_offset: 48,
        size: 187,
        tag_code: tag_code(Some("TagA")),
    };
    let expect = hex("0000  00 00 00 00 00 00 00 30 00 00 00 bb 00 00 00 00\n0010  00 27 a8 07");
    assert_eq!(&u.encode()[..], &expect[..]);
}

#[test]
fn ipv6_hosts_shift_fields_and_set_sysflag_bits() {
    let mut f = golden_fields();
    f.born_host = "[2001:db8::10]:54321".parse().unwrap();
    f.store_host = "[2001:db8::20]:30911".parse().unwrap();
    let mut buf = BytesMut::new();
    let n = encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
    assert_eq!(n, 187 + 24);
    let v = RecordView::parse(&buf, CrcCheck::Verify).unwrap();
    assert_eq!(
        v.sys_flag,
        sysflag::BORNHOST_V6 | sysflag::STOREHOSTADDRESS_V6
    );
    assert_eq!(v.born_host, f.born_host);
    assert_eq!(v.store_host, f.store_host);
    assert_eq!(read_store_timestamp(&buf).unwrap(), f.store_timestamp);
    // IPv4-mapped addresses are written as IPv4, like Java's InetSocketAddress.
    f.born_host = "[::ffff:192.168.0.10]:54321".parse().unwrap();
    f.store_host = store();
    buf.clear();
    encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
    assert_eq!(&buf[..], &hex(RECORD_DUMP)[..]);
}

#[test]
fn long_topics_use_magic_v2_unless_v1_is_required() {
    let topic = format!("%RETRY%{}", "g".repeat(140));
    let mut f = golden_fields();
    f.topic = &topic;
    let mut buf = BytesMut::new();
    let n = encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
    let v = RecordView::parse(&buf, CrcCheck::Verify).unwrap();
    assert_eq!(v.topic, topic);
    assert_eq!(v.total_size as usize, n);
    assert_eq!(v.magic, broker::message::record::MAGIC_V2);
    let err = encode_record(&f, &MessageLimits::default(), MagicPolicy::V1Only, &mut buf);
    assert!(matches!(
        err,
        Err(MessageError::TooLong { field: "topic", .. })
    ));
}

#[test]
fn limits_and_corruption_are_typed_errors() {
    let limits = MessageLimits {
        max_body_bytes: 4,
        ..MessageLimits::default()
    };
    let mut buf = BytesMut::new();
    assert_eq!(
        encode_record(&golden_fields(), &limits, MagicPolicy::Auto, &mut buf),
        Err(MessageError::TooLong {
            field: "body",
            len: 5,
            max: 4
        })
    );
    assert!(buf.is_empty(), "nothing written on error");

    let mut raw = hex(RECORD_DUMP);
    raw[88] ^= 1; // flip a body bit
    assert!(matches!(
        RecordView::parse(&raw, CrcCheck::Verify),
        Err(MessageError::CrcMismatch { .. })
    ));
    assert!(RecordView::parse(&raw, CrcCheck::Skip).is_ok());
    let raw = hex(RECORD_DUMP);
    assert!(matches!(
        RecordView::parse(&raw[..100], CrcCheck::Skip),
        Err(MessageError::Truncated {
            need: 187,
            have: 100
        })
    ));
    let mut bad = raw.clone();
    bad[4] = 0;
    assert!(matches!(
        RecordView::parse(&bad, CrcCheck::Skip),
        Err(MessageError::BadMagic { .. })
    ));
    let mut blank = raw.clone();
    blank[4..8].copy_from_slice(&0xCBD4_3194u32.to_be_bytes());
    assert_eq!(
        RecordView::parse(&blank, CrcCheck::Skip),
        Err(MessageError::Blank { size: 187 })
    );
    let mut mismatch = raw;
    mismatch[87] = 6; // body length 6 instead of 5
    assert!(matches!(
        RecordView::parse(&mismatch, CrcCheck::Skip),
        Err(MessageError::SizeMismatch { .. })
    ));
}

#[test]
fn pull_body_decodes_in_order_and_stops_at_garbage() {
    let mut body = BytesMut::new();
    let mut f = golden_fields();
    for i in 0..3 {
        f.queue_offset = i;
        encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut body).unwrap();
    }
    body.extend_from_slice(&[0, 0, 0, 9, 1, 2]);
    let got: Vec<_> = broker::message::decode_records(body.freeze(), CrcCheck::Verify).collect();
    assert_eq!(got.len(), 4);
    for (i, m) in got[..3].iter().enumerate() {
        assert_eq!(m.as_ref().unwrap().queue_offset, i as i64);
    }
    assert!(got[3].is_err());
}
