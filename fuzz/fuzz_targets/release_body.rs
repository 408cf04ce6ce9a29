//! The `release_body` fuzz target: see `lockscope_fuzz::release_body` for what it checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::release_body::run(data));
