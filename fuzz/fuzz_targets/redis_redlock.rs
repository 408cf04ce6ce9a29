//! The `redis_redlock` fuzz target: see `lockscope_fuzz::redis_redlock` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::redis_redlock::run(data));
