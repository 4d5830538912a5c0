//! ClusterInfo (GET_BROKER_CLUSTER_INFO body, spec §11.6).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::BrokerData;

/// Brokers by name and broker names by cluster.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterInfo {
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    pub cluster_addr_table: BTreeMap<String, BTreeSet<String>>,
}
