//! DLedger RPC bodies (spec dledger.md §3) and their JSON mapping.
//!
//! Owns: the request/response structs the core consumes and produces, the response codes (§5)
//! and the fastjson conventions (§3): compact, keys in alphabetical order (fields are declared
//! alphabetically), null members omitted, enums by name (numbers accepted on input), `byte[]` as
//! padded standard base64, missing members take the documented defaults, unknown members are
//! ignored. The runtime only frames these bodies over remoting with the request codes below.
//! Must not: know about sockets, opaques or time.

use bytes::Bytes;
use serde::de::{self, Deserializer, Visitor};
use serde::ser::{SerializeStruct, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::types::{Index, LogEntry, NegativeWireValue, Pos, Term};

/// Remoting request code of VOTE.
pub const REQUEST_CODE_VOTE: i32 = 51001;
/// Remoting request code of HEART_BEAT.
pub const REQUEST_CODE_HEART_BEAT: i32 = 51002;
/// Remoting request code of PUSH.
pub const REQUEST_CODE_PUSH: i32 = 51004;
/// Remoting request code of LEADERSHIP_TRANSFER.
pub const REQUEST_CODE_LEADERSHIP_TRANSFER: i32 = 51005;

/// DLedger status code carried in the `code` member of every body (spec §5). Open newtype:
/// unknown numbers survive a round trip.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DLedgerCode(pub i32);

impl DLedgerCode {
    pub const UNKNOWN: Self = Self(-1);
    pub const SUCCESS: Self = Self(200);
    pub const TIMEOUT: Self = Self(300);
    pub const METADATA_ERROR: Self = Self(301);
    pub const NETWORK_ERROR: Self = Self(302);
    pub const UNSUPPORTED: Self = Self(303);
    pub const UNKNOWN_GROUP: Self = Self(400);
    pub const UNKNOWN_MEMBER: Self = Self(401);
    pub const UNEXPECTED_MEMBER: Self = Self(402);
    pub const EXPIRED_TERM: Self = Self(403);
    pub const NOT_LEADER: Self = Self(404);
    pub const NOT_FOLLOWER: Self = Self(405);
    pub const INCONSISTENT_STATE: Self = Self(406);
    pub const INCONSISTENT_TERM: Self = Self(407);
    pub const INCONSISTENT_INDEX: Self = Self(408);
    pub const INCONSISTENT_LEADER: Self = Self(409);
    pub const INDEX_OUT_OF_RANGE: Self = Self(410);
    pub const UNEXPECTED_ARGUMENT: Self = Self(411);
    pub const REPEATED_REQUEST: Self = Self(412);
    pub const REPEATED_PUSH: Self = Self(413);
    pub const DISK_ERROR: Self = Self(414);
    pub const DISK_FULL: Self = Self(415);
    pub const TERM_NOT_READY: Self = Self(416);
    pub const FALL_BEHIND_TOO_MUCH: Self = Self(417);
    pub const TAKE_LEADERSHIP_FAILED: Self = Self(418);
    pub const INDEX_LESS_THAN_LOCAL_BEGIN: Self = Self(419);
    pub const REQUEST_WITH_EMPTY_BODYS: Self = Self(420);
    pub const PUSH_REQUEST_IS_FULL: Self = Self(421);
    pub const INTERNAL_ERROR: Self = Self(500);
    pub const TERM_CHANGED: Self = Self(501);
    pub const WAIT_QUORUM_ACK_TIMEOUT: Self = Self(502);
    pub const LEADER_PENDING_FULL: Self = Self(503);
    pub const ILLEGAL_MEMBER_STATE: Self = Self(504);
    pub const LEADER_NOT_READY: Self = Self(505);
    pub const LEADER_TRANSFERRING: Self = Self(506);

    /// Java enum name, for logs; `None` for numbers DLedger 0.3.1.2 does not define.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
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
            _ => return None,
        })
    }
}

impl fmt::Debug for DLedgerCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}({})", self.0),
            None => write!(f, "DLedgerCode({})", self.0),
        }
    }
}

impl Default for DLedgerCode {
    fn default() -> Self {
        Self::SUCCESS
    }
}

fn minus_one() -> i64 {
    -1
}

/// An optional RPC index field read loosely: `-1` and any other negative are none. Used
/// where a malformed negative and "none" lead to the same decision (module docs of the
/// typed accessors below).
fn loose_index(v: i64) -> Option<Index> {
    Index::from_wire(v).ok().flatten()
}

/// An optional RPC term field read loosely (see [`loose_index`]).
fn loose_term(v: i64) -> Option<Term> {
    Term::from_wire(v).ok().flatten()
}

/// Defines a string enum serialized by name and accepted by name or ordinal (fastjson).
macro_rules! name_enum {
    ($(#[$m:meta])* $name:ident, default $def:ident, [$($var:ident),+ $(,)?]) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Debug, Hash, Default)]
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        pub enum $name { #[default] $def, $($var),+ }

        impl $name {
            /// Every constant, in ordinal order.
            pub(crate) const ALL: &'static [$name] = &[$name::$def, $($name::$var),+];
            /// Java enum constant name.
            pub fn as_str(self) -> &'static str {
                match self { $name::$def => stringify!($def), $($name::$var => stringify!($var)),+ }
            }
            fn from_name(s: &str) -> Option<Self> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl<'de> Visitor<'de> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!("a ", stringify!($name), " name or ordinal"))
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::from_name(v).ok_or_else(|| E::custom(format_args!("unknown {} {v:?}", stringify!($name))))
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$name, E> {
                        usize::try_from(v).ok().and_then(|i| $name::ALL.get(i).copied())
                            .ok_or_else(|| E::custom(format_args!("bad {} ordinal {v}", stringify!($name))))
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$name, E> {
                        u64::try_from(v).map_err(|_| E::custom("negative ordinal")).and_then(|u| self.visit_u64(u))
                    }
                    fn visit_unit<E: de::Error>(self) -> Result<$name, E> {
                        Ok($name::$def)
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

name_enum!(
    /// `voteResult` of a VoteResponse (spec §3.2), ordinal = position.
    VoteResult,
    default UNKNOWN,
    [
        ACCEPT,
        REJECT_UNKNOWN_LEADER,
        REJECT_UNEXPECTED_LEADER,
        REJECT_EXPIRED_VOTE_TERM,
        REJECT_ALREADY_VOTED,
        REJECT_ALREADY_HAS_LEADER,
        REJECT_TERM_NOT_READY,
        REJECT_TERM_SMALL_THAN_LEDGER,
        REJECT_EXPIRED_LEDGER_TERM,
        REJECT_SMALL_LEDGER_END_INDEX,
        REJECT_TAKING_LEADERSHIP,
    ]
);

name_enum!(
    /// `type` of a PushEntryRequest (spec §3.4).
    PushType,
    default APPEND,
    [COMMIT, COMPARE, TRUNCATE]
);

mod base64_bytes {
    use super::*;
    use crate::wire::b64;

    /// DLedger writes `byte[]` as canonical padded base64 (RFC 4648 §4).
    fn not_base64<E: de::Error>() -> E {
        E::custom("not canonical padded base64")
    }

    pub fn serialize<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
        let mut text = Vec::with_capacity(b64::encoded_len(b.len()));
        b64::encode_into(&mut text, b);
        // The base64 alphabet and '=' are ASCII.
        s.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
    }
    /// Decodes straight from the (usually borrowed) JSON string: no intermediate `String`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a base64 string or null")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
                let text = v.as_bytes();
                let mut out = vec![0; b64::decoded_len(text).ok_or_else(not_base64::<E>)?];
                b64::decode_into(text, &mut out).ok_or_else(not_base64::<E>)?;
                Ok(Bytes::from(out))
            }
            fn visit_none<E: de::Error>(self) -> Result<Bytes, E> {
                Ok(Bytes::new())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Bytes, E> {
                Ok(Bytes::new())
            }
            fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<Bytes, D2::Error> {
                d.deserialize_str(V)
            }
        }
        d.deserialize_option(V)
    }
}

/// Size of the DLedger data-entry header before the body (spec §2.2).
pub const ENTRY_HEADER_BYTES: i32 = 48;

/// DLedgerEntry as carried in PUSH bodies: the stored fields (spec §2.2).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DLedgerEntry {
    #[serde(with = "base64_bytes", default)]
    pub body: Bytes,
    #[serde(default)]
    pub body_crc: i32,
    #[serde(default)]
    pub chain_crc: i32,
    #[serde(default)]
    pub channel: i32,
    #[serde(default = "minus_one")]
    pub index: i64,
    #[serde(default = "one")]
    pub magic: i32,
    #[serde(default = "minus_one")]
    pub pos: i64,
    #[serde(default)]
    pub size: i32,
    #[serde(default = "minus_one")]
    pub term: i64,
}

fn one() -> i32 {
    1
}

impl From<&LogEntry> for DLedgerEntry {
    fn from(e: &LogEntry) -> Self {
        DLedgerEntry::from(e.clone())
    }
}

/// Moves the body (no reference-count traffic: pushes build their wire entries this way).
impl From<LogEntry> for DLedgerEntry {
    fn from(e: LogEntry) -> Self {
        let size = i32::try_from(e.body.len())
            .unwrap_or(i32::MAX - ENTRY_HEADER_BYTES)
            .saturating_add(ENTRY_HEADER_BYTES);
        DLedgerEntry {
            body: e.body,
            body_crc: 0,
            chain_crc: 0,
            channel: 0,
            index: e.index.raw(),
            magic: 1,
            pos: e.pos.raw(),
            size,
            term: e.term.raw(),
        }
    }
}

impl DLedgerEntry {
    /// The log entry this wire entry describes, or `None` if its header fields are
    /// inconsistent (size != 48 + body, magic != 1, negative index/term/pos).
    pub fn to_log_entry(&self) -> Option<LogEntry> {
        let expected = i64::try_from(self.body.len()).ok()? + i64::from(ENTRY_HEADER_BYTES);
        if self.magic != 1 || i64::from(self.size) != expected {
            return None;
        }
        Some(LogEntry {
            index: Index::from_wire(self.index).ok()??,
            term: Term::from_wire(self.term).ok()??,
            pos: Pos::from_wire(self.pos).ok()??,
            body: self.body.clone(),
        })
    }
}

/// Members shared by every request and response (spec §3.1). `Default` is DLedger's plain
/// success: `{"code":200,"term":-1}`.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Common {
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub term: i64,
}

impl Default for Common {
    fn default() -> Self {
        Common {
            code: DLedgerCode::SUCCESS,
            group: None,
            leader_id: None,
            local_id: None,
            remote_id: None,
            term: -1,
        }
    }
}

impl Common {
    /// Common members of a request from `local` to `remote` in `group`, with the raw `term`
    /// member (`-1` when the sender has none, as admin tools send).
    pub fn request(
        group: &str,
        local: &str,
        remote: &str,
        leader: Option<&str>,
        term: i64,
    ) -> Self {
        Common {
            code: DLedgerCode::SUCCESS,
            group: Some(group.to_owned()),
            leader_id: leader.map(str::to_owned),
            local_id: Some(local.to_owned()),
            remote_id: Some(remote.to_owned()),
            term,
        }
    }

    /// [`Common::request`] from a member in `term`.
    pub fn request_in(
        group: &str,
        local: &str,
        remote: &str,
        leader: Option<&str>,
        term: Term,
    ) -> Self {
        Common::request(group, local, remote, leader, term.raw())
    }

    /// The `term` member; `None` for `-1` and for any other (malformed) negative, which
    /// orders below every term as the signed number did.
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }

    /// Sets the `term` member.
    pub fn set_term(&mut self, term: Term) {
        self.term = term.raw();
    }

    /// The same members with `term` set.
    pub fn with_term(mut self, term: Term) -> Self {
        self.set_term(term);
        self
    }
}

/// VOTE request (51001). `preVote` is this project's extension (omitted when false, so a
/// normal vote is byte-identical to Java's); a pre-vote asks "would you vote for me at
/// `term`?" without changing the receiver's state (R10).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoteRequest {
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    #[serde(default = "minus_one")]
    pub ledger_end_index: i64,
    #[serde(default = "minus_one")]
    pub ledger_end_term: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub pre_vote: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub term: i64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl VoteRequest {
    /// A (pre-)vote request from `candidate` to `remote` for `term`, advertising the
    /// candidate's last entry (`ledger_end_index`, `ledger_end_term`; none for an empty log).
    pub fn new(
        group: &str,
        candidate: &str,
        remote: &str,
        term: Term,
        ledger_end_index: Option<Index>,
        ledger_end_term: Option<Term>,
        pre_vote: bool,
    ) -> Self {
        VoteRequest {
            code: DLedgerCode::SUCCESS,
            group: Some(group.to_owned()),
            leader_id: Some(candidate.to_owned()),
            ledger_end_index: Index::to_wire(ledger_end_index),
            ledger_end_term: Term::to_wire(ledger_end_term),
            local_id: Some(candidate.to_owned()),
            pre_vote,
            remote_id: Some(remote.to_owned()),
            term: term.raw(),
        }
    }

    /// The term asked for (see [`Common::term`] for negatives).
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }

    /// The candidate's last entry index, strictly: `Err` for a malformed negative, which the
    /// log comparison (R2) must order below an empty log, as the signed number did.
    pub fn ledger_end_index(&self) -> Result<Option<Index>, NegativeWireValue> {
        Index::from_wire(self.ledger_end_index)
    }

    /// The candidate's last entry term, strictly (see [`VoteRequest::ledger_end_index`]).
    pub fn ledger_end_term(&self) -> Result<Option<Term>, NegativeWireValue> {
        Term::from_wire(self.ledger_end_term)
    }
}

/// VOTE response.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VoteResponse {
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub term: i64,
    #[serde(default)]
    pub vote_result: VoteResult,
}

impl VoteResponse {
    /// The answer to `r`: its group, local and remote ids echoed, with `leader_id`, this
    /// member's `term` and the decision.
    pub fn answer(
        r: &VoteRequest,
        code: DLedgerCode,
        leader_id: Option<String>,
        term: Term,
        vote_result: VoteResult,
    ) -> Self {
        VoteResponse {
            code,
            group: r.group.clone(),
            leader_id,
            local_id: r.local_id.clone(),
            remote_id: r.remote_id.clone(),
            term: term.raw(),
            vote_result,
        }
    }

    /// The responder's term (see [`Common::term`] for negatives).
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }
}

/// HEART_BEAT request (51002): common members only.
pub type HeartBeatRequest = Common;
/// HEART_BEAT response: common members only.
pub type HeartBeatResponse = Common;
/// LEADERSHIP_TRANSFER response: common members only.
pub type LeadershipTransferResponse = Common;

/// PUSH request (51004). Batch mode is decided by `batch_entry` being non-empty; the derived
/// members `batch`, `count`, `firstEntryIndex`, `lastEntryIndex`, `totalSize` are emitted on
/// output and ignored on input.
#[derive(Clone, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEntryRequest {
    #[serde(default)]
    pub batch_entry: Vec<DLedgerEntry>,
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default = "minus_one")]
    pub commit_index: i64,
    #[serde(default)]
    pub entry: Option<DLedgerEntry>,
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub leader_id: Option<String>,
    #[serde(default)]
    pub local_id: Option<String>,
    #[serde(default)]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub term: i64,
    #[serde(default, rename = "type")]
    pub push_type: PushType,
}

impl PushEntryRequest {
    /// The entries this push carries, batch or single.
    pub fn entries(&self) -> &[DLedgerEntry] {
        if !self.batch_entry.is_empty() {
            &self.batch_entry
        } else {
            self.entry.as_slice()
        }
    }
    /// Index of the first carried entry; `None` if none (or negative).
    pub fn first_index(&self) -> Option<Index> {
        self.entries().first().and_then(|e| loose_index(e.index))
    }
    /// Number of carried entries.
    pub fn count(&self) -> usize {
        self.entries().len()
    }
}

impl PushEntryRequest {
    /// A push of `push_type` carrying `common`'s members (its term is the leader's), the
    /// leader's `commit_index`, and `entry` or `batch_entry`.
    pub fn new(
        common: Common,
        push_type: PushType,
        commit_index: Option<Index>,
        entry: Option<DLedgerEntry>,
        batch_entry: Vec<DLedgerEntry>,
    ) -> Self {
        PushEntryRequest {
            batch_entry,
            code: DLedgerCode::SUCCESS,
            commit_index: Index::to_wire(commit_index),
            entry,
            group: common.group,
            leader_id: common.leader_id,
            local_id: common.local_id,
            remote_id: common.remote_id,
            term: common.term,
            push_type,
        }
    }

    /// The leader's term (see [`Common::term`] for negatives).
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }

    /// The leader's committed index; `None` for none (or a malformed negative: either way
    /// nothing to commit).
    pub fn commit_index(&self) -> Option<Index> {
        loose_index(self.commit_index)
    }
}

impl Serialize for PushEntryRequest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let batch = !self.batch_entry.is_empty();
        let entries = self.entries();
        let count = i32::try_from(entries.len()).unwrap_or(i32::MAX);
        let first = entries.first().map_or(-1, |e| e.index);
        let last = entries.last().map_or(-1, |e| e.index);
        let total: i64 = if batch {
            self.batch_entry.iter().map(|e| i64::from(e.size)).sum()
        } else {
            0
        };
        let mut st = s.serialize_struct("PushEntryRequest", 16)?;
        st.serialize_field("batch", &batch)?;
        st.serialize_field("batchEntry", &self.batch_entry)?;
        st.serialize_field("code", &self.code)?;
        st.serialize_field("commitIndex", &self.commit_index)?;
        st.serialize_field("count", &count)?;
        if let Some(e) = &self.entry {
            st.serialize_field("entry", e)?;
        }
        st.serialize_field("firstEntryIndex", &first)?;
        if let Some(g) = &self.group {
            st.serialize_field("group", g)?;
        }
        st.serialize_field("lastEntryIndex", &last)?;
        if let Some(v) = &self.leader_id {
            st.serialize_field("leaderId", v)?;
        }
        if let Some(v) = &self.local_id {
            st.serialize_field("localId", v)?;
        }
        if let Some(v) = &self.remote_id {
            st.serialize_field("remoteId", v)?;
        }
        st.serialize_field("term", &self.term)?;
        st.serialize_field("totalSize", &total)?;
        st.serialize_field("type", &self.push_type)?;
        st.end()
    }
}

/// PUSH response.
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PushEntryResponse {
    #[serde(default = "minus_one")]
    pub begin_index: i64,
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default)]
    pub count: i32,
    #[serde(default = "minus_one")]
    pub end_index: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub term: i64,
}

impl PushEntryResponse {
    /// The answer to `r` with `code` and the responder's ledger range (`begin`, `end`; none
    /// when it has no entry): group, term, first index and count echoed from the request
    /// (a COMMIT push is answered with count 0 and no index).
    pub fn answer(
        r: &PushEntryRequest,
        code: DLedgerCode,
        begin: Option<Index>,
        end: Option<Index>,
    ) -> Self {
        let commit = r.push_type == PushType::COMMIT;
        PushEntryResponse {
            begin_index: Index::to_wire(begin),
            code,
            count: if commit {
                0
            } else {
                i32::try_from(r.count()).unwrap_or(i32::MAX)
            },
            end_index: Index::to_wire(end),
            group: r.group.clone(),
            index: if commit {
                None
            } else {
                Some(r.entries().first().map_or(-1, |e| e.index))
            },
            leader_id: None,
            local_id: None,
            remote_id: None,
            term: r.term,
        }
    }

    /// The same response with `term` set.
    pub fn with_term(mut self, term: Term) -> Self {
        self.term = term.raw();
        self
    }

    /// The responder's term (see [`Common::term`] for negatives).
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }

    /// The responder's first index; `None` when it holds no entry (or a malformed negative).
    pub fn begin_index(&self) -> Option<Index> {
        loose_index(self.begin_index)
    }

    /// The responder's last index, strictly: `Err` for a malformed negative, which the
    /// leader must order below "none" as the signed number did.
    pub fn end_index(&self) -> Result<Option<Index>, NegativeWireValue> {
        Index::from_wire(self.end_index)
    }
}

/// LEADERSHIP_TRANSFER request (51005), admin -> leader or leader -> transferee (spec §3.7).
#[derive(Clone, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeadershipTransferRequest {
    #[serde(default)]
    pub code: DLedgerCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_id: Option<String>,
    #[serde(default = "minus_one")]
    pub take_leadership_ledger_index: i64,
    #[serde(default = "minus_one")]
    pub term: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transferee_id: Option<String>,
}

impl LeadershipTransferRequest {
    /// The leader `from` asks `to` to take over in `term` once it holds the leader's log
    /// through `take_leadership_ledger_index`.
    pub fn new(
        group: &str,
        from: &str,
        to: &str,
        term: Term,
        take_leadership_ledger_index: Option<Index>,
    ) -> Self {
        LeadershipTransferRequest {
            code: DLedgerCode::SUCCESS,
            group: Some(group.to_owned()),
            leader_id: Some(from.to_owned()),
            local_id: Some(from.to_owned()),
            remote_id: Some(to.to_owned()),
            take_leadership_ledger_index: Index::to_wire(take_leadership_ledger_index),
            term: term.raw(),
            transfer_id: Some(from.to_owned()),
            transferee_id: Some(to.to_owned()),
        }
    }

    /// The asking leader's term (see [`Common::term`] for negatives).
    pub fn term(&self) -> Option<Term> {
        loose_term(self.term)
    }

    /// The index the transferee must hold; `None` for none (or a malformed negative: either
    /// way every log qualifies).
    pub fn take_leadership_ledger_index(&self) -> Option<Index> {
        loose_index(self.take_leadership_ledger_index)
    }
}

/// Any DLedger request the core handles.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Request {
    Vote(VoteRequest),
    HeartBeat(HeartBeatRequest),
    Push(PushEntryRequest),
    LeadershipTransfer(LeadershipTransferRequest),
}

/// Id of an outbound call, chosen by the caller (the core) and echoed back with its outcome.
pub type CallId = u64;

/// Why an outbound call produced no response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallFailure {
    /// No answer within the RPC timeout.
    Timeout,
    /// Connection failed or was refused.
    Network,
}

/// Any DLedger response the core produces or consumes.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Response {
    Vote(VoteResponse),
    HeartBeat(HeartBeatResponse),
    Push(PushEntryResponse),
    LeadershipTransfer(LeadershipTransferResponse),
}

/// Error decoding a request/response body.
#[derive(Debug)]
pub struct DecodeError {
    /// Remoting request code the body was decoded for.
    pub request_code: i32,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "bad DLedger body for code {}: {}",
            self.request_code, self.reason
        )
    }
}

impl std::error::Error for DecodeError {}

fn decode<'a, T: Deserialize<'a>>(code: i32, body: &'a [u8]) -> Result<T, DecodeError> {
    serde_json::from_slice(body).map_err(|e| DecodeError {
        request_code: code,
        reason: e.to_string(),
    })
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Serializing these plain structs into a Vec cannot fail (no maps with non-string keys,
    // no custom errors); fall back to an empty body rather than panicking.
    serde_json::to_vec(v).unwrap_or_default()
}

impl Request {
    /// Remoting request code for this request.
    pub fn request_code(&self) -> i32 {
        match self {
            Request::Vote(_) => REQUEST_CODE_VOTE,
            Request::HeartBeat(_) => REQUEST_CODE_HEART_BEAT,
            Request::Push(_) => REQUEST_CODE_PUSH,
            Request::LeadershipTransfer(_) => REQUEST_CODE_LEADERSHIP_TRANSFER,
        }
    }
    /// JSON body of this request.
    pub fn encode_body(&self) -> Vec<u8> {
        match self {
            Request::Vote(r) => encode(r),
            Request::HeartBeat(r) => encode(r),
            Request::Push(r) => super::push_json::encode_push_request(r),
            Request::LeadershipTransfer(r) => encode(r),
        }
    }
    /// Decode a request body received with remoting `code`; `Ok(None)` for codes the
    /// core does not handle (the runtime answers REQUEST_CODE_NOT_SUPPORTED).
    pub fn decode_body(code: i32, body: &[u8]) -> Result<Option<Request>, DecodeError> {
        Self::decode_body_in(code, body, &mut bytes::BytesMut::new())
    }

    /// As [`Request::decode_body`], with PUSH entry bodies decoded into memory taken from
    /// `scratch` (reused from one push to the next once the previous entries are dropped).
    pub fn decode_body_in(
        code: i32,
        body: &[u8],
        scratch: &mut bytes::BytesMut,
    ) -> Result<Option<Request>, DecodeError> {
        Ok(Some(match code {
            REQUEST_CODE_VOTE => Request::Vote(decode(code, body)?),
            REQUEST_CODE_HEART_BEAT => Request::HeartBeat(decode(code, body)?),
            REQUEST_CODE_PUSH => Request::Push(
                match super::push_json::decode_push_request_in(body, scratch) {
                    Some(r) => r,
                    None => decode(code, body)?,
                },
            ),
            REQUEST_CODE_LEADERSHIP_TRANSFER => Request::LeadershipTransfer(decode(code, body)?),
            _ => return Ok(None),
        }))
    }
}

impl Response {
    /// JSON body of this response (sent with remoting code 200).
    pub fn encode_body(&self) -> Vec<u8> {
        match self {
            Response::Vote(r) => encode(r),
            Response::HeartBeat(r) => encode(r),
            Response::Push(r) => encode(r),
            Response::LeadershipTransfer(r) => encode(r),
        }
    }
    /// Decode the body of a response to a request sent with remoting `request_code`.
    pub fn decode_body(request_code: i32, body: &[u8]) -> Result<Response, DecodeError> {
        Ok(match request_code {
            REQUEST_CODE_VOTE => Response::Vote(decode(request_code, body)?),
            REQUEST_CODE_HEART_BEAT => Response::HeartBeat(decode(request_code, body)?),
            REQUEST_CODE_PUSH => Response::Push(decode(request_code, body)?),
            REQUEST_CODE_LEADERSHIP_TRANSFER => {
                Response::LeadershipTransfer(decode(request_code, body)?)
            }
            _ => {
                return Err(DecodeError {
                    request_code,
                    reason: "not a DLedger request code".into(),
                })
            }
        })
    }
    /// The `code` member.
    pub fn code(&self) -> DLedgerCode {
        match self {
            Response::Vote(r) => r.code,
            Response::HeartBeat(r) | Response::LeadershipTransfer(r) => r.code,
            Response::Push(r) => r.code,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOTE_REQ: &str = r#"{"code":200,"group":"RaftNode00","leaderId":"n0","ledgerEndIndex":-1,"ledgerEndTerm":-1,"localId":"n0","remoteId":"n1","term":1}"#;
    const VOTE_RESP: &str = r#"{"code":200,"group":"RaftNode00","leaderId":"n0","localId":"n0","remoteId":"n1","term":1,"voteResult":"ACCEPT"}"#;
    const HB_REQ: &str = r#"{"code":200,"group":"RaftNode00","leaderId":"n0","localId":"n0","remoteId":"n1","term":3}"#;
    const PUSH_RESP: &str = r#"{"beginIndex":0,"code":200,"count":1,"endIndex":0,"group":"RaftNode00","index":0,"term":1}"#;
    const BODY_B64: &str = "AAAAu9qjIKd30YmCAAAAAQAAAAAAAAAAAAAABQAAAAAAAAAwAAAAAAAAAYvP5WgAwKgACgAA1DEAAAGLz+Voe8CoABQAAHi/AAAAAAAAAAAAAAAAAAAABUhlbGxvCVRvcGljVGVzdABSQ0xVU1RFUgFSYWZ0Q2x1c3RlcgJUQUdTAVRhZ0ECVU5JUV9LRVkBQzBBODAwMEExRjk0MThCNEFBQzIwMDAwMDAwMDAwMDACV0FJVAF0cnVlAg==";

    #[test]
    fn entry_bodies_are_canonical_padded_base64_both_ways() {
        let body = |json: &str| {
            serde_json::from_str::<DLedgerEntry>(&format!(r#"{{"body":{json}}}"#)).map(|e| e.body)
        };
        assert_eq!(body(r#""QQ==""#).unwrap(), Bytes::from_static(b"A"));
        assert_eq!(body(r#""QUI=""#).unwrap(), Bytes::from_static(b"AB"));
        assert_eq!(body(r#""QUJD""#).unwrap(), Bytes::from_static(b"ABC"));
        assert_eq!(body("null").unwrap(), Bytes::new());
        // Not canonical: bits under the padding, missing padding, padding inside, bad symbol.
        for bad in [r#""QR==""#, r#""QQ""#, r#""QQ==QUJD""#, r#""QU$D""#] {
            assert!(body(bad).is_err(), "{bad} was accepted");
        }
        let sample =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, BODY_B64).unwrap();
        let e = DLedgerEntry {
            body: Bytes::from(sample.clone()),
            ..serde_json::from_str("{}").unwrap()
        };
        let json = serde_json::to_string(&e).unwrap();
        assert!(json.contains(&format!(r#""body":"{BODY_B64}""#)), "{json}");
        assert_eq!(body(&format!(r#""{BODY_B64}""#)).unwrap(), sample);
    }

    #[test]
    fn vote_request_matches_spec_example_byte_for_byte() {
        let r = Request::decode_body(REQUEST_CODE_VOTE, VOTE_REQ.as_bytes())
            .unwrap()
            .unwrap();
        let Request::Vote(v) = &r else {
            panic!("not a vote")
        };
        assert_eq!(v.term, 1);
        assert_eq!(v.ledger_end_index, -1);
        assert!(!v.pre_vote);
        assert_eq!(String::from_utf8(r.encode_body()).unwrap(), VOTE_REQ);
    }

    #[test]
    fn vote_response_matches_spec_example_and_accepts_ordinals() {
        let r = Response::decode_body(REQUEST_CODE_VOTE, VOTE_RESP.as_bytes()).unwrap();
        let Response::Vote(v) = &r else {
            panic!("not a vote")
        };
        assert_eq!(v.vote_result, VoteResult::ACCEPT);
        assert_eq!(String::from_utf8(r.encode_body()).unwrap(), VOTE_RESP);
        let by_ordinal: VoteResponse = serde_json::from_str(r#"{"voteResult":6}"#).unwrap();
        assert_eq!(
            by_ordinal.vote_result,
            VoteResult::REJECT_ALREADY_HAS_LEADER
        );
        assert_eq!(by_ordinal.term, -1);
        assert_eq!(by_ordinal.code, DLedgerCode::SUCCESS);
    }

    #[test]
    fn heartbeat_round_trips_and_success_is_minimal() {
        let r = Request::decode_body(REQUEST_CODE_HEART_BEAT, HB_REQ.as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(String::from_utf8(r.encode_body()).unwrap(), HB_REQ);
        let ok = Response::HeartBeat(Common::default());
        assert_eq!(ok.encode_body(), br#"{"code":200,"term":-1}"#);
    }

    #[test]
    fn push_append_matches_spec_example() {
        let expected = format!(
            concat!(
                r#"{{"batch":false,"batchEntry":[],"code":200,"commitIndex":-1,"count":1,"#,
                r#""entry":{{"body":"{}","bodyCrc":0,"chainCrc":0,"channel":0,"index":0,"magic":1,"pos":0,"size":235,"term":1}},"#,
                r#""firstEntryIndex":0,"group":"RaftNode00","lastEntryIndex":0,"leaderId":"n0","localId":"n0","#,
                r#""remoteId":"n1","term":1,"totalSize":0,"type":"APPEND"}}"#
            ),
            BODY_B64
        );
        let r = Request::decode_body(REQUEST_CODE_PUSH, expected.as_bytes())
            .unwrap()
            .unwrap();
        let Request::Push(p) = &r else {
            panic!("not a push")
        };
        assert_eq!(p.push_type, PushType::APPEND);
        assert_eq!(p.count(), 1);
        let e = p.entries()[0].to_log_entry().unwrap();
        assert_eq!(e.body.len(), 187);
        assert_eq!(String::from_utf8(r.encode_body()).unwrap(), expected);
    }

    #[test]
    fn push_batch_emits_derived_members_and_ignores_them_on_input() {
        let e = |i: u64| {
            DLedgerEntry::from(&LogEntry {
                index: Index(i),
                term: Term(2),
                pos: Pos(i * 50),
                body: Bytes::from_static(b"ab"),
            })
        };
        let req = PushEntryRequest {
            batch_entry: vec![e(3), e(4)],
            code: DLedgerCode::SUCCESS,
            commit_index: 2,
            entry: None,
            group: Some("g".into()),
            leader_id: Some("n0".into()),
            local_id: Some("n0".into()),
            remote_id: Some("n1".into()),
            term: 2,
            push_type: PushType::APPEND,
        };
        let json = String::from_utf8(Request::Push(req.clone()).encode_body()).unwrap();
        assert!(json.starts_with(r#"{"batch":true,"#), "{json}");
        assert!(
            json.contains(r#""count":2,"firstEntryIndex":3,"group":"g","lastEntryIndex":4"#),
            "{json}"
        );
        assert!(
            json.contains(r#""totalSize":100,"type":"APPEND"}"#),
            "{json}"
        );
        let back = Request::decode_body(REQUEST_CODE_PUSH, json.as_bytes())
            .unwrap()
            .unwrap();
        assert_eq!(back, Request::Push(req));
    }

    #[test]
    fn push_response_matches_spec_example() {
        let r = Response::decode_body(REQUEST_CODE_PUSH, PUSH_RESP.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(r.encode_body()).unwrap(), PUSH_RESP);
        let commit: PushEntryResponse =
            serde_json::from_str(r#"{"code":406,"type":"x","unknown":[1]}"#).unwrap();
        assert_eq!(commit.code, DLedgerCode::INCONSISTENT_STATE);
        assert_eq!(commit.index, None);
        assert_eq!(commit.begin_index, -1);
    }

    #[test]
    fn transfer_and_garbage() {
        let t = LeadershipTransferRequest {
            code: DLedgerCode::SUCCESS,
            group: Some("g".into()),
            leader_id: None,
            local_id: Some("n0".into()),
            remote_id: Some("n1".into()),
            take_leadership_ledger_index: 9,
            term: 4,
            transfer_id: Some("n0".into()),
            transferee_id: Some("n1".into()),
        };
        let json = Request::LeadershipTransfer(t.clone()).encode_body();
        assert_eq!(
            String::from_utf8(json.clone()).unwrap(),
            r#"{"code":200,"group":"g","localId":"n0","remoteId":"n1","takeLeadershipLedgerIndex":9,"term":4,"transferId":"n0","transfereeId":"n1"}"#
        );
        assert_eq!(
            Request::decode_body(REQUEST_CODE_LEADERSHIP_TRANSFER, &json).unwrap(),
            Some(Request::LeadershipTransfer(t))
        );
        assert!(Request::decode_body(REQUEST_CODE_PUSH, b"{\"type\":\"NOPE\"}").is_err());
        assert!(Request::decode_body(REQUEST_CODE_VOTE, b"\xff").is_err());
        assert_eq!(Request::decode_body(50001, b"{}").unwrap(), None);
        let bad_entry = DLedgerEntry {
            size: 7,
            ..DLedgerEntry::from(&LogEntry {
                index: Index(0),
                term: Term(0),
                pos: Pos(0),
                body: Bytes::new(),
            })
        };
        assert!(bad_entry.to_log_entry().is_none());
    }
}
