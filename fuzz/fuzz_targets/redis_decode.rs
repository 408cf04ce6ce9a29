//! The `redis_decode` fuzz target: see `lockscope_fuzz::redis_decode` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::redis_decode::run(data));
