//! tokio-util `Decoder`/`Encoder` for [`RemotingCommand`]: a thin adapter over `frame`.

use bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder};

use crate::command::RemotingCommand;
use crate::error::RemotingError;
use crate::frame::{self, DEFAULT_MAX_FRAME_LEN};

/// Frames RemotingCommands on a byte stream, enforcing a maximum frame length.
#[derive(Debug, Clone, Copy)]
pub struct RemotingCodec {
    max_frame_len: usize,
}

impl RemotingCodec {
    /// A codec with Java's 16 MiB frame limit.
    pub fn new() -> Self {
        RemotingCodec {
            max_frame_len: DEFAULT_MAX_FRAME_LEN,
        }
    }

    /// A codec with a custom limit on the total-length word.
    pub fn with_max_frame_len(max_frame_len: usize) -> Self {
        RemotingCodec { max_frame_len }
    }
}

impl Default for RemotingCodec {
    fn default() -> Self {
        RemotingCodec::new()
    }
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = RemotingError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, RemotingError> {
        match frame::decode_frame(src, self.max_frame_len)? {
            Some(f) => Ok(Some(RemotingCommand::from_frame(f)?)),
            None => Ok(None),
        }
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = RemotingError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), RemotingError> {
        item.encode(dst, self.max_frame_len)?;
        Ok(())
    }
}

impl Encoder<&RemotingCommand> for RemotingCodec {
    type Error = RemotingError;

    fn encode(&mut self, item: &RemotingCommand, dst: &mut BytesMut) -> Result<(), RemotingError> {
        item.encode(dst, self.max_frame_len)?;
        Ok(())
    }
}
