//! The `zk_tree` fuzz target: see `lockscope_fuzz::zk` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::zk::run_tree(data));
