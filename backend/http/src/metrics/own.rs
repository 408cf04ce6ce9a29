//! lockscope's metrics about itself, registered into the registry the HTTP server is handed
//! ([`register`]): `lockscope_build_info{version,revision}`, the standard `process_*` families
//! ([`Process`], read from `/proc` at each scrape) and the HTTP server's own work
//! ([`HttpMetrics`]: requests and their durations by route and status, open event streams).
//!
//! Route labels are the router's route patterns (`/api/v1/locks/{id}`), never request paths, so
//! their number is fixed by the code; a request no route matched is counted as [`UNMATCHED`].

use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The route label of a request no route matched.
pub const UNMATCHED: &str = "unmatched";

/// The git commit this binary was built from (build.rs), `unknown` outside git.
pub const REVISION: &str = env!("LOCKSCOPE_REVISION");

/// Request duration buckets, in seconds: from a cached asset to a slow full listing.
const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    revision: String,
}

/// The HTTP server's own families; clones share them.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    requests: Family<RouteLabels, Counter>,
    durations: Family<RouteLabels, Histogram>,
    event_streams: Gauge,
    connections: Gauge,
    closed: Family<ReasonLabels, Counter>,
}

/// Why lockscope closed a client's connection (`lockscope_http_connections_closed_total`).
pub const CLOSE_REASONS: [&str; 4] = ["header_timeout", "idle_timeout", "evicted", "refused"];

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics {
            requests: Family::default(),
            durations: Family::new_with_constructor(|| {
                Histogram::new(DURATION_BUCKETS.iter().copied())
            }),
            event_streams: Gauge::default(),
            connections: Gauge::default(),
            closed: Family::default(),
        }
    }
}

impl HttpMetrics {
    /// Counts one answered request. `route` is the matched route pattern, if any.
    pub fn observe(&self, route: Option<&str>, status: u16, took: Duration) {
        let labels = RouteLabels {
            route: route.unwrap_or(UNMATCHED).to_string(),
            status: status.to_string(),
        };
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.requests.get_or_create(&labels).inc();
    }

    /// Counts an event stream open until the returned guard is dropped (the client left or
    /// lockscope stopped).
    pub fn event_stream(&self) -> StreamGuard {
        self.event_streams.inc();
        StreamGuard(self.event_streams.clone())
    }

    /// Open event streams now.
    pub fn event_streams(&self) -> i64 {
        self.event_streams.get()
    }

    /// Counts a client connection open until the returned guard is dropped.
    pub fn connection(&self) -> StreamGuard {
        self.connections.inc();
        StreamGuard(self.connections.clone())
    }

    /// Counts a connection lockscope closed, by one of [`CLOSE_REASONS`].
    pub fn closed(&self, reason: &'static str) {
        self.closed.get_or_create(&ReasonLabels { reason }).inc();
    }
}

/// One open event stream (or connection), counted in its gauge while it lives.
#[derive(Debug)]
pub struct StreamGuard(Gauge);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Registers lockscope's own families into `registry`: build info, `process_*`, and `http`'s.
pub fn register(registry: &mut Registry, http: &HttpMetrics) {
    let build: Family<BuildLabels, Gauge> = Family::default();
    build
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION").to_string(),
            revision: REVISION.to_string(),
        })
        .set(1);
    registry.register(
        "lockscope_build_info",
        "Always 1: the lockscope version and the git commit it was built from.",
        build,
    );
    registry.register(
        "lockscope_http_requests",
        "HTTP requests answered, by route pattern and status.",
        http.requests.clone(),
    );
    registry.register(
        "lockscope_http_request_duration_seconds",
        "Time from a request's arrival to its answer's headers, by route pattern and status (an event stream counts until it starts).",
        http.durations.clone(),
    );
    registry.register(
        "lockscope_event_stream_clients",
        "Open event streams (/api/v1/events, every lock or a live view).",
        http.event_streams.clone(),
    );
    for reason in CLOSE_REASONS {
        // Every reason listed from the start, so a rate over it is defined.
        let _ = http.closed.get_or_create(&ReasonLabels { reason });
    }
    registry.register(
        "lockscope_http_connections",
        "Open client connections (plain or TLS).",
        http.connections.clone(),
    );
    registry.register(
        "lockscope_http_connections_closed",
        "Client connections lockscope closed: no whole request head in time (header_timeout), \
         an answer that moved no byte for idle_timeout, closed to make room past \
         max_connections (evicted), or refused there (refused).",
        http.closed.clone(),
    );
    registry.register_collector(Box::new(Process::new()));
}

/// The standard process metrics of the running process (the families Prometheus' client
/// libraries export), read from `/proc/self` at each scrape. A figure that cannot be read is
/// left out of that scrape and logged.
#[derive(Debug)]
pub struct Process {
    /// Seconds since the epoch at boot, to turn the start time (ticks since boot) into a
    /// timestamp; read once.
    boot_time: Option<u64>,
}

impl Process {
    pub fn new() -> Self {
        Process {
            boot_time: procfs::boot_time_secs()
                .inspect_err(|e| tracing::warn!(error = %e, "cannot read the boot time"))
                .ok(),
        }
    }
}

impl Default for Process {
    fn default() -> Self {
        Process::new()
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: f64,
) -> std::fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    if value.fract() == 0.0 && value.abs() < 9.0e15 {
        ConstGauge::new(value as i64).encode(metric)
    } else {
        ConstGauge::new(value).encode(metric)
    }
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> std::fmt::Result {
        let me = match procfs::process::Process::myself() {
            Ok(me) => me,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read /proc/self");
                return Ok(());
            }
        };
        match me.stat() {
            Ok(stat) => {
                let ticks = procfs::ticks_per_second() as f64;
                let cpu = (stat.utime + stat.stime) as f64 / ticks;
                let metric = encoder.encode_descriptor(
                    "process_cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    None,
                    MetricType::Counter,
                )?;
                ConstCounter::new(cpu).encode(metric)?;
                gauge(
                    &mut encoder,
                    "process_resident_memory_bytes",
                    "Resident memory size in bytes.",
                    (stat.rss * procfs::page_size()) as f64,
                )?;
                gauge(
                    &mut encoder,
                    "process_virtual_memory_bytes",
                    "Virtual memory size in bytes.",
                    stat.vsize as f64,
                )?;
                if let Some(boot) = self.boot_time {
                    gauge(
                        &mut encoder,
                        "process_start_time_seconds",
                        "Start time of the process since unix epoch in seconds.",
                        boot as f64 + (stat.starttime as f64 / ticks),
                    )?;
                }
                gauge(
                    &mut encoder,
                    "process_threads",
                    "Number of OS threads in the process.",
                    stat.num_threads as f64,
                )?;
            }
            Err(e) => tracing::warn!(error = %e, "cannot read /proc/self/stat"),
        }
        match me.fd_count() {
            Ok(n) => gauge(
                &mut encoder,
                "process_open_fds",
                "Number of open file descriptors.",
                n as f64,
            )?,
            Err(e) => tracing::warn!(error = %e, "cannot count open file descriptors"),
        }
        match me.limits() {
            Ok(limits) => {
                if let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit {
                    gauge(
                        &mut encoder,
                        "process_max_fds",
                        "Maximum number of open file descriptors.",
                        max as f64,
                    )?;
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read /proc/self/limits"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_families_are_exposed_with_bounded_labels() {
        let http = HttpMetrics::default();
        let mut registry = Registry::default();
        register(&mut registry, &http);
        http.observe(Some("/api/v1/locks/{id}"), 404, Duration::from_millis(3));
        http.observe(None, 404, Duration::from_millis(1));
        let stream = http.event_stream();
        let text = crate::metrics::exposition_of(&[&registry], crate::metrics::Samples::default());
        for expected in [
            "lockscope_build_info{version=\"",
            "lockscope_http_requests_total{route=\"/api/v1/locks/{id}\",status=\"404\"} 1",
            "lockscope_http_requests_total{route=\"unmatched\",status=\"404\"} 1",
            "lockscope_http_request_duration_seconds_bucket{le=\"0.005\",route=\"/api/v1/locks/{id}\",status=\"404\"} 1",
            "lockscope_event_stream_clients 1",
            "process_resident_memory_bytes ",
            "process_cpu_seconds_total ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_virtual_memory_bytes ",
        ] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
        drop(stream);
        assert_eq!(http.event_streams(), 0);
    }
}
