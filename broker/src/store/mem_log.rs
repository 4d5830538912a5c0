//! `MemLog`: a single-member, in-memory [`ReplicatedLog`] for processor tests and tools.
//!
//! Every proposal is appended and committed when `propose` is called (so the ordering
//! contract holds trivially). Entries are laid out like DLedger's data log: contiguous, each
//! taking 48 header bytes plus its body, and the body gets the same append hook as the
//! ledger's ([`stamp_physical_offset`]: PHYSICALOFFSET = pos + 48), so stored records are
//! byte-identical to what a DLedger member holds. Tests switch the role with
//! [`MemLog::set_role`].

use std::sync::{Arc, RwLock};

use bytes::{Bytes, BytesMut};
use tokio::sync::watch;

use super::commit_log::{
    Appended, CommitMark, CommitWatch, LedgerRole, LogEntry, LogRoleState, ProposeFailure,
    ProposeFuture, ReplicatedLog,
};
use crate::message::record::{stamp_physical_offset, DLEDGER_ENTRY_HEADER_LEN};
use dledger_commitlog::{Index, Pos};

#[derive(Debug, Default)]
struct Entries {
    /// (pos, body) by index.
    list: Vec<(i64, Bytes)>,
    end_pos: i64,
}

/// In-memory single-member log; cheap to clone.
#[derive(Debug, Clone)]
pub struct MemLog {
    entries: Arc<RwLock<Entries>>,
    role_tx: Arc<watch::Sender<LogRoleState>>,
    committed_tx: Arc<watch::Sender<CommitMark>>,
}

impl MemLog {
    /// An empty log that is already leader in term 1.
    pub fn new_leader() -> MemLog {
        let log = MemLog::new_follower();
        log.set_role(LedgerRole::Leader, 1);
        log
    }

    /// An empty log in the follower role (term 0).
    pub fn new_follower() -> MemLog {
        let (role_tx, _) = watch::channel(LogRoleState {
            role: LedgerRole::Follower,
            term: 0,
            leader_id: None,
        });
        let (committed_tx, _) = watch::channel(CommitMark {
            index: -1,
            end_pos: 0,
        });
        MemLog {
            entries: Arc::new(RwLock::new(Entries::default())),
            role_tx: Arc::new(role_tx),
            committed_tx: Arc::new(committed_tx),
        }
    }

    /// Changes the role (and publishes it).
    pub fn set_role(&self, role: LedgerRole, term: i64) {
        self.role_tx.send_replace(LogRoleState {
            role,
            term,
            leader_id: (role == LedgerRole::Leader).then(|| "n0".to_owned()),
        });
    }

    fn append(&self, body: Bytes) -> Result<Appended, ProposeFailure> {
        if self.role_tx.borrow().role != LedgerRole::Leader {
            return Err(ProposeFailure::NotLeader);
        }
        let mut g = self
            .entries
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let pos = g.end_pos;
        let index = g.list.len() as i64;
        let mut body = BytesMut::from(body);
        stamp_physical_offset(pos, &mut body);
        let body = body.freeze();
        g.end_pos = pos + DLEDGER_ENTRY_HEADER_LEN + body.len() as i64;
        let end_pos = g.end_pos;
        g.list.push((pos, body));
        drop(g);
        self.committed_tx
            .send_replace(CommitMark { index, end_pos });
        Ok(Appended {
            index: Index(index as u64),
            pos: Pos(pos as u64),
        })
    }
}

impl ReplicatedLog for MemLog {
    fn propose(&self, body: Bytes) -> ProposeFuture {
        let r = self.append(body);
        Box::pin(async move { r })
    }

    fn role(&self) -> watch::Receiver<LogRoleState> {
        self.role_tx.subscribe()
    }

    fn committed_mark(&self) -> CommitMark {
        *self.committed_tx.borrow()
    }

    fn commit_watch(&self) -> CommitWatch {
        CommitWatch::Broker(self.committed_tx.subscribe())
    }

    fn committed_entry(&self, index: i64) -> Result<Option<LogEntry>, String> {
        let g = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Ok(i) = usize::try_from(index) else {
            return Ok(None);
        };
        Ok(g.list.get(i).map(|(pos, body)| LogEntry {
            index,
            pos: *pos,
            body: body.clone(),
        }))
    }

    fn read_message(&self, phys: i64) -> Option<Bytes> {
        let pos = phys - DLEDGER_ENTRY_HEADER_LEN;
        let g = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let i = g.list.binary_search_by_key(&pos, |(p, _)| *p).ok()?;
        Some(g.list[i].1.clone())
    }

    fn begin_index(&self) -> i64 {
        let g = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.list.is_empty() {
            -1
        } else {
            0
        }
    }

    fn end_index(&self) -> i64 {
        let g = self
            .entries
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.list.len() as i64 - 1
    }

    fn shutdown(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::record::{CrcCheck, RecordView};
    use crate::store::commit_log::physical_offset;

    fn record() -> Bytes {
        use crate::store::test_support::{encode, record_fields};
        encode(&record_fields("T", b"hello", b"")).freeze()
    }

    #[tokio::test]
    async fn appends_apply_the_ledger_append_hook() {
        let log = MemLog::new_leader();
        // The election no-op (empty body) is stored untouched.
        let noop = log.propose(Bytes::new()).await.unwrap();
        assert_eq!(
            log.committed_entry(noop.index.raw())
                .unwrap()
                .unwrap()
                .body
                .len(),
            0
        );
        for _ in 0..2 {
            let p = log.propose(record()).await.unwrap();
            let stored = log.read_message(physical_offset(&p)).unwrap();
            let view = RecordView::parse(&stored, CrcCheck::Verify).unwrap();
            assert_eq!(view.physical_offset, p.pos.raw() + DLEDGER_ENTRY_HEADER_LEN);
            assert_eq!(
                log.committed_entry(p.index.raw()).unwrap().unwrap().body,
                stored
            );
        }
    }
}
