//! REGISTER_BROKER, UNREGISTER_BROKER and QUERY_DATA_VERSION bookkeeping.
//!
//! The rules that make DLedger failover work (broker-roles.md §5): a registration first
//! removes every *other* id of its group that points at the same address (a demoted leader
//! re-registering as id N drops its id-0 entry), then stores its own id; queue data comes from
//! the id-0 registration (or, for 5.x brokers, from the smallest id of the group).

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::{
    BrokerAddrKey, BrokerLiveInfo, BrokerRegistration, BrokerUnregistration, RegisterOutcome,
    RouteTable,
};
use crate::body::{BrokerData, DataVersion, QueueData, TopicConfig, MASTER_ID, PERM_WRITE};

impl RouteTable {
    /// Applies one broker registration at time `now_ms` and tells a slave where its master is.
    pub fn register_broker(&mut self, reg: BrokerRegistration, now_ms: u64) -> RegisterOutcome {
        let key = BrokerAddrKey {
            cluster: reg.cluster_name.clone(),
            addr: reg.broker_addr.clone(),
        };
        self.clusters
            .entry(reg.cluster_name.clone())
            .or_default()
            .insert(reg.broker_name.clone());

        let mut register_first = !self.brokers.contains_key(&reg.broker_name);
        let is_old_version_broker = reg.enable_acting_master.is_none();
        let broker = self
            .brokers
            .entry(reg.broker_name.clone())
            .or_insert_with(|| BrokerData {
                cluster: reg.cluster_name.clone(),
                broker_name: reg.broker_name.clone(),
                ..BrokerData::default()
            });
        broker.enable_acting_master = reg.enable_acting_master.unwrap_or(false);
        if reg.zone_name.is_some() {
            broker.zone_name.clone_from(&reg.zone_name);
        }

        // One address, one id: drop the entries a role change left behind.
        let mut old_ids = Vec::new();
        broker.broker_addrs.retain(|&id, addr| {
            let stale = id != reg.broker_id && *addr == reg.broker_addr;
            if stale {
                old_ids.push(id);
            }
            !stale
        });
        if !old_ids.is_empty() {
            info!(
                name = %reg.broker_name, addr = %reg.broker_addr, ?old_ids, new_id = reg.broker_id,
                "broker id changed"
            );
        }

        // A registration may not take an id from a broker with a newer state version
        // (controller-mode rule; DLedger brokers always send state version 0).
        if let Some(old_addr) = broker.broker_addrs.get(&reg.broker_id) {
            if *old_addr != reg.broker_addr {
                let old_key = BrokerAddrKey {
                    cluster: reg.cluster_name.clone(),
                    addr: old_addr.clone(),
                };
                if let Some(old_live) = self.live.get(&old_key) {
                    let old_state = old_live.data_version.state_version;
                    let new_state = reg.topics.data_version.state_version;
                    if old_state > new_state {
                        warn!(
                            broker = %reg.broker_addr, id = reg.broker_id, old_state, new_state,
                            "registration refused: id held by a broker with a newer state version"
                        );
                        self.live.remove(&key);
                        return RegisterOutcome::default();
                    }
                }
            }
        }

        let previous = broker
            .broker_addrs
            .insert(reg.broker_id, reg.broker_addr.clone());
        register_first |= previous.is_none();

        let is_master = reg.broker_id == MASTER_ID;
        let min_id = broker.broker_addrs.keys().next().copied();
        let is_prime_slave = !is_old_version_broker && !is_master && min_id == Some(reg.broker_id);
        let acting_master = broker.enable_acting_master;

        if is_master || is_prime_slave {
            self.apply_topic_configs(&reg, &key, register_first, is_prime_slave && acting_master);
        }

        let data_version = reg.topics.data_version.clone();
        let timeout_ms = reg
            .timeout_ms
            .unwrap_or(self.options.default_broker_timeout_ms);
        let previous_live = self.live.insert(
            key.clone(),
            BrokerLiveInfo {
                last_update_ms: now_ms,
                timeout_ms,
                data_version,
                connection: reg.connection,
                ha_server_addr: reg.ha_server_addr.clone(),
            },
        );
        if previous_live.is_none() {
            info!(
                cluster = %reg.cluster_name, name = %reg.broker_name, id = reg.broker_id,
                addr = %reg.broker_addr, "new broker registered"
            );
        }

        if reg.filter_servers.is_empty() {
            self.filter_servers.remove(&key);
        } else {
            self.filter_servers.insert(key, reg.filter_servers);
        }

        if is_master {
            return RegisterOutcome::default();
        }
        self.master_of(&reg.cluster_name, &reg.broker_name)
    }

    /// Address and HA address of the live id-0 broker of a group.
    fn master_of(&self, cluster: &str, broker_name: &str) -> RegisterOutcome {
        let Some(master_addr) = self
            .brokers
            .get(broker_name)
            .and_then(|b| b.broker_addrs.get(&MASTER_ID))
        else {
            return RegisterOutcome::default();
        };
        match self.live.get(&BrokerAddrKey {
            cluster: cluster.to_owned(),
            addr: master_addr.clone(),
        }) {
            Some(live) => RegisterOutcome {
                master_addr: Some(master_addr.clone()),
                ha_server_addr: Some(live.ha_server_addr.clone()),
            },
            None => RegisterOutcome::default(),
        }
    }

    /// Takes the registrant's topic configs into the topic queue table.
    fn apply_topic_configs(
        &mut self,
        reg: &BrokerRegistration,
        key: &BrokerAddrKey,
        register_first: bool,
        wipe_write_perm: bool,
    ) {
        let table = &reg.topics.topic_config_table;
        let has_static_topics = reg
            .topics
            .topic_queue_mapping_info_map
            .as_ref()
            .is_some_and(|m| m.as_object().is_some_and(|o| !o.is_empty()));
        if self.options.delete_topic_with_broker_registration && !has_static_topics {
            let stale: Vec<String> = self
                .topic_queues
                .iter()
                .filter(|(topic, queues)| {
                    queues.contains_key(&reg.broker_name) && !table.contains_key(*topic)
                })
                .map(|(topic, _)| topic.clone())
                .collect();
            for topic in stale {
                if let Some(queues) = self.topic_queues.get_mut(&topic) {
                    queues.remove(&reg.broker_name);
                    if queues.is_empty() {
                        self.topic_queues.remove(&topic);
                    }
                }
            }
        }
        let version_changed = self.is_broker_topic_config_changed(key, &reg.topics.data_version);
        for (name, config) in table {
            let missing = self
                .topic_queues
                .get(name)
                .map_or(true, |q| !q.contains_key(&reg.broker_name));
            if register_first || version_changed || missing {
                let mut perm = config.perm;
                if wipe_write_perm {
                    perm &= !PERM_WRITE;
                }
                self.update_queue_data(name, &reg.broker_name, config, perm);
            }
        }
    }

    fn update_queue_data(
        &mut self,
        topic: &str,
        broker_name: &str,
        config: &TopicConfig,
        perm: i32,
    ) {
        let queue = QueueData {
            broker_name: broker_name.to_owned(),
            perm,
            read_queue_nums: config.read_queue_nums,
            topic_sys_flag: config.topic_sys_flag,
            write_queue_nums: config.write_queue_nums,
        };
        let queues = self.topic_queues.entry(topic.to_owned()).or_default();
        match queues.get(broker_name) {
            Some(old) if *old == queue => {}
            Some(old) => {
                info!(%topic, old = ?old, new = ?queue, "topic queue data changed");
                queues.insert(broker_name.to_owned(), queue);
            }
            None => {
                info!(%topic, ?queue, "new topic registered");
                queues.insert(broker_name.to_owned(), queue);
            }
        }
    }

    /// True when `version` differs from what the broker at `key` last registered (or it is
    /// unknown).
    fn is_broker_topic_config_changed(&self, key: &BrokerAddrKey, version: &DataVersion) -> bool {
        self.live
            .get(key)
            .map_or(true, |live| live.data_version != *version)
    }

    /// QUERY_DATA_VERSION: whether the broker's topic configs changed since its last
    /// registration, plus the version the name server holds. Refreshes the broker's liveness.
    pub fn query_data_version(
        &mut self,
        cluster: &str,
        addr: &str,
        version: &DataVersion,
        now_ms: u64,
    ) -> (bool, Option<DataVersion>) {
        let key = BrokerAddrKey {
            cluster: cluster.to_owned(),
            addr: addr.to_owned(),
        };
        let changed = self.is_broker_topic_config_changed(&key, version);
        match self.live.get_mut(&key) {
            Some(live) => {
                live.last_update_ms = now_ms;
                (changed, Some(live.data_version.clone()))
            }
            None => (changed, None),
        }
    }

    /// Removes one broker process. Returns true when its whole group disappeared.
    pub fn unregister_broker(&mut self, req: &BrokerUnregistration) -> bool {
        let removed = self.unregister_one(req);
        let mut removed_names = BTreeSet::new();
        let mut reduced_names = BTreeSet::new();
        if removed {
            removed_names.insert(req.broker_name.clone());
        } else {
            reduced_names.insert(req.broker_name.clone());
        }
        self.clean_topics_after_unregister(&removed_names, &reduced_names);
        removed
    }

    /// Table edits of one unregistration, without the topic clean-up. True = group removed.
    pub(super) fn unregister_one(&mut self, req: &BrokerUnregistration) -> bool {
        let key = BrokerAddrKey {
            cluster: req.cluster_name.clone(),
            addr: req.broker_addr.clone(),
        };
        let was_live = self.live.remove(&key).is_some();
        self.filter_servers.remove(&key);
        info!(
            cluster = %req.cluster_name, name = %req.broker_name, id = req.broker_id,
            addr = %req.broker_addr, was_live, "broker unregistered"
        );
        let mut group_removed = false;
        if let Some(broker) = self.brokers.get_mut(&req.broker_name) {
            // Remove by address, not id: the id may already belong to another process.
            broker
                .broker_addrs
                .retain(|_, addr| *addr != req.broker_addr);
            if broker.broker_addrs.is_empty() {
                self.brokers.remove(&req.broker_name);
                group_removed = true;
            }
        }
        if group_removed {
            if let Some(names) = self.clusters.get_mut(&req.cluster_name) {
                names.remove(&req.broker_name);
                if names.is_empty() {
                    self.clusters.remove(&req.cluster_name);
                }
            }
        }
        group_removed
    }

    /// Drops queue data of removed groups; groups that lost their master while in
    /// acting-master mode become read-only.
    pub(super) fn clean_topics_after_unregister(
        &mut self,
        removed: &BTreeSet<String>,
        reduced: &BTreeSet<String>,
    ) {
        for name in removed {
            self.remove_topics_of_broker(name);
        }
        let masterless_acting: Vec<&String> = reduced
            .iter()
            .filter(|name| {
                self.brokers.get(*name).is_some_and(|b| {
                    b.enable_acting_master && !b.broker_addrs.contains_key(&MASTER_ID)
                })
            })
            .collect();
        if masterless_acting.is_empty() {
            return;
        }
        for queues in self.topic_queues.values_mut() {
            for name in &masterless_acting {
                if let Some(queue) = queues.get_mut(*name) {
                    queue.perm &= !PERM_WRITE;
                }
            }
        }
    }
}
