//! Route-query throughput: GET_ROUTEINFO_BY_TOPIC with 64 requests in flight over loopback.
//!
//! Three figures from one run, so they can be compared:
//! 1. `table`  — `RouteTable::topic_route` + JSON encoding in a loop (no network): the name
//!    server's own cost per query;
//! 2. `raw`    — a bare remoting server answering every request with a fixed body of the same
//!    size (the transport's ceiling: framing, tasks, loopback syscalls);
//! 3. `namesrv`— the real name server.
//!
//! Run: `cargo bench -p namesrv --bench route_query`. Env `BENCH_SECS` (default 3 s per
//! figure) and `BENCH_CONNECTIONS` (default 1 client connection carrying all 64 in-flight
//! requests, like a Java client's one channel per address). Runs on a 2-worker tokio
//! runtime, like the 2-core target machine.

#![allow(clippy::unwrap_used)] // tests and benches may unwrap

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use namesrv::body::{self, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper};
use namesrv::processor::masked_crc32;
use namesrv::route::{BrokerRegistration, RouteTable};
use namesrv::{NameServer, NameServerConfig};
use remoting::custom_headers::{GetRouteInfoRequestHeader, RegisterBrokerRequestHeader};
use remoting::{
    processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
    ResponseCode, ServerConfig,
};

const IN_FLIGHT: usize = 64;
const TOPICS: usize = 100;
const MEMBERS: [&str; 3] = ["127.0.0.1:30911", "127.0.0.1:30921", "127.0.0.1:30931"];

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn topics() -> TopicConfigSerializeWrapper {
    TopicConfigSerializeWrapper {
        topic_config_table: (0..TOPICS)
            .map(|i| {
                let name = format!("Topic-{i}");
                let cfg = TopicConfig {
                    topic_name: name.clone(),
                    read_queue_nums: 8,
                    write_queue_nums: 8,
                    ..TopicConfig::default()
                };
                (name, cfg)
            })
            .collect(),
        ..TopicConfigSerializeWrapper::default()
    }
}

fn route_request(i: usize) -> RemotingCommand {
    RemotingCommand::request(
        RequestCode::GET_ROUTEINFO_BY_TOPIC,
        &GetRouteInfoRequestHeader {
            topic: format!("Topic-{}", i % TOPICS),
            accept_standard_json_only: None,
        },
    )
}

/// Queries per second of the in-memory table alone (one thread).
fn bench_table(secs: u64) -> (f64, usize) {
    let mut table = RouteTable::default();
    for (i, addr) in MEMBERS.iter().enumerate() {
        table.register_broker(
            BrokerRegistration {
                cluster_name: "RaftCluster".into(),
                broker_addr: (*addr).into(),
                broker_name: "RaftNode00".into(),
                broker_id: if i == 0 { 0 } else { i as i64 + 1 },
                topics: topics(),
                ..BrokerRegistration::default()
            },
            0,
        );
    }
    let start = Instant::now();
    let mut n = 0usize;
    let mut bytes = 0usize;
    while start.elapsed() < Duration::from_secs(secs) {
        for _ in 0..1000 {
            let route = table.topic_route(&format!("Topic-{}", n % TOPICS));
            bytes = body::to_json(&route).unwrap().len();
            n += 1;
        }
    }
    (n as f64 / start.elapsed().as_secs_f64(), bytes)
}

/// Runs 64 in-flight route queries against `addr` for `secs`; returns queries per second.
async fn load(addr: std::net::SocketAddr, secs: u64, connections: usize) -> f64 {
    let clients: Vec<RemotingClient> = (0..connections.max(1))
        .map(|_| RemotingClient::new(ClientConfig::default()))
        .collect();
    // Warm up: connect and fill caches.
    for c in &clients {
        let r = c
            .invoke(addr, route_request(0), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    }
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..IN_FLIGHT {
        let client = clients[t % clients.len()].clone();
        let done = done.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let r = client
                    .invoke(addr, route_request(i), Duration::from_secs(5))
                    .await
                    .unwrap();
                assert_eq!(r.response_code(), ResponseCode::SUCCESS);
                done.fetch_add(1, Ordering::Relaxed);
                i += IN_FLIGHT;
            }
        }));
    }
    let start = Instant::now();
    let before = done.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let after = done.load(Ordering::Relaxed);
    let elapsed = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    for c in &clients {
        c.shutdown().await;
    }
    (after - before) as f64 / elapsed
}

async fn bench_network(secs: u64, connections: usize, body_len: usize) -> (f64, f64) {
    // Raw transport: same request, fixed body of the route's size.
    let fixed = Bytes::from(vec![b'x'; body_len]);
    let raw = RemotingServer::builder(ServerConfig::default())
        .register(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            processor_fn(move |_conn, _req| {
                let body = fixed.clone();
                async move { Some(RemotingCommand::success().with_body(body)) }
            }),
        )
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let raw_qps = load(raw.local_addr(), secs, connections).await;
    raw.shutdown().await;

    let ns = NameServer::start(NameServerConfig {
        listen_addr: "127.0.0.1:0".parse().unwrap(),
        ..NameServerConfig::default()
    })
    .await
    .unwrap();
    let broker = RemotingClient::new(ClientConfig::default());
    for (i, addr) in MEMBERS.iter().enumerate() {
        let body = body::to_json(&RegisterBrokerBody {
            filter_server_list: vec![],
            topic_config_serialize_wrapper: topics(),
        })
        .unwrap();
        let req = RemotingCommand::request(
            RequestCode::REGISTER_BROKER,
            &RegisterBrokerRequestHeader {
                broker_name: "RaftNode00".into(),
                broker_addr: (*addr).into(),
                cluster_name: "RaftCluster".into(),
                ha_server_addr: (*addr).into(),
                broker_id: if i == 0 { 0 } else { i as i64 + 1 },
                body_crc32: Some(masked_crc32(&body)),
                ..RegisterBrokerRequestHeader::default()
            },
        )
        .with_body(body);
        let r = broker
            .invoke(ns.local_addr(), req, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(r.response_code(), ResponseCode::SUCCESS);
    }
    let ns_qps = load(ns.local_addr(), secs, connections).await;
    broker.shutdown().await;
    ns.shutdown().await;
    (raw_qps, ns_qps)
}

fn main() {
    let secs = env_num("BENCH_SECS", 3);
    let connections = env_num("BENCH_CONNECTIONS", 1) as usize;
    let (table_qps, body_len) = bench_table(secs);
    println!("table:   {table_qps:>10.0} route lookups+encodes/s (1 thread, body {body_len} B)");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (raw_qps, ns_qps) = rt.block_on(bench_network(secs, connections, body_len));
    println!(
        "raw:     {raw_qps:>10.0} req/s (bare remoting server, {IN_FLIGHT} in flight, {connections} connections)"
    );
    println!("namesrv: {ns_qps:>10.0} req/s GET_ROUTEINFO_BY_TOPIC ({IN_FLIGHT} in flight, {connections} connections)");
    println!("ratio namesrv/raw: {:.2}", ns_qps / raw_qps);
}
