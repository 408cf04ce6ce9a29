//! Serving the router: one TCP accept loop for plain HTTP and HTTPS (the rustls handshake with
//! certificates from [`crate::server_tls`], rotated without a restart), hyper's HTTP/1 server
//! per connection, the peer's address given to handlers as `axum::serve` gives it
//! (`ConnectInfo`). A connection ends gracefully when lockscope stops (`stopping`).
//!
//! What it owns is what keeps slow and greedy clients from holding the server:
//! * **a header-read timeout** (`[http] header_read_timeout`, hyper's own timer): a connection
//!   that has not sent a whole request head that long after it opened, or after its last answer
//!   (an idle keep-alive), is closed; a TLS handshake gets as long;
//! * **an idle timeout** (`[http] idle_timeout`): a connection whose request is being answered
//!   but that moved no byte either way that long is closed (a client that stopped reading;
//!   event streams write a comment every 15 s);
//! * **a connection cap** (`[http] max_connections`): past it, a new connection closes one that
//!   has not sent a whole request head yet (oldest first), else one idle between requests, else
//!   it is closed itself — so a crowd that never finishes its requests cannot keep anyone out.
//!
//! Each closed connection is counted by reason (`lockscope_http_connections_closed_total`).
//!
//! tokio-rustls with hyper-util rather than axum-server: both were already in the dependency
//! tree (redis and axum use them), the certificate comes from rustls' own resolver so no
//! reloading wrapper is needed, and hyper's builder takes the header timeout and timer that
//! `axum::serve` does not expose.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::Router;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tower::ServiceExt;

use crate::metrics::own::HttpMetrics;

/// How often a connection looks at its idle time.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The limits a listener holds its connections to (`[http]`).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
}

impl Limits {
    pub fn from_config(http: &crate::config::HttpConfig) -> Limits {
        Limits {
            header_read_timeout: http.header_read_timeout,
            idle_timeout: http.idle_timeout,
            max_connections: http.max_connections.max(1),
        }
    }
}

/// One open connection as the cap sees it.
struct Conn {
    opened: Instant,
    /// Request heads received whole.
    requests: AtomicU64,
    /// Requests whose answer is not done (its body not yet dropped).
    in_flight: AtomicUsize,
    /// When a byte last moved either way, ms after `opened`.
    moved_ms: AtomicU64,
    /// Told to close (the cap needs its room).
    evict: Notify,
}

impl Conn {
    fn touch(&self) {
        let ms = self.opened.elapsed().as_millis() as u64;
        self.moved_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let moved = Duration::from_millis(self.moved_ms.load(Ordering::Relaxed));
        self.opened.elapsed().saturating_sub(moved)
    }
}

/// The open connections, by a number of their own.
#[derive(Default)]
struct Open {
    next: u64,
    conns: HashMap<u64, Arc<Conn>>,
}

impl Open {
    /// Room for one more connection under `max`: `Some` its number (after telling a victim to
    /// close if need be), `None` when every connection is busy answering.
    fn admit(&mut self, max: usize, metrics: &HttpMetrics) -> Option<(u64, Arc<Conn>)> {
        if self.conns.len() >= max {
            let victim = self
                .oldest(|c| c.requests.load(Ordering::Relaxed) == 0)
                .or_else(|| self.oldest(|c| c.in_flight.load(Ordering::Relaxed) == 0));
            let conn = self.conns.remove(&victim?)?;
            conn.evict.notify_one();
            metrics.closed("evicted");
        }
        self.next += 1;
        let conn = Arc::new(Conn {
            opened: Instant::now(),
            requests: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            moved_ms: AtomicU64::new(0),
            evict: Notify::new(),
        });
        self.conns.insert(self.next, conn.clone());
        Some((self.next, conn))
    }

    fn oldest(&self, which: impl Fn(&Conn) -> bool) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| which(c))
            .min_by_key(|(_, c)| c.opened)
            .map(|(id, _)| *id)
    }
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until the task is dropped; open
/// connections end when `stopping` turns `true`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    metrics: HttpMetrics,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let open: Arc<Mutex<Open>> = Arc::default();
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let admitted = open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(limits.max_connections, &metrics);
        let Some((id, conn)) = admitted else {
            metrics.closed("refused");
            tracing::debug!(%peer, "connection refused: max_connections reached");
            drop(tcp);
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app, stopping) = (acceptor.clone(), app.clone(), stopping.clone());
        let (open, metrics) = (open.clone(), metrics.clone());
        tokio::spawn(async move {
            let _counted = metrics.connection();
            match acceptor {
                None => connection(tcp, peer, app, &conn, limits, &metrics, stopping).await,
                Some(acceptor) => {
                    let handshake =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(tcp));
                    let stream = tokio::select! {
                        done = handshake => match done {
                            Ok(Ok(stream)) => Some(stream),
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                None
                            }
                            Err(_) => {
                                metrics.closed("header_timeout");
                                None
                            }
                        },
                        () = conn.evict.notified() => None,
                    };
                    if let Some(stream) = stream {
                        connection(stream, peer, app, &conn, limits, &metrics, stopping).await;
                    }
                }
            }
            open.lock()
                .unwrap_or_else(|e| e.into_inner())
                .conns
                .remove(&id);
        });
    }
}

/// Serves one connection's requests until it ends, times out, is evicted or lockscope stops.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: Router,
    conn: &Arc<Conn>,
    limits: Limits,
    metrics: &HttpMetrics,
    stopping: tokio::sync::watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let counting = conn.clone();
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            counting.requests.fetch_add(1, Ordering::Relaxed);
            counting.in_flight.fetch_add(1, Ordering::Relaxed);
            let answering = InFlight(counting.clone());
            let answer = app.clone().oneshot(request);
            async move {
                let response = answer.await?;
                // The request counts as in flight until its body is done (or dropped).
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    axum::body::Body::new(body.map_frame(move |frame| {
                        let _ = &answering;
                        frame
                    }))
                }))
            }
        });
    let io = Watched {
        inner: io,
        conn: conn.clone(),
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let stop = super::stopped(stopping);
    tokio::pin!(stop);
    let mut idle = tokio::time::interval(IDLE_CHECK);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let graceful = loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    if e.is_timeout() {
                        metrics.closed("header_timeout");
                    }
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                return;
            }
            () = &mut stop => break true,
            () = conn.evict.notified() => break false,
            _ = idle.tick() => {
                if conn.in_flight.load(Ordering::Relaxed) > 0
                    && conn.idle_for() >= limits.idle_timeout
                {
                    metrics.closed("idle_timeout");
                    tracing::debug!(%peer, "connection closed: idle_timeout");
                    break false;
                }
            }
        }
    };
    if graceful {
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// Keeps a request counted in flight while it lives.
struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's byte stream, noting when a byte last moved either way.
struct Watched<I> {
    inner: I,
    conn: Arc<Conn>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.conn.touch();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.conn.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(requests: u64, in_flight: usize) -> Arc<Conn> {
        Arc::new(Conn {
            opened: Instant::now(),
            requests: AtomicU64::new(requests),
            in_flight: AtomicUsize::new(in_flight),
            moved_ms: AtomicU64::new(0),
            evict: Notify::new(),
        })
    }

    #[test]
    fn past_the_cap_a_connection_without_a_whole_head_goes_first() {
        let metrics = HttpMetrics::default();
        let mut open = Open::default();
        open.conns.insert(1, conn(3, 1)); // answering
        open.conns.insert(2, conn(2, 0)); // idle between requests
        open.conns.insert(3, conn(0, 0)); // no whole head yet
        open.next = 3;
        let busy = |(_, c): (u64, Arc<Conn>)| {
            c.requests.store(1, Ordering::Relaxed);
            c.in_flight.store(1, Ordering::Relaxed);
        };
        open.admit(3, &metrics).map(busy).expect("room made");
        assert!(!open.conns.contains_key(&3), "the headless one went first");
        open.admit(3, &metrics).map(busy).expect("room made");
        assert!(!open.conns.contains_key(&2), "then the idle one");
        // Only busy connections are left: nothing gives way.
        assert!(open.admit(3, &metrics).is_none());
        assert_eq!(open.conns.len(), 3);
    }
}
