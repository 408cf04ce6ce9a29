//! The `rules` fuzz target: see `lockscope_fuzz::rules` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::rules::run(data));
