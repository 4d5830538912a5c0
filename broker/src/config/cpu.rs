//! How many worker threads the broker's async runtime gets (`runtimeWorkerThreads`, or a
//! policy from the cores and where the DLedger group's members run).

use super::BrokerConfig;

impl BrokerConfig {
    /// Worker threads the broker's runtime gets: `runtimeWorkerThreads`, or when it is 0
    /// one per core (at least two), or, for a DLedger group all on this host, the cores
    /// divided among its members (at least one each).
    pub fn worker_threads(&self) -> usize {
        if self.runtime_worker_threads > 0 {
            return self.runtime_worker_threads;
        }
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        match self.co_located_members() {
            Some(members) => (cores / members).max(1),
            None => cores.max(2),
        }
    }

    /// The number of members of this broker's DLedger group when all of them listen on a
    /// loopback address, so all run on this host and share its cores (three brokers with
    /// two workers each on two cores spent 34-38 us of CPU per message in broker_bench
    /// against 25 us with one each).
    fn co_located_members(&self) -> Option<usize> {
        let peers = &self.dleger_peers;
        let on_loopback = |addr: &str| {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        };
        (self.enable_dleger_commit_log
            && peers.len() > 1
            && peers.iter().all(|p| on_loopback(&p.addr)))
        .then_some(peers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_dledger_peers;

    #[test]
    fn runtime_worker_threads_default_to_one_per_core() {
        let d = BrokerConfig::default();
        assert_eq!(d.runtime_worker_threads, 0);
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        assert_eq!(d.worker_threads(), cores.max(2));
        let c = BrokerConfig::from_properties("runtimeWorkerThreads=1\n").unwrap();
        assert_eq!(c.worker_threads(), 1);
        assert!(c.extra.is_empty(), "a known key");
        let e = BrokerConfig::from_properties("runtimeWorkerThreads=-1\n").unwrap_err();
        assert!(e.to_string().contains("runtimeWorkerThreads"), "{e}");
    }

    #[test]
    fn a_group_on_one_host_shares_its_cores() {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let group = |peers: &str| {
            let mut c = BrokerConfig {
                enable_dleger_commit_log: true,
                ..Default::default()
            };
            c.dleger_peers = parse_dledger_peers(peers).unwrap();
            c
        };
        let local = group("n0-127.0.0.1:40911;n1-127.0.0.2:40912;n2-localhost:40913");
        assert_eq!(local.worker_threads(), (cores / 3).max(1));
        let v6 = group("n0-[::1]:40911;n1-[::1]:40912");
        assert_eq!(v6.worker_threads(), (cores / 2).max(1));
        // One member elsewhere: the members have hosts of their own.
        let spread = group("n0-127.0.0.1:40911;n1-10.0.0.2:40912;n2-127.0.0.1:40913");
        assert_eq!(spread.worker_threads(), cores.max(2));
        // A one-member group, or DLedger off: one per core.
        assert_eq!(group("n0-127.0.0.1:40911").worker_threads(), cores.max(2));
        let mut off = group("n0-127.0.0.1:40911;n1-127.0.0.1:40912");
        off.enable_dleger_commit_log = false;
        assert_eq!(off.worker_threads(), cores.max(2));
        // An explicit count always wins.
        let mut set = local.clone();
        set.runtime_worker_threads = 3;
        assert_eq!(set.worker_threads(), 3);
    }
}
