//! lockscope's fuzz harnesses: the inputs each fuzz target builds from libFuzzer's bytes and the
//! checks it runs on the decoders in `lockscope-model` (and, for `fourlw`, the server's
//! four-letter-word parsers).
//!
//! Every target in `fuzz_targets/` is one line that hands its bytes to a `run` function here, so
//! the harnesses are ordinary code: the unit tests below run each target's seed corpus
//! (`fuzz/corpus/<target>/`) through them without libFuzzer, and check that the seeds still
//! decode into the layouts they were written for.
//!
//! Structured inputs are read with `arbitrary` from the raw bytes (never with `take_rest`, so a
//! seed's encoding does not depend on what follows it). Byte strings are [`Blob`]s: a length
//! byte (or `0xFF` and a little-endian `u16`) then the bytes, so seeds are easy to write and a
//! mutation of one string does not shift the lengths of the others.
//!
//! A check that fails panics with what was expected; libFuzzer keeps the input as a crash
//! artefact. Findings already reported to the lead are listed in [`known`]: while they stand,
//! the harnesses step around exactly those inputs so the rest is still fuzzed, unless
//! `LOCKSCOPE_FUZZ_STRICT=1` (`scripts/fuzz --strict`) asks for every check.

#![forbid(unsafe_code)]

pub mod db;
pub mod etcd;
pub mod known;
pub mod lock_id;
pub mod redis_decode;
pub mod redis_redlock;
pub mod release_body;
pub mod rules;
pub mod zk;

#[cfg(feature = "server")]
pub mod fourlw;

#[cfg(test)]
mod seeds;

use arbitrary::{Arbitrary, Unstructured};

/// Reads a structured input from a fuzz case: never fails (missing bytes read as zeros).
pub fn input<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    T::arbitrary(&mut Unstructured::new(data)).ok()
}

/// Whether to print each decoded input (`LOCKSCOPE_FUZZ_SHOW=1`, used by `scripts/fuzz --show`
/// to turn a crash artefact into something a person can read).
pub fn show(input: &dyn std::fmt::Debug) {
    static SHOW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *SHOW.get_or_init(|| std::env::var_os("LOCKSCOPE_FUZZ_SHOW").is_some_and(|v| v == "1")) {
        eprintln!("{input:#?}");
    }
}

/// Arbitrary bytes: a length byte (`0xFF`: a little-endian `u16` length follows), then that many
/// bytes, or all that is left.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob(pub Vec<u8>);

impl<'a> Arbitrary<'a> for Blob {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let first = u8::arbitrary(u)?;
        let len = if first == 0xFF {
            usize::from(u16::arbitrary(u)?)
        } else {
            usize::from(first)
        };
        let len = len.min(u.len());
        Ok(Blob(u.bytes(len)?.to_vec()))
    }
}

impl std::fmt::Debug for Blob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

/// Arbitrary text: a [`Blob`] read as UTF-8, invalid sequences replaced by U+FFFD (so multi-byte
/// characters, valid or replaced, reach every string-slicing path).
#[derive(Clone, PartialEq, Eq)]
pub struct Text(pub String);

impl<'a> Arbitrary<'a> for Text {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let Blob(bytes) = Blob::arbitrary(u)?;
        Ok(Text(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Picks from a table of real names by an arbitrary index.
pub fn pick<T: Copy>(table: &[T], index: u8) -> T {
    table[usize::from(index) % table.len()]
}
