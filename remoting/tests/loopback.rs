//! Goal: the server and client work end to end over real sockets on 127.0.0.1.
//! Method: a server on port 0 with small processors; assertions on the responses and on the
//! observable side effects. No sleeps for synchronization: waits poll a condition with a timeout.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use remoting::custom_headers::{
    NotifyConsumerIdsChangedRequestHeader, QueryConsumerOffsetRequestHeader,
};
use remoting::{
    processor_fn, ClientConfig, ConnectionHandle, ConnectionListener, RemotingClient,
    RemotingCommand, RemotingError, RemotingServer, RequestCode, ResponseCode, SerializeType,
    ServerConfig,
};

const T: Duration = Duration::from_secs(5);

async fn wait_for(mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + T;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached in time"
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn echo() -> Arc<dyn remoting::RequestProcessor> {
    processor_fn(|_c, req: RemotingCommand| async move {
        Some(
            RemotingCommand::success()
                .with_body(req.body().clone())
                .with_remark(format!("code {}", req.code())),
        )
    })
}

#[tokio::test]
async fn request_response_in_both_serializations() {
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode::QUERY_CONSUMER_OFFSET,
            processor_fn(|_c, req: RemotingCommand| async move {
                let h: QueryConsumerOffsetRequestHeader = match req.decode_header() {
                    Ok(h) => h,
                    Err(e) => return Some(e.to_response()),
                };
                Some(
                    RemotingCommand::success()
                        .with_ext_field("offset", (h.queue_id * 10).to_string()),
                )
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    for t in [SerializeType::Json, SerializeType::RocketMq] {
        let req = RemotingCommand::request(
            RequestCode::QUERY_CONSUMER_OFFSET,
            &QueryConsumerOffsetRequestHeader {
                consumer_group: "CG".into(),
                topic: "T".into(),
                queue_id: 4,
                ..Default::default()
            },
        )
        .with_serialize_type(t);
        let resp = client.invoke(server.local_addr(), req, T).await.unwrap();
        assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
        assert_eq!(resp.ext_field("offset"), Some("40"));
        assert_eq!(
            resp.serialize_type(),
            t,
            "a response uses its request's serialization"
        );
    }
    // Missing required field -> SYSTEM_ERROR with a remark, connection stays usable.
    let resp = client
        .invoke(
            server.local_addr(),
            RemotingCommand::request_empty(RequestCode::QUERY_CONSUMER_OFFSET)
                .with_ext_field("topic", "T"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SYSTEM_ERROR);
    assert!(
        resp.remark().unwrap().contains("consumerGroup"),
        "{:?}",
        resp.remark()
    );
    client.shutdown().await;
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_code_gets_java_remark_and_oneway_gets_nothing() {
    let hits = Arc::new(AtomicUsize::new(0));
    let h2 = hits.clone();
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode::UPDATE_CONSUMER_OFFSET,
            processor_fn(move |_c, _r| {
                let h = h2.clone();
                async move {
                    h.fetch_add(1, Ordering::SeqCst);
                    Some(RemotingCommand::success())
                }
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    let resp = client
        .invoke(
            server.local_addr(),
            RemotingCommand::request_empty(RequestCode(999)),
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        resp.response_code(),
        ResponseCode::REQUEST_CODE_NOT_SUPPORTED
    );
    assert_eq!(resp.remark(), Some(" request type 999 not supported"));
    // Oneway to a known code runs the processor; oneway to an unknown code is silently dropped.
    client
        .invoke_oneway(
            server.local_addr(),
            RemotingCommand::request_empty(RequestCode::UPDATE_CONSUMER_OFFSET),
            T,
        )
        .await
        .unwrap();
    client
        .invoke_oneway(
            server.local_addr(),
            RemotingCommand::request_empty(RequestCode(998)),
            T,
        )
        .await
        .unwrap();
    wait_for(|| hits.load(Ordering::SeqCst) == 1).await;
    // Still healthy afterwards, and no stray response completed anything.
    let resp = client
        .invoke(
            server.local_addr(),
            RemotingCommand::request_empty(RequestCode::UPDATE_CONSUMER_OFFSET),
            T,
        )
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    let conn = client.connection(server.local_addr()).await.unwrap();
    assert_eq!(conn.inflight(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn out_of_order_responses_reach_their_callers() {
    // Code 1 is held until code 2 has been answered: a held long-poll must not block others.
    let gate = Arc::new(tokio::sync::Notify::new());
    let g1 = gate.clone();
    let g2 = gate.clone();
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode(1),
            processor_fn(move |_c, _r| {
                let g = g1.clone();
                async move {
                    g.notified().await;
                    Some(RemotingCommand::success().with_remark("slow"))
                }
            }),
        )
        .register(
            RequestCode(2),
            processor_fn(move |_c, _r| {
                let g = g2.clone();
                async move {
                    g.notify_one();
                    Some(RemotingCommand::success().with_remark("fast"))
                }
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    let addr = server.local_addr();
    let c1 = client.clone();
    let slow = tokio::spawn(async move {
        c1.invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
            .await
    });
    // Make sure the slow request is in flight first.
    let conn = client.connection(addr).await.unwrap();
    wait_for(|| conn.inflight() == 1).await;
    let fast = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), T)
        .await
        .unwrap();
    assert_eq!(fast.remark(), Some("fast"));
    let slow = slow.await.unwrap().unwrap();
    assert_eq!(slow.remark(), Some("slow"));
    server.shutdown().await;
}

#[tokio::test]
async fn many_concurrent_requests_are_matched_by_opaque() {
    let server = RemotingServer::builder(ServerConfig::default())
        .default_processor(echo())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    let mut tasks = Vec::new();
    for i in 0..200u32 {
        let c = client.clone();
        let addr = server.local_addr();
        tasks.push(tokio::spawn(async move {
            let body = Bytes::from(i.to_be_bytes().to_vec());
            let resp = c
                .invoke(
                    addr,
                    RemotingCommand::request_empty(RequestCode(77)).with_body(body.clone()),
                    T,
                )
                .await
                .unwrap();
            assert_eq!(resp.body(), &body);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    server.shutdown().await;
}

#[tokio::test]
async fn timeout_is_reported_and_late_response_is_dropped() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode(5),
            processor_fn(move |_c, _r| {
                let g = g.clone();
                async move {
                    g.notified().await;
                    Some(RemotingCommand::success())
                }
            }),
        )
        .default_processor(echo())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = RemotingClient::new(ClientConfig::default());
    let addr = server.local_addr();
    let err = client
        .invoke(
            addr,
            RemotingCommand::request_empty(RequestCode(5)),
            Duration::from_millis(50),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, RemotingError::Timeout { .. }), "{err}");
    let conn = client.connection(addr).await.unwrap();
    assert_eq!(conn.inflight(), 0, "timed-out waiter removed");
    gate.notify_one(); // late response arrives and matches nothing
    let resp = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(6)), T)
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    server.shutdown().await;
}

#[derive(Default)]
struct Recorder {
    opened: Mutex<Vec<ConnectionHandle>>,
    closed: AtomicUsize,
}

impl ConnectionListener for Recorder {
    fn on_connect(&self, conn: &ConnectionHandle) {
        self.opened.lock().unwrap().push(conn.clone());
    }
    fn on_close(&self, _conn: &ConnectionHandle) {
        self.closed.fetch_add(1, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn server_initiated_request_on_the_client_connection() {
    let recorder = Arc::new(Recorder::default());
    let server = RemotingServer::builder(ServerConfig::default())
        .default_processor(echo())
        .listener(recorder.clone())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    // The client answers NOTIFY_CONSUMER_IDS_CHANGED-like requests from the broker.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let mut registry = remoting::ProcessorRegistry::new();
    registry.register(
        RequestCode::NOTIFY_CONSUMER_IDS_CHANGED,
        processor_fn(move |_c, req: RemotingCommand| {
            let s = s2.clone();
            async move {
                let h: NotifyConsumerIdsChangedRequestHeader = req.decode_header().ok()?;
                s.lock().unwrap().push(h.consumer_group);
                Some(RemotingCommand::success().with_remark("client says hi"))
            }
        }),
    );
    let client = RemotingClient::with_processor(ClientConfig::default(), Arc::new(registry), None);
    let addr = server.local_addr();
    client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap();
    wait_for(|| !recorder.opened.lock().unwrap().is_empty()).await;
    let stored = recorder.opened.lock().unwrap()[0].clone();
    let header = NotifyConsumerIdsChangedRequestHeader {
        consumer_group: "CG".into(),
    };
    // Request/response from server to client...
    let resp = stored
        .invoke(
            RemotingCommand::request(RequestCode::NOTIFY_CONSUMER_IDS_CHANGED, &header),
            T,
        )
        .await
        .unwrap();
    assert_eq!(resp.remark(), Some("client says hi"));
    // ...and oneway, while the client keeps using the same connection.
    stored
        .invoke_oneway(
            RemotingCommand::request(RequestCode::NOTIFY_CONSUMER_IDS_CHANGED, &header),
            T,
        )
        .await
        .unwrap();
    let resp = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap();
    assert_eq!(resp.response_code(), ResponseCode::SUCCESS);
    wait_for(|| seen.lock().unwrap().len() == 2).await;
    // Unknown code from server to client -> not supported.
    let resp = stored
        .invoke(RemotingCommand::request_empty(RequestCode(4242)), T)
        .await
        .unwrap();
    assert_eq!(
        resp.response_code(),
        ResponseCode::REQUEST_CODE_NOT_SUPPORTED
    );
    assert_eq!(
        stored.remote_addr(),
        client.connection(addr).await.unwrap().local_addr()
    );
    // Closing the client connection fires the server's close hook.
    client.close_connection(addr);
    wait_for(|| recorder.closed.load(Ordering::SeqCst) == 1).await;
    assert!(stored.is_closed());
    let err = stored
        .invoke(RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemotingError::ConnectionClosed { .. }),
        "{err}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn connect_failure_backoff_and_reconnect() {
    // A free port with nothing listening: bind, note the port, drop the listener.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let config = ClientConfig {
        reconnect_backoff_min: Duration::from_millis(300),
        reconnect_backoff_max: Duration::from_millis(300),
        ..ClientConfig::default()
    };
    let client = RemotingClient::new(config);
    let err = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap_err();
    assert!(matches!(err, RemotingError::ConnectFailed { .. }), "{err}");
    // Within the backoff window the client fails fast without dialing.
    let err = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("backing off"), "{err}");
    // A server appears on that port: after the backoff the client connects.
    let server = RemotingServer::builder(ServerConfig::default())
        .default_processor(echo())
        .bind(addr)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + T;
    loop {
        match client
            .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
            .await
        {
            Ok(r) => {
                assert_eq!(r.response_code(), ResponseCode::SUCCESS);
                break;
            }
            Err(RemotingError::ConnectFailed { .. }) => {
                assert!(tokio::time::Instant::now() < deadline, "never reconnected");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    // The server restarts: the old connection closes and the next call reconnects.
    let first = client.connection(addr).await.unwrap();
    server.shutdown().await;
    drop(server);
    wait_for(|| first.is_closed()).await;
    let server = RemotingServer::builder(ServerConfig::default())
        .default_processor(echo())
        .bind(addr)
        .await
        .unwrap();
    let resp = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(2)), T)
        .await
        .unwrap();
    assert_eq!(resp.remark(), Some("code 2"));
    assert_ne!(client.connection(addr).await.unwrap().id(), first.id());
    server.shutdown().await;
}

#[tokio::test]
async fn inflight_cap_and_callback_form() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let g = gate.clone();
    let server = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode(9),
            processor_fn(move |_c, _r| {
                let g = g.clone();
                async move {
                    g.notified().await;
                    Some(RemotingCommand::success())
                }
            }),
        )
        .default_processor(echo())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = ClientConfig {
        connection: remoting::ConnectionConfig {
            max_inflight_requests: 2,
            ..remoting::ConnectionConfig::default()
        },
        ..ClientConfig::default()
    };
    let client = RemotingClient::new(config);
    let addr = server.local_addr();
    let held: Vec<_> = (0..2)
        .map(|_| {
            let c = client.clone();
            tokio::spawn(async move {
                c.invoke(addr, RemotingCommand::request_empty(RequestCode(9)), T)
                    .await
            })
        })
        .collect();
    let conn = client.connection(addr).await.unwrap();
    wait_for(|| conn.inflight() == 2).await;
    let err = client
        .invoke(addr, RemotingCommand::request_empty(RequestCode(1)), T)
        .await
        .unwrap_err();
    assert!(
        matches!(err, RemotingError::TooManyInflight { max: 2, .. }),
        "{err}"
    );
    gate.notify_waiters();
    gate.notify_one();
    gate.notify_one();
    for h in held {
        h.await.unwrap().unwrap();
    }
    // Fire-and-callback.
    let (tx, rx) = tokio::sync::oneshot::channel();
    client.invoke_with_callback(
        addr,
        RemotingCommand::request_empty(RequestCode(3)).with_body(Bytes::from_static(b"cb")),
        T,
        move |r| {
            let _ = tx.send(r);
        },
    );
    let r = tokio::time::timeout(T, rx).await.unwrap().unwrap().unwrap();
    assert_eq!(r.body().as_ref(), b"cb");
    server.shutdown().await;
}

/// Responses that outgrow the socket while the peer is not reading: the reader's inline
/// writes stop at the full socket, the writer task finishes them, and every response arrives
/// whole and in order once the peer reads.
#[tokio::test]
async fn responses_larger_than_the_socket_buffer_arrive_whole_and_in_order() {
    use remoting::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = RemotingServer::builder(ServerConfig::default())
        .default_processor(echo())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut s = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    // 8 MiB of responses: far more than loopback socket buffers hold, less than the outbox.
    let n = 128;
    let body = Bytes::from((0..64 * 1024).map(|i| i as u8).collect::<Vec<u8>>());
    let mut requests = bytes::BytesMut::new();
    for opaque in 0..n {
        RemotingCommand::request_empty(RequestCode(7))
            .with_opaque(opaque)
            .with_body(body.clone())
            .encode(&mut requests, DEFAULT_MAX_FRAME_LEN)
            .unwrap();
    }
    // Written in full before reading anything: the server keeps reading meanwhile.
    tokio::time::timeout(T, s.write_all(&requests))
        .await
        .unwrap()
        .unwrap();
    let mut buf = bytes::BytesMut::new();
    let mut next = 0;
    while next < n {
        while let Some(frame) = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap() {
            let r = RemotingCommand::from_frame(frame).unwrap();
            assert_eq!((r.opaque(), r.is_response()), (next, true));
            assert_eq!(r.body(), &body, "body of response {next}");
            next += 1;
        }
        if next < n {
            let got = tokio::time::timeout(T, s.read_buf(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(got > 0, "closed after {next} responses");
        }
    }
    server.shutdown().await;
}

/// Small reads and busy polling on both sides: frames larger than one read, many in flight,
/// and the end of the stream seen while polling, all behave as with the defaults.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_polling_and_small_reads_keep_every_frame_whole() {
    let mut server_config = ServerConfig::default();
    server_config.connection.read_chunk = 4096;
    server_config.connection.busy_poll = Duration::from_micros(200);
    let server = RemotingServer::builder(server_config)
        .default_processor(echo())
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = server.local_addr();
    let mut client_config = ClientConfig::default();
    client_config.connection.read_chunk = 4096;
    client_config.connection.busy_poll = Duration::from_micros(200);
    let client = RemotingClient::new(client_config);
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let c = client.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..20u32 {
                // Bodies from 4 bytes to ~40 KiB: many frames span several reads.
                let len = 4 + ((i * 31 + round * 977) % 40_000) as usize;
                let mut body = vec![0u8; len];
                body[..4].copy_from_slice(&(i * 1000 + round).to_be_bytes());
                let body = Bytes::from(body);
                let resp = c
                    .invoke(
                        addr,
                        RemotingCommand::request_empty(RequestCode(77)).with_body(body.clone()),
                        T,
                    )
                    .await
                    .unwrap();
                assert_eq!(resp.body(), &body);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The server going away is noticed by a client that busy-polls too.
    let conn = client.connection(addr).await.unwrap();
    server.shutdown().await;
    tokio::time::timeout(T, conn.closed()).await.unwrap();
}
