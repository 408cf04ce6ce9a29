//! The `etcd_decode` fuzz target: see `lockscope_fuzz::etcd` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::etcd::run(data));
