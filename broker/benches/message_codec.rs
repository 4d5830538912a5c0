//! Stored-record encode/decode and consume-queue unit codec against a raw baseline measured in
//! the same run: copying the same bytes into a reused `BytesMut` (what any encoder must at
//! least do). Run: `cargo bench -p broker --bench message_codec -- --measurement-time 2`.

use std::hint::black_box;
use std::net::SocketAddr;

use broker::message::record::{
    encode_record, CrcCheck, MagicPolicy, MessageLimits, RecordFields, RecordView,
};
use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const PROPS: &[u8] = b"CLUSTER\x01RaftCluster\x02TAGS\x01TagA\x02UNIQ_KEY\x01C0A8000A1F9418B4AAC2000000000000\x02WAIT\x01true\x02";

fn fields(body: &[u8]) -> RecordFields<'_> {
    let born: SocketAddr = "192.168.0.10:54321".parse().expect("addr");
    let store: SocketAddr = "192.168.0.20:30911".parse().expect("addr");
    RecordFields {
        queue_id: 1,
        flag: 0,
        queue_offset: 5,
        physical_offset: 48,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: born,
        store_timestamp: 1_700_000_000_123,
        store_host: store,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic: "TopicTest",
        properties: PROPS,
    }
}

fn bench(c: &mut Criterion) {
    for size in [128usize, 4096] {
        let body = vec![0x5Au8; size];
        let f = fields(&body);
        let limits = MessageLimits::default();
        let mut encoded = BytesMut::new();
        encode_record(&f, &limits, MagicPolicy::Auto, &mut encoded).expect("encode");
        let encoded = encoded.freeze();

        let mut g = c.benchmark_group(format!("record_{size}B"));
        g.throughput(Throughput::Bytes(encoded.len() as u64));
        let mut buf = BytesMut::with_capacity(encoded.len() * 2);
        g.bench_function("baseline_copy", |b| {
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(black_box(&encoded));
                black_box(buf.len())
            })
        });
        g.bench_function("encode", |b| {
            b.iter(|| {
                buf.clear();
                encode_record(black_box(&f), &limits, MagicPolicy::Auto, &mut buf).expect("encode");
                black_box(buf.len())
            })
        });
        g.bench_function("decode_skip_crc", |b| {
            b.iter(|| {
                let v = RecordView::parse(black_box(&encoded), CrcCheck::Skip).expect("decode");
                black_box(v.tag_code())
            })
        });
        g.bench_function("decode_fields_only", |b| {
            b.iter(|| {
                let v = RecordView::parse(black_box(&encoded), CrcCheck::Skip).expect("decode");
                black_box(v.queue_offset)
            })
        });
        g.bench_function("decode_verify_crc", |b| {
            b.iter(|| {
                let v = RecordView::parse(black_box(&encoded), CrcCheck::Verify).expect("decode");
                black_box(v.tag_code())
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
