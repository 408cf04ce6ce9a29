//! The `db_decode` fuzz target: see `lockscope_fuzz::db` for what it builds and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lockscope_fuzz::db::run(data));
