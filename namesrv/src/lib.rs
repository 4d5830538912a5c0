//! RocketMQ-compatible name server: brokers register their addresses and topics, clients ask
//! for topic routes (spec remoting.md §11.6, §12; broker-roles.md §5).
//!
//! Layers, bottom up:
//!
//! ```text
//! body                    JSON bodies (re-exported from remoting::body)
//! inflate, compressed_body zlib inflate + the compressed RegisterBrokerBody layout
//! route                   RouteTable: pure, synchronous, clock passed in (now_ms)
//! kv_config, config       KV namespaces (optionally persisted), settings
//! route_cache             encoded route JSON per topic, dropped on any table/KV change
//! headers, processor      request code -> table operation -> RemotingCommand response
//! server                  remoting server + connection-close hook + expiry scan
//! bin/mqnamesrv           command line, logging, signals
//! ```
//!
//! Invariants:
//! - within one broker group an address is registered under at most one broker id, and
//!   queue data is only taken from the group master (id 0) or, for 5.x brokers, the group's
//!   smallest id;
//! - a broker whose connection closes is removed at once; one silent for its timeout is
//!   removed by the next scan;
//! - malformed requests (bad header, body, CRC) get an error response and change nothing;
//! - route JSON is always compact standard JSON with quoted numeric keys (quirk Q7);
//! - a cached route is served only while no table, KV or switch change happened since it
//!   was built (generation bumped under the writer's lock);
//! - no lock is held across an `.await`.
//!
//! # Usage: an in-process name server (e.g. in another crate's tests)
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), namesrv::NamesrvError> {
//! let config = namesrv::NameServerConfig {
//!     listen_addr: "127.0.0.1:0".parse().expect("literal address"),
//!     broker_timeout_ms: 2_000, // short liveness timeout for tests
//!     scan_interval_ms: 100,
//!     ..Default::default()
//! };
//! let handle = namesrv::NameServer::start(config).await?;
//! let addr = handle.local_addr(); // hand "127.0.0.1:<port>" to brokers and clients
//! assert_ne!(addr.port(), 0);
//! assert_eq!(handle.route_table().topic_count(), 0);
//! handle.shutdown().await;
//! # Ok(())
//! # }
//! ```

pub mod body;
pub mod compressed_body;
pub mod config;
pub mod error;
pub mod headers;
pub mod inflate;
pub mod kv_config;
pub mod processor;
pub mod route;
pub mod route_cache;
pub mod server;

pub use config::{NameServerConfig, Switches, DEFAULT_PORT};
pub use error::NamesrvError;
pub use server::{NameServer, NameServerHandle};
