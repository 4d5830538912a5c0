//! MessageQueue (spec §12.2): the (topic, broker, queue id) triple used in lock bodies,
//! offset tables and allocation.

use serde::{Deserialize, Serialize};

use super::lenient;

/// `{"brokerName":"b","queueId":0,"topic":"t"}`
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MessageQueue {
    pub broker_name: String,
    #[serde(deserialize_with = "lenient::int32")]
    pub queue_id: i32,
    pub topic: String,
}

impl MessageQueue {
    /// Builds a queue triple.
    pub fn new(topic: impl Into<String>, broker_name: impl Into<String>, queue_id: i32) -> Self {
        MessageQueue {
            broker_name: broker_name.into(),
            queue_id,
            topic: topic.into(),
        }
    }
}
