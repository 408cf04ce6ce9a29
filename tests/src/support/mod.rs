//! Real servers and clients for tests, the demo and benchmarks, on loopback only.
//! Every process started here is stopped by its PID when its handle is dropped; the fault proxy
//! ([`proxy`]) runs as tasks in the test's runtime and stops when dropped.

pub mod curator;
pub mod etcd;
pub mod ports;
pub mod prometheus;
pub mod proxy;
pub mod python;
pub mod redis;
pub mod zk;
