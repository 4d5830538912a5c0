//! The two DLedger RPCs an operator needs (dledger.md §3.6, §3.7): METADATA (who leads,
//! who the peers are) and LEADERSHIP_TRANSFER. Bodies are JSON; the remoting code of every
//! response is 200 and the real status is the `code` member of the body.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// METADATA request code.
pub const METADATA: i32 = 50000;
/// LEADERSHIP_TRANSFER request code.
pub const LEADERSHIP_TRANSFER: i32 = 51005;
/// Body `code` of a success.
pub const CODE_SUCCESS: i32 = 200;

/// Name of a DLedger response code (dledger.md §5).
pub fn code_name(code: i32) -> &'static str {
    match code {
        -1 => "UNKNOWN",
        200 => "SUCCESS",
        300 => "TIMEOUT",
        301 => "METADATA_ERROR",
        302 => "NETWORK_ERROR",
        303 => "UNSUPPORTED",
        400 => "UNKNOWN_GROUP",
        401 => "UNKNOWN_MEMBER",
        402 => "UNEXPECTED_MEMBER",
        403 => "EXPIRED_TERM",
        404 => "NOT_LEADER",
        405 => "NOT_FOLLOWER",
        406 => "INCONSISTENT_STATE",
        407 => "INCONSISTENT_TERM",
        408 => "INCONSISTENT_INDEX",
        409 => "INCONSISTENT_LEADER",
        410 => "INDEX_OUT_OF_RANGE",
        411 => "UNEXPECTED_ARGUMENT",
        412 => "REPEATED_REQUEST",
        413 => "REPEATED_PUSH",
        414 => "DISK_ERROR",
        415 => "DISK_FULL",
        416 => "TERM_NOT_READY",
        417 => "FALL_BEHIND_TOO_MUCH",
        418 => "TAKE_LEADERSHIP_FAILED",
        419 => "INDEX_LESS_THAN_LOCAL_BEGIN",
        420 => "REQUEST_WITH_EMPTY_BODYS",
        421 => "PUSH_REQUEST_IS_FULL",
        500 => "INTERNAL_ERROR",
        501 => "TERM_CHANGED",
        502 => "WAIT_QUORUM_ACK_TIMEOUT",
        503 => "LEADER_PENDING_FULL",
        504 => "ILLEGAL_MEMBER_STATE",
        505 => "LEADER_NOT_READY",
        506 => "LEADER_TRANSFERRING",
        _ => "?",
    }
}

fn default_code() -> i32 {
    CODE_SUCCESS
}
fn default_term() -> i64 {
    -1
}

/// METADATA request (common members only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataRequest {
    pub code: i32,
    pub group: String,
    pub local_id: String,
    pub remote_id: String,
    pub term: i64,
}

/// METADATA response: peers and leader as the answering member sees them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct MetadataResponse {
    #[serde(default = "default_code")]
    pub code: i32,
    pub group: Option<String>,
    pub leader_id: Option<String>,
    pub peers: BTreeMap<String, String>,
    #[serde(default = "default_term")]
    pub term: i64,
}

/// LEADERSHIP_TRANSFER request, admin -> leader form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeadershipTransferRequest {
    pub code: i32,
    pub group: String,
    pub leader_id: String,
    pub local_id: String,
    pub remote_id: String,
    pub take_leadership_ledger_index: i64,
    pub term: i64,
    pub transfer_id: String,
    pub transferee_id: String,
}

/// Common members of any response (LEADERSHIP_TRANSFER answers only these).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct CommonResponse {
    #[serde(default = "default_code")]
    pub code: i32,
    pub leader_id: Option<String>,
    #[serde(default = "default_term")]
    pub term: i64,
}

/// Parses `id-host:port;id-host:port` (id = everything before the first `-`).
pub fn parse_peers(peers: &str) -> BTreeMap<String, String> {
    peers
        .split(';')
        .map(str::trim)
        .filter_map(|p| p.split_once('-'))
        .map(|(id, addr)| (id.trim().to_owned(), addr.trim().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_and_json_shapes() {
        let p = parse_peers("n0-127.0.0.1:40911;n1-127.0.0.1:40912; n2-127.0.0.1:40913;");
        assert_eq!(p.len(), 3);
        assert_eq!(p["n1"], "127.0.0.1:40912");
        let req = LeadershipTransferRequest {
            code: 200,
            group: "RaftNode00".into(),
            leader_id: "n0".into(),
            local_id: "mqadmin".into(),
            remote_id: "n0".into(),
            take_leadership_ledger_index: -1,
            term: 3,
            transfer_id: "n0".into(),
            transferee_id: "n1".into(),
        };
        let text = serde_json::to_string(&req).unwrap();
        assert_eq!(
            text,
            r#"{"code":200,"group":"RaftNode00","leaderId":"n0","localId":"mqadmin","remoteId":"n0","takeLeadershipLedgerIndex":-1,"term":3,"transferId":"n0","transfereeId":"n1"}"#
        );
        let m: MetadataResponse = serde_json::from_str(
            r#"{"code":200,"group":"g","leaderId":"n1","peers":{"n0":"a:1","n1":"b:2"},"x":1}"#,
        )
        .unwrap();
        assert_eq!(m.leader_id.as_deref(), Some("n1"));
        assert_eq!(m.peers.len(), 2);
        let c: CommonResponse = serde_json::from_str("{}").unwrap();
        assert_eq!((c.code, c.term), (200, -1));
        assert_eq!(code_name(417), "FALL_BEHIND_TOO_MUCH");
    }
}
