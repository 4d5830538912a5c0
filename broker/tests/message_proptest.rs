// Goal: the message codecs are total and lossless. Method: proptest — encode/decode identity
// for random records and properties maps; decoders never panic on arbitrary or mutated bytes.
// Reproduce a run with PROPTEST_RNG_SEED=<seed> (proptest also prints the minimal failing
// input and stores it under proptest-regressions/).

#![allow(clippy::unwrap_used)] // helpers outside #[test] fns unwrap too; tests may unwrap

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use broker::message::properties::property_pairs;
use broker::message::record::{
    encode_record, CrcCheck, MagicPolicy, MessageLimits, RecordFields, RecordView,
};
use broker::message::{
    decode_batch, decode_offset_msg_id, decode_records, find_property, java_string_hash,
    offset_msg_id, MessageProperties,
};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<[u8; 16]>(), any::<u16>()).prop_map(|(ip, port)| {
            // Mapped addresses canonicalise to IPv4; keep the strategy to genuine IPv6.
            let mut ip = ip;
            ip[0] |= 0x20;
            SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)
        }),
    ]
}

#[derive(Debug, Clone)]
struct Owned {
    ints: (i32, i32, i64, i64, i32, i64, i64, i32, i64),
    born: SocketAddr,
    store: SocketAddr,
    body: Vec<u8>,
    topic: String,
    props: Vec<u8>,
}

fn props_map() -> impl Strategy<Value = MessageProperties> {
    prop::collection::vec(("[A-Za-z_#.]{1,12}", "[ -~é中]{1,20}"), 0..8).prop_map(|kv| {
        let mut p = MessageProperties::new();
        for (k, v) in kv {
            p.insert(k, v);
        }
        p
    })
}

fn record() -> impl Strategy<Value = Owned> {
    (
        (
            any::<i32>(),
            any::<i32>(),
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
        ),
        addr(),
        addr(),
        prop::collection::vec(any::<u8>(), 0..300),
        "[A-Za-z0-9_%|-]{0,200}",
        props_map(),
    )
        .prop_map(|(ints, born, store, body, topic, props)| Owned {
            ints,
            born,
            store,
            body,
            topic,
            props: props.encode().unwrap().to_vec(),
        })
}

fn fields(o: &Owned) -> RecordFields<'_> {
    let (queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, store_ts, recon, prep) =
        o.ints;
    RecordFields {
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp: born_ts,
        born_host: o.born,
        store_timestamp: store_ts,
        store_host: o.store,
        reconsume_times: recon,
        prepared_transaction_offset: prep,
        body: &o.body,
        topic: &o.topic,
        properties: &o.props,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn record_encode_decode_identity(o in record()) {
        let f = fields(&o);
        let mut buf = BytesMut::new();
        let n = encode_record(&f, &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        let v = RecordView::parse(&buf, CrcCheck::Verify).unwrap();
        let mut expect = f;
        expect.sys_flag &= !0x30;
        if o.born.is_ipv6() { expect.sys_flag |= 0x10; }
        if o.store.is_ipv6() { expect.sys_flag |= 0x20; }
        prop_assert_eq!(v.fields(), expect);
        prop_assert_eq!(v.total_size as usize, n);
        // Re-encoding the decoded record gives the same bytes.
        let mut again = BytesMut::new();
        encode_record(&v.fields(), &MessageLimits::default(), MagicPolicy::Auto, &mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
    }

    #[test]
    fn properties_identity(p in props_map()) {
        let enc = p.encode().unwrap();
        prop_assert_eq!(MessageProperties::parse(&enc).unwrap(), p.clone());
        // A missing final separator is tolerated.
        if !enc.is_empty() {
            prop_assert_eq!(MessageProperties::parse(&enc[..enc.len() - 1]).unwrap(), p);
        }
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(data in prop::collection::vec(any::<u8>(), 0..400)) {
        let _ = RecordView::parse(&data, CrcCheck::Verify);
        let _ = decode_records(Bytes::from(data.clone()), CrcCheck::Skip).count();
        let _ = decode_batch(Bytes::from(data.clone()), 1 << 20).count();
        let _ = MessageProperties::parse(&data);
        let _ = decode_offset_msg_id(&String::from_utf8_lossy(&data));
    }

    #[test]
    fn decoder_never_panics_on_mutated_records(
        o in record(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = BytesMut::new();
        encode_record(&fields(&o), &MessageLimits::default(), MagicPolicy::Auto, &mut buf).unwrap();
        let mut bytes = buf.to_vec();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let cut = cut.index(bytes.len() + 1);
        if let Ok(v) = RecordView::parse(&bytes[..cut], CrcCheck::Verify) {
            prop_assert!(v.total_size as usize <= cut);
        }
        let _ = decode_records(Bytes::from(bytes), CrcCheck::Verify).count();
    }

    #[test]
    fn fast_property_lookup_agrees_with_the_java_pair_rules(
        data in prop::collection::vec(prop_oneof![Just(1u8), Just(2u8), Just(b'K'), Just(b'v'), any::<u8>()], 0..60),
        key in "[Kv\x01]{0,3}",
    ) {
        let slow = if key.is_empty() {
            None
        } else {
            property_pairs(&data).filter(|(k, _)| *k == key.as_bytes()).last().map(|(_, v)| v)
        };
        prop_assert_eq!(find_property(&data, &key), slow);
    }

    #[test]
    fn offset_msg_id_identity(a in addr(), off in any::<i64>()) {
        prop_assert_eq!(decode_offset_msg_id(&offset_msg_id(a, off)).unwrap(), (a, off));
    }

    #[test]
    fn java_hash_matches_utf16_definition(s in "\\PC{0,40}") {
        let reference = s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        prop_assert_eq!(java_string_hash(&s), reference);
    }
}
