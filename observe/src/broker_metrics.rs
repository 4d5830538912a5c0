//! Metrics of a broker over a DLedger commit log: send and pull traffic (requests by result,
//! latency histograms, message counts), the ledger's replication state (role, term, indexes,
//! per-peer lag, pending appends, role changes) and the store's disk usage.
//!
//! Send/pull are recorded by the processors as requests are answered. Ledger state is
//! sampled (about once a second) from the ledger's status snapshot through
//! [`BrokerMetrics::record_ledger`]; role changes are counted when a sample (or a role-change
//! event passed to [`BrokerMetrics::observe_role`]) differs from the last role seen.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use remoting::code::ResponseCode;

use crate::exposition::{Desc, Exposition};
use crate::family::Family;
use crate::histogram::LatencyHistogram;
use crate::metric::{Counter, Gauge};
use crate::namesrv_metrics::{render_counters, render_gauges};
use crate::registry::Collect;

/// DLedger member role: the ledger's own role type, under the name the metrics use.
pub use dledger_commitlog::core::Role as LedgerRoleKind;

/// Every role, in the order of their `dledger_role` gauge codes.
const ROLES: [LedgerRoleKind; 3] = [
    LedgerRoleKind::Follower,
    LedgerRoleKind::Candidate,
    LedgerRoleKind::Leader,
];

/// The `role` label value of `role`.
pub fn role_label(role: LedgerRoleKind) -> &'static str {
    match role {
        LedgerRoleKind::Follower => "follower",
        LedgerRoleKind::Candidate => "candidate",
        LedgerRoleKind::Leader => "leader",
    }
}

/// The `dledger_role` gauge value of `role` (0 follower, 1 candidate, 2 leader).
pub fn role_code(role: LedgerRoleKind) -> i64 {
    match role {
        LedgerRoleKind::Follower => 0,
        LedgerRoleKind::Candidate => 1,
        LedgerRoleKind::Leader => 2,
    }
}

/// How a send request was answered (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOutcome {
    /// SEND_OK (SUCCESS).
    Ok,
    /// Stored but not replicated/flushed in time (FLUSH_*_TIMEOUT, SLAVE_NOT_AVAILABLE).
    Timeout,
    /// SYSTEM_BUSY: the ledger's queue is full or this broker is not (yet) master.
    Busy,
    /// Anything else.
    Error,
}

impl SendOutcome {
    const ALL: [SendOutcome; 4] = [
        SendOutcome::Ok,
        SendOutcome::Timeout,
        SendOutcome::Busy,
        SendOutcome::Error,
    ];

    /// The outcome of a response code.
    pub fn of(code: ResponseCode) -> Self {
        match code {
            ResponseCode::SUCCESS => SendOutcome::Ok,
            ResponseCode::FLUSH_DISK_TIMEOUT
            | ResponseCode::FLUSH_SLAVE_TIMEOUT
            | ResponseCode::SLAVE_NOT_AVAILABLE => SendOutcome::Timeout,
            ResponseCode::SYSTEM_BUSY => SendOutcome::Busy,
            _ => SendOutcome::Error,
        }
    }

    fn label(self) -> &'static str {
        match self {
            SendOutcome::Ok => "ok",
            SendOutcome::Timeout => "timeout",
            SendOutcome::Busy => "busy",
            SendOutcome::Error => "error",
        }
    }
}

/// How a pull request was answered (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullOutcome {
    Found,
    NoNewMessage,
    RetryImmediately,
    OffsetMoved,
    Error,
}

impl PullOutcome {
    const ALL: [PullOutcome; 5] = [
        PullOutcome::Found,
        PullOutcome::NoNewMessage,
        PullOutcome::RetryImmediately,
        PullOutcome::OffsetMoved,
        PullOutcome::Error,
    ];

    /// The outcome of a response code.
    pub fn of(code: ResponseCode) -> Self {
        match code {
            ResponseCode::SUCCESS => PullOutcome::Found,
            ResponseCode::PULL_NOT_FOUND => PullOutcome::NoNewMessage,
            ResponseCode::PULL_RETRY_IMMEDIATELY => PullOutcome::RetryImmediately,
            ResponseCode::PULL_OFFSET_MOVED => PullOutcome::OffsetMoved,
            _ => PullOutcome::Error,
        }
    }

    fn label(self) -> &'static str {
        match self {
            PullOutcome::Found => "found",
            PullOutcome::NoNewMessage => "no_new_message",
            PullOutcome::RetryImmediately => "retry_immediately",
            PullOutcome::OffsetMoved => "offset_moved",
            PullOutcome::Error => "error",
        }
    }
}

/// One peer in a ledger sample.
#[derive(Clone, Copy, Debug)]
pub struct PeerSample<'a> {
    pub id: &'a str,
    /// Entries behind the leader's end (-1 when unknown, e.g. on a follower).
    pub lag: i64,
    pub alive: bool,
}

/// Role and log water marks, as any replicated log exposes them (DLedger numbers: -1 = none).
#[derive(Clone, Copy, Debug)]
pub struct LogMarks {
    pub role: LedgerRoleKind,
    pub term: i64,
    pub begin_index: i64,
    pub end_index: i64,
    pub committed_index: i64,
}

/// Replication detail only the DLedger status snapshot has.
#[derive(Clone, Copy, Debug)]
pub struct ReplicationSample<'a> {
    pub flushed_index: i64,
    pub pending_appends: usize,
    pub peers: &'a [PeerSample<'a>],
}

/// The ledger state metrics need (DLedger numbers: -1 = none).
#[derive(Clone, Debug)]
pub struct LedgerSample<'a> {
    pub role: LedgerRoleKind,
    pub term: i64,
    pub begin_index: i64,
    pub end_index: i64,
    pub committed_index: i64,
    pub flushed_index: i64,
    pub pending_appends: usize,
    pub peers: &'a [PeerSample<'a>],
}

const SEND_REQUESTS: Desc = Desc::counter(
    "broker_send_requests_total",
    "Send requests answered, by result.",
);
const SEND_LATENCY: Desc = Desc::histogram(
    "broker_send_latency_seconds",
    "Time from receiving a send request to its answer (includes quorum replication).",
);
const MESSAGES_SENT: Desc = Desc::counter(
    "broker_messages_sent_total",
    "Messages stored by successful send requests (a batch counts each message).",
);
const PULL_REQUESTS: Desc = Desc::counter(
    "broker_pull_requests_total",
    "Pull requests answered, by result.",
);
const PULL_LATENCY: Desc = Desc::histogram(
    "broker_pull_latency_seconds",
    "Time from receiving a pull request to its answer (includes long-poll suspension).",
);
const MESSAGES_PULLED: Desc = Desc::counter(
    "broker_messages_pulled_total",
    "Messages returned by pull requests.",
);
const ROLE: Desc = Desc::gauge(
    "dledger_role",
    "DLedger role of this member: 0 follower, 1 candidate, 2 leader.",
);
const ROLE_ACTIVE: Desc = Desc::gauge(
    "dledger_role_active",
    "1 for the DLedger role this member is in, 0 for the others.",
);
const ROLE_CHANGES: Desc = Desc::counter(
    "dledger_role_changes_total",
    "DLedger role changes observed.",
);
const TERM: Desc = Desc::gauge("dledger_term", "Current DLedger term.");
const BEGIN_INDEX: Desc = Desc::gauge(
    "dledger_ledger_begin_index",
    "First index still in the log (-1 when empty).",
);
const END_INDEX: Desc = Desc::gauge(
    "dledger_ledger_end_index",
    "Last index appended to the local log (-1 when empty).",
);
const COMMITTED_INDEX: Desc = Desc::gauge(
    "dledger_committed_index",
    "Last index known committed by a quorum (-1 when none).",
);
const FLUSHED_INDEX: Desc = Desc::gauge(
    "dledger_flushed_index",
    "Last index flushed to disk locally (-1 when none).",
);
const PENDING_APPENDS: Desc = Desc::gauge(
    "dledger_pending_appends",
    "Proposals appended but not yet committed (leader).",
);
const PEER_LAG: Desc = Desc::gauge(
    "dledger_peer_lag_entries",
    "Entries a peer is behind the leader's end index (-1 unknown, e.g. not leader).",
);
const PEER_ALIVE: Desc = Desc::gauge(
    "dledger_peer_alive",
    "1 when the peer answered within the last lease period.",
);
const DISK_USAGE: Desc = Desc::gauge(
    "broker_store_disk_usage_bytes",
    "Bytes allocated on disk under the store root directory.",
);

const QUEUE_REPAIRS: Desc = Desc::counter(
    "broker_consume_queue_repairs_total",
    "Consume-queue repairs made by dispatch, by kind: holes written for offsets no record \
     reached, records that filled a hole, records appended at another offset than their own, \
     records that fit no queue. Nonzero means the log and a queue disagreed (G7).",
);

/// Kinds of [`QueueRepairs`], in label order.
const QUEUE_REPAIR_KINDS: [&str; 4] = ["holes", "filled", "renumbered", "dropped"];

/// Cumulative consume-queue repair counts as the store keeps them (see `QUEUE_REPAIRS`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueRepairs {
    pub holes: u64,
    pub filled: u64,
    pub renumbered: u64,
    pub dropped: u64,
}

/// The broker's metric set.
#[derive(Debug)]
pub struct BrokerMetrics {
    send_requests: Family<Counter>,
    send_latency: LatencyHistogram,
    messages_sent: Counter,
    pull_requests: Family<Counter>,
    pull_latency: LatencyHistogram,
    messages_pulled: Counter,
    role: Gauge,
    role_active: Family<Gauge>,
    /// Code of the last role seen, -1 before the first observation.
    last_role: AtomicI64,
    role_changes: Counter,
    term: Gauge,
    begin_index: Gauge,
    end_index: Gauge,
    committed_index: Gauge,
    flushed_index: Gauge,
    pending_appends: Gauge,
    peer_lag: Family<Gauge>,
    peer_alive: Family<Gauge>,
    disk_usage: Gauge,
    /// Latest [`QueueRepairs`] sample, in [`QUEUE_REPAIR_KINDS`] order.
    queue_repairs: [AtomicU64; 4],
}

impl BrokerMetrics {
    /// Metrics for a member of a group whose peers are `peer_ids` (the per-peer label set,
    /// fixed for the life of the process; samples for other ids are ignored).
    pub fn new<S: AsRef<str>>(peer_ids: &[S]) -> Self {
        let peers = || peer_ids.iter().map(|p| [p.as_ref().to_owned()]);
        let minus_one = || {
            let g = Gauge::new();
            g.set(-1);
            g
        };
        BrokerMetrics {
            send_requests: Family::new(&["result"], SendOutcome::ALL.map(|o| [o.label()])),
            send_latency: LatencyHistogram::default(),
            messages_sent: Counter::new(),
            pull_requests: Family::new(&["result"], PullOutcome::ALL.map(|o| [o.label()])),
            pull_latency: LatencyHistogram::default(),
            messages_pulled: Counter::new(),
            role: Gauge::new(),
            role_active: Family::new(&["role"], ROLES.map(|r| [role_label(r)])),
            last_role: AtomicI64::new(-1),
            role_changes: Counter::new(),
            term: Gauge::new(),
            begin_index: minus_one(),
            end_index: minus_one(),
            committed_index: minus_one(),
            flushed_index: minus_one(),
            pending_appends: Gauge::new(),
            peer_lag: Family::new(&["peer"], peers()),
            peer_alive: Family::new(&["peer"], peers()),
            disk_usage: Gauge::new(),
            queue_repairs: Default::default(),
        }
    }

    /// Records the store's cumulative consume-queue repair counts.
    pub fn record_queue_repairs(&self, r: &QueueRepairs) {
        for (slot, v) in self
            .queue_repairs
            .iter()
            .zip([r.holes, r.filled, r.renumbered, r.dropped])
        {
            slot.store(v, Ordering::Relaxed);
        }
    }

    /// Records one answered send request carrying `messages` messages.
    #[inline]
    pub fn observe_send(&self, response: ResponseCode, latency: Duration, messages: u64) {
        let outcome = SendOutcome::of(response);
        if let Some(c) = self.send_requests.at(outcome as usize) {
            c.inc();
        }
        if outcome == SendOutcome::Ok {
            self.messages_sent.add(messages);
        }
        self.send_latency.observe(latency);
    }

    /// Records one answered pull request returning `messages` messages.
    #[inline]
    pub fn observe_pull(&self, response: ResponseCode, latency: Duration, messages: u64) {
        let outcome = PullOutcome::of(response);
        if let Some(c) = self.pull_requests.at(outcome as usize) {
            c.inc();
        }
        self.messages_pulled.add(messages);
        self.pull_latency.observe(latency);
    }

    /// Records the current role (from a sample or a role-change event); counts a change when
    /// it differs from the last role seen.
    pub fn observe_role(&self, role: LedgerRoleKind) {
        let code = role_code(role);
        let previous = self.last_role.swap(code, Ordering::Relaxed);
        if previous >= 0 && previous != code {
            self.role_changes.inc();
        }
        self.role.set(code);
        for (i, r) in ROLES.into_iter().enumerate() {
            if let Some(g) = self.role_active.at(i) {
                g.set(i64::from(r == role));
            }
        }
    }

    /// Records a full ledger status sample (marks and replication detail).
    pub fn record_ledger(&self, s: &LedgerSample<'_>) {
        self.record_log(&LogMarks {
            role: s.role,
            term: s.term,
            begin_index: s.begin_index,
            end_index: s.end_index,
            committed_index: s.committed_index,
        });
        self.record_replication(&ReplicationSample {
            flushed_index: s.flushed_index,
            pending_appends: s.pending_appends,
            peers: s.peers,
        });
    }

    /// Records role, term and water marks.
    pub fn record_log(&self, m: &LogMarks) {
        self.observe_role(m.role);
        self.term.set(m.term);
        self.begin_index.set(m.begin_index);
        self.end_index.set(m.end_index);
        self.committed_index.set(m.committed_index);
    }

    /// Records flushed index, pending appends and per-peer lag/liveness.
    pub fn record_replication(&self, s: &ReplicationSample<'_>) {
        self.flushed_index.set(s.flushed_index);
        self.pending_appends
            .set(i64::try_from(s.pending_appends).unwrap_or(i64::MAX));
        for p in s.peers {
            if let Some(g) = self.peer_lag.find(&[p.id]) {
                g.set(p.lag);
            }
            if let Some(g) = self.peer_alive.find(&[p.id]) {
                g.set(i64::from(p.alive));
            }
        }
    }

    /// Records the store's disk usage.
    pub fn set_disk_usage_bytes(&self, bytes: u64) {
        self.disk_usage
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Role changes counted so far.
    pub fn role_changes(&self) -> u64 {
        self.role_changes.get()
    }

    /// Renders every family into `out`.
    pub fn render(&self, out: &mut Exposition) {
        render_counters(out, &SEND_REQUESTS, &self.send_requests);
        out.histogram(&SEND_LATENCY, &[], &self.send_latency.snapshot());
        out.counter(&MESSAGES_SENT, &[], self.messages_sent.get());
        render_counters(out, &PULL_REQUESTS, &self.pull_requests);
        out.histogram(&PULL_LATENCY, &[], &self.pull_latency.snapshot());
        out.counter(&MESSAGES_PULLED, &[], self.messages_pulled.get());
        out.gauge(&ROLE, &[], self.role.get());
        render_gauges(out, &ROLE_ACTIVE, &self.role_active);
        out.counter(&ROLE_CHANGES, &[], self.role_changes.get());
        out.gauge(&TERM, &[], self.term.get());
        out.gauge(&BEGIN_INDEX, &[], self.begin_index.get());
        out.gauge(&END_INDEX, &[], self.end_index.get());
        out.gauge(&COMMITTED_INDEX, &[], self.committed_index.get());
        out.gauge(&FLUSHED_INDEX, &[], self.flushed_index.get());
        out.gauge(&PENDING_APPENDS, &[], self.pending_appends.get());
        render_gauges(out, &PEER_LAG, &self.peer_lag);
        render_gauges(out, &PEER_ALIVE, &self.peer_alive);
        out.gauge(&DISK_USAGE, &[], self.disk_usage.get());
        for (kind, v) in QUEUE_REPAIR_KINDS.iter().zip(&self.queue_repairs) {
            out.counter(&QUEUE_REPAIRS, &[("kind", kind)], v.load(Ordering::Relaxed));
        }
    }
}

impl Collect for BrokerMetrics {
    fn collect(&self, out: &mut Exposition) {
        self.render(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(role: LedgerRoleKind, peers: &[PeerSample<'_>]) -> String {
        let m = BrokerMetrics::new(&["n0", "n1"]);
        m.record_ledger(&LedgerSample {
            role,
            term: 7,
            begin_index: 0,
            end_index: 41,
            committed_index: 40,
            flushed_index: 41,
            pending_appends: 1,
            peers,
        });
        let mut out = Exposition::new();
        m.render(&mut out);
        out.finish()
    }

    #[test]
    fn ledger_sample_sets_gauges_and_known_peers_only() {
        let peers = [
            PeerSample {
                id: "n1",
                lag: 3,
                alive: true,
            },
            PeerSample {
                id: "stranger",
                lag: 9,
                alive: true,
            },
        ];
        let text = sample(LedgerRoleKind::Leader, &peers);
        for line in [
            "dledger_role 2\n",
            "dledger_role_active{role=\"leader\"} 1\n",
            "dledger_role_active{role=\"follower\"} 0\n",
            "dledger_term 7\n",
            "dledger_committed_index 40\n",
            "dledger_ledger_end_index 41\n",
            "dledger_pending_appends 1\n",
            "dledger_peer_lag_entries{peer=\"n1\"} 3\n",
            "dledger_peer_lag_entries{peer=\"n0\"} 0\n",
            "dledger_peer_alive{peer=\"n1\"} 1\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("stranger"));
    }

    #[test]
    fn role_changes_count_transitions_not_samples() {
        let m = BrokerMetrics::new::<&str>(&[]);
        m.observe_role(LedgerRoleKind::Follower);
        m.observe_role(LedgerRoleKind::Follower);
        assert_eq!(m.role_changes(), 0);
        m.observe_role(LedgerRoleKind::Candidate);
        m.observe_role(LedgerRoleKind::Leader);
        m.observe_role(LedgerRoleKind::Leader);
        m.observe_role(LedgerRoleKind::Follower);
        assert_eq!(m.role_changes(), 3);
    }

    #[test]
    fn outcomes_follow_response_codes() {
        assert_eq!(SendOutcome::of(ResponseCode::SUCCESS), SendOutcome::Ok);
        assert_eq!(
            SendOutcome::of(ResponseCode::SYSTEM_BUSY),
            SendOutcome::Busy
        );
        assert_eq!(
            SendOutcome::of(ResponseCode::FLUSH_SLAVE_TIMEOUT),
            SendOutcome::Timeout
        );
        assert_eq!(SendOutcome::of(ResponseCode(1)), SendOutcome::Error);
        assert_eq!(
            PullOutcome::of(ResponseCode::PULL_NOT_FOUND),
            PullOutcome::NoNewMessage
        );
        assert_eq!(PullOutcome::of(ResponseCode(-5)), PullOutcome::Error);
    }
}
