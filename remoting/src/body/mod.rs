//! JSON bodies shared by several crates (spec §12), with tolerant parsing (quirks Q7, Q13,
//! Q19): fastjson's unquoted integer map keys are accepted, unknown members ignored, missing
//! members defaulted, numbers accepted as strings where clients send them that way.
//!
//! Writing is standard compact JSON with quoted keys and members in alphabetical order,
//! like fastjson (struct fields are declared alphabetically for that reason).

use std::borrow::Cow;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::RemotingError;

mod cluster;
mod heartbeat;
mod lenient;
mod lock;
mod misc;
mod offsets;
mod queue;
mod register;
mod route;

pub use cluster::*;
pub use heartbeat::*;
pub use lenient::quote_bare_keys;
pub use lock::*;
pub use misc::*;
pub use offsets::*;
pub use queue::*;
pub use register::*;
pub use route::*;

/// Parses a JSON body leniently (quotes fastjson's bare numeric keys first).
pub fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, RemotingError> {
    let text: Cow<'_, [u8]> = quote_bare_keys(bytes);
    serde_json::from_slice(&text).map_err(|e| RemotingError::Body(e.to_string()))
}

/// Writes a body as compact standard JSON.
pub fn to_json<T: Serialize>(value: &T) -> Result<Bytes, RemotingError> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| RemotingError::Body(e.to_string()))
}
