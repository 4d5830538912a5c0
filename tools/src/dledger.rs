//! The two DLedger RPCs an operator needs (dledger.md §3.6, §3.7): METADATA (who leads,
//! who the peers are) and LEADERSHIP_TRANSFER. Bodies are JSON; the remoting code of every
//! response is 200 and the real status is the `code` member of the body.
//!
//! The message types and status codes are dledger-commitlog's (`wire::messages`); only
//! METADATA, which the replication core neither sends nor answers, is defined here.

use std::collections::BTreeMap;

use serde::Deserialize;

pub use dledger_commitlog::wire::messages::{
    Common as MetadataRequest, DLedgerCode, LeadershipTransferRequest, LeadershipTransferResponse,
    REQUEST_CODE_LEADERSHIP_TRANSFER as LEADERSHIP_TRANSFER,
};

/// METADATA request code (not among dledger-commitlog's request codes).
pub const METADATA: i32 = 50000;

/// Name of a DLedger response code (dledger.md §5), `?` for numbers DLedger does not define.
pub fn code_name(code: DLedgerCode) -> &'static str {
    code.name().unwrap_or("?")
}

fn default_term() -> i64 {
    -1
}

/// METADATA response: peers and leader as the answering member sees them.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
pub struct MetadataResponse {
    pub code: DLedgerCode,
    pub group: Option<String>,
    pub leader_id: Option<String>,
    pub peers: BTreeMap<String, String>,
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
            code: DLedgerCode::SUCCESS,
            group: Some("RaftNode00".into()),
            leader_id: Some("n0".into()),
            local_id: Some("mqadmin".into()),
            remote_id: Some("n0".into()),
            take_leadership_ledger_index: -1,
            term: 3,
            transfer_id: Some("n0".into()),
            transferee_id: Some("n1".into()),
        };
        let text = serde_json::to_string(&req).unwrap();
        assert_eq!(
            text,
            r#"{"code":200,"group":"RaftNode00","leaderId":"n0","localId":"mqadmin","remoteId":"n0","takeLeadershipLedgerIndex":-1,"term":3,"transferId":"n0","transfereeId":"n1"}"#
        );
        let meta = MetadataRequest::request("g", "mqadmin", "n1", None, -1);
        assert_eq!(
            serde_json::to_string(&meta).unwrap(),
            r#"{"code":200,"group":"g","localId":"mqadmin","remoteId":"n1","term":-1}"#
        );
        let m: MetadataResponse = serde_json::from_str(
            r#"{"code":200,"group":"g","leaderId":"n1","peers":{"n0":"a:1","n1":"b:2"},"x":1}"#,
        )
        .unwrap();
        assert_eq!(m.leader_id.as_deref(), Some("n1"));
        assert_eq!(m.peers.len(), 2);
        let e: MetadataResponse = serde_json::from_str("{}").unwrap();
        assert_eq!((e.code, e.term), (DLedgerCode::SUCCESS, -1));
        let c: LeadershipTransferResponse = serde_json::from_str("{}").unwrap();
        assert_eq!((c.code, c.term), (DLedgerCode::SUCCESS, -1));
        assert_eq!(code_name(DLedgerCode(417)), "FALL_BEHIND_TOO_MUCH");
        assert_eq!(code_name(DLedgerCode(999)), "?");
    }
}
