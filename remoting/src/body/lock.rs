//! LOCK_BATCH_MQ / UNLOCK_BATCH_MQ bodies (spec §11.4).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{lenient, MessageQueue};

/// Request body of LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LockBatchRequestBody {
    pub client_id: String,
    pub consumer_group: String,
    pub mq_set: BTreeSet<MessageQueue>,
    #[serde(deserialize_with = "lenient::java_bool")]
    pub only_this_broker: bool,
}

/// UNLOCK_BATCH_MQ uses the same body as LOCK_BATCH_MQ.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// Response body of LOCK_BATCH_MQ.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LockBatchResponseBody {
    #[serde(rename = "lockOKMQSet")]
    pub lock_ok_mq_set: BTreeSet<MessageQueue>,
}
