//! Running behind a proxy: the base path lockscope serves under (`[http] base_path`) and the
//! client address a trusted proxy forwards (`[http] trusted_proxies`).
//!
//! The outermost layer of the router ([`edge`]) does both before routing: it takes the base
//! path off the request's path (anything outside it is a 404; the base path itself redirects to
//! the base path with a slash, where the UI's relative URLs resolve) and stores the request's
//! [`ClientAddr`] and [`BasePath`] as extensions. The client address is the TCP peer's, unless
//! the peer is a trusted proxy: then it is the rightmost address of `X-Forwarded-For` that is
//! not itself a trusted proxy (addresses further left were written by the client and prove
//! nothing). The admin router audits and rate-limits by it, the read checks rate-limit by it.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use ipnet::IpNet;

/// The client's address as lockscope judges it (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

/// The base path the request came under (`""` at the root), for the UI's `index.html`.
#[derive(Debug, Clone)]
pub struct BasePath(pub Arc<str>);

/// What [`edge`] needs.
#[derive(Debug, Clone, Default)]
pub struct Edge {
    /// `""` or `/x`, without a trailing slash.
    pub base_path: Arc<str>,
    pub trusted: Arc<Vec<IpNet>>,
}

/// The client of a request from `peer` with `headers` (see the module doc).
pub fn client_address(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|net| net.contains(&canonical(*ip)));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        let Some(ip) = parse_hop(hop) else {
            // Garbage: the hop that wrote it is the last one known.
            return client;
        };
        client = ip;
        if !is_trusted(&ip) {
            return ip;
        }
    }
    client
}

/// An IPv4 address written as IPv6 (`::ffff:a.b.c.d`, what a dual-stack socket reports) as IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5`, `[::1]:5`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>()
        .or_else(|_| hop.parse::<SocketAddr>().map(|s| s.ip()))
        .ok()
        .map(canonical)
}

/// The outermost layer: base path off, client address and base path on (module doc).
pub async fn edge(State(edge): State<Edge>, mut request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| canonical(c.0.ip()));
    if let Some(peer) = peer {
        let client = client_address(peer, request.headers(), &edge.trusted);
        request.extensions_mut().insert(ClientAddr(client));
    }
    request
        .extensions_mut()
        .insert(BasePath(edge.base_path.clone()));
    let base = &*edge.base_path;
    if base.is_empty() {
        return next.run(request).await;
    }
    let path = request.uri().path();
    let rest = match path.strip_prefix(base) {
        Some("") => {
            let query = request
                .uri()
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            return (
                StatusCode::PERMANENT_REDIRECT,
                [(header::LOCATION, format!("{base}/{query}"))],
            )
                .into_response();
        }
        Some(rest) if rest.starts_with('/') => rest.to_string(),
        _ => {
            return super::AppError(
                StatusCode::NOT_FOUND,
                format!("lockscope is served under {base}/"),
            )
            .into_response()
        }
    };
    let path_and_query = match request.uri().query() {
        Some(q) => format!("{rest}?{q}"),
        None => rest,
    };
    let mut parts = request.uri().clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    match Uri::from_parts(parts) {
        Ok(uri) => *request.uri_mut() = uri,
        Err(_) => {
            return super::AppError(StatusCode::BAD_REQUEST, "bad request path".into())
                .into_response()
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarded_addresses_count_only_from_trusted_proxies() {
        let trusted: Vec<IpNet> = vec![
            "10.0.0.0/8".parse().expect("net"),
            "127.0.0.1/32".parse().expect("net"),
        ];
        let headers = |xff: &str| {
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", xff.parse().expect("value"));
            h
        };
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        // An untrusted peer's header is ignored.
        assert_eq!(
            client_address(ip("192.0.2.9"), &headers("203.0.113.7"), &trusted),
            ip("192.0.2.9")
        );
        // Through a trusted proxy: the rightmost address that is not a trusted proxy.
        assert_eq!(
            client_address(
                ip("127.0.0.1"),
                &headers("6.6.6.6, 203.0.113.7, 10.1.2.3"),
                &trusted
            ),
            ip("203.0.113.7")
        );
        // Mapped IPv4 and ports are read; garbage stops at the last hop known.
        assert_eq!(
            client_address(
                ip("::ffff:127.0.0.1"),
                &headers("198.51.100.4:5555"),
                &trusted
            ),
            ip("198.51.100.4")
        );
        assert_eq!(
            client_address(ip("127.0.0.1"), &headers("nonsense"), &trusted),
            ip("127.0.0.1")
        );
        assert_eq!(
            client_address(ip("127.0.0.1"), &HeaderMap::new(), &trusted),
            ip("127.0.0.1")
        );
    }
}
