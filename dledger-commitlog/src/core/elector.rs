//! DLedgerLeaderElector: votes, heartbeats, leases and leadership transfer.
//!
//! Rules (spec §7-§8 with this project's safety changes):
//! * a vote is granted only to a candidate whose log is at least as up to date, comparing the
//!   term of the last *entry* and then the last index (R2);
//! * pre-vote (R10): a candidate first asks "would you vote for me at term+1?"; members that
//!   heard from a live leader within the lease say no, so a rejoining node cannot bump terms;
//! * any higher term seen in a request or a rejection is adopted (persisted) at once, instead of
//!   DLedger's TERM_NOT_READY round trip;
//! * a leader that has not heard from a quorum within the lease steps down (check quorum);
//! * leadership transfer: the leader stops taking proposals, catches the transferee up (within
//!   `leadershipTransferWaitTimeout`), then asks it to campaign at once (no pre-vote); it
//!   succeeds when this member sees the transferee lead, and fails after
//!   `leadershipTransferWaitTimeout` plus one vote interval. Every end is reported with a
//!   DLedger code and a reason: [`Action::TransferDone`] for a local request, the deferred
//!   LEADERSHIP_TRANSFER response for an admin one.

use super::log::{Index, RaftLog, Term};
use super::member_state::Role;
use super::node::{
    Action, CallCtx, CallFailure, Node, ProposeError, RequestId, Transfer, TransferFailure,
    TransferOrigin,
};
use crate::types::Shown;
use crate::wire::messages::Response;
use crate::wire::messages::{
    Common, DLedgerCode, HeartBeatRequest, HeartBeatResponse, LeadershipTransferRequest,
    LeadershipTransferResponse, Request, VoteRequest, VoteResponse, VoteResult,
};

impl<L: RaftLog> Node<L> {
    /// The term the next election stands in: the next one or, once the term space is
    /// exhausted (a member adopts any valid term it hears of, so a forged or corrupt
    /// `i64::MAX` leaves no successor), the current one if this member has voted for nobody
    /// else in it. Standing in a term keeps one vote per member and term, so still at most
    /// one leader per term. `None`: there is no term left to stand in.
    fn election_term(&self) -> Option<Term> {
        match self.ms.term.checked_next() {
            Some(next) => Some(next),
            None => match self.ms.voted_for.as_deref() {
                None => Some(self.ms.term),
                Some(v) if v == self.cfg.self_id => Some(self.ms.term),
                Some(_) => None,
            },
        }
    }

    /// Start an election round: a pre-vote (unless disabled or `forced`), else a real vote.
    pub(crate) fn start_round(&mut self, forced: bool) {
        self.election.next_round_ms = self.now_ms + self.round_delay();
        let Some(term) = self.election_term() else {
            tracing::error!(
                term = %self.ms.term,
                "no term left to stand in (the current one is the largest and taken): not campaigning"
            );
            return;
        };
        if self.cfg.pre_vote && !forced {
            self.election.round = Some((term, true));
            self.election.granted = vec![self.me];
            self.send_votes(term, true);
            self.check_votes();
        } else {
            self.start_real_vote();
        }
    }

    fn start_real_vote(&mut self) {
        let Some(term) = self.election_term() else {
            return;
        };
        self.ms.raise_term(term);
        self.ms.voted_for = Some(self.cfg.self_id.clone());
        self.ms.role = Role::Candidate;
        self.persist();
        self.clear_buffer();
        self.buffer.verified_end = None;
        self.drop_deferred();
        self.election.round = Some((term, false));
        self.election.granted = vec![self.me];
        self.send_votes(term, false);
        self.check_votes();
    }

    fn send_votes(&mut self, term: Term, pre: bool) {
        let end_term = if bug!(self.cfg, ledger_end_term_is_curr_term) {
            Some(self.ms.term)
        } else {
            self.log.end_term()
        };
        for peer in 0..self.cfg.peers.len() {
            if peer == self.me {
                continue;
            }
            let req = VoteRequest::new(
                &self.cfg.group,
                &self.cfg.self_id,
                &self.cfg.peers[peer],
                term,
                self.log.end_index(),
                end_term,
                pre,
            );
            self.call(peer, CallCtx::Vote { term, pre }, Request::Vote(req));
        }
    }

    fn check_votes(&mut self) {
        let Some((term, pre)) = self.election.round else {
            return;
        };
        if self.election.granted.len() < self.cfg.quorum() || self.ms.role != Role::Candidate {
            return;
        }
        if pre {
            // A pre-vote asked about the election term when it started; if the term moved
            // since (we granted someone else's vote meanwhile), its grants are stale: starting
            // a vote now would depose the member we just voted for.
            if Some(term) == self.election_term() {
                self.start_real_vote();
            }
        } else if term == self.ms.term {
            self.become_leader();
        }
    }

    /// Is a live leader known (this member leads, or heard from its leader within the lease)?
    fn leader_lease_valid(&self) -> bool {
        match self.ms.role {
            Role::Leader => true,
            Role::Follower => {
                self.ms.leader.is_some()
                    && self.now_ms.saturating_sub(self.ms.last_leader_contact_ms)
                        < self.cfg.lease_ms()
            }
            Role::Candidate => false,
        }
    }

    /// Handle VOTE (real or pre-vote); the caller responds after any PersistHardState.
    pub(crate) fn on_vote_request(&mut self, r: &VoteRequest) -> VoteResponse {
        let result = self.decide_vote(r);
        VoteResponse::answer(
            r,
            DLedgerCode::SUCCESS,
            r.leader_id.clone(),
            self.ms.term,
            result,
        )
    }

    fn decide_vote(&mut self, r: &VoteRequest) -> VoteResult {
        let Some(cand) = r.leader_id.as_deref().and_then(|c| self.peer_index(c)) else {
            return VoteResult::REJECT_UNKNOWN_LEADER;
        };
        if cand == self.me {
            return VoteResult::REJECT_UNEXPECTED_LEADER;
        }
        let Some(term) = r.term().filter(|t| *t >= self.ms.term) else {
            return VoteResult::REJECT_EXPIRED_VOTE_TERM;
        };
        if r.pre_vote {
            if self.leader_lease_valid() {
                return VoteResult::REJECT_ALREADY_HAS_LEADER;
            }
            return self.log_check(r).unwrap_or(VoteResult::ACCEPT);
        }
        if term > self.ms.term {
            // A real vote at a higher term passed a pre-vote quorum (or is a transfer).
            if let Some(reject) = self.log_check(r) {
                // We hold a better log than the candidate, and nobody leads the new term yet:
                // campaign soon instead of waiting a whole lease as a leaderless follower.
                self.adopt_term(term);
                if self.ms.role != Role::Candidate {
                    self.become_candidate();
                }
                return reject;
            }
            match self.ms.role {
                Role::Candidate => self.adopt_term(term),
                _ => self.become_follower(term, None),
            }
        }
        if let Some(reject) = self.log_check(r) {
            // Same term, our log is better and nobody leads it: campaign soon rather than
            // wait a whole lease (a leader deposed by this candidate's higher term lands here).
            if self.ms.role == Role::Follower && self.ms.leader.is_none() {
                self.become_candidate();
            }
            return reject;
        }
        match self.ms.voted_for.as_deref() {
            Some(v) if v != self.cfg.peers[cand] => {
                if self.ms.leader.is_some() {
                    VoteResult::REJECT_ALREADY_HAS_LEADER
                } else {
                    if self.ms.role == Role::Candidate && v == self.cfg.self_id {
                        self.break_split_vote(cand);
                    }
                    VoteResult::REJECT_ALREADY_VOTED
                }
            }
            _ => {
                self.ms.voted_for = Some(self.cfg.peers[cand].clone());
                if !bug!(self.cfg, vote_not_persisted) {
                    self.persist();
                }
                // Granting a vote restarts our patience with the (future) leader.
                self.ms.last_leader_contact_ms = self.now_ms;
                if self.ms.role == Role::Candidate {
                    self.election.round = None; // our own round is moot now
                    self.election.next_round_ms = self.now_ms + self.round_delay();
                }
                VoteResult::ACCEPT
            }
        }
    }

    /// A split vote: `rival` campaigns in the term we voted for ourselves in, so neither of
    /// us wins it. Instead of both retrying after a random 150-450 ms (and possibly splitting
    /// again), the member listed first retries soon (`minVoteIntervalMs / 2` to
    /// `minVoteIntervalMs`) and the other waits at least `maxVoteIntervalMs`, by which time
    /// the first has won (its pre-vote and vote reach the waiting member, which grants them).
    /// Timing only: the vote rules are unchanged.
    fn break_split_vote(&mut self, rival: usize) {
        let (lo, hi) = (self.cfg.min_vote_interval_ms, self.cfg.max_vote_interval_ms);
        let delay = if self.me < rival {
            self.random_between(lo / 2, lo)
        } else {
            hi + self.random_between(0, lo / 2)
        };
        self.election.next_round_ms = self.now_ms + delay;
    }

    /// R2: compare the candidate's last entry term, then its last index, with ours. A
    /// malformed (negative) number in the request counts as older than any log.
    fn log_check(&self, r: &VoteRequest) -> Option<VoteResult> {
        let (my_term, my_end) = (self.log.end_term(), self.log.end_index());
        match r.ledger_end_term() {
            Ok(t) if t > my_term => None,
            Ok(t) if t == my_term => match r.ledger_end_index() {
                Ok(i) if i >= my_end => None,
                _ => Some(VoteResult::REJECT_SMALL_LEDGER_END_INDEX),
            },
            _ => Some(VoteResult::REJECT_EXPIRED_LEDGER_TERM),
        }
    }

    pub(crate) fn on_vote_response(&mut self, term: Term, pre: bool, v: &VoteResponse) {
        let ahead = v.term().filter(|t| *t > self.ms.term);
        if let Some(ahead) = ahead.filter(|_| v.vote_result != VoteResult::ACCEPT) {
            if self.ms.role == Role::Candidate {
                // Someone is ahead: catch up the term, keep campaigning after a pause.
                self.adopt_term(ahead);
                self.election.round = None;
                self.election.next_round_ms = self.now_ms + self.round_delay();
            } else {
                // A late answer to a round we already won (or gave up): a higher term exists,
                // so our leadership, or our leader, belongs to the past. Leading on in a term
                // nobody elected us in could give that term two leaders.
                self.become_follower(ahead, None);
            }
            return;
        }
        if self.ms.role != Role::Candidate || self.election.round != Some((term, pre)) {
            return;
        }
        if v.vote_result == VoteResult::ACCEPT {
            if let Some(p) = v.remote_id.as_deref().and_then(|id| self.peer_index(id)) {
                if !self.election.granted.contains(&p) {
                    self.election.granted.push(p);
                }
            }
            self.check_votes();
        }
    }

    /// Accept `leader` as the leader of `term` if the rules allow (shared by HEART_BEAT and
    /// PUSH); returns the error code otherwise.
    pub(crate) fn accept_leader(
        &mut self,
        leader_id: Option<&str>,
        term: Option<Term>,
    ) -> Result<usize, DLedgerCode> {
        let Some(leader) = leader_id.and_then(|l| self.peer_index(l)) else {
            return Err(DLedgerCode::UNKNOWN_MEMBER);
        };
        if leader == self.me {
            return Err(DLedgerCode::UNEXPECTED_MEMBER);
        }
        let Some(term) = term.filter(|t| *t >= self.ms.term) else {
            return Err(DLedgerCode::EXPIRED_TERM);
        };
        if term == self.ms.term {
            match (self.ms.role, self.ms.leader) {
                (Role::Leader, _) => return Err(DLedgerCode::INCONSISTENT_LEADER),
                (Role::Follower, Some(l)) if l != leader => {
                    return Err(DLedgerCode::INCONSISTENT_LEADER)
                }
                (Role::Follower, Some(_)) => {
                    self.ms.last_leader_contact_ms = self.now_ms;
                    return Ok(leader);
                }
                _ => {}
            }
        }
        self.become_follower(term, Some(leader));
        Ok(leader)
    }

    pub(crate) fn on_heartbeat_request(&mut self, r: &HeartBeatRequest) -> HeartBeatResponse {
        match self.accept_leader(r.leader_id.as_deref(), r.term()) {
            Ok(_) => Common::default(),
            Err(code) => Common {
                code,
                leader_id: self.leader_id().map(str::to_owned),
                ..r.clone()
            }
            .with_term(self.ms.term),
        }
    }

    pub(crate) fn send_heartbeats(&mut self) {
        let term = self.ms.term;
        for peer in 0..self.cfg.peers.len() {
            if peer != self.me {
                let req = self.common_to(peer);
                self.call(
                    peer,
                    CallCtx::HeartBeat { term, peer },
                    Request::HeartBeat(req),
                );
            }
        }
        let next = self.now_ms + self.cfg.heartbeat_interval_ms;
        if let Some(l) = self.leader.as_mut() {
            l.next_heartbeat_ms = next;
        }
    }

    pub(crate) fn on_heartbeat_response(
        &mut self,
        term: Term,
        peer: usize,
        r: Result<HeartBeatResponse, CallFailure>,
    ) {
        let now = self.now_ms;
        match r {
            Ok(h) if h.code == DLedgerCode::SUCCESS => {
                if term == self.ms.term {
                    if let Some(l) = self.leader.as_mut() {
                        l.peers[peer].last_ack_ms = now;
                        l.peers[peer].alive = true;
                    }
                }
            }
            Ok(h) if h.code == DLedgerCode::EXPIRED_TERM && h.term() > Some(self.ms.term) => {
                if let Some(t) = h.term() {
                    self.become_follower(t, None);
                }
            }
            Ok(h) if h.code == DLedgerCode::INCONSISTENT_LEADER && term == self.ms.term => {
                if self.ms.role == Role::Leader {
                    self.become_candidate();
                }
            }
            Ok(_) => {}
            Err(_) => {
                if term == self.ms.term {
                    if let Some(l) = self.leader.as_mut() {
                        l.peers[peer].alive = false;
                    }
                }
            }
        }
    }

    /// Leader maintenance: heartbeats, lease (check quorum), proposal timeouts, transfer.
    pub(crate) fn leader_tick(&mut self) {
        let now = self.now_ms;
        let lease = self.cfg.lease_ms();
        let me = self.me;
        let quorum = self.cfg.quorum();
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let live = l
            .peers
            .iter()
            .enumerate()
            .filter(|(i, p)| *i == me || now.saturating_sub(p.last_ack_ms) < lease)
            .count();
        if live < quorum {
            tracing::info!(me = %self.cfg.self_id, term = %self.ms.term, "lost the quorum; stepping down");
            self.become_candidate();
            return;
        }
        let expired = l.pending.take_expired(now);
        let overdue = l
            .transfer
            .as_ref()
            .is_some_and(|t| t.deadline_ms <= now || (!t.sent && t.catch_up_deadline_ms <= now));
        let overdue = if overdue { l.transfer.take() } else { None };
        let heartbeat_due = now >= l.next_heartbeat_ms;
        let preferred_due = now >= l.next_preferred_check_ms;
        if preferred_due {
            l.next_preferred_check_ms = now + 1_000;
        }
        for p in expired {
            self.actions.push_back(Action::ProposeDone {
                id: p.id,
                result: Err(ProposeError::Timeout),
            });
        }
        if heartbeat_due {
            self.send_heartbeats();
        }
        if let Some(t) = overdue {
            self.fail_overdue_transfer(t);
        }
        if preferred_due {
            self.check_preferred_leader();
        }
    }

    /// A transfer past its deadline: the transferee did not catch up, or did not take over.
    fn fail_overdue_transfer(&mut self, t: Transfer) {
        let to = &self.cfg.peers[t.peer];
        let why = if t.sent {
            format!(
                "{to} did not take over within {} ms",
                self.cfg.leadership_transfer_wait_timeout_ms + self.cfg.max_vote_interval_ms
            )
        } else {
            let mark = self
                .leader
                .as_ref()
                .and_then(|l| l.peers[t.peer].match_index);
            format!(
                "{to} did not catch up within leadershipTransferWaitTimeout {} ms (has {}, leader end {})",
                self.cfg.leadership_transfer_wait_timeout_ms,
                Shown(mark),
                Shown(self.self_mark())
            )
        };
        self.finish_transfer(
            t,
            Err(TransferFailure::new(
                DLedgerCode::TAKE_LEADERSHIP_FAILED,
                why,
            )),
        );
    }

    fn check_preferred_leader(&mut self) {
        if self.cfg.preferred_leader_ids.is_empty()
            || self.cfg.preferred_leader_ids.contains(&self.cfg.self_id)
        {
            return;
        }
        let end = self.log.end_index();
        let lease = self.cfg.lease_ms();
        let now = self.now_ms;
        let Some(l) = self.leader.as_ref() else {
            return;
        };
        if l.transfer.is_some() {
            return;
        }
        let best = self
            .cfg
            .preferred_leader_ids
            .iter()
            .filter_map(|id| self.peer_index(id))
            .filter(|&p| {
                p != self.me
                    && l.peers[p].alive
                    && now.saturating_sub(l.peers[p].last_ack_ms) < lease
            })
            .map(|p| (Index::distance(l.peers[p].match_index, end), p))
            .filter(|(lag, _)| *lag < self.cfg.transfer_max_lag())
            .min();
        if let Some((_, p)) = best {
            let id = self.cfg.peers[p].clone();
            if let Err(f) = self.start_transfer(&id, TransferOrigin::Preferred) {
                tracing::debug!(code = ?f.code, reason = %f.reason, "preferred leader transfer not started");
            }
        }
    }

    /// Begin handing leadership to `to` (spec §8 step 1-2), or say why not. On success the
    /// outcome is reported later to `origin` (see [`Node::finish_transfer`]).
    pub(crate) fn start_transfer(
        &mut self,
        to: &str,
        origin: TransferOrigin,
    ) -> Result<(), TransferFailure> {
        let refuse = |code, why: String| Err(TransferFailure::new(code, why));
        let Some(peer) = self.peer_index(to) else {
            return refuse(
                DLedgerCode::UNKNOWN_MEMBER,
                format!("{to} is not a member of group {}", self.cfg.group),
            );
        };
        if peer == self.me {
            return refuse(
                DLedgerCode::UNEXPECTED_MEMBER,
                format!("{to} is this member itself"),
            );
        }
        let end = self.log.end_index();
        let (now, term) = (self.now_ms, self.ms.term);
        let catch_up = now + self.cfg.leadership_transfer_wait_timeout_ms;
        let deadline = catch_up + self.cfg.max_vote_interval_ms;
        let max_lag = self.cfg.transfer_max_lag();
        let seq = self.next_transfer_seq;
        let Some(l) = self.leader.as_mut() else {
            let leader = self.leader_id().unwrap_or("unknown");
            return refuse(
                DLedgerCode::NOT_LEADER,
                format!("not the leader (leader: {leader}, term {term})"),
            );
        };
        let lag = Index::distance(l.peers[peer].match_index, end);
        if lag > max_lag {
            return refuse(
                DLedgerCode::FALL_BEHIND_TOO_MUCH,
                format!("{to} is {lag} entries behind (maxLeadershipTransferWaitIndex {max_lag})"),
            );
        }
        if let Some(t) = &l.transfer {
            let running = &self.cfg.peers[t.peer];
            return refuse(
                DLedgerCode::LEADER_TRANSFERRING,
                format!("a transfer to {running} is already in progress"),
            );
        }
        l.transfer = Some(Transfer {
            peer,
            sent: false,
            seq,
            term,
            catch_up_deadline_ms: catch_up,
            deadline_ms: deadline,
            origin,
        });
        self.next_transfer_seq += 1;
        tracing::info!(me = %self.cfg.self_id, to, %term, "leadership transfer started");
        Ok(())
    }

    /// Report the end of transfer `t` to whoever asked for it.
    pub(crate) fn finish_transfer(&mut self, t: Transfer, result: Result<(), TransferFailure>) {
        let to = self.cfg.peers[t.peer].clone();
        match &result {
            Ok(()) => tracing::info!(me = %self.cfg.self_id, %to, "leadership transferred"),
            Err(f) => {
                tracing::info!(me = %self.cfg.self_id, %to, code = ?f.code, reason = %f.reason, "leadership transfer failed")
            }
        }
        match t.origin {
            TransferOrigin::Local => self.actions.push_back(Action::TransferDone { to, result }),
            TransferOrigin::Rpc { id, mut resp } => {
                resp.code = result.map_or_else(|f| f.code, |()| DLedgerCode::SUCCESS);
                resp.leader_id = self.leader_id().map(str::to_owned);
                resp.set_term(self.ms.term);
                self.respond(id, Response::LeadershipTransfer(resp));
            }
            TransferOrigin::Preferred => {}
        }
    }

    /// The transferee's answer to LEADERSHIP_TRANSFER: anything but SUCCESS ends the transfer
    /// (spec §8 step 4) with the transferee's code; SUCCESS means it campaigns, and the
    /// transfer ends when a leader is known.
    pub(crate) fn on_transfer_reply(
        &mut self,
        term: Term,
        seq: u64,
        result: Result<Response, CallFailure>,
    ) {
        let failure = match result {
            Ok(Response::LeadershipTransfer(c)) if c.code == DLedgerCode::SUCCESS => return,
            Ok(Response::LeadershipTransfer(c)) => (
                c.code,
                format!("answered {:?} (its term {})", c.code, c.term),
            ),
            Ok(_) => (
                DLedgerCode::INTERNAL_ERROR,
                "answered with a response of another kind".to_owned(),
            ),
            Err(CallFailure::Timeout) => (
                DLedgerCode::TIMEOUT,
                "did not answer LEADERSHIP_TRANSFER in time".to_owned(),
            ),
            Err(CallFailure::Network) => (
                DLedgerCode::NETWORK_ERROR,
                "could not be reached".to_owned(),
            ),
        };
        let mine =
            |t: &Option<Transfer>| t.as_ref().is_some_and(|t| t.seq == seq && t.term == term);
        let t = match self.leader.as_mut() {
            Some(l) if mine(&l.transfer) => l.transfer.take(),
            _ if mine(&self.handover) => self.handover.take(),
            _ => None,
        };
        if let Some(t) = t {
            let why = format!("transferee {} {}", self.cfg.peers[t.peer], failure.1);
            self.finish_transfer(t, Err(TransferFailure::new(failure.0, why)));
        }
    }

    /// After stepping down during a transfer: a known leader of a later term ends it.
    pub(crate) fn resolve_handover(&mut self) {
        let Some(t) = self.handover.as_ref() else {
            return;
        };
        let (Role::Follower, Some(leader)) = (self.ms.role, self.ms.leader) else {
            return;
        };
        if self.ms.term <= t.term {
            return;
        }
        let Some(t) = self.handover.take() else {
            return;
        };
        if leader == t.peer {
            self.finish_transfer(t, Ok(()));
        } else {
            let why = format!(
                "{} became leader in term {} instead of {}",
                self.cfg.peers[leader], self.ms.term, self.cfg.peers[t.peer]
            );
            self.finish_transfer(
                t,
                Err(TransferFailure::new(
                    DLedgerCode::TAKE_LEADERSHIP_FAILED,
                    why,
                )),
            );
        }
    }

    /// A handover nobody completed by its deadline failed.
    pub(crate) fn expire_handover(&mut self) {
        if self
            .handover
            .as_ref()
            .is_some_and(|t| t.deadline_ms <= self.now_ms)
        {
            if let Some(t) = self.handover.take() {
                let why = format!(
                    "no leader known {} ms after asking {} to take over",
                    self.cfg.leadership_transfer_wait_timeout_ms + self.cfg.max_vote_interval_ms,
                    self.cfg.peers[t.peer]
                );
                self.finish_transfer(
                    t,
                    Err(TransferFailure::new(
                        DLedgerCode::TAKE_LEADERSHIP_FAILED,
                        why,
                    )),
                );
            }
        }
    }

    /// Once the transferee holds our whole log, ask it to take over.
    pub(crate) fn maybe_send_transfer(&mut self) {
        let mark = self.self_mark();
        let term = self.ms.term;
        let Some(l) = self.leader.as_mut() else {
            return;
        };
        let Some(t) = l.transfer.as_mut() else { return };
        if t.sent || l.peers[t.peer].match_index < mark {
            return;
        }
        t.sent = true;
        let (peer, seq) = (t.peer, t.seq);
        let req = self.transfer_request(peer);
        self.call(
            peer,
            CallCtx::Transfer { term, seq },
            Request::LeadershipTransfer(req),
        );
    }

    /// Whether proposals are refused because a transfer is running.
    pub(crate) fn transferring(&self) -> bool {
        self.leader.as_ref().is_some_and(|l| l.transfer.is_some())
    }

    /// LEADERSHIP_TRANSFER: as the transferee, take over (answered at once); as the leader
    /// asked by an admin, start a transfer and answer when it ends (`None` now) with SUCCESS
    /// or the code it failed with; refusals are answered at once.
    pub(crate) fn on_transfer_request(
        &mut self,
        id: RequestId,
        r: &LeadershipTransferRequest,
    ) -> Option<LeadershipTransferResponse> {
        let resp = |node: &Self, code| {
            Common {
                code,
                group: r.group.clone(),
                leader_id: node.leader_id().map(str::to_owned),
                local_id: r.local_id.clone(),
                remote_id: r.remote_id.clone(),
                ..Common::default()
            }
            .with_term(node.ms.term)
        };
        let code = if r.transferee_id.as_deref() == Some(self.cfg.self_id.as_str()) {
            self.take_leadership(r)
        } else if let Some(to) = r.transferee_id.clone() {
            if r.term() != Some(self.ms.term) {
                DLedgerCode::INCONSISTENT_TERM
            } else {
                let origin = TransferOrigin::Rpc {
                    id,
                    resp: resp(self, DLedgerCode::SUCCESS),
                };
                match self.start_transfer(&to, origin) {
                    Ok(()) => return None,
                    Err(f) => {
                        tracing::info!(code = ?f.code, reason = %f.reason, "LEADERSHIP_TRANSFER refused");
                        f.code
                    }
                }
            }
        } else {
            DLedgerCode::UNEXPECTED_ARGUMENT
        };
        Some(resp(self, code))
    }

    /// Transferee side (spec §8 step 3): campaign at once if caught up.
    fn take_leadership(&mut self, r: &LeadershipTransferRequest) -> DLedgerCode {
        let from = r.transfer_id.as_deref().and_then(|id| self.peer_index(id));
        if r.term() < Some(self.ms.term) {
            return DLedgerCode::EXPIRED_TERM; // the asking leader was deposed meanwhile
        }
        if self.ms.role != Role::Follower || from.is_none() || self.ms.leader != from {
            return DLedgerCode::INCONSISTENT_LEADER;
        }
        if r.term() != Some(self.ms.term) {
            return DLedgerCode::INCONSISTENT_TERM;
        }
        if self.log.end_index() < r.take_leadership_ledger_index() {
            return DLedgerCode::TAKE_LEADERSHIP_FAILED;
        }
        self.ms.role = Role::Candidate;
        self.ms.leader = None;
        self.actions.push_back(Action::RoleChanged {
            role: Role::Candidate,
            term: self.ms.term,
            leader: None,
        });
        self.start_round(true);
        DLedgerCode::SUCCESS
    }
}
