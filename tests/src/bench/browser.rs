//! The dashboard in Chromium, for the bench: checks what it needs (the built UI, playwright-core,
//! Debian's Chromium), runs `tests/browser/bench-first-rows.mjs` against a running lockscope and
//! reads the figures it prints. A missing piece or a failed load is an error for the caller to
//! print in its table; nothing here panics or waits without a bound.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::sorted;

/// The script's own bound is 60 s per navigation and it makes two per run; this is the bound of
/// one run here, with room for the context and the memory reading.
const PER_RUN: Duration = Duration::from_secs(150);
/// Node and Chromium starting, and closing.
const START: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The built web UI, for `[ui] assets_dir`, once everything the browser figure needs is here;
/// otherwise a sentence saying what is missing and how to get it.
pub fn ui_dir() -> Result<PathBuf, String> {
    let root = workspace();
    let dist = root.join("frontend/dist");
    let has_wasm = std::fs::read_dir(&dist).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.file_name().to_string_lossy().ends_with(".wasm"))
    });
    if !dist.join("index.html").exists() || !has_wasm {
        return Err(format!(
            "the web UI is not built in {}: run scripts/build-ui",
            dist.display()
        ));
    }
    let browser = root.join("tests/browser");
    if !browser.join("node_modules/playwright-core").exists() {
        return Err(format!(
            "playwright-core is not installed: run `npm ci` in {}",
            browser.display()
        ));
    }
    if !Path::new("/usr/bin/chromium").exists() {
        return Err("/usr/bin/chromium is missing: run scripts/install-deps".into());
    }
    Ok(dist)
}

/// What `bench-first-rows.mjs` measured over its runs; the samples are sorted.
#[derive(Debug, Default)]
pub struct FirstRows {
    /// Navigation → first row and pager, fresh browser context (ms).
    pub cold_ms: Vec<f64>,
    /// The same, navigating again in the same context (ms).
    pub warm_ms: Vec<f64>,
    /// Chromium's JS heap in use once the cold load shows its rows, after a GC (bytes).
    pub js_heap_bytes: Vec<f64>,
    /// The UI's WebAssembly memory then (bytes).
    pub wasm_bytes: Vec<f64>,
    /// The pager's text in the last run that showed rows.
    pub range: String,
    /// Why each failed run failed.
    pub failed: Vec<String>,
}

/// One line of the script's output.
#[derive(Debug, PartialEq)]
enum Line {
    Run {
        cold_ms: f64,
        warm_ms: f64,
        js_heap_bytes: f64,
        wasm_bytes: f64,
        range: String,
    },
    Failed(String),
}

fn parse(line: &str) -> Option<Line> {
    if let Some(why) = line.strip_prefix("failed ") {
        return Some(Line::Failed(why.to_string()));
    }
    // The range comes last: its text has spaces.
    let (fields, range) = line.strip_prefix("first_rows ")?.split_once(" range=")?;
    let field = |name: &str| -> Option<f64> {
        fields
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))?
            .parse()
            .ok()
    };
    Some(Line::Run {
        cold_ms: field("cold_ms")?,
        warm_ms: field("warm_ms")?,
        js_heap_bytes: field("js_heap_used_bytes")?,
        wasm_bytes: field("wasm_memory_bytes")?,
        range: range.to_string(),
    })
}

/// Runs `bench-first-rows.mjs` against `base` (`runs` fresh browser contexts); fails when no run
/// showed rows, saying why.
pub async fn first_rows(base: &str, runs: usize, read_token: Option<&str>) -> Result<FirstRows> {
    let browser = workspace().join("tests/browser");
    let mut command = tokio::process::Command::new("node");
    command
        .arg(browser.join("bench-first-rows.mjs"))
        .arg(base)
        .arg(runs.to_string());
    if let Some(token) = read_token {
        command.arg(token);
    }
    let mut child = command
        .current_dir(&browser)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot start node")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut out = FirstRows::default();
    let (mut cold, mut warm, mut js, mut wasm) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let bound = START + PER_RUN * runs as u32;
    let read = async {
        while let Some(line) = lines.next_line().await? {
            eprintln!("[first-rows] {line}");
            match parse(&line) {
                Some(Line::Run {
                    cold_ms,
                    warm_ms,
                    js_heap_bytes,
                    wasm_bytes,
                    range,
                }) => {
                    cold.push(cold_ms);
                    warm.push(warm_ms);
                    js.push(js_heap_bytes);
                    wasm.push(wasm_bytes);
                    out.range = range;
                }
                Some(Line::Failed(why)) => out.failed.push(why),
                None => {}
            }
        }
        anyhow::Ok(child.wait().await?)
    };
    let status = tokio::time::timeout(bound, read).await.with_context(|| {
        format!(
            "bench-first-rows.mjs did not finish in {} s",
            bound.as_secs()
        )
    })??;
    if cold.is_empty() {
        bail!(
            "no run showed rows ({status}): {}",
            if out.failed.is_empty() {
                "see the script's output above".to_string()
            } else {
                out.failed.join("; ")
            }
        );
    }
    out.cold_ms = sorted(cold);
    out.warm_ms = sorted(warm);
    out.js_heap_bytes = sorted(js);
    out.wasm_bytes = sorted(wasm);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scripts_lines() {
        assert_eq!(
            parse("first_rows run=2 cold_ms=812 warm_ms=403 js_heap_used_bytes=2345678 wasm_memory_bytes=1179648 range=1–50 of 100000"),
            Some(Line::Run {
                cold_ms: 812.0,
                warm_ms: 403.0,
                js_heap_bytes: 2_345_678.0,
                wasm_bytes: 1_179_648.0,
                range: "1–50 of 100000".into(),
            })
        );
        assert_eq!(
            parse("failed run=3 page.waitForFunction: Timeout 60000ms exceeded."),
            Some(Line::Failed(
                "run=3 page.waitForFunction: Timeout 60000ms exceeded.".into()
            ))
        );
        // A NaN (no wasm memory seen) still parses; other lines are not figures.
        assert!(matches!(
            parse("first_rows run=1 cold_ms=1 warm_ms=1 js_heap_used_bytes=1 wasm_memory_bytes=NaN range=x"),
            Some(Line::Run { wasm_bytes, .. }) if wasm_bytes.is_nan()
        ));
        assert_eq!(parse("first_rows run=1 cold_ms=1"), None);
        assert_eq!(parse("[pid 12] something"), None);
    }
}
