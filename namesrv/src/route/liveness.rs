//! Broker liveness: a broker is removed when its connection closes or when it has not
//! registered within its timeout (120 s by default; the server scans every few seconds).

use std::collections::BTreeSet;

use tracing::warn;

use super::{BrokerAddrKey, BrokerUnregistration, ConnectionId, RouteTable};

/// A broker dropped by [`RouteTable::expire_brokers`], with the connection it last used so the
/// server can close it (as Java does).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredBroker {
    pub key: BrokerAddrKey,
    pub connection: Option<ConnectionId>,
}

impl RouteTable {
    /// True when [`RouteTable::expire_brokers`] would remove something at `now_ms`.
    pub fn any_expired(&self, now_ms: u64) -> bool {
        self.live
            .values()
            .any(|live| live.last_update_ms.saturating_add(live.timeout_ms) < now_ms)
    }

    /// True when some broker last registered through `connection`.
    pub fn has_connection(&self, connection: ConnectionId) -> bool {
        self.live
            .values()
            .any(|live| live.connection == Some(connection))
    }

    /// Removes every broker whose last registration is older than its timeout at `now_ms`.
    pub fn expire_brokers(&mut self, now_ms: u64) -> Vec<ExpiredBroker> {
        let expired: Vec<ExpiredBroker> = self
            .live
            .iter()
            .filter(|(_, live)| live.last_update_ms.saturating_add(live.timeout_ms) < now_ms)
            .map(|(key, live)| ExpiredBroker {
                key: key.clone(),
                connection: live.connection,
            })
            .collect();
        for broker in &expired {
            warn!(
                cluster = %broker.key.cluster, addr = %broker.key.addr,
                "broker expired: no registration within its timeout"
            );
        }
        let keys: Vec<BrokerAddrKey> = expired.iter().map(|e| e.key.clone()).collect();
        self.remove_brokers(&keys);
        expired
    }

    /// Removes every broker that registered through `connection` (the connection closed).
    /// Returns the removed brokers.
    pub fn connection_closed(&mut self, connection: ConnectionId) -> Vec<BrokerAddrKey> {
        let keys: Vec<BrokerAddrKey> = self
            .live
            .iter()
            .filter(|(_, live)| live.connection == Some(connection))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &keys {
            warn!(cluster = %key.cluster, addr = %key.addr, "broker connection closed");
        }
        self.remove_brokers(&keys);
        keys
    }

    /// Unregisters brokers known only by cluster and address.
    fn remove_brokers(&mut self, keys: &[BrokerAddrKey]) {
        let mut removed = BTreeSet::new();
        let mut reduced = BTreeSet::new();
        for key in keys {
            let requests = self.unregistrations_for(key);
            if requests.is_empty() {
                // Registered as nothing routable any more: only the liveness record is left.
                self.live.remove(key);
                self.filter_servers.remove(key);
            }
            for req in requests {
                if self.unregister_one(&req) {
                    reduced.remove(&req.broker_name);
                    removed.insert(req.broker_name);
                } else if !removed.contains(&req.broker_name) {
                    reduced.insert(req.broker_name);
                }
            }
        }
        self.clean_topics_after_unregister(&removed, &reduced);
    }

    /// The (name, id) entries that point at `key`'s address within its cluster.
    fn unregistrations_for(&self, key: &BrokerAddrKey) -> Vec<BrokerUnregistration> {
        self.brokers
            .values()
            .filter(|b| b.cluster == key.cluster)
            .flat_map(|b| {
                b.broker_addrs
                    .iter()
                    .filter(|(_, addr)| **addr == key.addr)
                    .map(|(&id, _)| BrokerUnregistration {
                        cluster_name: key.cluster.clone(),
                        broker_addr: key.addr.clone(),
                        broker_name: b.broker_name.clone(),
                        broker_id: id,
                    })
            })
            .collect()
    }
}
