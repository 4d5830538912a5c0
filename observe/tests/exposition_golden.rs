// Goal: the text we render is exactly the Prometheus 0.0.4 format, byte for byte, and the
// full metric sets parse back. Method: a hand-written golden string for a small collector
// exercising escaping and histograms; a strict reader over NamesrvMetrics and BrokerMetrics.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use observe::broker_metrics::PeerSample;
use observe::{
    BrokerMetrics, Collect, Counter, Desc, Exposition, LatencyHistogram, LedgerRoleKind,
    LedgerSample, NamesrvMetrics, Registry,
};
use remoting::code::{RequestCode, ResponseCode};

static BOUNDS_US: &[u64] = &[500, 1_000, 250_000];

struct Small {
    hits: Counter,
    latency: LatencyHistogram,
}

const HITS: Desc = Desc::counter(
    "demo_hits_total",
    "Hits with a \\ backslash\nand a newline.",
);
const LATENCY: Desc = Desc::histogram("demo_latency_seconds", "Latency.");
const WEIRD: Desc = Desc::gauge("demo_weird", "Label escaping.");

impl Collect for Small {
    fn collect(&self, out: &mut Exposition) {
        out.counter(&HITS, &[("path", "/a"), ("code", "200")], self.hits.get());
        out.counter(&HITS, &[("path", "/b"), ("code", "500")], 0);
        out.histogram(&LATENCY, &[], &self.latency.snapshot());
        out.gauge(&WEIRD, &[("v", "a\"b\\c\nd")], -3);
        out.gauge_f64(&WEIRD, &[("v", "inf")], f64::INFINITY);
    }
}

#[test]
fn golden_exposition() {
    let small = Small {
        hits: Counter::new(),
        latency: LatencyHistogram::new(BOUNDS_US),
    };
    small.hits.add(42);
    small.latency.observe(Duration::from_micros(200));
    small.latency.observe(Duration::from_micros(750));
    small.latency.observe(Duration::from_millis(2));
    small.latency.observe(Duration::from_secs(1));
    let registry = Registry::new();
    registry.register(Arc::new(small));
    let want = "\
# HELP demo_hits_total Hits with a \\\\ backslash\\nand a newline.
# TYPE demo_hits_total counter
demo_hits_total{path=\"/a\",code=\"200\"} 42
demo_hits_total{path=\"/b\",code=\"500\"} 0
# HELP demo_latency_seconds Latency.
# TYPE demo_latency_seconds histogram
demo_latency_seconds_bucket{le=\"0.0005\"} 1
demo_latency_seconds_bucket{le=\"0.001\"} 2
demo_latency_seconds_bucket{le=\"0.25\"} 3
demo_latency_seconds_bucket{le=\"+Inf\"} 4
demo_latency_seconds_sum 1.00295
demo_latency_seconds_count 4
# HELP demo_weird Label escaping.
# TYPE demo_weird gauge
demo_weird{v=\"a\\\"b\\\\c\\nd\"} -3
demo_weird{v=\"inf\"} +Inf
";
    let got = registry.render();
    assert_eq!(got, want);
    let parsed = common::parse(&got).unwrap();
    assert_eq!(
        parsed.helps["demo_hits_total"],
        "Hits with a \\ backslash\nand a newline."
    );
    assert_eq!(
        parsed.value("demo_weird", &[("v", "a\"b\\c\nd")]),
        Some(-3.0)
    );
    common::check_histogram(&parsed, "demo_latency_seconds").unwrap();
}

#[test]
fn histogram_with_labels_puts_le_last() {
    let h = LatencyHistogram::new(BOUNDS_US);
    h.observe(Duration::from_micros(1));
    let mut out = Exposition::new();
    out.histogram(&LATENCY, &[("op", "x")], &h.snapshot());
    let text = out.finish();
    assert!(text.contains("demo_latency_seconds_bucket{op=\"x\",le=\"0.0005\"} 1\n"));
    assert!(text.contains("demo_latency_seconds_sum{op=\"x\"} 0.000001\n"));
    assert!(text.contains("demo_latency_seconds_count{op=\"x\"} 1\n"));
}

#[test]
fn namesrv_metrics_parse_back() {
    let m = Arc::new(NamesrvMetrics::new());
    m.observe_request(RequestCode::REGISTER_BROKER, ResponseCode::SUCCESS);
    m.observe_request(
        RequestCode::GET_ROUTEINFO_BY_TOPIC,
        ResponseCode::TOPIC_NOT_EXIST,
    );
    m.observe_request(RequestCode(4242), ResponseCode::REQUEST_CODE_NOT_SUPPORTED);
    let registry = Registry::new();
    registry.register(m.clone());
    let m2 = Arc::clone(&m);
    registry.on_scrape(move || m2.set_live_brokers(3));
    let parsed = common::parse(&registry.render()).unwrap();
    let v = |name: &str, labels: &[(&str, &str)]| parsed.value(name, labels);
    assert_eq!(
        v("namesrv_requests_total", &[("class", "register")]),
        Some(1.0)
    );
    assert_eq!(
        v("namesrv_requests_total", &[("class", "other")]),
        Some(1.0)
    );
    assert_eq!(
        v("namesrv_requests_total", &[("class", "kv_config")]),
        Some(0.0)
    );
    assert_eq!(
        v("namesrv_request_errors_total", &[("class", "route_query")]),
        Some(1.0)
    );
    assert_eq!(
        v("namesrv_route_queries_total", &[("result", "not_found")]),
        Some(1.0)
    );
    assert_eq!(v("namesrv_broker_registrations_total", &[]), Some(1.0));
    assert_eq!(v("namesrv_live_brokers", &[]), Some(3.0));
    assert_eq!(parsed.types["namesrv_live_brokers"], "gauge");
}

#[test]
fn broker_metrics_parse_back() {
    let m = BrokerMetrics::new(&["n0", "n1", "n2"]);
    m.observe_send(ResponseCode::SUCCESS, Duration::from_micros(900), 4);
    m.observe_send(ResponseCode::SYSTEM_BUSY, Duration::from_micros(50), 1);
    m.observe_pull(ResponseCode::SUCCESS, Duration::from_millis(3), 32);
    m.observe_pull(ResponseCode::PULL_NOT_FOUND, Duration::from_secs(15), 0);
    let peers = [PeerSample {
        id: "n2",
        lag: 12,
        alive: false,
    }];
    m.record_ledger(&LedgerSample {
        role: LedgerRoleKind::Candidate,
        term: 3,
        begin_index: -1,
        end_index: -1,
        committed_index: -1,
        flushed_index: -1,
        pending_appends: 0,
        peers: &peers,
    });
    m.set_disk_usage_bytes(1 << 20);
    let mut out = Exposition::new();
    m.render(&mut out);
    let parsed = common::parse(&out.finish()).unwrap();
    let v = |name: &str, labels: &[(&str, &str)]| parsed.value(name, labels);
    assert_eq!(
        v("broker_send_requests_total", &[("result", "ok")]),
        Some(1.0)
    );
    assert_eq!(
        v("broker_send_requests_total", &[("result", "busy")]),
        Some(1.0)
    );
    assert_eq!(v("broker_messages_sent_total", &[]), Some(4.0));
    assert_eq!(
        v(
            "broker_pull_requests_total",
            &[("result", "no_new_message")]
        ),
        Some(1.0)
    );
    assert_eq!(v("broker_messages_pulled_total", &[]), Some(32.0));
    assert_eq!(v("broker_send_latency_seconds_count", &[]), Some(2.0));
    assert_eq!(
        v("broker_pull_latency_seconds_bucket", &[("le", "10")]),
        Some(1.0)
    );
    assert_eq!(
        v("broker_pull_latency_seconds_bucket", &[("le", "+Inf")]),
        Some(2.0)
    );
    assert_eq!(v("dledger_role", &[]), Some(1.0));
    assert_eq!(
        v("dledger_role_active", &[("role", "candidate")]),
        Some(1.0)
    );
    assert_eq!(v("dledger_term", &[]), Some(3.0));
    assert_eq!(v("dledger_committed_index", &[]), Some(-1.0));
    assert_eq!(v("dledger_peer_lag_entries", &[("peer", "n2")]), Some(12.0));
    assert_eq!(v("dledger_peer_alive", &[("peer", "n2")]), Some(0.0));
    assert_eq!(v("broker_store_disk_usage_bytes", &[]), Some(1_048_576.0));
    common::check_histogram(&parsed, "broker_send_latency_seconds").unwrap();
    common::check_histogram(&parsed, "broker_pull_latency_seconds").unwrap();
    for name in parsed.types.keys() {
        assert!(parsed.helps.contains_key(name), "{name} has no HELP");
    }
}
