//! EntryHandler: the follower side of PUSH (spec §9.4-§9.5).
//!
//! Rules:
//! * entries are applied strictly in index order and only as an extension of the prefix
//!   verified against the current leader (`verified_end`: set by COMPARE/TRUNCATE/APPEND in this
//!   term); anything else answers INCONSISTENT_STATE so the leader re-COMPAREs (R11);
//! * an APPEND beyond a gap waits in a bounded reorder buffer keyed by its first index; a second
//!   push with the same key gets REPEATED_PUSH; a full buffer answers PUSH_REQUEST_IS_FULL at
//!   once instead of blocking the handler (R9); a push waiting longer than `maxPushTimeOutMs`
//!   gets INCONSISTENT_STATE; COMPARE/TRUNCATE and a new term flush the buffer the same way;
//! * a repeated push of entries already held answers SUCCESS (its ack was lost);
//! * `committed = max(committed, min(leader commit, verified_end))`, so the committed index never
//!   exceeds the local end nor covers an unverified entry (R7); nothing at or below the
//!   committed index is ever truncated, nor anything the current leader already sent (a
//!   duplicated TRUNCATE must not undo acknowledged appends);
//! * in sync-flush mode, APPEND/TRUNCATE/COMPARE successes are answered once the entries are
//!   flushed.

use std::collections::{BTreeMap, VecDeque};

use super::log::{Index, LogEntry, LogError, RaftLog};
use super::node::{Action, Node, RequestId};
use crate::wire::messages::{DLedgerCode, PushEntryRequest, PushEntryResponse, PushType, Response};

/// A push waiting for a gap to fill.
#[derive(Clone, Debug)]
pub(crate) struct Buffered {
    pub id: RequestId,
    pub req: PushEntryRequest,
    pub arrived_ms: u64,
}

/// A success held until the log is flushed (sync-flush mode).
#[derive(Clone, Debug)]
pub(crate) struct Deferred {
    pub last: Index,
    pub id: RequestId,
    pub resp: PushEntryResponse,
}

/// Follower bookkeeping.
#[derive(Clone, Debug, Default)]
pub(crate) struct FollowerBuffer {
    pub pending: BTreeMap<Index, Buffered>,
    /// End of the prefix verified against the current leader (none before any).
    pub verified_end: Option<Index>,
    pub deferred: VecDeque<Deferred>,
}

fn same_entry(a: &LogEntry, b: &LogEntry) -> bool {
    a.index == b.index && a.term == b.term && a.pos == b.pos && a.body == b.body
}

fn log_error_code(e: &LogError) -> DLedgerCode {
    match e {
        LogError::DiskFull => DLedgerCode::DISK_FULL,
        LogError::Io(_) => DLedgerCode::DISK_ERROR,
        _ => DLedgerCode::INCONSISTENT_STATE,
    }
}

impl<L: RaftLog> Node<L> {
    /// Response to `r` with `code` and our current ledger range.
    pub(crate) fn push_response(
        &self,
        r: &PushEntryRequest,
        code: DLedgerCode,
    ) -> PushEntryResponse {
        let end = self.log.end_index();
        let begin = Some(self.log.begin_index()).filter(|b| end >= Some(*b));
        let resp = PushEntryResponse::answer(r, code, begin, end);
        // Our term when refusing an older leader, so it learns it is stale.
        if code == DLedgerCode::EXPIRED_TERM {
            resp.with_term(self.ms.term)
        } else {
            resp
        }
    }

    fn reply_push(&mut self, id: RequestId, r: &PushEntryRequest, code: DLedgerCode) {
        let resp = self.push_response(r, code);
        self.respond(id, Response::Push(resp));
    }

    pub(crate) fn on_push_request(&mut self, id: RequestId, r: PushEntryRequest) {
        if let Err(code) = self.accept_leader(r.leader_id.as_deref(), r.term()) {
            self.reply_push(id, &r, code);
            return;
        }
        match r.push_type {
            PushType::COMMIT => {
                self.update_commit(r.commit_index());
                self.reply_push(id, &r, DLedgerCode::SUCCESS);
            }
            PushType::COMPARE => {
                self.clear_buffer();
                let code = self.compare(&r);
                // A match counts as replication for the leader: in sync-flush mode, only once flushed.
                let last = r.first_index();
                self.reply_after_flush(id, &r, code, last);
            }
            PushType::TRUNCATE => {
                self.clear_buffer();
                let code = self.truncate(&r);
                let last = r.first_index();
                self.reply_after_flush(id, &r, code, last);
            }
            PushType::APPEND => self.on_append(id, r),
        }
    }

    fn compare(&mut self, r: &PushEntryRequest) -> DLedgerCode {
        let Some(e) = r.entry.as_ref().and_then(|e| e.to_log_entry()) else {
            return DLedgerCode::UNEXPECTED_ARGUMENT;
        };
        match self.log.entry(e.index) {
            Ok(local) if same_entry(&local, &e) => {
                self.buffer.verified_end = self.buffer.verified_end.max(Some(e.index));
                DLedgerCode::SUCCESS
            }
            _ => DLedgerCode::INCONSISTENT_STATE,
        }
    }

    fn truncate(&mut self, r: &PushEntryRequest) -> DLedgerCode {
        let Some(e) = r.entry.as_ref().and_then(|e| e.to_log_entry()) else {
            return DLedgerCode::UNEXPECTED_ARGUMENT;
        };
        let (begin, end) = (self.log.begin_index(), self.log.end_index());
        if e.index < begin || e.index > Index::after(end) {
            return DLedgerCode::INCONSISTENT_STATE;
        }
        let matches = matches!(self.log.entry(e.index), Ok(local) if same_entry(&local, &e));
        let result = if matches {
            // Entries this leader already gave us (verified in this term) stay: a delayed or
            // duplicated TRUNCATE must not remove what we have acknowledged since.
            let keep = Some(e.index).max(self.buffer.verified_end).min(end);
            if keep < self.committed {
                return DLedgerCode::INCONSISTENT_STATE; // would drop committed entries
            }
            if keep < end {
                self.log.truncate_after(keep)
            } else {
                Ok(())
            }
        } else {
            if Some(e.index) <= self.committed {
                return DLedgerCode::INCONSISTENT_STATE; // would overwrite a committed entry
            }
            // A TRUNCATE that matched nothing keeps our entries below it unverified: only
            // accept it when those are committed here or verified in this term (or there are
            // none). The leader sends it at its begin when it deleted the entries that could
            // settle the question, and marks us needs-reinstall on this refusal (R11, SIM-09).
            if e.index > begin && e.index.prev() > self.committed.max(self.buffer.verified_end) {
                return DLedgerCode::INCONSISTENT_STATE;
            }
            // The rewritten entry is not durable yet: lower the flushed mark before appending
            // it, so a sync-flush ack waits for it.
            let cut = self.log.truncate_after(e.index.prev());
            self.clamp_flushed();
            cut.and_then(|()| self.log.append_follower(&e))
        };
        self.clamp_flushed();
        let end = self.log.end_index();
        self.buffer.deferred.retain(|d| Some(d.last) <= end);
        if let Err(err) = result {
            tracing::warn!(error = %err, "truncate failed");
            return log_error_code(&err);
        }
        self.buffer.verified_end = self.buffer.verified_end.max(Some(e.index)).min(end);
        self.update_commit(r.commit_index());
        DLedgerCode::SUCCESS
    }

    fn on_append(&mut self, id: RequestId, r: PushEntryRequest) {
        let entries: Option<Vec<LogEntry>> = r.entries().iter().map(|e| e.to_log_entry()).collect();
        let Some(entries) = entries.filter(|v| !v.is_empty()) else {
            self.reply_push(id, &r, DLedgerCode::UNEXPECTED_ARGUMENT);
            return;
        };
        let first = entries[0].index;
        if entries
            .iter()
            .enumerate()
            .any(|(i, e)| Some(e.index) != first.checked_add(i as u64))
        {
            self.reply_push(id, &r, DLedgerCode::UNEXPECTED_ARGUMENT);
            return;
        }
        if first > self.log.next_index() {
            if self.buffer.pending.contains_key(&first) {
                self.reply_push(id, &r, DLedgerCode::REPEATED_PUSH);
            } else if self.buffer.pending.len() >= self.cfg.follower_buffer_max {
                if bug!(self.cfg, blocking_rpc_queue) {
                    self.wedged = true; // bug #282: handler blocks on the full queue forever
                    return;
                }
                self.reply_push(id, &r, DLedgerCode::PUSH_REQUEST_IS_FULL);
            } else {
                let arrived_ms = self.now_ms;
                self.buffer.pending.insert(
                    first,
                    Buffered {
                        id,
                        req: r,
                        arrived_ms,
                    },
                );
            }
            return;
        }
        self.apply_append(id, &r, &entries);
        self.drain_buffer();
    }

    fn apply_append(&mut self, id: RequestId, r: &PushEntryRequest, entries: &[LogEntry]) {
        let code = self.append_entries(r, entries);
        let last = entries.last().map(|e| e.index);
        self.reply_after_flush(id, r, code, last);
    }

    fn append_entries(&mut self, r: &PushEntryRequest, entries: &[LogEntry]) -> DLedgerCode {
        let first = entries[0].index;
        if first > Index::after(self.buffer.verified_end) {
            return DLedgerCode::INCONSISTENT_STATE; // would extend an unverified suffix
        }
        for e in entries {
            if e.index < self.log.begin_index() {
                continue; // already applied and since deleted by retention
            }
            if Some(e.index) <= self.log.end_index() {
                match self.log.entry(e.index) {
                    Ok(local) if same_entry(&local, e) => continue,
                    _ => return DLedgerCode::INCONSISTENT_STATE,
                }
            }
            if let Err(err) = self.log.append_follower(e) {
                tracing::warn!(error = %err, index = %e.index, "follower append failed");
                return log_error_code(&err);
            }
        }
        let last = entries[entries.len() - 1].index;
        self.buffer.verified_end = self.buffer.verified_end.max(Some(last));
        self.update_commit(r.commit_index());
        DLedgerCode::SUCCESS
    }

    fn reply_after_flush(
        &mut self,
        id: RequestId,
        r: &PushEntryRequest,
        code: DLedgerCode,
        last: Option<Index>,
    ) {
        let resp = self.push_response(r, code);
        let hold = code == DLedgerCode::SUCCESS && self.cfg.sync_flush;
        match last.filter(|l| hold && Some(*l) > self.flushed) {
            Some(last) => self.buffer.deferred.push_back(Deferred { last, id, resp }),
            None => self.respond(id, Response::Push(resp)),
        }
    }

    /// Apply buffered pushes that now start at or below `end + 1`.
    fn drain_buffer(&mut self) {
        loop {
            let next = self.log.next_index();
            let Some((&first, _)) = self.buffer.pending.first_key_value() else {
                return;
            };
            if first > next {
                return;
            }
            let Some(b) = self.buffer.pending.remove(&first) else {
                return;
            };
            let entries: Vec<LogEntry> = b
                .req
                .entries()
                .iter()
                .filter_map(|e| e.to_log_entry())
                .collect();
            if entries.is_empty() {
                self.reply_push(b.id, &b.req, DLedgerCode::UNEXPECTED_ARGUMENT);
            } else {
                self.apply_append(b.id, &b.req, &entries);
            }
        }
    }

    /// Answer every buffered push with INCONSISTENT_STATE and forget them.
    pub(crate) fn clear_buffer(&mut self) {
        let pending = std::mem::take(&mut self.buffer.pending);
        for (_, b) in pending {
            self.reply_push(b.id, &b.req, DLedgerCode::INCONSISTENT_STATE);
        }
    }

    /// Buffered pushes that waited too long behind a gap force a re-COMPARE.
    pub(crate) fn expire_buffered(&mut self) {
        let limit = self.cfg.max_push_timeout_ms;
        let now = self.now_ms;
        let expired: Vec<Index> = self
            .buffer
            .pending
            .iter()
            .filter(|(_, b)| now.saturating_sub(b.arrived_ms) >= limit)
            .map(|(k, _)| *k)
            .collect();
        for k in expired {
            if let Some(b) = self.buffer.pending.remove(&k) {
                self.reply_push(b.id, &b.req, DLedgerCode::INCONSISTENT_STATE);
            }
        }
    }

    /// Send the successes whose entries are now flushed.
    pub(crate) fn release_deferred(&mut self) {
        while self
            .buffer
            .deferred
            .front()
            .is_some_and(|d| Some(d.last) <= self.flushed)
        {
            if let Some(d) = self.buffer.deferred.pop_front() {
                self.respond(d.id, Response::Push(d.resp));
            }
        }
    }

    /// Forget held successes (the term changed; the old leader's calls time out).
    pub(crate) fn drop_deferred(&mut self) {
        self.buffer.deferred.clear();
    }

    /// Follower commit rule (module docs).
    pub(crate) fn update_commit(&mut self, leader_commit: Option<Index>) {
        let target = if bug!(self.cfg, no_commit_clamp) {
            leader_commit
        } else {
            leader_commit
                .min(self.buffer.verified_end)
                .min(self.log.end_index())
        };
        if let Some(target) = target.filter(|t| Some(*t) > self.committed) {
            self.committed = Some(target);
            let pos = self.log.end_pos_of(target);
            self.actions
                .push_back(Action::CommitAdvanced { index: target, pos });
        }
    }
}
