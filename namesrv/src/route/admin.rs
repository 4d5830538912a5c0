//! Admin edits of topic routes: delete a topic, register a topic, wipe or restore write
//! permission of a broker group.

use super::RouteTable;
use crate::body::{QueueData, PERM_READ, PERM_WRITE};

/// Direction of a broker write-permission change (codes 205 and 327).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritePermChange {
    /// Clear the write bit (WIPE_WRITE_PERM_OF_BROKER).
    Wipe,
    /// Set read + write (ADD_WRITE_PERM_OF_BROKER).
    Add,
}

/// REGISTER_TOPIC_IN_NAMESRV named a broker group the name server does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic {topic} names unknown broker {broker_name}")]
pub struct UnknownBroker {
    pub topic: String,
    pub broker_name: String,
}

impl RouteTable {
    /// Removes `topic` everywhere, or only from the groups of `cluster` when given.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        let Some(cluster) = cluster else {
            self.topic_queues.remove(topic);
            return;
        };
        let (Some(names), Some(queues)) =
            (self.clusters.get(cluster), self.topic_queues.get_mut(topic))
        else {
            return;
        };
        for name in names {
            queues.remove(name);
        }
        if queues.is_empty() {
            self.topic_queues.remove(topic);
        }
    }

    /// Sets `topic`'s queue data for the listed groups (5.x single-topic registration). Nothing
    /// changes if any group is unknown.
    pub fn register_topic(
        &mut self,
        topic: &str,
        queue_datas: Vec<QueueData>,
    ) -> Result<(), UnknownBroker> {
        if let Some(bad) = queue_datas
            .iter()
            .find(|q| !self.brokers.contains_key(&q.broker_name))
        {
            return Err(UnknownBroker {
                topic: topic.to_owned(),
                broker_name: bad.broker_name.clone(),
            });
        }
        if queue_datas.is_empty() {
            return Ok(());
        }
        let queues = self.topic_queues.entry(topic.to_owned()).or_default();
        for queue in queue_datas {
            queues.insert(queue.broker_name.clone(), queue);
        }
        Ok(())
    }

    /// Changes the write permission of every topic served by `broker_name`; returns how many
    /// topics it touched.
    pub fn change_write_perm(&mut self, broker_name: &str, change: WritePermChange) -> usize {
        let mut count = 0;
        for queues in self.topic_queues.values_mut() {
            if let Some(queue) = queues.get_mut(broker_name) {
                queue.perm = match change {
                    WritePermChange::Wipe => queue.perm & !PERM_WRITE,
                    WritePermChange::Add => PERM_READ | PERM_WRITE,
                };
                count += 1;
            }
        }
        count
    }
}
