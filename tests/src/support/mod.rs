//! Real servers and clients for tests, the demo and benchmarks, on loopback only.
//! Every process started here is stopped by its PID when its handle is dropped; the fault proxy
//! ([`proxy`]) runs as tasks in the test's runtime and stops when dropped. Database servers are
//! [`mysql`] (MariaDB) and [`postgres`]; their lock clients are there and in [`dblocks`].

pub mod appproc;
pub mod certs;
pub mod curator;
pub mod dblocks;
pub mod etcd;
pub mod mysql;
pub mod nginx;
pub mod node;
pub mod php;
pub mod ports;
pub mod postgres;
pub mod process;
pub mod prometheus;
pub mod proxy;
pub mod python;
pub mod redis;
pub mod store;
pub mod tmux;
pub mod zk;
