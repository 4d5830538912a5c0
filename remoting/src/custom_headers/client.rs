//! Client registration and consumer-group headers: heartbeat response, unregister,
//! consumer list, NOTIFY_CONSUMER_IDS_CHANGED, CONSUMER_SEND_MSG_BACK.
//! (HEART_BEAT, LOCK_BATCH_MQ and UNLOCK_BATCH_MQ have no header: use `()`.)

use super::command_header;

command_header! {
    /// HEART_BEAT response extras sent by 5.x brokers.
    pub struct HeartbeatResponseHeader {
        is_support_heart_beat_v2: Option<bool> => opt "IS_SUPPORT_HEART_BEAT_V2",
        is_sub_change: Option<bool> => opt "IS_SUB_CHANGE",
    }
}

command_header! {
    /// UNREGISTER_CLIENT (35) request.
    pub struct UnregisterClientRequestHeader {
        client_id: String => req "clientID",
        producer_group: Option<String> => opt "producerGroup",
        consumer_group: Option<String> => opt "consumerGroup",
    }
}

command_header! {
    /// GET_CONSUMER_LIST_BY_GROUP (38) request.
    pub struct GetConsumerListByGroupRequestHeader {
        consumer_group: String => req "consumerGroup",
    }
}

command_header! {
    /// NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> client, oneway.
    pub struct NotifyConsumerIdsChangedRequestHeader {
        consumer_group: String => req "consumerGroup",
    }
}

command_header! {
    /// CONSUMER_SEND_MSG_BACK (36) request.
    pub struct ConsumerSendMsgBackRequestHeader {
        /// Commit-log (physical) offset of the consumed message.
        offset: i64 => req "offset",
        group: String => req "group",
        /// 0: broker decides; negative: straight to DLQ.
        delay_level: i32 => req "delayLevel",
        origin_msg_id: Option<String> => opt "originMsgId",
        origin_topic: Option<String> => opt "originTopic",
        unit_mode: Option<bool> => opt "unitMode",
        max_reconsume_times: Option<i32> => opt "maxReconsumeTimes",
        broker_name: Option<String> => opt "bname",
    }
}
