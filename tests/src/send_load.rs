//! A load generator for the broker benchmark: many logical senders, each with one send in
//! flight, pipelined over one blocking TCP connection by a single thread.
//!
//! The benchmark shares its 2 cores with the three brokers, so every microsecond the client
//! spends per message is taken from them. An async client (runtime, waiter map, one task per
//! sender) cost 5.9-6.9 us per message here; this loop reads whatever answers arrived in one
//! `read`, queues the next request of each answered sender and sends them in one `write`, the
//! way a Netty producer's threads share one channel. The requests are real SEND_MESSAGE_V2
//! frames encoded by `remoting` (once, then sent with a fresh opaque each time) and every
//! answer is fully decoded and checked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use remoting::frame::{decode_frame, DEFAULT_MAX_FRAME_LEN};
use remoting::{RemotingCommand, ResponseCode};

/// What the senders saw: the latency of each successful send made while `measuring` was set,
/// and how many answers were not SUCCESS.
#[derive(Debug, Default)]
pub struct SendOutcome {
    pub latencies_us: Vec<u64>,
    pub failed: u64,
}

/// One logical sender: its requests, encoded once, how many it has sent and when its
/// current one left.
struct Sender {
    frames: Vec<FrameTemplate>,
    next: usize,
    sent_at: Instant,
}

/// A request frame encoded once with a 10-digit placeholder opaque, and where those digits
/// are: each send copies the frame and writes its own opaque there (a JSON header's opaque
/// is a plain decimal number, so any 10-digit value fits), instead of encoding the header
/// again.
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

    fn write_with_opaque(&self, opaque: usize, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.bytes);
        // OPAQUE_BASE <= opaque < i32::MAX: always 10 digits, as many as the placeholder.
        out[start + self.opaque_at..start + self.opaque_at + 10]
            .copy_from_slice(itoa::Buffer::new().format(opaque).as_bytes());
    }
}

/// Runs `requests.len()` senders against `addr` until `stop` is set. Sender `w` cycles
/// through `requests[w]`; its sends carry opaques `B + w, B + n + w, B + 2n + w, ...`
/// (`B` = [`OPAQUE_BASE`]) so an answer names its sender without a lookup table. `started` counts senders that have had an answer.
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
            sent_at: Instant::now(),
        });
    }
    let mut out = Vec::with_capacity(256 * 1024);
    let mut inbuf = BytesMut::with_capacity(256 * 1024);
    // Opaques name their sender: OPAQUE_BASE + k * n + w, wrapping at a multiple of n so
    // they keep 10 digits and stay below i32::MAX.
    let opaque_span = ((i32::MAX as usize - OPAQUE_BASE) / n) * n;
    let queue_next = |s: &mut Sender, w: usize, out: &mut Vec<u8>| {
        let k = s.next % s.frames.len();
        let opaque = OPAQUE_BASE + (s.next * n + w) % opaque_span;
        s.next += 1;
        s.sent_at = Instant::now();
        s.frames[k].write_with_opaque(opaque, out);
    };
    for (w, s) in senders.iter_mut().enumerate() {
        queue_next(s, w, &mut out);
    }
    stream.write_all(&out)?;
    out.clear();
    let mut outcome = SendOutcome::default();
    let mut chunk = vec![0u8; 128 * 1024];
    while !stop.load(Ordering::Relaxed) {
        let got = match stream.read(&mut chunk) {
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
        inbuf.extend_from_slice(&chunk[..got]);
        let now = Instant::now();
        let is_measuring = measuring.load(Ordering::Relaxed);
        while let Some(frame) = decode_frame(&mut inbuf, DEFAULT_MAX_FRAME_LEN)? {
            let answer = RemotingCommand::from_frame(frame)?;
            let opaque = answer.opaque();
            anyhow::ensure!(
                answer.is_response() && opaque >= OPAQUE_BASE as i32,
                "unexpected frame (opaque {opaque})"
            );
            let w = (opaque as usize - OPAQUE_BASE) % n;
            let s = &mut senders[w];
            if answer.response_code() == ResponseCode::SUCCESS {
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
            queue_next(s, w, &mut out);
        }
        if !out.is_empty() {
            stream.write_all(&out)?;
            out.clear();
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use remoting::{processor_fn, RemotingServer, RequestCode, ServerConfig};
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
}
