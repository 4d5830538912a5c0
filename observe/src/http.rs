//! Minimal HTTP/1.1 server for scrapes: `GET /metrics` (or `HEAD`) answers 200 with the
//! registry's exposition; any other path 404, any other method 405, anything unparsable 400,
//! a head larger than the limit 431, a client silent past the read timeout 408. One request
//! per connection (`Connection: close`), a bounded number of connections, a fixed-size read
//! buffer: no input makes it allocate past its limits or panic. Stops accepting and closes
//! its connections when its cancellation token fires.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::ObserveError;
use crate::exposition::CONTENT_TYPE;
use crate::registry::Registry;

/// Limits of the metrics endpoint.
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    /// Largest request head (request line + headers) accepted.
    pub max_request_bytes: usize,
    /// How long a client may take to send its whole request head.
    pub read_timeout: Duration,
    /// How long writing the response may take.
    pub write_timeout: Duration,
    /// Connections served at once; more are closed at once.
    pub max_connections: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_request_bytes: 8 * 1024,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_connections: 32,
        }
    }
}

/// A running metrics endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    local_addr: SocketAddr,
    task: JoinHandle<()>,
}

impl MetricsServer {
    /// Serves `registry` on `ip:port`, or does nothing (`None`) when `port` is 0: port 0 is
    /// the configuration value for "metrics off".
    pub async fn start_on_port(
        ip: IpAddr,
        port: u16,
        registry: Arc<Registry>,
        cancel: CancellationToken,
    ) -> Result<Option<MetricsServer>, ObserveError> {
        if port == 0 {
            return Ok(None);
        }
        let server = Self::bind(
            SocketAddr::new(ip, port),
            registry,
            HttpLimits::default(),
            cancel,
        )
        .await?;
        Ok(Some(server))
    }

    /// Serves `registry` on `addr` (port 0 picks a free port: tests).
    pub async fn bind(
        addr: SocketAddr,
        registry: Arc<Registry>,
        limits: HttpLimits,
        cancel: CancellationToken,
    ) -> Result<MetricsServer, ObserveError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ObserveError::Bind { addr, source })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| ObserveError::Bind { addr, source })?;
        info!(%local_addr, "metrics endpoint listening");
        let task = tokio::spawn(accept_loop(listener, registry, limits, cancel));
        Ok(MetricsServer { local_addr, task })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Waits until the server has stopped (after its token was cancelled) and every
    /// connection task has ended.
    pub async fn stopped(self) {
        if let Err(e) = self.task.await {
            warn!(error = %e, "metrics endpoint task ended abnormally");
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    registry: Arc<Registry>,
    limits: HttpLimits,
    cancel: CancellationToken,
) {
    let tracker = TaskTracker::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let accepted = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!(error = %e, "metrics endpoint accept failed");
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            debug!(%peer, "metrics endpoint busy, closing connection");
            drop(stream);
            continue;
        };
        let registry = Arc::clone(&registry);
        let cancel = cancel.clone();
        tracker.spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = serve_connection(stream, &registry, limits) => {}
            }
            drop(permit);
        });
    }
    tracker.close();
    tracker.wait().await;
    debug!("metrics endpoint stopped");
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Metrics { head_only: bool },
    NotFound,
    MethodNotAllowed,
    Malformed,
}

async fn serve_connection(mut stream: TcpStream, registry: &Registry, limits: HttpLimits) {
    let mut buf = vec![0u8; limits.max_request_bytes.max(16)];
    let mut filled = 0usize;
    // One deadline for the whole head: a client trickling bytes cannot hold a slot longer.
    let deadline = tokio::time::Instant::now() + limits.read_timeout;
    let request = loop {
        if let Some(end) = head_end(&buf[..filled]) {
            break parse_head(&buf[..end]);
        }
        if filled == buf.len() {
            respond(
                &mut stream,
                limits,
                431,
                "Request Header Fields Too Large",
                None,
            )
            .await;
            return;
        }
        let read = tokio::time::timeout_at(deadline, stream.read(&mut buf[filled..]));
        match read.await {
            Err(_) => {
                respond(&mut stream, limits, 408, "Request Timeout", None).await;
                return;
            }
            Ok(Ok(0)) | Ok(Err(_)) => return,
            Ok(Ok(n)) => filled += n,
        }
    };
    match request {
        Request::Metrics { head_only } => {
            let body = registry.render();
            let status = (200, "OK");
            let response = build_response(status, CONTENT_TYPE, "", &body, head_only);
            write_all(&mut stream, limits, &response).await;
        }
        Request::NotFound => respond(&mut stream, limits, 404, "Not Found", None).await,
        Request::MethodNotAllowed => {
            respond(
                &mut stream,
                limits,
                405,
                "Method Not Allowed",
                Some("GET, HEAD"),
            )
            .await
        }
        Request::Malformed => respond(&mut stream, limits, 400, "Bad Request", None).await,
    }
}

/// Length of the head including its blank line, if complete (CRLF or bare LF endings).
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Reads the request line; headers are ignored (no body is ever expected).
fn parse_head(head: &[u8]) -> Request {
    let Ok(text) = std::str::from_utf8(head) else {
        return Request::Malformed;
    };
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Request::Malformed;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Request::Malformed;
    }
    let path = target.split('?').next().unwrap_or(target);
    if path != "/metrics" {
        return Request::NotFound;
    }
    match method {
        "GET" => Request::Metrics { head_only: false },
        "HEAD" => Request::Metrics { head_only: true },
        m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => {
            Request::MethodNotAllowed
        }
        _ => Request::Malformed,
    }
}

/// Status line, headers (`extra_headers` is zero or more `Name: value\r\n` lines) and body.
fn build_response(
    (code, reason): (u16, &str),
    content_type: &str,
    extra_headers: &str,
    body: &str,
    head_only: bool,
) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra_headers}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

async fn respond(
    stream: &mut TcpStream,
    limits: HttpLimits,
    code: u16,
    reason: &str,
    allow: Option<&str>,
) {
    let body = format!("{code} {reason}\n");
    let extra = allow.map(|a| format!("Allow: {a}\r\n")).unwrap_or_default();
    let response = build_response(
        (code, reason),
        "text/plain; charset=utf-8",
        &extra,
        &body,
        false,
    );
    write_all(stream, limits, &response).await;
}

async fn write_all(stream: &mut TcpStream, limits: HttpLimits, bytes: &[u8]) {
    let write = async {
        stream.write_all(bytes).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(limits.write_timeout, write).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => debug!(error = %e, "metrics response not delivered"),
        Err(_) => debug!("metrics response write timed out"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_are_classified() {
        let cases: [(&[u8], Request); 10] = [
            (
                b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                Request::Metrics { head_only: false },
            ),
            (
                b"GET /metrics?name[]=a HTTP/1.0\r\n\r\n",
                Request::Metrics { head_only: false },
            ),
            (
                b"HEAD /metrics HTTP/1.1\r\n\r\n",
                Request::Metrics { head_only: true },
            ),
            (b"GET / HTTP/1.1\r\n\r\n", Request::NotFound),
            (b"GET /metricsx HTTP/1.1\r\n\r\n", Request::NotFound),
            (b"POST /metrics HTTP/1.1\r\n\r\n", Request::MethodNotAllowed),
            (b"GET /metrics\r\n\r\n", Request::Malformed),
            (b"GET /metrics SMTP/1.1\r\n\r\n", Request::Malformed),
            (b"GET metrics HTTP/1.1\r\n\r\n", Request::Malformed),
            (b"\xff\xfe /metrics HTTP/1.1\r\n\r\n", Request::Malformed),
        ];
        for (head, want) in cases {
            assert_eq!(
                parse_head(head),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn head_end_accepts_crlf_and_lf() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: a\r\n"), None);
        assert_eq!(head_end(b""), None);
    }

    #[test]
    fn responses_carry_length_and_close() {
        let r = build_response((405, "No"), "text/plain", "Allow: GET\r\n", "x\n", false);
        let want = "HTTP/1.1 405 No\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\
                    Allow: GET\r\nConnection: close\r\n\r\nx\n";
        assert_eq!(String::from_utf8(r).unwrap(), want);
        let head = build_response((200, "OK"), "t", "", "body", true);
        assert!(String::from_utf8(head)
            .unwrap()
            .ends_with("Content-Length: 4\r\nConnection: close\r\n\r\n"));
    }
}
