//! Goal: the golden vectors A-E of remoting.md §9 decode to the documented commands and
//! re-encode byte-identically in both serializations. Method: hex dumps copied from the spec.

#![allow(clippy::unwrap_used)]

use bytes::Bytes;
use remoting::custom_headers::{
    QueryConsumerOffsetResponseHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    UpdateConsumerOffsetRequestHeader,
};
use remoting::{LanguageCode, RemotingCommand, RequestCode, ResponseCode, SerializeType};

fn hex(s: &str) -> Vec<u8> {
    // Lines look like "0000  00 00 00 87 ...  ascii"; take the 16 hex columns after the offset.
    let mut out = Vec::new();
    for line in s.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let rest = &line[6..];
        for tok in rest.split_whitespace().take(16) {
            match u8::from_str_radix(tok, 16) {
                Ok(b) if tok.len() == 2 => out.push(b),
                _ => break,
            }
        }
    }
    out
}

fn json_frame(header: &str, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((4 + header.len() + body.len()) as u32).to_be_bytes());
    v.extend_from_slice(&(header.len() as u32).to_be_bytes());
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(body);
    v
}

fn check_roundtrip(frame: &[u8], t: SerializeType) -> RemotingCommand {
    let cmd = RemotingCommand::decode_frame_bytes(frame).unwrap().unwrap();
    assert_eq!(cmd.serialize_type(), t);
    let again = cmd.encode_to_bytes().unwrap();
    assert_eq!(&again[..], frame, "re-encode differs");
    cmd
}

const A_JSON: &str = r#"
0000  00 00 00 87 00 00 00 83 7b 22 63 6f 64 65 22 3a  ........{"code":
0010  31 30 35 2c 22 65 78 74 46 69 65 6c 64 73 22 3a  105,"extFields":
0020  7b 22 74 6f 70 69 63 22 3a 22 54 6f 70 69 63 54  {"topic":"TopicT
0030  65 73 74 22 7d 2c 22 66 6c 61 67 22 3a 30 2c 22  est"},"flag":0,"
0040  6c 61 6e 67 75 61 67 65 22 3a 22 4a 41 56 41 22  language":"JAVA"
0050  2c 22 6f 70 61 71 75 65 22 3a 31 2c 22 73 65 72  ,"opaque":1,"ser
0060  69 61 6c 69 7a 65 54 79 70 65 43 75 72 72 65 6e  ializeTypeCurren
0070  74 52 50 43 22 3a 22 4a 53 4f 4e 22 2c 22 76 65  tRPC":"JSON","ve
0080  72 73 69 6f 6e 22 3a 34 30 31 7d                 rsion":401}
"#;

const A_BIN: &str = r#"
0000  00 00 00 2d 01 00 00 29 00 69 00 01 91 00 00 00  ...-...).i......
0010  01 00 00 00 00 00 00 00 00 00 00 00 14 00 05 74  ...............t
0020  6f 70 69 63 00 00 00 09 54 6f 70 69 63 54 65 73  opic....TopicTes
0030  74                                               t
"#;

const B_JSON: &str = r#"
0000  00 00 00 7f 00 00 00 7b 7b 22 63 6f 64 65 22 3a  .......{{"code":
0010  30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a 7b 22  0,"extFields":{"
0020  6f 66 66 73 65 74 22 3a 22 34 32 22 7d 2c 22 66  offset":"42"},"f
0030  6c 61 67 22 3a 31 2c 22 6c 61 6e 67 75 61 67 65  lag":1,"language
0040  22 3a 22 4a 41 56 41 22 2c 22 6f 70 61 71 75 65  ":"JAVA","opaque
0050  22 3a 37 2c 22 73 65 72 69 61 6c 69 7a 65 54 79  ":7,"serializeTy
0060  70 65 43 75 72 72 65 6e 74 52 50 43 22 3a 22 4a  peCurrentRPC":"J
0070  53 4f 4e 22 2c 22 76 65 72 73 69 6f 6e 22 3a 34  SON","version":4
0080  30 31 7d                                         01}
"#;

const B_BIN: &str = r#"
0000  00 00 00 27 01 00 00 23 00 00 00 01 91 00 00 00  ...'...#........
0010  07 00 00 00 01 00 00 00 00 00 00 00 0e 00 06 6f  ...............o
0020  66 66 73 65 74 00 00 00 02 34 32                 ffset....42
"#;

const C_JSON: &str = r#"
0000  00 00 01 30 00 00 01 27 7b 22 63 6f 64 65 22 3a  ...0...'{"code":
0010  33 31 30 2c 22 65 78 74 46 69 65 6c 64 73 22 3a  310,"extFields":
0020  7b 22 61 22 3a 22 50 47 22 2c 22 62 22 3a 22 54  {"a":"PG","b":"T
0030  6f 70 69 63 54 65 73 74 22 2c 22 63 22 3a 22 54  opicTest","c":"T
0040  42 57 31 30 32 22 2c 22 64 22 3a 22 34 22 2c 22  BW102","d":"4","
0050  65 22 3a 22 31 22 2c 22 66 22 3a 22 30 22 2c 22  e":"1","f":"0","
0060  67 22 3a 22 31 37 30 30 30 30 30 30 30 30 30 30  g":"170000000000
0070  30 22 2c 22 68 22 3a 22 30 22 2c 22 69 22 3a 22  0","h":"0","i":"
0080  54 41 47 53 5c 75 30 30 30 31 54 61 67 41 5c 75  TAGS\u0001TagA\u
0090  30 30 30 32 57 41 49 54 5c 75 30 30 30 31 74 72  0002WAIT\u0001tr
00a0  75 65 5c 75 30 30 30 32 22 2c 22 6a 22 3a 22 30  ue\u0002","j":"0
00b0  22 2c 22 6b 22 3a 22 66 61 6c 73 65 22 2c 22 6d  ","k":"false","m
00c0  22 3a 22 66 61 6c 73 65 22 2c 22 6e 22 3a 22 62  ":"false","n":"b
00d0  72 6f 6b 65 72 2d 61 22 7d 2c 22 66 6c 61 67 22  roker-a"},"flag"
00e0  3a 30 2c 22 6c 61 6e 67 75 61 67 65 22 3a 22 4a  :0,"language":"J
00f0  41 56 41 22 2c 22 6f 70 61 71 75 65 22 3a 32 2c  AVA","opaque":2,
0100  22 73 65 72 69 61 6c 69 7a 65 54 79 70 65 43 75  "serializeTypeCu
0110  72 72 65 6e 74 52 50 43 22 3a 22 4a 53 4f 4e 22  rrentRPC":"JSON"
0120  2c 22 76 65 72 73 69 6f 6e 22 3a 34 30 31 7d 48  ,"version":401}H
0130  65 6c 6c 6f                                      ello
"#;

const C_BIN: &str = r#"
0000  00 00 00 c2 01 00 00 b9 01 36 00 01 91 00 00 00  .........6......
0010  02 00 00 00 00 00 00 00 00 00 00 00 a4 00 01 61  ...............a
0020  00 00 00 02 50 47 00 01 62 00 00 00 09 54 6f 70  ....PG..b....Top
0030  69 63 54 65 73 74 00 01 63 00 00 00 06 54 42 57  icTest..c....TBW
0040  31 30 32 00 01 64 00 00 00 01 34 00 01 65 00 00  102..d....4..e..
0050  00 01 31 00 01 66 00 00 00 01 30 00 01 67 00 00  ..1..f....0..g..
0060  00 0d 31 37 30 30 30 30 30 30 30 30 30 30 30 00  ..1700000000000.
0070  01 68 00 00 00 01 30 00 01 69 00 00 00 14 54 41  .h....0..i....TA
0080  47 53 01 54 61 67 41 02 57 41 49 54 01 74 72 75  GS.TagA.WAIT.tru
0090  65 02 00 01 6a 00 00 00 01 30 00 01 6b 00 00 00  e...j....0..k...
00a0  05 66 61 6c 73 65 00 01 6d 00 00 00 05 66 61 6c  .false..m....fal
00b0  73 65 00 01 6e 00 00 00 08 62 72 6f 6b 65 72 2d  se..n....broker-
00c0  61 48 65 6c 6c 6f                                aHello
"#;

const D_BIN: &str = r#"
0000  00 00 00 65 01 00 00 61 00 0f 00 01 91 00 00 00  ...e...a........
0010  03 00 00 00 02 00 00 00 00 00 00 00 4c 00 0c 63  ............L..c
0020  6f 6d 6d 69 74 4f 66 66 73 65 74 00 00 00 03 31  ommitOffset....1
0030  30 30 00 0d 63 6f 6e 73 75 6d 65 72 47 72 6f 75  00..consumerGrou
0040  70 00 00 00 02 43 47 00 07 71 75 65 75 65 49 64  p....CG..queueId
0050  00 00 00 01 30 00 05 74 6f 70 69 63 00 00 00 09  ....0..topic....
0060  54 6f 70 69 63 54 65 73 74                       TopicTest
"#;

const D_JSON_HEADER: &str = r#"{"code":15,"extFields":{"commitOffset":"100","consumerGroup":"CG","queueId":"0","topic":"TopicTest"},"flag":2,"language":"JAVA","opaque":3,"serializeTypeCurrentRPC":"JSON","version":401}"#;

const E_BIN: &str = r#"
0000  00 00 00 38 01 00 00 34 00 03 00 01 91 00 00 00  ...8...4........
0010  09 00 00 00 01 00 00 00 1f 20 72 65 71 75 65 73  ......... reques
0020  74 20 74 79 70 65 20 39 39 39 20 6e 6f 74 20 73  t type 999 not s
0030  75 70 70 6f 72 74 65 64 00 00 00 00              upported....
"#;

const E_JSON_HEADER: &str = r#"{"code":3,"flag":1,"language":"JAVA","opaque":9,"remark":" request type 999 not supported","serializeTypeCurrentRPC":"JSON","version":401}"#;

#[test]
fn hex_helper_reads_full_dumps() {
    assert_eq!(hex(A_JSON).len(), 139);
    assert_eq!(hex(A_BIN).len(), 49);
    assert_eq!(hex(B_JSON).len(), 131);
    assert_eq!(hex(B_BIN).len(), 43);
    assert_eq!(hex(C_JSON).len(), 308);
    assert_eq!(hex(C_BIN).len(), 198);
    assert_eq!(hex(D_BIN).len(), 105);
    assert_eq!(hex(E_BIN).len(), 60);
}

#[test]
fn vector_a_route_request() {
    for (dump, t) in [
        (A_JSON, SerializeType::Json),
        (A_BIN, SerializeType::RocketMq),
    ] {
        let cmd = check_roundtrip(&hex(dump), t);
        assert_eq!(cmd.request_code(), RequestCode::GET_ROUTEINFO_BY_TOPIC);
        assert_eq!(cmd.language(), LanguageCode::JAVA);
        assert_eq!((cmd.version(), cmd.opaque(), cmd.flag()), (401, 1, 0));
        assert_eq!(cmd.ext_field("topic"), Some("TopicTest"));
        assert!(cmd.body().is_empty());
        // Built from scratch, it encodes to the same bytes.
        let built = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &remoting::custom_headers::GetRouteInfoRequestHeader {
                topic: "TopicTest".into(),
                accept_standard_json_only: None,
            },
        )
        .with_opaque(1)
        .with_serialize_type(t);
        assert_eq!(&built.encode_to_bytes().unwrap()[..], &hex(dump)[..]);
    }
}

#[test]
fn vector_b_offset_response() {
    for (dump, t) in [
        (B_JSON, SerializeType::Json),
        (B_BIN, SerializeType::RocketMq),
    ] {
        let cmd = check_roundtrip(&hex(dump), t);
        assert!(cmd.is_response());
        assert_eq!(cmd.response_code(), ResponseCode::SUCCESS);
        assert_eq!(cmd.opaque(), 7);
        let h: QueryConsumerOffsetResponseHeader = cmd.decode_header().unwrap();
        assert_eq!(h.offset, 42);
    }
}

#[test]
fn vector_c_send_v2_with_body() {
    for (dump, t) in [
        (C_JSON, SerializeType::Json),
        (C_BIN, SerializeType::RocketMq),
    ] {
        let cmd = check_roundtrip(&hex(dump), t);
        assert_eq!(cmd.request_code(), RequestCode::SEND_MESSAGE_V2);
        assert_eq!(cmd.body(), &Bytes::from_static(b"Hello"));
        let v2: SendMessageRequestHeaderV2 = cmd.decode_header().unwrap();
        assert_eq!(
            v2.properties.as_deref(),
            Some("TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}")
        );
        let h = SendMessageRequestHeader::from_request(&cmd).unwrap();
        assert_eq!(h.producer_group, "PG");
        assert_eq!(h.topic, "TopicTest");
        assert_eq!(h.default_topic, "TBW102");
        assert_eq!(
            (h.default_topic_queue_nums, h.queue_id, h.sys_flag, h.flag),
            (4, 1, 0, 0)
        );
        assert_eq!(h.born_timestamp, 1_700_000_000_000);
        assert_eq!(h.reconsume_times, Some(0));
        assert_eq!(h.unit_mode, Some(false));
        assert!(!h.is_batch());
        assert_eq!(h.broker_name.as_deref(), Some("broker-a"));
        // The typed header writes exactly the vector's extFields.
        let rebuilt = RemotingCommand::request(
            RequestCode::SEND_MESSAGE_V2,
            &SendMessageRequestHeaderV2::from(h),
        )
        .with_opaque(2)
        .with_body(Bytes::from_static(b"Hello"))
        .with_serialize_type(t);
        assert_eq!(&rebuilt.encode_to_bytes().unwrap()[..], &hex(dump)[..]);
    }
}

#[test]
fn vector_d_oneway_update_offset() {
    let json = json_frame(D_JSON_HEADER, b"");
    assert_eq!(json.len(), 194);
    assert_eq!(&json[..8], &[0, 0, 0, 0xbe, 0, 0, 0, 0xba]);
    for (frame, t) in [
        (json, SerializeType::Json),
        (hex(D_BIN), SerializeType::RocketMq),
    ] {
        let cmd = check_roundtrip(&frame, t);
        assert!(cmd.is_oneway());
        assert!(!cmd.is_response());
        let h: UpdateConsumerOffsetRequestHeader = cmd.decode_header().unwrap();
        assert_eq!(
            (
                h.consumer_group.as_str(),
                h.topic.as_str(),
                h.queue_id,
                h.commit_offset
            ),
            ("CG", "TopicTest", 0, 100)
        );
    }
}

#[test]
fn vector_e_not_supported_response() {
    let json = json_frame(E_JSON_HEADER, b"");
    assert_eq!(json.len(), 146);
    assert_eq!(&json[..8], &[0, 0, 0, 0x8e, 0, 0, 0, 0x8a]);
    for (frame, t) in [
        (json, SerializeType::Json),
        (hex(E_BIN), SerializeType::RocketMq),
    ] {
        let cmd = check_roundtrip(&frame, t);
        assert_eq!(
            cmd.response_code(),
            ResponseCode::REQUEST_CODE_NOT_SUPPORTED
        );
        assert_eq!(cmd.remark(), Some(" request type 999 not supported"));
        assert!(cmd.ext_fields().is_empty());
        // What our server produces for request code 999 with opaque 9.
        let req = RemotingCommand::request_empty(RequestCode(999))
            .with_opaque(9)
            .with_serialize_type(t);
        let resp = RemotingCommand::request_code_not_supported(&req);
        assert_eq!(&resp.encode_to_bytes().unwrap()[..], &frame[..]);
    }
}
