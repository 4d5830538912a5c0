//! Goal: every row of RELIABILITY.md §4.1 over a real socket — framing/header errors close the
//! connection, semantic errors get a response code and the connection stays open, slow or idle
//! peers are cut at their deadlines, and the connection cap holds.
//! Method: a raw TcpStream speaks bytes to a server on 127.0.0.1:0.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use remoting::frame::decode_frame;
use remoting::{
    processor_fn, ConnectionConfig, RemotingCommand, RemotingServer, RequestCode, ResponseCode,
    ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;

const T: Duration = Duration::from_secs(5);

async fn server_with(config: ServerConfig) -> RemotingServer {
    RemotingServer::builder(config)
        .register(
            RequestCode::QUERY_CONSUMER_OFFSET,
            processor_fn(|_c, req: RemotingCommand| async move {
                match req
                    .decode_header::<remoting::custom_headers::QueryConsumerOffsetRequestHeader>()
                {
                    Ok(_) => Some(RemotingCommand::success().with_ext_field("offset", "0")),
                    Err(e) => Some(e.to_response()),
                }
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

async fn server() -> RemotingServer {
    server_with(ServerConfig::default()).await
}

/// Reads until the peer closes; returns the bytes received (fails if still open after T).
async fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut all))
        .await
        .expect("server should close the connection")
        .ok();
    all
}

/// Reads exactly one response frame.
async fn read_frame(s: &mut TcpStream) -> RemotingCommand {
    let mut buf = BytesMut::new();
    loop {
        if let Some(f) = decode_frame(&mut buf, 1 << 24).unwrap() {
            return RemotingCommand::from_frame(f).unwrap();
        }
        let n = tokio::time::timeout(T, s.read_buf(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "connection closed while waiting for a response");
    }
}

async fn connect(addr: SocketAddr) -> TcpStream {
    TcpStream::connect(addr).await.unwrap()
}

fn raw(len: i32, word: u32, rest: &[u8]) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v.extend_from_slice(&word.to_be_bytes());
    v.extend_from_slice(rest);
    v
}

fn json_frame(header: &str) -> Vec<u8> {
    raw(
        (4 + header.len()) as i32,
        header.len() as u32,
        header.as_bytes(),
    )
}

async fn assert_closes(addr: SocketAddr, bytes: &[u8]) {
    let mut s = connect(addr).await;
    s.write_all(bytes).await.unwrap();
    let got = read_to_close(&mut s).await;
    assert!(
        got.is_empty(),
        "no response expected, got {} bytes",
        got.len()
    );
}

#[tokio::test]
async fn framing_and_header_errors_close_the_connection() {
    let server = server().await;
    let addr = server.local_addr();
    // Negative length word.
    assert_closes(addr, &(-5i32).to_be_bytes()).await;
    // Length above 16 MiB - 4 (checked from the first 4 bytes, nothing allocated).
    assert_closes(addr, &16_777_213i32.to_be_bytes()).await;
    // First byte 0x16 (a TLS ClientHello) reads as a huge length.
    assert_closes(
        addr,
        &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc],
    )
    .await;
    // Lengths 0..=3 leave no room for the header-length word.
    for len in 0..4 {
        assert_closes(addr, &raw(len, 0, &[])[..4]).await;
    }
    // Header length larger than the frame.
    assert_closes(addr, &raw(10, 100, &[0; 6])).await;
    // Unknown serialize type byte.
    assert_closes(addr, &raw(6, 0x0200_0002, b"{}")).await;
    // Invalid JSON / wrong JSON types.
    assert_closes(addr, &json_frame("{\"code\":")).await;
    assert_closes(addr, &json_frame("{\"code\":{}}")).await;
    assert_closes(addr, &json_frame("[1,2]")).await;
    // ROCKETMQ header whose remark length runs past the header.
    let mut bin = vec![0u8; 21];
    bin[13..17].copy_from_slice(&100i32.to_be_bytes());
    assert_closes(addr, &raw(4 + 21, 0x0100_0000 | 21, &bin)).await;
    // ... and whose ext-fields length is negative.
    let mut bin = vec![0u8; 21];
    bin[17..21].copy_from_slice(&(-1i32).to_be_bytes());
    assert_closes(addr, &raw(4 + 21, 0x0100_0000 | 21, &bin)).await;
    // The server is still healthy.
    let mut s = connect(addr).await;
    s.write_all(&json_frame(r#"{"code":999,"opaque":4}"#))
        .await
        .unwrap();
    assert_eq!(
        read_frame(&mut s).await.response_code(),
        ResponseCode::REQUEST_CODE_NOT_SUPPORTED
    );
    server.shutdown().await;
}

#[tokio::test]
async fn semantic_errors_get_a_response_and_keep_the_connection() {
    let server = server().await;
    let mut s = connect(server.local_addr()).await;
    // Unknown code, C++-style header (language CPP, numbers in extFields, trailing newline).
    s.write_all(&json_frame(
        "{\"code\":777,\"extFields\":{\"AccessKey\":\"\",\"queueId\":3},\"flag\":0,\"language\":\"CPP\",\"opaque\":11,\"remark\":\"\",\"version\":333}\n",
    ))
    .await
    .unwrap();
    let r = read_frame(&mut s).await;
    assert_eq!(
        (r.response_code(), r.opaque()),
        (ResponseCode::REQUEST_CODE_NOT_SUPPORTED, 11)
    );
    assert_eq!(r.remark(), Some(" request type 777 not supported"));
    assert!(r.is_response());
    // Missing required custom-header field -> SYSTEM_ERROR.
    s.write_all(&json_frame(
        r#"{"code":14,"extFields":{"topic":"T","queueId":"1"},"opaque":12}"#,
    ))
    .await
    .unwrap();
    let r = read_frame(&mut s).await;
    assert_eq!(
        (r.response_code(), r.opaque()),
        (ResponseCode::SYSTEM_ERROR, 12)
    );
    // Unparsable number -> SYSTEM_ERROR.
    s.write_all(&json_frame(
        r#"{"code":14,"extFields":{"topic":"T","queueId":"x","consumerGroup":"G"},"opaque":13}"#,
    ))
    .await
    .unwrap();
    assert_eq!(
        read_frame(&mut s).await.response_code(),
        ResponseCode::SYSTEM_ERROR
    );
    // A response whose opaque matches nothing is ignored; a oneway unknown code gets nothing.
    s.write_all(&json_frame(r#"{"code":0,"flag":1,"opaque":424242}"#))
        .await
        .unwrap();
    s.write_all(&json_frame(r#"{"code":778,"flag":2,"opaque":14}"#))
        .await
        .unwrap();
    // The next answer is for opaque 15: nothing was sent for the two frames above.
    s.write_all(&json_frame(
        r#"{"code":14,"extFields":{"topic":"T","queueId":1,"consumerGroup":"G"},"opaque":15}"#,
    ))
    .await
    .unwrap();
    let r = read_frame(&mut s).await;
    assert_eq!((r.response_code(), r.opaque()), (ResponseCode::SUCCESS, 15));
    server.shutdown().await;
}

#[tokio::test]
async fn partial_frame_deadline_and_idle_timeout() {
    let config = ServerConfig {
        connection: ConnectionConfig {
            frame_deadline: Duration::from_millis(200),
            idle_timeout: Duration::from_millis(400),
            ..ConnectionConfig::default()
        },
        ..ServerConfig::default()
    };
    let server = server_with(config).await;
    // Slow drip: a frame header, then nothing more -> closed at the frame deadline.
    let mut s = connect(server.local_addr()).await;
    let started = std::time::Instant::now();
    s.write_all(&raw(1000, 10, b"{\"co")).await.unwrap();
    assert!(read_to_close(&mut s).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(200));
    // Idle connection (no partial frame) -> closed at the idle timeout.
    let mut s = connect(server.local_addr()).await;
    let started = std::time::Instant::now();
    assert!(read_to_close(&mut s).await.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(400));
    server.shutdown().await;
}

#[tokio::test]
async fn connection_cap_closes_extra_connections() {
    let config = ServerConfig {
        max_connections: 1,
        ..ServerConfig::default()
    };
    let server = server_with(config).await;
    let mut first = connect(server.local_addr()).await;
    first
        .write_all(&json_frame(r#"{"code":999,"opaque":1}"#))
        .await
        .unwrap();
    read_frame(&mut first).await; // admitted and served
    let mut second = connect(server.local_addr()).await;
    let _ = second
        .write_all(&json_frame(r#"{"code":999,"opaque":1}"#))
        .await;
    assert!(read_to_close(&mut second).await.is_empty());
    // After the first one leaves, a new connection is admitted.
    drop(first);
    let deadline = tokio::time::Instant::now() + T;
    while server.connection_count() != 0 {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut third = connect(server.local_addr()).await;
    third
        .write_all(&json_frame(r#"{"code":999,"opaque":2}"#))
        .await
        .unwrap();
    assert_eq!(read_frame(&mut third).await.opaque(), 2);
    server.shutdown().await;
}

/// A server whose code-1 processor holds its request until `gate` is notified (answering
/// "finished"), and a connection that has sent it one (opaque 21): returns once the processor
/// has it, so a shutdown started then has a request in progress.
async fn server_holding_a_request() -> (RemotingServer, TcpStream, Arc<Notify>) {
    let started = Arc::new(Notify::new());
    let gate = Arc::new(Notify::new());
    let (st, g) = (started.clone(), gate.clone());
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode(1),
            processor_fn(move |_c, _r| {
                let (st, g) = (st.clone(), g.clone());
                async move {
                    st.notify_one();
                    g.notified().await;
                    Some(RemotingCommand::success().with_remark("finished"))
                }
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut s = connect(server.local_addr()).await;
    s.write_all(&json_frame(r#"{"code":1,"opaque":21}"#))
        .await
        .unwrap();
    started.notified().await;
    (server, s, gate)
}

#[tokio::test]
async fn graceful_shutdown_answers_requests_in_progress() {
    let (server, mut s, gate) = server_holding_a_request().await;
    let shutdown = async {
        // The request is held by its processor: start shutting down, then release it.
        let sd = server.shutdown();
        tokio::pin!(sd);
        tokio::select! {
            biased;
            _ = &mut sd => {}
            _ = async {
                gate.notify_one();
                std::future::pending::<()>().await
            } => {}
        }
    };
    let reader = async {
        let r = read_frame(&mut s).await;
        assert_eq!((r.opaque(), r.remark()), (21, Some("finished")));
        assert!(read_to_close(&mut s).await.is_empty());
    };
    tokio::join!(shutdown, reader);
}

#[tokio::test]
async fn a_shutting_down_server_tells_clients_newer_than_5_3_1_to_go_away() {
    // Held by its processor, the first request keeps the server in its drain phase.
    let (server, mut s, gate) = server_holding_a_request().await;
    let sd = server.shutdown();
    tokio::pin!(sd);
    let mut told_to_go_away = false;
    tokio::select! {
        biased;
        // Ends only after the gate opened: the processor is held until then.
        _ = &mut sd => {}
        _ = async {
            // Code 999 has no processor: were these processed, each would be answered
            // REQUEST_CODE_NOT_SUPPORTED. V5_3_3 (479) > 475: GO_AWAY; V5_3_1 itself and a
            // oneway request from a newer client: no answer.
            let mut frames = json_frame(r#"{"code":999,"opaque":22,"version":479}"#);
            frames.extend(json_frame(r#"{"code":999,"opaque":23,"version":475}"#));
            frames.extend(json_frame(r#"{"code":999,"opaque":24,"version":479,"flag":2}"#));
            s.write_all(&frames).await.unwrap();
            let r = read_frame(&mut s).await;
            assert_eq!(
                (r.response_code(), r.opaque(), r.remark(), r.is_response()),
                (ResponseCode::GO_AWAY, 22, Some("please go away"), true)
            );
            told_to_go_away = true;
            gate.notify_one();
            std::future::pending::<()>().await
        } => {}
    }
    assert!(told_to_go_away);
    let r = read_frame(&mut s).await;
    assert_eq!((r.opaque(), r.remark()), (21, Some("finished")));
    assert!(
        read_to_close(&mut s).await.is_empty(),
        "nothing for V5_3_1 or the oneway request"
    );
}

/// Polls `server.partial_frame_bytes()` until it equals `want`.
async fn wait_partial_bytes(server: &RemotingServer, want: usize) {
    let deadline = tokio::time::Instant::now() + T;
    while server.partial_frame_bytes() != want {
        assert!(
            tokio::time::Instant::now() < deadline,
            "partial bytes stayed {} (want {want})",
            server.partial_frame_bytes()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn partial_frames_share_one_byte_budget_across_connections() {
    let config = ServerConfig {
        max_partial_frame_bytes: 100_000,
        ..ServerConfig::default()
    };
    let server = server_with(config).await;
    let frame = |opaque: i32| {
        let header = format!(r#"{{"code":999,"opaque":{opaque}}}"#);
        let mut rest = header.clone().into_bytes();
        rest.extend(std::iter::repeat_n(b'x', 70_000));
        raw((4 + rest.len()) as i32, header.len() as u32, &rest)
    };
    // A holds 60 000 bytes of an unfinished frame: within the budget.
    let a_frame = frame(7);
    let mut a = connect(server.local_addr()).await;
    a.write_all(&a_frame[..60_000]).await.unwrap();
    wait_partial_bytes(&server, 60_000).await;
    // B would take the total past 100 000: B is closed and its bytes released.
    let mut b = connect(server.local_addr()).await;
    let _ = b.write_all(&frame(8)[..60_000]).await;
    assert!(read_to_close(&mut b).await.is_empty());
    wait_partial_bytes(&server, 60_000).await;
    // A is unaffected: it completes its frame and gets its answer.
    a.write_all(&a_frame[60_000..]).await.unwrap();
    let r = read_frame(&mut a).await;
    assert_eq!(
        (r.response_code(), r.opaque()),
        (ResponseCode::REQUEST_CODE_NOT_SUPPORTED, 7)
    );
    wait_partial_bytes(&server, 0).await;
    server.shutdown().await;
}
