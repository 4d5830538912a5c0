//! A minimal async RocketMQ client on `remoting`, and the `mqadmin` / `mqbench` tools.
//!
//! # Layers
//!
//! ```text
//!  bin/mqadmin  bin/mqbench            command lines, output formatting (table, stats)
//!        \        /
//!  producer   consumer   admin         send with retry | pull + offsets | admin + DLedger view
//!        \       |       /
//!          client                      remoting client, name servers, route cache (+ refresh)
//!        /   |    \
//!  route   body   record / message / msg_id / dledger      pure: queues, JSON bodies,
//!                                                           stored records, ids, DLedger JSON
//!                         |                     |
//!              broker::message        dledger_commitlog::core::messages
//!   (record/batch/msg_id/property codecs)   (DLedger bodies and codes)
//! ```
//!
//! # Invariants
//!
//! * Decoders (records, JSON bodies) never panic on any input; lengths are checked before
//!   slicing.
//! * Writes go only to a group's id-0 address; a failed send invalidates the cached route so
//!   the next attempt asks the name server again (rate-limited).
//! * A send failure is reported `definite` only if no attempt can have stored the message.
//! * No std lock is held across an `.await`.

pub mod admin;
pub mod body;
pub mod client;
pub mod consumer;
pub mod dledger;
pub mod error;
pub mod message;
pub mod msg_id;
pub mod producer;
pub mod record;
pub mod route;
pub mod stats;
pub mod table;

pub use admin::{Admin, GroupStatus, MemberStatus, TopicSpec};
pub use client::{parse_addr, parse_addr_list, ClientOptions, MqClient};
pub use consumer::{PullConsumer, PullResult, PullStatus, TagFilter};
pub use error::ClientError;
pub use message::Message;
pub use producer::{Producer, ProducerOptions, SendError, SendResult, SendStatus};
pub use record::MessageExt;
pub use route::MessageQueue;
