//! Real Python lock clients from PyPI — kazoo (ZooKeeper `Lock`, `ReadLock`, `WriteLock`,
//! `Semaphore`), redis-py's `Lock`, python-redis-lock and pottery's `Redlock` — one client per
//! process, driven over stdin/stdout by `tests/py/lockclient.py` (its docstring is the protocol).
//!
//! The same environment carries schemathesis, the API fuzzer of `tests/openapi_contract.rs`
//! (run as `python -m schemathesis.cli`: the venv's own scripts have the build path in their
//! shebang).
//!
//! This module owns a virtual environment built from `tests/py/requirements.txt` (exact pins)
//! with `python3` from `PATH`: on first use it is created under the workspace's `target/` as
//! `pyenv-<hash>` (the hash covers the requirements and the interpreter), nothing is installed
//! globally. Threads of one process share one build ([`OnceLock`]); processes take turns through
//! a lock file holding the builder's PID (a dead builder's lock is taken over), and the build
//! goes to a private directory that is renamed into place only when complete, so nobody ever
//! runs a half-installed environment. The driver script is copied next to it under a name keyed
//! by its own hash. `LOCKSCOPE_PYENV_BASE` overrides the directory the environments go to.
//!
//! Client processes are SIGKILLed by PID on [`PyClient::crash`] and on drop; [`PyClient::exit`]
//! closes the client cleanly. It does not touch servers: tests start those with the other
//! support modules and read what the libraries left with plain clients.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::harness::eventually_blocking;

const REQUIREMENTS: &str = include_str!("../../py/requirements.txt");
const SCRIPT: &str = include_str!("../../py/lockclient.py");

/// How long a process waits for another one's build before it gives up.
const BUILD_WAIT: Duration = Duration::from_secs(600);
/// Default for replies that need no server round trip beyond the client's own (connect, release).
const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`PyClient::acquire`] waits for the lock.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(60);
/// kazoo's own default session timeout (`KazooClient(timeout=10.0)`).
pub const KAZOO_DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

fn fnv1a(parts: &[&str]) -> u64 {
    parts
        .iter()
        .flat_map(|p| p.bytes().chain(std::iter::once(0)))
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        })
}

/// Where the environments go: `LOCKSCOPE_PYENV_BASE`, else the cargo target directory this
/// executable runs from (the nearest ancestor holding `CACHEDIR.TAG`, so `CARGO_TARGET_DIR`
/// is honoured), else `<workspace>/target`.
fn base_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LOCKSCOPE_PYENV_BASE") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe
            .ancestors()
            .skip(1)
            .find(|d| d.join("CACHEDIR.TAG").is_file())
        {
            return dir.to_path_buf();
        }
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target")
}

fn run(cmd: &mut std::process::Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            lines[lines.len().saturating_sub(30)..].join("\n")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The interpreter `python3` on `PATH` really is (pyenv shims resolve here) and its version.
fn probe_python() -> Result<(String, String)> {
    let out = run(
        std::process::Command::new("python3").args([
            "-c",
            "import sys; print(sys.executable); print(sys.version.replace('\\n', ' '))",
        ]),
        "python3 (is Python 3 on PATH? run scripts/install-deps)",
    )?;
    let mut lines = out.lines();
    match (lines.next(), lines.next()) {
        (Some(exe), Some(version)) if !exe.is_empty() => Ok((exe.into(), version.into())),
        _ => bail!("python3 did not say what it is: {out:?}"),
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// An exclusive lock file, removed on drop.
struct BuildLock(PathBuf);

impl Drop for BuildLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl BuildLock {
    /// `Some` once this process holds the lock; `None` if `done()` turned true while waiting.
    fn take(path: &Path, done: impl Fn() -> bool) -> Result<Option<BuildLock>> {
        let what = format!(
            "the Python environment built by another process, or its build lock {} free",
            path.display()
        );
        eventually_blocking(BUILD_WAIT, &what, || {
            if done() {
                return Ok(Some(None));
            }
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut file) => {
                    let lock = BuildLock(path.to_path_buf());
                    writeln!(file, "{}", std::process::id())?;
                    return Ok(Some(Some(lock)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e).with_context(|| format!("create {}", path.display())),
            }
            if Self::stale(path) {
                // Taken over on the next try.
                tracing::warn!("taking over the stale Python env lock {}", path.display());
                let _ = std::fs::remove_file(path);
            }
            Ok(None)
        })
    }

    /// The holder is dead, or the file has had no PID for a minute (its writer died at once).
    fn stale(path: &Path) -> bool {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        match text.trim().parse::<u32>() {
            Ok(pid) => !pid_alive(pid),
            Err(_) => std::fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| SystemTime::now().duration_since(t).ok())
                .is_some_and(|age| age > Duration::from_secs(60)),
        }
    }
}

/// The environment's directory, built if it is not there yet. Blocking.
fn build_env() -> Result<PathBuf> {
    let base = base_dir();
    std::fs::create_dir_all(&base).with_context(|| format!("create {}", base.display()))?;
    let (python, version) = probe_python()?;
    let name = format!(
        "pyenv-{:016x}",
        fnv1a(&[REQUIREMENTS, python.as_str(), version.as_str()])
    );
    let dir = base.join(&name);
    let ready = || dir.join("READY").is_file();
    let Some(_lock) = BuildLock::take(&base.join(format!("{name}.lock")), ready)? else {
        return Ok(dir);
    };
    if ready() {
        return Ok(dir);
    }
    // Holding the lock, any partial directory of this name is a dead builder's leftover.
    let partial_prefix = format!("{name}.partial-");
    for entry in std::fs::read_dir(&base)?.flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&partial_prefix)
        {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let started = Instant::now();
    let scratch = tempfile::Builder::new()
        .prefix(&partial_prefix)
        .tempdir_in(&base)?;
    let requirements = scratch.path().join("requirements.txt");
    std::fs::write(&requirements, REQUIREMENTS)?;
    run(
        std::process::Command::new(&python)
            .args(["-m", "venv"])
            .arg(scratch.path()),
        "python3 -m venv (on Debian: the python3-venv package; run scripts/install-deps)",
    )?;
    // Through `python -m pip`: the venv's own `pip` script has the scratch path in its shebang,
    // which is gone after the rename (the interpreter itself finds its environment by its own
    // location, so the renamed environment works).
    run(
        std::process::Command::new(scratch.path().join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-input",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements),
        "pip install -r tests/py/requirements.txt",
    )?;
    std::fs::write(
        scratch.path().join("READY"),
        format!("{python}\n{version}\n"),
    )?;
    let built = scratch.keep();
    if let Err(e) = std::fs::rename(&built, &dir) {
        let _ = std::fs::remove_dir_all(&built);
        if !ready() {
            return Err(e).with_context(|| format!("rename into {}", dir.display()));
        }
    }
    tracing::info!(
        "built Python environment {} in {:?}",
        dir.display(),
        started.elapsed()
    );
    Ok(dir)
}

/// The driver script, copied into the environment under a name keyed by its hash (written to
/// a temporary name first and renamed, so readers never see half a file).
fn install_script(env: &Path) -> Result<PathBuf> {
    let path = env.join(format!("lockclient-{:016x}.py", fnv1a(&[SCRIPT])));
    if path.is_file() {
        return Ok(path);
    }
    let mut tmp = tempfile::Builder::new()
        .prefix(".lockclient-")
        .tempfile_in(env)?;
    tmp.write_all(SCRIPT.as_bytes())?;
    tmp.persist(&path)
        .map_err(|e| anyhow!("write {}: {}", path.display(), e.error))?;
    Ok(path)
}

/// The environment's interpreter and the driver script, building the environment on first use
/// (blocking: call it from `spawn_blocking` in async code). Every thread of a process gets the
/// result of one build; a failure is reported to each of them.
pub fn python_and_script() -> Result<(PathBuf, PathBuf)> {
    static ENV: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    ENV.get_or_init(|| {
        build_env()
            .and_then(|env| Ok((env.join("bin/python"), install_script(&env)?)))
            .map_err(|e| format!("{e:#}"))
    })
    .clone()
    .map_err(|e| anyhow!("Python lock client environment: {e}"))
}

/// Which kazoo recipe a client drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KazooRecipe {
    /// `client.Lock(path, identifier)`: `<uuid hex>__lock__NNNNNNNNNN` nodes.
    Lock,
    /// `client.ReadLock`: `<uuid hex>__rlock__NNNNNNNNNN` nodes.
    ReadLock,
    /// `client.WriteLock`: `__lock__` nodes, blocked by readers too.
    WriteLock,
    /// `client.Semaphore(path, identifier, max_leases=n)`.
    Semaphore { max_leases: u32 },
    /// `client.NonBlockingLease(path, duration, identifier)`: each acquire is one attempt.
    Lease { duration_ms: u64 },
    /// `client.MultiNonBlockingLease(count, path, duration, identifier)`.
    MultiLease { duration_ms: u64, count: u32 },
}

/// How a kazoo client reaches a secured ZooKeeper and protects what it creates (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KazooSecurity {
    /// `use_ssl` with this CA, client certificate and key (the hosts are `secureClientPort`s).
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// `auth_data`: (scheme, credential), e.g. `("digest", "app:secret")`.
    pub auth: Vec<(String, String)>,
    /// `default_acl`: (permission bits, scheme, id), e.g. `(31, "digest", "app:secret")` (a
    /// digest id as user:password, hashed by the client) or `(1, "sasl", "lockscope")`;
    /// every node the recipe creates (the lock node and the client's own) gets it.
    pub acl: Vec<(u32, String, String)>,
}

/// One lock client: the library, its servers and the lock it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PyLockSpec {
    Kazoo {
        recipe: KazooRecipe,
        /// ZooKeeper connect string, `host:port,host:port`.
        hosts: String,
        path: String,
        /// Written as the data of the client's nodes.
        identifier: String,
        session_timeout: Duration,
        /// TLS, authentication and the ACL the client's nodes are created with.
        security: KazooSecurity,
    },
    /// `redis.Redis.from_url(url).lock(name, timeout=…)`: `SET name <token> NX [PX]`, waiters poll
    /// every 100 ms.
    RedisPy {
        url: String,
        name: String,
        /// `None`: no TTL.
        timeout_ms: Option<u64>,
    },
    /// `redis_lock.Lock(conn, name, expire=…, auto_renewal=…)`; waiters block in BLPOP.
    PythonRedisLock {
        url: String,
        name: String,
        /// Seconds; `None`: no TTL.
        expire_s: Option<u64>,
        /// Needs `expire_s`; renews every 2/3 of it while held.
        auto_renewal: bool,
    },
    /// `pottery.Redlock(key=…, masters={…}, auto_release_time=ttl_ms / 1000)`.
    PotteryRedlock {
        urls: Vec<String>,
        key: String,
        ttl_ms: u64,
    },
    /// PyMySQL `SELECT GET_LOCK(%s, %s)` with the name passed as `bytes` (sent as a `_binary`
    /// literal); `acquire` without a timeout waits a year.
    PyMySqlGetLock {
        host: String,
        port: u16,
        user: String,
        password: String,
        name: Vec<u8>,
    },
}

impl PyLockSpec {
    fn config(&self) -> Value {
        match self {
            PyLockSpec::Kazoo {
                recipe,
                hosts,
                path,
                identifier,
                session_timeout,
                security,
            } => {
                let (kind, max_leases) = match recipe {
                    KazooRecipe::Lock => ("kazoo-lock", None),
                    KazooRecipe::ReadLock => ("kazoo-read-lock", None),
                    KazooRecipe::WriteLock => ("kazoo-write-lock", None),
                    KazooRecipe::Semaphore { max_leases } => ("kazoo-semaphore", Some(*max_leases)),
                    KazooRecipe::Lease { .. } => ("kazoo-lease", None),
                    KazooRecipe::MultiLease { count, .. } => ("kazoo-multi-lease", Some(*count)),
                };
                let duration_ms = match recipe {
                    KazooRecipe::Lease { duration_ms }
                    | KazooRecipe::MultiLease { duration_ms, .. } => Some(*duration_ms),
                    _ => None,
                };
                json!({
                    "kind": kind,
                    "hosts": hosts,
                    "path": path,
                    "identifier": identifier,
                    "max_leases": max_leases,
                    "count": max_leases,
                    "duration_ms": duration_ms,
                    "session_timeout_ms": session_timeout.as_millis() as u64,
                    "tls": security.tls.as_ref().map(|(ca, cert, key)| json!({
                        "ca": ca, "cert": cert, "key": key,
                    })),
                    "auth": security.auth,
                    "acl": security.acl,
                })
            }
            PyLockSpec::RedisPy {
                url,
                name,
                timeout_ms,
            } => {
                json!({"kind": "redis-py-lock", "url": url, "name": name, "timeout_ms": timeout_ms})
            }
            PyLockSpec::PythonRedisLock {
                url,
                name,
                expire_s,
                auto_renewal,
            } => json!({
                "kind": "python-redis-lock",
                "url": url,
                "name": name,
                "expire_s": expire_s,
                "auto_renewal": auto_renewal,
            }),
            PyLockSpec::PotteryRedlock { urls, key, ttl_ms } => {
                json!({"kind": "pottery-redlock", "urls": urls, "key": key, "ttl_ms": ttl_ms})
            }
            PyLockSpec::PyMySqlGetLock {
                host,
                port,
                user,
                password,
                name,
            } => json!({
                "kind": "pymysql-get-lock",
                "host": host,
                "port": port,
                "user": user,
                "password": password,
                "name_hex": name.iter().map(|b| format!("{b:02x}")).collect::<String>(),
            }),
        }
    }

    fn label(&self) -> &'static str {
        match self {
            PyLockSpec::Kazoo { .. } => "kazoo client",
            PyLockSpec::RedisPy { .. } => "redis-py Lock client",
            PyLockSpec::PythonRedisLock { .. } => "python-redis-lock client",
            PyLockSpec::PotteryRedlock { .. } => "pottery Redlock client",
            PyLockSpec::PyMySqlGetLock { .. } => "PyMySQL GET_LOCK client",
        }
    }
}

/// What a client reported when it got the lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acquired {
    /// kazoo: the full path of the client's node (a Semaphore's lease node).
    pub node: Option<String>,
    /// Redis: the lock key as the library names it (`lock:<name>`, `redlock:<key>`, …).
    pub key: Option<String>,
    /// Redis: the value the library stored (its token or id).
    pub token: Option<String>,
}

impl Acquired {
    fn from_detail(detail: &Value) -> Acquired {
        let text = |k: &str| detail.get(k).and_then(Value::as_str).map(str::to_string);
        Acquired {
            node: text("node"),
            key: text("key"),
            token: text("token"),
        }
    }
}

/// How a blocking acquire ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Acquired(Acquired),
    /// The library's own timeout ([`PyClient::start_acquire_for`]) ran out.
    TimedOut,
    /// [`PyClient::cancel`] (kazoo only).
    Cancelled,
}

/// One event line: its word and its JSON detail (`null` when it had none).
#[derive(Debug, Clone)]
struct Event {
    word: String,
    detail: Value,
    line: String,
}

impl Event {
    fn parse(line: &str) -> Event {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Event {
            word: word.to_string(),
            detail: serde_json::from_str(rest).unwrap_or(Value::Null),
            line: line.to_string(),
        }
    }

    /// Printed by the worker thread, so ordered with the lock commands.
    fn is_worker_event(&self) -> bool {
        match self.word.as_str() {
            "ERROR" => self
                .detail
                .get("op")
                .and_then(Value::as_str)
                .is_some_and(|op| WORKER_OPS.contains(&op)),
            word => !IMMEDIATE.contains(&word),
        }
    }
}

/// Replies printed by the client's main thread at once; every other event comes from its
/// worker thread, in command order.
const IMMEDIATE: &[&str] = &["INFO", "PONG"];
/// Commands the worker thread runs (its `ERROR` lines name them as `op`).
const WORKER_OPS: &[&str] = &["acquire", "try", "release", "hold"];

/// One Python lock client process.
pub struct PyClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Worker events read while waiting for an immediate reply, in order.
    backlog: VecDeque<Event>,
    pid: u32,
    label: &'static str,
    session_id: Option<i64>,
    client_ids: Vec<i64>,
    stderr: tempfile::NamedTempFile,
}

impl PyClient {
    /// Starts a client and waits until it is connected (`READY`); builds the Python
    /// environment first if this is the first client.
    pub async fn spawn(spec: PyLockSpec) -> Result<PyClient> {
        let (python, script) = tokio::task::spawn_blocking(python_and_script).await??;
        let stderr = tempfile::NamedTempFile::new()?;
        let mut child = Command::new(python)
            // Isolated (no PYTHON* variables, no user site) and unbuffered.
            .args(["-I", "-u"])
            .arg(&script)
            .arg(spec.config().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr.reopen()?))
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start the {}", spec.label()))?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow!("{} exited at once", spec.label()))?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
        let mut client = PyClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            backlog: VecDeque::new(),
            pid,
            label: spec.label(),
            session_id: None,
            client_ids: Vec::new(),
            stderr,
        };
        let ready = client.expect(&["READY"], Duration::from_secs(60)).await?;
        client.session_id = ready
            .detail
            .get("session_id")
            .and_then(Value::as_str)
            .and_then(lockscope_model::parse_session_hex);
        client.client_ids = ready
            .detail
            .get("client_ids")
            .and_then(Value::as_array)
            .map(|ids| ids.iter().filter_map(Value::as_i64).collect())
            .or_else(|| {
                // A database client: its one connection's id.
                let id = ready.detail.get("connection_id").and_then(Value::as_i64)?;
                Some(vec![id])
            })
            .unwrap_or_default();
        Ok(client)
    }

    fn kazoo(recipe: KazooRecipe, hosts: &str, path: &str, identifier: &str) -> PyLockSpec {
        PyLockSpec::Kazoo {
            recipe,
            hosts: hosts.into(),
            path: path.into(),
            identifier: identifier.into(),
            session_timeout: KAZOO_DEFAULT_SESSION_TIMEOUT,
            security: KazooSecurity::default(),
        }
    }

    /// kazoo `Lock(path, identifier)` reaching the server and protecting its nodes as
    /// `security` says.
    pub async fn kazoo_secure_lock(
        hosts: &str,
        path: &str,
        identifier: &str,
        security: KazooSecurity,
    ) -> Result<PyClient> {
        let mut spec = Self::kazoo(KazooRecipe::Lock, hosts, path, identifier);
        if let PyLockSpec::Kazoo { security: s, .. } = &mut spec {
            *s = security;
        }
        Self::spawn(spec).await
    }

    /// kazoo `Lock(path, identifier)` with kazoo's default 10 s session timeout.
    pub async fn kazoo_lock(hosts: &str, path: &str, identifier: &str) -> Result<PyClient> {
        Self::spawn(Self::kazoo(KazooRecipe::Lock, hosts, path, identifier)).await
    }

    /// kazoo `NonBlockingLease(path, duration, identifier)` (one attempt per acquire; never
    /// released: it ends by time).
    pub async fn kazoo_lease(
        hosts: &str,
        path: &str,
        identifier: &str,
        duration: Duration,
    ) -> Result<PyClient> {
        let recipe = KazooRecipe::Lease {
            duration_ms: duration.as_millis() as u64,
        };
        Self::spawn(Self::kazoo(recipe, hosts, path, identifier)).await
    }

    /// kazoo `MultiNonBlockingLease(count, path, duration, identifier)`.
    pub async fn kazoo_multi_lease(
        hosts: &str,
        path: &str,
        identifier: &str,
        duration: Duration,
        count: u32,
    ) -> Result<PyClient> {
        let recipe = KazooRecipe::MultiLease {
            duration_ms: duration.as_millis() as u64,
            count,
        };
        Self::spawn(Self::kazoo(recipe, hosts, path, identifier)).await
    }

    /// kazoo `ReadLock(path, identifier)`.
    pub async fn kazoo_read_lock(hosts: &str, path: &str, identifier: &str) -> Result<PyClient> {
        Self::spawn(Self::kazoo(KazooRecipe::ReadLock, hosts, path, identifier)).await
    }

    /// kazoo `WriteLock(path, identifier)`.
    pub async fn kazoo_write_lock(hosts: &str, path: &str, identifier: &str) -> Result<PyClient> {
        Self::spawn(Self::kazoo(KazooRecipe::WriteLock, hosts, path, identifier)).await
    }

    /// kazoo `Semaphore(path, identifier, max_leases=max_leases)`.
    pub async fn kazoo_semaphore(
        hosts: &str,
        path: &str,
        identifier: &str,
        max_leases: u32,
    ) -> Result<PyClient> {
        let recipe = KazooRecipe::Semaphore { max_leases };
        Self::spawn(Self::kazoo(recipe, hosts, path, identifier)).await
    }

    /// redis-py `Redis.from_url(url).lock(name, timeout=timeout_ms / 1000)`.
    pub async fn redis_py_lock(url: &str, name: &str, timeout_ms: Option<u64>) -> Result<PyClient> {
        Self::spawn(PyLockSpec::RedisPy {
            url: url.into(),
            name: name.into(),
            timeout_ms,
        })
        .await
    }

    /// python-redis-lock `Lock(conn, name, expire=expire_s)` without auto-renewal.
    pub async fn python_redis_lock(
        url: &str,
        name: &str,
        expire_s: Option<u64>,
    ) -> Result<PyClient> {
        Self::spawn(PyLockSpec::PythonRedisLock {
            url: url.into(),
            name: name.into(),
            expire_s,
            auto_renewal: false,
        })
        .await
    }

    /// pottery `Redlock(key=key, masters={one Redis per url}, auto_release_time=ttl_ms / 1000)`.
    pub async fn pottery_redlock(urls: &[String], key: &str, ttl_ms: u64) -> Result<PyClient> {
        Self::spawn(PyLockSpec::PotteryRedlock {
            urls: urls.to_vec(),
            key: key.into(),
            ttl_ms,
        })
        .await
    }

    /// PyMySQL `GET_LOCK(name, …)` on MariaDB at `port` as `user`, the name passed as `bytes`;
    /// [`Self::client_ids`] holds its connection id.
    pub async fn pymysql_get_lock(
        port: u16,
        user: &str,
        password: &str,
        name: &[u8],
    ) -> Result<PyClient> {
        Self::spawn(PyLockSpec::PyMySqlGetLock {
            host: "127.0.0.1".into(),
            port,
            user: user.into(),
            password: password.into(),
            name: name.to_vec(),
        })
        .await
    }

    /// The process id (kept after the process is gone).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// kazoo: the ZooKeeper session id.
    pub fn session_id(&self) -> Option<i64> {
        self.session_id
    }

    /// Redis: `CLIENT ID` of the client's connection to each server (as `CLIENT LIST` shows
    /// `id=`), in the order of the URLs given. A blocked python-redis-lock waiter's BLPOP runs
    /// on this connection.
    pub fn client_ids(&self) -> &[i64] {
        &self.client_ids
    }

    /// What the client wrote to stderr so far (Python tracebacks, library warnings).
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    async fn command(&mut self, command: &str) -> Result<()> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .with_context(|| format!("{}: send {command:?}", self.label))?;
        self.stdin.flush().await?;
        Ok(())
    }

    async fn next_line(&mut self, deadline: tokio::time::Instant, want: &[&str]) -> Result<Event> {
        let line = tokio::time::timeout_at(deadline, self.lines.next_line())
            .await
            .map_err(|_| {
                anyhow!(
                    "{} (pid {}): no {want:?} in time; stderr:\n{}",
                    self.label,
                    self.pid,
                    self.stderr_text()
                )
            })??;
        match line {
            Some(line) => Ok(Event::parse(&line)),
            None => bail!(
                "{} (pid {}) exited before {want:?}; stderr:\n{}",
                self.label,
                self.pid,
                self.stderr_text()
            ),
        }
    }

    /// The next event, which must be one of `want`; `ERROR` or any other event fails.
    /// Worker events that arrive while an immediate reply is awaited wait in the backlog.
    async fn expect(&mut self, want: &[&str], timeout: Duration) -> Result<Event> {
        let deadline = tokio::time::Instant::now() + timeout;
        let immediate = want.iter().all(|w| IMMEDIATE.contains(w));
        loop {
            let queued = if immediate {
                None
            } else {
                self.backlog.pop_front()
            };
            let event = match queued {
                Some(event) => event,
                None => self.next_line(deadline, want).await?,
            };
            if want.contains(&event.word.as_str()) {
                return Ok(event);
            }
            if immediate && event.is_worker_event() {
                self.backlog.push_back(event);
                continue;
            }
            bail!(
                "{} (pid {}): expected {want:?}, got {:?}; stderr:\n{}",
                self.label,
                self.pid,
                event.line,
                self.stderr_text()
            );
        }
    }

    /// Blocking acquire: returns once the lock is held (60 s at most).
    pub async fn acquire(&mut self) -> Result<Acquired> {
        self.start_acquire().await?;
        self.wait_acquired(ACQUIRE_TIMEOUT).await
    }

    /// Starts a blocking acquire and returns once the client said `WAITING`, which it prints
    /// right before it calls the library's blocking acquire: what the library does on the server
    /// (a node, a BLPOP) happens after this returns, so wait for that fact on the server.
    pub async fn start_acquire(&mut self) -> Result<()> {
        self.command("acquire").await?;
        self.expect(&["WAITING"], REPLY_TIMEOUT).await.map(|_| ())
    }

    /// Like [`Self::start_acquire`], with the library's own timeout (kazoo `timeout=`, redis-py
    /// `blocking_timeout=`, python-redis-lock `timeout=` in whole seconds, at least 1, pottery
    /// `timeout=`); [`Self::wait_outcome`] then says [`Outcome::TimedOut`].
    pub async fn start_acquire_for(&mut self, limit: Duration) -> Result<()> {
        self.command(&format!("acquire {}", limit.as_millis()))
            .await?;
        self.expect(&["WAITING"], REPLY_TIMEOUT).await.map(|_| ())
    }

    /// Waits for the pending acquire to end, however it ends.
    pub async fn wait_outcome(&mut self, timeout: Duration) -> Result<Outcome> {
        let event = self
            .expect(&["ACQUIRED", "TIMEOUT", "CANCELLED"], timeout)
            .await?;
        Ok(match event.word.as_str() {
            "ACQUIRED" => Outcome::Acquired(Acquired::from_detail(&event.detail)),
            "TIMEOUT" => Outcome::TimedOut,
            _ => Outcome::Cancelled,
        })
    }

    /// Waits for `ACQUIRED` after [`Self::start_acquire`]; anything else fails.
    pub async fn wait_acquired(&mut self, timeout: Duration) -> Result<Acquired> {
        let event = self.expect(&["ACQUIRED"], timeout).await?;
        Ok(Acquired::from_detail(&event.detail))
    }

    /// One non-blocking attempt (`acquire(blocking=False)`): `None` when the lock is busy.
    pub async fn try_acquire(&mut self) -> Result<Option<Acquired>> {
        self.command("try").await?;
        let event = self.expect(&["ACQUIRED", "BUSY"], REPLY_TIMEOUT).await?;
        Ok((event.word == "ACQUIRED").then(|| Acquired::from_detail(&event.detail)))
    }

    /// Releases the lock (the library's `release()`) and waits for `RELEASED`.
    pub async fn release(&mut self) -> Result<()> {
        self.command("release").await?;
        self.expect(&["RELEASED"], REPLY_TIMEOUT).await.map(|_| ())
    }

    /// Keeps holding for `hold`, then releases, without waiting: see [`Self::wait_released`].
    pub async fn hold_then_release(&mut self, hold: Duration) -> Result<()> {
        self.command(&format!("hold {}", hold.as_millis())).await
    }

    /// Waits for `RELEASED` after [`Self::hold_then_release`].
    pub async fn wait_released(&mut self, timeout: Duration) -> Result<()> {
        self.expect(&["RELEASED"], timeout).await.map(|_| ())
    }

    /// kazoo only: cancels a blocked acquire; [`Self::wait_outcome`] then says
    /// [`Outcome::Cancelled`].
    pub async fn cancel(&mut self) -> Result<()> {
        self.command("cancel").await
    }

    /// What the client knows now, answered at once even during a blocked acquire: kazoo
    /// `{"node": full path or null}` (a Lock's node exists from just after `WAITING`; a
    /// Semaphore's lease node and its `lock_path`), Redis `{"key": …}` (python-redis-lock also
    /// `signal` and `token`).
    pub async fn info(&mut self) -> Result<Value> {
        self.command("info").await?;
        Ok(self.expect(&["INFO"], REPLY_TIMEOUT).await?.detail)
    }

    /// Round trip through the client's main thread.
    pub async fn ping(&mut self) -> Result<()> {
        self.command("ping").await?;
        self.expect(&["PONG"], REPLY_TIMEOUT).await.map(|_| ())
    }

    /// SIGKILL: no release and no clean close (a kazoo session must expire on the server; a
    /// Redis key stays until its TTL, if it has one). Reaps the process.
    pub fn crash(&mut self) {
        let _ = self.child.start_kill();
        // The process dies at once on SIGKILL; reap it without blocking the runtime for long
        // (the wait gives up after a second, as it always did).
        let _ = eventually_blocking(
            Duration::from_secs(1),
            &format!("{} reaped", self.label),
            || Ok(self.child.try_wait()?.map(|_| ())),
        );
    }

    /// Clean exit without release, even during a blocked acquire: kazoo closes its session (its
    /// nodes go at once), Redis connections are closed (keys stay until their TTL).
    pub async fn exit(mut self) -> Result<()> {
        let _ = self.command("exit").await;
        match tokio::time::timeout(REPLY_TIMEOUT, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => bail!(
                "{} exited with {status} on exit; stderr:\n{}",
                self.label,
                self.stderr_text()
            ),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => {
                self.crash();
                bail!(
                    "{} did not exit within {REPLY_TIMEOUT:?}: killed it",
                    self.label
                )
            }
        }
    }
}

impl Drop for PyClient {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.crash();
        }
    }
}
