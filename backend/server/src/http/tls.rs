//! Serving the router over HTTPS: a TCP accept loop, the rustls handshake (certificates from
//! [`crate::server_tls`], rotated without a restart), and hyper's HTTP/1 server per connection
//! — what `axum::serve` does for plain HTTP, with the peer's address given to handlers the same
//! way (`ConnectInfo`). A connection ends gracefully when lockscope stops (`stopping`).
//!
//! tokio-rustls with hyper-util rather than axum-server: both were already in the dependency
//! tree (redis and axum use them), the certificate comes from rustls' own resolver so no
//! reloading wrapper is needed, and axum-server would bring its own TLS configuration type
//! and a second provider default (aws-lc-rs) to switch off.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// A client that has not finished its handshake by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` over TLS on `listener` until the task is dropped; open connections end when
/// `stopping` turns `true`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Arc<rustls::ServerConfig>,
    stopping: tokio::sync::watch::Receiver<bool>,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
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
        let (acceptor, app, stopping) = (acceptor.clone(), app.clone(), stopping.clone());
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(
                move |mut request: hyper::Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(peer));
                    app.clone().oneshot(request)
                },
            );
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            let stop = super::stopped(stopping);
            tokio::pin!(stop);
            let stopped_first = tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "HTTPS connection ended with an error");
                    }
                    false
                }
                () = &mut stop => true,
            };
            if stopped_first {
                connection.as_mut().graceful_shutdown();
                let _ = connection.await;
            }
        });
    }
}
