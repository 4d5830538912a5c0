//! EntryDispatcher: the leader's replication state machine for one follower.
//!
//! States (spec §9.3): COMPARE walks back from the leader's end until the follower holds the
//! same entry (using the follower's begin/end to jump), TRUNCATE cuts the follower's divergent
//! suffix, APPEND pipelines pushes (batched when `enableBatchPush`) with at most
//! `push_inflight_max` in flight; once `partial_push_inflight_max` are in flight, only full
//! batches leave and the rest waits for a response (entries arriving meanwhile then share
//! one push instead of one push each); when idle a COMMIT push carries a new commit index.
//! Retries: the lowest unacknowledged push is resent after `maxPushTimeOutMs`; after three
//! resends, on INCONSISTENT_STATE, on a refused push or on a gap, the dispatcher goes back to
//! COMPARE (R11). Every state switch bumps `epoch` so stale responses are ignored.

use std::collections::BTreeMap;

use super::log::{Index, LogEntry, RaftLog, Term};
use super::member_state::Role;
use super::node::{CallCtx, CallFailure, Node};
use crate::types::Shown;
use crate::wire::messages::{
    DLedgerCode, DLedgerEntry, PushEntryRequest, PushEntryResponse, PushType, Request,
};

/// Resends of the lowest push before falling back to COMPARE.
const MAX_RESENDS: u32 = 3;

/// A follower that needs entries this leader has deleted is re-COMPAREd only every this many
/// heartbeat intervals (it may have been reinstalled meanwhile), not in a tight loop.
const REINSTALL_RECHECK_HEARTBEATS: u64 = 10;

/// One push in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Inflight {
    pub count: usize,
    pub sent_ms: u64,
    pub attempts: u32,
}

/// Dispatcher state (spec §9.3 `type`).
#[derive(Clone, Debug)]
pub(crate) enum DispatchState {
    Compare {
        index: Option<Index>,
        waiting: bool,
        retry_ms: u64,
    },
    Truncate {
        index: Index,
        waiting: bool,
        retry_ms: u64,
    },
    Append {
        next: Index,
        inflight: BTreeMap<Index, Inflight>,
    },
}

/// Leader-side view of one follower.
#[derive(Clone, Debug)]
pub(crate) struct PeerDispatch {
    /// Highest index known replicated on the follower in this term (none initially).
    pub match_index: Option<Index>,
    /// Last response of any kind in this term (check-quorum lease).
    pub last_ack_ms: u64,
    /// Last heartbeat RPC answered (preferred-leader choice).
    pub alive: bool,
    pub epoch: u64,
    pub state: DispatchState,
    pub last_commit_sent: Option<Index>,
    /// The follower's next entry is below this leader's begin index (deleted by retention):
    /// no push can repair it; an operator must reinstall it from a healthy member (R11,
    /// SIM-09). Cleared once a COMPARE or TRUNCATE succeeds.
    pub needs_reinstall: bool,
}

impl PeerDispatch {
    /// Fresh dispatcher at the start of a term: COMPARE; the lease starts now.
    pub fn new(now_ms: u64) -> Self {
        PeerDispatch {
            match_index: None,
            last_ack_ms: now_ms,
            alive: true,
            epoch: 0,
            state: DispatchState::Compare {
                index: None,
                waiting: false,
                retry_ms: 0,
            },
            last_commit_sent: None,
            needs_reinstall: false,
        }
    }
}

/// What a push call was for.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PushCtx {
    pub term: Term,
    pub peer: usize,
    pub epoch: u64,
    pub kind: PushType,
    /// Index of the first entry carried (none for a COMMIT push, which carries none).
    pub first: Option<Index>,
    pub count: usize,
}

impl<L: RaftLog> Node<L> {
    fn dispatch(&mut self, peer: usize) -> Option<&mut PeerDispatch> {
        self.leader.as_mut().map(|l| &mut l.peers[peer])
    }

    fn switch(&mut self, peer: usize, state: DispatchState) {
        if let Some(d) = self.dispatch(peer) {
            d.epoch += 1;
            d.state = state;
        }
    }

    fn enter_compare(&mut self, peer: usize, index: Option<Index>, retry_ms: u64) {
        let appending = self
            .dispatch(peer)
            .is_some_and(|d| matches!(d.state, DispatchState::Append { .. }));
        if appending && bug!(self.cfg, no_recompare) {
            return; // bug #61: once appending, a follower is never re-compared
        }
        self.switch(
            peer,
            DispatchState::Compare {
                index,
                waiting: false,
                retry_ms,
            },
        );
    }

    fn enter_truncate(&mut self, peer: usize, index: Index) {
        let now = self.now_ms;
        self.switch(
            peer,
            DispatchState::Truncate {
                index,
                waiting: false,
                retry_ms: now,
            },
        );
    }

    fn enter_append(&mut self, peer: usize, matched: Index) {
        self.switch(
            peer,
            DispatchState::Append {
                next: matched.next(),
                inflight: BTreeMap::new(),
            },
        );
        if let Some(d) = self.dispatch(peer) {
            d.match_index = Some(matched);
            d.last_commit_sent = None;
            d.needs_reinstall = false;
        }
    }

    fn backoff_ms(&self) -> u64 {
        self.now_ms + self.cfg.heartbeat_interval_ms
    }

    /// Send whatever each follower's dispatcher wants to send now.
    pub(crate) fn pump_all(&mut self) {
        for peer in 0..self.cfg.peers.len() {
            if peer != self.me && self.ms.role == Role::Leader {
                self.pump(peer);
            }
        }
        self.maybe_send_transfer();
    }

    fn pump(&mut self, peer: usize) {
        let now = self.now_ms;
        let (begin, end) = (self.log.begin_index(), self.log.end_index());
        let Some(d) = self.dispatch(peer) else { return };
        // Match by value only for the small states: cloning APPEND would copy its in-flight map
        // on every input.
        let state = match &d.state {
            DispatchState::Append { .. } => None,
            other => Some(other.clone()),
        };
        match state {
            None => self.pump_append(peer),
            Some(DispatchState::Append { .. }) => self.pump_append(peer),
            Some(DispatchState::Compare {
                index,
                waiting,
                retry_ms,
            }) => {
                let Some(end) = end.filter(|e| *e >= begin) else {
                    return; // nothing to compare: empty log
                };
                if waiting || now < retry_ms {
                    return;
                }
                let ci = index.filter(|i| (begin..=end).contains(i)).unwrap_or(end);
                d.state = DispatchState::Compare {
                    index: Some(ci),
                    waiting: true,
                    retry_ms,
                };
                self.send_single(peer, PushType::COMPARE, ci);
            }
            Some(DispatchState::Truncate {
                index,
                waiting,
                retry_ms,
            }) => {
                if waiting || now < retry_ms {
                    return;
                }
                d.state = DispatchState::Truncate {
                    index,
                    waiting: true,
                    retry_ms,
                };
                self.send_single(peer, PushType::TRUNCATE, index);
            }
        }
    }

    fn send_single(&mut self, peer: usize, kind: PushType, index: Index) {
        match self.log.entry(index) {
            Ok(e) => self.send_push(peer, kind, vec![e]),
            Err(_) => self.enter_compare(peer, None, self.backoff_ms()),
        }
    }

    fn pump_append(&mut self, peer: usize) {
        let now = self.now_ms;
        let end = self.log.end_index();
        let per_push = if self.cfg.enable_batch_push {
            self.cfg.max_batch_push_entries
        } else {
            1
        };
        loop {
            let Some(d) = self.dispatch(peer) else { return };
            let DispatchState::Append { next, inflight } = &d.state else {
                return;
            };
            let (next, in_flight) = (*next, inflight.len());
            let Some(last) = end.filter(|e| next <= *e) else {
                break;
            };
            if in_flight >= self.cfg.push_inflight_max {
                break;
            }
            if in_flight >= self.cfg.partial_push_inflight_max
                && !self.full_batch_ready(next, last, per_push)
            {
                break; // a response will pump again, with more entries to send together
            }
            let entries = match self
                .log
                .entries(next, per_push, self.cfg.max_batch_push_bytes)
            {
                Ok(v) if !v.is_empty() => v,
                _ => {
                    // Deleted below begin or unreadable: find a new common point (R11).
                    self.enter_compare(peer, None, self.backoff_ms());
                    return;
                }
            };
            let count = entries.len();
            if let Some(d) = self.dispatch(peer) {
                if let DispatchState::Append { next, inflight } = &mut d.state {
                    inflight.insert(
                        *next,
                        Inflight {
                            count,
                            sent_ms: now,
                            attempts: 0,
                        },
                    );
                    *next = next.plus(count as u64);
                }
            }
            self.send_push(peer, PushType::APPEND, entries);
        }
        // Retry the lowest unacknowledged push; a hole below it means the bookkeeping is off.
        let committed = self.committed;
        let push_timeout_ms = self.cfg.max_push_timeout_ms;
        let Some(d) = self.dispatch(peer) else { return };
        let (matched, last_commit_sent) = (d.match_index, d.last_commit_sent);
        let DispatchState::Append { next, inflight } = &mut d.state else {
            return;
        };
        let next = *next;
        let lowest = inflight.first_key_value().map(|(k, v)| (*k, *v));
        match lowest {
            Some((first, f)) => {
                if first != Index::after(matched) {
                    self.enter_compare(peer, None, now);
                    return;
                }
                if now.saturating_sub(f.sent_ms) < push_timeout_ms {
                    return;
                }
                if f.attempts >= MAX_RESENDS {
                    self.enter_compare(peer, None, now);
                    return;
                }
                if let Some(x) = inflight.get_mut(&first) {
                    x.attempts += 1;
                    x.sent_ms = now;
                }
                match self.log.entries(first, f.count, usize::MAX) {
                    Ok(v) if !v.is_empty() => self.send_push(peer, PushType::APPEND, v),
                    _ => self.enter_compare(peer, None, self.backoff_ms()),
                }
            }
            None => {
                if Some(next) > end && committed > last_commit_sent {
                    d.last_commit_sent = committed;
                    self.send_push(peer, PushType::COMMIT, Vec::new());
                }
            }
        }
    }

    /// Whether the entries from `next` through `end` fill a whole batch push (by count or
    /// by bytes). Unknown sizes count as full, so nothing waits on a guess.
    fn full_batch_ready(&self, next: Index, end: Index, per_push: usize) -> bool {
        if Index::distance(Some(next), Some(end)) + 1 >= per_push as i64 {
            return true;
        }
        let from = next.prev().and_then(|p| self.log.end_pos_of(p));
        match (from, self.log.end_pos_of(end)) {
            (Some(from), Some(to)) => to.bytes_since(from) >= self.cfg.max_batch_push_bytes as u64,
            _ => true,
        }
    }

    fn send_push(&mut self, peer: usize, kind: PushType, entries: Vec<LogEntry>) {
        let Some(epoch) = self.dispatch(peer).map(|d| d.epoch) else {
            return;
        };
        let first = entries.first().map(|e| e.index);
        let count = entries.len();
        let wire: Vec<DLedgerEntry> = entries.into_iter().map(DLedgerEntry::from).collect();
        let common = self.common_to(peer);
        let batch = kind == PushType::APPEND && self.cfg.enable_batch_push;
        let (entry, batch_entry) = if batch {
            (None, wire)
        } else {
            (wire.into_iter().next(), Vec::new())
        };
        let req = PushEntryRequest::new(common, kind, self.committed, entry, batch_entry);
        let ctx = PushCtx {
            term: self.ms.term,
            peer,
            epoch,
            kind,
            first,
            count,
        };
        self.call(peer, CallCtx::Push(ctx), Request::Push(req));
    }

    /// A follower answered (or did not answer) a push.
    pub(crate) fn on_push_response(
        &mut self,
        ctx: PushCtx,
        result: Result<PushEntryResponse, CallFailure>,
    ) {
        if let Ok(p) = &result {
            let ahead = p.term().filter(|t| *t > self.ms.term);
            if let Some(t) = ahead.filter(|_| p.code == DLedgerCode::EXPIRED_TERM) {
                self.become_follower(t, None);
                return;
            }
        }
        if self.ms.role != Role::Leader || ctx.term != self.ms.term {
            return;
        }
        let now = self.now_ms;
        let Some(d) = self.dispatch(ctx.peer) else {
            return;
        };
        if result.is_ok() {
            d.last_ack_ms = now;
        }
        if ctx.epoch != d.epoch {
            return;
        }
        let peer = ctx.peer;
        // COMPARE, TRUNCATE and APPEND pushes carry at least one entry; COMMIT none.
        let Some(first) = ctx.first else {
            return;
        };
        match ctx.kind {
            PushType::COMPARE => self.on_compare_response(peer, first, result),
            PushType::TRUNCATE => match result {
                Ok(p) if p.code == DLedgerCode::SUCCESS => self.enter_append(peer, first),
                // Refused at our begin while the follower holds entries below it that it has
                // not seen committed: only entries this leader deleted could prove them (R11).
                Ok(p)
                    if p.code == DLedgerCode::INCONSISTENT_STATE
                        && first == self.log.begin_index()
                        && p.begin_index().is_some_and(|b| b < first) =>
                {
                    self.mark_needs_reinstall(peer, p.end_index().ok().flatten(), first);
                    let recheck = self.cfg.heartbeat_interval_ms * REINSTALL_RECHECK_HEARTBEATS;
                    self.enter_compare(peer, None, self.now_ms + recheck);
                }
                _ => self.enter_compare(peer, None, self.backoff_ms()),
            },
            PushType::APPEND => match result {
                Ok(p) if p.code == DLedgerCode::SUCCESS => {
                    let last = first.plus(ctx.count.saturating_sub(1) as u64);
                    if let Some(d) = self.dispatch(peer) {
                        d.match_index = d.match_index.max(Some(last));
                        let m = d.match_index;
                        if let DispatchState::Append { inflight, .. } = &mut d.state {
                            inflight.retain(|&f, x| Some(f.plus(x.count as u64 - 1)) > m);
                        }
                    }
                }
                Ok(p) if p.code == DLedgerCode::REPEATED_PUSH => {}
                Ok(p) if p.code == DLedgerCode::INCONSISTENT_STATE => {
                    self.enter_compare(peer, None, now)
                }
                Ok(_) => self.enter_compare(peer, None, self.backoff_ms()),
                Err(_) => {}
            },
            PushType::COMMIT => {}
        }
    }

    fn mark_needs_reinstall(
        &mut self,
        peer: usize,
        follower_end: Option<Index>,
        leader_begin: Index,
    ) {
        let id = self.cfg.peers[peer].clone();
        let Some(d) = self.dispatch(peer) else { return };
        if !d.needs_reinstall {
            d.needs_reinstall = true;
            tracing::error!(
                peer = %id,
                follower_end = %Shown(follower_end),
                leader_begin = %leader_begin,
                "follower needs entries this leader has already deleted: reinstall its store \
                 from a healthy member (re-checked every {REINSTALL_RECHECK_HEARTBEATS} heartbeats)"
            );
        }
    }

    fn on_compare_response(
        &mut self,
        peer: usize,
        ci: Index,
        result: Result<PushEntryResponse, CallFailure>,
    ) {
        let (lb, le) = (self.log.begin_index(), self.log.end_index());
        // The follower's end: a malformed (negative) number orders below "none".
        let below_begin = |p: &PushEntryResponse| match p.end_index() {
            Ok(fe) => Index::after(fe) < lb,
            Err(_) => true,
        };
        match result {
            Ok(p) if p.code == DLedgerCode::SUCCESS => match p.end_index() {
                Ok(Some(fe)) if fe == ci => self.enter_append(peer, ci),
                Ok(Some(fe)) if fe > ci => self.enter_truncate(peer, ci),
                _ => self.enter_compare(peer, None, self.backoff_ms()),
            },
            Ok(p) if p.code == DLedgerCode::INCONSISTENT_STATE && below_begin(&p) => {
                self.mark_needs_reinstall(peer, p.end_index().ok().flatten(), lb);
                let recheck = self.cfg.heartbeat_interval_ms * REINSTALL_RECHECK_HEARTBEATS;
                self.enter_compare(peer, None, self.now_ms + recheck);
            }
            Ok(p) if p.code == DLedgerCode::INCONSISTENT_STATE => {
                let (fb, fe) = (p.begin_index(), p.end_index().ok().flatten());
                let next = match fe {
                    Some(fe) if fe >= lb && !fb.is_some_and(|b| Some(b) > le || ci < b) => {
                        if ci > fe {
                            Some(fe)
                        } else {
                            ci.prev()
                        }
                    }
                    _ => None,
                };
                // No common entry at or above the lowest index both logs hold. A follower that
                // deleted its own (committed) prefix is rebuilt from its begin; otherwise the
                // TRUNCATE at our begin replaces its log there, and the follower refuses it when
                // it cannot vouch for the entries it would keep below (see `truncate`).
                let floor = match fb {
                    Some(b) if b > lb && Some(b) <= le => b,
                    _ => lb,
                };
                match next {
                    Some(n) if n >= floor => self.enter_compare(peer, Some(n), self.now_ms),
                    _ => self.enter_truncate(peer, floor),
                }
            }
            _ => self.enter_compare(peer, Some(ci), self.backoff_ms()),
        }
    }
}
