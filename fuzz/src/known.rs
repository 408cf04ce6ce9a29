//! Findings already reported, and how the harnesses step around them while they stand.
//!
//! Each predicate recognises exactly the inputs of one finding, so a fuzz run keeps exploring
//! everything else instead of stopping at the same crash again. When the decoder is fixed,
//! delete the predicate and its uses; `LOCKSCOPE_FUZZ_STRICT=1` (`scripts/fuzz --strict`) turns
//! every predicate off, to confirm a finding still reproduces (or that a fix holds).

/// Whether known findings are to be reported again (`LOCKSCOPE_FUZZ_STRICT=1`).
pub fn strict() -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("LOCKSCOPE_FUZZ_STRICT").is_some_and(|v| v == "1"))
}

/// True when `condition` names a known finding and the run is not strict. A finding's predicate
/// is `known(<its inputs>)`, written here with a doc comment that says what was found, and
/// called where the harness would otherwise fail on those inputs.
pub fn known(condition: bool) -> bool {
    condition && !strict()
}

// No open findings. The ten found so far were fixed in the decoders (`display_bytes` left
// `\xNN` text ambiguous; `locks_of_companion` missed companion-like keys; `as_epoch_ms`
// overflowed; kazoo-semaphore siblings were left out of `containers_for_change`; `dump` dates
// overflowed; `GET_LOCK` calls: `\Z` misread, a holder listed as waiting, names with `\x` split
// in two, deadlines overflowed; a node named only `-__lock__` taken for a kazoo semaphore's
// sibling, whose semaphore path then ended in `/`); their inputs stay in the corpus as
// `finding-*` and must keep passing.
