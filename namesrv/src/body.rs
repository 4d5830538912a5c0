//! JSON bodies the name server reads and writes (spec remoting.md §12.1, §12.4, §11.6).
//!
//! The structs live in `remoting::body`, shared with the broker and the tools: readers are
//! fastjson-tolerant (unquoted numeric keys, unknown members ignored, missing members
//! defaulted), writers emit compact standard JSON with sorted, quoted keys (quirk Q7). This
//! module re-exports what the name server uses and adds the topic sys-flag bits.

pub use remoting::body::{
    from_json, to_json, BrokerData, ClusterInfo, DataVersion, KvTable, QueueData,
    RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, TopicList, TopicRouteData,
    MASTER_ID, PERM_READ, PERM_WRITE,
};

/// `topicSysFlag` bit 0: unit topic.
pub const TOPIC_SYS_FLAG_UNIT: i32 = 1;
/// `topicSysFlag` bit 1: topic has a unit subscription.
pub const TOPIC_SYS_FLAG_UNIT_SUB: i32 = 2;
