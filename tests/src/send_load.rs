//! A load generator for the broker benchmark: many logical senders, each with one send in
//! flight, pipelined over one blocking TCP connection by a single thread.
//!
//! The benchmark shares its 2 cores with the three brokers, so every microsecond the client
//! spends per message is taken from them. An async client (runtime, waiter map, one task per
//! sender) cost 5.9-6.9 us per message here; this loop reads whatever answers arrived in one
//! `read`, queues the next request of each answered sender and sends them in one `write`, the
//! way a Netty producer's threads share one channel. The requests are real SEND_MESSAGE_V2
//! frames encoded by `remoting` once; as a sender has one request in flight, each send only
//! rewrites the opaque digits in its own frame and the batch goes out as one vectored write
//! of those frames (no copy). Each answer is checked for what the benchmark depends on: a
//! valid frame, the RESPONSE flag, the opaque of its sender's request in flight and whether
//! the code is SUCCESS. Those three are read straight from the header text in the compact
//! form `remoting` writes (building the whole command cost more than the rest of the loop);
//! any other header is fully decoded by `remoting` instead.

use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use remoting::frame::{check_prefix, decode_frame, DEFAULT_MAX_FRAME_LEN, LENGTH_FIELD_LEN};
use remoting::{RemotingCommand, ResponseCode, FLAG_RESPONSE};

/// What the senders saw: the latency of each successful send made while `measuring` was set,
/// and how many answers were not SUCCESS.
#[derive(Debug, Default)]
pub struct SendOutcome {
    pub latencies_us: Vec<u64>,
    pub failed: u64,
}

/// One logical sender: its requests, encoded once, how many it has sent, which one is in
/// flight and when it left.
struct Sender {
    frames: Vec<FrameTemplate>,
    next: usize,
    /// Index in `frames` of the request last sent.
    current: usize,
    /// Opaque of the request awaiting its answer; `None` from its answer until the next send,
    /// so a second answer to one request is caught instead of rewriting a queued frame.
    in_flight: Option<i32>,
    sent_at: Instant,
}

/// A request frame encoded once with a 10-digit placeholder opaque, and where those digits
/// are: each send writes its own opaque there (a JSON header's opaque is a plain decimal
/// number, so any 10-digit value fits) instead of encoding the header again. The frame is
/// its sender's alone and rewritten only once its previous send was answered.
struct FrameTemplate {
    bytes: Vec<u8>,
    opaque_at: usize,
}

/// The placeholder, and the base of every opaque sent: all of them have 10 digits.
const OPAQUE_BASE: usize = 1_000_000_000;

impl FrameTemplate {
    fn new(mut request: RemotingCommand) -> anyhow::Result<FrameTemplate> {
        request.set_opaque(OPAQUE_BASE as i32);
        let mut b = BytesMut::new();
        request.encode(&mut b, DEFAULT_MAX_FRAME_LEN)?;
        let needle = format!("\"opaque\":{OPAQUE_BASE}");
        let at = b
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .ok_or_else(|| anyhow::anyhow!("no JSON opaque in the request header"))?;
        Ok(FrameTemplate {
            bytes: b.to_vec(),
            opaque_at: at + needle.len() - 10,
        })
    }

    fn set_opaque(&mut self, opaque: usize) {
        // OPAQUE_BASE <= opaque < i32::MAX: always 10 digits, as many as the placeholder.
        self.bytes[self.opaque_at..self.opaque_at + 10]
            .copy_from_slice(itoa::Buffer::new().format(opaque).as_bytes());
    }
}

/// What the loop needs of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    flag: i32,
    opaque: i32,
    code: i32,
}

impl Answer {
    fn of(cmd: &RemotingCommand) -> Answer {
        Answer {
            flag: cmd.flag(),
            opaque: cmd.opaque(),
            code: cmd.code(),
        }
    }
}

/// Reads the answer in `frame` (one complete frame, length field included, as accepted by
/// [`check_prefix`]): from the header text when it has the form `remoting` writes, else by
/// decoding the whole command, which also reports any malformed frame.
fn read_answer(frame: &[u8]) -> anyhow::Result<Answer> {
    if let Some(a) = lean_answer(frame) {
        return Ok(a);
    }
    let mut b = BytesMut::from(frame);
    let raw = decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN)?
        .ok_or_else(|| anyhow::anyhow!("incomplete answer frame"))?;
    anyhow::ensure!(b.is_empty(), "answer frame longer than its length field");
    Ok(Answer::of(&RemotingCommand::from_frame(raw)?))
}

/// The answer of a JSON-serialized `frame` whose header is exactly in the compact form of
/// `remoting::header_encoding::json::encode`:
/// `{"code":N[,"extFields":{"k":"v",...}],"flag":N,"language":"L","opaque":N[,"remark":"R"],"serializeTypeCurrentRPC":"JSON","version":N}`
/// with printable-ASCII strings and plain escapes; `None` for anything else (then the full
/// decoder decides), so it never reads a value the full decoder would read differently.
fn lean_answer(frame: &[u8]) -> Option<Answer> {
    let word = frame.get(LENGTH_FIELD_LEN..LENGTH_FIELD_LEN + 4)?;
    if word[0] != 0 {
        return None; // not JSON
    }
    let header_len = u32::from_be_bytes([0, word[1], word[2], word[3]]) as usize;
    let start = LENGTH_FIELD_LEN + 4;
    let mut s = Scan {
        b: frame.get(start..start.checked_add(header_len)?)?,
        i: 0,
    };
    s.lit(b"{\"code\":")?;
    let code = s.int()?;
    if s.lit(b",\"extFields\":{").is_some() && s.lit(b"}").is_none() {
        loop {
            s.string()?;
            s.lit(b":")?;
            s.string()?;
            if s.lit(b",").is_none() {
                break;
            }
        }
        s.lit(b"}")?;
    }
    s.lit(b",\"flag\":")?;
    let flag = s.int()?;
    s.lit(b",\"language\":")?;
    s.string()?;
    s.lit(b",\"opaque\":")?;
    let opaque = s.int()?;
    if s.lit(b",\"remark\":").is_some() {
        s.string()?;
    }
    s.lit(b",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":")?;
    s.int()?;
    s.lit(b"}")?;
    (s.i == s.b.len()).then_some(Answer { flag, opaque, code })
}

/// A cursor over header text; every method either consumes what it matched or answers
/// `None` (the position then no longer matters: the caller gives up).
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    /// Exactly `lit`; consumes nothing if it is not there.
    fn lit(&mut self, lit: &[u8]) -> Option<()> {
        if self.b.get(self.i..)?.starts_with(lit) {
            self.i += lit.len();
            Some(())
        } else {
            None
        }
    }

    /// A JSON integer in canonical form (no leading zeros, no `-0`) that fits an i32.
    fn int(&mut self) -> Option<i32> {
        let neg = self.lit(b"-").is_some();
        let digits = self.b.get(self.i..)?;
        let len = digits.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 || len > 10 || (len > 1 && digits[0] == b'0') {
            return None;
        }
        let v = digits[..len]
            .iter()
            .fold(0i64, |v, c| v * 10 + i64::from(c - b'0'));
        if neg && v == 0 {
            return None;
        }
        self.i += len;
        i32::try_from(if neg { -v } else { v }).ok()
    }

    /// A string of printable ASCII whose escapes are one of `\" \\ \/ \b \f \n \r \t`.
    fn string(&mut self) -> Option<()> {
        self.lit(b"\"")?;
        loop {
            let c = *self.b.get(self.i)?;
            self.i += 1;
            match c {
                b'"' => return Some(()),
                b'\\' => {
                    let e = *self.b.get(self.i)?;
                    if !matches!(e, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') {
                        return None;
                    }
                    self.i += 1;
                }
                0x20..=0x7e => {}
                _ => return None,
            }
        }
    }
}

/// Writes the current frames of `ready` senders with as few `writev` calls as the kernel
/// allows: one when it takes them all, as a single `write` of their copies did before.
fn send_frames(stream: &mut TcpStream, senders: &[Sender], ready: &[usize]) -> anyhow::Result<()> {
    let mut iov: Vec<IoSlice<'_>> = ready
        .iter()
        .map(|&w| IoSlice::new(&senders[w].frames[senders[w].current].bytes))
        .collect();
    let mut rest = &mut iov[..];
    while !rest.is_empty() {
        match stream.write_vectored(rest) {
            Ok(0) => anyhow::bail!("the broker connection takes no more bytes"),
            Ok(k) => IoSlice::advance_slices(&mut rest, k),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Bytes the receive buffer starts with; a `read` is offered at least `MIN_READ` of them.
const READ_BUF: usize = 256 * 1024;
const MIN_READ: usize = 64 * 1024;

/// Runs `requests.len()` senders against `addr` until `stop` is set. Sender `w` cycles
/// through `requests[w]`; its sends carry opaques `B + w, B + n + w, B + 2n + w, ...`
/// (`B` = [`OPAQUE_BASE`]) so an answer names its sender without a lookup table. `started`
/// counts senders that have had an answer.
pub fn run_pipelined_senders(
    addr: SocketAddr,
    requests: Vec<Vec<RemotingCommand>>,
    stop: &AtomicBool,
    measuring: &AtomicBool,
    started: &AtomicUsize,
) -> anyhow::Result<SendOutcome> {
    let n = requests.len();
    anyhow::ensure!(
        n > 0 && requests.iter().all(|r| !r.is_empty()),
        "no requests"
    );
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    // Wakes the loop now and then so `stop` is seen even if the broker stops answering.
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let mut senders = Vec::with_capacity(n);
    for reqs in requests {
        senders.push(Sender {
            frames: reqs
                .into_iter()
                .map(FrameTemplate::new)
                .collect::<anyhow::Result<_>>()?,
            next: 0,
            current: 0,
            in_flight: None,
            sent_at: Instant::now(),
        });
    }
    // Opaques name their sender: OPAQUE_BASE + k * n + w, wrapping at a multiple of n so
    // they keep 10 digits and stay below i32::MAX.
    let opaque_span = ((i32::MAX as usize - OPAQUE_BASE) / n) * n;
    let queue_next = |s: &mut Sender, w: usize| {
        let k = s.next % s.frames.len();
        let opaque = OPAQUE_BASE + (s.next * n + w) % opaque_span;
        s.next += 1;
        s.current = k;
        s.in_flight = Some(opaque as i32);
        s.sent_at = Instant::now();
        s.frames[k].set_opaque(opaque);
    };
    // Senders answered in the current read, in answer order: their next requests leave
    // together once the read is processed.
    let mut ready: Vec<usize> = (0..n).collect();
    for (w, s) in senders.iter_mut().enumerate() {
        queue_next(s, w);
    }
    send_frames(&mut stream, &senders, &ready)?;
    ready.clear();
    let mut outcome = SendOutcome::default();
    // Received bytes are `inbuf[head..tail]`; reads go straight into `inbuf[tail..]` (a
    // `Vec` kept initialized, so no copy out of a separate read buffer and no zeroing).
    let mut inbuf = vec![0u8; READ_BUF];
    let (mut head, mut tail) = (0, 0);
    while !stop.load(Ordering::Relaxed) {
        if inbuf.len() - tail < MIN_READ {
            inbuf.copy_within(head..tail, 0);
            tail -= head;
            head = 0;
            if inbuf.len() - tail < MIN_READ {
                inbuf.resize(tail + MIN_READ.max(inbuf.len()), 0);
            }
        }
        let got = match stream.read(&mut inbuf[tail..]) {
            Ok(0) => anyhow::bail!("broker closed the connection"),
            Ok(k) => k,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        };
        tail += got;
        let now = Instant::now();
        let is_measuring = measuring.load(Ordering::Relaxed);
        while let Some(total) = check_prefix(&inbuf[head..tail], DEFAULT_MAX_FRAME_LEN)? {
            if tail - head < total {
                break;
            }
            let frame = &inbuf[head..head + total];
            head += total;
            let answer = read_answer(frame)?;
            let opaque = answer.opaque;
            anyhow::ensure!(
                answer.flag & FLAG_RESPONSE != 0 && opaque >= OPAQUE_BASE as i32,
                "unexpected frame (opaque {opaque})"
            );
            let w = (opaque as usize - OPAQUE_BASE) % n;
            let s = &mut senders[w];
            anyhow::ensure!(
                s.in_flight == Some(opaque),
                "answer with opaque {opaque} while sender {w} awaits {:?}",
                s.in_flight
            );
            s.in_flight = None;
            if answer.code == ResponseCode::SUCCESS.0 {
                if is_measuring {
                    outcome
                        .latencies_us
                        .push(now.duration_since(s.sent_at).as_micros() as u64);
                }
            } else {
                outcome.failed += 1;
            }
            // One send so far: this is the sender's first answer.
            if s.next == 1 {
                started.fetch_add(1, Ordering::Relaxed);
            }
            ready.push(w);
        }
        if head == tail {
            (head, tail) = (0, 0);
        }
        if !ready.is_empty() {
            for &w in &ready {
                queue_next(&mut senders[w], w);
            }
            send_frames(&mut stream, &senders, &ready)?;
            ready.clear();
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use remoting::frame::encode_frame;
    use remoting::{processor_fn, RemotingServer, RequestCode, SerializeType, ServerConfig};
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    /// Every sender's requests reach the server with its own opaques and in its own order,
    /// answers are matched back (failures counted, successes timed) until `stop`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn senders_pipeline_their_requests_and_match_every_answer() {
        const SENDERS: usize = 8;
        let seen = Arc::new(AtomicU64::new(0));
        let mismatched = Arc::new(AtomicU64::new(0));
        let (s2, m2) = (seen.clone(), mismatched.clone());
        let server = RemotingServer::builder(ServerConfig::default())
            .register(
                RequestCode::SEND_MESSAGE_V2,
                processor_fn(move |_conn, request| {
                    let k = s2.fetch_add(1, Ordering::Relaxed);
                    // Sender w's j-th request has opaque BASE + j * SENDERS + w and body
                    // "j % 2 + 10 * w".
                    let rel = (request.opaque() as usize).wrapping_sub(OPAQUE_BASE);
                    let (w, j) = (rel % SENDERS, rel / SENDERS);
                    if request.body().as_ref() != format!("{}", j % 2 + 10 * w).as_bytes() {
                        m2.fetch_add(1, Ordering::Relaxed);
                    }
                    async move {
                        Some(if k % 10 == 9 {
                            RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "every tenth")
                        } else {
                            RemotingCommand::success()
                        })
                    }
                }),
            )
            .bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let addr = server.local_addr();
        let requests = (0..SENDERS)
            .map(|w| {
                (0..2)
                    .map(|j| {
                        crate::client::Client::send_request(
                            "T",
                            0,
                            format!("{}", j + 10 * w).as_bytes(),
                            "",
                        )
                    })
                    .collect()
            })
            .collect();
        let flags = Arc::new((
            AtomicBool::new(false),
            AtomicBool::new(true),
            AtomicUsize::new(0),
        ));
        let f2 = flags.clone();
        let run =
            std::thread::spawn(move || run_pipelined_senders(addr, requests, &f2.0, &f2.1, &f2.2));
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen.load(Ordering::Relaxed) < 2000 {
            assert!(Instant::now() < deadline, "the senders stalled");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        flags.0.store(true, Ordering::Relaxed);
        let outcome = run.join().unwrap().unwrap();
        let answered = outcome.latencies_us.len() as u64 + outcome.failed;
        let sent = seen.load(Ordering::Relaxed);
        assert!(answered >= 1990 && answered <= sent, "{answered} of {sent}");
        assert!(
            outcome.failed >= answered / 10 - SENDERS as u64,
            "{outcome:?}"
        );
        assert!(outcome.failed <= answered / 10 + SENDERS as u64);
        assert_eq!(flags.2.load(Ordering::Relaxed), SENDERS);
        assert_eq!(mismatched.load(Ordering::Relaxed), 0);
        server.shutdown().await;
    }

    /// What the full decoder reads from `frame`, `None` if it rejects it.
    fn full_answer(frame: &[u8]) -> Option<Answer> {
        let mut b = BytesMut::from(frame);
        let raw = decode_frame(&mut b, DEFAULT_MAX_FRAME_LEN).ok()??;
        RemotingCommand::from_frame(raw)
            .ok()
            .map(|c| Answer::of(&c))
    }

    /// The lean check reads the same flag, opaque and code as `RemotingCommand::from_frame`
    /// from the headers `remoting` writes (extFields and remarks that mention the keys
    /// included), and leaves every other header to it.
    #[test]
    fn lean_answer_check_agrees_with_the_full_decoder() {
        let opaques = [
            0,
            1,
            7,
            OPAQUE_BASE as i32,
            2_147_483_599,
            i32::MAX,
            -1,
            i32::MIN,
        ];
        let tricky = RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "x")
            .with_ext_field("code", "5")
            .with_ext_field("flag", "0")
            .with_ext_field("opaque", "\"opaque\":7,\"code\":3")
            .with_ext_field("msgId", "C0A8000100002A9F0000000000001234")
            .with_ext_field("queueOffset", "123456789")
            .with_ext_field("back\\slash", "tab\there}{");
        let mut fast = vec![
            RemotingCommand::success(),
            RemotingCommand::success()
                .with_ext_field("msgId", "0A0B")
                .with_ext_field("queueId", "3"),
            RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "x"),
            tricky.clone(),
            RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "say \"code\":0,\"flag\":1")
                .with_ext_field("extFields", "{}"),
            RemotingCommand::response(ResponseCode(-17), "").with_version(-3),
            RemotingCommand::success().with_flag(0), // not a response
            RemotingCommand::success().with_flag(3),
            RemotingCommand::success().with_flag(-2),
        ];
        let mut slow = vec![
            // Left to the full decoder: non-ASCII text, \u escapes, binary headers.
            RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "déjà"),
            RemotingCommand::response(ResponseCode::SYSTEM_ERROR, "bell \u{7}"),
            RemotingCommand::success().with_ext_field("k", "\u{1}"),
            RemotingCommand::success().with_serialize_type(SerializeType::RocketMq),
            tricky.with_serialize_type(SerializeType::RocketMq),
        ];
        let mut checked = 0;
        for (list, lean) in [(&mut fast, true), (&mut slow, false)] {
            for cmd in list.iter_mut() {
                for &opaque in &opaques {
                    cmd.set_opaque(opaque);
                    let frame = cmd.encode_to_bytes().unwrap();
                    let full = full_answer(&frame).expect("remoting reads its own frame");
                    assert_eq!(full.opaque, opaque);
                    assert_eq!(read_answer(&frame).unwrap(), full, "{cmd:?}");
                    let want = if lean { Some(full) } else { None };
                    assert_eq!(lean_answer(&frame), want, "{cmd:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 14 * opaques.len());

        // Headers in other forms: the lean check declines, the answer is the full decoder's
        // (or an error where it has none).
        let others: &[&[u8]] = &[
            br#"{"flag":1,"code":0,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0, "flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1} "#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1,"code":3}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":005,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":-0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":2147483648,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":"5","serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"extFields":{"a":1},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"extFields":{"a":"1"}"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":5,"remark":"\x","serializeTypeCurrentRPC":"JSON","version":1}"#,
            br#"{"code":0,"flag":1,"language":"JAVA","opaque":5"#,
            b"",
        ];
        for header in others {
            let mut b = BytesMut::new();
            encode_frame(
                &mut b,
                SerializeType::Json,
                header,
                b"body",
                DEFAULT_MAX_FRAME_LEN,
            )
            .unwrap();
            assert_eq!(lean_answer(&b), None, "{}", String::from_utf8_lossy(header));
            assert_eq!(
                read_answer(&b).ok(),
                full_answer(&b),
                "{}",
                String::from_utf8_lossy(header)
            );
        }
        // The reference form itself is read.
        let mut b = BytesMut::new();
        let header = br#"{"code":0,"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":1}"#;
        encode_frame(
            &mut b,
            SerializeType::Json,
            header,
            b"",
            DEFAULT_MAX_FRAME_LEN,
        )
        .unwrap();
        let want = Answer {
            flag: 1,
            opaque: 5,
            code: 0,
        };
        assert_eq!(lean_answer(&b), Some(want));
        assert_eq!(full_answer(&b), Some(want));
    }
}
