//! Benchmarks: encode+decode of one command (JSON and ROCKETMQ, 10 extFields, 1 KiB body), and
//! loopback RPC throughput over one connection with 1 and 64 requests in flight, for a JSON and
//! a ROCKETMQ-serialized request (responses use the request's serialization), each measured in
//! the same run as a raw baseline (a plain tokio echo of that request's frame bytes). The
//! remoting side is measured twice: with the default connection settings, and with busy
//! polling (`ConnectionConfig::busy_poll`) on both ends. Prints the ratios and the CPU time
//! per request.
//!
//! Run: `cargo bench -p remoting --bench remoting -- --measurement-time 2 --warm-up-time 1`

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use criterion::{black_box, Criterion, Throughput};
use futures_util::stream::{FuturesUnordered, StreamExt};
use remoting::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN};
use remoting::{
    processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
    SerializeType, ServerConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

/// Mean time per operation of each measured benchmark, for the ratio report.
static RESULTS: Mutex<BTreeMap<String, (Duration, u64)>> = Mutex::new(BTreeMap::new());
/// CPU time (all threads of the process) spent by each RPC benchmark, with its op count.
static CPU: Mutex<BTreeMap<String, (Duration, u64)>> = Mutex::new(BTreeMap::new());

fn record(name: &str, elapsed: Duration, ops: u64) {
    let mut r = RESULTS.lock().unwrap_or_else(|e| e.into_inner());
    let e = r.entry(name.to_owned()).or_insert((Duration::ZERO, 0));
    e.0 += elapsed;
    e.1 += ops;
}

/// CPU time used so far by every live thread of this process (Linux `schedstat`, in ns);
/// zero where that is unavailable. The runtime's worker threads live for the whole run.
fn process_cpu() -> Duration {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    let mut ns = 0u64;
    for task in dir.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Duration::from_nanos(ns)
}

fn record_cpu(name: &str, cpu: Duration, ops: u64) {
    let mut r = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let e = r.entry(name.to_owned()).or_insert((Duration::ZERO, 0));
    e.0 += cpu;
    e.1 += ops;
}

/// Voluntary context switches (a thread parked: a runtime worker going idle, mostly) of each
/// RPC benchmark, with its op count. Less noisy than CPU time on a shared machine.
static SWITCHES: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());

/// Voluntary context switches so far of every live thread of this process (Linux); zero
/// where unavailable.
fn process_switches() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut n = 0u64;
    for task in dir.flatten() {
        if let Ok(s) = std::fs::read_to_string(task.path().join("status")) {
            n += s
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    n
}

fn record_switches(name: &str, switches: u64, ops: u64) {
    let mut r = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    let e = r.entry(name.to_owned()).or_insert((0, 0));
    e.0 += switches;
    e.1 += ops;
}

fn sample_command(t: SerializeType) -> RemotingCommand {
    let mut cmd = RemotingCommand::request_empty(RequestCode::SEND_MESSAGE_V2)
        .with_body(Bytes::from(vec![b'x'; 1024]))
        .with_serialize_type(t);
    for (k, v) in [
        ("a", "ProducerGroupName"),
        ("b", "TopicTest"),
        ("c", "TBW102"),
        ("d", "4"),
        ("e", "1"),
        ("f", "0"),
        ("g", "1700000000000"),
        ("h", "0"),
        ("i", "TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}"),
        ("n", "broker-a"),
    ] {
        cmd.ext_fields_mut().insert(k.to_owned(), v.to_owned());
    }
    cmd
}

fn bench_codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    for (name, t) in [
        ("json", SerializeType::Json),
        ("rocketmq", SerializeType::RocketMq),
    ] {
        let cmd = sample_command(t);
        codec_case(&mut g, name, &cmd);
    }
    // Responses as the RPC bench's server sends them (no extFields, the body echoed) and as a
    // broker answers a send (a few extFields, no body).
    let request = sample_command(SerializeType::Json);
    let mut echo = RemotingCommand::success().with_body(request.body().clone());
    echo.mark_response_to(&request);
    codec_case(&mut g, "json_response", &echo);
    let mut sent = RemotingCommand::success()
        .with_ext_field("msgId", "7F00000100002A9F0000000000012C40")
        .with_ext_field("queueId", "3")
        .with_ext_field("queueOffset", "123456")
        .with_ext_field("MSG_REGION", "DefaultRegion")
        .with_ext_field("TRACE_ON", "true");
    sent.mark_response_to(&request);
    codec_case(&mut g, "json_send_response", &sent);
    // The JSON header alone (no frame, no body), each direction on its own.
    let mut header = BytesMut::with_capacity(1024);
    g.bench_function("json_header_encode", |b| {
        b.iter_custom(|iters| {
            let cpu0 = process_cpu();
            let start = Instant::now();
            for _ in 0..iters {
                header.clear();
                remoting::header_encoding::json::encode(black_box(&request), &mut header);
                black_box(&header);
            }
            let el = start.elapsed();
            record("codec/json_header_encode", el, iters);
            record_cpu(
                "codec/json_header_encode",
                process_cpu().saturating_sub(cpu0),
                iters,
            );
            el
        })
    });
    header.clear();
    remoting::header_encoding::json::encode(&request, &mut header);
    g.bench_function("json_header_decode", |b| {
        b.iter_custom(|iters| {
            let cpu0 = process_cpu();
            let start = Instant::now();
            for _ in 0..iters {
                black_box(remoting::header_encoding::json::decode(black_box(&header)).ok());
            }
            let el = start.elapsed();
            record("codec/json_header_decode", el, iters);
            record_cpu(
                "codec/json_header_decode",
                process_cpu().saturating_sub(cpu0),
                iters,
            );
            el
        })
    });
    g.finish();
}

/// One codec benchmark: encode `cmd` as a frame, split it off and decode it.
fn codec_case(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    cmd: &RemotingCommand,
) {
    let mut buf = BytesMut::with_capacity(4096);
    g.bench_function(format!("encode_decode_{name}"), |b| {
        b.iter_custom(|iters| {
            let cpu0 = process_cpu();
            let start = Instant::now();
            for _ in 0..iters {
                cmd.encode(&mut buf, DEFAULT_MAX_FRAME_LEN).unwrap_or(());
                let frame = decode_frame(&mut buf, DEFAULT_MAX_FRAME_LEN);
                if let Ok(Some(f)) = frame {
                    black_box(RemotingCommand::from_frame(f).ok());
                }
            }
            let el = start.elapsed();
            record(&format!("codec/{name}"), el, iters);
            // CPU time too: on a shared machine it is steadier than the wall clock.
            record_cpu(
                &format!("codec/{name}"),
                process_cpu().saturating_sub(cpu0),
                iters,
            );
            el
        })
    });
}

/// Raw baseline: a server that echoes bytes back as they come.
async fn raw_echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("addr: {e}"));
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            tokio::spawn(async move {
                let (mut r, mut w) = s.into_split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Sends `n` copies of `frame` with at most `window` outstanding and waits for all echoes.
async fn raw_roundtrips(stream: &mut TcpStream, frame: &Bytes, n: u64, window: usize) {
    let (mut r, mut w) = stream.split();
    let sem = Arc::new(Semaphore::new(window));
    let total = frame.len() as u64 * n;
    let writer = async {
        let mut wbuf = BytesMut::new();
        let mut sent = 0;
        while sent < n {
            let Ok(p) = sem.acquire().await else { return };
            p.forget();
            wbuf.extend_from_slice(frame);
            sent += 1;
            // Coalesce what the window allows, like the connection writer does.
            while sent < n {
                match sem.try_acquire() {
                    Ok(p) => {
                        p.forget();
                        wbuf.extend_from_slice(frame);
                        sent += 1;
                    }
                    Err(_) => break,
                }
            }
            if w.write_all(&wbuf).await.is_err() {
                return;
            }
            wbuf.clear();
        }
    };
    let reader = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0u64;
        let mut released = 0u64;
        while got < total {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(k) => got += k as u64,
            }
            let done = got / frame.len() as u64;
            if done > released {
                sem.add_permits((done - released) as usize);
                released = done;
            }
        }
    };
    tokio::join!(writer, reader);
}

/// How long the busy-polling variant polls after each read (`ConnectionConfig::busy_poll`).
const BUSY_POLL: Duration = Duration::from_micros(50);

/// The remoting variants measured: the defaults, and busy polling on both sides.
const VARIANTS: [(&str, Duration); 2] =
    [("remoting", Duration::ZERO), ("remoting_busy", BUSY_POLL)];

fn bench_rpc(c: &mut Criterion) {
    let rt = Runtime::new().unwrap_or_else(|e| panic!("runtime: {e}"));
    // One echoing server and one client per variant, all on the same runtime.
    let (ends, raw_addr) = rt.block_on(async {
        let mut ends = Vec::new();
        for (_, busy_poll) in VARIANTS {
            let mut server_config = ServerConfig::default();
            server_config.connection.busy_poll = busy_poll;
            let server = RemotingServer::builder(server_config)
                .default_processor(processor_fn(|_c, req: RemotingCommand| async move {
                    Some(RemotingCommand::success().with_body(req.body().clone()))
                }))
                .bind("127.0.0.1:0".parse().unwrap_or_else(|e| panic!("{e}")))
                .await
                .unwrap_or_else(|e| panic!("bind: {e}"));
            let mut client_config = ClientConfig::default();
            client_config.connection.busy_poll = busy_poll;
            ends.push((server, RemotingClient::new(client_config)));
        }
        (ends, raw_echo_server().await)
    });
    let mut raw_stream = Some(rt.block_on(async {
        let s = TcpStream::connect(raw_addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let _ = s.set_nodelay(true);
        s
    }));
    let timeout = Duration::from_secs(10);

    let mut g = c.benchmark_group("rpc");
    g.throughput(Throughput::Elements(1));
    for (ser, t) in [
        ("json", SerializeType::Json),
        ("rocketmq", SerializeType::RocketMq),
    ] {
        // Built once: each invoke takes a clone, which is reference-count bumps only.
        let request = sample_command(t);
        // The raw baseline echoes the exact frame bytes of the request measured.
        let frame = request.encode_to_bytes().unwrap_or_else(|e| panic!("{e}"));
        for inflight in [1usize, 64] {
            for ((variant, _), (server, client)) in VARIANTS.iter().zip(&ends) {
                let addr = server.local_addr();
                g.bench_function(format!("{variant}_{ser}_inflight_{inflight}"), |b| {
                    b.iter_custom(|iters| {
                        let client = client.clone();
                        let request = request.clone();
                        let cpu0 = process_cpu();
                        let sw0 = process_switches();
                        // The load generator runs on the runtime like any other task.
                        let el = rt
                            .block_on(rt.spawn(async move {
                                let start = Instant::now();
                                // `inflight` callers on one task, each invoking in a loop
                                // until `iters` requests were issued: the generator costs no
                                // allocation per request, like the raw baseline's.
                                let issued = std::sync::atomic::AtomicU64::new(0);
                                let caller = || async {
                                    while issued.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                                        < iters
                                    {
                                        if let Err(e) =
                                            client.invoke(addr, request.clone(), timeout).await
                                        {
                                            panic!("invoke failed: {e}");
                                        }
                                    }
                                };
                                let mut callers: FuturesUnordered<_> =
                                    (0..inflight).map(|_| caller()).collect();
                                while callers.next().await.is_some() {}
                                start.elapsed()
                            }))
                            .unwrap_or_else(|e| panic!("load task: {e}"));
                        let key = format!("rpc/{variant}_{ser}_{inflight}");
                        record_cpu(&key, process_cpu().saturating_sub(cpu0), iters);
                        record_switches(&key, process_switches().saturating_sub(sw0), iters);
                        record(&key, el, iters);
                        el
                    })
                });
            }
            g.bench_function(format!("raw_echo_{ser}_inflight_{inflight}"), |b| {
                b.iter_custom(|iters| {
                    let frame = frame.clone();
                    let mut stream = raw_stream.take().unwrap_or_else(|| panic!("raw stream"));
                    let cpu0 = process_cpu();
                    let sw0 = process_switches();
                    let (el, stream) = rt
                        .block_on(rt.spawn(async move {
                            let start = Instant::now();
                            raw_roundtrips(&mut stream, &frame, iters, inflight).await;
                            (start.elapsed(), stream)
                        }))
                        .unwrap_or_else(|e| panic!("raw task: {e}"));
                    raw_stream = Some(stream);
                    let key = format!("rpc/raw_{ser}_{inflight}");
                    record_cpu(&key, process_cpu().saturating_sub(cpu0), iters);
                    record_switches(&key, process_switches().saturating_sub(sw0), iters);
                    record(&key, el, iters);
                    el
                })
            });
        }
    }
    g.finish();
    rt.block_on(async {
        for (server, client) in &ends {
            client.shutdown().await;
            server.shutdown().await;
        }
    });
}

fn report() {
    let r = RESULTS.lock().unwrap_or_else(|e| e.into_inner());
    let per_op = |k: &str| r.get(k).map(|(d, n)| d.as_secs_f64() / (*n).max(1) as f64);
    println!("\n== summary (mean over all measured iterations) ==");
    for name in [
        "codec/json",
        "codec/rocketmq",
        "codec/json_response",
        "codec/json_send_response",
        "codec/json_header_encode",
        "codec/json_header_decode",
    ] {
        if let Some(t) = per_op(name) {
            let ops = r.get(name).map(|x| x.1).unwrap_or(0);
            let what = if name.contains("header_") {
                "op"
            } else {
                "encode+decode"
            };
            println!("{name}: {:.3} us per {what} (ops {ops})", t * 1e6);
        }
    }
    let cpu = CPU.lock().unwrap_or_else(|e| e.into_inner());
    let cpu_per_op = |k: &str| {
        cpu.get(k)
            .map(|(d, n)| d.as_secs_f64() * 1e6 / (*n).max(1) as f64)
    };
    let switches = SWITCHES.lock().unwrap_or_else(|e| e.into_inner());
    // Each measured RPC run on its own too (a filtered run has no ratio to print).
    for (k, (d, n)) in cpu.iter() {
        let sw = switches.get(k).map(|(s, _)| *s).unwrap_or(0);
        println!(
            "{k}: ops {n}, cpu {:.3} us/op, voluntary switches {:.1} per 100 ops",
            d.as_secs_f64() * 1e6 / (*n).max(1) as f64,
            sw as f64 * 100.0 / (*n).max(1) as f64
        );
    }
    println!(
        "(remoting: default ConnectionConfig; remoting_busy: busy_poll {} us on both sides)",
        BUSY_POLL.as_micros()
    );
    for ser in ["json", "rocketmq"] {
        for inflight in [1, 64] {
            let raw_key = format!("rpc/raw_{ser}_{inflight}");
            for (variant, _) in VARIANTS {
                let ours_key = format!("rpc/{variant}_{ser}_{inflight}");
                if let (Some(ours), Some(raw)) = (per_op(&ours_key), per_op(&raw_key)) {
                    println!(
                        "rpc {ser} inflight={inflight}: {variant} {:.0} req/s, raw echo {:.0} req/s, ratio {:.2}x (ops {})",
                        1.0 / ours,
                        1.0 / raw,
                        raw / ours,
                        r.get(&ours_key).map(|x| x.1).unwrap_or(0)
                    );
                }
                if let (Some(ours), Some(raw)) = (cpu_per_op(&ours_key), cpu_per_op(&raw_key)) {
                    println!(
                        "rpc {ser} inflight={inflight} cpu: {variant} {ours:.2} us/req, raw echo {raw:.2} us/req (all threads)"
                    );
                }
            }
        }
    }
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    bench_codec(&mut c);
    bench_rpc(&mut c);
    c.final_summary();
    report();
}
