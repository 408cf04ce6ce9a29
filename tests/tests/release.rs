//! The release archive (`scripts/release`), used as a new user would: unpacked into an empty
//! folder, its binary run from there (no source tree, no UI directory, no environment pointing
//! back here) against a real Redis holding a lock — the dashboard, the API and the metrics all
//! come from the one binary. Also `lockscope check-config` on the archive's example and on a
//! broken file. The archive packages the debug binary the test run already built (`--binary`):
//! the same layout as the optimised release, and no build (a `cargo build` from inside a test
//! resolves features for one package and rebuilds half the workspace).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope_tests::harness::eventually;
use lockscope_tests::support::ports::free_port;
use lockscope_tests::support::redis::RedisServer;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Runs `scripts/release --binary <the debug binary this test run built>`; the archive's path.
fn build_archive() -> Result<PathBuf> {
    let root = workspace();
    let binary = lockscope_tests::support::process::binary()?;
    let mut release = Command::new(root.join("scripts/release"));
    release.arg("--binary").arg(&binary).current_dir(&root);
    let out = release.output().context("run scripts/release")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.success(),
        "scripts/release failed (the UI must be built first: scripts/build-ui):\n{stderr}"
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let archive = root.join(printed.lines().last().context("no archive printed")?.trim());
    ensure!(archive.exists(), "{} missing", archive.display());
    Ok(archive)
}

/// Runs the unpacked binary in `dir` with nothing in its environment but a PATH.
fn lockscope(dir: &Path) -> Command {
    let mut command = Command::new(dir.join("lockscope"));
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    command
}

/// The `/assets/…` paths `index.html` names (relative to its `<base href>`).
fn assets_named(html: &str) -> Vec<String> {
    html.split("assets/")
        .skip(1)
        .filter_map(|rest| rest.split(['"', '\'']).next())
        .map(|name| format!("/assets/{name}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_release_archive_runs_alone_with_the_dashboard_inside() -> Result<()> {
    let archive = build_archive()?;
    let name = archive
        .file_name()
        .and_then(|n| n.to_str())
        .context("archive name")?;
    let version = env!("CARGO_PKG_VERSION");
    ensure!(
        name == format!("lockscope-{version}-x86_64-linux.tar.gz"),
        "{name}"
    );

    // Unpacked into an empty folder.
    let empty = tempfile::tempdir()?;
    let status = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .current_dir(empty.path())
        .status()?;
    ensure!(status.success(), "tar -xzf failed");
    let dir = empty
        .path()
        .join(format!("lockscope-{version}-x86_64-linux"));
    for file in [
        "lockscope",
        "lockscope.example.toml",
        "README.md",
        "dashboards/grafana/lockscope-overview.json",
        "dashboards/grafana/lockscope-lock.json",
        "dashboards/prometheus/alerts.yml",
        "dashboards/prometheus/alerts.test.yml",
    ] {
        ensure!(dir.join(file).exists(), "the archive lacks {file}");
    }
    ensure!(
        !dir.join("frontend").exists(),
        "no UI folder beside the binary"
    );

    // check-config: the example is valid as shipped; a broken file gets every problem listed.
    let out = lockscope(&dir)
        .args(["check-config", "lockscope.example.toml"])
        .output()?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "the example config: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(
        dir.join("broken.toml"),
        "listen = \"127.0.0.1:7070\"\ncolour = \"blue\"\n\n[ui]\nstale_hold = \"0s\"\n\n\
         [[redis]]\nname = \"bad name!\"\nurl = \"redis://127.0.0.1:6379\"\npatterns = [\"lock:*\"]\n",
    )?;
    let out = lockscope(&dir)
        .args(["check-config", "broken.toml"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(2),
        "exit {:?}: {stderr}",
        out.status
    );
    for problem in ["colour", "stale_hold", "bad name!"] {
        ensure!(
            stderr.contains(problem),
            "{problem} not listed in:\n{stderr}"
        );
    }
    ensure!(stderr.contains("3 problem"), "{stderr}");

    // A real Redis with a lock held.
    let redis = RedisServer::start().await?;
    let mut conn = redis.connection().await?;
    let () = redis::cmd("SET")
        .arg("lock:release-test")
        .arg("holder-token-1")
        .arg("NX")
        .arg("PX")
        .arg(600_000)
        .query_async(&mut conn)
        .await?;
    let port = free_port();
    std::fs::write(
        dir.join("lockscope.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\n\n[[redis]]\nname = \"cache\"\nurl = \"{}\"\npatterns = [\"lock:*\"]\n",
            redis.url()
        ),
    )?;
    let log = std::fs::File::create(empty.path().join("lockscope.log"))?;
    let mut serve = tokio::process::Command::from({
        let mut c = lockscope(&dir);
        c.args(["serve", "--config", "lockscope.toml"])
            .stdout(log.try_clone()?)
            .stderr(log);
        c
    })
    .kill_on_drop(true)
    .spawn()
    .context("start the unpacked lockscope")?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let log_path = empty.path().join("lockscope.log");
    let result = async {
        eventually(Duration::from_secs(30), "lockscope ready", async || {
            if let Some(status) = serve.try_wait()? {
                anyhow::bail!(
                    "lockscope exited ({status}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
            Ok(match http.get(format!("{base}/readyz")).send().await {
                Ok(r) if r.status() == 200 => Some(()),
                _ => None,
            })
        })
        .await?;

        // The dashboard, from inside the binary.
        let page = http.get(format!("{base}/")).send().await?;
        ensure!(page.status() == 200, "GET / answered {}", page.status());
        ensure!(page.headers()["cache-control"] == "no-cache");
        let html = page.text().await?;
        ensure!(html.contains("<title>lockscope</title>"), "{html}");
        let assets = assets_named(&html);
        ensure!(
            assets.iter().any(|a| a.ends_with(".wasm"))
                && assets.iter().any(|a| a.ends_with(".js")),
            "{assets:?}"
        );
        for asset in &assets {
            for (accept, encoding) in [("br", Some("br")), ("gzip", Some("gzip")), ("", None)] {
                let mut request = http.get(format!("{base}{asset}"));
                if !accept.is_empty() {
                    request = request.header("accept-encoding", accept);
                }
                let resp = request.send().await?;
                ensure!(
                    resp.status() == 200,
                    "{asset} ({accept}): {}",
                    resp.status()
                );
                let got = resp
                    .headers()
                    .get("content-encoding")
                    .map(|v| v.to_str().unwrap_or_default().to_string());
                ensure!(got.as_deref() == encoding, "{asset} ({accept}): {got:?}");
                let wasm = asset.ends_with(".wasm");
                if wasm {
                    ensure!(resp.headers()["content-type"] == "application/wasm");
                }
                let body = resp.bytes().await?;
                ensure!(!body.is_empty(), "{asset} ({accept}) is empty");
                if wasm && encoding.is_none() {
                    ensure!(body.starts_with(b"\0asm"), "{asset} is not WebAssembly");
                }
            }
        }

        // The API shows the lock and its holder.
        let lock = eventually(
            Duration::from_secs(30),
            "the held lock in the API",
            async || {
                let answer: serde_json::Value = http
                    .get(format!("{base}/api/v1/locks"))
                    .send()
                    .await?
                    .json()
                    .await?;
                Ok(answer["locks"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|l| l["path"] == "lock:release-test")
                    .cloned())
            },
        )
        .await?;
        ensure!(lock["holders"][0]["node"] == "holder-token-1", "{lock}");

        // The metrics: the lock's, and lockscope's own.
        let metrics = http
            .get(format!("{base}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        for expected in [
            "lockscope_lock_holders{source=\"cache\",lock=\"lock:release-test\"} 1",
            &format!("lockscope_build_info{{version=\"{version}\",revision=\""),
            "process_resident_memory_bytes ",
            "lockscope_http_requests_total{route=\"/\",status=\"200\"} 1",
            "lockscope_event_stream_clients 0",
        ] {
            ensure!(metrics.contains(expected), "{expected} not in:\n{metrics}");
        }
        // An open event stream is counted while its client stays, and no longer once it left.
        let streams = async |want: &'static str| {
            eventually(Duration::from_secs(10), want, async || {
                let text = http
                    .get(format!("{base}/metrics"))
                    .send()
                    .await?
                    .text()
                    .await?;
                Ok(text.contains(want).then_some(()))
            })
            .await
        };
        let stream = http.get(format!("{base}/api/v1/events")).send().await?;
        ensure!(stream.status() == 200);
        streams("lockscope_event_stream_clients 1").await?;
        drop(stream);
        streams("lockscope_event_stream_clients 0").await?;
        Ok(())
    }
    .await;
    let _ = serve.kill().await;
    result.with_context(|| {
        format!(
            "lockscope's log:\n{}",
            std::fs::read_to_string(empty.path().join("lockscope.log")).unwrap_or_default()
        )
    })
}
