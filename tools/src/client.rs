//! The shared core of producer, consumer and admin: one remoting client, the name-server
//! list and a topic route cache that is refreshed after failures.

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use remoting::custom_headers::GetRouteInfoRequestHeader;
use remoting::{ClientConfig, RemotingClient, RemotingCommand, RequestCode, ResponseCode};
use tokio::time::Instant;

use crate::body::{parse_body, TopicRouteData};
use crate::error::ClientError;

/// Template topic brokers register when auto-create is on.
pub const AUTO_CREATE_TOPIC: &str = "TBW102";

/// Settings shared by producer, consumer and admin.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Name servers, tried in turn.
    pub namesrv_addrs: Vec<SocketAddr>,
    /// Timeout of one RPC.
    pub rpc_timeout: Duration,
    /// A cached route older than this is fetched again (Java polls every 30 s).
    pub route_ttl: Duration,
    /// A route marked stale is not fetched again sooner than this (protects the name
    /// server from a retry storm during a failover).
    pub route_refresh_min: Duration,
    /// `ip@instance`, sent in heartbeats.
    pub client_id: String,
}

impl ClientOptions {
    /// Defaults for the given name servers.
    pub fn new(namesrv_addrs: Vec<SocketAddr>) -> ClientOptions {
        ClientOptions {
            namesrv_addrs,
            rpc_timeout: Duration::from_secs(3),
            route_ttl: Duration::from_secs(30),
            route_refresh_min: Duration::from_millis(100),
            client_id: format!("127.0.0.1@{}", std::process::id()),
        }
    }
}

/// Parses `host:port;host:port` (RocketMQ's `namesrvAddr` form).
pub fn parse_addr_list(list: &str) -> Result<Vec<SocketAddr>, ClientError> {
    let mut out = Vec::new();
    for part in list
        .split([';', ','])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        out.push(parse_addr(part)?);
    }
    if out.is_empty() {
        return Err(ClientError::BadAddress(list.to_owned()));
    }
    Ok(out)
}

/// Parses one `host:port`.
pub fn parse_addr(addr: &str) -> Result<SocketAddr, ClientError> {
    if let Ok(a) = addr.parse() {
        return Ok(a);
    }
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut it| it.next())
        .ok_or_else(|| ClientError::BadAddress(addr.to_owned()))
}

struct CachedRoute {
    route: Arc<TopicRouteData>,
    /// The route is the TBW102 template (topic unknown to the name server).
    from_template: bool,
    fetched_at: Instant,
    stale: bool,
}

struct Inner {
    remoting: RemotingClient,
    options: ClientOptions,
    routes: Mutex<HashMap<String, CachedRoute>>,
    next_namesrv: AtomicUsize,
}

/// Cheap to clone; clones share connections and the route cache.
#[derive(Clone)]
pub struct MqClient {
    inner: Arc<Inner>,
}

/// A route and whether it came from the auto-create template.
#[derive(Debug, Clone)]
pub struct RouteLookup {
    pub route: Arc<TopicRouteData>,
    pub from_template: bool,
}

impl MqClient {
    /// A client; connects lazily.
    pub fn new(options: ClientOptions) -> MqClient {
        MqClient {
            inner: Arc::new(Inner {
                remoting: RemotingClient::new(ClientConfig {
                    reconnect_backoff_min: Duration::from_millis(50),
                    reconnect_backoff_max: Duration::from_millis(500),
                    ..ClientConfig::default()
                }),
                options,
                routes: Mutex::new(HashMap::new()),
                next_namesrv: AtomicUsize::new(0),
            }),
        }
    }

    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.options
    }

    /// The underlying remoting client.
    pub fn remoting(&self) -> &RemotingClient {
        &self.inner.remoting
    }

    /// Sends a request and returns whatever the server answered.
    pub async fn invoke(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, ClientError> {
        Ok(self.inner.remoting.invoke(addr, request, timeout).await?)
    }

    /// Sends a request with the default timeout; a non-SUCCESS answer is an error.
    pub async fn invoke_ok(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
    ) -> Result<RemotingCommand, ClientError> {
        let response = self
            .invoke(addr, request, self.inner.options.rpc_timeout)
            .await?;
        expect_success(addr, response)
    }

    /// Sends a oneway request.
    pub async fn invoke_oneway(
        &self,
        addr: SocketAddr,
        request: RemotingCommand,
    ) -> Result<(), ClientError> {
        Ok(self
            .inner
            .remoting
            .invoke_oneway(addr, request.with_oneway(), self.inner.options.rpc_timeout)
            .await?)
    }

    /// Sends a request to the name servers, starting with the one that answered last and
    /// moving on after transport errors. Returns the first answer (any code).
    pub async fn invoke_namesrv(
        &self,
        request: RemotingCommand,
    ) -> Result<(SocketAddr, RemotingCommand), ClientError> {
        let addrs = &self.inner.options.namesrv_addrs;
        if addrs.is_empty() {
            return Err(ClientError::InvalidArgument(
                "no name server address".to_owned(),
            ));
        }
        let start = self.inner.next_namesrv.load(Ordering::Relaxed);
        let mut last_err = None;
        for i in 0..addrs.len() {
            let idx = (start + i) % addrs.len();
            let addr = addrs[idx];
            match self
                .invoke(addr, request.clone(), self.inner.options.rpc_timeout)
                .await
            {
                Ok(r) => {
                    self.inner.next_namesrv.store(idx, Ordering::Relaxed);
                    return Ok((addr, r));
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(ClientError::NoRoute {
            topic: String::new(),
        }))
    }

    /// Asks the name servers for the route of `topic` (no cache). `Ok(None)` when the
    /// name server does not know the topic.
    pub async fn fetch_route(&self, topic: &str) -> Result<Option<TopicRouteData>, ClientError> {
        let request = RemotingCommand::request(
            RequestCode::GET_ROUTEINFO_BY_TOPIC,
            &GetRouteInfoRequestHeader {
                topic: topic.to_owned(),
                accept_standard_json_only: Some(true),
            },
        );
        let (addr, response) = self.invoke_namesrv(request).await?;
        match response.response_code() {
            ResponseCode::SUCCESS => Ok(Some(parse_body("route", response.body())?)),
            ResponseCode::TOPIC_NOT_EXIST => Ok(None),
            code => Err(ClientError::Response {
                addr,
                code,
                remark: response.remark().unwrap_or_default().to_owned(),
            }),
        }
    }

    fn cached(&self, topic: &str) -> Option<RouteLookup> {
        let routes = self.inner.routes.lock().unwrap_or_else(|e| e.into_inner());
        let c = routes.get(topic)?;
        let age = c.fetched_at.elapsed();
        let fresh = if c.stale {
            age < self.inner.options.route_refresh_min
        } else {
            age < self.inner.options.route_ttl
        };
        fresh.then(|| RouteLookup {
            route: c.route.clone(),
            from_template: c.from_template,
        })
    }

    fn store(&self, topic: &str, route: Arc<TopicRouteData>, from_template: bool) {
        let mut routes = self.inner.routes.lock().unwrap_or_else(|e| e.into_inner());
        routes.insert(
            topic.to_owned(),
            CachedRoute {
                route,
                from_template,
                fetched_at: Instant::now(),
                stale: false,
            },
        );
    }

    /// The route of `topic`: cached while fresh, else fetched. An unknown topic falls back
    /// to the TBW102 template (the broker auto-creates it on the first send) when
    /// `allow_template` is set.
    pub async fn route(
        &self,
        topic: &str,
        allow_template: bool,
    ) -> Result<RouteLookup, ClientError> {
        if let Some(r) = self.cached(topic) {
            return Ok(r);
        }
        let fetched = self.fetch_route(topic).await;
        match fetched {
            Ok(Some(route)) => {
                let route = Arc::new(route);
                self.store(topic, route.clone(), false);
                Ok(RouteLookup {
                    route,
                    from_template: false,
                })
            }
            Ok(None) if allow_template => match self.fetch_route(AUTO_CREATE_TOPIC).await? {
                Some(route) => {
                    let route = Arc::new(route);
                    self.store(topic, route.clone(), true);
                    Ok(RouteLookup {
                        route,
                        from_template: true,
                    })
                }
                None => Err(ClientError::NoRoute {
                    topic: topic.to_owned(),
                }),
            },
            Ok(None) => Err(ClientError::NoRoute {
                topic: topic.to_owned(),
            }),
            Err(e) => {
                // Name server unreachable: keep using the last known route if any.
                let routes = self.inner.routes.lock().unwrap_or_else(|e| e.into_inner());
                match routes.get(topic) {
                    Some(c) => Ok(RouteLookup {
                        route: c.route.clone(),
                        from_template: c.from_template,
                    }),
                    None => Err(e),
                }
            }
        }
    }

    /// Marks the route of `topic` stale: the next lookup asks the name server again
    /// (at most once per `route_refresh_min`).
    pub fn invalidate_route(&self, topic: &str) {
        let mut routes = self.inner.routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = routes.get_mut(topic) {
            if !c.stale {
                c.stale = true;
                c.fetched_at = Instant::now()
                    .checked_sub(self.inner.options.route_refresh_min)
                    .unwrap_or_else(Instant::now);
            }
        }
    }

    /// Closes every connection.
    pub async fn shutdown(&self) {
        self.inner.remoting.shutdown().await;
    }
}

/// Turns a non-SUCCESS answer into [`ClientError::Response`].
pub fn expect_success(
    addr: SocketAddr,
    response: RemotingCommand,
) -> Result<RemotingCommand, ClientError> {
    if response.response_code() == ResponseCode::SUCCESS {
        Ok(response)
    } else {
        Err(ClientError::Response {
            addr,
            code: response.response_code(),
            remark: response.remark().unwrap_or_default().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lists() {
        let a = parse_addr_list("127.0.0.1:9876; 127.0.0.1:9877").unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].port(), 9877);
        assert!(parse_addr_list("").is_err());
        assert!(parse_addr_list("nohost").is_err());
    }
}
