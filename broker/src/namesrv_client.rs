//! Registration with the name servers (broker-roles.md §5, remoting.md §11.6).
//!
//! One task registers with every address of `namesrvAddr` (`;`-separated) every
//! `registerNameServerPeriod` and at once when woken through `BrokerContext::register_now`
//! (role change, topic created); a registration some name server did not accept is retried
//! after a short backoff (0.5 s, doubling, at most the period). The brokerId is whatever the controller applied last (-1
//! before any role, 0 as master, selfId number + 1 as slave). A response's `masterAddr` is
//! kept for slave synchronisation. On shutdown the broker unregisters from every name server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use remoting::body::RegisterBrokerBody;
use remoting::custom_headers::{
    RegisterBrokerRequestHeader, RegisterBrokerResponseHeader, UnregisterBrokerRequestHeader,
};
use remoting::{RemotingClient, RemotingCommand, RequestCode, ResponseCode};

use crate::context::BrokerContext;
use crate::message::masked_crc32;

/// Timeout of one registration call.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(3);
/// First retry delay after a registration that not every name server accepted; doubles per
/// failed attempt up to the registration period.
const RETRY_FIRST: Duration = Duration::from_millis(500);

/// The delay before the next registration: the period after a fully accepted one, else a
/// backoff from [`RETRY_FIRST`] doubling per consecutive failure, never above the period.
/// Why: the registration after a role change is the one that makes a new master reachable;
/// one lost to a name server timeout must not wait a whole period (30 s by default).
pub fn next_registration_delay(period: Duration, consecutive_failures: u32) -> Duration {
    if consecutive_failures == 0 {
        return period;
    }
    remoting::backoff_delay(RETRY_FIRST, period, consecutive_failures)
}

/// The name-server addresses of `namesrvAddr`.
pub async fn resolve_namesrv_addrs(list: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for a in list.split(';').map(str::trim).filter(|a| !a.is_empty()) {
        match tokio::net::lookup_host(a).await {
            Ok(mut it) => {
                if let Some(sa) = it.next() {
                    out.push(sa);
                }
            }
            Err(e) => tracing::warn!(addr = a, error = %e, "cannot resolve name server address"),
        }
    }
    out
}

/// Registers with and unregisters from the name servers.
pub struct NamesrvClient {
    ctx: Arc<BrokerContext>,
    client: RemotingClient,
    addrs: Vec<SocketAddr>,
}

impl NamesrvClient {
    /// A client for `addrs`.
    pub fn new(ctx: Arc<BrokerContext>, client: RemotingClient, addrs: Vec<SocketAddr>) -> Self {
        NamesrvClient { ctx, client, addrs }
    }

    fn register_request(&self) -> RemotingCommand {
        let c = &self.ctx.config;
        let mut wrapper = self.ctx.topics.snapshot();
        let broker_perm = c.broker_permission;
        // A broker without read or write permission advertises its topics without it.
        if broker_perm & 6 != 6 {
            for t in wrapper.topic_config_table.values_mut() {
                t.perm &= broker_perm;
            }
        }
        let body = RegisterBrokerBody {
            filter_server_list: Vec::new(),
            topic_config_serialize_wrapper: wrapper,
        };
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let header = RegisterBrokerRequestHeader {
            broker_name: c.broker_name.clone(),
            broker_addr: c.broker_addr(),
            cluster_name: c.broker_cluster_name.clone(),
            ha_server_addr: format!("{}:{}", c.broker_ip2, c.ha_listen_port()),
            broker_id: self.ctx.role.broker_id(),
            heartbeat_timeout_millis: None,
            enable_acting_master: None,
            compressed: Some(false),
            body_crc32: Some(masked_crc32(&bytes) as i32),
        };
        RemotingCommand::request(RequestCode::REGISTER_BROKER, &header).with_body(bytes)
    }

    /// Registers with every name server (two-way); returns how many accepted.
    pub async fn register_all(&self) -> usize {
        let req = self.register_request();
        let calls = self.addrs.iter().map(|a| {
            let req = req.clone();
            async move { (*a, self.client.invoke(*a, req, REGISTER_TIMEOUT).await) }
        });
        let mut ok = 0;
        for (addr, r) in futures_util::future::join_all(calls).await {
            match r {
                Ok(resp) if resp.response_code() == ResponseCode::SUCCESS => {
                    ok += 1;
                    if let Ok(h) = resp.decode_header::<RegisterBrokerResponseHeader>() {
                        let master = h.master_addr.filter(|m| !m.is_empty());
                        if self.ctx.role.broker_id() != 0 {
                            self.ctx.role.set_master_addr(master);
                        } else {
                            self.ctx.role.set_master_addr(None);
                        }
                    }
                }
                Ok(resp) => {
                    tracing::warn!(%addr, code = resp.code(), remark = ?resp.remark(), "name server refused registration")
                }
                Err(e) => tracing::warn!(%addr, error = %e, "registration failed"),
            }
        }
        tracing::debug!(
            ok,
            total = self.addrs.len(),
            broker_id = self.ctx.role.broker_id(),
            "registered with name servers"
        );
        ok
    }

    /// Unregisters from every name server.
    pub async fn unregister_all(&self) {
        let c = &self.ctx.config;
        let header = UnregisterBrokerRequestHeader {
            broker_name: c.broker_name.clone(),
            broker_addr: c.broker_addr(),
            cluster_name: c.broker_cluster_name.clone(),
            broker_id: self.ctx.role.broker_id(),
        };
        let req = RemotingCommand::request(RequestCode::UNREGISTER_BROKER, &header);
        let calls = self.addrs.iter().map(|a| {
            let req = req.clone();
            async move { (*a, self.client.invoke(*a, req, REGISTER_TIMEOUT).await) }
        });
        for (addr, r) in futures_util::future::join_all(calls).await {
            if let Err(e) = r {
                tracing::warn!(%addr, error = %e, "unregister failed");
            }
        }
    }

    /// The periodic loop: register every `period` and whenever woken, and sooner again
    /// after a registration some name server did not accept ([`next_registration_delay`]);
    /// ends at shutdown.
    pub async fn run(self: Arc<Self>, period: Duration) {
        let period = period.max(Duration::from_millis(100));
        let mut failures = 0u32;
        loop {
            let due = tokio::time::Instant::now() + next_registration_delay(period, failures);
            tokio::select! {
                _ = self.ctx.shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(due) => {
                    // Woken far past the due time: this process was stopped (SIGSTOP) or
                    // starved, and the role it would advertise may be stale — a paused master
                    // whose group elected another one meanwhile would overwrite the new
                    // master's id 0 at the name server, then drop it when it re-registers as a
                    // slave (MP-03). Let the ledger notice its lost lease first.
                    if due.elapsed() > Duration::from_secs(1) {
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
                // Java sends the registration that follows a role change oneway
                // (broker-roles.md §4) and only the periodic one two-way. Here every
                // registration is two-way on purpose: the same wake serves role changes and
                // topic creation, and a broker that just became a slave learns `masterAddr`
                // (which slave synchronisation needs, see `RoleView::master_addr`) only from
                // this answer; a oneway call would leave it without a master until the next
                // periodic registration (30 s by default). The name server handles both
                // forms identically, so the only cost is waiting for the answer.
                _ = self.ctx.register_now.notified() => {}
            }
            if self.ctx.shutdown.is_cancelled() {
                break;
            }
            let ok = self.register_all().await;
            failures = if ok < self.addrs.len() {
                failures.saturating_add(1)
            } else {
                0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_registrations_retry_sooner_with_a_bounded_backoff() {
        let period = Duration::from_secs(30);
        assert_eq!(next_registration_delay(period, 0), period);
        assert_eq!(
            next_registration_delay(period, 1),
            Duration::from_millis(500)
        );
        assert_eq!(next_registration_delay(period, 2), Duration::from_secs(1));
        assert_eq!(next_registration_delay(period, 4), Duration::from_secs(4));
        assert_eq!(next_registration_delay(period, 7), period);
        assert_eq!(next_registration_delay(period, u32::MAX), period);
        let short = Duration::from_millis(300);
        assert_eq!(next_registration_delay(short, 2), short);
    }
}
