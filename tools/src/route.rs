//! Message queues and how a route turns into the queues a producer writes and a consumer
//! reads (remoting.md §12.1: writes go to id 0 only; reads prefer id 0).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::body::{TopicRouteData, PERM_READ, PERM_WRITE};

/// One queue of a topic on one broker group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueue {
    pub topic: String,
    pub broker_name: String,
    pub queue_id: i32,
}

impl fmt::Display for MessageQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}#{}", self.topic, self.broker_name, self.queue_id)
    }
}

/// Queues a producer may write: write queues of writable broker groups that have a master.
/// `cap` limits the count per group (Java uses min(4, n) for a TBW102-derived route).
pub fn publish_queues(topic: &str, route: &TopicRouteData, cap: Option<i32>) -> Vec<MessageQueue> {
    let mut out = Vec::new();
    let mut datas: Vec<_> = route.queue_datas.iter().collect();
    datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    for q in datas {
        if q.perm & PERM_WRITE == 0 {
            continue;
        }
        let has_master = route
            .broker(&q.broker_name)
            .and_then(|b| b.master_addr())
            .is_some();
        if !has_master {
            continue;
        }
        let n = cap.map_or(q.write_queue_nums, |c| c.min(q.write_queue_nums));
        for queue_id in 0..n.max(0) {
            out.push(MessageQueue {
                topic: topic.to_owned(),
                broker_name: q.broker_name.clone(),
                queue_id,
            });
        }
    }
    out
}

/// Queues a consumer reads: read queues of readable broker groups with any address.
pub fn subscribe_queues(topic: &str, route: &TopicRouteData) -> Vec<MessageQueue> {
    let mut out = Vec::new();
    let mut datas: Vec<_> = route.queue_datas.iter().collect();
    datas.sort_by(|a, b| a.broker_name.cmp(&b.broker_name));
    for q in datas {
        if q.perm & PERM_READ == 0 {
            continue;
        }
        for queue_id in 0..q.read_queue_nums.max(0) {
            out.push(MessageQueue {
                topic: topic.to_owned(),
                broker_name: q.broker_name.clone(),
                queue_id,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{BrokerData, QueueData};

    fn route(master: bool) -> TopicRouteData {
        let mut addrs = std::collections::BTreeMap::new();
        if master {
            addrs.insert(0, "127.0.0.1:1".to_owned());
        }
        addrs.insert(2, "127.0.0.1:2".to_owned());
        TopicRouteData {
            order_topic_conf: None,
            queue_datas: vec![
                QueueData {
                    broker_name: "b".into(),
                    read_queue_nums: 3,
                    write_queue_nums: 2,
                    perm: 6,
                    topic_sys_flag: 0,
                },
                QueueData {
                    broker_name: "a".into(),
                    read_queue_nums: 1,
                    write_queue_nums: 1,
                    perm: 4,
                    topic_sys_flag: 0,
                },
            ],
            broker_datas: vec![BrokerData {
                cluster: "c".into(),
                broker_name: "b".into(),
                broker_addrs: addrs,
            }],
        }
    }

    #[test]
    fn writes_need_a_master_and_the_write_bit() {
        let q = publish_queues("T", &route(true), None);
        assert_eq!(q.len(), 2);
        assert!(q.iter().all(|m| m.broker_name == "b"));
        assert_eq!(publish_queues("T", &route(true), Some(1)).len(), 1);
        assert!(publish_queues("T", &route(false), None).is_empty());
        let r = subscribe_queues("T", &route(false));
        assert_eq!(r.len(), 4);
        assert_eq!(r[0].broker_name, "a");
    }
}
