//! `mqbench`: producer and consumer benchmarks in the style of RocketMQ's benchmark tools
//! (`-n` name server, `-t` topic, `-w` threads, `-s` size, `-c` count or `-d` duration).
//!
//! Every 10 s (and at the end) a stats line goes to stdout: TPS, average / max RT and
//! p50/p99/p999. A live progress line goes to stderr once a second. The producer prints each
//! outage window (first failed send -> next success) when it closes, so a failover can be
//! measured from the outside.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use tools::producer::now_ms;
use tools::stats::{Histogram, OutageTracker};
use tools::{
    parse_addr_list, ClientOptions, Message, MqClient, Producer, ProducerOptions, PullConsumer,
    PullStatus, SendError, TagFilter,
};

/// RocketMQ benchmark tool.
#[derive(Debug, Parser)]
#[command(name = "mqbench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send messages as fast as the threads allow.
    #[command(alias = "Producer")]
    Producer(ProducerArgs),
    /// Pull every queue of a topic and measure delivery.
    #[command(alias = "Consumer")]
    Consumer(ConsumerArgs),
}

#[derive(Debug, Args)]
struct Common {
    /// Name server address list.
    #[arg(short = 'n', long = "namesrvAddr", default_value = "127.0.0.1:9876")]
    namesrv: String,
    /// Topic.
    #[arg(short = 't', long = "topic", default_value = "BenchmarkTest")]
    topic: String,
    /// Stop after this many messages (0 = no limit).
    #[arg(short = 'c', long = "count", default_value_t = 0)]
    count: u64,
    /// Stop after this many seconds (0 = no limit).
    #[arg(short = 'd', long = "duration", default_value_t = 0)]
    duration_secs: u64,
    /// Seconds between stats lines.
    #[arg(long, default_value_t = 10)]
    report_interval_secs: u64,
    /// No live progress line.
    #[arg(long)]
    no_progress: bool,
}

#[derive(Debug, Args)]
struct ProducerArgs {
    #[command(flatten)]
    common: Common,
    /// Concurrent senders.
    #[arg(short = 'w', long = "threadCount", default_value_t = 16)]
    threads: usize,
    /// Body size in bytes.
    #[arg(short = 's', long = "messageSize", default_value_t = 128)]
    size: usize,
    /// Messages per SEND_BATCH_MESSAGE (1 = single sends).
    #[arg(short = 'b', long = "batchSize", default_value_t = 1)]
    batch: usize,
    /// Asynchronous sends: each sender keeps --inflight requests in flight.
    #[arg(short = 'a', long = "async")]
    async_send: bool,
    /// In-flight requests per sender in async mode.
    #[arg(long, default_value_t = 8)]
    inflight: usize,
    /// Give every message a key.
    #[arg(short = 'k', long = "keyEnable")]
    keys: bool,
    /// Tag of every message.
    #[arg(long, default_value = "")]
    tags: String,
    /// Extra attempts per send (Java: 2).
    #[arg(long, default_value_t = 2)]
    retries: u32,
    /// Do not retry after indeterminate failures (timeouts, SYSTEM_ERROR).
    #[arg(long)]
    no_retry_indeterminate: bool,
    /// Timeout of one send attempt in ms.
    #[arg(long, default_value_t = 3000)]
    send_timeout_ms: u64,
    /// Producer group.
    #[arg(short = 'g', long = "group", default_value = "benchmark_producer")]
    group: String,
}

#[derive(Debug, Args)]
struct ConsumerArgs {
    #[command(flatten)]
    common: Common,
    /// Consumer group.
    #[arg(short = 'g', long = "group", default_value = "benchmark_consumer")]
    group: String,
    /// Start every queue at its min offset instead of its max offset.
    #[arg(long)]
    from_begin: bool,
    /// Tag expression.
    #[arg(long, default_value = "*")]
    sub: String,
}

#[tokio::main]
async fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Producer(a) => producer(a).await,
        Command::Consumer(a) => consumer(a).await,
    };
    if let Err(e) = r {
        eprintln!("ERROR: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}

/// Counters and histograms shared by the workers (short critical sections, no `.await`).
struct Shared {
    window: Histogram,
    total: Histogram,
    window_ok: u64,
    ok: u64,
    failed_definite: u64,
    failed_indeterminate: u64,
    window_failed: u64,
    outages: OutageTracker,
}

struct Stop {
    flag: AtomicBool,
    issued: AtomicU64,
    limit: u64,
    deadline: Option<Instant>,
}

impl Stop {
    /// Claims `n` messages of the budget; false when the run is over.
    fn claim(&self, n: u64) -> bool {
        if self.flag.load(Ordering::Relaxed) {
            return false;
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.flag.store(true, Ordering::Relaxed);
            return false;
        }
        if self.limit > 0 && self.issued.fetch_add(n, Ordering::Relaxed) >= self.limit {
            self.flag.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
}

fn fmt_secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

fn record_send(
    shared: &Mutex<Shared>,
    started: Instant,
    result: &Result<tools::SendResult, SendError>,
    n: u64,
) {
    let now = Instant::now();
    let mut s = lock(shared);
    match result {
        Ok(_) => {
            let rt = now - started;
            s.window.record(rt);
            s.total.record(rt);
            s.window_ok += n;
            s.ok += n;
            if let Some(o) = s.outages.success(now) {
                println!(
                    "OUTAGE #{}: sends failed from +{} s to +{} s, lasted {} s ({} failed sends; first error: {})",
                    s.outages.outages().len(),
                    fmt_secs(o.start),
                    fmt_secs(o.end),
                    fmt_secs(o.duration()),
                    o.failures,
                    o.first_error
                );
            }
        }
        Err(e) => {
            if e.definite {
                s.failed_definite += n;
            } else {
                s.failed_indeterminate += n;
            }
            s.window_failed += n;
            s.outages.failure(now, &e.to_string());
        }
    }
}

fn stats_line(
    label: &str,
    elapsed: Duration,
    h: &Histogram,
    ok: u64,
    secs: f64,
    extra: &str,
) -> String {
    format!(
        "[{label}] +{:>7.1}s | TPS: {:>9.1} | Avg RT(ms): {:>8.3} | Max RT(ms): {:>8.3} | p50: {:>7.3} | p99: {:>8.3} | p999: {:>8.3}{extra}",
        elapsed.as_secs_f64(),
        if secs > 0.0 { ok as f64 / secs } else { 0.0 },
        h.mean_ms(),
        h.max_ms(),
        h.quantile_ms(0.5),
        h.quantile_ms(0.99),
        h.quantile_ms(0.999),
    )
}

fn client_for(common: &Common) -> Result<MqClient> {
    let addrs = parse_addr_list(&common.namesrv).context("bad -n")?;
    let mut options = ClientOptions::new(addrs);
    // Failover measurements need a fresh route soon after a leader change.
    options.route_ttl = Duration::from_secs(5);
    Ok(MqClient::new(options))
}

async fn producer(a: ProducerArgs) -> Result<()> {
    if a.threads == 0 || a.batch == 0 {
        bail!("threads and batch size must be positive");
    }
    let client = client_for(&a.common)?;
    let producer = Producer::new(
        client.clone(),
        ProducerOptions {
            group: a.group.clone(),
            retry_times: a.retries,
            retry_indeterminate: !a.no_retry_indeterminate,
            send_timeout: Duration::from_millis(a.send_timeout_ms),
            ..ProducerOptions::default()
        },
    );
    let origin = Instant::now();
    let shared = Arc::new(Mutex::new(Shared {
        window: Histogram::default(),
        total: Histogram::default(),
        window_ok: 0,
        ok: 0,
        failed_definite: 0,
        failed_indeterminate: 0,
        window_failed: 0,
        outages: OutageTracker::new(origin),
    }));
    let stop = Arc::new(Stop {
        flag: AtomicBool::new(false),
        issued: AtomicU64::new(0),
        limit: a.common.count,
        deadline: (a.common.duration_secs > 0)
            .then(|| origin + Duration::from_secs(a.common.duration_secs)),
    });
    let body = Bytes::from(vec![b'a'; a.size]);
    println!(
        "producer: topic={} threads={} size={} batch={} mode={} count={} duration={}s",
        a.common.topic,
        a.threads,
        a.size,
        a.batch,
        if a.async_send { "async" } else { "sync" },
        a.common.count,
        a.common.duration_secs
    );
    let mut workers = tokio::task::JoinSet::new();
    let seq = Arc::new(AtomicU64::new(0));
    for _ in 0..a.threads {
        let producer = producer.clone();
        let shared = shared.clone();
        let stop = stop.clone();
        let body = body.clone();
        let topic = a.common.topic.clone();
        let tags = a.tags.clone();
        let seq = seq.clone();
        let (batch, keys, async_send, inflight) =
            (a.batch, a.keys, a.async_send, a.inflight.max(1));
        workers.spawn(async move {
            let make = |i: u64| {
                let mut m = Message::new(topic.clone(), body.clone());
                if keys {
                    m = m.with_keys([format!("K{i}")]);
                }
                if !tags.is_empty() {
                    m = m.with_tags(tags.clone());
                }
                m
            };
            let sem = Arc::new(tokio::sync::Semaphore::new(inflight));
            while stop.claim(batch as u64) {
                let first = seq.fetch_add(batch as u64, Ordering::Relaxed);
                let msgs: Vec<Message> = (0..batch as u64).map(|i| make(first + i)).collect();
                let producer = producer.clone();
                let shared = shared.clone();
                let n = batch as u64;
                let task = async move {
                    let started = Instant::now();
                    let r = if n == 1 {
                        let mut msgs = msgs;
                        match msgs.pop() {
                            Some(m) => producer.send(m).await,
                            None => return,
                        }
                    } else {
                        producer.send_batch(msgs).await
                    };
                    record_send(&shared, started, &r, n);
                };
                if async_send {
                    let Ok(permit) = sem.clone().acquire_owned().await else {
                        break;
                    };
                    tokio::spawn(async move {
                        task.await;
                        drop(permit);
                    });
                } else {
                    task.await;
                }
            }
            // Wait for this sender's in-flight requests.
            let _ = sem.acquire_many(inflight as u32).await;
        });
    }
    let reporter = {
        let shared = shared.clone();
        let stop = stop.clone();
        let interval = Duration::from_secs(a.common.report_interval_secs.max(1));
        let progress = !a.common.no_progress;
        tokio::spawn(async move {
            let mut last_report = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            loop {
                tick.tick().await;
                let elapsed = origin.elapsed();
                let mut s = lock(&shared);
                if last_report.elapsed() >= interval {
                    let secs = last_report.elapsed().as_secs_f64();
                    let extra = format!(" | Send Failed: {} | OK total: {}", s.window_failed, s.ok);
                    println!(
                        "{}",
                        stats_line("producer", elapsed, &s.window, s.window_ok, secs, &extra)
                    );
                    s.window = Histogram::default();
                    s.window_ok = 0;
                    s.window_failed = 0;
                    last_report = Instant::now();
                }
                if progress {
                    let outage = match s.outages.open_since() {
                        Some((since, n)) => {
                            format!("  OUTAGE since +{} s ({} failed)", fmt_secs(since), n)
                        }
                        None => String::new(),
                    };
                    eprint!(
                        "\r+{:>6.1}s ok {:>9} failed {:>6} (definite {}, indeterminate {}){outage}   ",
                        elapsed.as_secs_f64(),
                        s.ok,
                        s.failed_definite + s.failed_indeterminate,
                        s.failed_definite,
                        s.failed_indeterminate
                    );
                }
                drop(s);
                if stop.flag.load(Ordering::Relaxed) {
                    break;
                }
            }
        })
    };
    let ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.flag.store(true, Ordering::Relaxed);
            }
        })
    };
    while workers.join_next().await.is_some() {}
    stop.flag.store(true, Ordering::Relaxed);
    ctrl_c.abort();
    let _ = reporter.await;
    if !a.common.no_progress {
        eprintln!();
    }
    let elapsed = origin.elapsed();
    let ok = print_producer_summary(&lock(&shared), elapsed);
    client.shutdown().await;
    if ok == 0 {
        bail!("no message was sent successfully");
    }
    Ok(())
}

/// Prints the final stats and outage list; returns the number of messages sent.
fn print_producer_summary(s: &Shared, elapsed: Duration) -> u64 {
    let extra = format!(
        " | OK: {} | Failed: {} (definite {}, indeterminate {})",
        s.ok,
        s.failed_definite + s.failed_indeterminate,
        s.failed_definite,
        s.failed_indeterminate
    );
    println!(
        "{}",
        stats_line(
            "producer summary",
            elapsed,
            &s.total,
            s.ok,
            elapsed.as_secs_f64(),
            &extra
        )
    );
    let closed = s.outages.outages();
    println!(
        "outages: {}",
        closed.len() + usize::from(s.outages.open_since().is_some())
    );
    for (i, o) in closed.iter().enumerate() {
        println!(
            "  #{}: +{} s -> +{} s, {} s, {} failed sends",
            i + 1,
            fmt_secs(o.start),
            fmt_secs(o.end),
            fmt_secs(o.duration()),
            o.failures
        );
    }
    if let Some((since, n)) = s.outages.open_since() {
        println!(
            "  still failing at the end: since +{} s, {} failed sends",
            fmt_secs(since),
            n
        );
    }
    s.ok
}

struct ConsumeShared {
    window_b2c: Histogram,
    window_s2c: Histogram,
    total_b2c: Histogram,
    window_n: u64,
    total_n: u64,
    errors: u64,
}

async fn consumer(a: ConsumerArgs) -> Result<()> {
    let client = client_for(&a.common)?;
    let consumer = PullConsumer::new(client.clone(), a.group.clone());
    let filter = TagFilter::parse(&a.sub);
    let queues = consumer.queues(&a.common.topic).await?;
    if queues.is_empty() {
        bail!("topic {} has no readable queue", a.common.topic);
    }
    if let Err(e) = consumer.heartbeat(&a.common.topic, &filter).await {
        tracing::warn!(error = %e, "heartbeat failed");
    }
    println!(
        "consumer: topic={} group={} queues={} start={}",
        a.common.topic,
        a.group,
        queues.len(),
        if a.from_begin {
            "min offset"
        } else {
            "max offset"
        }
    );
    let origin = Instant::now();
    let shared = Arc::new(Mutex::new(ConsumeShared {
        window_b2c: Histogram::default(),
        window_s2c: Histogram::default(),
        total_b2c: Histogram::default(),
        window_n: 0,
        total_n: 0,
        errors: 0,
    }));
    let stop = Arc::new(Stop {
        flag: AtomicBool::new(false),
        issued: AtomicU64::new(0),
        limit: a.common.count,
        deadline: (a.common.duration_secs > 0)
            .then(|| origin + Duration::from_secs(a.common.duration_secs)),
    });
    let mut workers = tokio::task::JoinSet::new();
    for q in queues {
        let consumer = consumer.clone();
        let shared = shared.clone();
        let stop = stop.clone();
        let filter = filter.clone();
        let from_begin = a.from_begin;
        workers.spawn(async move {
            let mut offset = loop {
                let r = if from_begin {
                    consumer.min_offset(&q).await
                } else {
                    consumer.max_offset(&q).await
                };
                match r {
                    Ok(o) => break o,
                    Err(_) if !stop.flag.load(Ordering::Relaxed) => {
                        lock_c(&shared).errors += 1;
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(_) => return,
                }
            };
            while !stop.flag.load(Ordering::Relaxed) {
                if stop.deadline.is_some_and(|d| Instant::now() >= d) {
                    stop.flag.store(true, Ordering::Relaxed);
                    break;
                }
                let r = consumer
                    .pull(
                        &q,
                        offset,
                        32,
                        &filter,
                        Some(Duration::from_secs(2)),
                        Some(offset),
                    )
                    .await;
                match r {
                    Ok(r) => {
                        offset = r.next_begin_offset;
                        if r.status != PullStatus::Found {
                            // A broker without long polling answers at once: do not spin.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                        let now = now_ms();
                        let n = r.messages.len() as u64;
                        {
                            let mut s = lock_c(&shared);
                            for m in &r.messages {
                                let b2c =
                                    Duration::from_millis((now - m.born_timestamp).max(0) as u64);
                                let s2c =
                                    Duration::from_millis((now - m.store_timestamp).max(0) as u64);
                                s.window_b2c.record(b2c);
                                s.total_b2c.record(b2c);
                                s.window_s2c.record(s2c);
                            }
                            s.window_n += n;
                            s.total_n += n;
                        }
                        if stop.limit > 0
                            && stop.issued.fetch_add(n, Ordering::Relaxed) + n >= stop.limit
                        {
                            stop.flag.store(true, Ordering::Relaxed);
                        }
                    }
                    Err(_) => {
                        lock_c(&shared).errors += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        });
    }
    let reporter = {
        let shared = shared.clone();
        let stop = stop.clone();
        let interval = Duration::from_secs(a.common.report_interval_secs.max(1));
        let progress = !a.common.no_progress;
        tokio::spawn(async move {
            let mut last_report = Instant::now();
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            while !stop.flag.load(Ordering::Relaxed) {
                tick.tick().await;
                let mut s = lock_c(&shared);
                if last_report.elapsed() >= interval {
                    let secs = last_report.elapsed().as_secs_f64();
                    let extra = format!(
                        " (born->consume) | Avg S2C RT(ms): {:.3} | Pull errors: {}",
                        s.window_s2c.mean_ms(),
                        s.errors
                    );
                    println!(
                        "{}",
                        stats_line(
                            "consumer",
                            origin.elapsed(),
                            &s.window_b2c,
                            s.window_n,
                            secs,
                            &extra
                        )
                    );
                    s.window_b2c = Histogram::default();
                    s.window_s2c = Histogram::default();
                    s.window_n = 0;
                    last_report = Instant::now();
                }
                if progress {
                    eprint!(
                        "\r+{:>6.1}s consumed {:>9} pull errors {:>5}   ",
                        origin.elapsed().as_secs_f64(),
                        s.total_n,
                        s.errors
                    );
                }
            }
        })
    };
    let ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.flag.store(true, Ordering::Relaxed);
            }
        })
    };
    while workers.join_next().await.is_some() {}
    stop.flag.store(true, Ordering::Relaxed);
    ctrl_c.abort();
    let _ = reporter.await;
    if !a.common.no_progress {
        eprintln!();
    }
    {
        let s = lock_c(&shared);
        let elapsed = origin.elapsed();
        println!(
            "{}",
            stats_line(
                "consumer summary",
                elapsed,
                &s.total_b2c,
                s.total_n,
                elapsed.as_secs_f64(),
                &format!(
                    " (born->consume) | Consumed: {} | Pull errors: {}",
                    s.total_n, s.errors
                )
            )
        );
    }
    client.shutdown().await;
    Ok(())
}

fn lock_c(s: &Mutex<ConsumeShared>) -> std::sync::MutexGuard<'_, ConsumeShared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}
