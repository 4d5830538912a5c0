//! RocketMQ "remoting" protocol (spec `remoting.md`): frames, commands, typed headers and
//! JSON bodies, plus an async server and client on tokio.
//!
//! # Layers
//!
//! ```text
//!  server.rs / client.rs      accept loop, connection cap, shutdown | per-address connection + backoff
//!          \      /
//!     connection/             reader task (routes by RESPONSE bit, polls processors inline;
//!          |                  a processor that waits gets its own task) -> processor.rs
//!     outbox.rs               senders encode frames into one bounded per-connection buffer;
//!          |                  the reader writes it out after each batch it read (when nobody
//!          |                  else writes), the writer task at other times and what is left
//!     waiters.rs              opaque -> waiter of requests this side sent, with deadlines;
//!          |                  one sweeper per connection expires them (no timer per call)
//!     codec.rs                tokio-util Decoder/Encoder (thin adapter)
//!          |
//!     command.rs              RemotingCommand <-> header_encoding/{json,binary}.rs
//!          |                  ext_fields.rs: extFields as one text buffer + sorted offsets
//!          |
//!     frame.rs                pure: length words, limits, split into header/body (no alloc)
//!
//!  code.rs     open newtypes RequestCode / ResponseCode / LanguageCode
//!  custom_headers/   typed extFields structs (Java's CommandCustomHeader, [`CommandHeader`])
//!  header_encoding/  the header's two serializations (JSON, ROCKETMQ binary)
//!  body/             shared JSON bodies
//! ```
//!
//! # Invariants
//!
//! * Limits are checked before any allocation; bad bytes from the network never panic.
//!   A framing or header error closes the connection (logged); a semantic error (unknown
//!   code, bad custom header) is answered with a response code.
//! * Every incoming frame is routed by its RESPONSE bit first; oneway requests are never
//!   answered; a response uses the serialization of its request.
//! * extFields values are always written as strings (Go client); JSON headers are written
//!   exactly as Java writes them and read leniently (C++/Go/JS clients). The common header
//!   shape is read by a hand-written parser (header_encoding/json_fast.rs) that gives up on anything
//!   unusual; the serde-based parser then decides, so both always agree.
//! * Every channel and outbox is bounded, every call has a timeout, no std lock is held
//!   across `.await`. The reader never waits to queue a frame (a held long-poll cannot delay
//!   other responses): when the outbox is full a response waits on a task of its own.
//! * A server's connections together hold at most `max_partial_frame_bytes` in partial frames
//!   (budget.rs); the connection whose read goes past it is closed.
//!
//! # Usage
//!
//! ```
//! use std::time::Duration;
//! use remoting::{
//!     processor_fn, ClientConfig, RemotingClient, RemotingCommand, RemotingServer, RequestCode,
//!     ResponseCode, ServerConfig,
//! };
//! use remoting::custom_headers::{GetRouteInfoRequestHeader, QueryConsumerOffsetResponseHeader};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), remoting::RemotingError> {
//! // Server: one processor per request code; unknown codes get REQUEST_CODE_NOT_SUPPORTED.
//! let server = RemotingServer::builder(ServerConfig::default())
//!     .register(
//!         RequestCode::GET_ROUTEINFO_BY_TOPIC,
//!         processor_fn(|_conn, request| async move {
//!             let header = match request.decode_header::<GetRouteInfoRequestHeader>() {
//!                 Ok(h) => h,
//!                 Err(e) => return Some(e.to_response()),
//!             };
//!             Some(
//!                 RemotingCommand::success()
//!                     .with_header(&QueryConsumerOffsetResponseHeader { offset: 42 })
//!                     .with_body(format!("route of {}", header.topic)),
//!             )
//!         }),
//!     )
//!     .bind("127.0.0.1:0".parse().unwrap())
//!     .await?;
//!
//! // Client: connections are created per address on first use.
//! let client = RemotingClient::new(ClientConfig::default());
//! let request = RemotingCommand::request(
//!     RequestCode::GET_ROUTEINFO_BY_TOPIC,
//!     &GetRouteInfoRequestHeader { topic: "TopicTest".into(), ..Default::default() },
//! );
//! let response = client.invoke(server.local_addr(), request, Duration::from_secs(3)).await?;
//! assert_eq!(response.response_code(), ResponseCode::SUCCESS);
//! assert_eq!(response.body().as_ref(), b"route of TopicTest");
//! let offset: QueryConsumerOffsetResponseHeader = response.decode_header()?;
//! assert_eq!(offset.offset, 42);
//!
//! client.shutdown().await;
//! server.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! A processor can also be a struct implementing [`RequestProcessor`]; the
//! [`ConnectionHandle`] it receives can be stored and used later to `invoke` /
//! `invoke_oneway` requests on the same connection (CHECK_TRANSACTION_STATE,
//! NOTIFY_CONSUMER_IDS_CHANGED). A [`ConnectionListener`] is told when connections close.

pub mod body;
pub mod budget;
pub mod client;
pub mod code;
pub mod codec;
pub mod command;
pub mod connection;
pub mod custom_headers;
pub mod error;
pub mod ext_fields;
pub mod frame;
pub mod header_encoding;
mod outbox;
mod pending;
pub mod processor;
pub mod server;
mod waiters;

pub use client::{backoff_delay, ClientConfig, RemotingClient};
pub use code::{LanguageCode, RequestCode, ResponseCode};
pub use codec::RemotingCodec;
pub use command::{ExtFields, RemotingCommand, DEFAULT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE};
pub use connection::{ConnectionConfig, ConnectionHandle, ConnectionId};
pub use custom_headers::CommandHeader;
pub use error::{FrameError, HeaderError, RemotingError, WireHeaderError};
pub use frame::SerializeType;
pub use processor::{
    processor_fn, ConnectionListener, ProcessFuture, ProcessorRegistry, RequestProcessor,
};
pub use server::{RemotingServer, ServerBuilder, ServerConfig};
