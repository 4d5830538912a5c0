//! The broker's role machine: DLedger's role changes in, `changeToSlave` /
//! `changeToMaster` decisions out (spec broker-roles.md §3, DESIGN.md §1).
//!
//! Pure and synchronous: no tokio, no clock (callers pass `now_ms`), no I/O. The
//! controller feeds it every ledger role change and every water-mark update, one
//! at a time and in order, and executes the [`RoleCommand`]s it returns.
//!
//! Why a CatchingUp state: a new leader may hold entries of older terms that are
//! neither committed nor dispatched into consume queues. Assigning queue offsets
//! before they are would hand out offsets that collide with replicated messages
//! (R12), so the broker stays a slave until `ledger end == committed` and the
//! dispatcher has consumed everything committed.
//!
//! Invariants:
//! - events of a term older than the newest seen are ignored;
//! - `ChangeToMaster` is only emitted in the term the ledger made us leader, and
//!   only once per term;
//! - FOLLOWER always yields `ChangeToSlave` (re-registration is harmless and
//!   refreshes the name server), CANDIDATE only when not already a slave.

/// The replicated log's role as reported by the ledger: DLedger's own role type (the
/// broker's states are [`BrokerState`]).
pub use dledger_commitlog::core::Role as LedgerRole;

/// What the broker is right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerState {
    /// Before the first role callback: brokerId -1, writes refused by the ledger.
    Unassigned,
    /// brokerId = selfId number + 1; reads only; slave sync running.
    Slave,
    /// The ledger leads but the store is not caught up; still serving as a slave.
    CatchingUp { term: i64, since_ms: u64 },
    /// brokerId 0, SYNC_MASTER; writes accepted.
    Master { term: i64 },
}

/// Progress of the local log and dispatcher, sampled by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaterMarks {
    /// Last index in the local ledger (-1 when empty).
    pub ledger_end_index: i64,
    /// Last committed index (-1 when none).
    pub committed_index: i64,
    /// Data position just past the last committed entry.
    pub committed_pos: i64,
    /// Data position up to which committed entries were written to consume queues.
    pub dispatched_pos: i64,
}

impl WaterMarks {
    /// broker-roles.md §3 "LEADER wait loop": empty log, or everything committed and dispatched.
    pub fn caught_up(&self) -> bool {
        self.ledger_end_index == -1
            || (self.ledger_end_index == self.committed_index
                && self.dispatched_pos >= self.committed_pos)
    }
}

/// A decision for the controller to carry out, in the order returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleCommand {
    ChangeToSlave {
        term: i64,
        broker_id: i64,
    },
    ChangeToMaster {
        term: i64,
        waited_ms: u64,
    },
    /// Catch-up has taken longer than the configured bound; log loudly, keep waiting
    /// (the leader either commits its tail or loses leadership and steps down).
    CatchUpSlow {
        term: i64,
        waited_ms: u64,
        marks: WaterMarks,
    },
}

/// Drives [`BrokerState`] from ledger events.
#[derive(Debug)]
pub struct RoleMachine {
    slave_broker_id: i64,
    catch_up_warn_ms: u64,
    state: BrokerState,
    newest_term: i64,
    marks: WaterMarks,
    warned_in_term: Option<i64>,
}

impl RoleMachine {
    /// `slave_broker_id` is selfId's number + 1 (never 0); `catch_up_warn_ms` bounds a
    /// silent catch-up.
    pub fn new(slave_broker_id: i64, catch_up_warn_ms: u64) -> Self {
        Self {
            slave_broker_id: slave_broker_id.max(1),
            catch_up_warn_ms,
            state: BrokerState::Unassigned,
            newest_term: -1,
            marks: WaterMarks {
                ledger_end_index: -1,
                committed_index: -1,
                committed_pos: 0,
                dispatched_pos: 0,
            },
            warned_in_term: None,
        }
    }

    pub fn state(&self) -> BrokerState {
        self.state
    }

    /// The brokerId to register with: -1 before any role, 0 as master, selfId+1 otherwise.
    pub fn broker_id(&self) -> i64 {
        match self.state {
            BrokerState::Unassigned => -1,
            BrokerState::Master { .. } => 0,
            BrokerState::Slave | BrokerState::CatchingUp { .. } => self.slave_broker_id,
        }
    }

    pub fn is_master(&self) -> bool {
        matches!(self.state, BrokerState::Master { .. })
    }

    /// A ledger role change in `term`, with water marks sampled after the change (a
    /// snapshot from before it could predate entries received as a follower).
    pub fn on_role(
        &mut self,
        term: i64,
        role: LedgerRole,
        marks: WaterMarks,
        now_ms: u64,
    ) -> Vec<RoleCommand> {
        if term < self.newest_term {
            return Vec::new();
        }
        self.newest_term = term;
        self.marks = marks;
        match role {
            LedgerRole::Follower => self.become_slave(term),
            LedgerRole::Candidate => {
                if self.state == BrokerState::Slave {
                    Vec::new()
                } else {
                    self.become_slave(term)
                }
            }
            LedgerRole::Leader => match self.state {
                BrokerState::Master { term: t } | BrokerState::CatchingUp { term: t, .. }
                    if t == term =>
                {
                    Vec::new()
                }
                _ => {
                    let mut out = Vec::new();
                    if self.state == BrokerState::Unassigned
                        || matches!(self.state, BrokerState::Master { .. })
                    {
                        // A master of an older term must stop writing before catching up.
                        out.extend(self.become_slave(term));
                    }
                    self.state = BrokerState::CatchingUp {
                        term,
                        since_ms: now_ms,
                    };
                    out.extend(self.check_caught_up(now_ms));
                    out
                }
            },
        }
    }

    /// New water marks from the ledger or dispatcher.
    pub fn on_progress(&mut self, marks: WaterMarks, now_ms: u64) -> Vec<RoleCommand> {
        self.marks = marks;
        self.check_caught_up(now_ms)
    }

    fn become_slave(&mut self, term: i64) -> Vec<RoleCommand> {
        self.state = BrokerState::Slave;
        vec![RoleCommand::ChangeToSlave {
            term,
            broker_id: self.slave_broker_id,
        }]
    }

    fn check_caught_up(&mut self, now_ms: u64) -> Vec<RoleCommand> {
        let BrokerState::CatchingUp { term, since_ms } = self.state else {
            return Vec::new();
        };
        let waited_ms = now_ms.saturating_sub(since_ms);
        if self.marks.caught_up() {
            self.state = BrokerState::Master { term };
            return vec![RoleCommand::ChangeToMaster { term, waited_ms }];
        }
        if waited_ms >= self.catch_up_warn_ms && self.warned_in_term != Some(term) {
            self.warned_in_term = Some(term);
            return vec![RoleCommand::CatchUpSlow {
                term,
                waited_ms,
                marks: self.marks,
            }];
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: WaterMarks = WaterMarks {
        ledger_end_index: -1,
        committed_index: -1,
        committed_pos: 0,
        dispatched_pos: 0,
    };

    fn marks(end: i64, committed: i64, cpos: i64, dpos: i64) -> WaterMarks {
        WaterMarks {
            ledger_end_index: end,
            committed_index: committed,
            committed_pos: cpos,
            dispatched_pos: dpos,
        }
    }

    #[test]
    fn starts_unassigned_with_broker_id_minus_one() {
        let m = RoleMachine::new(2, 5_000);
        assert_eq!(m.state(), BrokerState::Unassigned);
        assert_eq!(m.broker_id(), -1);
    }

    #[test]
    fn follower_changes_to_slave_every_time() {
        let mut m = RoleMachine::new(2, 5_000);
        let slave = vec![RoleCommand::ChangeToSlave {
            term: 1,
            broker_id: 2,
        }];
        assert_eq!(m.on_role(1, LedgerRole::Follower, EMPTY, 0), slave);
        assert_eq!(m.on_role(1, LedgerRole::Follower, EMPTY, 1), slave);
        assert_eq!(m.broker_id(), 2);
    }

    #[test]
    fn candidate_changes_to_slave_only_when_not_slave() {
        let mut m = RoleMachine::new(3, 5_000);
        assert_eq!(
            m.on_role(1, LedgerRole::Candidate, EMPTY, 0),
            vec![RoleCommand::ChangeToSlave {
                term: 1,
                broker_id: 3
            }]
        );
        assert!(m.on_role(2, LedgerRole::Candidate, EMPTY, 1).is_empty());
        assert_eq!(m.state(), BrokerState::Slave);
    }

    #[test]
    fn leader_with_empty_log_becomes_master_at_once() {
        let mut m = RoleMachine::new(1, 5_000);
        let cmds = m.on_role(1, LedgerRole::Leader, EMPTY, 10);
        assert_eq!(
            cmds,
            vec![
                RoleCommand::ChangeToSlave {
                    term: 1,
                    broker_id: 1
                },
                RoleCommand::ChangeToMaster {
                    term: 1,
                    waited_ms: 0
                }
            ]
        );
        assert_eq!(m.broker_id(), 0);
        assert!(m.is_master());
    }

    #[test]
    fn leader_waits_until_committed_and_dispatched() {
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(1, LedgerRole::Follower, EMPTY, 0);
        m.on_progress(marks(9, 9, 900, 900), 0);
        // Sampled after the election: the no-op entry is appended, not yet committed.
        assert!(m
            .on_role(2, LedgerRole::Leader, marks(10, 9, 900, 900), 100)
            .is_empty());
        assert_eq!(
            m.state(),
            BrokerState::CatchingUp {
                term: 2,
                since_ms: 100
            }
        );
        assert_eq!(m.broker_id(), 1, "still a slave while catching up");
        assert!(m.on_progress(marks(10, 9, 900, 900), 150).is_empty());
        // Committed but not dispatched.
        assert!(m.on_progress(marks(10, 10, 948, 900), 180).is_empty());
        assert_eq!(
            m.on_progress(marks(10, 10, 948, 948), 250),
            vec![RoleCommand::ChangeToMaster {
                term: 2,
                waited_ms: 150
            }]
        );
        assert_eq!(m.broker_id(), 0);
        // Further progress changes nothing.
        assert!(m.on_progress(marks(11, 11, 996, 996), 300).is_empty());
    }

    #[test]
    fn repeated_leader_event_in_same_term_is_ignored() {
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(3, LedgerRole::Leader, EMPTY, 0);
        assert!(m.is_master());
        assert!(m.on_role(3, LedgerRole::Leader, EMPTY, 5).is_empty());
        assert!(m.is_master());
    }

    #[test]
    fn stale_term_events_are_ignored() {
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(5, LedgerRole::Leader, EMPTY, 0);
        assert!(m.on_role(4, LedgerRole::Follower, EMPTY, 1).is_empty());
        assert!(m.is_master());
    }

    #[test]
    fn master_steps_down_on_follower_or_candidate() {
        let mut m = RoleMachine::new(2, 5_000);
        m.on_role(1, LedgerRole::Leader, EMPTY, 0);
        assert_eq!(
            m.on_role(2, LedgerRole::Candidate, EMPTY, 1),
            vec![RoleCommand::ChangeToSlave {
                term: 2,
                broker_id: 2
            }]
        );
        m.on_role(3, LedgerRole::Leader, EMPTY, 2);
        assert_eq!(
            m.on_role(4, LedgerRole::Follower, EMPTY, 3),
            vec![RoleCommand::ChangeToSlave {
                term: 4,
                broker_id: 2
            }]
        );
    }

    #[test]
    fn leader_losing_leadership_while_catching_up_goes_back_to_slave() {
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(1, LedgerRole::Follower, EMPTY, 0);
        m.on_role(2, LedgerRole::Leader, marks(5, 3, 300, 300), 0);
        assert_eq!(
            m.on_role(3, LedgerRole::Follower, EMPTY, 10),
            vec![RoleCommand::ChangeToSlave {
                term: 3,
                broker_id: 1
            }]
        );
        // Catching up later in an old term never promotes.
        assert!(m.on_progress(marks(5, 5, 500, 500), 20).is_empty());
        assert_eq!(m.state(), BrokerState::Slave);
    }

    #[test]
    fn new_term_leadership_after_master_re_enters_catch_up() {
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(1, LedgerRole::Leader, EMPTY, 0);
        let cmds = m.on_role(2, LedgerRole::Leader, marks(3, 2, 200, 200), 2);
        assert_eq!(
            cmds,
            vec![RoleCommand::ChangeToSlave {
                term: 2,
                broker_id: 1
            }]
        );
        assert_eq!(
            m.on_progress(marks(3, 3, 300, 300), 7),
            vec![RoleCommand::ChangeToMaster {
                term: 2,
                waited_ms: 5
            }]
        );
    }

    #[test]
    fn slow_catch_up_is_reported_once_per_term() {
        let mut m = RoleMachine::new(1, 100);
        m.on_role(1, LedgerRole::Follower, EMPTY, 0);
        m.on_role(2, LedgerRole::Leader, marks(5, 3, 300, 300), 0);
        let slow = m.on_progress(marks(5, 3, 300, 300), 150);
        assert!(matches!(
            slow.as_slice(),
            [RoleCommand::CatchUpSlow {
                term: 2,
                waited_ms: 150,
                ..
            }]
        ));
        assert!(m.on_progress(marks(5, 4, 400, 300), 200).is_empty());
    }

    #[test]
    fn stale_caught_up_snapshot_cannot_promote() {
        // Caught up as a follower at index 9, then more entries arrived before the
        // election; the marks given with the LEADER event decide.
        let mut m = RoleMachine::new(1, 5_000);
        m.on_role(1, LedgerRole::Follower, EMPTY, 0);
        m.on_progress(marks(9, 9, 900, 900), 0);
        assert!(m
            .on_role(2, LedgerRole::Leader, marks(12, 9, 900, 900), 10)
            .is_empty());
        assert!(!m.is_master());
    }

    #[test]
    fn broker_id_is_never_zero_for_a_slave() {
        let mut m = RoleMachine::new(0, 5_000);
        m.on_role(1, LedgerRole::Follower, EMPTY, 0);
        assert_eq!(m.broker_id(), 1);
    }
}
