//! Goal: RELIABILITY.md §6 FZ-04 and FZ-05 (and G7) against a live, in-process 3-member
//! DLedger broker group on 127.0.0.1: no request, well-formed or not, crashes a member,
//! stops a queue, loses an acknowledged message or makes the members disagree.
//!
//! Method (FZ-04, `fuzz_requests_*`): a seeded generator writes 1-3 requests per case to the
//! leader (and some to followers): known request codes with mutated extFields (missing,
//! wrong type, huge, negative, integer overflow, invalid UTF-8, stray property separators,
//! transaction sysFlag bits, batch flags), random or malformed bodies (batch element layouts
//! cut or lying about their lengths, oversize bodies, bad heartbeat / lock / group JSON),
//! unknown codes, the oneway flag, JSON and ROCKETMQ headers, malformed frames written raw
//! (bad lengths, unknown serialize type, invalid UTF-8, garbage JSON, cut frames), and now
//! and then a case's requests pipelined on one connection. Checked for each request: a
//! well-formed request is answered within its timeout with a known response code (a oneway
//! one is not answered); a malformed complete frame is answered or its connection closed,
//! never left hanging; a rejected send wrote nothing to the log. After each case: a
//! well-formed SEND_MESSAGE_V2 to every queue the case touched is acknowledged and pullable
//! at its offset, those queues are identical on all three members (units and record bytes),
//! and no panic happened anywhere in the process. Every 20 cases and at the end: all queues
//! of all members agree, every control message is still readable at its offset everywhere,
//! and topic configs and consumer offsets agree (they go through the log).
//!
//! Method (FZ-05, `fuzz_dledger_*`): forged VOTE / HEART_BEAT / PUSH / LEADERSHIP_TRANSFER /
//! METADATA (and unserved APPEND / GET / PULL, unknown codes, malformed frames) to every
//! member's DLedger port, in rounds. "Harmless" rounds (unknown group, unknown remote or
//! leader id, garbage bodies, stale terms, inconsistent entries under the current leader's
//! name: rewrites of committed entries, TRUNCATE below the committed index, wrong positions,
//! gaps, far-away and oversized batches, indexes at the top of their range) must leave every
//! member's persisted and current term and the leader unchanged, and RPCs for another group
//! or member are answered UNKNOWN_GROUP / UNKNOWN_MEMBER. "Disruptive" rounds (newer terms
//! from known members, up to i64::MAX, and admin leadership transfers) may cause elections.
//! After every round: no panic, terms never went back, one stable leader, a control send is
//! acknowledged and pullable on every member, every message acknowledged before is still
//! readable at its offset on every member, and all queues agree.
//!
//! Replay and tuning (environment): `FUZZ_SEED` (printed by every run), `FUZZ_CASES` /
//! `FUZZ_ROUNDS`, `FUZZ_CASE=<n>` (only case or round n of the seed), `FUZZ_VERBOSE=1` (every
//! request and answer), `FUZZ_KEEP_GOING=1` (report every failing case, not just the first),
//! `FUZZ_SKIP_CODES=215,36` (never generate these codes, to look past a known failure).
//! Long sweeps: `FUZZ_CASES=20000 cargo test -p broker --test fuzz_requests -- --ignored`.
//!
//! The `regression_*` tests are the failures the fuzzers found, minimized.

mod fuzz_common;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use fuzz_common::{
    call_once, check_acked_everywhere, check_metadata_agrees, check_queues_agree, control_send,
    create_topic, env_u64, install_panic_counter, opaque, panics, pull_acked, read_acked, seed,
    Acked, Group, GroupOptions, RawConn, Reply, Rng, CLUSTER, GROUP, REQUEST_TIMEOUT, SERIAL,
};
use remoting::{RemotingCommand, RequestCode, ResponseCode, SerializeType};

// =============================================================================================
// FZ-04: request-level fuzz
// =============================================================================================

/// Topics the fuzzer writes to and the control sends check.
const POOL: [&str; 3] = ["FzA", "FzB", "FzC"];
/// Queues per pool topic (the control sends re-create the topics with this many).
const QUEUES: i32 = 8;
/// Default cases of the CI run (about 15-25 s in a debug build on two cores).
const DEFAULT_CASES: u64 = 2000;
/// Cases of the long (ignored) sweep.
const LONG_CASES: u64 = 50_000;

/// An extFields value: text, or bytes that are not UTF-8 (forces a raw frame).
#[derive(Clone, Debug)]
enum Val {
    Text(String),
    Raw(Vec<u8>),
}

/// How a request goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Enc {
    Json,
    RocketMq,
    /// JSON header written by hand (may hold invalid UTF-8).
    RawJson,
    /// ROCKETMQ header written by hand (may hold invalid UTF-8).
    RawBinary,
    Mangled(Mangle),
}

/// Frame-level damage applied to an otherwise valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mangle {
    /// Header length larger than the frame.
    HeaderLenTooBig,
    /// Serialize-type byte 2..=255.
    UnknownSerializeType,
    /// Negative total length.
    NegativeLength,
    /// Total length above the 16 MiB frame limit.
    TooLong,
    /// Frame cut short, then the connection closed.
    Truncated,
    /// A few header bytes flipped (lengths intact).
    FlipHeader,
    /// Header replaced by broken or wrongly typed JSON (lengths consistent).
    GarbageJson,
}

/// One generated request.
#[derive(Clone, Debug)]
struct Req {
    target: usize,
    code: i32,
    ext: Vec<(String, Val)>,
    body: Vec<u8>,
    oneway: bool,
    enc: Enc,
    /// Pool queues the request may have written to (control sends go there).
    touched: BTreeSet<(String, i32)>,
    /// Bytes only this request's messages carry: must not be in the log if it was rejected.
    marker: Option<Vec<u8>>,
    /// A transaction half message is being sent (its answer is remembered).
    half: Option<(String, String, i32)>,
    /// What the generator did, for the failure report.
    notes: Vec<String>,
}

impl Req {
    fn new(target: usize, code: i32) -> Req {
        Req {
            target,
            code,
            ext: Vec::new(),
            body: Vec::new(),
            oneway: false,
            enc: Enc::Json,
            touched: BTreeSet::new(),
            marker: None,
            half: None,
            notes: Vec::new(),
        }
    }

    fn set(&mut self, k: &str, v: impl Into<String>) {
        let v = v.into();
        match self.ext.iter_mut().find(|(key, _)| key == k) {
            Some(e) => e.1 = Val::Text(v),
            None => self.ext.push((k.to_owned(), Val::Text(v))),
        }
    }

    fn text(&self, k: &str) -> Option<&str> {
        self.ext.iter().find_map(|(key, v)| match v {
            Val::Text(t) if key == k => Some(t.as_str()),
            _ => None,
        })
    }

    fn touch_pool(&mut self, topic: Option<&str>, queue: Option<i64>) {
        let Some(t) = topic.filter(|t| POOL.contains(t)) else {
            return;
        };
        match queue {
            Some(q) if (0..i64::from(QUEUES)).contains(&q) => {
                self.touched.insert((t.to_owned(), q as i32));
            }
            // The broker picks a queue (negative id) or the id is refused: check them all.
            _ => {
                for q in 0..QUEUES {
                    self.touched.insert((t.to_owned(), q));
                }
            }
        }
    }

    /// One line for the failure report (long values shortened).
    fn describe(&self) -> String {
        let short = |s: &str| {
            if s.len() > 80 {
                format!("{:?}...({} bytes)", prefix(s, 60), s.len())
            } else {
                format!("{s:?}")
            }
        };
        let ext: Vec<String> = self
            .ext
            .iter()
            .map(|(k, v)| match v {
                Val::Text(t) => format!("{k}={}", short(t)),
                Val::Raw(b) => format!("{k}=raw{:?}", &b[..b.len().min(40)]),
            })
            .collect();
        let body = if self.body.len() > 64 {
            format!("{} bytes {:?}...", self.body.len(), &self.body[..48])
        } else {
            format!("{:?}", String::from_utf8_lossy(&self.body))
        };
        format!(
            "-> n{} code {}{} {:?} ext {{{}}} body {} notes {:?}",
            self.target,
            self.code,
            if self.oneway { " ONEWAY" } else { "" },
            self.enc,
            ext.join(", "),
            body,
            self.notes
        )
    }
}

/// The longest prefix of `s` of at most `n` bytes that ends on a character boundary.
fn prefix(s: &str, n: usize) -> &str {
    let mut at = n.min(s.len());
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    &s[..at]
}

/// Nasty replacements for any extFields value.
fn nasty_value(rng: &mut Rng) -> String {
    match rng.below(22) {
        0 => String::new(),
        1 => "abc".into(),
        2 => "-1".into(),
        3 => i32::MIN.to_string(),
        4 => "2147483648".into(),
        5 => "-2147483649".into(),
        6 => i64::MAX.to_string(),
        7 => "9223372036854775808".into(),
        8 => i64::MIN.to_string(),
        9 => "-9223372036854775809".into(),
        10 => "1.5".into(),
        11 => "4.0".into(),
        12 => "1e3".into(),
        13 => "NaN".into(),
        14 => " 7".into(),
        15 => "0x10".into(),
        16 => "true".into(),
        17 => "\u{1}\u{2}\u{1}".into(),
        18 => "9".repeat(1000 + rng.below(4000) as usize),
        19 => rng.some_text(10_000, 20_000),
        20 => "é漢字🦀\u{0}\"\\".into(),
        _ => rng.range(-100, 100).to_string(),
    }
}

/// Bytes that are not UTF-8.
fn invalid_utf8(rng: &mut Rng) -> Vec<u8> {
    let mut v = rng.some_text(0, 8).into_bytes();
    let bad: [&[u8]; 5] = [
        b"\xff",
        b"\xc3",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\xf8\x88\x80\x80\x80",
    ];
    let b: &[u8] = bad[rng.below(bad.len() as u64) as usize];
    v.extend_from_slice(b);
    v.extend(rng.some_text(0, 8).into_bytes());
    v
}

fn pick_topic(rng: &mut Rng) -> String {
    if rng.chance(88) {
        return (*rng.pick(&POOL)).to_owned();
    }
    let weird = [
        String::new(),
        "TBW102".into(),
        "SCHEDULE_TOPIC_XXXX".into(),
        "RMQ_SYS_TRANS_HALF_TOPIC".into(),
        "RMQ_SYS_TRANS_OP_HALF_TOPIC".into(),
        "%RETRY%FzG1".into(),
        "%DLQ%FzG1".into(),
        CLUSTER.into(),
        GROUP.into(),
        "a b".into(),
        "T\u{1}x".into(),
        "x".repeat(128),
        "%RETRY%".to_owned() + &"y".repeat(250),
        "FzNew".into(),
    ];
    rng.pick(&weird).clone()
}

fn pick_queue(rng: &mut Rng) -> i64 {
    match rng.below(20) {
        0 => -1,
        1 => i64::from(QUEUES),
        2 => 9999,
        3 => i64::from(i32::MIN),
        4 => i64::from(i32::MAX),
        _ => rng.range(0, i64::from(QUEUES)),
    }
}

fn pick_group(rng: &mut Rng) -> String {
    let g = [
        "FzG1",
        "FzG2",
        "FzG3",
        "",
        "%RETRY%x",
        "g\u{1}",
        "CID_ONSAPI_OWNER",
    ];
    if rng.chance(85) {
        (*rng.pick(&g[..3])).to_owned()
    } else {
        (*rng.pick(&g)).to_owned()
    }
}

fn pick_sys_flag(rng: &mut Rng) -> i32 {
    match rng.below(16) {
        0 => 1,
        1 => 2,
        2 => 4,
        3 => 8,
        4 => 12,
        5 => 8 | 2,
        6 => -1,
        7 => rng.next_u64() as i32,
        _ => 0,
    }
}

fn pick_offset(rng: &mut Rng) -> i64 {
    match rng.below(10) {
        0 => -1,
        1 => i64::MAX,
        2 => i64::MIN,
        3 => 1 << 40,
        _ => rng.range(0, 50),
    }
}

fn pick_timestamp(rng: &mut Rng) -> i64 {
    let now = broker::context::now_ms();
    match rng.below(8) {
        0 => 0,
        1 => -1,
        2 => i64::MAX,
        3 => i64::MIN,
        4 => now + 3_600_000,
        _ => now - rng.range(0, 60_000),
    }
}

/// Encodes properties `k\x01v\x02...`.
fn encode_props(pairs: &[(String, String)]) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(k);
        s.push('\u{1}');
        s.push_str(v);
        s.push('\u{2}');
    }
    s
}

/// A properties string: usually sane, sometimes with delay levels, transaction markers, other
/// reserved keys, stray separators, missing separators or oversize values.
fn gen_props(rng: &mut Rng, world: &mut World, notes: &mut Vec<String>) -> (String, bool) {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let tags = ["TagA", "TagB", "", "a||b", "*", "t\u{3}"];
    if rng.chance(80) {
        pairs.push(("TAGS".into(), (*rng.pick(&tags)).to_owned()));
    }
    if rng.chance(60) {
        let k = format!("key{}", rng.below(20));
        world.keys.push(k.clone());
        pairs.push(("KEYS".into(), k));
    }
    let mut half = false;
    match rng.below(30) {
        0..=2 => {
            let level = *rng.pick(&[
                "1",
                "2",
                "3",
                "0",
                "-1",
                "18",
                "19",
                "99",
                "x",
                "2147483647",
            ]);
            pairs.push(("DELAY".into(), level.to_owned()));
            notes.push(format!("DELAY={level}"));
        }
        3 | 4 => {
            pairs.push(("TRAN_MSG".into(), "true".into()));
            pairs.push(("PGROUP".into(), "FzTxPG".into()));
            notes.push("half".into());
            half = true;
        }
        5 => pairs.push(("REAL_TOPIC".into(), "FzB".into())),
        6 => pairs.push(("REAL_QID".into(), "-5".into())),
        7 => pairs.push(("CLUSTER".into(), "Other".into())),
        8 => pairs.push((
            "UNIQ_KEY".into(),
            nasty_value(rng).chars().take(200).collect(),
        )),
        9 => pairs.push(("__STARTDELIVERTIME".into(), pick_timestamp(rng).to_string())),
        10 => pairs.push((
            "MAX_RECONSUME_TIMES".into(),
            nasty_value(rng).chars().take(30).collect(),
        )),
        11 => pairs.push(("RETRY_TOPIC".into(), "FzA".into())),
        12 => pairs.push(("SCHEDULE_ORIGIN".into(), "1,2,3".into())),
        _ => {}
    }
    let mut s = encode_props(&pairs);
    if rng.chance(20) {
        let what = rng.below(9);
        notes.push(format!("props mutation {what}"));
        match what {
            0 => {
                let mut at = rng.below(s.len() as u64 + 1) as usize;
                while !s.is_char_boundary(at) {
                    at -= 1;
                }
                s.insert(at, *rng.pick(&['\u{1}', '\u{2}']));
            }
            1 => {
                s.pop();
            }
            2 => s.push_str("LONELY"),
            3 => s.push_str("\u{1}emptykey\u{2}"),
            4 => s.push_str(&format!("TAGS\u{1}dup{}\u{2}", rng.below(9))),
            5 => s.push_str(&format!("BIG\u{1}{}\u{2}", "v".repeat(33_000))),
            6 => s = "\u{2}\u{2}\u{1}\u{1}".into(),
            7 => s.push_str("K\u{1}é漢\u{2}"),
            _ => s = rng.some_text(0, 60),
        }
    }
    (s, half)
}

/// A message body carrying `marker`.
fn marked_body(rng: &mut Rng, marker: &[u8]) -> Vec<u8> {
    let mut b = marker.to_vec();
    let n = rng.below(300) as usize;
    b.extend(rng.bytes(n));
    b
}

/// One client-side batch element (message-format.md §7.1).
fn batch_element(out: &mut BytesMut, flag: i32, body: &[u8], props: &[u8]) {
    broker::message::batch::encode_batch_element(out, flag, body, props);
}

/// A batch body: 1-6 marked elements, sometimes damaged.
fn gen_batch_body(
    rng: &mut Rng,
    world: &mut World,
    marker: &[u8],
    max_body: usize,
    notes: &mut Vec<String>,
) -> Vec<u8> {
    let mut out = BytesMut::new();
    let many = rng.chance(5);
    let n = if many {
        100 + rng.below(200)
    } else {
        1 + rng.below(6)
    };
    for _ in 0..n {
        let body = marked_body(rng, marker);
        let (props, _) = gen_props(rng, world, notes);
        batch_element(&mut out, rng.below(3) as i32, &body, props.as_bytes());
    }
    let mut v = out.to_vec();
    if many {
        notes.push(format!("batch of {n}"));
    }
    if rng.chance(40) {
        let what = rng.below(10);
        notes.push(format!("batch mutation {what}"));
        match what {
            0 => {
                let at = rng.below(v.len() as u64) as usize;
                v.truncate(at);
            }
            1 => {
                let nasty = [0i32, -1, 1, 21, 22, i32::MAX, i32::MIN];
                let t = *rng.pick(&nasty);
                v[0..4].copy_from_slice(&t.to_be_bytes());
            }
            2 => {
                let t = i32::from_be_bytes([v[0], v[1], v[2], v[3]])
                    + if rng.chance(50) { 1 } else { -1 };
                v[0..4].copy_from_slice(&t.to_be_bytes());
            }
            3 => v[16..20].copy_from_slice(&(-1i32).to_be_bytes()),
            4 => v[16..20].copy_from_slice(&i32::MAX.to_be_bytes()),
            5 => {
                let body_len = i32::from_be_bytes([v[16], v[17], v[18], v[19]]) as usize;
                let at = 20 + body_len;
                if at + 2 <= v.len() {
                    v[at..at + 2].copy_from_slice(&i16::MAX.to_be_bytes());
                }
            }
            6 => v.extend(rng.some_bytes(1, 30)),
            7 => v = rng.some_bytes(0, 200),
            8 => v.clear(),
            _ => {
                let mut big = BytesMut::new();
                let mut body = marker.to_vec();
                body.resize(max_body + 1, b'z');
                batch_element(&mut big, 0, &body, b"TAGS\x01big\x02");
                v.extend_from_slice(&big);
            }
        }
    }
    v
}

/// State the generator builds on: what earlier requests stored.
#[derive(Default)]
struct World {
    /// Physical offsets of records fuzz sends stored.
    phys: Vec<i64>,
    /// Transaction half messages: (producer group, half queue offset, phys, uniq key, topic, queue).
    halves: Vec<(String, i64, i64, String, String, i32)>,
    /// KEYS values used.
    keys: Vec<String>,
    /// Control messages acknowledged (each must stay readable everywhere).
    acked: Vec<Acked>,
}

/// The send header keys of `code`: long names for SEND_MESSAGE, letters otherwise.
fn send_keys(code: i32) -> [&'static str; 13] {
    if code == 10 {
        [
            "producerGroup",
            "topic",
            "defaultTopic",
            "defaultTopicQueueNums",
            "queueId",
            "sysFlag",
            "bornTimestamp",
            "flag",
            "properties",
            "reconsumeTimes",
            "unitMode",
            "maxReconsumeTimes",
            "batch",
        ]
    } else {
        [
            "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m",
        ]
    }
}

/// Generation context of one request.
struct Gen<'a> {
    rng: &'a mut Rng,
    world: &'a mut World,
    marker: Vec<u8>,
    max_body: usize,
}

impl Gen<'_> {
    fn send(&mut self, r: &mut Req) {
        let k = send_keys(r.code);
        let batch = r.code == 320 || self.rng.chance(8);
        let topic = pick_topic(self.rng);
        let queue = pick_queue(self.rng);
        r.set(k[0], pick_group(self.rng));
        r.set(k[1], topic.clone());
        r.set(
            k[2],
            *self
                .rng
                .pick(&["TBW102", "TBW102", "TBW102", "FzA", "Nope", ""]),
        );
        r.set(
            k[3],
            self.rng
                .pick(&["8", "8", "4", "1", "0", "-3", "100000"])
                .to_string(),
        );
        r.set(k[4], queue.to_string());
        r.set(k[5], pick_sys_flag(self.rng).to_string());
        r.set(k[6], pick_timestamp(self.rng).to_string());
        r.set(k[7], self.rng.range(-2, 5).to_string());
        let mut notes = Vec::new();
        let (props, half) = gen_props(self.rng, self.world, &mut notes);
        r.notes.extend(notes);
        if self.rng.chance(95) {
            r.set(k[8], props);
        }
        if self.rng.chance(70) {
            let rt = *self
                .rng
                .pick(&[0i64, 0, 0, 1, 3, 17, -1, i64::from(i32::MAX)]);
            r.set(k[9], rt.to_string());
        }
        if self.rng.chance(50) {
            r.set(k[10], *self.rng.pick(&["false", "true", "x"]));
        }
        if self.rng.chance(20) {
            r.set(
                k[11],
                self.rng.pick(&["16", "0", "-1", "2147483647"]).to_string(),
            );
        }
        if batch || self.rng.chance(60) {
            r.set(k[12], if batch { "true" } else { "false" });
        }
        r.marker = Some(self.marker.clone());
        r.body = if batch {
            r.notes.push("batch".into());
            let mut notes = Vec::new();
            let b = gen_batch_body(
                self.rng,
                self.world,
                &self.marker,
                self.max_body,
                &mut notes,
            );
            r.notes.extend(notes);
            b
        } else {
            match self.rng.below(20) {
                0 => Vec::new(),
                1 => {
                    r.notes.push("oversize body".into());
                    let mut b = self.marker.clone();
                    b.resize(self.max_body + 1, b'o');
                    b
                }
                2 => {
                    r.notes.push("1 MiB body".into());
                    let mut b = self.marker.clone();
                    b.resize(1 << 20, b'm');
                    b
                }
                _ => marked_body(self.rng, &self.marker),
            }
        };
        if half {
            r.half = Some(("FzTxPG".into(), topic.clone(), queue as i32));
        }
        r.touch_pool(Some(&topic), Some(queue));
    }

    fn pull(&mut self, r: &mut Req) {
        let flag = self.rng.below(32) as i32;
        r.set("consumerGroup", pick_group(self.rng));
        r.set("topic", pick_topic(self.rng));
        r.set("queueId", pick_queue(self.rng).to_string());
        r.set("queueOffset", pick_offset(self.rng).to_string());
        r.set(
            "maxMsgNums",
            self.rng
                .pick(&[1i64, 32, 0, -1, 1024, 5000, i64::from(i32::MAX)])
                .to_string(),
        );
        r.set("sysFlag", flag.to_string());
        r.set("commitOffset", pick_offset(self.rng).to_string());
        // A held pull answers after its suspend time (at most 60 s): keep holds short.
        let suspend = if flag & 0x2 != 0 {
            self.rng.range(-10, 300)
        } else {
            pick_offset(self.rng)
        };
        r.set("suspendTimeoutMillis", suspend.to_string());
        if self.rng.chance(80) {
            let subs = [
                "*",
                "TagA || TagB",
                "",
                "||",
                "a||b||",
                "TagA",
                "\u{1}",
                "*||*",
            ];
            let s = if self.rng.chance(5) {
                "T||".repeat(3000)
            } else {
                (*self.rng.pick(&subs)).to_owned()
            };
            r.set("subscription", s);
        }
        r.set("subVersion", pick_timestamp(self.rng).to_string());
        if self.rng.chance(70) {
            r.set(
                "expressionType",
                *self.rng.pick(&["TAG", "SQL92", "tag", "junk"]),
            );
        }
        if self.rng.chance(20) {
            r.set(
                "maxMsgBytes",
                self.rng.pick(&["0", "-1", "100", "2147483647"]).to_string(),
            );
        }
    }

    fn known_phys(&mut self) -> i64 {
        match (self.world.phys.is_empty(), self.rng.below(6)) {
            (false, 0..=2) => *self.rng.pick(&self.world.phys),
            (false, 3) => *self.rng.pick(&self.world.phys) + self.rng.range(-48, 49),
            _ => pick_offset(self.rng),
        }
    }

    fn fill(&mut self, r: &mut Req) {
        match r.code {
            10 | 310 | 320 => self.send(r),
            11 | 361 => self.pull(r),
            12 => {
                r.set("topic", pick_topic(self.rng));
                let key = match (self.world.keys.is_empty(), self.rng.below(3)) {
                    (false, 0 | 1) => self.rng.pick(&self.world.keys).clone(),
                    _ => nasty_value(self.rng),
                };
                r.set("key", key);
                r.set(
                    "maxNum",
                    self.rng
                        .pick(&["1", "32", "0", "-1", "2147483647"])
                        .to_string(),
                );
                r.set("beginTimestamp", pick_timestamp(self.rng).to_string());
                r.set("endTimestamp", pick_timestamp(self.rng).to_string());
                if self.rng.chance(40) {
                    r.set("_UNIQUE_KEY_QUERY", *self.rng.pick(&["true", "false"]));
                }
            }
            14 | 15 => {
                r.set("consumerGroup", pick_group(self.rng));
                let topic = pick_topic(self.rng);
                r.set("topic", topic);
                r.set("queueId", pick_queue(self.rng).to_string());
                if r.code == 15 {
                    r.set("commitOffset", pick_offset(self.rng).to_string());
                } else if self.rng.chance(50) {
                    r.set("setZeroIfNotFound", *self.rng.pick(&["true", "false"]));
                }
            }
            17 => {
                let topic = pick_topic(self.rng);
                r.set("topic", topic.clone());
                r.set("defaultTopic", "TBW102");
                let nums = [1i64, 2, 8, 8, 8, 16, 0, -1, 1024, i64::from(i32::MAX)];
                r.set("readQueueNums", self.rng.pick(&nums).to_string());
                r.set("writeQueueNums", self.rng.pick(&nums).to_string());
                r.set(
                    "perm",
                    self.rng
                        .pick(&[6i64, 6, 2, 4, 0, 7, 1, -1, 255])
                        .to_string(),
                );
                r.set(
                    "topicFilterType",
                    *self.rng.pick(&["SINGLE_TAG", "MULTI_TAG", "", "junk"]),
                );
                r.set("order", *self.rng.pick(&["false", "true"]));
                if self.rng.chance(30) {
                    r.set("topicSysFlag", self.rng.range(-1, 4).to_string());
                }
                r.touch_pool(Some(&topic), Some(self.rng.range(0, i64::from(QUEUES))));
            }
            215 => {
                // Rare: a deleted pool topic restarts its queues on the leader only.
                let topic = if self.rng.chance(30) {
                    pick_topic(self.rng)
                } else {
                    "FzGone".to_owned()
                };
                r.set("topic", topic.clone());
                r.touch_pool(Some(&topic), Some(0));
            }
            29..=32 => {
                r.set("topic", pick_topic(self.rng));
                r.set("queueId", pick_queue(self.rng).to_string());
                if r.code == 29 {
                    r.set("timestamp", pick_timestamp(self.rng).to_string());
                    if self.rng.chance(50) {
                        r.set("boundaryType", *self.rng.pick(&["lower", "UPPER", "x"]));
                    }
                }
                if r.code == 30 && self.rng.chance(30) {
                    r.set("committed", *self.rng.pick(&["true", "false"]));
                }
            }
            33 => {
                let p = self.known_phys();
                r.set("offset", p.to_string());
                if self.rng.chance(40) {
                    r.set("topic", pick_topic(self.rng));
                }
            }
            34 => r.body = self.heartbeat_body(r),
            35 => {
                r.set("clientID", "127.0.0.1@fz");
                if self.rng.chance(60) {
                    r.set("producerGroup", pick_group(self.rng));
                }
                if self.rng.chance(60) {
                    r.set("consumerGroup", pick_group(self.rng));
                }
            }
            36 => {
                let p = self.known_phys();
                r.set("offset", p.to_string());
                r.set("group", pick_group(self.rng));
                let levels = [
                    0i64,
                    0,
                    1,
                    3,
                    -1,
                    18,
                    19,
                    100,
                    i64::from(i32::MAX),
                    i64::from(i32::MIN),
                ];
                r.set("delayLevel", self.rng.pick(&levels).to_string());
                if self.rng.chance(50) {
                    r.set("originMsgId", "0A0000010000000000000000");
                }
                if self.rng.chance(50) {
                    r.set("originTopic", pick_topic(self.rng));
                }
                if self.rng.chance(40) {
                    r.set(
                        "maxReconsumeTimes",
                        self.rng.pick(&["16", "0", "-1", "2147483647"]).to_string(),
                    );
                }
            }
            37 => {
                let known = !self.world.halves.is_empty() && self.rng.chance(75);
                let (group, qoff, phys, uniq, topic, queue) = if known {
                    self.rng.pick(&self.world.halves).clone()
                } else {
                    (
                        "FzTxPG".into(),
                        pick_offset(self.rng),
                        pick_offset(self.rng),
                        "x".into(),
                        "FzA".into(),
                        0,
                    )
                };
                let state = *self.rng.pick(&[8i64, 8, 12, 12, 0, 4, -1, 99]);
                r.set(
                    "producerGroup",
                    if self.rng.chance(85) {
                        group
                    } else {
                        pick_group(self.rng)
                    },
                );
                r.set(
                    "tranStateTableOffset",
                    qoff.wrapping_add(if self.rng.chance(85) { 0 } else { 1 })
                        .to_string(),
                );
                r.set(
                    "commitLogOffset",
                    if self.rng.chance(85) {
                        phys
                    } else {
                        self.known_phys()
                    }
                    .to_string(),
                );
                r.set("commitOrRollback", state.to_string());
                if self.rng.chance(50) {
                    r.set("fromTransactionCheck", *self.rng.pick(&["true", "false"]));
                }
                r.set("msgId", uniq);
                r.oneway = self.rng.chance(50);
                if state == 8 {
                    r.touch_pool(Some(&topic), Some(i64::from(queue)));
                }
            }
            38 => r.set("consumerGroup", pick_group(self.rng)),
            200 => r.body = self.group_config_body(r),
            207 => {
                r.set("groupName", pick_group(self.rng));
                if self.rng.chance(60) {
                    r.set("cleanOffset", *self.rng.pick(&["true", "false", "x"]));
                }
            }
            41 | 42 => r.body = self.lock_body(),
            _ => {
                // Admin reads, name-server codes, unknown codes: a few random fields.
                for _ in 0..self.rng.below(4) {
                    let k =
                        (*self.rng.pick(&["topic", "queueId", "group", "offset", "x"])).to_owned();
                    let v = nasty_value(self.rng);
                    r.set(&k, v);
                }
                if self.rng.chance(30) {
                    let n = self.rng.below(2000) as usize;
                    r.body = self.rng.bytes(n);
                }
            }
        }
    }

    fn heartbeat_body(&mut self, r: &mut Req) -> Vec<u8> {
        let group = pick_group(self.rng);
        let topic = pick_topic(self.rng);
        let valid = format!(
            r#"{{"clientID":"127.0.0.1@fz{}","consumerDataSet":[{{"consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":{},"messageModel":"CLUSTERING","subscriptionDataSet":[{{"classFilterMode":false,"codeSet":[2598919],"expressionType":"TAG","subString":"TagA","subVersion":1,"tagsSet":["TagA"],"topic":{}}}],"unitMode":false}}],"heartbeatFingerprint":0,"producerDataSet":[{{"groupName":"FzPG"}}],"withoutSub":false}}"#,
            self.rng.below(3),
            serde_json::Value::from(group),
            serde_json::Value::from(topic)
        );
        let what = self.rng.below(10);
        r.notes.push(format!("heartbeat {what}"));
        match what {
            0 => self.rng.some_bytes(0, 300),
            1 => valid.as_bytes()[..self.rng.below(valid.len() as u64) as usize].to_vec(),
            2 => valid
                .replace("\"CONSUME_PASSIVELY\"", "99")
                .replace("\"CLUSTERING\"", "\"X\"")
                .into_bytes(),
            3 => format!(
                r#"{{"clientID":"c","consumerDataSet":[{}]}}"#,
                vec![r#"{"groupName":"FzG1","subscriptionDataSet":[]}"#; 500].join(",")
            )
            .into_bytes(),
            4 => "[".repeat(5000).into_bytes(),
            5 => br#"{clientID:"c",producerDataSet:[{groupName:"p"}]}"#.to_vec(),
            6 => br#"{"clientID":null,"consumerDataSet":{"a":1}}"#.to_vec(),
            _ => valid.into_bytes(),
        }
    }

    fn group_config_body(&mut self, r: &mut Req) -> Vec<u8> {
        let valid = format!(
            r#"{{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":{},"consumeFromMinEnable":true,"groupName":{},"groupSysFlag":0,"notifyConsumerIdsChangedEnable":true,"retryMaxTimes":{},"retryQueueNums":{},"whichBrokerWhenConsumeSlowly":1}}"#,
            self.rng.pick(&["true", "true", "false", "\"x\""]),
            serde_json::Value::from(pick_group(self.rng)),
            self.rng.pick(&[16i64, 0, -1, -2, i64::from(i32::MAX)]),
            self.rng.pick(&[1i64, 0, 8, -1, 100_000]),
        );
        let what = self.rng.below(8);
        r.notes.push(format!("group config {what}"));
        match what {
            0 => self.rng.some_bytes(0, 200),
            1 => valid.as_bytes()[..self.rng.below(valid.len() as u64) as usize].to_vec(),
            2 => br#"{groupName:"FzG1",retryQueueNums:1}"#.to_vec(),
            3 => br#"{"groupName":null}"#.to_vec(),
            _ => valid.into_bytes(),
        }
    }

    fn lock_body(&mut self) -> Vec<u8> {
        let mq: Vec<String> = (0..self.rng.below(5))
            .map(|_| {
                format!(
                    r#"{{"brokerName":{},"queueId":{},"topic":{}}}"#,
                    serde_json::Value::from(if self.rng.chance(80) { GROUP } else { "other" }),
                    pick_queue(self.rng),
                    serde_json::Value::from(pick_topic(self.rng))
                )
            })
            .collect();
        let valid = format!(
            r#"{{"clientId":"127.0.0.1@fz","consumerGroup":{},"mqSet":[{}],"onlyThisBroker":false}}"#,
            serde_json::Value::from(pick_group(self.rng)),
            mq.join(",")
        );
        match self.rng.below(6) {
            0 => self.rng.some_bytes(0, 100),
            1 => valid.as_bytes()[..self.rng.below(valid.len() as u64) as usize].to_vec(),
            2 => br#"{"mqSet":"nope"}"#.to_vec(),
            _ => valid.into_bytes(),
        }
    }
}

/// Request codes the generator picks from, with weights.
const CODES: &[(i32, u64)] = &[
    (310, 16),
    (10, 7),
    (320, 12),
    (11, 9),
    (361, 2),
    (12, 3),
    (14, 3),
    (15, 3),
    (17, 4),
    (215, 1),
    (29, 2),
    (30, 2),
    (31, 2),
    (32, 1),
    (33, 3),
    (34, 4),
    (35, 1),
    (36, 5),
    (37, 6),
    (38, 2),
    (41, 2),
    (42, 1),
    (200, 2),
    (207, 1),
    // Admin reads.
    (21, 1),
    (26, 1),
    (28, 1),
    (43, 1),
    (45, 1),
    (201, 1),
    // Known codes the broker does not serve (name server, 5.x, DLedger).
    (105, 1),
    (103, 1),
    (18, 1),
    (200050, 1),
    (51001, 1),
    // Unknown codes (a random one, see `gen_request`).
    (-1, 3),
];

/// `FUZZ_SKIP_CODES=215,36`: codes never generated (to look past a known failure).
fn skipped_codes() -> Vec<i32> {
    std::env::var("FUZZ_SKIP_CODES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect()
}

fn pick_code(rng: &mut Rng, skip: &[i32]) -> i32 {
    let codes: Vec<&(i32, u64)> = CODES.iter().filter(|(c, _)| !skip.contains(c)).collect();
    let total: u64 = codes.iter().map(|(_, w)| w).sum();
    let mut x = rng.below(total);
    for (c, w) in codes {
        if x < *w {
            if *c == -1 {
                let any = rng.next_u64() as i32;
                return *rng.pick(&[0, -1, 9999, 16, 44, 500, i32::MAX, i32::MIN, any]);
            }
            return *c;
        }
        x -= w;
    }
    310
}

/// One request of case `case`.
fn gen_request(
    rng: &mut Rng,
    world: &mut World,
    leader: usize,
    marker: Vec<u8>,
    max_body: usize,
    skip: &[i32],
) -> Req {
    let target = if rng.chance(82) {
        leader
    } else {
        (leader + 1 + rng.below(2) as usize) % 3
    };
    let mut r = Req::new(target, pick_code(rng, skip));
    let mut g = Gen {
        rng,
        world,
        marker,
        max_body,
    };
    g.fill(&mut r);
    let rng = g.rng;
    // extFields mutations.
    if !r.ext.is_empty() && rng.chance(55) {
        for _ in 0..1 + rng.below(3) {
            let i = rng.below(r.ext.len() as u64) as usize;
            let what = rng.below(10);
            let key = r.ext[i].0.clone();
            match what {
                0 | 1 => {
                    r.ext.remove(i);
                    r.notes.push(format!("removed {key}"));
                }
                2 => {
                    r.ext[i].1 = Val::Raw(invalid_utf8(rng));
                    r.notes.push(format!("invalid UTF-8 in {key}"));
                }
                _ => {
                    r.ext[i].1 = Val::Text(nasty_value(rng));
                    r.notes.push(format!("nasty {key}"));
                }
            }
            if r.ext.is_empty() {
                break;
            }
        }
    }
    if rng.chance(5) {
        r.ext.push((rng.text(6), Val::Text(nasty_value(rng))));
        r.notes.push("extra key".into());
    }
    if rng.chance(8) && r.code != 37 {
        r.oneway = true;
    }
    let raw = r.ext.iter().any(|(_, v)| matches!(v, Val::Raw(_)));
    r.enc = if raw {
        if rng.chance(50) {
            Enc::RawJson
        } else {
            Enc::RawBinary
        }
    } else {
        match rng.below(100) {
            0..=54 => Enc::Json,
            55..=89 => Enc::RocketMq,
            _ => Enc::Mangled(*rng.pick(&[
                Mangle::HeaderLenTooBig,
                Mangle::UnknownSerializeType,
                Mangle::NegativeLength,
                Mangle::TooLong,
                Mangle::Truncated,
                Mangle::FlipHeader,
                Mangle::GarbageJson,
            ])),
        }
    };
    r
}

// ----- wire encoding ----------------------------------------------------------------------

fn json_escape_into(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            // Bytes >= 0x80 go through as they are (invalid UTF-8 stays invalid).
            _ => out.push(b),
        }
    }
}

fn val_bytes(v: &Val) -> &[u8] {
    match v {
        Val::Text(t) => t.as_bytes(),
        Val::Raw(b) => b,
    }
}

/// A frame around `header` and `body` with serialize type `t`.
fn frame(t: u8, header: &[u8], body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(8 + header.len() + body.len());
    f.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
    f.extend_from_slice(&((u32::from(t) << 24) | header.len() as u32).to_be_bytes());
    f.extend_from_slice(header);
    f.extend_from_slice(body);
    f
}

fn flag_of(r: &Req) -> i32 {
    if r.oneway {
        2
    } else {
        0
    }
}

fn raw_json_header(r: &Req, opaque: i32) -> Vec<u8> {
    let mut h = format!("{{\"code\":{},\"extFields\":{{", r.code).into_bytes();
    for (i, (k, v)) in r.ext.iter().enumerate() {
        if i > 0 {
            h.push(b',');
        }
        h.push(b'"');
        json_escape_into(&mut h, k.as_bytes());
        h.extend_from_slice(b"\":\"");
        json_escape_into(&mut h, val_bytes(v));
        h.push(b'"');
    }
    h.extend_from_slice(
        format!(
            "}},\"flag\":{},\"language\":\"JAVA\",\"opaque\":{opaque},\"serializeTypeCurrentRPC\":\"JSON\",\"version\":401}}",
            flag_of(r)
        )
        .as_bytes(),
    );
    h
}

fn raw_binary_header(r: &Req, opaque: i32) -> Vec<u8> {
    let mut h = BytesMut::new();
    h.put_i16(r.code as i16);
    h.put_u8(0);
    h.put_i16(401);
    h.put_i32(opaque);
    h.put_i32(flag_of(r));
    h.put_i32(0);
    let mut map = BytesMut::new();
    for (k, v) in &r.ext {
        map.put_i16(k.len() as i16);
        map.put_slice(k.as_bytes());
        let v = val_bytes(v);
        map.put_i32(v.len() as i32);
        map.put_slice(v);
    }
    h.put_i32(map.len() as i32);
    h.put_slice(&map);
    h.to_vec()
}

/// The command of a request whose ext values are all text.
fn command(r: &Req, opaque: i32, t: SerializeType) -> RemotingCommand {
    let mut c = RemotingCommand::request_empty(RequestCode(r.code))
        .with_opaque(opaque)
        .with_serialize_type(t)
        .with_body(r.body.clone());
    for (k, v) in &r.ext {
        if let Val::Text(t) = v {
            c = c.with_ext_field(k.clone(), t.clone());
        }
    }
    if r.oneway {
        c = c.with_oneway();
    }
    c
}

/// What the checks expect of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Valid frame and header: answered (unless oneway) with a known code.
    Answer,
    /// Malformed complete frame: answered with a known code or the connection closed.
    AnswerOrClose,
    /// Anything but a hang of the broker (cut frames, flipped bytes).
    Nothing,
}

fn encode(r: &Req, opaque: i32, rng: &mut Rng) -> Result<(Vec<u8>, Expect), String> {
    let valid = |t| {
        command(r, opaque, t)
            .encode_to_bytes()
            .map(|b| b.to_vec())
            .map_err(|e| format!("encode: {e}"))
    };
    Ok(match r.enc {
        Enc::Json => (valid(SerializeType::Json)?, Expect::Answer),
        Enc::RocketMq => (valid(SerializeType::RocketMq)?, Expect::Answer),
        Enc::RawJson => (
            frame(0, &raw_json_header(r, opaque), &r.body),
            Expect::AnswerOrClose,
        ),
        Enc::RawBinary => (
            frame(1, &raw_binary_header(r, opaque), &r.body),
            Expect::AnswerOrClose,
        ),
        Enc::Mangled(m) => {
            let t = if rng.chance(50) {
                SerializeType::Json
            } else {
                SerializeType::RocketMq
            };
            let mut f = valid(t)?;
            let h = (u32::from_be_bytes([0, f[5], f[6], f[7]])) as usize;
            let total = f.len();
            match m {
                Mangle::HeaderLenTooBig => {
                    let bad = (total - 8 + 1 + rng.below(1000) as usize).min(0x00FF_FFFF) as u32;
                    f[5..8].copy_from_slice(&bad.to_be_bytes()[1..]);
                    (f, Expect::AnswerOrClose)
                }
                Mangle::UnknownSerializeType => {
                    f[4] = 2 + rng.below(254) as u8;
                    (f, Expect::AnswerOrClose)
                }
                Mangle::NegativeLength => {
                    f[0..4].copy_from_slice(&(-1 - rng.below(1000) as i32).to_be_bytes());
                    (f, Expect::AnswerOrClose)
                }
                Mangle::TooLong => {
                    let len = 16_777_213 + rng.below(1 << 20) as i32;
                    f[0..4].copy_from_slice(&len.to_be_bytes());
                    f.truncate(64.min(f.len()));
                    (f, Expect::AnswerOrClose)
                }
                Mangle::Truncated => {
                    let at = 1 + rng.below(total as u64 - 1) as usize;
                    f.truncate(at);
                    (f, Expect::Nothing)
                }
                Mangle::FlipHeader => {
                    for _ in 0..1 + rng.below(3) {
                        let at = 8 + rng.below(h as u64) as usize;
                        f[at] ^= 1 << rng.below(8);
                    }
                    (f, Expect::Nothing)
                }
                Mangle::GarbageJson => {
                    let garbage: &[&[u8]] = &[
                        b"{\"code\":310,\"extFields\":{\"a\":",
                        b"[1,2,3]",
                        b"{\"code\":\"x\",\"opaque\":1}",
                        b"{\"code\":310,\"opaque\":1,\"extFields\":[1]}",
                        b"\"just a string\"",
                        b"{\"code\":310,,}",
                        b"{\"code\":1e999}",
                        b"{\"code\":310,\"opaque\":99999999999999999999}",
                    ];
                    let hdr = rng.pick(garbage);
                    (frame(0, hdr, &r.body), Expect::AnswerOrClose)
                }
            }
        }
    })
}

// ----- the runner -------------------------------------------------------------------------

/// Answers after which a send may have stored something.
fn may_have_written(code: i32) -> bool {
    code == ResponseCode::SUCCESS.0
        || code == ResponseCode::SYSTEM_ERROR.0
        || code == ResponseCode::FLUSH_DISK_TIMEOUT.0
        || code == ResponseCode::FLUSH_SLAVE_TIMEOUT.0
}

fn known_code(code: i32) -> bool {
    ResponseCode(code).name().is_some()
}

struct Fz04 {
    g: Group,
    seed: u64,
    world: World,
    conns: Vec<Option<RawConn>>,
    /// Descriptions of the recent cases, for the failure report.
    history: Vec<String>,
    verbose: bool,
    skip: Vec<i32>,
}

impl Fz04 {
    async fn conn(&mut self, i: usize) -> Result<&mut RawConn, String> {
        if self.conns[i].is_none() {
            self.conns[i] = Some(RawConn::connect(self.g.members[i].addr).await?);
        }
        self.conns[i]
            .as_mut()
            .ok_or_else(|| "connection vanished".to_string())
    }

    /// A cheap well-formed request answered by every member.
    fn probe() -> RemotingCommand {
        RemotingCommand::request_empty(RequestCode::GET_MAX_OFFSET)
            .with_ext_field("topic", "FzA")
            .with_ext_field("queueId", "0")
            .with_opaque(opaque())
    }

    /// Writes one request and checks what comes back.
    async fn execute(&mut self, r: &Req, leader: usize, rng: &mut Rng) -> Result<(), String> {
        let op = opaque();
        let (bytes, expect) = match encode(r, op, rng) {
            Ok(x) => x,
            Err(e) => {
                // Only frames over 16 MiB fail to encode; nothing was sent.
                if self.verbose {
                    eprintln!("   not sent: {e}");
                }
                return Ok(());
            }
        };
        let log = std::sync::Arc::clone(self.g.members[leader].ctx().store.log());
        let end_before = log.end_index();
        let target = r.target;
        let mut answer: Option<i32> = None;
        match expect {
            Expect::Answer => {
                let conn = self.conn(target).await?;
                conn.write(&bytes).await?;
                if r.oneway {
                    let p = Self::probe();
                    match conn.call(&p, REQUEST_TIMEOUT).await? {
                        Reply::Answered(_) => {}
                        other => {
                            return Err(format!(
                                "probe after a oneway request not answered: {other:?}"
                            ))
                        }
                    }
                    if conn.strays.iter().any(|(o, _)| *o == op) {
                        return Err("a oneway request was answered".into());
                    }
                } else {
                    match conn.wait_response(op, REQUEST_TIMEOUT).await {
                        Reply::Answered(resp) => {
                            if !known_code(resp.code()) {
                                return Err(format!(
                                    "answer with an unknown response code {} (remark {:?})",
                                    resp.code(),
                                    resp.remark()
                                ));
                            }
                            answer = Some(resp.code());
                            self.remember(r, &resp, target == leader);
                        }
                        other => {
                            self.conns[target] = None;
                            return Err(format!(
                                "well-formed request not answered within {REQUEST_TIMEOUT:?}: {other:?}"
                            ));
                        }
                    }
                }
            }
            Expect::AnswerOrClose | Expect::Nothing => {
                let addr = self.g.members[target].addr;
                let mut c = RawConn::connect(addr).await?;
                // The broker may close before reading everything.
                let _ = c.write(&bytes).await;
                if matches!(r.enc, Enc::Mangled(Mangle::Truncated)) {
                    drop(c);
                } else {
                    // A well-formed probe right behind: answered if the connection lives on.
                    let p = Self::probe();
                    let probe_sent = c
                        .write(&p.encode_to_bytes().map_err(|e| e.to_string())?)
                        .await
                        .is_ok();
                    let reply = c.wait_response(p.opaque(), REQUEST_TIMEOUT).await;
                    for (o, code) in &c.strays {
                        if !known_code(*code) {
                            return Err(format!("answer with an unknown response code {code}"));
                        }
                        if *o == op {
                            answer = Some(*code);
                        }
                    }
                    match reply {
                        Reply::Closed => {}
                        Reply::Answered(_) if expect == Expect::Nothing || answer.is_some() => {}
                        Reply::Answered(_) => {
                            return Err(
                                "malformed frame neither answered nor its connection closed (the probe behind it was answered)"
                                    .into(),
                            )
                        }
                        Reply::Silent if !probe_sent => {}
                        other => {
                            return Err(format!(
                                "connection left hanging after a malformed frame: probe got {other:?}"
                            ))
                        }
                    }
                }
            }
        }
        self.settle(r, answer, &log, end_before).await
    }

    /// Bookkeeping and checks once the answer to `r` (if any) is in.
    async fn settle(
        &mut self,
        r: &Req,
        answer: Option<i32>,
        log: &std::sync::Arc<dyn broker::store::commit_log::ReplicatedLog>,
        end_before: i64,
    ) -> Result<(), String> {
        // A topic that may have been deleted takes its acknowledged messages with it.
        let deleted = answer
            .is_none_or(|c| c == ResponseCode::SUCCESS.0 || c == ResponseCode::SYSTEM_ERROR.0);
        if r.code == 215 && deleted {
            if let Some(topic) = r.text("topic") {
                self.world.acked.retain(|a| a.topic != topic);
            }
        }
        // A rejected request stored nothing (only the leader can store).
        if let (Some(marker), Some(code)) = (&r.marker, answer) {
            if !may_have_written(code) {
                check_not_in_log(log, end_before, marker)
                    .await
                    .map_err(|e| format!("answered {code}, but {e}"))?;
            }
        }
        Ok(())
    }

    /// The well-formed two-way requests of a case written back to back on one connection
    /// before any answer is read (answers may come in any order).
    async fn execute_pipelined(
        &mut self,
        reqs: &[Req],
        leader: usize,
        target: usize,
    ) -> Result<(), String> {
        let log = std::sync::Arc::clone(self.g.members[leader].ctx().store.log());
        let end_before = log.end_index();
        let mut frames = Vec::new();
        let mut ops = Vec::new();
        for r in reqs {
            let op = opaque();
            let t = if r.enc == Enc::RocketMq {
                SerializeType::RocketMq
            } else {
                SerializeType::Json
            };
            match command(r, op, t).encode_to_bytes() {
                Ok(b) => {
                    frames.extend_from_slice(&b);
                    ops.push(Some(op));
                }
                Err(_) => ops.push(None),
            }
        }
        let conn = self.conn(target).await?;
        conn.write(&frames).await?;
        let mut answers = Vec::new();
        for op in &ops {
            let Some(op) = *op else {
                answers.push(None);
                continue;
            };
            let found = conn.strays.iter().position(|(o, _)| *o == op);
            let code = match found {
                Some(i) => conn.strays.remove(i).1,
                None => match conn.wait_response(op, REQUEST_TIMEOUT).await {
                    Reply::Answered(resp) => resp.code(),
                    other => {
                        self.conns[target] = None;
                        return Err(format!(
                            "pipelined well-formed request not answered within {REQUEST_TIMEOUT:?}: {other:?}"
                        ));
                    }
                },
            };
            if !known_code(code) {
                return Err(format!("answer with an unknown response code {code}"));
            }
            answers.push(Some(code));
        }
        for (r, a) in reqs.iter().zip(answers) {
            self.settle(r, a, &log, end_before).await?;
        }
        Ok(())
    }

    /// Notes what an acknowledged fuzz send stored.
    fn remember(&mut self, r: &Req, resp: &RemotingCommand, on_leader: bool) {
        if !on_leader
            || resp.response_code() != ResponseCode::SUCCESS
            || !matches!(r.code, 10 | 310 | 320)
        {
            return;
        }
        let ids = resp.ext_field("msgId").unwrap_or_default();
        let mut phys = Vec::new();
        for id in ids.split(',') {
            if let Ok((_, p)) = broker::message::decode_offset_msg_id(id) {
                phys.push(p);
            }
        }
        self.world.phys.extend(&phys);
        if let (Some((group, topic, queue)), Some(p)) = (&r.half, phys.first()) {
            let qoff = resp
                .ext_field("queueOffset")
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1);
            let uniq = resp
                .ext_field("transactionId")
                .unwrap_or_default()
                .to_owned();
            self.world
                .halves
                .push((group.clone(), qoff, *p, uniq, topic.clone(), *queue));
        }
    }

    /// Case `case`: its requests, then the control sends and the agreement checks.
    async fn case(&mut self, case: u64) -> Result<(), String> {
        let mut rng = Rng::for_case(self.seed, case);
        let panics_before = panics();
        let leader = self
            .g
            .stable_leader()
            .ok_or_else(|| format!("leadership moved during FZ-04: {}", self.g.describe_roles()))?;
        let n = 1 + rng.below(3);
        let pipelined = n > 1 && rng.chance(15);
        let mut touched = BTreeSet::new();
        let mut desc = format!(
            "case {case}{}:",
            if pipelined { " (pipelined)" } else { "" }
        );
        let mut batch = Vec::new();
        for i in 0..n {
            let marker = format!("FZM{:x}-{case}-{i}#", self.seed & 0xffff).into_bytes();
            let max_body = self.g.opts.max_message_size;
            let mut r = gen_request(
                &mut rng,
                &mut self.world,
                leader,
                marker,
                max_body,
                &self.skip,
            );
            if pipelined {
                // One connection, answers expected: text values, valid frames, two-way.
                r.target = batch.first().map_or(r.target, |f: &Req| f.target);
                r.ext.retain(|(_, v)| matches!(v, Val::Text(_)));
                r.oneway = false;
                if !matches!(r.enc, Enc::Json | Enc::RocketMq) {
                    r.enc = Enc::Json;
                }
            }
            let _ = write!(desc, "\n   {}", r.describe());
            if self.verbose {
                eprintln!("case {case} req {i}: {}", r.describe());
            }
            touched.extend(r.touched.iter().cloned());
            if pipelined {
                batch.push(r);
                continue;
            }
            let result = self.execute(&r, leader, &mut rng).await;
            if let Err(e) = result {
                self.history.push(desc);
                return Err(format!("request {i}: {e}"));
            }
        }
        if let Some(target) = batch.first().map(|r| r.target) {
            if let Err(e) = self.execute_pipelined(&batch, leader, target).await {
                self.history.push(desc);
                return Err(e);
            }
        }
        self.history.push(desc);
        self.control(case, &touched, leader).await?;
        if panics() > panics_before {
            return Err(format!(
                "{} panic(s) in the process",
                panics() - panics_before
            ));
        }
        Ok(())
    }

    /// Control sends to every touched queue; each is acknowledged and pullable at its
    /// offset, and the touched topics' queues agree on all members.
    async fn control(
        &mut self,
        case: u64,
        touched: &BTreeSet<(String, i32)>,
        leader: usize,
    ) -> Result<(), String> {
        if touched.is_empty() {
            return Ok(());
        }
        let addr = self.g.members[leader].addr;
        let topics: BTreeSet<&String> = touched.iter().map(|(t, _)| t).collect();
        for t in topics {
            let resp = call_once(addr, create_topic(t)).await?;
            if resp.response_code() != ResponseCode::SUCCESS {
                return Err(format!(
                    "re-creating topic {t} refused: {} {:?}",
                    resp.code(),
                    resp.remark()
                ));
            }
        }
        let mut fresh = Vec::new();
        for (t, q) in touched {
            let body = format!("control {case} {t}/{q} {}", self.seed);
            let a = control_send(&self.g, t, *q, body.as_bytes(), false, REQUEST_TIMEOUT).await?;
            pull_acked(addr, &a, Duration::from_secs(5)).await?;
            fresh.push(a);
        }
        check_queues_agree(&self.g, leader, Some(touched)).await?;
        for a in &fresh {
            for m in &self.g.members {
                read_acked(m, a)?;
            }
        }
        self.world.acked.extend(fresh);
        Ok(())
    }

    /// Everything on every member.
    async fn full_check(&self) -> Result<(), String> {
        let leader = self
            .g
            .stable_leader()
            .ok_or_else(|| format!("no stable leader: {}", self.g.describe_roles()))?;
        check_queues_agree(&self.g, leader, None).await?;
        check_acked_everywhere(&self.g, leader, &self.world.acked).await?;
        check_metadata_agrees(&self.g, leader, &POOL, &["FzG1", "FzG2", "FzG3"]).await
    }
}

/// No committed entry after `end_before` carries `marker`.
async fn check_not_in_log(
    log: &std::sync::Arc<dyn broker::store::commit_log::ReplicatedLog>,
    end_before: i64,
    marker: &[u8],
) -> Result<(), String> {
    let end = log.end_index();
    let deadline = Instant::now() + Duration::from_secs(5);
    while log.committed_mark().index < end && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for i in end_before + 1..=end {
        if let Ok(Some(e)) = log.committed_entry(i) {
            if memchr::memmem::find(&e.body, marker).is_some() {
                return Err(format!("log entry {i} (pos {}) holds its message", e.pos));
            }
        }
    }
    Ok(())
}

async fn run_fz04(default_cases: u64) {
    install_panic_counter();
    let _serial = SERIAL.lock().await;
    let panics_before = panics();
    let seed = seed("fz04");
    let cases = env_u64("FUZZ_CASES").unwrap_or(default_cases);
    let only = env_u64("FUZZ_CASE");
    let started = Instant::now();
    let g = Group::start(GroupOptions::default()).await;
    let mut fz = Fz04 {
        g,
        seed,
        world: World::default(),
        conns: vec![None, None, None],
        history: Vec::new(),
        verbose: std::env::var("FUZZ_VERBOSE").is_ok_and(|v| v == "1"),
        skip: skipped_codes(),
    };
    // FUZZ_KEEP_GOING=1: report every failing case instead of stopping at the first.
    let keep_going = std::env::var("FUZZ_KEEP_GOING").is_ok_and(|v| v == "1");
    let mut failures = Vec::new();
    let range: Vec<u64> = match only {
        Some(c) => vec![c],
        None => (0..cases).collect(),
    };
    for case in range {
        let mut r = fz.case(case).await;
        if r.is_ok() && (case + 1) % 20 == 0 {
            r = fz.full_check().await;
        }
        if let Err(e) = r {
            let recent: Vec<&String> = fz.history.iter().rev().take(4).collect();
            let recent: Vec<&str> = recent.into_iter().rev().map(String::as_str).collect();
            let f = format!("case {case}: {e}\nrecent cases:\n{}", recent.join("\n"));
            eprintln!("FAILURE {f}");
            failures.push(f);
            if !keep_going || failures.len() >= 20 {
                break;
            }
        }
    }
    if failures.is_empty() || keep_going {
        if let Err(e) = fz.full_check().await {
            failures.push(format!("final check: {e}"));
        }
    }
    let report = (!failures.is_empty()).then(|| {
        format!(
            "FZ-04 failed (replay: FUZZ_SEED={seed} cargo test -p broker --test fuzz_requests -- fuzz_requests):\n{}\n\
             roles: {}",
            failures.join("\n\n"),
            fz.g.describe_roles(),
        )
    });
    eprintln!(
        "fz04: {} cases, {} control messages, {:?}",
        fz.history.len(),
        fz.world.acked.len(),
        started.elapsed()
    );
    fz.g.shutdown().await;
    if let Some(r) = report {
        panic!("{r}");
    }
    assert_eq!(
        panics(),
        panics_before,
        "a member panicked (FUZZ_SEED={seed})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_requests_default() {
    run_fz04(DEFAULT_CASES).await;
}

/// Long sweep: `FUZZ_CASES=20000 cargo test -p broker --test fuzz_requests -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn fuzz_requests_long() {
    run_fz04(LONG_CASES).await;
}

// =============================================================================================
// FZ-05: forged DLedger RPCs
// =============================================================================================

const VOTE: i32 = 51_001;
const HEART_BEAT: i32 = 51_002;
const PUSH: i32 = 51_004;
const TRANSFER: i32 = 51_005;
const METADATA: i32 = 50_000;
/// Rounds of the CI run (about 15-25 s in a debug build on two cores).
const DEFAULT_ROUNDS: u64 = 30;
/// Rounds of the long (ignored) sweep.
const LONG_ROUNDS: u64 = 1000;
/// How long a forged RPC may wait for its answer (buffered pushes answer after
/// `maxPushTimeOutMs`).
const RPC_TIMEOUT: Duration = Duration::from_secs(6);
/// How long the group may take to settle on one leader after a round.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(T[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A DLedger entry as JSON; `size` = 48 + body length unless overridden.
fn entry_json(
    index: i64,
    term: i64,
    pos: i64,
    body: &[u8],
    size: Option<i64>,
) -> serde_json::Value {
    serde_json::json!({
        "body": base64(body),
        "bodyCrc": 0,
        "chainCrc": 0,
        "channel": 0,
        "index": index,
        "magic": 1,
        "pos": pos,
        "size": size.unwrap_or(48 + body.len() as i64),
        "term": term,
    })
}

/// What the forger knows of the group.
struct View {
    term: i64,
    leader: usize,
    ids: Vec<String>,
    /// Per member: (begin, end, committed index, committed end position).
    ranges: Vec<(i64, i64, i64, i64)>,
    /// Real committed entries of the leader: (index, term if known, pos, body).
    entries: Vec<(i64, Option<i64>, i64, Vec<u8>)>,
}

/// Who a forged RPC claims to be, and to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    UnknownGroup,
    UnknownRemote,
    UnknownLeader,
    /// Known members, an older term.
    Stale,
    /// The current leader's name and term, with inconsistent content.
    Leader,
    /// Undecodable body.
    Garbage,
    /// Known members, a newer term, or an admin transfer (may cause elections).
    Disruptive,
}

/// One forged RPC.
struct Forged {
    target: usize,
    code: i32,
    who: Who,
    body: Vec<u8>,
    note: String,
}

impl Forged {
    fn describe(&self) -> String {
        let body = String::from_utf8_lossy(&self.body);
        let body = if body.len() > 300 {
            format!("{}...({} bytes)", prefix(&body, 300), self.body.len())
        } else {
            body.into_owned()
        };
        format!(
            "-> n{} code {} {:?} [{}] {}",
            self.target, self.code, self.who, self.note, body
        )
    }
}

/// Terms of RPCs whose identity is wrong: far above the current term, so adopting one shows
/// (an ordinary election only adds one).
fn nasty_term(rng: &mut Rng, current: i64) -> i64 {
    match rng.below(8) {
        0 => i64::MAX,
        1 => i64::MAX - 1,
        2 => 1 << 62,
        _ => current.saturating_add(FORGED_TERM_GAP + rng.range(0, 100_000)),
    }
}

/// How far above the current term forged terms of harmless rounds are.
const FORGED_TERM_GAP: i64 = 1000;

fn gen_forged(rng: &mut Rng, v: &View, disruptive: bool) -> Forged {
    let n = v.ids.len();
    let target = rng.below(n as u64) as usize;
    let mut who = *rng.pick(&[
        Who::UnknownGroup,
        Who::UnknownRemote,
        Who::UnknownLeader,
        Who::Stale,
        Who::Leader,
        Who::Leader,
        Who::Garbage,
    ]);
    if disruptive && rng.chance(35) {
        who = Who::Disruptive;
    }
    // Pushes under the leader's name go to followers (the leader answers UNEXPECTED_MEMBER).
    let target = if who == Who::Leader && target == v.leader && rng.chance(85) {
        (target + 1 + rng.below(n as u64 - 1) as usize) % n
    } else {
        target
    };
    let me = v.ids[target].clone();
    let other = |rng: &mut Rng| -> String {
        let i = (target + 1 + rng.below(n as u64 - 1) as usize) % n;
        v.ids[i].clone()
    };
    let code = match who {
        Who::Leader => PUSH,
        // APPEND (50001), GET (50002) and PULL (51003) are not served; 7 is no DLedger code.
        _ => *rng.pick(&[
            VOTE, VOTE, HEART_BEAT, HEART_BEAT, PUSH, PUSH, PUSH, TRANSFER, METADATA, 50_001,
            50_002, 51_003, 7,
        ]),
    };
    let mut group = serde_json::Value::from(GROUP);
    let mut remote = serde_json::Value::from(me.clone());
    let mut leader = serde_json::Value::from(v.ids[v.leader].clone());
    let mut term = v.term;
    let mut note = String::new();
    match who {
        Who::UnknownGroup => {
            group = rng
                .pick(&[
                    serde_json::Value::from("Nope"),
                    serde_json::Value::from(""),
                    serde_json::Value::Null,
                    serde_json::Value::from("x".repeat(5000)),
                ])
                .clone();
            term = nasty_term(rng, v.term);
            leader = serde_json::Value::from(other(rng));
        }
        Who::UnknownRemote => {
            let someone_else = serde_json::Value::from(other(rng));
            remote = rng
                .pick(&[
                    serde_json::Value::from("n9"),
                    serde_json::Value::from(""),
                    serde_json::Value::Null,
                    someone_else,
                ])
                .clone();
            term = nasty_term(rng, v.term);
            leader = serde_json::Value::from(other(rng));
        }
        Who::UnknownLeader => {
            leader = rng
                .pick(&[
                    serde_json::Value::from("n7"),
                    serde_json::Value::from(""),
                    serde_json::Value::Null,
                    serde_json::Value::from("N0"),
                ])
                .clone();
            term = nasty_term(rng, v.term);
        }
        Who::Stale => {
            term = if v.term > 0 {
                rng.range(-1, v.term)
            } else {
                -1
            };
            leader = serde_json::Value::from(other(rng));
        }
        Who::Leader | Who::Garbage => {}
        Who::Disruptive => {
            // Mostly small steps: a maximal term ends every later increase.
            term = match rng.below(200) {
                0 => i64::MAX,
                1 => 1 << 62,
                2..=20 => v.term.saturating_add(1000),
                _ => v.term.saturating_add(rng.range(1, 4)),
            };
            leader = serde_json::Value::from(other(rng));
        }
    }
    let mut obj = serde_json::json!({
        "code": 200,
        "group": group,
        "leaderId": leader.clone(),
        "localId": leader.clone(),
        "remoteId": remote,
        "term": term,
    });
    let m = obj.as_object_mut().map(std::mem::take).unwrap_or_default();
    let mut m = m;
    match code {
        VOTE => {
            let (end, end_term) = if who == Who::Disruptive && rng.chance(50) {
                (i64::MAX / 2, term)
            } else {
                (
                    rng.range(-1, v.ranges[target].1.saturating_add(3)),
                    rng.range(-1, v.term.saturating_add(2)),
                )
            };
            m.insert("ledgerEndIndex".into(), end.into());
            m.insert("ledgerEndTerm".into(), end_term.into());
            if rng.chance(30) {
                m.insert("preVote".into(), true.into());
            }
        }
        PUSH => {
            let (kind, entries, commit) = forge_push(rng, v, target, who, term, &mut note);
            m.insert("type".into(), kind.into());
            m.insert("commitIndex".into(), commit.into());
            // COMPARE/TRUNCATE carry `entry`; a single APPEND either form.
            match entries.len() {
                0 => {}
                1 if kind != "APPEND_BATCH" && (kind != "APPEND" || rng.chance(70)) => {
                    m.insert("entry".into(), entries[0].clone());
                }
                _ => {
                    m.insert("batchEntry".into(), serde_json::Value::Array(entries));
                }
            }
            if kind == "APPEND_BATCH" {
                m.insert("type".into(), "APPEND".into());
            }
        }
        TRANSFER => {
            m.insert("transferId".into(), leader.clone());
            let transferee = if who == Who::Disruptive {
                serde_json::Value::from(other(rng))
            } else {
                rng.pick(&[serde_json::Value::from("n8"), serde_json::Value::Null])
                    .clone()
            };
            m.insert("transfereeId".into(), transferee);
            m.insert(
                "takeLeadershipLedgerIndex".into(),
                rng.range(-1, 1000).into(),
            );
            if who == Who::Disruptive {
                // An admin transfer goes to the leader, with the leader as transferId.
                m.insert("remoteId".into(), v.ids[v.leader].clone().into());
                m.insert("transferId".into(), v.ids[v.leader].clone().into());
                m.insert("term".into(), v.term.into());
                note.push_str("admin transfer ");
                return Forged {
                    target: v.leader,
                    code,
                    who,
                    body: serde_json::Value::Object(m).to_string().into_bytes(),
                    note,
                };
            }
        }
        _ => {}
    }
    let mut body = serde_json::Value::Object(m).to_string().into_bytes();
    if who == Who::Garbage {
        let what = rng.below(9);
        note.push_str(&format!("garbage {what} "));
        body = match what {
            0 => rng.some_bytes(0, 400),
            1 => body[..rng.below(body.len() as u64) as usize].to_vec(),
            2 => br#"{"term":"x","group":5,"remoteId":[1]}"#.to_vec(),
            3 => format!(r#"{{"group":"{GROUP}","remoteId":"{me}","term":1e999}}"#).into_bytes(),
            4 => format!(
                r#"{{"group":"{GROUP}","remoteId":"{me}","leaderId":"{}","term":{},"type":"APPEND","entry":{{"body":"!!notbase64!!","index":0,"magic":1,"pos":0,"size":49,"term":1}}}}"#,
                v.ids[v.leader], v.term
            )
            .into_bytes(),
            5 => format!(
                r#"{{"group":"{GROUP}","remoteId":"{me}","leaderId":"{}","term":{},"type":"NOPE"}}"#,
                v.ids[v.leader], v.term
            )
            .into_bytes(),
            6 => "[".repeat(10_000).into_bytes(),
            7 => format!(
                r#"{{"group":"{GROUP}","remoteId":"{me}","leaderId":"{}","term":{},"type":"APPEND","batchEntry":"x"}}"#,
                v.ids[v.leader], v.term
            )
            .into_bytes(),
            _ => Vec::new(),
        };
    }
    Forged {
        target,
        code,
        who,
        body,
        note,
    }
}

/// A PUSH under the leader's name whose content a correct follower must refuse or that
/// changes nothing: (type, entries, commitIndex).
fn forge_push(
    rng: &mut Rng,
    v: &View,
    target: usize,
    who: Who,
    term: i64,
    note: &mut String,
) -> (&'static str, Vec<serde_json::Value>, i64) {
    let (begin, end, committed, end_pos) = v.ranges[target];
    let real = |rng: &mut Rng| -> Option<&(i64, Option<i64>, i64, Vec<u8>)> {
        (!v.entries.is_empty()).then(|| rng.pick(&v.entries))
    };
    let junk = |rng: &mut Rng| rng.some_bytes(1, 200);
    if who != Who::Leader {
        // Identity is what is wrong: any push shape.
        let body = junk(rng);
        let e = entry_json(end + 1, term.max(0), end_pos + 1, &body, None);
        let kind = *rng.pick(&["APPEND", "COMMIT", "COMPARE", "TRUNCATE"]);
        note.push_str(kind);
        return (kind, vec![e], i64::MAX);
    }
    let what = rng.below(12);
    match what {
        11 => {
            note.push_str("APPEND batch at the top of the index space");
            let body = junk(rng);
            let e = entry_json(i64::MAX, term, end_pos, &body, None);
            ("APPEND_BATCH", vec![e.clone(), e], committed)
        }
        0 => {
            // A rewrite of a committed entry.
            note.push_str("APPEND over a committed entry");
            let Some((i, t, pos, body)) = real(rng) else {
                return ("COMMIT", vec![], committed);
            };
            let mut b = body.clone();
            b.push(b'!');
            (
                "APPEND",
                vec![entry_json(*i, t.unwrap_or(term), *pos, &b, None)],
                committed,
            )
        }
        1 => {
            note.push_str("TRUNCATE below the committed index, entry differs");
            let Some((i, t, pos, body)) = real(rng) else {
                return ("COMMIT", vec![], committed);
            };
            let mut b = body.clone();
            b[0] ^= 1;
            (
                "TRUNCATE",
                vec![entry_json(*i, t.unwrap_or(term), *pos, &b, None)],
                committed,
            )
        }
        2 => {
            note.push_str("TRUNCATE below the committed index, entry matches");
            let Some((i, t, pos, body)) = real(rng) else {
                return ("COMMIT", vec![], committed);
            };
            (
                "TRUNCATE",
                vec![entry_json(*i, t.unwrap_or(term), *pos, body, None)],
                committed,
            )
        }
        3 => {
            note.push_str("APPEND at end+1 with a wrong position");
            let body = junk(rng);
            let pos = end_pos + *rng.pick(&[1i64, -1, 48, 4096, -48]);
            (
                "APPEND",
                vec![entry_json(end + 1, term, pos.max(0), &body, None)],
                committed,
            )
        }
        4 => {
            note.push_str("APPEND batch with a gap");
            let body = junk(rng);
            let a = entry_json(end + 1, term, end_pos + 1, &body, None);
            let b = entry_json(end + 3, term, end_pos + 500, &body, None);
            ("APPEND_BATCH", vec![a, b], committed)
        }
        5 => {
            note.push_str("APPEND far beyond the end");
            let body = junk(rng);
            let at = end + rng.range(2, 1_000_000);
            (
                "APPEND",
                vec![entry_json(at, term, end_pos + 4096, &body, None)],
                committed,
            )
        }
        6 => {
            let count = *rng.pick(&[500i64, 3000]);
            let size = *rng.pick(&[16usize, 2048]);
            note.push_str(&format!(
                "oversized batch of {count} x {size} B from end+1, wrong positions"
            ));
            let body = vec![b'b'; size];
            let entries = (0..count)
                .map(|k| {
                    entry_json(
                        end + 1 + k,
                        term,
                        end_pos + 7 + k * (48 + size as i64),
                        &body,
                        None,
                    )
                })
                .collect();
            ("APPEND_BATCH", entries, committed)
        }
        7 => {
            note.push_str("entries with inconsistent headers");
            let body = junk(rng);
            let e = match rng.below(4) {
                0 => entry_json(end + 1, term, end_pos, &body, Some(47)),
                1 => entry_json(-5, term, end_pos, &body, None),
                2 => entry_json(end + 1, -7, end_pos, &body, None),
                _ => entry_json(end + 1, term, -3, &body, None),
            };
            (
                *rng.pick(&["APPEND", "TRUNCATE", "COMPARE"]),
                vec![e],
                committed,
            )
        }
        8 => {
            note.push_str("COMPARE with a differing entry");
            let Some((i, t, pos, body)) = real(rng) else {
                return ("COMMIT", vec![], committed);
            };
            let mut b = body.clone();
            b.pop();
            (
                "COMPARE",
                vec![entry_json(*i, t.unwrap_or(term), *pos, &b, None)],
                committed,
            )
        }
        9 => {
            note.push_str("COMMIT far ahead");
            (
                "COMMIT",
                vec![],
                *rng.pick(&[end + 1, end + 1000, i64::MAX]),
            )
        }
        _ => {
            note.push_str("TRUNCATE before the log begin");
            let body = junk(rng);
            (
                "TRUNCATE",
                vec![entry_json((begin - 1).max(0), term, 0, &body, None)],
                committed,
            )
        }
    }
}

struct Fz05 {
    g: Group,
    seed: u64,
    acked: Vec<Acked>,
    conns: Vec<Option<RawConn>>,
    history: Vec<String>,
    verbose: bool,
    /// Per member, the term each real entry index was found to have (COMPARE probes).
    known_terms: std::collections::BTreeMap<i64, i64>,
    /// Per member, the (current, persisted) term seen at the last round start.
    last_terms: Vec<(i64, i64)>,
}

/// (status term, persisted term) of every member.
fn terms(g: &Group) -> Vec<(i64, Option<i64>)> {
    g.members
        .iter()
        .map(|m| (m.ledger_role().1, m.persisted_term()))
        .collect()
}

impl Fz05 {
    async fn conn(&mut self, i: usize) -> Result<&mut RawConn, String> {
        if self.conns[i].is_none() {
            self.conns[i] = Some(RawConn::connect(self.g.members[i].ledger_addr).await?);
        }
        self.conns[i]
            .as_mut()
            .ok_or_else(|| "connection vanished".to_string())
    }

    /// Sends a DLedger request; the answer's JSON body (`Ok(None)` for a remoting-level
    /// refusal such as REQUEST_CODE_NOT_SUPPORTED).
    async fn rpc(
        &mut self,
        target: usize,
        code: i32,
        body: Vec<u8>,
    ) -> Result<Option<serde_json::Value>, String> {
        let cmd = RemotingCommand::request_empty(RequestCode(code))
            .with_body(body)
            .with_opaque(opaque());
        let reply = self.conn(target).await?.call(&cmd, RPC_TIMEOUT).await?;
        match reply {
            Reply::Answered(r) => {
                if r.response_code() != ResponseCode::SUCCESS {
                    if !known_code(r.code()) {
                        return Err(format!("answer with unknown remoting code {}", r.code()));
                    }
                    return Ok(None);
                }
                serde_json::from_slice(r.body()).map(Some).map_err(|e| {
                    format!(
                        "answer body is not JSON ({e}): {:?}",
                        String::from_utf8_lossy(r.body())
                    )
                })
            }
            other => {
                self.conns[target] = None;
                Err(format!("no answer within {RPC_TIMEOUT:?}: {other:?}"))
            }
        }
    }

    /// What the forger needs to know, read from the members.
    async fn view(&mut self, leader: usize) -> View {
        let ids: Vec<String> = self.g.members.iter().map(|m| m.id.clone()).collect();
        let (_, term, _) = self.g.members[leader].ledger_role();
        let ranges = self
            .g
            .members
            .iter()
            .map(|m| {
                let log = m.ctx().store.log();
                let c = log.committed_mark();
                (log.begin_index(), log.end_index(), c.index, c.end_pos)
            })
            .collect();
        let log = std::sync::Arc::clone(self.g.members[leader].ctx().store.log());
        let end = log.committed_mark().index;
        let mut entries = Vec::new();
        let mut picks: Vec<i64> = vec![end, end - 1, end / 2, 1, 0];
        picks.retain(|i| *i >= 0);
        picks.dedup();
        for i in picks {
            if let Ok(Some(e)) = log.committed_entry(i) {
                if e.body.is_empty() {
                    continue; // no-op entries: nothing to flip
                }
                entries.push((
                    e.index,
                    self.known_terms.get(&e.index).copied(),
                    e.pos,
                    e.body.to_vec(),
                ));
            }
        }
        View {
            term,
            leader,
            ids,
            ranges,
            entries,
        }
    }

    /// Learns the term of the real entries by COMPARE probes under the leader's name (a
    /// matching COMPARE changes nothing), so matching TRUNCATEs can be forged.
    async fn learn_terms(&mut self, v: &mut View) -> Result<(), String> {
        let follower = (v.leader + 1) % v.ids.len();
        for k in 0..v.entries.len() {
            if v.entries[k].1.is_some() {
                continue;
            }
            let (i, _, pos, body) = v.entries[k].clone();
            for t in v.term.saturating_sub(6).max(0)..=v.term {
                let req = serde_json::json!({
                    "code": 200, "group": GROUP, "leaderId": v.ids[v.leader], "localId": v.ids[v.leader],
                    "remoteId": v.ids[follower], "term": v.term, "type": "COMPARE", "commitIndex": -1,
                    "entry": entry_json(i, t, pos, &body, None),
                });
                let resp = self
                    .rpc(follower, PUSH, req.to_string().into_bytes())
                    .await?;
                if resp.as_ref().and_then(|r| r["code"].as_i64()) == Some(200) {
                    v.entries[k].1 = Some(t);
                    self.known_terms.insert(i, t);
                    break;
                }
            }
        }
        Ok(())
    }

    /// After a round of RPCs that must not move terms: every member's current and persisted
    /// term is below what any forged RPC carried (an ordinary election, possible on a loaded
    /// machine, adds one and is tolerated).
    fn no_forged_term_adopted(
        &self,
        before: &[(i64, Option<i64>)],
        when: &str,
    ) -> Result<(), String> {
        let highest = before
            .iter()
            .map(|(t, p)| (*t).max(p.unwrap_or(-1)))
            .max()
            .unwrap_or(-1);
        let bound = highest.saturating_add(FORGED_TERM_GAP / 10);
        let after = terms(&self.g);
        for (i, (t, p)) in after.iter().enumerate() {
            let (t0, p0) = before[i];
            let moved = *t != t0 || *p != p0;
            if moved && ((*t).max(p.unwrap_or(-1)) >= bound) {
                return Err(format!(
                    "n{i} took a forged term {when} a round without valid newer terms: before {before:?} after {after:?}; roles {}",
                    self.g.describe_roles()
                ));
            }
        }
        Ok(())
    }

    async fn round(&mut self, round: u64) -> Result<(), String> {
        let mut rng = Rng::for_case(self.seed ^ 0x5555, round);
        let panics_before = panics();
        let disruptive = rng.chance(35);
        let leader = self.g.wait_stable_leader(SETTLE_TIMEOUT).await?;
        let leader_id = self.g.members[leader].id.clone();
        // Something new acknowledged and replicated before the forged RPCs.
        let topic = *rng.pick(&POOL);
        let q = rng.range(0, i64::from(QUEUES)) as i32;
        let body = format!("fz05 before round {round} seed {}", self.seed);
        let a = control_send(&self.g, topic, q, body.as_bytes(), true, SETTLE_TIMEOUT).await?;
        self.acked.push(a);
        let leader = self.g.wait_stable_leader(SETTLE_TIMEOUT).await?;
        self.g.wait_dispatched(leader).await?;
        let mut v = self.view(leader).await;
        self.learn_terms(&mut v).await?;
        let terms_before = terms(&self.g);
        // Terms never go back, persisted or not.
        for (i, (now, persisted)) in terms_before.iter().enumerate() {
            let (last, last_persisted) = self.last_terms[i];
            if *now < last || persisted.unwrap_or(-1) < last_persisted {
                return Err(format!(
                    "n{i}'s term went back: {last}/{last_persisted} -> {now}/{persisted:?}"
                ));
            }
            self.last_terms[i] = (*now, persisted.unwrap_or(-1));
        }
        let mut desc = format!(
            "round {round} ({}):",
            if disruptive { "disruptive" } else { "harmless" }
        );
        let n = 8 + rng.below(16);
        for i in 0..n {
            let f = gen_forged(&mut rng, &v, disruptive);
            let _ = write!(desc, "\n   {}", f.describe());
            if self.verbose {
                eprintln!("round {round} rpc {i}: {}", f.describe());
            }
            let code = f.code;
            let answer = self.rpc(f.target, code, f.body.clone()).await;
            if self.verbose {
                eprintln!("   answer: {answer:?}");
            }
            let checked = match (&answer, f.who) {
                (Err(e), _) => Err(e.clone()),
                (Ok(Some(body)), Who::UnknownGroup | Who::UnknownRemote) if code != METADATA => {
                    match body["code"].as_i64() {
                        Some(400 | 401 | 411) => Ok(()),
                        other => Err(format!(
                            "answered code {other:?} to an RPC for another group/member: {body}"
                        )),
                    }
                }
                (Ok(Some(body)), _) if code == VOTE && f.who != Who::Disruptive => {
                    match body["voteResult"].as_str() {
                        Some("ACCEPT") => Err(format!("vote granted to a forged request: {body}")),
                        _ => Ok(()),
                    }
                }
                _ => Ok(()),
            };
            if let Err(e) = checked {
                self.history.push(desc);
                return Err(format!("rpc {i}: {e}"));
            }
        }
        if rng.chance(30) {
            // A malformed frame on a DLedger port: that connection may close, the port serves on.
            let target = rng.below(3) as usize;
            let mut frame = RemotingCommand::request_empty(RequestCode(HEART_BEAT))
                .with_body(b"{}".to_vec())
                .encode_to_bytes()
                .map_err(|e| e.to_string())?
                .to_vec();
            let what = rng.below(4);
            match what {
                0 => frame = rng.some_bytes(1, 64),
                1 => frame[4] = 7,
                2 => frame[0..4].copy_from_slice(&(-5i32).to_be_bytes()),
                _ => frame.truncate(rng.range(1, frame.len() as i64) as usize),
            }
            let _ = write!(desc, "\n   -> n{target} malformed frame {what}: {frame:?}");
            let mut c = RawConn::connect(self.g.members[target].ledger_addr).await?;
            let _ = c.write(&frame).await;
            drop(c);
            let probe = RemotingCommand::request_empty(RequestCode(METADATA)).with_body(
                serde_json::json!({"group": GROUP, "localId": "fz", "remoteId": self.g.members[target].id})
                    .to_string()
                    .into_bytes(),
            );
            let resp = call_once(self.g.members[target].ledger_addr, probe).await;
            if let Err(e) = resp {
                self.history.push(desc);
                return Err(format!(
                    "DLedger port of n{target} stopped serving after a malformed frame: {e}"
                ));
            }
        }
        self.history.push(desc);
        if !disruptive {
            self.no_forged_term_adopted(&terms_before, "in")?;
        }
        let leader = self.g.wait_stable_leader(SETTLE_TIMEOUT).await?;
        if !disruptive && self.g.members[leader].id != leader_id && self.verbose {
            eprintln!(
                "round {round}: an ordinary election moved the leadership from {leader_id} to {}",
                self.g.members[leader].id
            );
        }
        let body = format!("fz05 after round {round} seed {}", self.seed);
        let a = control_send(&self.g, topic, q, body.as_bytes(), true, SETTLE_TIMEOUT).await?;
        let leader = self.g.wait_stable_leader(SETTLE_TIMEOUT).await?;
        pull_acked(self.g.members[leader].addr, &a, Duration::from_secs(5)).await?;
        self.acked.push(a);
        check_acked_everywhere(&self.g, leader, &self.acked).await?;
        check_queues_agree(&self.g, leader, None).await?;
        if !disruptive {
            self.no_forged_term_adopted(&terms_before, "after")?;
        }
        if panics() > panics_before {
            return Err(format!(
                "{} panic(s) in the process",
                panics() - panics_before
            ));
        }
        Ok(())
    }
}

async fn run_fz05(default_rounds: u64) {
    install_panic_counter();
    let _serial = SERIAL.lock().await;
    let panics_before = panics();
    let seed = seed("fz05");
    let rounds = env_u64("FUZZ_ROUNDS").unwrap_or(default_rounds);
    let only = env_u64("FUZZ_CASE");
    let keep_going = std::env::var("FUZZ_KEEP_GOING").is_ok_and(|v| v == "1");
    let started = Instant::now();
    let g = Group::start(GroupOptions {
        heartbeat_ms: 400,
        extra: "minVoteIntervalMs=100\nmaxVoteIntervalMs=300\n".into(),
        ..GroupOptions::default()
    })
    .await;
    let mut fz = Fz05 {
        g,
        seed,
        acked: Vec::new(),
        conns: vec![None, None, None],
        history: Vec::new(),
        verbose: std::env::var("FUZZ_VERBOSE").is_ok_and(|v| v == "1"),
        known_terms: Default::default(),
        last_terms: vec![(-1, -1); 3],
    };
    let range: Vec<u64> = match only {
        Some(c) => vec![c],
        None => (0..rounds).collect(),
    };
    let mut failures = Vec::new();
    for round in range {
        if let Err(e) = fz.round(round).await {
            let recent: Vec<&String> = fz.history.iter().rev().take(2).collect();
            let recent: Vec<&str> = recent.into_iter().rev().map(String::as_str).collect();
            let f = format!(
                "round {round}: {e}\nroles: {}\nrecent rounds:\n{}",
                fz.g.describe_roles(),
                recent.join("\n")
            );
            eprintln!("FAILURE {f}");
            failures.push(f);
            if !keep_going || failures.len() >= 10 {
                break;
            }
        }
    }
    eprintln!(
        "fz05: {} rounds, {} acknowledged messages, {:?}; roles at the end: {}",
        fz.history.len(),
        fz.acked.len(),
        started.elapsed(),
        fz.g.describe_roles()
    );
    fz.g.shutdown().await;
    if !failures.is_empty() {
        panic!(
            "FZ-05 failed (replay: FUZZ_SEED={seed} cargo test -p broker --test fuzz_requests -- fuzz_dledger):\n{}",
            failures.join("\n\n")
        );
    }
    assert_eq!(
        panics(),
        panics_before,
        "a member panicked (FUZZ_SEED={seed})"
    );
}

// FUZZ_SEED=31076224229339045 once left a leader that had taken a higher term from a late
// vote rejection and led on in it unannounced (no stable leader); fixed in the elector, the
// core test `a_late_vote_rejection_at_a_higher_term_deposes_the_leader` pins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuzz_dledger_rpcs_default() {
    run_fz05(DEFAULT_ROUNDS).await;
}

/// Long sweep: `FUZZ_ROUNDS=2000 cargo test -p broker --test fuzz_requests -- --ignored fuzz_dledger`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn fuzz_dledger_rpcs_long() {
    run_fz05(LONG_ROUNDS).await;
}

// =============================================================================================
// Regressions the fuzzers found (each minimized to the requests that matter)
// =============================================================================================

/// A fresh group for one regression test, the test lock and the panic count before it.
async fn regression_group() -> (Group, tokio::sync::MutexGuard<'static, ()>, usize) {
    install_panic_counter();
    let guard = SERIAL.lock().await;
    let before = panics();
    let g = Group::start(GroupOptions::default()).await;
    (g, guard, before)
}

/// A well-formed SEND_MESSAGE_V2 to `FzR`/0 with `fields` overriding header fields.
fn send_with(body: &[u8], props: &str, fields: &[(&str, &str)]) -> RemotingCommand {
    let mut c = fuzz_common::send_v2("FzR", 0, body, props);
    for (k, v) in fields {
        c.ext_fields_mut().insert((*k).to_owned(), (*v).to_owned());
    }
    c
}

/// After the requests under test: a control send to `FzR`/0 is acknowledged and pullable,
/// every member agrees, and nothing panicked.
async fn regression_checks(g: &Group, panics_before: usize) {
    let a = control_send(g, "FzR", 0, b"control after", false, REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let leader = g
        .wait_stable_leader(REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    pull_acked(g.members[leader].addr, &a, Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_acked_everywhere(g, leader, &[a])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_queues_agree(g, leader, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(panics(), panics_before, "a member panicked");
}

async fn leader_addr(g: &Group) -> std::net::SocketAddr {
    let l = g
        .wait_stable_leader(REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    g.members[l].addr
}

/// Issue 25 (known before the fuzzer ran; the fuzzer's control sends detect it): a
/// SEND_BATCH_MESSAGE with sysFlag=12 (ROLLBACK) to queue 0 took queue offsets the dispatcher
/// never filled, so every later send to the queue was acknowledged but never pullable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_rollback_batch_does_not_stall_its_queue() {
    let (g, _serial, before) = regression_group().await;
    // The queue must hold a unit already (an empty queue took any first offset).
    control_send(&g, "FzR", 0, b"first", false, REQUEST_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = leader_addr(&g).await;
    let mut body = BytesMut::new();
    batch_element(&mut body, 0, b"rolled back 1", b"TAGS\x01a\x02");
    batch_element(&mut body, 0, b"rolled back 2", b"TAGS\x01a\x02");
    let mut batch = send_with(&body, "", &[("f", "12"), ("m", "true")]);
    batch.set_code(RequestCode::SEND_BATCH_MESSAGE.0);
    let resp = call_once(addr, batch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "ROLLBACK batch answered {} {:?}",
        resp.code(),
        resp.remark()
    );
    regression_checks(&g, before).await;
    g.shutdown().await;
}

/// FZ-04 FUZZ_SEED=1 case 25 (at 5a2b4cf): CONSUMER_SEND_MSG_BACK of a stored message whose
/// reconsumeTimes is i32::MAX computed `reconsume + 1` and panicked the request task
/// ("attempt to add with overflow", processor/send.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_send_back_of_a_message_with_maximal_reconsume_times() {
    let (g, _serial, before) = regression_group().await;
    let addr = leader_addr(&g).await;
    let sent = call_once(
        addr,
        send_with(b"max reconsume", "TAGS\u{1}a\u{2}", &[("j", "2147483647")]),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        sent.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        sent.remark()
    );
    let (_, phys) =
        broker::message::decode_offset_msg_id(sent.ext_field("msgId").unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    let back = RemotingCommand::request_empty(RequestCode::CONSUMER_SEND_MSG_BACK)
        .with_ext_field("offset", phys.to_string())
        .with_ext_field("group", "FzG1")
        .with_ext_field("delayLevel", "0");
    let resp = call_once(addr, back)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("send-back answered {} {:?}", resp.code(), resp.remark());
    regression_checks(&g, before).await;
    g.shutdown().await;
}

/// FZ-04 FUZZ_SEED=2 case 408 (at 5a2b4cf): QUERY_MESSAGE with beginTimestamp=i64::MIN
/// computed `begin - 1000` in the index lookup and panicked the request task ("attempt to
/// subtract with overflow", store/index_file.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_query_message_from_the_minimal_timestamp() {
    let (g, _serial, before) = regression_group().await;
    let addr = leader_addr(&g).await;
    let sent = call_once(
        addr,
        send_with(b"keyed", "TAGS\u{1}a\u{2}KEYS\u{1}k1\u{2}", &[]),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        sent.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        sent.remark()
    );
    let query = RemotingCommand::request_empty(RequestCode::QUERY_MESSAGE)
        .with_ext_field("topic", "FzR")
        .with_ext_field("key", "k1")
        .with_ext_field("maxNum", "32")
        .with_ext_field("beginTimestamp", i64::MIN.to_string())
        .with_ext_field(
            "endTimestamp",
            (broker::context::now_ms() + 60_000).to_string(),
        );
    let resp = call_once(addr, query)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    eprintln!("query answered {} {:?}", resp.code(), resp.remark());
    regression_checks(&g, before).await;
    g.shutdown().await;
}

/// FZ-04 FUZZ_SEED=5 case 195 (at 5a2b4cf): DELETE_TOPIC_IN_BROKER to the leader dropped the
/// topic's queues on the leader only; the re-created topic restarted at queue offset 0 there
/// while the followers kept the old units, so offset 0 named different messages on different
/// members (an acknowledged message not readable at its offset after a failover).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_deleted_topic_restarts_its_queues_on_every_member() {
    let (g, _serial, before) = regression_group().await;
    for i in 0..2 {
        control_send(
            &g,
            "FzR",
            0,
            format!("before delete {i}").as_bytes(),
            false,
            REQUEST_TIMEOUT,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let addr = leader_addr(&g).await;
    let del = RemotingCommand::request_empty(RequestCode::DELETE_TOPIC_IN_BROKER)
        .with_ext_field("topic", "FzR");
    let resp = call_once(addr, del).await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        resp.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        resp.remark()
    );
    let resp = call_once(addr, create_topic("FzR"))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        resp.response_code(),
        ResponseCode::SUCCESS,
        "{:?}",
        resp.remark()
    );
    regression_checks(&g, before).await;
    g.shutdown().await;
}

/// FZ-05 FUZZ_SEED=2 round 19 (before 44e9d5d): a HEART_BEAT forged under a known member's id
/// with term i64::MAX was adopted and persisted; the next election computed `term + 1` and
/// panicked in the ledger driver ("attempt to add with overflow", core/elector.rs), leaving
/// the member dead; with two members dead the group never had a leader again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn regression_forged_maximal_term_from_a_known_member() {
    install_panic_counter();
    let _serial = SERIAL.lock().await;
    let before = panics();
    let g = Group::start(GroupOptions {
        heartbeat_ms: 400,
        extra: "minVoteIntervalMs=100\nmaxVoteIntervalMs=300\n".into(),
        ..GroupOptions::default()
    })
    .await;
    let first = control_send(&g, "FzR", 0, b"before", true, SETTLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let leader = g
        .wait_stable_leader(SETTLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    // To each follower, a heartbeat in the name of the other follower with the largest term.
    for f in (0..3).filter(|i| *i != leader) {
        let other = (0..3).find(|i| *i != leader && *i != f).unwrap_or(leader);
        let hb = serde_json::json!({
            "code": 200, "group": GROUP, "leaderId": g.members[other].id, "localId": g.members[other].id,
            "remoteId": g.members[f].id, "term": i64::MAX,
        });
        let cmd = RemotingCommand::request_empty(RequestCode(HEART_BEAT))
            .with_body(hb.to_string().into_bytes());
        let resp = call_once(g.members[f].ledger_addr, cmd)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "forged heartbeat to {} answered {:?}",
            g.members[f].id,
            String::from_utf8_lossy(resp.body())
        );
    }
    let after = control_send(&g, "FzR", 0, b"after", true, SETTLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}; roles {}", g.describe_roles()));
    let leader = g
        .wait_stable_leader(SETTLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    check_acked_everywhere(&g, leader, &[first, after])
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        panics(),
        before,
        "a member panicked; roles {}",
        g.describe_roles()
    );
    g.shutdown().await;
}
