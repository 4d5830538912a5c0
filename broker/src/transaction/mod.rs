//! Transactional messages (message-format.md §5.2, remoting.md §11.2; master only).
//!
//! ```text
//! send TRAN_MSG=true ──► RMQ_SYS_TRANS_HALF_TOPIC q0   (send.rs: REAL_TOPIC/REAL_QID kept)
//! END_TRANSACTION 37 ──► [end]  commit: real message re-proposed (type COMMIT) + op record
//!                               rollback: op record only
//! op records ─────────► RMQ_SYS_TRANS_OP_HALF_TOPIC q0, tag "d", body = half queue offset
//! [check] every transactionCheckInterval: half messages without an op record, older than
//!         transactionTimeOut, are put back (TRANSACTION_CHECK_TIMES + 1) and the producer
//!         group is asked with CHECK_TRANSACTION_STATE 39 (oneway); after
//!         transactionCheckMax checks they go to TRANS_CHECK_MAX_TIME_TOPIC.
//! ```
//!
//! Progress of the check service is kept like Java: consumer offsets of the system group
//! [`SYS_TRANS_GROUP`] on the half and op topics, so it is persisted and synced to slaves
//! with the other consumer offsets and a new master resumes where the old one stopped.
//!
//! Invariant: the op record of a half message is written only after its commit message was
//! acknowledged, so a half message without an op record is either undecided or its commit
//! outcome is unknown (the check asks the producer again; duplicates, never losses).

pub mod check;
pub mod end;
pub mod op;

/// Consumer group under which the check service stores its half/op offsets (Java
/// `TransactionalMessageUtil.buildConsumerGroup()`).
pub const SYS_TRANS_GROUP: &str = "CID_RMQ_SYS_TRANS";
/// Tag of op records ("remove").
pub const REMOVE_TAG: &str = "d";
