//! A real terminal for `lockscope top`: a tmux server of the test's own (its own socket, `-L`),
//! one window of a given size running a shell, keys sent and the screen read back
//! (`capture-pane`, with or without the escape sequences). The server is ended by its PID when
//! the handle is dropped.

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::harness::eventually;

pub struct Tmux {
    socket: String,
    pid: Option<u32>,
}

impl Tmux {
    /// A tmux server running `sh` in a `width`×`height` window, with `env` set for it.
    pub fn start(width: u16, height: u16, env: &[(&str, &str)]) -> Result<Tmux> {
        let socket = format!(
            "lockscope-top-{}-{}",
            std::process::id(),
            crate::unique_root("t").replace('/', "")
        );
        let mut cmd = Command::new("tmux");
        cmd.args([
            "-L",
            &socket,
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "top",
        ])
        .args(["-x", &width.to_string(), "-y", &height.to_string()]);
        for (k, v) in env {
            cmd.args(["-e", &format!("{k}={v}")]);
        }
        let status = cmd
            .arg("sh")
            .status()
            .context("start tmux (Debian's tmux)")?;
        if !status.success() {
            bail!("tmux new-session: {status}");
        }
        let mut tmux = Tmux { socket, pid: None };
        let pid = tmux.run(&["display-message", "-p", "#{pid}"])?;
        tmux.pid = pid.trim().parse().ok();
        Ok(tmux)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .context("run tmux")?;
        if !out.status.success() {
            bail!("tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Types `text` and presses Enter.
    pub fn line(&self, text: &str) -> Result<()> {
        self.run(&["send-keys", "-t", "top", "-l", text])?;
        self.keys(&["Enter"])
    }

    /// Presses keys by tmux's names (`Enter`, `Escape`, `q`, `/` …).
    pub fn keys(&self, keys: &[&str]) -> Result<()> {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        self.run(&args).map(drop)
    }

    /// The screen as text.
    pub fn screen(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// The screen with its escape sequences (colours).
    pub fn screen_escaped(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-e", "-t", "top"])
    }

    /// Waits until the screen shows what `done` accepts; the last screen in the error.
    pub async fn wait_for(&self, what: &str, done: impl Fn(&str) -> bool) -> Result<String> {
        let mut last = String::new();
        let found = eventually(Duration::from_secs(30), what, async || {
            last = self.screen()?;
            Ok(done(&last).then(|| last.clone()))
        })
        .await;
        found.with_context(|| format!("screen:\n{last}"))
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        if let Some(pid) = self.pid {
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
    }
}
