//! The `fourlw` fuzz target: see `lockscope_fuzz::fourlw` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::fourlw::run(data));
