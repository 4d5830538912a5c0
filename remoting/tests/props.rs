//! Goal: FZ-01 (arbitrary bytes in arbitrary chunkings never panic, stay within the buffer
//! limit, and decode the same as the whole input), FZ-02 (structured mutations of the golden
//! vectors give the §4.1 outcome), FZ-03 (encode/decode identity in both serializations).
//! Method: proptest with a fixed, printed seed (set `REMOTING_PROPTEST_SEED` to replay).

#![allow(clippy::unwrap_used)]

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use remoting::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN};
use remoting::{FrameError, LanguageCode, RemotingCommand, SerializeType};

fn config(cases: u32) -> Config {
    let seed = std::env::var("REMOTING_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("proptest seed: {seed} (replay with REMOTING_PROPTEST_SEED={seed})");
    Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    }
}

#[derive(Debug, PartialEq)]
enum End {
    Incomplete(usize),
    Error(String),
}

/// Decodes `input` fed in pieces of the given sizes; returns the frames and how it ended.
fn decode_chunked(input: &[u8], chunks: &[usize], max: usize) -> (Vec<RemotingCommand>, End) {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let mut pos = 0;
    let mut sizes = chunks.iter().copied().cycle();
    loop {
        loop {
            match decode_frame(&mut buf, max) {
                Ok(Some(f)) => match RemotingCommand::from_frame(f) {
                    Ok(c) => out.push(c),
                    Err(e) => return (out, End::Error(e.to_string())),
                },
                Ok(None) => break,
                Err(e) => return (out, End::Error(e.to_string())),
            }
        }
        // Buffered bytes never exceed one (partial) frame.
        assert!(buf.len() < max + 8, "buffered {} > limit", buf.len());
        if pos >= input.len() {
            return (out, End::Incomplete(buf.len()));
        }
        let n = sizes.next().unwrap_or(1).max(1).min(input.len() - pos);
        buf.extend_from_slice(&input[pos..pos + n]);
        pos += n;
    }
}

fn arb_command() -> impl Strategy<Value = RemotingCommand> {
    (
        any::<i16>(),
        0u8..14,
        any::<i16>(),
        any::<i32>(),
        any::<i32>(),
        proptest::option::of("[^\u{0}]{0,20}"),
        proptest::collection::btree_map("[a-zA-Z]{1,8}", "[ -~\u{1}\u{2}é]{1,12}", 0..6),
        proptest::collection::vec(any::<u8>(), 0..64),
        any::<bool>(),
    )
        .prop_map(
            |(code, lang, version, opaque, flag, remark, ext, body, binary)| {
                let mut c = RemotingCommand::request_empty(remoting::RequestCode(i32::from(code)))
                    .with_language(LanguageCode(lang))
                    .with_version(i32::from(version))
                    .with_opaque(opaque)
                    .with_flag(flag)
                    .with_body(Bytes::from(body))
                    .with_serialize_type(if binary {
                        SerializeType::RocketMq
                    } else {
                        SerializeType::Json
                    });
                if let Some(r) = remark {
                    c.set_remark(r);
                }
                *c.ext_fields_mut() = ext.into();
                c
            },
        )
}

proptest! {
    #![proptest_config(config(100_000))]

    #[test]
    fn fz01_arbitrary_bytes_any_chunking(
        input in proptest::collection::vec(any::<u8>(), 0..96),
        chunks in proptest::collection::vec(1usize..16, 1..8),
    ) {
        let whole = decode_chunked(&input, &[input.len().max(1)], 64);
        let split = decode_chunked(&input, &chunks, 64);
        prop_assert_eq!(whole, split);
    }
}

proptest! {
    #![proptest_config(config(3_000))]

    #[test]
    fn fz01_valid_stream_decodes_identically_under_every_chunking(
        cmds in proptest::collection::vec(arb_command(), 1..5),
        chunks in proptest::collection::vec(1usize..40, 1..8),
    ) {
        let mut stream = BytesMut::new();
        for c in &cmds {
            c.encode(&mut stream, DEFAULT_MAX_FRAME_LEN).unwrap();
        }
        let (decoded, end) = decode_chunked(&stream, &chunks, DEFAULT_MAX_FRAME_LEN);
        prop_assert_eq!(end, End::Incomplete(0));
        prop_assert_eq!(decoded, cmds);
    }

    #[test]
    fn fz03_round_trip(cmd in arb_command()) {
        let bytes = cmd.encode_to_bytes().unwrap();
        let back = RemotingCommand::decode_frame_bytes(&bytes).unwrap().unwrap();
        prop_assert_eq!(&back, &cmd);
        prop_assert_eq!(back.encode_to_bytes().unwrap(), bytes);
    }

    #[test]
    fn fz02_mutated_golden_vectors(which in 0usize..4, pos in any::<usize>(), byte in any::<u8>(), cut in any::<usize>()) {
        let frames = golden_frames();
        let original = &frames[which];
        // Truncation anywhere: incomplete, never an error or a frame.
        let cut = cut % original.len();
        let mut b = BytesMut::from(&original[..cut]);
        prop_assert_eq!(decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN), Ok(None));
        // One byte changed: decodes or fails with a typed error, never panics.
        let mut m = original.clone();
        let pos = pos % m.len();
        m[pos] = byte;
        let outcome = RemotingCommand::decode_frame_bytes(&m);
        match pos {
            0..=3 => {
                let len = i32::from_be_bytes([m[0], m[1], m[2], m[3]]);
                if len < 0 {
                    prop_assert_eq!(outcome.unwrap_err(), FrameError::NegativeLength { len });
                } else if len < 4 {
                    prop_assert_eq!(outcome.unwrap_err(), FrameError::TooShort { len: len as usize });
                } else if len as usize > DEFAULT_MAX_FRAME_LEN {
                    let is_too_long = matches!(outcome, Err(FrameError::TooLong { .. }));
                    prop_assert!(is_too_long);
                }
            }
            4 if byte > 1 => {
                prop_assert_eq!(outcome.unwrap_err(), FrameError::UnknownSerializeType { found: byte });
            }
            _ => {}
        }
    }
}

fn golden_frames() -> Vec<Vec<u8>> {
    let json = |h: &str| {
        let mut v = Vec::new();
        v.extend_from_slice(&((4 + h.len()) as u32).to_be_bytes());
        v.extend_from_slice(&(h.len() as u32).to_be_bytes());
        v.extend_from_slice(h.as_bytes());
        v
    };
    let a = json(
        r#"{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":401}"#,
    );
    let e = json(
        r#"{"code":3,"flag":1,"language":"JAVA","opaque":9,"remark":" request type 999 not supported","serializeTypeCurrentRPC":"JSON","version":401}"#,
    );
    let a_bin = RemotingCommand::decode_frame_bytes(&a)
        .unwrap()
        .unwrap()
        .with_serialize_type(SerializeType::RocketMq)
        .encode_to_bytes()
        .unwrap()
        .to_vec();
    let e_bin = RemotingCommand::decode_frame_bytes(&e)
        .unwrap()
        .unwrap()
        .with_serialize_type(SerializeType::RocketMq)
        .encode_to_bytes()
        .unwrap()
        .to_vec();
    vec![a, e, a_bin, e_bin]
}
