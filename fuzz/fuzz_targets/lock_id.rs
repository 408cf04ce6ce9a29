//! The `lock_id` fuzz target: see `lockscope_fuzz::lock_id` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::lock_id::run(data));
