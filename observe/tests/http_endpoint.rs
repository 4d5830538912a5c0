// Goal: the /metrics endpoint answers scrapes correctly over real loopback sockets, rejects
// everything else with the right status, survives garbage and slow clients, and stops on its
// cancellation token. Method: raw TcpStream clients against a server bound to 127.0.0.1:0;
// random garbage comes from a seeded generator (seed printed; set OBSERVE_SEED to replay).

#![allow(clippy::unwrap_used)]

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use observe::{HttpLimits, MetricsServer, NamesrvMetrics, Registry};
use remoting::code::{RequestCode, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

async fn start(limits: HttpLimits) -> (MetricsServer, CancellationToken, Arc<NamesrvMetrics>) {
    let metrics = Arc::new(NamesrvMetrics::new());
    let registry = Arc::new(Registry::new());
    registry.register(metrics.clone());
    let cancel = CancellationToken::new();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = MetricsServer::bind(addr, registry, limits, cancel.clone())
        .await
        .unwrap();
    (server, cancel, metrics)
}

/// Sends `request` (then half-closes when `close_write`), returns everything the server sent.
async fn exchange(addr: SocketAddr, request: &[u8], close_write: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    if close_write {
        s.shutdown().await.unwrap();
    }
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .expect("server did not close the connection")
        .unwrap_or(0);
    out
}

fn split_response(raw: &[u8]) -> (u16, String, String) {
    let text = String::from_utf8(raw.to_vec()).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("no head/body separator");
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("no status");
    (status, head.to_string(), body.to_string())
}

#[tokio::test]
async fn get_metrics_returns_the_exposition() {
    let (server, cancel, metrics) = start(HttpLimits::default()).await;
    metrics.observe_request(RequestCode::REGISTER_BROKER, ResponseCode::SUCCESS);
    let raw = exchange(
        server.local_addr(),
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n",
        false,
    )
    .await;
    let (status, head, body) = split_response(&raw);
    assert_eq!(status, 200);
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        head.contains(&format!("Content-Length: {}", body.len())),
        "{head}"
    );
    let parsed = common::parse(&body).unwrap();
    assert_eq!(
        parsed.value("namesrv_requests_total", &[("class", "register")]),
        Some(1.0)
    );

    // HEAD: same head, no body.
    let raw = exchange(
        server.local_addr(),
        b"HEAD /metrics HTTP/1.0\r\n\r\n",
        false,
    )
    .await;
    let (status, _, body) = split_response(&raw);
    assert_eq!((status, body.as_str()), (200, ""));
    cancel.cancel();
    tokio::time::timeout(WAIT, server.stopped()).await.unwrap();
}

#[tokio::test]
async fn other_paths_methods_and_malformed_lines_are_rejected() {
    let (server, cancel, _) = start(HttpLimits::default()).await;
    let cases: [(&[u8], u16); 5] = [
        (b"GET / HTTP/1.1\r\n\r\n", 404),
        (b"GET /metrics/x HTTP/1.1\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 405),
        (b"HELLO\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1 extra\n\n", 400),
    ];
    for (request, want) in cases {
        let raw = exchange(server.local_addr(), request, false).await;
        let (status, _, _) = split_response(&raw);
        assert_eq!(status, want, "{:?}", String::from_utf8_lossy(request));
    }
    cancel.cancel();
    tokio::time::timeout(WAIT, server.stopped()).await.unwrap();
}

/// xorshift64*: enough for garbage bytes, reproducible from the printed seed.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[tokio::test]
async fn garbage_is_answered_or_closed_and_the_server_keeps_serving() {
    let seed: u64 = std::env::var("OBSERVE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    println!("OBSERVE_SEED={seed}");
    let limits = HttpLimits {
        max_request_bytes: 1024,
        ..HttpLimits::default()
    };
    let (server, cancel, _) = start(limits).await;
    for round in 0..40u64 {
        let len = ((seed.rotate_left(round as u32) % 3000) + 1) as usize;
        let bytes = garbage(seed.wrapping_add(round), len);
        let raw = exchange(server.local_addr(), &bytes, true).await;
        if !raw.is_empty() {
            let (status, _, _) = split_response(&raw);
            assert!(
                [400, 404, 405, 431].contains(&status),
                "round {round}: status {status}"
            );
        }
    }
    // Oversized head without a terminator: 431.
    let raw = exchange(server.local_addr(), &[b'A'; 4096], false).await;
    assert_eq!(split_response(&raw).0, 431);
    // Still serving.
    let raw = exchange(server.local_addr(), b"GET /metrics HTTP/1.1\r\n\r\n", false).await;
    assert_eq!(split_response(&raw).0, 200);
    cancel.cancel();
    tokio::time::timeout(WAIT, server.stopped()).await.unwrap();
}

#[tokio::test]
async fn silent_clients_time_out() {
    let limits = HttpLimits {
        read_timeout: Duration::from_millis(200),
        ..HttpLimits::default()
    };
    let (server, cancel, _) = start(limits).await;
    let raw = exchange(server.local_addr(), b"GET /metr", false).await;
    assert_eq!(split_response(&raw).0, 408);
    // Trickling bytes does not extend the deadline: one byte every 50 ms (each gap well
    // under the 200 ms timeout) still gets 408 once the head as a whole is late. Between
    // bytes, wait for the answer instead of sleeping, and stop writing once it arrives.
    let mut s = TcpStream::connect(server.local_addr()).await.unwrap();
    let mut raw = Vec::new();
    let mut chunk = [0u8; 512];
    for b in b"GET /metrics HTTP/1.1\r\nX-Slow: trickling-header-value".iter() {
        s.write_all(&[*b]).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(50), s.read(&mut chunk)).await {
            Err(_) => continue,
            Ok(Ok(n)) => {
                raw.extend_from_slice(&chunk[..n]);
                break;
            }
            Ok(Err(e)) => panic!("read failed: {e}"),
        }
    }
    assert!(
        !raw.is_empty(),
        "no answer while the client was still sending"
    );
    let mut rest = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut rest))
        .await
        .unwrap()
        .unwrap_or(0);
    raw.extend_from_slice(&rest);
    assert_eq!(split_response(&raw).0, 408);
    cancel.cancel();
    tokio::time::timeout(WAIT, server.stopped()).await.unwrap();
}

#[tokio::test]
async fn cancellation_stops_the_server_with_a_connection_open() {
    let (server, cancel, _) = start(HttpLimits::default()).await;
    let addr = server.local_addr();
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
    cancel.cancel();
    tokio::time::timeout(WAIT, server.stopped())
        .await
        .expect("server did not stop");
    // The idle connection was closed without a response.
    let mut buf = Vec::new();
    let n = tokio::time::timeout(WAIT, idle.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap_or(0);
    assert_eq!(n, 0);
    // Nothing listens any more.
    assert!(TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn port_zero_means_disabled() {
    let server = MetricsServer::start_on_port(
        Ipv4Addr::LOCALHOST.into(),
        0,
        Arc::new(Registry::new()),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(server.is_none());
}
