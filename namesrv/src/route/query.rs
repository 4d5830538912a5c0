//! Read-only views of the route table: topic routes, cluster info and topic lists.

use std::collections::{BTreeMap, BTreeSet};

use super::RouteTable;
use crate::body::{
    ClusterInfo, TopicList, TopicRouteData, TOPIC_SYS_FLAG_UNIT, TOPIC_SYS_FLAG_UNIT_SUB,
};

/// Which unit-topic list to build (codes 311, 312, 313).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitTopicFilter {
    /// Topics flagged as unit topics.
    Unit,
    /// Topics with a unit subscription.
    HasUnitSub,
    /// Non-unit topics with a unit subscription.
    HasUnitSubNotUnit,
}

impl RouteTable {
    /// Route of `topic`, or `None` when no live broker group serves it (TOPIC_NOT_EXIST).
    pub fn topic_route(&self, topic: &str) -> Option<TopicRouteData> {
        let queues = self.topic_queues.get(topic)?;
        let mut route = TopicRouteData {
            queue_datas: queues.values().cloned().collect(),
            ..TopicRouteData::default()
        };
        for name in queues.keys() {
            let Some(broker) = self.brokers.get(name) else {
                continue;
            };
            for addr in broker.broker_addrs.values() {
                let key = super::BrokerAddrKey {
                    cluster: broker.cluster.clone(),
                    addr: addr.clone(),
                };
                if let Some(list) = self.filter_servers.get(&key) {
                    route.filter_server_table.insert(addr.clone(), list.clone());
                }
            }
            route.broker_datas.push(broker.clone());
        }
        if route.broker_datas.is_empty() || route.queue_datas.is_empty() {
            return None;
        }
        Some(route)
    }

    /// Every broker group and every cluster (GET_BROKER_CLUSTER_INFO).
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.brokers.clone(),
            cluster_addr_table: self.clusters.clone(),
        }
    }

    /// Names of every routed topic.
    pub fn all_topics(&self) -> TopicList {
        TopicList {
            broker_addr: None,
            topic_list: self.topic_queues.keys().cloned().collect(),
        }
    }

    /// Topics served by at least one broker group of `cluster`.
    pub fn topics_by_cluster(&self, cluster: &str) -> TopicList {
        let Some(names) = self.clusters.get(cluster) else {
            return TopicList::default();
        };
        TopicList {
            broker_addr: None,
            topic_list: self
                .topic_queues
                .iter()
                .filter(|(_, queues)| queues.keys().any(|name| names.contains(name)))
                .map(|(topic, _)| topic.clone())
                .collect(),
        }
    }

    /// GET_SYSTEM_TOPIC_LIST_FROM_NS: every cluster name and broker name (each is a system
    /// topic in RocketMQ), plus the address of one registered broker.
    pub fn system_topics(&self) -> TopicList {
        let mut topics = BTreeSet::new();
        for (cluster, names) in &self.clusters {
            topics.insert(cluster.clone());
            topics.extend(names.iter().cloned());
        }
        let broker_addr = self
            .brokers
            .values()
            .find_map(|b| b.broker_addrs.values().next().cloned());
        TopicList {
            broker_addr,
            topic_list: topics,
        }
    }

    /// Topics selected by their `topicSysFlag` unit bits (first queue entry decides, as Java).
    pub fn unit_topics(&self, filter: UnitTopicFilter) -> TopicList {
        let topics = self
            .topic_queues
            .iter()
            .filter(|(_, queues)| {
                let flag = queues.values().next().map_or(0, |q| q.topic_sys_flag);
                let unit = flag & TOPIC_SYS_FLAG_UNIT != 0;
                let unit_sub = flag & TOPIC_SYS_FLAG_UNIT_SUB != 0;
                match filter {
                    UnitTopicFilter::Unit => unit,
                    UnitTopicFilter::HasUnitSub => unit_sub,
                    UnitTopicFilter::HasUnitSubNotUnit => !unit && unit_sub,
                }
            })
            .map(|(topic, _)| topic.clone())
            .collect();
        TopicList {
            broker_addr: None,
            topic_list: topics,
        }
    }

    /// Broker id -> address map of one group (tests and diagnostics).
    pub fn broker_addrs(&self, broker_name: &str) -> Option<&BTreeMap<i64, String>> {
        self.brokers.get(broker_name).map(|b| &b.broker_addrs)
    }

    /// Number of routed topics.
    pub fn topic_count(&self) -> usize {
        self.topic_queues.len()
    }
}
