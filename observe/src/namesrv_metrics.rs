//! Metrics of the name server: requests by class (and how many failed), route-query results,
//! broker registrations, live brokers. The processor reports each answered request with one
//! call; the live-broker gauge is refreshed by a scrape-time sampler reading the route table.

use remoting::code::{RequestCode, ResponseCode};

use crate::exposition::{Desc, Exposition};
use crate::family::Family;
use crate::metric::{Counter, Gauge};
use crate::registry::Collect;

/// What a name-server request is for (the `class` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamesrvRequestClass {
    Register,
    Unregister,
    RouteQuery,
    ClusterInfo,
    DataVersion,
    KvConfig,
    TopicList,
    Admin,
    Other,
}

impl NamesrvRequestClass {
    /// Every class, in label order.
    pub const ALL: [NamesrvRequestClass; 9] = [
        NamesrvRequestClass::Register,
        NamesrvRequestClass::Unregister,
        NamesrvRequestClass::RouteQuery,
        NamesrvRequestClass::ClusterInfo,
        NamesrvRequestClass::DataVersion,
        NamesrvRequestClass::KvConfig,
        NamesrvRequestClass::TopicList,
        NamesrvRequestClass::Admin,
        NamesrvRequestClass::Other,
    ];

    /// The `class` label value.
    pub fn label(self) -> &'static str {
        match self {
            NamesrvRequestClass::Register => "register",
            NamesrvRequestClass::Unregister => "unregister",
            NamesrvRequestClass::RouteQuery => "route_query",
            NamesrvRequestClass::ClusterInfo => "cluster_info",
            NamesrvRequestClass::DataVersion => "data_version",
            NamesrvRequestClass::KvConfig => "kv_config",
            NamesrvRequestClass::TopicList => "topic_list",
            NamesrvRequestClass::Admin => "admin",
            NamesrvRequestClass::Other => "other",
        }
    }

    /// The class of a request code; codes the name server does not serve are `Other`.
    pub fn of(code: RequestCode) -> Self {
        match code {
            RequestCode::REGISTER_BROKER => NamesrvRequestClass::Register,
            RequestCode::UNREGISTER_BROKER => NamesrvRequestClass::Unregister,
            RequestCode::GET_ROUTEINFO_BY_TOPIC => NamesrvRequestClass::RouteQuery,
            RequestCode::GET_BROKER_CLUSTER_INFO => NamesrvRequestClass::ClusterInfo,
            RequestCode::QUERY_DATA_VERSION => NamesrvRequestClass::DataVersion,
            RequestCode::PUT_KV_CONFIG
            | RequestCode::GET_KV_CONFIG
            | RequestCode::DELETE_KV_CONFIG
            | RequestCode::GET_KVLIST_BY_NAMESPACE => NamesrvRequestClass::KvConfig,
            RequestCode::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
            | RequestCode::GET_TOPICS_BY_CLUSTER
            | RequestCode::GET_SYSTEM_TOPIC_LIST_FROM_NS
            | RequestCode::GET_UNIT_TOPIC_LIST
            | RequestCode::GET_HAS_UNIT_SUB_TOPIC_LIST
            | RequestCode::GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST => NamesrvRequestClass::TopicList,
            RequestCode::DELETE_TOPIC_IN_NAMESRV
            | RequestCode::REGISTER_TOPIC_IN_NAMESRV
            | RequestCode::WIPE_WRITE_PERM_OF_BROKER
            | RequestCode::ADD_WRITE_PERM_OF_BROKER
            | RequestCode::GET_NAMESRV_CONFIG
            | RequestCode::UPDATE_NAMESRV_CONFIG => NamesrvRequestClass::Admin,
            _ => NamesrvRequestClass::Other,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const REQUESTS: Desc = Desc::counter(
    "namesrv_requests_total",
    "Requests answered by the name server, by request class.",
);
const REQUEST_ERRORS: Desc = Desc::counter(
    "namesrv_request_errors_total",
    "Requests answered with a response code other than SUCCESS, by request class.",
);
const ROUTE_QUERIES: Desc = Desc::counter(
    "namesrv_route_queries_total",
    "GET_ROUTEINFO_BY_TOPIC answers by result (found, not_found, error).",
);
const REGISTRATIONS: Desc = Desc::counter(
    "namesrv_broker_registrations_total",
    "Successful REGISTER_BROKER requests (first registrations and heartbeats).",
);
const LIVE_BROKERS: Desc = Desc::gauge(
    "namesrv_live_brokers",
    "Broker addresses currently registered and not expired.",
);

const ROUTE_RESULTS: [&str; 3] = ["found", "not_found", "error"];

/// The name server's metric set.
#[derive(Debug)]
pub struct NamesrvMetrics {
    requests: Family<Counter>,
    request_errors: Family<Counter>,
    route_queries: Family<Counter>,
    registrations: Counter,
    live_brokers: Gauge,
}

impl Default for NamesrvMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl NamesrvMetrics {
    /// All counters at zero.
    pub fn new() -> Self {
        let classes = || NamesrvRequestClass::ALL.map(|c| [c.label()]);
        NamesrvMetrics {
            requests: Family::new(&["class"], classes()),
            request_errors: Family::new(&["class"], classes()),
            route_queries: Family::new(&["result"], ROUTE_RESULTS.map(|r| [r])),
            registrations: Counter::new(),
            live_brokers: Gauge::new(),
        }
    }

    /// Records one answered request: its request code and the response code sent back.
    pub fn observe_request(&self, request: RequestCode, response: ResponseCode) {
        let class = NamesrvRequestClass::of(request);
        let ok = response == ResponseCode::SUCCESS;
        if let Some(c) = self.requests.at(class.index()) {
            c.inc();
        }
        if !ok {
            if let Some(c) = self.request_errors.at(class.index()) {
                c.inc();
            }
        }
        match class {
            NamesrvRequestClass::RouteQuery => {
                let result = if ok {
                    0
                } else if response == ResponseCode::TOPIC_NOT_EXIST {
                    1
                } else {
                    2
                };
                if let Some(c) = self.route_queries.at(result) {
                    c.inc();
                }
            }
            NamesrvRequestClass::Register if ok => self.registrations.inc(),
            _ => {}
        }
    }

    /// Sets the live-broker gauge (from the route table, at scrape time).
    pub fn set_live_brokers(&self, n: usize) {
        self.live_brokers.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Requests of `class` counted so far.
    pub fn requests(&self, class: NamesrvRequestClass) -> u64 {
        self.requests.at(class.index()).map_or(0, Counter::get)
    }

    /// Renders every family into `out`.
    pub fn render(&self, out: &mut Exposition) {
        render_counters(out, &REQUESTS, &self.requests);
        render_counters(out, &REQUEST_ERRORS, &self.request_errors);
        render_counters(out, &ROUTE_QUERIES, &self.route_queries);
        out.counter(&REGISTRATIONS, &[], self.registrations.get());
        out.gauge(&LIVE_BROKERS, &[], self.live_brokers.get());
    }
}

impl Collect for NamesrvMetrics {
    fn collect(&self, out: &mut Exposition) {
        self.render(out);
    }
}

/// Renders a one-label counter family.
pub(crate) fn render_counters(out: &mut Exposition, desc: &Desc, family: &Family<Counter>) {
    out.header(desc);
    let names = family.label_names();
    for (values, counter) in family.iter() {
        let labels: Vec<(&str, &str)> = names
            .iter()
            .copied()
            .zip(values.iter().map(String::as_str))
            .collect();
        out.counter(desc, &labels, counter.get());
    }
}

/// Renders a gauge family.
pub(crate) fn render_gauges(out: &mut Exposition, desc: &Desc, family: &Family<Gauge>) {
    out.header(desc);
    let names = family.label_names();
    for (values, gauge) in family.iter() {
        let labels: Vec<(&str, &str)> = names
            .iter()
            .copied()
            .zip(values.iter().map(String::as_str))
            .collect();
        out.gauge(desc, &labels, gauge.get());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_has_its_own_index_and_label() {
        for (i, c) in NamesrvRequestClass::ALL.iter().enumerate() {
            assert_eq!(c.index(), i);
        }
        assert_eq!(
            NamesrvRequestClass::of(RequestCode::GET_ROUTEINFO_BY_TOPIC),
            NamesrvRequestClass::RouteQuery
        );
        assert_eq!(
            NamesrvRequestClass::of(RequestCode(999_999)),
            NamesrvRequestClass::Other
        );
    }

    #[test]
    fn route_results_and_registrations_follow_response_codes() {
        let m = NamesrvMetrics::new();
        m.observe_request(RequestCode::GET_ROUTEINFO_BY_TOPIC, ResponseCode::SUCCESS);
        m.observe_request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            ResponseCode::TOPIC_NOT_EXIST,
        );
        m.observe_request(RequestCode::REGISTER_BROKER, ResponseCode::SUCCESS);
        m.observe_request(RequestCode::REGISTER_BROKER, ResponseCode::SYSTEM_ERROR);
        assert_eq!(m.requests(NamesrvRequestClass::RouteQuery), 2);
        assert_eq!(m.route_queries.at(0).unwrap().get(), 1);
        assert_eq!(m.route_queries.at(1).unwrap().get(), 1);
        assert_eq!(m.registrations.get(), 1);
        assert_eq!(
            m.request_errors
                .at(NamesrvRequestClass::Register.index())
                .unwrap()
                .get(),
            1
        );
    }
}
