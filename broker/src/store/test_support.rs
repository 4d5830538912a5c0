//! Fixtures shared by the store's unit tests: a `MemLog` with probes (entry reads counted,
//! one proposal answered `Timeout`) and encoded records with fixed defaults.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use super::commit_log::{
    CommitMark, CommitWatch, LogEntry, LogRoleState, ProposeFailure, ProposeFuture, ReplicatedLog,
};
use super::mem_log::MemLog;
use crate::message::record::{encode_record, MagicPolicy, MessageLimits, RecordFields};

/// A [`MemLog`] that counts entry reads and can answer one proposal `Timeout` although it
/// was appended and committed (an indeterminate append).
pub(crate) struct ProbedLog {
    pub(crate) inner: MemLog,
    /// `committed_entry` calls so far.
    pub(crate) reads: AtomicUsize,
    proposals: AtomicUsize,
    /// The proposal (counted from 0) answered `Timeout`.
    timeout_at: Option<usize>,
    /// What `committed_mark()` and `commit_watch()` show instead of the inner log's mark, once set.
    commit_override: std::sync::Mutex<Option<Arc<watch::Sender<CommitMark>>>>,
}

impl ProbedLog {
    pub(crate) fn new(inner: MemLog) -> Self {
        Self {
            inner,
            reads: AtomicUsize::new(0),
            proposals: AtomicUsize::new(0),
            timeout_at: None,
            commit_override: std::sync::Mutex::new(None),
        }
    }

    /// From now on `committed_mark()` and `commit_watch()` show `mark` (a restarted member whose checkpointed commit
    /// lags what it dispatched before); the returned sender moves it on.
    pub(crate) fn override_committed(&self, mark: CommitMark) -> Arc<watch::Sender<CommitMark>> {
        let tx = Arc::new(watch::channel(mark).0);
        *self.commit_override.lock().unwrap() = Some(Arc::clone(&tx));
        tx
    }

    /// Proposal number `n` (from 0) is appended and committed but answered `Timeout`.
    pub(crate) fn timeout_at(inner: MemLog, n: usize) -> Self {
        Self {
            timeout_at: Some(n),
            ..Self::new(inner)
        }
    }
}

impl ReplicatedLog for ProbedLog {
    fn propose(&self, body: Bytes) -> ProposeFuture {
        let f = self.inner.propose(body);
        let nth = self.proposals.fetch_add(1, Ordering::SeqCst);
        if self.timeout_at != Some(nth) {
            return f;
        }
        Box::pin(async move {
            let r = f.await;
            if r.is_ok() {
                Err(ProposeFailure::Timeout)
            } else {
                r
            }
        })
    }
    fn role(&self) -> watch::Receiver<LogRoleState> {
        self.inner.role()
    }
    fn committed_mark(&self) -> CommitMark {
        match &*self.commit_override.lock().unwrap() {
            Some(tx) => *tx.borrow(),
            None => self.inner.committed_mark(),
        }
    }
    fn commit_watch(&self) -> CommitWatch {
        match &*self.commit_override.lock().unwrap() {
            Some(tx) => CommitWatch::Broker(tx.subscribe()),
            None => self.inner.commit_watch(),
        }
    }
    fn committed_entry(&self, index: i64) -> Result<Option<LogEntry>, String> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.committed_entry(index)
    }
    fn read_message(&self, phys: i64) -> Option<Bytes> {
        self.inner.read_message(phys)
    }
    fn begin_index(&self) -> i64 {
        self.inner.begin_index()
    }
    fn end_index(&self) -> i64 {
        self.inner.end_index()
    }
    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.inner.shutdown()
    }
}

/// Record fields for `topic` with `body` and encoded `properties`: queue 0 at offset 0,
/// born at 1 ms, stored at 2 ms, both hosts 127.0.0.1:10911; tests override what they vary.
pub(crate) fn record_fields<'a>(
    topic: &'a str,
    body: &'a [u8],
    properties: &'a [u8],
) -> RecordFields<'a> {
    let host: SocketAddr = "127.0.0.1:10911".parse().unwrap();
    RecordFields {
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: 1,
        born_host: host,
        store_timestamp: 2,
        store_host: host,
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body,
        topic,
        properties,
    }
}

/// `f` encoded as a stored record (default limits).
pub(crate) fn encode(f: &RecordFields<'_>) -> BytesMut {
    let mut b = BytesMut::new();
    encode_record(f, &MessageLimits::default(), MagicPolicy::Auto, &mut b).unwrap();
    b
}
