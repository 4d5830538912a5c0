//! Metrics and logs for the name server and the broker.
//!
//! ```text
//! metric, histogram, family   lock-free values: Counter, Gauge (atomics), LatencyHistogram
//!                             (fixed bucket bounds, atomic bucket counts), Family (a label set
//!                             fixed at construction, indexed without allocating)
//! exposition                  pure: Prometheus text format 0.0.4 writer (HELP/TYPE, escaping)
//! registry                    the collectors of one process; renders them on each scrape
//! http                        tokio: GET /metrics over a minimal, bounded HTTP/1.1 server
//! namesrv_metrics,            the metric sets of the two servers (names, labels, help)
//! broker_metrics
//! disk_usage                  bytes a directory tree occupies on disk
//! logging, log_file           tracing-subscriber setup: console + optional non-blocking file
//! ```
//!
//! Invariants:
//! - updating a metric is a few relaxed atomic operations: no lock, no allocation, no syscall;
//! - label values are fixed when a family is built, so an update never formats or allocates;
//! - the HTTP server never panics on any input, never buffers more than its request limit,
//!   never waits on a client longer than its timeouts, and stops on its cancellation token;
//! - rendering emits each family's samples contiguously after one `# HELP` and one `# TYPE`.

pub mod broker_metrics;
pub mod disk_usage;
pub mod error;
pub mod exposition;
pub mod family;
pub mod histogram;
pub mod http;
mod log_file;
pub mod logging;
pub mod metric;
pub mod namesrv_metrics;
pub mod registry;

pub use broker_metrics::{
    role_code, role_label, BrokerMetrics, LedgerRoleKind, LedgerSample, LogMarks, PeerSample,
    PullOutcome, QueueRepairs, ReplicationSample, SendOutcome,
};
pub use error::ObserveError;
pub use exposition::{Desc, Exposition, MetricKind};
pub use family::Family;
pub use histogram::{HistogramSnapshot, LatencyHistogram, DEFAULT_LATENCY_BOUNDS_US};
pub use http::{HttpLimits, MetricsServer};
pub use metric::{Counter, Gauge};
pub use namesrv_metrics::{NamesrvMetrics, NamesrvRequestClass};
pub use registry::{Collect, Registry};
