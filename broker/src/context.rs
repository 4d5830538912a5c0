//! `BrokerContext`: everything a request processor needs, shared behind one `Arc`: the
//! config, the store, the metadata tables, the client tables, the role the controller last
//! applied, and the hooks processors use to ask for an immediate re-registration.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::clients::{ClientRegistry, QueueLocks};
use crate::config::BrokerConfig;
use crate::message::UniqKeyGenerator;
use crate::store::message_store::MessageStore;
use crate::store::{ConsumerOffsetTable, DelayOffsetTable, SubscriptionGroupTable, TopicTable};

/// The role as processors see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServingRole {
    /// Before the first ledger role: sends are passed to the ledger, which refuses them.
    Unassigned,
    /// Follower/candidate or catching up: sends refused with SERVICE_NOT_AVAILABLE.
    Slave,
    /// brokerId 0: sends accepted.
    Master,
}

/// The applied role, readable without locks.
#[derive(Debug)]
pub struct RoleView {
    role: AtomicU8,
    broker_id: AtomicI64,
    master_addr: Mutex<Option<String>>,
}

impl Default for RoleView {
    fn default() -> Self {
        RoleView {
            role: AtomicU8::new(0),
            broker_id: AtomicI64::new(-1),
            master_addr: Mutex::new(None),
        }
    }
}

impl RoleView {
    /// Current role.
    pub fn role(&self) -> ServingRole {
        match self.role.load(Ordering::Acquire) {
            2 => ServingRole::Master,
            1 => ServingRole::Slave,
            _ => ServingRole::Unassigned,
        }
    }

    /// brokerId to register with.
    pub fn broker_id(&self) -> i64 {
        self.broker_id.load(Ordering::Acquire)
    }

    /// Applies a role (controller only).
    pub fn set(&self, role: ServingRole, broker_id: i64) {
        self.broker_id.store(broker_id, Ordering::Release);
        let v = match role {
            ServingRole::Unassigned => 0,
            ServingRole::Slave => 1,
            ServingRole::Master => 2,
        };
        self.role.store(v, Ordering::Release);
    }

    /// Master address learned from the last two-way registration (slave sync uses it).
    pub fn master_addr(&self) -> Option<String> {
        self.master_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Stores the master address from a REGISTER_BROKER response.
    pub fn set_master_addr(&self, addr: Option<String>) {
        *self
            .master_addr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = addr;
    }
}

/// Shared state of one broker process.
pub struct BrokerContext {
    pub config: BrokerConfig,
    pub store: Arc<MessageStore>,
    pub topics: Arc<TopicTable>,
    pub offsets: Arc<ConsumerOffsetTable>,
    pub subscriptions: Arc<SubscriptionGroupTable>,
    pub delay_offsets: Arc<DelayOffsetTable>,
    pub clients: ClientRegistry,
    pub queue_locks: QueueLocks,
    pub role: RoleView,
    pub uniq_keys: UniqKeyGenerator,
    /// `brokerIP1:listenPort`.
    pub store_host: SocketAddr,
    /// Wakes the registration task for an immediate (re-)registration.
    pub register_now: Notify,
    /// Cancelled at shutdown: long polls answer at once.
    pub shutdown: CancellationToken,
    /// Wakes and follows the consumer-offset flusher (offsets reach the log through it).
    pub offset_flush: Arc<crate::metadata::OffsetFlushSignal>,
}

impl BrokerContext {
    /// Makes sure `topic` has a config on this broker before the broker itself writes into it
    /// (delayed delivery, transaction commit), so consumers can pull it. The config may be
    /// missing on a new master when the topic was created only on the old one and slave sync
    /// had not copied it before the failover. A new config is registered at once.
    pub fn ensure_topic(&self, topic: &str, queue_id: i32) -> Result<(), crate::store::StoreError> {
        if self.topics.get(topic).is_some() {
            return Ok(());
        }
        let queues = self.config.default_topic_queue_nums.max(queue_id + 1);
        let rw = crate::store::topics::perm::READ | crate::store::topics::perm::WRITE;
        self.topics.create_if_absent(topic, queues, rw)?;
        tracing::info!(topic, queues, "created a topic the broker writes into");
        self.register_now.notify_one();
        Ok(())
    }

    /// Opens the metadata tables under `storePathRootDir` around an opened store.
    pub fn open(
        config: BrokerConfig,
        store: Arc<MessageStore>,
    ) -> Result<Arc<BrokerContext>, crate::store::StoreError> {
        let meta = store.metadata();
        let topics = Arc::clone(&meta.topics);
        let offsets = Arc::clone(&meta.offsets);
        let subscriptions = Arc::clone(&meta.subscriptions);
        let delay_offsets = Arc::clone(store.delay_offsets());
        let store_host = store.store_host;
        let uniq_keys = UniqKeyGenerator::new(store_host.ip(), std::process::id(), {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            t as i32
        });
        Ok(Arc::new(BrokerContext {
            config,
            store,
            topics,
            offsets,
            subscriptions,
            delay_offsets,
            clients: ClientRegistry::new(),
            queue_locks: QueueLocks::default(),
            role: RoleView::default(),
            uniq_keys,
            store_host,
            register_now: Notify::new(),
            shutdown: CancellationToken::new(),
            offset_flush: Arc::default(),
        }))
    }

    /// Persists the metadata tables (periodic and at shutdown).
    pub fn persist(&self) {
        if let Err(e) = self.store.metadata().persist() {
            tracing::warn!(error = %e, "persisting the metadata tables failed");
        }
        if let Err(e) = self.delay_offsets.persist() {
            tracing::warn!(error = %e, "persisting delay offsets failed");
        }
        if let Err(e) = self.store.flush() {
            tracing::warn!(error = %e, "flushing consume queues failed");
        }
    }
}

/// Wall clock in ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
