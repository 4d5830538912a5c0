//! Name server headers: broker registration, route query, KV config, data version.

use super::command_header;

command_header! {
    /// REGISTER_BROKER (103) request.
    pub struct RegisterBrokerRequestHeader {
        broker_name: String => req "brokerName",
        /// `brokerIP1:listenPort`.
        broker_addr: String => req "brokerAddr",
        cluster_name: String => req "clusterName",
        ha_server_addr: String => req "haServerAddr",
        /// 0 = master; may be -1 for a DLedger broker without role yet (Q12).
        broker_id: i64 => req "brokerId",
        heartbeat_timeout_millis: Option<i64> => opt "heartbeatTimeoutMillis",
        enable_acting_master: Option<bool> => opt "enableActingMaster",
        compressed: Option<bool> => opt "compressed",
        /// Masked CRC32 of the body; 0 = not checked.
        body_crc32: Option<i32> => opt "bodyCrc32",
    }
}

command_header! {
    /// REGISTER_BROKER response.
    pub struct RegisterBrokerResponseHeader {
        ha_server_addr: Option<String> => opt "haServerAddr",
        master_addr: Option<String> => opt "masterAddr",
    }
}

command_header! {
    /// UNREGISTER_BROKER (104) request.
    pub struct UnregisterBrokerRequestHeader {
        broker_name: String => req "brokerName",
        broker_addr: String => req "brokerAddr",
        cluster_name: String => req "clusterName",
        broker_id: i64 => req "brokerId",
    }
}

command_header! {
    /// GET_ROUTEINFO_BY_TOPIC (105) request.
    pub struct GetRouteInfoRequestHeader {
        topic: String => req "topic",
        accept_standard_json_only: Option<bool> => opt "acceptStandardJsonOnly",
    }
}

command_header! {
    /// QUERY_DATA_VERSION (322) request (body: DataVersion JSON).
    pub struct QueryDataVersionRequestHeader {
        broker_name: String => req "brokerName",
        broker_addr: String => req "brokerAddr",
        cluster_name: String => req "clusterName",
        broker_id: i64 => req "brokerId",
    }
}

command_header! {
    /// QUERY_DATA_VERSION response.
    pub struct QueryDataVersionResponseHeader {
        changed: Option<bool> => opt "changed",
    }
}

command_header! {
    /// GET_KV_CONFIG (101) / DELETE_KV_CONFIG (102) request.
    pub struct GetKvConfigRequestHeader {
        namespace: String => req "namespace",
        key: String => req "key",
    }
}

command_header! {
    /// GET_KV_CONFIG response.
    pub struct GetKvConfigResponseHeader {
        value: Option<String> => opt "value",
    }
}

command_header! {
    /// PUT_KV_CONFIG (100) request.
    pub struct PutKvConfigRequestHeader {
        namespace: String => req "namespace",
        key: String => req "key",
        value: String => req "value",
    }
}

command_header! {
    /// WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) request.
    pub struct BrokerPermRequestHeader {
        broker_name: String => req "brokerName",
    }
}

command_header! {
    /// GET_TOPICS_BY_CLUSTER (224) request.
    pub struct GetTopicsByClusterRequestHeader {
        cluster: String => req "cluster",
    }
}
