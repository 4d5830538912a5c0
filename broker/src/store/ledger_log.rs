//! [`ReplicatedLog`] over the DLedger [`Ledger`] runtime (notes/LEDGER_API.md).
//!
//! The role watch is forwarded by a small task (mapping the runtime's type to the broker's;
//! roles change rarely). The committed mark is not forwarded: it moves with nearly every
//! batch of appends, and a forwarding task would be one more task wake-up per commit on
//! every member. Readers take it from the runtime's watch ([`ReplicatedLog::committed_mark`],
//! [`ReplicatedLog::commit_watch`]).
//! Reads go straight to the runtime's `StoreReader` (committed entries only, CRC-checked;
//! the dispatcher's borrowed read skips the CRC pass, see `with_committed_entry` below).
//!
//! PHYSICALOFFSET: the ledger's append hook (installed by `broker::ledger_options`) writes
//! `pos + 48` into the record before it is stored and replicated, as Java's DLedgerCommitLog
//! does; read paths serve stored records unchanged.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use dledger_commitlog::runtime::{self as rt, Ledger};
use dledger_commitlog::Index;
use tokio::sync::watch;

use super::commit_log::{
    CommitMark, CommitWatch, LogEntry, LogEntryRef, LogRoleState, ProposeFailure, ProposeFuture,
    ReplicatedLog,
};

/// The runtime ledger seen as a [`ReplicatedLog`].
pub struct LedgerLog {
    ledger: Ledger,
    /// Kept so each read (every dispatched entry, every pulled record) needs no handle.
    reader: rt::StoreReader,
    role_rx: watch::Receiver<LogRoleState>,
    /// The runtime's committed watch (read in place, never awaited here).
    committed_rx: watch::Receiver<rt::CommittedMark>,
}

fn map_role(r: &rt::RoleState) -> LogRoleState {
    LogRoleState {
        role: r.role,
        term: r.term.raw(),
        leader_id: r.leader_id.clone(),
    }
}

fn map_error(e: rt::ProposeError) -> ProposeFailure {
    match e {
        rt::ProposeError::NotLeader { .. } => ProposeFailure::NotLeader,
        rt::ProposeError::Busy => ProposeFailure::Busy("pending window full".into()),
        rt::ProposeError::Transferring => {
            ProposeFailure::Busy("leadership transfer in progress".into())
        }
        rt::ProposeError::DiskFull => ProposeFailure::Busy("disk full".into()),
        rt::ProposeError::Storage(s) => ProposeFailure::Unavailable(s),
        rt::ProposeError::EmptyBody => {
            ProposeFailure::Unavailable("empty bodies are reserved for the election no-op".into())
        }
        rt::ProposeError::Shutdown => ProposeFailure::Unavailable("ledger shut down".into()),
        rt::ProposeError::Timeout => ProposeFailure::Timeout,
        rt::ProposeError::TermChanged => ProposeFailure::TermChanged,
    }
}

impl LedgerLog {
    /// Wraps a started ledger; must run inside a tokio runtime (spawns the role forwarder).
    pub fn new(ledger: Ledger) -> LedgerLog {
        let mut src_role = ledger.role();
        let (role_tx, role_rx) = watch::channel(map_role(&src_role.borrow_and_update()));
        tokio::spawn(async move {
            while src_role.changed().await.is_ok() {
                let v = map_role(&src_role.borrow_and_update());
                if role_tx.send(v).is_err() {
                    break;
                }
            }
        });
        LedgerLog {
            committed_rx: ledger.committed(),
            reader: ledger.reader(),
            ledger,
            role_rx,
        }
    }

    /// The wrapped ledger (status, leadership transfer).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

impl ReplicatedLog for LedgerLog {
    fn propose(&self, body: Bytes) -> ProposeFuture {
        let ledger = self.ledger.clone();
        Box::pin(async move { ledger.propose(body).await.map_err(map_error) })
    }

    fn role(&self) -> watch::Receiver<LogRoleState> {
        self.role_rx.clone()
    }

    fn committed_mark(&self) -> CommitMark {
        CommitMark::from_ledger(&self.committed_rx.borrow())
    }

    fn commit_watch(&self) -> CommitWatch {
        CommitWatch::Ledger(self.ledger.committed())
    }

    fn committed_entry(&self, index: i64) -> Result<Option<LogEntry>, String> {
        let Ok(i) = u64::try_from(index) else {
            return Ok(None);
        };
        match self.reader.get(Index(i)) {
            Ok(e) => Ok(Some(LogEntry {
                index: e.index.raw(),
                pos: e.pos.raw(),
                body: e.body,
            })),
            Err(rt::StoreError::IndexOutOfRange { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// In place from the data file, without the CRC pass of `committed_entry`
    /// (`StoreReader::with_committed`: the CRC was checked when the entry entered this
    /// member's log; the dispatcher is the only caller).
    fn with_committed_entry(
        &self,
        index: i64,
        f: &mut dyn FnMut(LogEntryRef<'_>),
    ) -> Result<bool, String> {
        let Ok(i) = u64::try_from(index) else {
            return Ok(false);
        };
        let read = self.reader.with_committed(Index(i), |e| f(log_entry(e)));
        Ok(readable(read)?.is_some())
    }

    /// One walk over the data files (`StoreReader::with_committed_run`): no index read,
    /// data-file lookup or reference count per entry.
    fn with_committed_entries(
        &self,
        from: i64,
        last: i64,
        f: &mut dyn FnMut(LogEntryRef<'_>) -> bool,
    ) -> Result<(), String> {
        let (Ok(from), Ok(last)) = (u64::try_from(from), u64::try_from(last)) else {
            return Ok(());
        };
        let run = self
            .reader
            .with_committed_run(Index(from), Index(last), |e| f(log_entry(e)));
        readable(run)?;
        Ok(())
    }

    fn read_message(&self, phys: i64) -> Option<Bytes> {
        let phys = u64::try_from(phys).ok()?;
        self.reader.read_message(phys).ok()
    }

    fn begin_index(&self) -> i64 {
        Index::to_wire(self.reader.begin_index())
    }

    fn end_index(&self) -> i64 {
        Index::to_wire(self.reader.end_index())
    }

    fn shutdown(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.ledger.shutdown())
    }

    fn status(&self) -> Option<rt::LedgerStatus> {
        Some(self.ledger.status())
    }
}

/// The broker's view of an entry borrowed from the ledger's files.
fn log_entry(e: rt::EntryRef<'_>) -> LogEntryRef<'_> {
    LogEntryRef {
        index: e.index.raw(),
        pos: e.pos.raw(),
        body: e.body,
    }
}

/// A committed read's outcome: `None` when the entries are not (or no longer) committed in
/// this member's log, an error text for anything else that went wrong.
fn readable<T>(read: Result<T, rt::StoreError>) -> Result<Option<T>, String> {
    match read {
        Ok(v) => Ok(Some(v)),
        Err(rt::StoreError::IndexOutOfRange { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
