//! Broker metrics wiring (the metric set itself is `observe::BrokerMetrics`).
//!
//! - Send and pull requests are timed at the processor boundary: [`instrument`] wraps the
//!   registered SEND_MESSAGE(_V2), SEND_BATCH_MESSAGE, PULL_MESSAGE and LITE_PULL_MESSAGE
//!   processors, so latency covers the whole answer (quorum wait, long-poll suspension).
//! - [`spawn_log_sampler`] follows the replicated log: every role change as it happens, and
//!   once a second term/water marks, the DLedger status when the log has one (flushed index,
//!   pending appends, per-peer lag and liveness) and the store root's disk usage. Role and
//!   term always come from the role watch, so a status snapshot taken a moment earlier
//!   never counts as a role change.
//! - [`start_endpoint`] serves `GET /metrics` on `metricsPort` (0 = off).
//!
//! Nothing here allocates per request; samplers stop on the broker's shutdown token.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use observe::{
    BrokerMetrics, LedgerRoleKind, LogMarks, MetricsServer, PeerSample, Registry, ReplicationSample,
};
use remoting::processor::{ProcessFuture, RequestProcessor};
use remoting::{ConnectionHandle, ProcessorRegistry, RemotingCommand, RequestCode, ResponseCode};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::BrokerError;
use crate::role::LedgerRole;
use crate::store::commit_log::ReplicatedLog;

/// How often gauges are sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Which request family a wrapped processor serves.
#[derive(Clone, Copy, Debug)]
enum Traffic {
    Send,
    SendBatch,
    Pull,
}

/// A processor whose answers are counted and timed.
struct Observed {
    inner: Arc<dyn RequestProcessor>,
    metrics: Arc<BrokerMetrics>,
    traffic: Traffic,
}

impl Observed {
    /// Messages a request carries (sends; 0 for pulls, counted from their answers).
    fn messages_in(&self, request: &RemotingCommand) -> u64 {
        match self.traffic {
            Traffic::Send => 1,
            Traffic::SendBatch => count_size_prefixed(request.body()),
            Traffic::Pull => 0,
        }
    }

    /// Counts and times one answer.
    fn observe(&self, start: Instant, messages: u64, response: &Option<RemotingCommand>) {
        let Some(r) = response else {
            return;
        };
        let elapsed = start.elapsed();
        let code = r.response_code();
        match self.traffic {
            Traffic::Send | Traffic::SendBatch => {
                self.metrics.observe_send(code, elapsed, messages)
            }
            Traffic::Pull => {
                let pulled = if code == ResponseCode::SUCCESS {
                    count_size_prefixed(r.body())
                } else {
                    0
                };
                self.metrics.observe_pull(code, elapsed, pulled)
            }
        }
    }
}

impl RequestProcessor for Observed {
    fn process<'a>(
        &'a self,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'a> {
        let start = Instant::now();
        let messages = self.messages_in(&request);
        let answer = self.inner.process(conn, request);
        Box::pin(async move {
            let response = answer.await;
            self.observe(start, messages, &response);
            response
        })
    }

    /// What the connection calls: the inner processor's owning future wrapped once (the
    /// default would box `process`'s future again, one more allocation per request).
    fn process_owned(
        self: Arc<Self>,
        conn: ConnectionHandle,
        request: RemotingCommand,
    ) -> ProcessFuture<'static> {
        let start = Instant::now();
        let messages = self.messages_in(&request);
        let answer = Arc::clone(&self.inner).process_owned(conn, request);
        Box::pin(async move {
            let response = answer.await;
            self.observe(start, messages, &response);
            response
        })
    }
}

/// Records in a body made of records that each start with their own total size as a
/// big-endian i32 (stored messages in a pull answer, elements of a batch send). Stops at
/// the first size that cannot be a record, so any input is safe.
pub fn count_size_prefixed(body: &[u8]) -> u64 {
    let mut rest = body;
    let mut n = 0u64;
    while let Some(size) = rest.get(..4) {
        let size = i32::from_be_bytes([size[0], size[1], size[2], size[3]]);
        let Ok(size) = usize::try_from(size) else {
            break;
        };
        if size < 4 || size > rest.len() {
            break;
        }
        rest = &rest[size..];
        n += 1;
    }
    n
}

/// Wraps the send and pull processors of `registry` so their answers are observed.
pub fn instrument(registry: &mut ProcessorRegistry, metrics: &Arc<BrokerMetrics>) {
    let codes = [
        (RequestCode::SEND_MESSAGE, Traffic::Send),
        (RequestCode::SEND_MESSAGE_V2, Traffic::Send),
        (RequestCode::SEND_BATCH_MESSAGE, Traffic::SendBatch),
        (RequestCode::PULL_MESSAGE, Traffic::Pull),
        (RequestCode::LITE_PULL_MESSAGE, Traffic::Pull),
    ];
    for (code, traffic) in codes {
        if let Some(inner) = registry.lookup(code.0).cloned() {
            registry.register(
                code,
                Arc::new(Observed {
                    inner,
                    metrics: Arc::clone(metrics),
                    traffic,
                }),
            );
        }
    }
}

fn role_kind(role: LedgerRole) -> LedgerRoleKind {
    match role {
        LedgerRole::Follower => LedgerRoleKind::Follower,
        LedgerRole::Candidate => LedgerRoleKind::Candidate,
        LedgerRole::Leader => LedgerRoleKind::Leader,
    }
}

/// Follows `log`'s role (every change) and samples its marks and the disk usage under
/// `store_root` every [`SAMPLE_INTERVAL`] until `stop`.
pub fn spawn_log_sampler(
    log: Arc<dyn ReplicatedLog>,
    store_root: PathBuf,
    metrics: Arc<BrokerMetrics>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut role = log.role();
        let mut role_open = true;
        let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let full = tokio::select! {
                _ = stop.cancelled() => break,
                changed = role.changed(), if role_open => {
                    role_open = changed.is_ok();
                    false
                }
                _ = tick.tick() => true,
            };
            let (r, term) = {
                let s = role.borrow_and_update();
                (s.role, s.term)
            };
            metrics.record_log(&LogMarks {
                role: role_kind(r),
                term,
                begin_index: log.begin_index(),
                end_index: log.end_index(),
                committed_index: log.committed_mark().index,
            });
            if full {
                if let Some(status) = log.status() {
                    let peers: Vec<PeerSample<'_>> = status
                        .peers
                        .iter()
                        .map(|p| PeerSample {
                            id: &p.id,
                            lag: p.lag,
                            alive: p.alive,
                        })
                        .collect();
                    metrics.record_replication(&ReplicationSample {
                        flushed_index: status.flushed_index,
                        pending_appends: status.pending_proposals,
                        peers: &peers,
                    });
                }
                let root = store_root.clone();
                let usage = tokio::task::spawn_blocking(move || {
                    observe::disk_usage::disk_usage_bytes(&root)
                });
                match usage.await {
                    Ok(Ok(bytes)) => metrics.set_disk_usage_bytes(bytes),
                    Ok(Err(e)) => tracing::debug!(error = %e, "disk usage not measured"),
                    Err(_) => {}
                }
            }
        }
    })
}

/// Serves `metrics` on `ip:port` (the broker's `bindAddress`); `None` when `port` is 0
/// (metrics off).
pub async fn start_endpoint(
    ip: IpAddr,
    port: u16,
    metrics: Arc<BrokerMetrics>,
    stop: CancellationToken,
) -> Result<Option<MetricsServer>, BrokerError> {
    let registry = Arc::new(Registry::new());
    registry.register(metrics);
    MetricsServer::start_on_port(ip, port, registry, stop)
        .await
        .map_err(|e| BrokerError::System(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_prefixed_records_are_counted_and_garbage_stops_the_walk() {
        let mut body = Vec::new();
        for len in [20u32, 4, 33] {
            body.extend_from_slice(&len.to_be_bytes());
            body.resize(body.len() + len as usize - 4, 0xAB);
        }
        assert_eq!(count_size_prefixed(&body), 3);
        assert_eq!(count_size_prefixed(&[]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0]), 0);
        assert_eq!(count_size_prefixed(&[0xFF, 0xFF, 0xFF, 0xFF, 1]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0, 9, 1, 2]), 0);
        assert_eq!(count_size_prefixed(&[0, 0, 0, 0, 0, 0, 0, 0]), 0);
    }
}
