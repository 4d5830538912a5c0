//! Broker-to-broker (spec §11.7) and admin (§11.8) headers.

use super::command_header;

command_header! {
    /// GET_ALL_TOPIC_CONFIG (21) request; 5.x paging fields, all absent on 4.x.
    pub struct GetAllTopicConfigRequestHeader {
        topic_seq: Option<i32> => opt "topicSeq",
        max_topic_num: Option<i32> => opt "maxTopicNum",
        /// DataVersion JSON text.
        data_version: Option<String> => opt "dataVersion",
    }
}

command_header! {
    /// GET_ALL_TOPIC_CONFIG response (5.x).
    pub struct GetAllTopicConfigResponseHeader {
        total_topic_num: Option<i32> => opt "totalTopicNum",
    }
}

command_header! {
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) request; 5.x paging fields.
    pub struct GetAllSubscriptionGroupRequestHeader {
        group_seq: Option<i32> => opt "groupSeq",
        max_group_num: Option<i32> => opt "maxGroupNum",
        data_version: Option<String> => opt "dataVersion",
    }
}

command_header! {
    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG response (5.x).
    pub struct GetAllSubscriptionGroupResponseHeader {
        total_group_num: Option<i32> => opt "totalGroupNum",
    }
}

command_header! {
    /// UPDATE_AND_CREATE_TOPIC (17) request.
    pub struct CreateTopicRequestHeader {
        topic: String => req "topic",
        default_topic: String => req "defaultTopic",
        read_queue_nums: i32 => req "readQueueNums",
        write_queue_nums: i32 => req "writeQueueNums",
        perm: i32 => req "perm",
        /// `SINGLE_TAG` / `MULTI_TAG`.
        topic_filter_type: String => req "topicFilterType",
        topic_sys_flag: Option<i32> => opt "topicSysFlag",
        order: bool => req "order",
        attributes: Option<String> => opt "attributes",
        force: Option<bool> => opt "force",
    }
}

command_header! {
    /// DELETE_TOPIC_IN_BROKER (215) / DELETE_TOPIC_IN_NAMESRV (216) request.
    pub struct DeleteTopicRequestHeader {
        topic: String => req "topic",
        cluster_name: Option<String> => opt "clusterName",
    }
}

command_header! {
    /// DELETE_SUBSCRIPTIONGROUP (207) request.
    pub struct DeleteSubscriptionGroupRequestHeader {
        group_name: String => req "groupName",
        clean_offset: Option<bool> => opt "cleanOffset",
    }
}
