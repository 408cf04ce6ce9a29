//! Build-time facts the binary reports about itself:
//! * `LOCKSCOPE_REVISION` — the git commit it was built from (`lockscope_build_info`), or
//!   `unknown` outside a git checkout (a source tarball);
//! * `LOCKSCOPE_UI_STAMP` — the names, sizes and times of the files in `frontend/dist`, so a
//!   rebuilt UI (files added, removed or changed by `scripts/build-ui`) recompiles the crate
//!   and rust-embed embeds the new build (its `include_bytes!` alone tracks only files that
//!   existed at the last build).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let revision = git(&["rev-parse", "--short=12", "HEAD"]);
    println!(
        "cargo:rustc-env=LOCKSCOPE_REVISION={}",
        revision.as_deref().unwrap_or("unknown")
    );
    // A new commit moves HEAD or the branch it names (a worktree keeps its HEAD apart from
    // the refs), so both are watched; outside git nothing is. Only files that exist: cargo
    // reruns the script, and rebuilds the crate, on every build while a watched path is
    // missing (a checkout without `packed-refs`, or whose branch lives only there).
    if revision.is_some() {
        let mut paths: Vec<String> = ["HEAD", "packed-refs"]
            .iter()
            .filter_map(|p| git(&["rev-parse", "--git-path", p]))
            .collect();
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            paths.extend(git(&["rev-parse", "--git-path", &branch]));
        }
        for p in paths.iter().filter(|p| Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={p}");
        }
    }

    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frontend/dist");
    // Cargo reruns a build script on every build while a path it watches is missing, so
    // without a UI build the folder that will hold it is watched instead.
    let watched = if dist.exists() {
        dist.clone()
    } else {
        dist.with_file_name("")
    };
    println!("cargo:rerun-if-changed={}", watched.display());
    let mut stamp: Vec<String> = std::fs::read_dir(&dist)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| {
                    let meta = e.metadata().ok()?;
                    let modified = meta
                        .modified()
                        .ok()?
                        .duration_since(std::time::UNIX_EPOCH)
                        .ok()?;
                    Some(format!(
                        "{}:{}:{}",
                        e.file_name().to_string_lossy(),
                        meta.len(),
                        modified.as_nanos()
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    stamp.sort();
    // A short digest keeps the variable small; collisions only cost a missed rebuild.
    let digest = stamp.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, line| {
        line.bytes()
            .fold(h, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
    });
    println!(
        "cargo:rustc-env=LOCKSCOPE_UI_STAMP={}-{digest:016x}",
        stamp.len()
    );
}
