//! Core handler tests: each feeds one input and asserts the exact actions it produces.

use bytes::Bytes;

use super::*;
use crate::wire::messages::*;

fn cfg(me: &str, n: usize) -> CoreConfig {
    let peers: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
    let refs: Vec<&str> = peers.iter().map(String::as_str).collect();
    CoreConfig::new("g", me, &refs, 7)
}

fn node(me: &str, n: usize) -> Node<MemLog> {
    Node::new(cfg(me, n), HardState::default(), MemLog::new(), None, 0).unwrap()
}

/// Term `v` (the tests write terms as DLedger's longs).
fn t(v: i64) -> Term {
    Term(u64::try_from(v).unwrap())
}

/// Index `v` of an entry that exists.
fn ix(v: u64) -> Option<Index> {
    Some(Index(v))
}

fn commit(index: u64, pos: u64) -> Action {
    Action::CommitAdvanced {
        index: Index(index),
        pos: Some(Pos(pos)),
    }
}

fn appended(index: u64, pos: u64) -> Appended {
    Appended {
        index: Index(index),
        pos: Pos(pos),
    }
}

fn drain(n: &mut Node<MemLog>) -> Vec<Action> {
    std::iter::from_fn(|| n.poll_action()).collect()
}

fn hs(term: i64, voted: Option<&str>) -> Action {
    Action::PersistHardState(HardState {
        term: t(term),
        voted_for: voted.map(str::to_owned),
    })
}

fn vote_req(from: &str, to: &str, term: i64, end_index: i64, end_term: i64, pre: bool) -> Request {
    Request::Vote(VoteRequest {
        code: DLedgerCode::SUCCESS,
        group: Some("g".into()),
        leader_id: Some(from.into()),
        ledger_end_index: end_index,
        ledger_end_term: end_term,
        local_id: Some(from.into()),
        pre_vote: pre,
        remote_id: Some(to.into()),
        term,
    })
}

fn vote_result(a: &Action) -> (VoteResult, i64) {
    match a {
        Action::Respond {
            resp: Response::Vote(v),
            ..
        } => (v.vote_result, v.term),
        other => panic!("not a vote response: {other:?}"),
    }
}

/// Calls in `actions`, as (to, request).
fn calls(actions: &[Action]) -> Vec<(String, CallId, Request)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Call { to, call, req } => Some((to.clone(), *call, req.clone())),
            _ => None,
        })
        .collect()
}

fn accept(from: &str, term: i64) -> Response {
    Response::Vote(VoteResponse {
        code: DLedgerCode::SUCCESS,
        group: Some("g".into()),
        leader_id: Some("n0".into()),
        local_id: Some("n0".into()),
        remote_id: Some(from.into()),
        term,
        vote_result: VoteResult::ACCEPT,
    })
}

fn push_ok(first: i64, count: i32, end: i64, term: i64) -> Response {
    Response::Push(PushEntryResponse {
        begin_index: 0,
        code: DLedgerCode::SUCCESS,
        count,
        end_index: end,
        group: Some("g".into()),
        index: Some(first),
        leader_id: None,
        local_id: None,
        remote_id: None,
        term,
    })
}

#[test]
fn single_member_elects_itself_commits_the_noop_and_then_proposals() {
    let mut n = node("n0", 1);
    n.tick(1_000);
    let a = drain(&mut n);
    assert_eq!(
        a,
        vec![
            hs(1, Some("n0")),
            Action::RoleChanged {
                role: Role::Leader,
                term: t(1),
                leader: Some("n0".into())
            },
            commit(0, 48),
        ]
    );
    propose(&mut n, 1_001, 9, b"hello");
    assert_eq!(
        drain(&mut n),
        vec![
            commit(1, 101),
            Action::ProposeDone {
                id: 9,
                result: Ok(appended(1, 48))
            },
        ]
    );
    n.handle(
        1_002,
        Input::Propose {
            id: 10,
            body: Bytes::new(),
        },
    );
    assert_eq!(
        drain(&mut n),
        vec![Action::ProposeDone {
            id: 10,
            result: Err(ProposeError::EmptyBody)
        }]
    );
}

#[test]
fn candidate_pre_votes_without_persisting_then_votes_after_persisting() {
    let mut n = node("n0", 3);
    n.tick(1_000);
    let a = drain(&mut n);
    let c = calls(&a);
    assert_eq!(a.len(), 2, "only the two pre-vote calls: {a:?}");
    for (i, (to, _, req)) in c.iter().enumerate() {
        assert_eq!(to, &format!("n{}", i + 1));
        assert_eq!(req, &vote_req("n0", to, 1, -1, -1, true));
    }
    assert_eq!(n.term(), t(0), "a pre-vote does not change the term");
    reply_ok(&mut n, 1_001, c[0].1, accept("n1", 0));
    let a = drain(&mut n);
    assert_eq!(
        a[0],
        hs(1, Some("n0")),
        "the term and self-vote are persisted before any vote leaves"
    );
    let c = calls(&a[1..]);
    assert_eq!(c.len(), 2);
    assert_eq!(c[1].2, vote_req("n0", "n2", 1, -1, -1, false));
    reply_ok(&mut n, 1_002, c[1].1, accept("n2", 1));
    let a = drain(&mut n);
    assert_eq!(
        a[0],
        Action::RoleChanged {
            role: Role::Leader,
            term: t(1),
            leader: Some("n0".into())
        }
    );
    // Heartbeats to both, then a COMPARE of the no-op to both.
    let c = calls(&a);
    assert_eq!(c.len(), 4, "{a:?}");
    assert!(matches!(c[0].2, Request::HeartBeat(_)));
    match &c[2].2 {
        Request::Push(p) => {
            assert_eq!(p.push_type, PushType::COMPARE);
            assert_eq!(
                p.entry.as_ref().map(|e| (e.index, e.term, e.body.len())),
                Some((0, 1, 0))
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        n.log().end_index(),
        ix(0),
        "no-op appended on election (R1)"
    );
}

#[test]
fn vote_grant_is_persisted_before_the_response() {
    let mut n = node("n1", 3);
    request(&mut n, 5, 1, vote_req("n0", "n1", 3, -1, -1, false));
    let a = drain(&mut n);
    assert_eq!(a[0], hs(3, None));
    assert_eq!(a[1], hs(3, Some("n0")));
    assert_eq!(vote_result(&a[2]), (VoteResult::ACCEPT, 3));
    assert_eq!(a.len(), 3);
    // A second candidate in the same term is refused, nothing persisted.
    request(&mut n, 6, 2, vote_req("n2", "n1", 3, 5, 2, false));
    let a = drain(&mut n);
    assert_eq!(a.len(), 1);
    assert_eq!(vote_result(&a[0]), (VoteResult::REJECT_ALREADY_VOTED, 3));
}

#[test]
fn vote_compares_last_entry_term_not_current_term() {
    let mut log = MemLog::new();
    log.append_leader(t(2), Bytes::from_static(b"x")).unwrap();
    let mut n = Node::new(
        cfg("n1", 3),
        HardState {
            term: t(4),
            voted_for: None,
        },
        log,
        None,
        0,
    )
    .unwrap();
    // Candidate at a higher term but whose last entry is from term 1: rejected (R2).
    request(&mut n, 1, 1, vote_req("n0", "n1", 9, 7, 1, false));
    let a = drain(&mut n);
    assert_eq!(
        vote_result(a.last().unwrap()),
        (VoteResult::REJECT_EXPIRED_LEDGER_TERM, 9)
    );
    assert_eq!(
        n.hard_state(),
        HardState {
            term: t(9),
            voted_for: None
        }
    );
    // Same last term, shorter log: rejected.
    request(&mut n, 2, 2, vote_req("n2", "n1", 9, -1, 2, false));
    assert_eq!(
        vote_result(&drain(&mut n)[0]).0,
        VoteResult::REJECT_SMALL_LEDGER_END_INDEX
    );
    // Stale request term.
    request(&mut n, 3, 3, vote_req("n2", "n1", 8, 0, 2, false));
    assert_eq!(
        vote_result(&drain(&mut n)[0]),
        (VoteResult::REJECT_EXPIRED_VOTE_TERM, 9)
    );
    // Unknown and self candidates.
    request(&mut n, 4, 4, vote_req("zz", "n1", 9, 0, 2, false));
    assert_eq!(
        vote_result(&drain(&mut n)[0]).0,
        VoteResult::REJECT_UNKNOWN_LEADER
    );
}

#[test]
fn pre_vote_is_refused_while_the_leader_lease_holds_and_changes_nothing() {
    let mut n = node("n1", 3);
    let hb = Request::HeartBeat(Common::request("g", "n0", "n1", Some("n0"), 2));
    n.handle(10, Input::Request { id: 1, req: hb });
    let a = drain(&mut n);
    assert_eq!(a[0], hs(2, None));
    assert_eq!(
        a[1],
        Action::RoleChanged {
            role: Role::Follower,
            term: t(2),
            leader: Some("n0".into())
        }
    );
    assert_eq!(
        a[2],
        Action::Respond {
            id: 1,
            resp: Response::HeartBeat(Common::default())
        }
    );
    request(&mut n, 20, 2, vote_req("n2", "n1", 3, 100, 2, true));
    let a = drain(&mut n);
    assert_eq!(a.len(), 1);
    assert_eq!(
        vote_result(&a[0]),
        (VoteResult::REJECT_ALREADY_HAS_LEADER, 2)
    );
    // After the lease (600 ms) the same pre-vote is granted, still without any state change.
    n.tick(700);
    let _ = drain(&mut n);
    request(&mut n, 701, 3, vote_req("n2", "n1", 3, 100, 2, true));
    let a = drain(&mut n);
    assert_eq!(vote_result(&a[0]), (VoteResult::ACCEPT, 2));
    assert_eq!(
        n.hard_state(),
        HardState {
            term: t(2),
            voted_for: None
        }
    );
}

#[test]
fn heartbeat_checks_follow_the_spec_order() {
    let mut n = node("n1", 3);
    let mut req = Common::request("g", "n0", "n1", Some("n0"), 2);
    request(&mut n, 1, 1, Request::HeartBeat(req.clone()));
    let _ = drain(&mut n);
    for (leader, term, code) in [
        ("zz", 2, DLedgerCode::UNKNOWN_MEMBER),
        ("n1", 2, DLedgerCode::UNEXPECTED_MEMBER),
        ("n0", 1, DLedgerCode::EXPIRED_TERM),
        ("n2", 2, DLedgerCode::INCONSISTENT_LEADER),
    ] {
        req.leader_id = Some(leader.into());
        req.term = term;
        request(&mut n, 2, 2, Request::HeartBeat(req.clone()));
        match drain(&mut n).as_slice() {
            [Action::Respond {
                resp: Response::HeartBeat(h),
                ..
            }] => {
                assert_eq!(
                    (h.code, h.term, h.leader_id.as_deref()),
                    (code, 2, Some("n0"))
                );
            }
            other => panic!("{other:?}"),
        }
    }
    req.group = Some("other".into());
    request(&mut n, 3, 3, Request::HeartBeat(req));
    assert_eq!(drain(&mut n)[0], {
        let mut c = Common::request("other", "n0", "n1", Some("n0"), 2);
        c.code = DLedgerCode::UNKNOWN_GROUP;
        c.leader_id = Some("n0".into());
        Action::Respond {
            id: 3,
            resp: Response::HeartBeat(c),
        }
    });
}

fn entry(index: i64, term: i64, pos: i64, body: &'static [u8]) -> DLedgerEntry {
    DLedgerEntry::from(&LogEntry {
        index: Index(u64::try_from(index).unwrap()),
        term: t(term),
        pos: Pos(u64::try_from(pos).unwrap()),
        body: Bytes::from_static(body),
    })
}

fn push(kind: PushType, term: i64, commit: i64, entries: Vec<DLedgerEntry>) -> Request {
    push_to("n1", kind, term, commit, entries)
}

fn push_to(
    to: &str,
    kind: PushType,
    term: i64,
    commit: i64,
    entries: Vec<DLedgerEntry>,
) -> Request {
    let c = Common::request("g", "n0", to, Some("n0"), term);
    let (entry, batch_entry) = if entries.len() == 1 && kind != PushType::APPEND {
        (entries.into_iter().next(), Vec::new())
    } else {
        (None, entries)
    };
    Request::Push(PushEntryRequest {
        batch_entry,
        code: DLedgerCode::SUCCESS,
        commit_index: commit,
        entry,
        group: c.group,
        leader_id: c.leader_id,
        local_id: c.local_id,
        remote_id: c.remote_id,
        term,
        push_type: kind,
    })
}

fn push_code(a: &Action) -> (u64, DLedgerCode, i64) {
    match a {
        Action::Respond {
            id,
            resp: Response::Push(p),
        } => (*id, p.code, p.end_index),
        other => panic!("not a push response: {other:?}"),
    }
}

#[test]
fn follower_applies_in_order_buffers_gaps_and_clamps_commit() {
    let mut n = node("n1", 3);
    // Empty follower: COMPARE of index 0 fails, TRUNCATE at 0 writes it.
    let e0 = entry(0, 1, 0, b"");
    request(
        &mut n,
        1,
        1,
        push(PushType::COMPARE, 1, -1, vec![e0.clone()]),
    );
    let a = drain(&mut n);
    assert_eq!(
        push_code(a.last().unwrap()),
        (1, DLedgerCode::INCONSISTENT_STATE, -1)
    );
    request(&mut n, 2, 2, push(PushType::TRUNCATE, 1, 0, vec![e0]));
    let a = drain(&mut n);
    assert_eq!(a[0], commit(0, 48));
    assert_eq!(push_code(&a[1]), (2, DLedgerCode::SUCCESS, 0));
    // Index 2 arrives before 1: buffered, a duplicate is REPEATED_PUSH.
    let e1 = entry(1, 1, 48, b"a");
    let e2 = entry(2, 1, 97, b"b");
    request(&mut n, 3, 3, push(PushType::APPEND, 1, 5, vec![e2.clone()]));
    assert_eq!(drain(&mut n), vec![]);
    request(&mut n, 4, 4, push(PushType::APPEND, 1, 5, vec![e2]));
    assert_eq!(
        push_code(&drain(&mut n)[0]),
        (4, DLedgerCode::REPEATED_PUSH, 0)
    );
    request(&mut n, 5, 5, push(PushType::APPEND, 1, 5, vec![e1.clone()]));
    let a = drain(&mut n);
    // Commit 5 from the leader is clamped to the verified end (R7).
    assert_eq!(a[0], commit(1, 97));
    assert_eq!(push_code(&a[1]), (5, DLedgerCode::SUCCESS, 1));
    assert_eq!(a[2], commit(2, 146));
    assert_eq!(push_code(&a[3]), (3, DLedgerCode::SUCCESS, 2));
    // A lost ack: the same entry again is SUCCESS without change.
    request(&mut n, 6, 6, push(PushType::APPEND, 1, 2, vec![e1]));
    assert_eq!(push_code(&drain(&mut n)[0]), (6, DLedgerCode::SUCCESS, 2));
    assert_eq!(n.committed_index(), ix(2));
}

/// Follower n1 that took n0's term-1 log: an empty entry 0 by TRUNCATE (at 1 ms), then
/// `bodies` as entries 1.. in one APPEND carrying commit index `commit` (at 2 ms).
fn follower_with_term1_entries(bodies: &[&'static [u8]], commit: i64) -> Node<MemLog> {
    let mut n = node("n1", 3);
    request(
        &mut n,
        1,
        1,
        push(PushType::TRUNCATE, 1, 0, vec![entry(0, 1, 0, b"")]),
    );
    let mut pos = 48; // entry 0: a 48-byte header, no body
    let mut entries = Vec::new();
    for (i, &body) in bodies.iter().enumerate() {
        entries.push(entry(i as i64 + 1, 1, pos, body));
        pos += 48 + body.len() as i64;
    }
    request(&mut n, 2, 2, push(PushType::APPEND, 1, commit, entries));
    let _ = drain(&mut n);
    n
}

#[test]
fn follower_refuses_to_truncate_committed_entries_and_stale_leaders() {
    let mut n = follower_with_term1_entries(&[b"a"], 1);
    assert_eq!(n.committed_index(), ix(1));
    // A term-2 leader claims a different entry 1: refused, committed entries stay.
    request(
        &mut n,
        3,
        3,
        push(PushType::TRUNCATE, 2, 1, vec![entry(1, 2, 48, b"z")]),
    );
    let a = drain(&mut n);
    assert_eq!(
        push_code(a.last().unwrap()),
        (3, DLedgerCode::INCONSISTENT_STATE, 1)
    );
    // A term-1 push after the term moved to 2 is EXPIRED_TERM carrying our term.
    request(&mut n, 4, 4, push(PushType::COMMIT, 1, 1, vec![]));
    match drain(&mut n).as_slice() {
        [Action::Respond {
            resp: Response::Push(p),
            ..
        }] => {
            assert_eq!(
                (p.code, p.term, p.index),
                (DLedgerCode::EXPIRED_TERM, 2, None)
            );
        }
        other => panic!("{other:?}"),
    }
}

/// SIM-09 safety (SIM_SEED=1856): a TRUNCATE that matches nothing would keep the entries
/// below it unverified; a follower accepts it only over entries committed here (or none).
#[test]
fn follower_refuses_a_blind_truncate_over_entries_it_has_not_seen_committed() {
    // Term 1: entries 0..=2 from n0, only 0 known committed.
    let mut n = follower_with_term1_entries(&[b"a", b"b"], 0);
    assert_eq!((n.committed_index(), n.log().end_index()), (ix(0), ix(2)));
    // A term-2 leader whose log begins at 2 (it deleted 0..=1) sends its entry 2: our 1 would
    // stay under it unverified. Refused, nothing changes.
    let blind = push(PushType::TRUNCATE, 2, 5, vec![entry(2, 2, 97, b"x")]);
    request(&mut n, 3, 3, blind.clone());
    let a = drain(&mut n);
    assert_eq!(
        push_code(a.last().unwrap()),
        (3, DLedgerCode::INCONSISTENT_STATE, 2)
    );
    assert_eq!(
        n.log().entry(Index(1)).unwrap().body,
        Bytes::from_static(b"a")
    );
    // Once 1 is known committed (a COMMIT of the old term cannot come any more, but a restart
    // from a checkpoint can give it), the same TRUNCATE is safe and applied.
    let mut m = follower_with_term1_entries(&[b"a", b"b"], 1);
    assert_eq!(m.committed_index(), ix(1));
    m.handle(3, Input::Request { id: 3, req: blind });
    let a = drain(&mut m);
    assert_eq!(push_code(a.last().unwrap()), (3, DLedgerCode::SUCCESS, 2));
    assert_eq!(m.log().entry(Index(2)).unwrap().term, t(2));
}

/// SIM-09 liveness (SIM_SEED=13): the refusal above marks the follower needs-reinstall
/// instead of a COMPARE/TRUNCATE loop every back-off.
#[test]
fn a_refused_truncate_at_the_leaders_begin_marks_the_follower_needs_reinstall() {
    let (mut n, compare_n1) = leader3_holding_only_index_2();
    // n1 holds 0..=2 with a different entry 2: COMPARE at 2 fails, nothing lower to compare.
    let diverged = push_inconsistent(0, 2, 0);
    reply_ok(&mut n, 1_010, compare_n1, diverged.clone());
    let c = calls(&drain(&mut n));
    let (call, p) = push_call_to(&c, "n1");
    assert_eq!((p.push_type, p.first_index()), (PushType::TRUNCATE, ix(2)));
    assert!(!n.needs_reinstall("n1"));
    reply_ok(&mut n, 1_011, call, diverged);
    assert!(n.needs_reinstall("n1"));
    assert_eq!(
        pushes_to(&drain(&mut n), "n1").len(),
        0,
        "no immediate retry"
    );
}

/// A 3-node leader elected at term 1 with its no-op at index 0, all calls drained.
fn leader3() -> (Node<MemLog>, Vec<(String, CallId, Request)>) {
    let mut n = node("n0", 3);
    n.tick(1_000);
    let c = calls(&drain(&mut n));
    reply_ok(&mut n, 1_001, c[0].1, accept("n1", 0));
    let c = calls(&drain(&mut n));
    reply_ok(&mut n, 1_002, c[0].1, accept("n1", 1));
    let c = calls(&drain(&mut n));
    assert_eq!(n.role(), Role::Leader);
    (n, c)
}

/// The first PUSH to `peer` among `c`: its call id and request.
fn push_call_to<'a>(
    c: &'a [(String, CallId, Request)],
    peer: &str,
) -> (CallId, &'a PushEntryRequest) {
    c.iter()
        .find_map(|(to, call, r)| match r {
            Request::Push(p) if to == peer => Some((*call, p)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no push to {peer}: {c:?}"))
}

/// The PUSH calls to `peer` among `actions`.
fn pushes_to(actions: &[Action], peer: &str) -> Vec<(CallId, PushEntryRequest)> {
    calls(actions)
        .into_iter()
        .filter_map(|(to, call, r)| match r {
            Request::Push(p) if to == peer => Some((call, p)),
            _ => None,
        })
        .collect()
}

/// The LEADERSHIP_TRANSFER calls among `actions`.
fn transfer_calls(actions: &[Action]) -> Vec<(String, CallId, Request)> {
    calls(actions)
        .into_iter()
        .filter(|x| matches!(x.2, Request::LeadershipTransfer(_)))
        .collect()
}

fn propose(n: &mut Node<MemLog>, now: u64, id: u64, body: &'static [u8]) {
    n.handle(
        now,
        Input::Propose {
            id,
            body: Bytes::from_static(body),
        },
    );
}

fn request(n: &mut Node<MemLog>, now: u64, id: u64, req: Request) {
    n.handle(now, Input::Request { id, req });
}

fn reply_ok(n: &mut Node<MemLog>, now: u64, call: CallId, resp: Response) {
    n.handle(
        now,
        Input::Reply {
            call,
            result: Ok(resp),
        },
    );
}

/// `push_ok(..)` answered with INCONSISTENT_STATE and the follower's `begin` index.
fn push_inconsistent(first: i64, end: i64, begin: i64) -> Response {
    let mut r = push_ok(first, 1, end, 1);
    if let Response::Push(p) = &mut r {
        p.code = DLedgerCode::INCONSISTENT_STATE;
        p.begin_index = begin;
    }
    r
}

/// [`leader3`] that then appended "a" (1) and "b" (2), proposed at 1_003 and 1_004, and
/// deleted its log below 2 (retention); returns the COMPARE call still open to n1.
fn leader3_holding_only_index_2() -> (Node<MemLog>, CallId) {
    let (mut n, c) = leader3();
    let (compare_n1, _) = push_call_to(&c, "n1");
    propose(&mut n, 1_003, 0, b"a");
    propose(&mut n, 1_004, 1, b"b");
    let _ = drain(&mut n);
    n.log_mut().delete_before(Index(2));
    (n, compare_n1)
}

#[test]
fn leader_commits_on_quorum_ack_and_answers_the_proposal() {
    let (mut n, c) = leader3();
    let (compare_n1, _) = push_call_to(&c, "n1");
    propose(&mut n, 1_010, 1, b"m");
    assert_eq!(
        drain(&mut n),
        vec![],
        "nothing is sent to a follower still in COMPARE"
    );
    reply_ok(&mut n, 1_011, compare_n1, push_ok(0, 1, 0, 1));
    let a = drain(&mut n);
    // COMPARE matched -> APPEND the new entry to n1 (batched), commit needs n1's ack of a term-1 entry.
    let c = calls(&a);
    assert_eq!(c.len(), 1);
    let Request::Push(p) = &c[0].2 else { panic!() };
    assert_eq!(
        (p.push_type, p.first_index(), p.count()),
        (PushType::APPEND, ix(1), 1)
    );
    reply_ok(&mut n, 1_012, c[0].1, push_ok(1, 1, 1, 1));
    let a = drain(&mut n);
    assert_eq!(a[0], commit(1, 97));
    assert_eq!(
        a[1],
        Action::ProposeDone {
            id: 1,
            result: Ok(appended(1, 48))
        }
    );
    let c = calls(&a);
    let Request::Push(p) = &c[0].2 else { panic!() };
    assert_eq!((p.push_type, p.commit_index), (PushType::COMMIT, 1));
}

#[test]
fn inconsistent_state_sends_the_dispatcher_back_to_compare() {
    let (mut n, c) = leader3();
    let (compare_n1, _) = push_call_to(&c, "n1");
    reply_ok(&mut n, 1_010, compare_n1, push_ok(0, 1, 0, 1));
    let _ = drain(&mut n);
    propose(&mut n, 1_011, 1, b"m");
    let c = calls(&drain(&mut n));
    let mut bad = push_ok(1, 1, 0, 1);
    if let Response::Push(p) = &mut bad {
        p.code = DLedgerCode::INCONSISTENT_STATE;
    }
    reply_ok(&mut n, 1_012, c[0].1, bad);
    let c = calls(&drain(&mut n));
    let Request::Push(p) = &c[0].2 else { panic!() };
    assert_eq!((p.push_type, p.first_index()), (PushType::COMPARE, ix(1)));
}

/// SIM-09 / R11: a follower whose next entry this leader has deleted cannot be repaired by
/// pushes: it is marked as needing a reinstall and re-COMPAREd only every 10 heartbeats (no
/// TRUNCATE loop); once it answers from a usable end (reinstalled), appends resume.
#[test]
fn a_follower_behind_the_leaders_begin_needs_a_reinstall_and_is_not_looped_on() {
    let (mut n, compare_n1) = leader3_holding_only_index_2();
    reply_ok(&mut n, 1_010, compare_n1, push_inconsistent(0, -1, 0));
    assert!(n.needs_reinstall("n1"));
    assert!(!n.needs_reinstall("n2"));
    assert!(
        pushes_to(&drain(&mut n), "n1").is_empty(),
        "no TRUNCATE of a deleted range"
    );
    // Tick in half heartbeats (answering heartbeats, so the leader keeps its lease) until
    // something is pushed to n1 again: one COMPARE, no earlier than the re-check period.
    let hb = n.config().heartbeat_interval_ms;
    let mut now = 1_010;
    let mut pushes = Vec::new();
    while pushes.is_empty() && now < 1_010 + 20 * hb {
        now += hb / 2;
        n.tick(now);
        for (to, call, req) in calls(&drain(&mut n)) {
            match req {
                Request::HeartBeat(_) => {
                    let ok = Common {
                        code: DLedgerCode::SUCCESS,
                        term: 1,
                        ..Common::default()
                    };
                    reply_ok(&mut n, now, call, Response::HeartBeat(ok));
                }
                Request::Push(p) if to == "n1" => pushes.push((call, p)),
                _ => {}
            }
        }
    }
    assert_eq!(n.role(), Role::Leader);
    assert_eq!(pushes.len(), 1, "{pushes:?}");
    assert!(
        now >= 1_010 + 10 * hb,
        "re-checked after {} ms",
        now - 1_010
    );
    let (call, p) = &pushes[0];
    assert_eq!(p.push_type, PushType::COMPARE);
    assert!(n.needs_reinstall("n1"));
    let at = p.entries()[0].index;
    // Reinstalled meanwhile: it holds the same entry now, so appends resume.
    n.handle(
        now + 1,
        Input::Reply {
            call: *call,
            result: Ok(push_ok(at, 1, at, 1)),
        },
    );
    assert!(!n.needs_reinstall("n1"));
}

#[test]
fn proposals_beyond_the_pending_window_are_busy_and_step_down_fails_the_rest() {
    let (mut n, _) = leader3();
    n.cfg.max_pending_requests = 2;
    for id in 0..3 {
        propose(&mut n, 1_010, id, b"m");
    }
    let a = drain(&mut n);
    assert!(a.contains(&Action::ProposeDone {
        id: 2,
        result: Err(ProposeError::Busy)
    }));
    assert!(ProposeError::Busy.is_definite());
    // No follower answers: after the lease the leader steps down; pending become indeterminate.
    n.tick(1_700);
    let a = drain(&mut n);
    let done: Vec<_> = a
        .iter()
        .filter(|x| matches!(x, Action::ProposeDone { .. }))
        .cloned()
        .collect();
    assert_eq!(
        done,
        vec![
            Action::ProposeDone {
                id: 0,
                result: Err(ProposeError::TermChanged)
            },
            Action::ProposeDone {
                id: 1,
                result: Err(ProposeError::TermChanged)
            },
        ]
    );
    assert!(a.contains(&Action::RoleChanged {
        role: Role::Candidate,
        term: t(1),
        leader: None
    }));
    assert!(!ProposeError::TermChanged.is_definite());
}

#[test]
fn transfer_waits_for_catch_up_then_asks_the_transferee() {
    let (mut n, c) = leader3();
    let (compare_n2, _) = push_call_to(&c, "n2");
    n.handle(1_010, Input::TransferLeadership { to: "n2".into() });
    assert_eq!(drain(&mut n), vec![]);
    propose(&mut n, 1_011, 1, b"m");
    assert_eq!(
        drain(&mut n),
        vec![Action::ProposeDone {
            id: 1,
            result: Err(ProposeError::Transferring)
        }]
    );
    reply_ok(&mut n, 1_012, compare_n2, push_ok(0, 1, 0, 1));
    let c = transfer_calls(&drain(&mut n));
    match &c[0].2 {
        Request::LeadershipTransfer(t) => {
            assert_eq!(
                (
                    t.transferee_id.as_deref(),
                    t.take_leadership_ledger_index,
                    t.term
                ),
                (Some("n2"), 0, 1)
            );
        }
        other => panic!("{other:?}"),
    }
    // The transferee campaigns at once, skipping the pre-vote.
    let mut f = node("n2", 3);
    request(
        &mut f,
        5,
        1,
        Request::HeartBeat(Common::request("g", "n0", "n2", Some("n0"), 1)),
    );
    request(
        &mut f,
        6,
        2,
        push_to("n2", PushType::TRUNCATE, 1, -1, vec![entry(0, 1, 0, b"")]),
    );
    let _ = drain(&mut f);
    request(&mut f, 7, 3, c[0].2.clone());
    let a = drain(&mut f);
    assert_eq!(a[1], hs(2, Some("n2")));
    assert_eq!(calls(&a)[0].2, vote_req("n2", "n0", 2, 0, 1, false));
    assert!(
        matches!(a.last(), Some(Action::Respond { resp: Response::LeadershipTransfer(r), .. }) if r.code == DLedgerCode::SUCCESS)
    );
}

/// Regression (found by the simulator, crashes seed 25): a duplicated TRUNCATE arriving after
/// later APPENDs were acknowledged must not cut those entries again, or the leader counts a
/// replica that no longer holds them.
#[test]
fn duplicated_truncate_does_not_undo_acknowledged_appends() {
    let mut n = node("n1", 3);
    let truncate = push(PushType::TRUNCATE, 1, -1, vec![entry(0, 1, 0, b"")]);
    request(&mut n, 1, 1, truncate.clone());
    request(
        &mut n,
        2,
        2,
        push(PushType::APPEND, 1, -1, vec![entry(1, 1, 48, b"a")]),
    );
    let _ = drain(&mut n);
    assert_eq!(n.log().end_index(), ix(1));
    request(&mut n, 3, 3, truncate);
    assert_eq!(push_code(&drain(&mut n)[0]), (3, DLedgerCode::SUCCESS, 1));
    assert_eq!(
        n.log().end_index(),
        ix(1),
        "entry 1 was acknowledged to this leader and stays"
    );
}

/// Regression (found by the simulator on the real store, power_loss_store seed 278): after a
/// TRUNCATE rewrote an entry, the flushed mark was clamped to the new end, so the rewritten
/// (unflushed) entry was acknowledged at once in sync-flush mode and lost on power loss.
#[test]
fn sync_flush_truncate_rewrite_waits_for_the_flush() {
    let mut c = cfg("n1", 3);
    c.sync_flush = true;
    let mut log = MemLog::new();
    log.append_leader(t(1), Bytes::from_static(b"old")).unwrap();
    log.flush_to(ix(0));
    let mut n = Node::new(
        c,
        HardState {
            term: t(1),
            voted_for: None,
        },
        log,
        None,
        0,
    )
    .unwrap();
    request(
        &mut n,
        1,
        1,
        push(PushType::TRUNCATE, 2, -1, vec![entry(0, 2, 0, b"new")]),
    );
    let a = drain(&mut n);
    assert!(
        !a.iter().any(|x| matches!(x, Action::Respond { .. })),
        "no ack before the flush: {a:?}"
    );
    assert!(a.contains(&Action::FlushLog { up_to: Index(0) }));
    n.handle(2, Input::LogFlushed { index: ix(0) });
    assert_eq!(push_code(&drain(&mut n)[0]), (1, DLedgerCode::SUCCESS, 0));
}

#[test]
fn proposals_of_one_batch_share_a_push_and_partial_batches_wait_for_a_response() {
    let (mut n, c) = leader3();
    for (_, call, req) in &c {
        if matches!(req, Request::Push(_)) {
            reply_ok(&mut n, 1_003, *call, push_ok(0, 1, 0, 1));
        }
    }
    drain(&mut n);
    let propose = |id: u64| Input::Propose {
        id,
        body: Bytes::from_static(b"m"),
    };
    let appends = |a: &[Action]| -> Vec<(String, CallId, Option<Index>, usize)> {
        calls(a)
            .into_iter()
            .filter_map(|(to, call, r)| match r {
                Request::Push(p) if p.push_type == PushType::APPEND => {
                    Some((to, call, p.first_index(), p.count()))
                }
                _ => None,
            })
            .collect()
    };
    // Three proposals taken in one turn: one push of three entries per follower.
    n.handle_batch(1_010, (1..=3).map(propose));
    let first = appends(&drain(&mut n));
    assert_eq!(
        first
            .iter()
            .map(|(to, _, f, k)| (to.as_str(), *f, *k))
            .collect::<Vec<_>>(),
        vec![("n1", ix(1), 3), ("n2", ix(1), 3)]
    );
    // A second push goes out at once (below `partial_push_inflight_max`)...
    n.handle(1_011, propose(4));
    let second = appends(&drain(&mut n));
    assert_eq!(second.len(), 2);
    // ...but with two in flight, partial batches wait for a response.
    n.handle(1_012, propose(5));
    n.handle(1_013, propose(6));
    assert_eq!(appends(&drain(&mut n)), vec![]);
    let (_, call_n1, _, _) = first[0].clone();
    reply_ok(&mut n, 1_014, call_n1, push_ok(1, 3, 3, 1));
    let a = drain(&mut n);
    assert!(a.contains(&Action::CommitAdvanced {
        index: Index(3),
        pos: Some(Pos(3 * 49 + 48))
    }));
    let third = appends(&a);
    assert_eq!(
        third
            .iter()
            .map(|(to, _, f, k)| (to.as_str(), *f, *k))
            .collect::<Vec<_>>(),
        vec![("n1", ix(5), 2)]
    );
}

/// Puts `me` (of 3) into a real-vote round for term 1 (it voted for itself).
fn real_vote_candidate(me: &str) -> Node<MemLog> {
    let mut n = node(me, 3);
    n.tick(1_000);
    let c = calls(&drain(&mut n));
    reply_ok(&mut n, 1_001, c[0].1, accept(&c[0].0, 0));
    drain(&mut n);
    assert_eq!((n.role(), n.term()), (Role::Candidate, t(1)));
    n
}

#[test]
fn a_split_vote_is_broken_by_member_order() {
    // n0 and n1 both voted for themselves in term 1: n0 (listed first) retries soon...
    let mut n = real_vote_candidate("n0");
    request(&mut n, 1_002, 9, vote_req("n1", "n0", 1, -1, -1, false));
    let a = drain(&mut n);
    assert_eq!(
        vote_result(a.last().unwrap()),
        (VoteResult::REJECT_ALREADY_VOTED, 1)
    );
    let wait = n.election.next_round_ms - 1_002;
    assert!(
        (75..150).contains(&wait),
        "first-listed retries in {wait} ms"
    );
    // ...while n2, split against n1 (listed before it), waits at least maxVoteIntervalMs.
    let mut n = real_vote_candidate("n2");
    request(&mut n, 1_002, 9, vote_req("n1", "n2", 1, -1, -1, false));
    drain(&mut n);
    let wait = n.election.next_round_ms - 1_002;
    assert!((450..525).contains(&wait), "later-listed waits {wait} ms");
}

#[test]
fn a_pre_vote_granted_after_we_voted_for_someone_else_starts_no_vote() {
    let mut n = node("n0", 3);
    n.tick(1_000);
    let c = calls(&drain(&mut n)); // pre-vote for term 1
    request(&mut n, 1_001, 9, vote_req("n1", "n0", 1, -1, -1, false));
    let a = drain(&mut n);
    assert_eq!(vote_result(a.last().unwrap()), (VoteResult::ACCEPT, 1));
    // The stale pre-vote grant arrives: starting a term-2 vote would depose n1.
    reply_ok(&mut n, 1_002, c[0].1, accept("n1", 0));
    assert_eq!(drain(&mut n), vec![]);
    assert_eq!(n.term(), t(1));
}

// ----- leadership transfer outcomes (issue 4) ----------------------------------------------

fn transfer_done(to: &str, result: Result<(), (DLedgerCode, &str)>) -> Action {
    Action::TransferDone {
        to: to.into(),
        result: result.map_err(|(code, reason)| TransferFailure {
            code,
            reason: reason.into(),
        }),
    }
}

fn transfers_done(actions: &[Action]) -> Vec<Action> {
    actions
        .iter()
        .filter(|a| matches!(a, Action::TransferDone { .. }))
        .cloned()
        .collect()
}

fn transfer_answer(code: DLedgerCode, term: i64) -> Response {
    Response::LeadershipTransfer(Common {
        code,
        group: Some("g".into()),
        leader_id: None,
        local_id: Some("n0".into()),
        remote_id: Some("n2".into()),
        term,
    })
}

/// Admin -> leader n0: hand leadership to `to`.
fn admin_transfer(to: &str, term: i64) -> Request {
    Request::LeadershipTransfer(LeadershipTransferRequest {
        code: DLedgerCode::SUCCESS,
        group: Some("g".into()),
        leader_id: None,
        local_id: Some("admin".into()),
        remote_id: Some("n0".into()),
        take_leadership_ledger_index: -1,
        term,
        transfer_id: Some("n0".into()),
        transferee_id: Some(to.into()),
    })
}

/// Ticking to just before `deadline` ends no transfer; ticking to it fails the transfer to
/// n2 with TAKE_LEADERSHIP_FAILED and `reason`.
fn transfer_to_n2_fails_at(n: &mut Node<MemLog>, deadline: u64, reason: &str) {
    n.tick(deadline - 1);
    assert_eq!(transfers_done(&drain(n)), vec![]);
    n.tick(deadline);
    assert_eq!(
        transfers_done(&drain(n)),
        vec![transfer_done(
            "n2",
            Err((DLedgerCode::TAKE_LEADERSHIP_FAILED, reason))
        )]
    );
}

/// A leader (n0, term 1) that started a transfer to n2 at 1_010 and, once n2 acknowledged
/// the no-op at 1_012, sent it LEADERSHIP_TRANSFER; returns that call's id.
fn leader3_transfer_sent() -> (Node<MemLog>, CallId) {
    let (mut n, c) = leader3();
    let (compare_n2, _) = push_call_to(&c, "n2");
    n.handle(1_010, Input::TransferLeadership { to: "n2".into() });
    assert_eq!(drain(&mut n), vec![]);
    reply_ok(&mut n, 1_012, compare_n2, push_ok(0, 1, 0, 1));
    let t = transfer_calls(&drain(&mut n));
    assert_eq!(t.len(), 1);
    (n, t[0].1)
}

#[test]
fn transfer_refusals_are_reported_at_once_with_their_code() {
    let (mut n, _) = leader3();
    n.handle(1_010, Input::TransferLeadership { to: "n9".into() });
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n9",
            Err((DLedgerCode::UNKNOWN_MEMBER, "n9 is not a member of group g"))
        )]
    );
    n.handle(1_011, Input::TransferLeadership { to: "n0".into() });
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n0",
            Err((DLedgerCode::UNEXPECTED_MEMBER, "n0 is this member itself"))
        )]
    );
    n.cfg.max_leadership_transfer_wait_index = 0;
    n.handle(1_012, Input::TransferLeadership { to: "n1".into() });
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n1",
            Err((
                DLedgerCode::FALL_BEHIND_TOO_MUCH,
                "n1 is 1 entries behind (maxLeadershipTransferWaitIndex 0)"
            ))
        )]
    );
    n.cfg.max_leadership_transfer_wait_index = 1_000;
    // Refusals leave no transfer behind: proposals are still taken.
    assert!(!n.transferring());
    n.handle(1_013, Input::TransferLeadership { to: "n2".into() });
    assert_eq!(drain(&mut n), vec![], "accepted: the outcome comes later");
    n.handle(1_014, Input::TransferLeadership { to: "n1".into() });
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n1",
            Err((
                DLedgerCode::LEADER_TRANSFERRING,
                "a transfer to n2 is already in progress"
            ))
        )]
    );
    assert!(n.transferring(), "the running transfer goes on");

    let mut f = node("n1", 3);
    f.handle(5, Input::TransferLeadership { to: "n2".into() });
    assert_eq!(
        drain(&mut f),
        vec![transfer_done(
            "n2",
            Err((
                DLedgerCode::NOT_LEADER,
                "not the leader (leader: unknown, term 0)"
            ))
        )]
    );
}

#[test]
fn transfer_fails_when_the_transferee_does_not_catch_up_in_time() {
    let (mut n, _) = leader3();
    n.cfg.leadership_transfer_wait_timeout_ms = 100;
    n.handle(1_010, Input::TransferLeadership { to: "n2".into() });
    assert_eq!(drain(&mut n), vec![]);
    transfer_to_n2_fails_at(
        &mut n,
        1_110,
        "n2 did not catch up within leadershipTransferWaitTimeout 100 ms (has -1, leader end 0)",
    );
    // Proposals are taken again.
    propose(&mut n, 1_111, 1, b"m");
    assert!(!drain(&mut n)
        .iter()
        .any(|a| matches!(a, Action::ProposeDone { .. })));
}

#[test]
fn a_failure_answer_or_no_answer_from_the_transferee_ends_the_transfer_with_its_code() {
    let (mut n, call) = leader3_transfer_sent();
    reply_ok(
        &mut n,
        1_013,
        call,
        transfer_answer(DLedgerCode::INCONSISTENT_LEADER, 1),
    );
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n2",
            Err((
                DLedgerCode::INCONSISTENT_LEADER,
                "transferee n2 answered INCONSISTENT_LEADER(409) (its term 1)"
            ))
        )]
    );
    assert!(!n.transferring());
    // n2 is caught up: a new transfer asks it at once; the call fails on the network.
    n.handle(1_014, Input::TransferLeadership { to: "n2".into() });
    let c = calls(&drain(&mut n));
    assert_eq!(c.len(), 1);
    assert!(matches!(c[0].2, Request::LeadershipTransfer(_)));
    n.handle(
        1_015,
        Input::Reply {
            call: c[0].1,
            result: Err(CallFailure::Network),
        },
    );
    assert_eq!(
        drain(&mut n),
        vec![transfer_done(
            "n2",
            Err((
                DLedgerCode::NETWORK_ERROR,
                "transferee n2 could not be reached"
            ))
        )]
    );
    // A late answer to an earlier transfer's call does not end a newer transfer.
    n.handle(1_016, Input::TransferLeadership { to: "n2".into() });
    let c = calls(&drain(&mut n));
    reply_ok(
        &mut n,
        1_017,
        c[0].1,
        transfer_answer(DLedgerCode::SUCCESS, 1),
    );
    assert_eq!(drain(&mut n), vec![]);
    assert!(n.transferring());
}

#[test]
fn transfer_succeeds_once_the_transferee_leads_and_fails_if_another_member_does() {
    for (leader, expected) in [
        ("n2", Ok(())),
        (
            "n1",
            Err((
                DLedgerCode::TAKE_LEADERSHIP_FAILED,
                "n1 became leader in term 2 instead of n2",
            )),
        ),
    ] {
        let (mut n, call) = leader3_transfer_sent();
        reply_ok(
            &mut n,
            1_013,
            call,
            transfer_answer(DLedgerCode::SUCCESS, 1),
        );
        assert_eq!(drain(&mut n), vec![]);
        // The transferee's vote deposes us; the outcome is not known yet.
        request(&mut n, 1_014, 1, vote_req("n2", "n0", 2, 0, 1, false));
        let a = drain(&mut n);
        assert_eq!(transfers_done(&a), vec![]);
        assert_eq!(vote_result(a.last().unwrap()).0, VoteResult::ACCEPT);
        request(
            &mut n,
            1_015,
            2,
            Request::HeartBeat(Common::request("g", leader, "n0", Some(leader), 2)),
        );
        let a = drain(&mut n);
        assert_eq!(
            a[..2],
            [
                Action::RoleChanged {
                    role: Role::Follower,
                    term: t(2),
                    leader: Some(leader.into())
                },
                transfer_done("n2", expected),
            ]
        );
        assert!(matches!(a[2], Action::Respond { id: 2, .. }));
        assert_eq!(a.len(), 3);
    }
}

#[test]
fn a_handover_without_a_known_leader_fails_at_its_deadline() {
    let (mut n, _call) = leader3_transfer_sent();
    request(&mut n, 1_014, 1, vote_req("n2", "n0", 2, 0, 1, false));
    let _ = drain(&mut n);
    // Started at 1_010: leadershipTransferWaitTimeout 1_000 + maxVoteIntervalMs 450.
    transfer_to_n2_fails_at(
        &mut n,
        2_460,
        "no leader known 1450 ms after asking n2 to take over",
    );
}

#[test]
fn losing_leadership_before_the_transferee_caught_up_fails_the_transfer() {
    let (mut n, _) = leader3();
    n.handle(1_010, Input::TransferLeadership { to: "n2".into() });
    let _ = drain(&mut n);
    request(
        &mut n,
        1_011,
        1,
        Request::HeartBeat(Common::request("g", "n1", "n0", Some("n1"), 3)),
    );
    let a = drain(&mut n);
    assert_eq!(
        transfers_done(&a),
        vec![transfer_done(
            "n2",
            Err((
                DLedgerCode::TERM_CHANGED,
                "leadership lost (term 3) before n2 caught up"
            ))
        )]
    );
}

#[test]
fn admin_transfer_request_is_answered_with_the_real_outcome() {
    let (mut n, c) = leader3();
    let code_of = |a: &Action| match a {
        Action::Respond {
            id,
            resp: Response::LeadershipTransfer(r),
        } => (*id, r.code, r.local_id.clone(), r.term),
        other => panic!("not a transfer response: {other:?}"),
    };
    // Refusals are answered at once with the spec code.
    for (id, req, code) in [
        (1, admin_transfer("n9", 1), DLedgerCode::UNKNOWN_MEMBER),
        (2, admin_transfer("n2", 0), DLedgerCode::INCONSISTENT_TERM),
    ] {
        n.handle(1_010, Input::Request { id, req });
        let a = drain(&mut n);
        assert_eq!(a.len(), 1);
        assert_eq!(code_of(&a[0]), (id, code, Some("admin".into()), 1));
    }
    // Accepted: no answer until the transferee answered.
    request(&mut n, 1_011, 3, admin_transfer("n2", 1));
    assert_eq!(drain(&mut n), vec![]);
    let (compare_n2, _) = push_call_to(&c, "n2");
    reply_ok(&mut n, 1_012, compare_n2, push_ok(0, 1, 0, 1));
    let t = transfer_calls(&drain(&mut n));
    assert_eq!(t.len(), 1);
    reply_ok(
        &mut n,
        1_013,
        t[0].1,
        transfer_answer(DLedgerCode::TAKE_LEADERSHIP_FAILED, 1),
    );
    let a = drain(&mut n);
    assert_eq!(a.len(), 1);
    assert_eq!(
        code_of(&a[0]),
        (
            3,
            DLedgerCode::TAKE_LEADERSHIP_FAILED,
            Some("admin".into()),
            1
        )
    );
}

#[test]
fn transferee_refuses_a_stale_or_foreign_transfer_request() {
    let mut f = node("n2", 3);
    request(
        &mut f,
        5,
        1,
        Request::HeartBeat(Common::request("g", "n0", "n2", Some("n0"), 2)),
    );
    let _ = drain(&mut f);
    let ask = |from: &str, term: i64| {
        Request::LeadershipTransfer(LeadershipTransferRequest {
            code: DLedgerCode::SUCCESS,
            group: Some("g".into()),
            leader_id: Some(from.into()),
            local_id: Some(from.into()),
            remote_id: Some("n2".into()),
            take_leadership_ledger_index: -1,
            term,
            transfer_id: Some(from.into()),
            transferee_id: Some("n2".into()),
        })
    };
    for (id, req, code) in [
        (2, ask("n0", 1), DLedgerCode::EXPIRED_TERM),
        (3, ask("n1", 2), DLedgerCode::INCONSISTENT_LEADER),
    ] {
        f.handle(6, Input::Request { id, req });
        match drain(&mut f).as_slice() {
            [Action::Respond {
                id: got,
                resp: Response::LeadershipTransfer(r),
            }] => assert_eq!((*got, r.code, r.term), (id, code, 2)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(f.role(), Role::Follower);
}

// ----- terms and indexes at the top of their range (FZ-05 forged RPCs) ----------------------

#[test]
fn an_adopted_maximal_term_is_stood_in_instead_of_overflowing() {
    // A heartbeat forged under n0's name carries the largest term: n1 follows it...
    let mut n = node("n1", 3);
    let hb = Request::HeartBeat(Common::request("g", "n0", "n1", Some("n0"), i64::MAX));
    request(&mut n, 10, 1, hb);
    drain(&mut n);
    assert_eq!((n.role(), n.term()), (Role::Follower, t(i64::MAX)));
    // ...n0 never leads that term: once the lease is over, n1 campaigns in it (it voted for
    // nobody there) instead of computing a successor term.
    n.tick(100_000);
    drain(&mut n);
    n.tick(110_000);
    let c = calls(&drain(&mut n));
    assert!(!c.is_empty(), "no pre-vote sent");
    for (_, _, req) in &c {
        let Request::Vote(v) = req else {
            panic!("not a vote: {req:?}")
        };
        assert_eq!((v.term, v.pre_vote), (i64::MAX, true));
    }
    reply_ok(&mut n, 110_001, c[0].1, accept(&c[0].0, i64::MAX));
    let a = drain(&mut n);
    assert_eq!(a[0], hs(i64::MAX, Some("n1")));
    let votes = calls(&a);
    reply_ok(&mut n, 110_002, votes[0].1, accept(&votes[0].0, i64::MAX));
    drain(&mut n);
    assert_eq!((n.role(), n.term()), (Role::Leader, t(i64::MAX)));
}

#[test]
fn a_member_that_voted_for_another_in_the_maximal_term_waits_without_panicking() {
    let mut n = node("n1", 3);
    request(&mut n, 10, 1, vote_req("n0", "n1", i64::MAX, 5, 1, false));
    let a = drain(&mut n);
    assert_eq!(
        vote_result(a.last().unwrap()),
        (VoteResult::ACCEPT, i64::MAX)
    );
    for now in [100_000, 110_000, 200_000] {
        n.tick(now);
        assert!(calls(&drain(&mut n)).is_empty(), "campaigned at {now}");
    }
    assert_eq!(n.term(), t(i64::MAX));
    // A leader of that term is still followed.
    let hb = Request::HeartBeat(Common::request("g", "n0", "n1", Some("n0"), i64::MAX));
    request(&mut n, 200_001, 2, hb);
    drain(&mut n);
    assert_eq!(n.role(), Role::Follower);
}

#[test]
fn a_batch_push_at_the_top_of_the_index_space_is_refused_without_overflow() {
    let mut n = node("n1", 3);
    let e = entry(i64::MAX, 1, 0, b"x");
    request(
        &mut n,
        1,
        1,
        push(PushType::APPEND, 1, -1, vec![e.clone(), e]),
    );
    let a = drain(&mut n);
    assert_eq!(
        push_code(a.last().unwrap()),
        (1, DLedgerCode::UNEXPECTED_ARGUMENT, -1)
    );
}

#[test]
fn a_late_vote_rejection_at_a_higher_term_deposes_the_leader() {
    let mut n = node("n0", 3);
    n.tick(1_000);
    let c = calls(&drain(&mut n));
    reply_ok(&mut n, 1_001, c[0].1, accept("n1", 0));
    let votes = calls(&drain(&mut n));
    assert_eq!(votes[1].0, "n2");
    reply_ok(&mut n, 1_002, votes[0].1, accept("n1", 1));
    let _ = drain(&mut n);
    assert_eq!(n.role(), Role::Leader);
    // n2's answer to the round n0 already won arrives late: n2 has moved on to term 5.
    let late = Response::Vote(VoteResponse {
        code: DLedgerCode::SUCCESS,
        group: Some("g".into()),
        leader_id: Some("n0".into()),
        local_id: Some("n0".into()),
        remote_id: Some("n2".into()),
        term: 5,
        vote_result: VoteResult::REJECT_EXPIRED_VOTE_TERM,
    });
    reply_ok(&mut n, 1_003, votes[1].1, late);
    let a = drain(&mut n);
    assert_eq!((n.role(), n.term()), (Role::Follower, t(5)));
    assert!(a.contains(&hs(5, None)), "{a:?}");
    assert!(
        a.contains(&Action::RoleChanged {
            role: Role::Follower,
            term: t(5),
            leader: None
        }),
        "{a:?}"
    );
}
