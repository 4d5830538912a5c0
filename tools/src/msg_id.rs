//! Message ids (message-format.md §8): the offset id (store host + physical offset). The
//! codec is the broker's (`broker::message::msg_id`); this module only maps its error into
//! the client's.

use std::net::SocketAddr;

use crate::error::ClientError;

pub use broker::message::msg_id::offset_msg_id;

/// Decodes an offset message id (32 hex chars for IPv4, 56 for IPv6).
pub fn decode_offset_msg_id(id: &str) -> Result<(SocketAddr, i64), ClientError> {
    broker::message::msg_id::decode_offset_msg_id(id)
        .map_err(|_| ClientError::BadMsgId(id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_id_matches_spec_and_bad_ids_are_client_errors() {
        let addr: SocketAddr = "192.168.0.20:30911".parse().unwrap();
        let id = offset_msg_id(addr, 48);
        assert_eq!(id, "C0A80014000078BF0000000000000030");
        assert_eq!(decode_offset_msg_id(&id).unwrap(), (addr, 48));
        for bad in ["", "XYZ", "é0A80014000078BF000000000000003"] {
            assert!(
                matches!(decode_offset_msg_id(bad), Err(ClientError::BadMsgId(s)) if s == bad),
                "{bad}"
            );
        }
    }
}
