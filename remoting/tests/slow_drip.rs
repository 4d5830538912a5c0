//! Goal: the slow-drip defences as FZ-06 (RELIABILITY.md §6, `slow_drip` in the tests crate)
//! found them wanting. The partial-frame deadline times each *frame*: a peer that completes
//! every frame in time is never cut, even when its stream always ends in the middle of the
//! next frame (pipelined senders of large messages), while a frame that itself trickles past
//! the deadline is still cut there. The partial-frame budget limits what the read buffers
//! allocated (they grow by doubling, so bytes received understate it by up to 2x), and does
//! not charge a partial frame that still fits in a connection's initial read buffer.
//! Method: raw TcpStreams write frames split across writes to a server on 127.0.0.1:0 with a
//! short frame deadline or a small budget.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use bytes::BytesMut;
use remoting::frame::decode_frame;
use remoting::{
    processor_fn, ConnectionConfig, RemotingCommand, RemotingServer, RequestCode, ResponseCode,
    ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEADLINE: Duration = Duration::from_millis(300);

async fn server() -> RemotingServer {
    server_with(ServerConfig {
        connection: ConnectionConfig {
            frame_deadline: DEADLINE,
            idle_timeout: Duration::from_secs(60),
            ..ConnectionConfig::default()
        },
        ..ServerConfig::default()
    })
    .await
}

async fn server_with(config: ServerConfig) -> RemotingServer {
    RemotingServer::builder(config)
        .default_processor(processor_fn(|_c, _r| async move {
            Some(RemotingCommand::success())
        }))
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

/// A request frame with `opaque` and a body of `body` bytes.
fn frame(opaque: i32, body: usize) -> Vec<u8> {
    let mut req = RemotingCommand::request_empty(RequestCode(999))
        .with_body(bytes::Bytes::from(vec![b'x'; body]));
    req.set_opaque(opaque);
    req.encode_to_bytes().unwrap().to_vec()
}

/// Reads responses until `n` arrived (fails if the connection closes or stalls).
async fn read_responses(s: &mut TcpStream, buf: &mut BytesMut, n: usize) -> Vec<i32> {
    let mut opaques = Vec::new();
    while opaques.len() < n {
        if let Some(f) = decode_frame(buf, 1 << 24).unwrap() {
            let r = RemotingCommand::from_frame(f).unwrap();
            assert_eq!(r.response_code(), ResponseCode::SUCCESS);
            opaques.push(r.opaque());
            continue;
        }
        let got = tokio::time::timeout(Duration::from_secs(5), s.read_buf(buf))
            .await
            .expect("responses stalled")
            .unwrap();
        assert!(got > 0, "server closed the connection after {opaques:?}");
    }
    opaques
}

/// Every write completes one frame and starts the next, so the server never sees an empty
/// buffer after decoding; each frame takes well under the deadline, the stream lasts many
/// deadlines, and the connection stays open and answers every frame.
#[tokio::test]
async fn a_stream_that_always_ends_mid_frame_is_not_cut_while_each_frame_is_on_time() {
    let server = server().await;
    let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
    s.set_nodelay(true).unwrap();
    let frames: Vec<Vec<u8>> = (0..20).map(|i| frame(i, 2_000)).collect();
    let mut buf = BytesMut::new();
    let started = Instant::now();
    // First half of frame 0.
    let half = frames[0].len() / 2;
    s.write_all(&frames[0][..half]).await.unwrap();
    let mut answered = Vec::new();
    for i in 0..frames.len() {
        tokio::time::sleep(DEADLINE / 3).await;
        // The rest of frame i, and the first half of frame i + 1 (if any).
        let mut chunk = frames[i][half..].to_vec();
        if let Some(next) = frames.get(i + 1) {
            chunk.extend_from_slice(&next[..half]);
        }
        s.write_all(&chunk).await.unwrap();
        answered.extend(read_responses(&mut s, &mut buf, 1).await);
    }
    assert!(
        started.elapsed() > DEADLINE * 5,
        "the stream must outlast several deadlines"
    );
    assert_eq!(answered, (0..20).collect::<Vec<i32>>());
    assert_eq!(server.connection_count(), 1);
    server.shutdown().await;
}

/// A frame trickled one byte at a time, each byte well within the deadline, is cut at the
/// deadline counted from its first byte: its bytes keep the connection active but do not
/// move the frame's deadline.
#[tokio::test]
async fn a_trickled_frame_is_cut_at_the_deadline_from_its_first_byte() {
    let server = server().await;
    let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
    s.set_nodelay(true).unwrap();
    // A complete frame first (answered), then a frame that never completes.
    s.write_all(&frame(1, 10)).await.unwrap();
    let mut buf = BytesMut::new();
    assert_eq!(read_responses(&mut s, &mut buf, 1).await, vec![1]);
    let slow = frame(2, 10_000);
    let started = Instant::now();
    let mut closed_after = None;
    for b in &slow[..100] {
        if s.write_all(std::slice::from_ref(b)).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut one = [0u8; 1];
        match tokio::time::timeout(DEADLINE / 10, s.read(&mut one)).await {
            Err(_) => {}
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(Ok(_)) => panic!("unexpected response to a partial frame"),
        }
    }
    let closed_after = closed_after.expect("the trickled frame was never cut");
    assert!(
        closed_after >= DEADLINE && closed_after < DEADLINE * 3,
        "cut after {closed_after:?}, deadline {DEADLINE:?}"
    );
    server.shutdown().await;
}

/// Polls `what` of the server until it equals `want`.
async fn wait_for(server: &RemotingServer, what: fn(&RemotingServer) -> usize, want: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while what(server) != want {
        assert!(
            Instant::now() < deadline,
            "stayed {} (want {want})",
            what(server)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until the server closes `s` (end of stream or reset); fails after 5 s.
async fn assert_closed(s: &mut TcpStream) {
    let mut sink = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut sink))
        .await
        .expect("the server should close the connection")
        .ok();
    assert!(sink.is_empty(), "no response expected");
}

/// 99 000 bytes of a frame are fewer than a 100 000-byte budget, but the buffer holding them
/// (and room for the next read) is not: that connection is cut, and the budget is whole
/// again for the next one, whose buffer fits and whose frame completes.
#[tokio::test]
async fn the_budget_limits_what_partial_frames_allocated_not_the_bytes_received() {
    let server = server_with(ServerConfig {
        max_partial_frame_bytes: 100_000,
        ..ServerConfig::default()
    })
    .await;
    let big = frame(1, 200_000);
    let mut a = TcpStream::connect(server.local_addr()).await.unwrap();
    let _ = a.write_all(&big[..99_000]).await;
    assert_closed(&mut a).await;
    wait_for(&server, RemotingServer::partial_frame_bytes, 0).await;
    wait_for(&server, RemotingServer::partial_frame_buffer_bytes, 0).await;

    let fits = frame(2, 60_000);
    let mut b = TcpStream::connect(server.local_addr()).await.unwrap();
    b.write_all(&fits[..50_000]).await.unwrap();
    wait_for(&server, RemotingServer::partial_frame_bytes, 50_000).await;
    let charged = server.partial_frame_buffer_bytes();
    assert!(
        (50_000..=100_000).contains(&charged),
        "charged {charged} for 50 000 bytes"
    );
    b.write_all(&fits[50_000..]).await.unwrap();
    let mut buf = BytesMut::new();
    assert_eq!(read_responses(&mut b, &mut buf, 1).await, vec![2]);
    wait_for(&server, RemotingServer::partial_frame_buffer_bytes, 0).await;
    server.shutdown().await;
}

/// Ten connections each hold 3 000 bytes of a frame, 30 000 in all against a 20 000-byte
/// budget: each still fits in its initial read buffer (8 KiB, which grows once less than
/// 4 KiB of it is free), so none is charged or cut, and each completes its frame.
#[tokio::test]
async fn partial_frames_within_the_initial_read_buffer_are_not_charged() {
    let server = server_with(ServerConfig {
        max_partial_frame_bytes: 20_000,
        ..ServerConfig::default()
    })
    .await;
    let mut conns = Vec::new();
    for i in 0..10 {
        let f = frame(i, 6_000);
        let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
        s.write_all(&f[..3_000]).await.unwrap();
        conns.push((s, f));
    }
    wait_for(&server, RemotingServer::partial_frame_bytes, 30_000).await;
    assert_eq!(server.partial_frame_buffer_bytes(), 0);
    for (i, (s, f)) in conns.iter_mut().enumerate() {
        s.write_all(&f[3_000..]).await.unwrap();
        let mut buf = BytesMut::new();
        assert_eq!(read_responses(s, &mut buf, 1).await, vec![i as i32]);
    }
    wait_for(&server, RemotingServer::partial_frame_bytes, 0).await;
    assert_eq!(server.connection_count(), 10);
    server.shutdown().await;
}
