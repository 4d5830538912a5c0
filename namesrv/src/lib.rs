//! RocketMQ-compatible name server.
pub mod body;
pub mod lenient_json;
pub mod route;
