// Goal: updates from many threads at once lose nothing and scrapes during updates stay well
// formed. Method: 8 threads hammer a counter, a gauge and a histogram while another thread
// renders; totals are checked exactly once the writers are joined.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use observe::{BrokerMetrics, Exposition};
use remoting::code::ResponseCode;

const THREADS: u64 = 8;
const PER_THREAD: u64 = 20_000;

#[test]
fn concurrent_updates_are_all_counted_and_scrapes_stay_valid() {
    let m = Arc::new(BrokerMetrics::new(&["n0", "n1"]));
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let m = Arc::clone(&m);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut scrapes = 0u32;
            while !stop.load(Ordering::Relaxed) || scrapes == 0 {
                let mut out = Exposition::new();
                m.render(&mut out);
                let text = out.finish();
                let parsed = common::parse(&text).unwrap();
                let sent = parsed.value("broker_messages_sent_total", &[]).unwrap();
                assert!(sent <= (THREADS * PER_THREAD) as f64);
                scrapes += 1;
            }
            scrapes
        })
    };
    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                for i in 0..PER_THREAD {
                    let latency = Duration::from_micros((i * 37 + t) % 20_000);
                    m.observe_send(ResponseCode::SUCCESS, latency, 1);
                    m.observe_pull(ResponseCode::PULL_NOT_FOUND, latency, 0);
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();
    assert!(scrapes > 0);

    let mut out = Exposition::new();
    m.render(&mut out);
    let parsed = common::parse(&out.finish()).unwrap();
    let total = (THREADS * PER_THREAD) as f64;
    assert_eq!(parsed.value("broker_messages_sent_total", &[]), Some(total));
    assert_eq!(
        parsed.value("broker_send_requests_total", &[("result", "ok")]),
        Some(total)
    );
    assert_eq!(
        parsed.value("broker_send_latency_seconds_count", &[]),
        Some(total)
    );
    assert_eq!(
        parsed.value(
            "broker_pull_requests_total",
            &[("result", "no_new_message")]
        ),
        Some(total)
    );
    common::check_histogram(&parsed, "broker_send_latency_seconds").unwrap();
    // Exact sum: each thread observed (i*37+t) % 20000 µs.
    let want_sum_us: u64 = (0..THREADS)
        .flat_map(|t| (0..PER_THREAD).map(move |i| (i * 37 + t) % 20_000))
        .sum();
    let got = parsed
        .value("broker_send_latency_seconds_sum", &[])
        .unwrap();
    assert!((got - want_sum_us as f64 / 1e6).abs() < 1e-6, "{got}");
}
