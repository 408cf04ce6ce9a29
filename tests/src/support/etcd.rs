//! Real etcd servers (Debian's `etcd-server` 3.4.23) on free loopback ports, and lock clients
//! that are the Go client's own recipes run through Debian's `etcdctl` (`etcd-client`, API v3).
//!
//! This module owns:
//!
//! * the server processes: an [`EtcdServer`] is one member, an [`EtcdCluster`] several members
//!   that form one cluster (`--initial-cluster-state new`). Each member has its own client and
//!   peer port from [`free_port`], a data directory `m<i>.data` in the cluster's temporary
//!   directory, a name unique among processes (so a port answered by somebody else's etcd is
//!   noticed), zap logs (stderr and stdout) in `m<i>.log` there, and `--heartbeat-interval 50
//!   --election-timeout 500` (a single member is ready in 0.2–1 s; a 1 s lease is still granted
//!   as asked). Members are SIGKILLed by PID and reaped on `kill` and on drop; the directory
//!   goes with the handle. A start that fails (e.g. a port taken between picking and binding)
//!   is retried on fresh ports; failures carry the members' log tails. Debian's system etcd
//!   service is not touched.
//! * the lock clients: [`EtcdctlContender`], one process of `etcdctl lock` ([`EtcdctlLock`], the
//!   Go `concurrency.Mutex`) or `etcdctl elect` ([`EtcdctlElect`], `concurrency.Election`);
//!   [`LeaseKeyLock`] (a single key created in a `version == 0` txn with a lease, as other
//!   clients do it); and one-shot helpers ([`keys`], [`lease_ttl`], [`put`], [`del`],
//!   [`compact`], [`grant_lease`], [`revoke_lease`]).
//!   Members started with [`EtcdServer::start_tls`] serve clients over TLS only and require a
//!   client certificate (`--client-cert-auth`); every helper here reaches them with a client
//!   certificate of CN `root` (etcdctl flags looked up by endpoint), which is etcd's root user
//!   once [`enable_auth`] turned authentication on; [`etcdctl`] runs any other command
//!   (roles, users, grants).
//!   Every `etcdctl` run here is bounded (`--dial-timeout`, `--command-timeout` and a tokio
//!   timeout; processes are `kill_on_drop`), and long-lived clients' output is read by
//!   background tasks, so nothing here blocks forever.
//!
//! What etcdctl 3.4.23 does, as seen on the real binary:
//!
//! * `etcdctl lock [--ttl N] <name>` (no command) creates `<name>/<lease id in lowercase hex>`
//!   with an empty value on a session lease of N s (default 10), waits for every key with a lower
//!   `create_revision` to go, then prints the key and its (empty) value as two lines,
//!   `"<key>\n\n"`, and holds until signalled. On SIGTERM or SIGINT (the same handler) it deletes
//!   its key and exits 0; a waiter deletes its queued key and exits 1 (`Error: context
//!   canceled`). Either way the session's lease is NOT revoked: it stops being kept alive and
//!   expires after its TTL. On SIGKILL the key stays until the lease expires (TTL after the last
//!   keep-alive, which is sent every TTL/3).
//! * `etcdctl elect <name> <proposal>` does the same with the proposal as value and a session
//!   TTL of 60 s that cannot be changed (no `--ttl`); the leader prints `"<key>\n<proposal>\n"`.
//!   SIGTERM/SIGINT resign (delete the key; exit 0, a waiter exits 1), SIGKILL leaves the key
//!   for up to 60 s.
//! * Against an unreachable endpoint `etcdctl lock`/`elect` print nothing and keep retrying
//!   (still running after 20 s): only the caller's bounded wait ends that. One-shot commands
//!   fail after their `--command-timeout` (5 s here).
//! * `etcdctl txn` reads compares, a blank line, success ops, a blank line, failure ops, a blank
//!   line from stdin (`-i` only adds prompts). Compares look like `version("k") = "0"`,
//!   `create("k") = "42"`, `value("k") = "v"`; ops like `put "k" "v" --lease=<hex id>` and
//!   `del "k"`. Quoted strings are Go-unquoted, so `\xNN` escapes pass arbitrary bytes (NUL
//!   included) — binary keys and values go through a txn that way. `lease("k") = "<id>"`
//!   panics in this etcdctl (`panic: bad value`), so ownership is checked with `create` and
//!   `value` instead. `-w json` answers `{"header":{…,"revision":R},"succeeded":true,…}`;
//!   `"succeeded"` is absent when the compares failed.
//! * `-w json` output: `get` gives `{"header":{…},"kvs":[{"key":"<base64>","create_revision":…,
//!   "mod_revision":…,"version":…,"value":"<base64>","lease":<decimal>}],"count":N}`, leaving
//!   out `kvs`, `value` and `lease` when empty or zero; `lease timetolive <hex>` gives
//!   `{…,"id":<decimal>,"ttl":<left>,"granted-ttl":<granted>,…}` with `"ttl":-1` for a lease
//!   that is gone; `lease grant` gives `{…,"ID":<decimal>,"TTL":<s>}`; `lease keep-alive <hex>`
//!   prints `lease <hex> keepalived with TTL(<s>)` per refresh and exits 0 after `lease <hex>
//!   expired or revoked.`.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::future::Future;
use std::marker::PhantomData;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::sync::watch;

use super::certs::{CertFiles, Pki};
use super::ports::free_port;
use crate::harness::eventually_every;

/// How long one member may take to answer (as itself) and be healthy after it is spawned.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a whole cluster may take to be healthy with an agreed leader.
const CLUSTER_READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Upper bound of one readiness or leader probe (a few `etcdctl` runs).
const PROBE_TIMEOUT: Duration = Duration::from_secs(8);
/// Upper bound of one short `etcdctl` run (its own `--command-timeout` is shorter).
const CTL_TIMEOUT: Duration = Duration::from_secs(20);
/// Flags of every `etcdctl` run here.
const CTL_TIMEOUTS: [&str; 2] = ["--dial-timeout=2s", "--command-timeout=5s"];
/// How long a signalled `etcdctl` may take to exit.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest pause between two readiness or leader probes.
const PROBE_PAUSE: Duration = Duration::from_millis(50);
/// Default raft timing of members started here (ms); later `extra_args` override them.
const HEARTBEAT_MS: &str = "50";
const ELECTION_MS: &str = "500";

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `name-<pid>-<counter>`, unique among the processes on this machine.
fn unique_token(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// Running etcdctl once

/// The etcdctl flags (`--cacert`, `--cert`, `--key`) of the endpoints of members started with
/// TLS ([`EtcdServer::start_tls`]), so every helper here that takes endpoints reaches them
/// (as the client certificate's CN, `root`, once auth is on). Keyed by `127.0.0.1:<port>`;
/// a member's entry goes with its cluster.
static TLS_FLAGS: Mutex<std::collections::BTreeMap<String, Vec<String>>> =
    Mutex::new(std::collections::BTreeMap::new());

fn tls_flags(endpoint: &str) -> Vec<String> {
    TLS_FLAGS
        .lock()
        .map(|flags| flags.get(endpoint).cloned().unwrap_or_default())
        .unwrap_or_default()
}

/// `etcdctl --endpoints <endpoints> <timeouts> <args>` with `ETCDCTL_API=3` (and the TLS
/// flags of the first endpoint's member, if it was started with TLS).
fn ctl_command(endpoints: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .args(CTL_TIMEOUTS)
        .args(endpoints.first().map(|e| tls_flags(e)).unwrap_or_default())
        .kill_on_drop(true);
    cmd
}

/// Runs `etcdctl <args>` against `endpoints` (bounded), e.g. `["role", "add", "ro"]`; its
/// stdout, or an error with its stderr.
pub async fn etcdctl(endpoints: &[String], args: &[&str]) -> Result<String> {
    let out = ctl(endpoints, &os_args(args), None).await?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Runs `etcdctl` to completion (bounded by [`CTL_TIMEOUT`]) with `stdin` fed and closed,
/// returning its output whatever its exit status.
async fn ctl_output(
    endpoints: &[String],
    args: &[OsString],
    stdin: Option<&[u8]>,
) -> Result<std::process::Output> {
    let mut cmd = ctl_command(endpoints);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let describe = || {
        format!(
            "etcdctl --endpoints={} {}",
            endpoints.join(","),
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    let work = async {
        let mut child = cmd
            .spawn()
            .context("start etcdctl: is the etcd-client package installed?")?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input).await?;
            // Dropping the pipe closes it: etcdctl txn reads to EOF.
        }
        anyhow::Ok(child.wait_with_output().await?)
    };
    tokio::time::timeout(CTL_TIMEOUT, work)
        .await
        .map_err(|_| anyhow!("{} did not finish in {CTL_TIMEOUT:?}", describe()))?
        .with_context(describe)
}

/// Like [`ctl_output`], failing (with stderr) unless etcdctl exits 0; returns stdout.
async fn ctl(endpoints: &[String], args: &[OsString], stdin: Option<&[u8]>) -> Result<Vec<u8>> {
    let out = ctl_output(endpoints, args, stdin).await?;
    if !out.status.success() {
        bail!(
            "etcdctl --endpoints={} {} failed ({}): {}",
            endpoints.join(","),
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

fn os_args(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

async fn ctl_json<T: for<'de> Deserialize<'de>>(
    endpoints: &[String],
    args: &[&str],
    stdin: Option<&[u8]>,
) -> Result<T> {
    let out = ctl(endpoints, &os_args(args), stdin).await?;
    serde_json::from_slice(&out).with_context(|| {
        format!(
            "etcdctl {}: unexpected output {:?}",
            args.join(" "),
            String::from_utf8_lossy(&out)
        )
    })
}

// ---------------------------------------------------------------------------------------------
// JSON shapes of etcdctl -w json

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default)]
    member_id: u64,
    #[serde(default)]
    revision: i64,
}

#[derive(Deserialize)]
struct MemberListJson {
    header: Header,
    #[serde(default)]
    members: Vec<MemberJson>,
}

#[derive(Deserialize)]
struct MemberJson {
    #[serde(rename = "ID")]
    id: u64,
    #[serde(default)]
    name: String,
}

#[derive(Deserialize)]
struct EndpointStatusJson {
    #[serde(rename = "Endpoint")]
    endpoint: String,
    #[serde(rename = "Status")]
    status: StatusJson,
}

#[derive(Deserialize)]
struct StatusJson {
    header: Header,
    #[serde(default)]
    leader: u64,
}

#[derive(Deserialize)]
struct RangeJson {
    #[serde(default)]
    kvs: Vec<KvJson>,
}

#[derive(Deserialize)]
struct KvJson {
    key: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    create_revision: i64,
    #[serde(default)]
    mod_revision: i64,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    lease: i64,
}

#[derive(Deserialize)]
struct TxnJson {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    succeeded: bool,
}

#[derive(Deserialize)]
struct PutJson {
    #[serde(default)]
    header: Header,
}

#[derive(Deserialize)]
struct DelJson {
    #[serde(default)]
    deleted: i64,
}

#[derive(Deserialize)]
struct GrantJson {
    #[serde(rename = "ID")]
    id: i64,
}

#[derive(Deserialize)]
struct TimeToLiveJson {
    ttl: i64,
    #[serde(rename = "granted-ttl", default)]
    granted_ttl: i64,
}

/// Standard base64 (with or without `=` padding), as etcdctl's JSON encodes keys and values.
fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            _ => bail!("not base64: {text:?}"),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

/// A Go double-quoted string literal of `bytes` (printable ASCII as is, everything else `\xNN`),
/// which `etcdctl txn` unquotes back to exactly these bytes.
fn go_quote(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            0x20..=0x7e => s.push(b as char),
            _ => {
                let _ = write!(s, "\\x{b:02x}");
            }
        }
    }
    s.push('"');
    s
}

/// A lease id as etcdctl writes and reads it (lowercase hex, no padding), e.g.
/// `694da2082de77e06`.
pub fn lease_hex(lease: i64) -> String {
    format!("{lease:x}")
}

/// The lease id of a `concurrency.Mutex`/`Election` key `<name>/<lease hex>`.
pub fn lease_of_key(key: &str) -> Option<i64> {
    let hex = key.rsplit('/').next()?;
    i64::from_str_radix(hex, 16).ok()
}

// ---------------------------------------------------------------------------------------------
// One-shot helpers

/// One key as `etcdctl get -w json` reports it (key and value decoded from base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdKey {
    pub key: Vec<u8>,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// The lease id (decimal in the JSON), 0 for none.
    pub lease: i64,
}

impl EtcdKey {
    /// The key as text (invalid UTF-8 replaced).
    pub fn key_str(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }
}

/// Every key under `prefix` in key order (`etcdctl get --prefix <prefix> -w json`, a
/// linearizable read).
pub async fn keys(endpoints: &[String], prefix: &str) -> Result<Vec<EtcdKey>> {
    let range: RangeJson = ctl_json(endpoints, &["get", "--prefix", "-w", "json", prefix], None)
        .await
        .with_context(|| format!("get --prefix {prefix}"))?;
    range
        .kvs
        .into_iter()
        .map(|kv| {
            Ok(EtcdKey {
                key: base64_decode(&kv.key)?,
                value: base64_decode(&kv.value)?,
                create_revision: kv.create_revision,
                mod_revision: kv.mod_revision,
                version: kv.version,
                lease: kv.lease,
            })
        })
        .collect()
}

/// `(granted TTL, TTL left)` in seconds of `lease` (`etcdctl lease timetolive <hex> -w json`);
/// `None` when the lease is gone (expired or revoked: etcd answers `"ttl":-1`).
pub async fn lease_ttl(endpoints: &[String], lease: i64) -> Result<Option<(i64, i64)>> {
    let ttl: TimeToLiveJson = ctl_json(
        endpoints,
        &["lease", "timetolive", &lease_hex(lease), "-w", "json"],
        None,
    )
    .await?;
    Ok((ttl.ttl >= 0).then_some((ttl.granted_ttl, ttl.ttl)))
}

/// A new lease of `ttl_secs` (`etcdctl lease grant`); its id. Nothing keeps it alive.
pub async fn grant_lease(endpoints: &[String], ttl_secs: u64) -> Result<i64> {
    let grant: GrantJson = ctl_json(
        endpoints,
        &["lease", "grant", &ttl_secs.to_string(), "-w", "json"],
        None,
    )
    .await?;
    Ok(grant.id)
}

/// Revokes `lease` (deleting its keys); `Ok(false)` when it was already gone.
pub async fn revoke_lease(endpoints: &[String], lease: i64) -> Result<bool> {
    let out = ctl_output(
        endpoints,
        &os_args(&["lease", "revoke", &lease_hex(lease)]),
        None,
    )
    .await?;
    if out.status.success() {
        return Ok(true);
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("requested lease not found") {
        return Ok(false);
    }
    bail!("etcdctl lease revoke {}: {}", lease_hex(lease), err.trim())
}

/// Puts `value` at `key` (no lease); returns the revision of the write. A value without NUL
/// bytes goes through `etcdctl put` (arguments are passed as raw bytes); one with NUL bytes,
/// which a command line cannot carry, through a txn with no compares and the one put.
pub async fn put(endpoints: &[String], key: &str, value: &[u8]) -> Result<i64> {
    if value.contains(&0) {
        let script = format!(
            "\nput {} {}\n\n\n",
            go_quote(key.as_bytes()),
            go_quote(value)
        );
        let txn: TxnJson = ctl_json(endpoints, &["txn", "-w", "json"], Some(script.as_bytes()))
            .await
            .with_context(|| format!("put {key} (as a txn)"))?;
        return Ok(txn.header.revision);
    }
    let args = vec![
        OsString::from("put"),
        OsString::from("-w"),
        OsString::from("json"),
        OsString::from("--"),
        OsString::from(key),
        OsString::from_vec(value.to_vec()),
    ];
    let out = ctl(endpoints, &args, None).await?;
    let put: PutJson = serde_json::from_slice(&out)
        .with_context(|| format!("put {key}: {:?}", String::from_utf8_lossy(&out)))?;
    Ok(put.header.revision)
}

/// Deletes `key` (`etcdctl del`); how many keys were deleted (0 or 1).
pub async fn del(endpoints: &[String], key: &str) -> Result<i64> {
    let del: DelJson = ctl_json(endpoints, &["del", "-w", "json", "--", key], None).await?;
    Ok(del.deleted)
}

/// Turns etcd's authentication on: user `root` (password `root_password`, role `root`), then
/// `auth enable`. From then on every request needs a user: a password, or (members started with
/// [`EtcdServer::start_tls`]) the client certificate's CN — the helpers here are `root` so.
pub async fn enable_auth(endpoints: &[String], root_password: &str) -> Result<()> {
    let password = format!("--new-user-password={root_password}");
    etcdctl(endpoints, &["user", "add", "root", &password]).await?;
    etcdctl(endpoints, &["user", "grant-role", "root", "root"]).await?;
    etcdctl(endpoints, &["auth", "enable"]).await?;
    Ok(())
}

/// Compacts the key-value history up to `revision` (`etcdctl compact <rev>`): watches from
/// before it fail with "required revision has been compacted" afterwards.
pub async fn compact(endpoints: &[String], revision: i64) -> Result<()> {
    let out = ctl(
        endpoints,
        &os_args(&["compact", &revision.to_string()]),
        None,
    )
    .await?;
    let text = String::from_utf8_lossy(&out);
    if !text.contains("compacted revision") {
        bail!("etcdctl compact {revision}: unexpected output {text:?}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Long-lived etcdctl processes

/// What a long-lived process printed on stdout so far.
#[derive(Default, Clone)]
struct Printed {
    lines: Vec<String>,
    /// stdout was closed (the process exited or is exiting).
    eof: bool,
}

/// A running `etcdctl` whose stdout lines and stderr are collected by background tasks.
struct CtlProcess {
    what: String,
    child: tokio::process::Child,
    pid: u32,
    stdout: watch::Receiver<Printed>,
    stderr: Arc<Mutex<String>>,
    /// Ends when stderr closes.
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// Keeps at most this much of a process's stderr (the end).
const STDERR_KEEP: usize = 16 * 1024;

impl CtlProcess {
    fn spawn(endpoints: &[String], args: &[OsString]) -> Result<CtlProcess> {
        let what = format!(
            "etcdctl {}",
            args.iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut child = ctl_command(endpoints)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("start etcdctl: is the etcd-client package installed?")?;
        let pid = child.id().ok_or_else(|| anyhow!("{what}: no PID"))?;
        let (tx, rx) = watch::channel(Printed::default());
        if let Some(out) = child.stdout.take() {
            tokio::spawn(async move {
                let mut reader = BufReader::new(out);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            if buf.last() == Some(&b'\n') {
                                buf.pop();
                            }
                            let line = String::from_utf8_lossy(&buf).into_owned();
                            tx.send_modify(|p| p.lines.push(line));
                        }
                    }
                }
                tx.send_modify(|p| p.eof = true);
            });
        }
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_task = child
            .stderr
            .take()
            .map(|err| tokio::spawn(collect_stderr(err, stderr.clone())));
        Ok(CtlProcess {
            what,
            child,
            pid,
            stdout: rx,
            stderr,
            stderr_task,
            status: None,
        })
    }

    fn stderr_text(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .trim()
            .to_string()
    }

    /// `true` while the process runs (reaps it when it has exited).
    fn running(&mut self) -> bool {
        if self.status.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.status = Some(status);
                false
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    /// Waits (bounded) for the process to exit and reaps it; then lets the stderr task read
    /// what was written before the exit, so [`Self::stderr_text`] is complete.
    async fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            self.join_stderr().await;
            return Ok(status);
        }
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| {
                anyhow!(
                    "{} (PID {}) still running after {timeout:?}",
                    self.what,
                    self.pid
                )
            })??;
        self.status = Some(status);
        self.join_stderr().await;
        Ok(status)
    }

    /// Waits for the stderr task to reach EOF (bounded: a grandchild could hold the pipe open).
    async fn join_stderr(&mut self) {
        if let Some(task) = self.stderr_task.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
        }
    }

    /// Waits until at least `n` stdout lines were printed; fails with the exit status and stderr
    /// if stdout closes first, or after `timeout`.
    async fn wait_lines(&mut self, n: usize, timeout: Duration) -> Result<Vec<String>> {
        let mut rx = self.stdout.clone();
        let waited = tokio::time::timeout(timeout, async move {
            // `Err`: the sender is gone (the reader task ended); its last state still counts.
            let seen = rx
                .wait_for(|p| p.lines.len() >= n || p.eof)
                .await
                .map(|p| p.clone());
            seen.unwrap_or_else(|_| rx.borrow().clone())
        })
        .await;
        let printed = match waited {
            Ok(p) => p,
            Err(_) => bail!(
                "{} (PID {}): printed {:?}, not {n} lines, within {timeout:?}; stderr: {}",
                self.what,
                self.pid,
                self.stdout.borrow().lines,
                self.stderr_text()
            ),
        };
        if printed.lines.len() >= n {
            return Ok(printed.lines);
        }
        let status = self
            .wait_exit(Duration::from_secs(5))
            .await
            .map(|s| s.to_string())
            .unwrap_or_else(|e| e.to_string());
        bail!(
            "{} (PID {}) closed stdout after {:?} ({status}); stderr: {}",
            self.what,
            self.pid,
            printed.lines,
            self.stderr_text()
        )
    }

    fn printed(&self) -> usize {
        self.stdout.borrow().lines.len()
    }

    /// Sends `signal` (e.g. `TERM`) by PID with `kill(1)`; the child is not reaped before this
    /// (`running` checked), so the PID is still ours.
    fn signal(&mut self, signal: &str) -> Result<()> {
        if !self.running() {
            return Ok(());
        }
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("run kill")?;
        if !status.success() && self.running() {
            bail!("kill -{signal} {} failed ({status})", self.pid);
        }
        Ok(())
    }

    /// Sends `signal` and waits for the exit; SIGKILLs after [`EXIT_TIMEOUT`].
    async fn stop(&mut self, signal: &str) -> Result<ExitStatus> {
        self.signal(signal)?;
        match self.wait_exit(EXIT_TIMEOUT).await {
            Ok(status) => Ok(status),
            Err(e) => {
                self.kill().await?;
                Err(e.context(format!("SIG{signal} did not stop it; SIGKILLed")))
            }
        }
    }

    /// SIGKILL by PID (tokio's handle) and reap.
    async fn kill(&mut self) -> Result<ExitStatus> {
        if self.running() {
            let _ = self.child.start_kill();
        }
        self.wait_exit(EXIT_TIMEOUT).await
    }
}

async fn collect_stderr(err: impl AsyncRead + Unpin, into: Arc<Mutex<String>>) {
    let mut reader = BufReader::new(err);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let mut text = into.lock().unwrap_or_else(|e| e.into_inner());
                text.push_str(&String::from_utf8_lossy(&buf));
                if text.len() > STDERR_KEEP {
                    let mut cut = text.len() - STDERR_KEEP;
                    while !text.is_char_boundary(cut) {
                        cut += 1;
                    }
                    text.drain(..cut);
                }
            }
        }
    }
}

impl Drop for CtlProcess {
    fn drop(&mut self) {
        if self.status.is_none() {
            // SIGKILL through tokio's handle (its PID is not reaped yet); `kill_on_drop` and
            // tokio's orphan reaping take care of the zombie.
            let _ = self.child.start_kill();
        }
    }
}

/// Which Go client recipe an [`EtcdctlContender`] runs, and what it prints once it holds.
pub trait EtcdctlRecipe {
    /// Stdout lines printed once it holds (or leads).
    const ACQUIRED_LINES: usize;
}

/// `etcdctl lock`: the Go client's `concurrency.Mutex`; a holder prints its key (then an empty
/// value line).
pub enum MutexRecipe {}

impl EtcdctlRecipe for MutexRecipe {
    const ACQUIRED_LINES: usize = 1;
}

/// `etcdctl elect`: the Go client's `concurrency.Election`; the leader prints its key, then its
/// proposal.
pub enum ElectionRecipe {}

impl EtcdctlRecipe for ElectionRecipe {
    const ACQUIRED_LINES: usize = 2;
}

/// A long-lived `etcdctl lock` or `etcdctl elect` process: it creates its key
/// `<name>/<lease hex>` on a session lease at once and holds (or leads) when every lower
/// `create_revision` under `<name>/` is gone, from when it prints its key until it is released,
/// crashed or dropped (drop = SIGKILL: its key stays until the lease expires).
pub struct EtcdctlContender<R: EtcdctlRecipe> {
    process: CtlProcess,
    recipe: PhantomData<R>,
}

/// `etcdctl lock --ttl <ttl> <name>` (no command): a `concurrency.Mutex` on a session lease of
/// `ttl` seconds.
pub type EtcdctlLock = EtcdctlContender<MutexRecipe>;

/// `etcdctl elect <name> <proposal>`: a `concurrency.Election` on a session lease of 60 s
/// (etcdctl 3.4 has no option to change it).
pub type EtcdctlElect = EtcdctlContender<ElectionRecipe>;

impl EtcdctlLock {
    /// Spawns the client; it queues its key `<name>/<lease hex>` at once and acquires when every
    /// lower `create_revision` under `<name>/` is gone. Does not wait for either.
    pub async fn start(endpoints: &[String], name: &str, ttl_secs: u64) -> Result<EtcdctlLock> {
        Self::spawn(endpoints, &["lock", &format!("--ttl={ttl_secs}"), name])
    }
}

impl EtcdctlElect {
    /// Spawns the candidate; it creates `<name>/<lease hex>` with value `proposal` at once and
    /// becomes leader when every lower `create_revision` under `<name>/` is gone.
    pub async fn start(endpoints: &[String], name: &str, proposal: &str) -> Result<EtcdctlElect> {
        Self::spawn(endpoints, &["elect", name, proposal])
    }
}

impl<R: EtcdctlRecipe> EtcdctlContender<R> {
    fn spawn(endpoints: &[String], args: &[&str]) -> Result<Self> {
        Ok(EtcdctlContender {
            process: CtlProcess::spawn(endpoints, &os_args(args))?,
            recipe: PhantomData,
        })
    }

    /// Waits until it holds the lock or leads (it printed its key, and a leader its proposal)
    /// and returns the key, e.g. `/locks/job/694da2082de77e06`. Fails with etcdctl's stderr if
    /// it exits first.
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<String> {
        let lines = self.process.wait_lines(R::ACQUIRED_LINES, timeout).await?;
        Ok(lines[0].clone())
    }

    /// Whether it printed that it holds and still runs (non-blocking).
    pub fn is_acquired(&mut self) -> bool {
        self.process.printed() >= R::ACQUIRED_LINES && self.process.running()
    }

    /// SIGTERM and wait for the exit. etcdctl deletes its key (unlock or resign, or leaving the
    /// queue) before exiting, exit status 0 for a holder and 1 (`Error: context canceled`) for
    /// a waiter; its session lease is not revoked and expires after its TTL.
    pub async fn release(&mut self) -> Result<ExitStatus> {
        self.process.stop("TERM").await
    }

    /// SIGINT and wait for the exit: the same handler as SIGTERM in etcdctl, same effects.
    pub async fn interrupt(&mut self) -> Result<ExitStatus> {
        self.process.stop("INT").await
    }

    /// SIGKILL and reap: its key stays until the session lease expires (up to its TTL).
    pub async fn crash(&mut self) -> Result<()> {
        self.process.kill().await.map(|_| ())
    }

    /// PID of the etcdctl process.
    pub fn pid(&self) -> u32 {
        self.process.pid
    }

    /// What etcdctl wrote on stderr so far (the end of it).
    pub fn stderr(&self) -> String {
        self.process.stderr_text()
    }
}

/// A single-key lease lock as clients other than the Go recipes do it: one key whose value is
/// the owner id, created in a txn guarded on `version(key) == 0`, bound to a lease kept alive
/// by an `etcdctl lease keep-alive` process while this handle lives. Dropping the handle kills
/// that process (like [`Self::crash`]): the key goes when the lease expires.
pub struct LeaseKeyLock {
    endpoints: Vec<String>,
    key: String,
    value: Vec<u8>,
    lease: i64,
    create_revision: i64,
    keepalive: Option<CtlProcess>,
}

/// Tries once to take `key` for `owner_value` with a lease of `ttl_secs`: grants the lease,
/// starts `etcdctl lease keep-alive <hex>`, then runs the txn
/// `version(key) = 0 ? put key owner_value --lease=<hex>`. `None` (lease revoked, keep-alive
/// stopped) when the key exists. The owner value may be any bytes: etcdctl txn unquotes Go
/// string literals, so it is passed as `"\xNN…"` and stored as the raw bytes.
pub async fn lease_key_lock(
    endpoints: &[String],
    key: &str,
    owner_value: &[u8],
    ttl_secs: u64,
) -> Result<Option<LeaseKeyLock>> {
    let lease = grant_lease(endpoints, ttl_secs).await?;
    let hex = lease_hex(lease);
    // Keep-alive first, so a slow txn cannot outlive a short TTL.
    let keepalive = CtlProcess::spawn(endpoints, &os_args(&["lease", "keep-alive", hex.as_str()]))?;
    let mut lock = LeaseKeyLock {
        endpoints: endpoints.to_vec(),
        key: key.to_string(),
        value: owner_value.to_vec(),
        lease,
        create_revision: 0,
        keepalive: Some(keepalive),
    };
    let quoted_key = go_quote(key.as_bytes());
    let script = format!(
        "version({quoted_key}) = \"0\"\n\nput {quoted_key} {} --lease={hex}\n\n\n",
        go_quote(owner_value)
    );
    let txn: TxnJson =
        match ctl_json(endpoints, &["txn", "-w", "json"], Some(script.as_bytes())).await {
            Ok(txn) => txn,
            Err(e) => {
                lock.abandon().await;
                return Err(e.context(format!("lock txn on {key}")));
            }
        };
    if !txn.succeeded {
        lock.abandon().await;
        return Ok(None);
    }
    // The txn's revision is the put's, hence the key's create_revision.
    lock.create_revision = txn.header.revision;
    Ok(Some(lock))
}

impl LeaseKeyLock {
    /// Stops keep-alive and revokes the lease (the attempt failed).
    async fn abandon(&mut self) {
        if let Some(mut k) = self.keepalive.take() {
            let _ = k.kill().await;
        }
        let _ = revoke_lease(&self.endpoints, self.lease).await;
    }

    /// The locked key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner value written.
    pub fn value(&self) -> &[u8] {
        &self.value
    }

    /// The lease id the key is bound to.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// The key's `create_revision` (the revision of the txn that created it).
    pub fn create_revision(&self) -> i64 {
        self.create_revision
    }

    /// Whether the keep-alive process still runs (it exits 0 when the lease expired or was
    /// revoked).
    pub fn keepalive_running(&mut self) -> bool {
        self.keepalive.as_mut().is_some_and(CtlProcess::running)
    }

    /// PID of the keep-alive process, `None` after release or crash.
    pub fn keepalive_pid(&self) -> Option<u32> {
        self.keepalive.as_ref().map(|k| k.pid)
    }

    /// Deletes the key only if it is still this handle's (txn comparing `create_revision` and
    /// the value), then revokes the lease and stops keep-alive. `Ok(true)` when the key was
    /// deleted, `Ok(false)` when it was already gone or somebody else's (which stays).
    pub async fn release(mut self) -> Result<bool> {
        let quoted_key = go_quote(self.key.as_bytes());
        let script = format!(
            "create({quoted_key}) = \"{}\"\nvalue({quoted_key}) = {}\n\ndel {quoted_key}\n\n\n",
            self.create_revision,
            go_quote(&self.value)
        );
        let txn: Result<TxnJson> = ctl_json(
            &self.endpoints,
            &["txn", "-w", "json"],
            Some(script.as_bytes()),
        )
        .await;
        revoke_lease(&self.endpoints, self.lease).await?;
        if let Some(mut k) = self.keepalive.take() {
            k.kill().await?;
        }
        Ok(txn
            .with_context(|| format!("unlock txn on {}", self.key))?
            .succeeded)
    }

    /// SIGKILLs the keep-alive process: the lease (and the key) expire after the TTL.
    pub async fn crash(&mut self) -> Result<()> {
        if let Some(mut k) = self.keepalive.take() {
            k.kill().await?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Servers

/// Runs one readiness or leader probe, bounded by [`PROBE_TIMEOUT`]; `Err` says why it did not
/// answer yes.
async fn bounded_probe<T>(probe: impl Future<Output = Result<T>>) -> Result<T, String> {
    match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    data: PathBuf,
    log: PathBuf,
    process: Option<Child>,
}

impl Member {
    fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.client)
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer)
    }

    /// `Some(status)` when the process has exited (it is reaped then), `None` while it runs or
    /// was never started.
    fn exited(&mut self) -> Option<String> {
        let child = self.process.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.process = None;
                Some(status.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            // `Child::kill` sends SIGKILL to this child's PID; `wait` reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "etcd member {} (client {}, peer {}): {what}; log tail:\n{}",
            self.name,
            self.client,
            self.peer,
            tail(&self.log, 30)
        )
    }

    /// `Ok(())` when this member answers on its client port as itself (its `member list`
    /// header names a member with our name) and `endpoint health` commits a read.
    async fn probe(&self) -> Result<()> {
        let endpoints = vec![self.endpoint()];
        let list: MemberListJson =
            ctl_json(&endpoints, &["member", "list", "-w", "json"], None).await?;
        let me = list
            .members
            .iter()
            .find(|m| m.id == list.header.member_id)
            .map(|m| m.name.as_str());
        if me != Some(self.name.as_str()) {
            bail!(
                "port {} is answered by member {me:?}, not {}",
                self.client,
                self.name
            );
        }
        ctl(&endpoints, &os_args(&["endpoint", "health"]), None).await?;
        Ok(())
    }
}

/// Several etcd members forming one cluster on loopback; member `i` is `endpoints()[i]`.
pub struct EtcdCluster {
    members: Vec<Member>,
    initial_cluster: String,
    token: String,
    extra_args: Vec<String>,
    /// Client TLS (https client URLs, client certificates required), when started so.
    tls: Option<EtcdTls>,
    // Dropped after `Drop::drop` killed the members.
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// `members` members (`--initial-cluster` listing all, `--initial-cluster-state new`);
    /// returns once every member answers as itself and is healthy, and all agree on a leader.
    pub async fn start(members: usize) -> Result<EtcdCluster> {
        Self::start_with(members, &[]).await
    }

    /// Like [`Self::start`] with `extra_args` appended to every member's command line (later
    /// flags win, e.g. `["--election-timeout", "1000"]`).
    pub async fn start_with(members: usize, extra_args: &[&str]) -> Result<EtcdCluster> {
        Self::start_full(members, extra_args, None).await
    }

    async fn start_full(
        members: usize,
        extra_args: &[&str],
        tls: Option<EtcdTls>,
    ) -> Result<EtcdCluster> {
        if members == 0 {
            bail!("a cluster needs at least one member");
        }
        let extra: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        let mut last_error = None;
        // A port taken by another process between picking and binding makes a member exit:
        // start again on new ports.
        for _ in 0..3 {
            match Self::try_start(members, extra.clone(), tls.clone()).await {
                Ok(cluster) => return Ok(cluster),
                Err(e) => {
                    tracing::warn!("etcd did not start, retrying on new ports: {e:#}");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("etcd did not start")))
    }

    async fn try_start(
        count: usize,
        extra_args: Vec<String>,
        tls: Option<EtcdTls>,
    ) -> Result<EtcdCluster> {
        let dir = tempfile::Builder::new()
            .prefix("lockscope-etcd-")
            .tempdir()?;
        let token = unique_token("lockscope-etcd");
        let members: Vec<Member> = (0..count)
            .map(|i| {
                let name = format!("{token}-m{i}");
                Member {
                    client: free_port(),
                    peer: free_port(),
                    data: dir.path().join(format!("m{i}.data")),
                    log: dir.path().join(format!("m{i}.log")),
                    process: None,
                    name,
                }
            })
            .collect();
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        // From here on, a failure drops `cluster`, which kills what was started.
        let mut cluster = EtcdCluster {
            members,
            initial_cluster,
            token,
            extra_args,
            tls,
            dir,
        };
        if let Some(tls) = &cluster.tls {
            let flags = vec![
                format!("--cacert={}", tls.ca.display()),
                format!("--cert={}", tls.client.cert.display()),
                format!("--key={}", tls.client.key.display()),
            ];
            if let Ok(mut all) = TLS_FLAGS.lock() {
                for m in &cluster.members {
                    all.insert(m.endpoint(), flags.clone());
                }
            }
        }
        for i in 0..count {
            cluster.spawn(i)?;
        }
        let deadline = Instant::now() + CLUSTER_READY_TIMEOUT;
        for i in 0..count {
            let left = deadline.saturating_duration_since(Instant::now());
            cluster.wait_member(i, left.min(READY_TIMEOUT)).await?;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        cluster
            .wait_leader(left.max(Duration::from_secs(5)))
            .await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> Result<()> {
        let m = &self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{}", m.client);
        let mut cmd = Command::new("etcd");
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&tls.server.cert)
                .arg("--key-file")
                .arg(&tls.server.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg("--client-cert-auth");
        }
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(&m.data)
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &m.peer_url()])
            .args(["--initial-advertise-peer-urls", &m.peer_url()])
            .args(["--initial-cluster", &self.initial_cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &self.token])
            .args(["--heartbeat-interval", HEARTBEAT_MS])
            .args(["--election-timeout", ELECTION_MS])
            .args(&self.extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let child = cmd
            .spawn()
            .context("start etcd: is the etcd-server package installed?")?;
        self.members[i].process = Some(child);
        Ok(())
    }

    /// Waits until member `i` answers as itself and is healthy; fails at once, with its log
    /// tail, if its process exited.
    async fn wait_member(&mut self, i: usize, timeout: Duration) -> Result<()> {
        let mut last = String::new();
        let waited = eventually_every(timeout, PROBE_PAUSE, "healthy", async || {
            match bounded_probe(self.members[i].probe()).await {
                Ok(()) => return Ok(Some(())),
                Err(why) => last = why,
            }
            let m = &mut self.members[i];
            if m.process.is_none() {
                bail!("not running");
            }
            if let Some(status) = m.exited() {
                bail!("exited ({status})");
            }
            Ok(None)
        })
        .await;
        waited.map_err(|e| self.members[i].failure(&format!("{e:#}; last probe: {last}")))
    }

    /// Index of the leader the running members agree on (`endpoint status`), or why not.
    async fn agreed_leader(&self) -> Result<usize> {
        let running: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.process.is_some())
            .map(Member::endpoint)
            .collect();
        let statuses: Vec<EndpointStatusJson> =
            ctl_json(&running, &["endpoint", "status", "-w", "json"], None).await?;
        let leaders: std::collections::BTreeSet<u64> =
            statuses.iter().map(|s| s.status.leader).collect();
        let leader = match leaders.iter().collect::<Vec<_>>()[..] {
            [&id] if id != 0 => id,
            _ => bail!("members name leaders {leaders:?}"),
        };
        let endpoint = statuses
            .iter()
            .find(|s| s.status.header.member_id == leader)
            .map(|s| s.endpoint.clone())
            .ok_or_else(|| anyhow!("leader {leader:x} is not among the running members"))?;
        self.members
            .iter()
            .position(|m| m.endpoint() == endpoint)
            .ok_or_else(|| anyhow!("no member has endpoint {endpoint}"))
    }

    async fn wait_leader(&self, timeout: Duration) -> Result<usize> {
        let mut last = String::new();
        let waited =
            eventually_every(
                timeout,
                PROBE_PAUSE,
                "an agreed leader",
                async || match bounded_probe(self.agreed_leader()).await {
                    Ok(i) => Ok(Some(i)),
                    Err(why) => {
                        last = why;
                        Ok(None)
                    }
                },
            )
            .await;
        waited.map_err(|e| {
            anyhow!(
                "{e}: {last}; first member's log tail:\n{}",
                self.members
                    .first()
                    .map(|m| tail(&m.log, 20))
                    .unwrap_or_default()
            )
        })
    }

    /// Index of the current leader, waiting (up to 30 s) until the running members agree on one.
    pub async fn leader(&self) -> Result<usize> {
        self.wait_leader(Duration::from_secs(30)).await
    }

    /// `127.0.0.1:<client port>` of every member, killed ones included, in member order.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// `127.0.0.1:<client port>` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    /// Number of members (running or killed).
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Member `i`'s `--name`.
    pub fn name(&self, i: usize) -> &str {
        &self.members[i].name
    }

    /// Member `i`'s peer port.
    pub fn peer_port(&self, i: usize) -> u16 {
        self.members[i].peer
    }

    /// PID of member `i`, `None` when it is not running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].process.as_ref().map(Child::id)
    }

    /// Member `i`'s log file (zap JSON lines; stdout and stderr).
    pub fn log_path(&self, i: usize) -> &Path {
        &self.members[i].log
    }

    /// The temporary directory with every member's data directory and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGKILLs member `i` by its PID and reaps it (no-op if it is not running).
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again with the same name, ports and data directory (a running one is
    /// killed first), and waits until it answers as itself, is healthy and the running members
    /// agree on a leader. Fails, with its log tail, if a port was taken meanwhile.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        self.members[i].kill();
        self.spawn(i)?;
        self.wait_member(i, READY_TIMEOUT).await?;
        self.wait_leader(READY_TIMEOUT).await.map(|_| ())
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
        if self.tls.is_some() {
            if let Ok(mut all) = TLS_FLAGS.lock() {
                for m in &self.members {
                    all.remove(&m.endpoint());
                }
            }
        }
    }
}

/// Client TLS of members: their server certificate, the CA they trust for client
/// certificates, and the client certificate the helpers here use (CN `root`).
#[derive(Clone)]
struct EtcdTls {
    ca: PathBuf,
    server: CertFiles,
    client: CertFiles,
}

/// One etcd member on `127.0.0.1:<free port>` (client) and its own peer port, with its data
/// directory in its own temporary directory.
pub struct EtcdServer {
    cluster: EtcdCluster,
}

impl EtcdServer {
    /// Starts the member and returns once it answers as itself and `endpoint health` succeeds
    /// (30 s bound; the error carries its log tail).
    pub async fn start() -> Result<EtcdServer> {
        Self::start_with(&[]).await
    }

    /// Like [`Self::start`] with `extra_args` appended to the command line (later flags win).
    pub async fn start_with(extra_args: &[&str]) -> Result<EtcdServer> {
        Ok(EtcdServer {
            cluster: EtcdCluster::start_with(1, extra_args).await?,
        })
    }

    /// One member serving clients over TLS only (`https://`, `--client-cert-auth`: a client
    /// certificate signed by `pki`'s CA is required, and once auth is enabled its CN names the
    /// user), with a server certificate from `pki`. The helpers here connect with a client
    /// certificate of CN `root`, so after [`enable_auth`] they act as etcd's root user.
    pub async fn start_tls(pki: &Pki, extra_args: &[&str]) -> Result<EtcdServer> {
        let tls = EtcdTls {
            ca: pki.ca_file().to_path_buf(),
            server: pki.server("etcd-server")?,
            client: pki.client("etcd-root", "root")?,
        };
        Ok(EtcdServer {
            cluster: EtcdCluster::start_full(1, extra_args, Some(tls)).await?,
        })
    }

    /// `127.0.0.1:<client port>`
    pub fn endpoint(&self) -> String {
        self.cluster.endpoint(0)
    }

    /// `[endpoint()]`, for the helpers that take a list.
    pub fn endpoints(&self) -> Vec<String> {
        self.cluster.endpoints()
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.cluster.members[0].client
    }

    /// The peer port.
    pub fn peer_port(&self) -> u16 {
        self.cluster.peer_port(0)
    }

    /// PID of the server, `None` when it is not running.
    pub fn pid(&self) -> Option<u32> {
        self.cluster.pid(0)
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        self.cluster.log_path(0)
    }

    /// The temporary directory with the data directory and the log.
    pub fn dir(&self) -> &Path {
        self.cluster.dir()
    }

    /// SIGKILLs the server by its PID and reaps it (no-op if it is not running).
    pub fn kill(&mut self) {
        self.cluster.kill(0);
    }

    /// Starts the server again on the same ports and data directory (a running one is killed
    /// first) and waits until it is healthy.
    pub async fn restart(&mut self) -> Result<()> {
        self.cluster.restart(0).await
    }
}
