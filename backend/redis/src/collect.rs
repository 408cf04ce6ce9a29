//! Redis collector: SCAN bootstrap, keyspace notifications, a read of each lock key at its TTL
//! deadline, and a periodic reconcile scan, on every master of a source.
//!
//! Invariants:
//! * Keys are found with `SCAN … MATCH … COUNT 1000`, never `KEYS`.
//! * A notification carries only the key: the key (and its Redisson companions, which share its
//!   hash slot) is read with one Lua script, many keys per pipelined round trip.
//! * Redis notifies expiries late under load (lazily, by sampling). Every read records the key's
//!   deadline from PTTL and reads it again at that moment; the read itself makes Redis expire the
//!   key, so a TTL expiry is seen within milliseconds of its deadline.
//! * Pub/sub is at-most-once: every reconcile interval and after every reconnect, a full scan
//!   re-reads everything, and the aggregator counts what it had wrong.
//! * Silence is bounded on both of a member's connections: a `PING` every quarter of
//!   `silence_limit` on the command connection and on the notification connection (RESP2
//!   allows it in subscribed mode), each due within the limit of the last thing heard there
//!   ([`heartbeat`]); past it the member is down ("no answer for 10 s on the notification
//!   connection"), last seen at its last answer, and reconnects (its first scan then shows
//!   whatever changed meanwhile). TCP keepalive and `TCP_USER_TIMEOUT` at the same bound let
//!   the kernel drop a connection whose peer is gone.
//! * Notifications are taken as fast as they arrive, whatever the reads cost (redis-rs buffers
//!   the ones not taken without bound): each marks its key dirty, and a key changed many times
//!   before its read is read once, at its latest state. Past [`DIRTY_MAX`] dirty keys the member
//!   drops them, reports itself lagging and catches up with a full scan once the backlog is
//!   taken: memory stays bounded under any change rate.
//! * A Redis Cluster is watched node by node (SCAN, notifications and PUBSUB NUMSUB are
//!   node-local): masters come from `CLUSTER NODES`, re-read at each reconcile; a change of the
//!   master set restarts the member tasks. While a slot migrates, reads go with `ASKING` (the
//!   target answers for the keys it imports), and a key the server refuses for the migration
//!   (`ASK`, `TRYAGAIN`) is settled alone instead of failing the member's whole batch.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use lockscope_model::redis::{
    clamp_pttl, companion_keys, companions_share_slot, decode, display_bytes, is_redisson_internal,
    locks_of_companion, signal_list_key, spring_registry, waiter_channels, Companions, KeyHint,
    KeyRead, RedisRecipe, RedisValue,
};

use super::config::{redact_url, RedisWatchConfig};
use super::{KeyReport, RedisError, RedisUpdate as Update};
use lockscope_core::collect::Outbox;

use super::lives::Lives;
use super::{bounded, glob};

/// What one Redis source watches, from `[[redis]]` or `[[redlock]]`.
#[derive(Debug, Clone)]
pub struct RedisSpec {
    pub name: String,
    pub urls: Vec<String>,
    pub patterns: Vec<String>,
    pub cluster: bool,
    pub redlock: bool,
    /// Spring Integration `RedisLockRegistry` keys (`[[redis]]` only).
    pub spring_lock_registries: Vec<String>,
    pub watch: RedisWatchConfig,
}

impl From<&super::RedisSourceConfig> for RedisSpec {
    /// A `[[redis]]` source: one server or Cluster.
    fn from(r: &super::RedisSourceConfig) -> Self {
        RedisSpec {
            name: r.name.clone(),
            urls: vec![r.url.clone()],
            patterns: r.patterns.clone(),
            cluster: r.cluster,
            redlock: false,
            spring_lock_registries: r.spring_lock_registries.clone(),
            watch: r.watch.clone(),
        }
    }
}

impl From<&super::RedlockConfig> for RedisSpec {
    /// A `[[redlock]]` source: independent masters locked by majority.
    fn from(r: &super::RedlockConfig) -> Self {
        RedisSpec {
            name: r.name.clone(),
            urls: r.urls.clone(),
            patterns: r.patterns.clone(),
            cluster: false,
            redlock: true,
            spring_lock_registries: Vec::new(),
            watch: r.watch.clone(),
        }
    }
}

impl RedisSpec {
    fn hint(&self, key: &[u8]) -> KeyHint {
        let text = String::from_utf8_lossy(key);
        if let Some(permits) = self.watch.semaphores.get(text.as_ref()) {
            return KeyHint::Semaphore { permits: *permits };
        }
        if self.watch.latches.iter().any(|l| l.as_bytes() == key) {
            return KeyHint::Latch;
        }
        if self
            .watch
            .python_redis_locks
            .iter()
            .any(|p| glob::matches(p.as_bytes(), key))
        {
            return KeyHint::PythonRedisLock;
        }
        if spring_registry(key, &self.spring_lock_registries).is_some() {
            return KeyHint::SpringLockRegistry;
        }
        KeyHint::None
    }

    fn wanted(&self, key: &[u8]) -> bool {
        self.patterns
            .iter()
            .any(|p| glob::matches(p.as_bytes(), key))
    }
}

/// Keyspace-notification classes lockscope needs: keyspace channel, generic, string, list, hash,
/// zset, expired, evicted.
const NEEDED_CLASSES: &str = "Kg$lhzxe";
/// Companion key patterns (FairLock queue and timeouts, FencedLock counter, permit timeouts).
const COMPANION_PATTERNS: [&str; 4] = [
    "redisson_lock_queue:*",
    "redisson_lock_timeout:*",
    "redisson_lock_token:*",
    "*}:timeout",
];
/// More patterns than this are scanned in one unfiltered pass.
const SCAN_PASSES_MAX: usize = 3;
/// Keys read per pipelined round trip.
const READ_BATCH: usize = 500;
/// Locks one read script call reads, off a Cluster.
const READ_GROUP: usize = 50;
/// Dirty keys (changed, not read yet) a member keeps at most; past it, it drops them and
/// catches up with a full scan.
const DIRTY_MAX: usize = 50_000;
/// Notifications taken in one go at most, before the member's other work gets a turn.
const DRAIN_MAX: usize = 20_000;
/// A member that keeps lagging says so in the log at most this often.
const LAG_LOG_EVERY: Duration = Duration::from_secs(60);

/// Reads a key and its companions: type, PTTL and value of each, bounded in size so a huge
/// hash or list cannot stall the server (first 1000 entries; a sorted set's first 1001, lowest
/// scores first, so the decoder can say it was cut) and a huge value is never copied
/// out of it (see [`super::bounded`]: a string, field, member or value over
/// [`bounded::SHOWN_MAX`] bytes comes back as `{head, length, digest}`; a long string is read
/// with `STRLEN` and `GETRANGE` only). One call reads several locks (`INFO commandstats` on a
/// bootstrap of 1M token locks: 10.9 µs per lock with a call each, 9.8 µs with 50 locks a call;
/// the rest is the `redis.call`s, hence as few as a lock allows). Per lock, KEYS holds the lock key,
/// its Redisson companions and, if any, python-redis-lock's signal list, and ARGV the pair
/// (companions, 1 if a signal list follows); the answer has one entry per lock.
static READ_SCRIPT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "{}local ZSET_READ_MAX = {}\n{}",
        *bounded::DIGEST_LUA,
        lockscope_model::redis::ZSET_READ_MAX,
        r#"
local function read(key)
  local t = redis.call('TYPE', key)['ok']
  -- Most companions and signal lists are missing: one call, and a reply of one integer (a
  -- nested table per missing key cost more than the calls; the parser reads 0 as missing).
  if t == 'none' then return 0 end
  local pttl = redis.call('PTTL', key)
  local v = {}
  if t == 'string' then
    -- One byte past what is shown tells a long value apart without a STRLEN first (a token
    -- lock is read with four calls in all: TYPE, PTTL, GETRANGE and its signal list's TYPE).
    local s = redis.call('GETRANGE', key, 0, SHOWN_MAX)
    if #s <= SHOWN_MAX then
      v = {s}
    else
      local n = redis.call('STRLEN', key)
      v = {{string.sub(s, 1, SHOWN_HEAD), n, string_digest(key, n)}}
    end
    return {t, pttl, v}
  elseif t == 'hash' then
    if redis.call('HLEN', key) > 1000 then
      v = redis.call('HSCAN', key, 0, 'COUNT', 1000)[2]
    else
      v = redis.call('HGETALL', key)
    end
  elseif t == 'list' then
    v = redis.call('LRANGE', key, 0, 999)
  elseif t == 'zset' then
    -- One member past what is shown (ZSET_READ_MAX) tells a set cut short.
    v = redis.call('ZRANGE', key, 0, ZSET_READ_MAX, 'WITHSCORES')
  end
  for i = 1, #v do v[i] = short(v[i]) end
  return {t, pttl, v}
end
local absent = 0
-- One lock: its key at KEYS[k], then `companions` Redisson companions, then its signal list if
-- `signal` is 1.
local function lock(k, companions, signal)
  local out = {read(KEYS[k])}
  local main = type(out[1]) == 'table' and out[1][1]
  -- Redisson companions matter only for a hash (Redisson locks), a missing key (a fair queue
  -- left behind) or a number (a permit semaphore): a token lock costs three commands, four
  -- with a python-redis-lock signal list to look at.
  local token = main == 'string' and tonumber(out[1][3][1]) == nil
  for i = 1, companions do
    if token then out[1 + i] = absent else out[1 + i] = read(KEYS[k + i]) end
  end
  if signal == 1 then
    if main == 'string' then out[2 + companions] = read(KEYS[k + 1 + companions]) else out[2 + companions] = absent end
  end
  return out
end
-- ARGV: a pair (companions, signal) per lock, its keys in KEYS in the same order.
local locks = {}
local k = 1
for i = 1, #ARGV, 2 do
  local companions, signal = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  locks[#locks + 1] = lock(k, companions, signal)
  k = k + 1 + companions + signal
end
return locks
"#
    )
});

/// Runs a Redis source until the aggregator goes away.
pub async fn run(spec: Arc<RedisSpec>, out: Outbox<Update>) {
    if !spec.cluster {
        let members = spec.urls.clone();
        if !out
            .send(Update::Members {
                members: members.clone(),
            })
            .await
        {
            return;
        }
        let pyrl_flags = PyrlFlags::new(members.len());
        let tasks: Vec<_> = members
            .into_iter()
            .enumerate()
            .map(|(i, url)| {
                let flags = pyrl_flags.clone();
                tokio::spawn(run_member(i, url, spec.clone(), out.clone(), flags))
            })
            .collect();
        // Aborted with this task when lockscope stops.
        lockscope_core::collect::Tasks::from(tasks).join().await;
        return;
    }
    // Cluster: follow the master set.
    let mut current: Vec<String> = Vec::new();
    // The current members' tasks; replacing it aborts the old ones.
    let mut _members = lockscope_core::collect::Tasks::default();
    let mut ticker =
        tokio::time::interval(spec.watch.reconcile_interval.min(Duration::from_secs(10)));
    loop {
        ticker.tick().await;
        match discover_masters(&spec.urls, &current, &spec.watch).await {
            Ok(masters) if masters != current => {
                tracing::info!(source = %spec.name, masters = ?masters, "cluster masters");
                // The old members' tasks end here (dropping aborts them).
                _members = lockscope_core::collect::Tasks::default();
                current = masters.clone();
                if !out
                    .send(Update::Members {
                        members: masters.clone(),
                    })
                    .await
                {
                    return;
                }
                let pyrl_flags = PyrlFlags::new(masters.len());
                _members = masters
                    .into_iter()
                    .enumerate()
                    .map(|(i, url)| {
                        let flags = pyrl_flags.clone();
                        tokio::spawn(run_member(i, url, spec.clone(), out.clone(), flags))
                    })
                    .collect::<Vec<_>>()
                    .into();
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(source = %spec.name, error = %e, "cluster discovery failed");
                if current.is_empty()
                    && !out
                        .send(Update::Status {
                            member: None,
                            up: false,
                            error: Some(e.to_string()),
                            last_seen_ms: None,
                        })
                        .await
                {
                    return;
                }
            }
        }
        if out.is_closed() {
            return;
        }
    }
}

/// Master URLs from `CLUSTER NODES` on the first seed (configured or known) that answers.
async fn discover_masters(
    seeds: &[String],
    known: &[String],
    watch: &RedisWatchConfig,
) -> Result<Vec<String>, RedisError> {
    let mut errors = Vec::new();
    for seed in seeds.iter().chain(known.iter()) {
        match cluster_nodes(seed, watch).await {
            Ok(masters) if !masters.is_empty() => return Ok(masters),
            Ok(_) => errors.push((redact_url(seed), RedisError::NoMasters)),
            Err(e) => errors.push((redact_url(seed), e)),
        }
    }
    Err(RedisError::Discovery(errors))
}

/// A client for `url`: plain, or TLS trusting the configured CA (else the system store) and
/// presenting the configured client certificate, if any.
pub(crate) fn client_for(url: &str, watch: &RedisWatchConfig) -> Result<redis::Client, RedisError> {
    use redis::IntoConnectionInfo;
    let info = url
        .into_connection_info()
        .map_err(RedisError::Url)?
        .set_tcp_settings(tcp_settings(watch.silence_limit));
    let identity = watch.tls_cert_file.is_some() && watch.tls_key_file.is_some();
    if !url.starts_with("rediss://") || (watch.tls_ca_file.is_none() && !identity) {
        return redis::Client::open(info).map_err(RedisError::Url);
    }
    let read = |path: &std::path::PathBuf| {
        std::fs::read(path).map_err(|source| RedisError::TlsCa {
            path: path.clone(),
            source,
        })
    };
    let root_cert = watch.tls_ca_file.as_ref().map(read).transpose()?;
    let client_tls = match (&watch.tls_cert_file, &watch.tls_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    let certs = redis::TlsCertificates {
        client_tls,
        root_cert,
    };
    redis::Client::build_with_tls(info, certs).map_err(RedisError::Tls)
}

/// Keepalive probes and `TCP_USER_TIMEOUT` at the source's silence limit: the kernel drops a
/// connection whose peer is gone (its own heartbeat is [`heartbeat`]).
fn tcp_settings(limit: Duration) -> redis::io::tcp::TcpSettings {
    let (time, interval) = lockscope_core::collect::keepalive_times(limit);
    let keepalive = redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(time)
        .with_interval(interval);
    redis::io::tcp::TcpSettings::default()
        .set_keepalive(keepalive)
        .set_user_timeout(limit)
}

async fn cluster_nodes(seed: &str, watch: &RedisWatchConfig) -> Result<Vec<String>, RedisError> {
    let client = client_for(seed, watch)?;
    let mut conn = connect(&client, watch).await?;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .map_err(RedisError::command("CLUSTER NODES"))?;
    let info = client.get_connection_info();
    let auth = seed
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .map(|(auth, _)| format!("{auth}@"));
    let mut masters: Vec<String> = text
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.contains("master") || flags.contains("fail") || fields.get(8).is_none() {
                return None;
            }
            // `ip:port@cport[,hostname]`
            let addr = fields.get(1)?.split('@').next()?;
            // Masters are reached the way the seed was: TLS or not.
            let scheme = if seed.starts_with("rediss://") {
                "rediss"
            } else {
                "redis"
            };
            Some(format!(
                "{scheme}://{}{addr}/{}",
                auth.clone().unwrap_or_default(),
                info.redis_settings().db()
            ))
        })
        .collect();
    masters.sort();
    Ok(masters)
}

/// A collector's command connection: connecting within 3 s (or the silence limit), and every
/// answer within the silence limit.
pub(crate) async fn connect(
    client: &redis::Client,
    watch: &RedisWatchConfig,
) -> Result<redis::aio::MultiplexedConnection, RedisError> {
    let limit = watch.silence_limit;
    connect_with(client, Duration::from_secs(3).min(limit), limit).await
}

/// A connection that gives up connecting after `connect` and waiting for any answer after
/// `response`.
pub(crate) async fn connect_with(
    client: &redis::Client,
    connect: Duration,
    response: Duration,
) -> Result<redis::aio::MultiplexedConnection, RedisError> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(response));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(RedisError::connect)
}

/// Which members of a source hold python-redis-lock keys. Its waiters block on the signal
/// list, which on a Cluster lives on another master than the key: while any member has such
/// keys, every member counts its `BLPOP` clients.
#[derive(Clone)]
struct PyrlFlags(Arc<[std::sync::atomic::AtomicBool]>);

impl PyrlFlags {
    fn new(members: usize) -> Self {
        PyrlFlags(
            (0..members)
                .map(|_| std::sync::atomic::AtomicBool::new(false))
                .collect(),
        )
    }

    fn set(&self, member: usize, has: bool) {
        if let Some(flag) = self.0.get(member) {
            flag.store(has, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn any(&self) -> bool {
        self.0
            .iter()
            .any(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }
}

async fn run_member(
    member: usize,
    url: String,
    spec: Arc<RedisSpec>,
    out: Outbox<Update>,
    pyrl_flags: PyrlFlags,
) {
    let mut backoff = lockscope_core::collect::Backoff::new();
    // Outlives the sessions: after a reconnect, the first scan's merge finds what changed
    // while the notifications were lost.
    let mut lives = Lives::default();
    loop {
        backoff.attempt();
        // What each of the session's connections last heard; the heartbeat says when one has
        // been silent too long.
        let heard = Heards::default();
        let (silent_tx, mut silent_rx) = tokio::sync::oneshot::channel();
        let session = member_session(
            member,
            &url,
            &spec,
            &out,
            &pyrl_flags,
            &mut lives,
            (&heard, silent_tx),
        );
        // A silent connection ends the session wherever it waits (a read, a send to a full
        // queue, a scan on the command connection).
        let session = tokio::select! {
            session = session => session,
            Ok(silent) = &mut silent_rx => Err(silent),
        };
        lives.session_ended();
        let reason = match session {
            Ok(()) => return,
            Err(reason) => reason,
        };
        tracing::warn!(source = %spec.name, member = %redact_url(&url), %reason, "Redis member down; retrying");
        out.reconnected();
        let down = Update::Status {
            member: Some(member),
            up: false,
            error: Some(format!("{}: {reason}", redact_url(&url))),
            last_seen_ms: Some(heard.last_ms()),
        };
        if !out.send(down).await {
            return;
        }
        backoff.wait().await;
    }
}

/// Makes sure the server publishes the keyspace events lockscope needs; returns a warning when
/// it does not and lockscope may not change it.
async fn ensure_notifications(
    conn: &mut redis::aio::MultiplexedConnection,
    may_set: bool,
) -> Result<Option<String>, RedisError> {
    let current: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(conn)
        .await
        .map_err(RedisError::command("CONFIG GET notify-keyspace-events"))?;
    let current = current.get(1).cloned().unwrap_or_default();
    let all = current.contains('A');
    let missing: String = NEEDED_CLASSES
        .chars()
        .filter(|c| !(current.contains(*c) || all && "g$lshzxe".contains(*c)))
        .collect();
    if missing.is_empty() {
        return Ok(None);
    }
    if !may_set {
        return Ok(Some(format!(
            "notify-keyspace-events is {current:?} and lacks {missing:?}: changes are found only by reconcile scans (set_notify_config = false)"
        )));
    }
    let wanted = format!("{current}{missing}");
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(&wanted)
        .query_async::<()>(conn)
        .await
        .map_err(RedisError::command(format!(
            "CONFIG SET notify-keyspace-events {wanted}"
        )))?;
    Ok(None)
}

/// The commands the read script runs, with arguments of the right shape (the key first):
/// checked by [`acl_preflight`].
const READ_COMMANDS: &[&str] = &[
    "TYPE",
    "PTTL",
    "GETRANGE 0 1",
    "STRLEN",
    "HLEN",
    "HSCAN 0",
    "HGETALL",
    "LRANGE 0 1",
    "ZRANGE 0 1",
];

/// Asks the server (`redis.acl_check_cmd`, Redis ≥ 7) which of `ARGV[2..]` (a command and its
/// arguments after the key, space-separated) lockscope's user may not run on the key `ARGV[1]`;
/// no KEYS, so it runs on any Cluster master. An older server answers none.
static ACL_PREFLIGHT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r#"
local denied = {}
if not redis.acl_check_cmd then return denied end
for i = 2, #ARGV do
  local args = {}
  for word in string.gmatch(ARGV[i], '%S+') do args[#args + 1] = word end
  table.insert(args, 2, ARGV[1])
  if not redis.acl_check_cmd(unpack(args)) then denied[#denied + 1] = args[1] end
end
return denied
"#,
    )
});

/// Inside a script Redis refuses a command without naming it ("The user executing the script
/// can't run this command"), so before the first read lockscope asks which of the read
/// script's commands its user may not run on a key of the first pattern (the pattern itself,
/// which it matches) and names them.
async fn acl_preflight(
    conn: &mut redis::aio::MultiplexedConnection,
    spec: &RedisSpec,
) -> Result<(), RedisError> {
    let Some(pattern) = spec.patterns.first() else {
        return Ok(());
    };
    let mut invocation = ACL_PREFLIGHT.arg(pattern);
    for command in READ_COMMANDS {
        invocation.arg(*command);
    }
    let denied: Vec<String> =
        invocation
            .invoke_async(conn)
            .await
            .map_err(|source| RedisError::Script {
                script: "ACL check",
                source,
            })?;
    if denied.is_empty() {
        return Ok(());
    }
    Err(RedisError::Denied {
        commands: denied.join(", "),
        key: pattern.clone(),
        needed_by: "the read script",
    })
}

#[derive(Clone)]
struct Reader {
    conn: redis::aio::MultiplexedConnection,
    sha: String,
    spec: Arc<RedisSpec>,
    /// Whether the server answers `PUBSUB SHARDNUMSUB` (Redis ≥ 7).
    sharded: bool,
    /// Numbers the reads in the order they are issued, shared with the reconcile scan's reader
    /// so a scan's read and an event's read of the same key can be ordered.
    issued: Arc<std::sync::atomic::AtomicU64>,
}

impl Reader {
    async fn load(conn: &mut redis::aio::MultiplexedConnection) -> Result<String, RedisError> {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(READ_SCRIPT.as_str())
            .query_async(conn)
            .await
            .map_err(RedisError::command("SCRIPT LOAD"))
    }

    /// Reads `keys` (lock keys, not companions) in pipelined batches.
    async fn read(&mut self, keys: &BTreeSet<Vec<u8>>) -> Result<Vec<KeyReport>, RedisError> {
        let mut out = Vec::with_capacity(keys.len());
        let keys: Vec<&Vec<u8>> = keys.iter().collect();
        for batch in keys.chunks(READ_BATCH) {
            // Taken before the batch is sent: a read numbered after a change was sent after it.
            let read_seq = self
                .issued
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut answers = self.read_batch(batch, false).await?;
            if answers.iter().any(|a| {
                a.as_ref()
                    .is_err_and(|e| e.kind() == server_error(redis::ServerErrorKind::NoScript))
            }) {
                // The server restarted or flushed its scripts.
                self.sha = Self::load(&mut self.conn).await?;
                answers = self.read_batch(batch, false).await?;
            }
            let mut values = Vec::with_capacity(batch.len());
            let mut seqs = Vec::with_capacity(batch.len());
            for (key, answer) in batch.iter().zip(answers) {
                let (value, seq) = match answer {
                    Ok(value) => (value, None),
                    Err(e) => self.read_migrating(key, e).await?,
                };
                values.push(value);
                seqs.push(seq.unwrap_or(read_seq));
            }
            let now = lockscope_core::now_ms();
            let mut numsub_keys = Vec::new();
            for ((&key, value), read_seq) in batch.iter().zip(values).zip(seqs) {
                let mut truncated = Vec::new();
                let reads = parse_reads(&value, &mut truncated);
                let main = reads.first().cloned().unwrap_or_else(KeyRead::missing);
                let companions = Companions {
                    fair_queue: reads.get(1).cloned(),
                    fair_timeouts: reads.get(2).cloned(),
                    fencing_counter: reads.get(3).cloned(),
                    permit_timeouts: reads.get(4).cloned(),
                    signal_list: reads.get(5).cloned(),
                };
                let lock = decode(key, &main, &companions, self.spec.hint(key), now);
                // Only Redisson's waiters wait on a channel; token locks have none to count.
                if let Some(lock) = &lock {
                    let channels = waiter_channels(key, lock.recipe);
                    if !channels.is_empty() {
                        numsub_keys.push((out.len(), channels));
                    }
                }
                let unrecognised = match &lock {
                    None => lockscope_model::redis::unrecognised(key, &main).map(Box::new),
                    Some(_) => None,
                };
                out.push(KeyReport {
                    key: (*key).clone(),
                    unrecognised,
                    lock,
                    watchers: 0,
                    at_ms: now,
                    pttl_ms: main.pttl_ms,
                    read_seq,
                    truncated,
                });
            }
            // Waiters on Redisson locks are not in Redis: count the connections subscribed to
            // the lock's unlock channels.
            if !numsub_keys.is_empty() {
                let counts = self.subscribers(&numsub_keys).await?;
                for ((i, _), n) in numsub_keys.iter().zip(counts) {
                    out[*i].watchers = n;
                }
            }
        }
        Ok(out)
    }

    /// Connections subscribed to each lock's waiter channels: `PUBSUB NUMSUB`, plus on a Cluster
    /// `PUBSUB SHARDNUMSUB` (Redisson ≥ 3.22 subscribes sharded there, a separate namespace).
    /// A server without sharded pub/sub (Redis < 7) is asked only once.
    async fn subscribers(
        &mut self,
        locks: &[(usize, Vec<Vec<u8>>)],
    ) -> Result<Vec<u32>, RedisError> {
        let ask = |sub: &str| {
            let mut pipe = redis::pipe();
            for (_, channels) in locks {
                let cmd = pipe.cmd("PUBSUB").arg(sub);
                for channel in channels {
                    cmd.arg(channel.as_slice());
                }
            }
            pipe
        };
        let sum = |reply: &Vec<redis::Value>| -> u32 {
            let total: i64 = reply
                .chunks(2)
                .filter_map(|pair| pair.get(1))
                .filter_map(|v| redis::from_redis_value::<i64>(v.clone()).ok())
                .sum();
            total.clamp(0, i64::from(u32::MAX)) as u32
        };
        let plain: Vec<Vec<redis::Value>> = ask("NUMSUB")
            .query_async(&mut self.conn)
            .await
            .map_err(RedisError::command("PUBSUB NUMSUB"))?;
        let mut counts: Vec<u32> = plain.iter().map(sum).collect();
        if self.spec.cluster && self.sharded {
            match ask("SHARDNUMSUB")
                .query_async::<Vec<Vec<redis::Value>>>(&mut self.conn)
                .await
            {
                Ok(sharded) => {
                    for (count, reply) in counts.iter_mut().zip(&sharded) {
                        *count = count.saturating_add(sum(reply));
                    }
                }
                Err(e) => {
                    tracing::info!(source = %self.spec.name, error = %e, "no sharded pub/sub here; counting plain subscribers only");
                    self.sharded = false;
                }
            }
        }
        Ok(counts)
    }

    /// Settles a key whose read the server refused while its Cluster slot migrates (found by
    /// `source_faults::cluster_slot_migration_with_locks_converges`: without this, one refused
    /// key failed the member's whole batch, the member reconnected and failed again for as long
    /// as the migration lasted, and every lock on both masters went stale). Answers the read
    /// and, when it was read again, that read's number.
    /// * `ASK`: the source of a migration lacks every key of the call, so the lock key is not
    ///   on this member (any more): it reads as missing here; the target reports it.
    /// * `TRYAGAIN`: a multi-key call (the key and its companions) while the slot migrates and
    ///   only some of those keys are here. The key is read again alone: while its slot migrates
    ///   a lock is decoded without its Redisson companions (fair queue, counters).
    /// * Anything else fails the batch, as before.
    async fn read_migrating(
        &mut self,
        key: &[u8],
        error: redis::RedisError,
    ) -> Result<(redis::Value, Option<u64>), RedisError> {
        let ask = server_error(redis::ServerErrorKind::Ask);
        if error.kind() == ask {
            return Ok((redis::Value::Nil, None));
        }
        if error.kind() != server_error(redis::ServerErrorKind::TryAgain) {
            return Err(RedisError::Script {
                script: "read",
                source: error,
            });
        }
        let seq = self
            .issued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = key.to_vec();
        match self.read_batch(&[&key], true).await?.pop() {
            Some(Ok(value)) => Ok((value, Some(seq))),
            Some(Err(e)) if e.kind() == ask => Ok((redis::Value::Nil, Some(seq))),
            Some(Err(source)) => Err(RedisError::Script {
                script: "read",
                source,
            }),
            None => Err(RedisError::NoAnswer),
        }
    }

    /// Reads `batch` in one pipeline: one answer per key, a server error staying with its key.
    /// `alone`: without companions or signal list (see [`Self::read_migrating`]). Off a
    /// Cluster one script call reads [`READ_GROUP`] locks; a call that fails is sent again one
    /// lock per call, so an error stays with its key.
    async fn read_batch(
        &mut self,
        batch: &[&Vec<u8>],
        alone: bool,
    ) -> Result<Vec<redis::RedisResult<redis::Value>>, RedisError> {
        // On a Cluster a script may only touch its own slot: one lock per call there.
        let group = if self.spec.cluster { 1 } else { READ_GROUP };
        // A call's answer holds one entry per lock it read; an error or an odd answer of a
        // call that read one lock stays with that lock.
        let alone_answer = |answer: redis::RedisResult<redis::Value>| match answer {
            Ok(redis::Value::Array(mut items)) if items.len() == 1 => Ok(items.remove(0)),
            other => other,
        };
        let answers = self.send_reads(batch, alone, group).await?;
        let mut out = Vec::with_capacity(batch.len());
        for (locks, answer) in batch.chunks(group).zip(answers) {
            match answer {
                Ok(redis::Value::Array(items)) if items.len() == locks.len() => {
                    out.extend(items.into_iter().map(Ok));
                }
                answer if locks.len() == 1 => out.push(answer),
                _ => {
                    let answers = self.send_reads(locks, alone, 1).await?;
                    out.extend(answers.into_iter().map(alone_answer));
                }
            }
        }
        Ok(out)
    }

    /// Sends one pipeline of read script calls over `batch`, `group` locks per call, and
    /// answers one result per call (with `group` 1, per lock: that lock's reads).
    async fn send_reads(
        &mut self,
        batch: &[&Vec<u8>],
        alone: bool,
        group: usize,
    ) -> Result<Vec<redis::RedisResult<redis::Value>>, RedisError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for locks in batch.chunks(group) {
            // On a Cluster, the target of a slot migration answers for the keys it imports only
            // when asked so (elsewhere `ASKING` changes nothing): without it, it would send its
            // reader back to the source (MOVED), which no longer has them.
            if self.spec.cluster {
                pipe.cmd("ASKING").ignore();
            }
            let mut keys: Vec<Vec<u8>> = Vec::with_capacity(locks.len() * 6);
            let mut argv: Vec<usize> = Vec::with_capacity(locks.len() * 2);
            for key in locks {
                // On a Cluster a script may only touch its own slot: Redisson's companions share
                // the key's slot unless the name has a brace that is not a hash tag, and
                // python-redis-lock's signal list never does.
                let companions: Vec<Vec<u8>> =
                    if alone || self.spec.cluster && !companions_share_slot(key) {
                        Vec::new()
                    } else {
                        companion_keys(key).into()
                    };
                let signal = signal_list_key(key).filter(|_| !alone && !self.spec.cluster);
                argv.push(companions.len());
                argv.push(usize::from(signal.is_some()));
                keys.push((*key).clone());
                keys.extend(companions);
                keys.extend(signal);
            }
            let cmd = pipe.cmd("EVALSHA").arg(&self.sha).arg(keys.len());
            for k in &keys {
                cmd.arg(k.as_slice());
            }
            for a in argv {
                cmd.arg(a);
            }
        }
        pipe.query_async(&mut self.conn)
            .await
            .map_err(|source| RedisError::Script {
                script: "read",
                source,
            })
    }
}

fn server_error(kind: redis::ServerErrorKind) -> redis::ErrorKind {
    redis::ErrorKind::Server(kind)
}

fn value_bytes(value: &redis::Value) -> Option<Vec<u8>> {
    match value {
        redis::Value::BulkString(bytes) => Some(bytes.clone()),
        redis::Value::SimpleString(s) => Some(s.as_bytes().to_vec()),
        redis::Value::Okay => Some(b"OK".to_vec()),
        redis::Value::Int(i) => Some(i.to_string().into_bytes()),
        _ => None,
    }
}

/// One element of a read: bytes, or a long one as `[head, length, digest]` (see
/// [`super::bounded`]), which becomes its truncated id and is noted in `truncated` (id as shown,
/// version).
fn element(value: &redis::Value, truncated: &mut Vec<(String, String)>) -> Option<Vec<u8>> {
    let redis::Value::Array(parts) = value else {
        return value_bytes(value);
    };
    let (Some(head), Some(redis::Value::Int(len)), Some(digest)) = (
        parts.first().and_then(value_bytes),
        parts.get(1),
        parts.get(2).and_then(value_bytes),
    ) else {
        return None;
    };
    let len = u64::try_from(*len).unwrap_or_default();
    let digest = String::from_utf8_lossy(&digest).into_owned();
    let id = bounded::truncated_id(&head, len, &digest);
    truncated.push((display_bytes(&id), bounded::truncated_version(len, &digest)));
    Some(id)
}

/// Parses the read script's answer for one lock: `[[type, pttl, values] or 0, …]` (0: a
/// missing key). Values too long to copy come back truncated and are listed in `truncated`. PTTL is clamped
/// ([`clamp_pttl`]): `PEXPIREAT 9223372036854775807` is a valid expiry.
fn parse_reads(value: &redis::Value, truncated: &mut Vec<(String, String)>) -> Vec<KeyRead> {
    let redis::Value::Array(items) = value else {
        return Vec::new();
    };
    items
        .iter()
        .map(|item| {
            let redis::Value::Array(parts) = item else {
                return KeyRead::missing();
            };
            let kind = parts.first().and_then(value_bytes).unwrap_or_default();
            let pttl = match parts.get(1) {
                Some(redis::Value::Int(i)) => clamp_pttl(*i),
                _ => -2,
            };
            let values: Vec<Vec<u8>> = match parts.get(2) {
                Some(redis::Value::Array(vs)) => {
                    vs.iter().filter_map(|v| element(v, truncated)).collect()
                }
                _ => Vec::new(),
            };
            let pairs = || {
                values
                    .chunks(2)
                    .filter(|c| c.len() == 2)
                    .map(|c| (c[0].clone(), c[1].clone()))
            };
            let value = match kind.as_slice() {
                b"none" => RedisValue::Missing,
                b"string" => RedisValue::String(values.first().cloned().unwrap_or_default()),
                b"hash" => RedisValue::Hash(pairs().collect()),
                b"list" => RedisValue::List(values.clone()),
                b"zset" => RedisValue::ZSet(
                    pairs()
                        .map(|(m, s)| {
                            (m, String::from_utf8_lossy(&s).parse::<f64>().unwrap_or(0.0))
                        })
                        .collect(),
                ),
                other => RedisValue::Other(String::from_utf8_lossy(other).into_owned()),
            };
            KeyRead {
                value,
                pttl_ms: pttl,
            }
        })
        .collect()
}

/// The SCAN passes of a full scan: one per pattern (the server filters), or with many patterns
/// one unfiltered pass matched here, which walks the keyspace once instead of once per
/// pattern.
fn scan_passes(spec: &RedisSpec) -> Vec<Option<String>> {
    let patterns: Vec<&str> = spec
        .patterns
        .iter()
        .map(String::as_str)
        .chain(COMPANION_PATTERNS)
        .collect();
    if patterns.len() > SCAN_PASSES_MAX {
        vec![None]
    } else {
        patterns.iter().map(|p| Some(p.to_string())).collect()
    }
}

/// One SCAN page: the next cursor and the keys.
async fn scan_page(
    conn: &mut redis::aio::MultiplexedConnection,
    cursor: u64,
    pattern: Option<&str>,
) -> Result<(u64, Vec<Vec<u8>>), RedisError> {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor);
    if let Some(pattern) = pattern {
        cmd.arg("MATCH").arg(pattern);
    }
    cmd.arg("COUNT")
        .arg(1000)
        .query_async(conn)
        .await
        .map_err(RedisError::command("SCAN"))
}

/// The lock keys among `keys` (a SCAN page) into `locks`: keys matching the patterns, and the
/// lock keys of companions (a FairLock queue that outlived its lock); names too long to read
/// are counted in `long`.
fn lock_keys(
    spec: &RedisSpec,
    keys: Vec<Vec<u8>>,
    locks: &mut BTreeSet<Vec<u8>>,
    long: &mut LongKeys,
) {
    for key in keys {
        let of = locks_of_companion(&key);
        if of.is_empty() {
            if spec.wanted(&key) {
                if key.len() > bounded::KEY_NAME_MAX {
                    long.note(&key);
                } else {
                    locks.insert(key);
                }
            }
            continue;
        }
        for lock in of.into_iter().filter(|lock| spec.wanted(lock)) {
            if lock.len() > bounded::KEY_NAME_MAX {
                long.note(&lock);
            } else {
                locks.insert(lock);
            }
        }
    }
}

/// Read batches a full scan keeps out at once (each up to [`READ_BATCH`] keys) while it asks
/// for the next SCAN page: the server always has work, and what waits stays bounded.
const SCAN_READS_IN_FLIGHT: usize = 4;

/// Every lock key on the member, read. SCAN pages come one after another; each page's lock
/// keys are read in pipelined batches that run while the next page is asked for, at most
/// [`SCAN_READS_IN_FLIGHT`] batches out (SCAN waits for one to finish beyond that), so the
/// scan holds no more than a few batches of keys besides the reads it returns. A key SCAN
/// returns twice (it may, and a lock is found again through its companions) is read twice;
/// the later read is kept. With `progress`, the member's first scan: the keys scanned and read
/// are counted on the source (`lockscope_source_bootstrap_keys_*`).
///
/// (Sending the reads to the aggregator in parts as they come was tried: with the aggregator
/// publishing each part as a new version of its shared lock map, ten parts of 10k locks cost
/// 1.3 s more CPU than one update of 100k and the source was ready later.)
async fn scan_and_read(
    mut conn: redis::aio::MultiplexedConnection,
    reader: Reader,
    spec: Arc<RedisSpec>,
    (heard, progress): (lockscope_core::collect::Heard, Option<Outbox<Update>>),
) -> Result<(Vec<KeyReport>, LongKeys), RedisError> {
    let mut long = LongKeys::default();
    let mut batch: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut reads = futures::stream::FuturesUnordered::new();
    let mut out: Vec<KeyReport> = Vec::new();
    // Every answer is the server heard on the command connection: a heartbeat's `PING` queued
    // behind a long scan's reads is late, and the server is not silent.
    let done = |(_, result): (Reader, Result<Vec<KeyReport>, RedisError>),
                out: &mut Vec<KeyReport>|
     -> Result<(), RedisError> {
        let reports = result?;
        heard.now();
        if let Some(progress) = &progress {
            progress.bootstrap_read(reports.len() as u64);
        }
        out.extend(reports);
        Ok(())
    };
    for pattern in scan_passes(&spec) {
        let mut cursor: u64 = 0;
        loop {
            let page = scan_page(&mut conn, cursor, pattern.as_deref());
            tokio::pin!(page);
            let (next, keys) = loop {
                tokio::select! {
                    page = &mut page => break page?,
                    Some(read) = reads.next(), if !reads.is_empty() => done(read, &mut out)?,
                }
            };
            heard.now();
            if let Some(progress) = &progress {
                progress.bootstrap_scanned(keys.len() as u64);
            }
            lock_keys(&spec, keys, &mut batch, &mut long);
            while batch.len() >= READ_BATCH {
                let rest = match batch.iter().nth(READ_BATCH).cloned() {
                    Some(first_of_rest) => batch.split_off(&first_of_rest),
                    None => BTreeSet::new(),
                };
                let full = std::mem::replace(&mut batch, rest);
                while reads.len() >= SCAN_READS_IN_FLIGHT {
                    if let Some(read) = reads.next().await {
                        done(read, &mut out)?;
                    }
                }
                reads.push(read_owned(reader.clone(), full));
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
    }
    if !batch.is_empty() {
        reads.push(read_owned(reader.clone(), batch));
    }
    while let Some(read) = reads.next().await {
        done(read, &mut out)?;
    }
    // Read twice: the later read (issued later on the same connection) saw the later state.
    let sort = |mut out: Vec<KeyReport>| {
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.read_seq.cmp(&b.read_seq)));
        out.dedup_by(|later, earlier| {
            if later.key == earlier.key {
                std::mem::swap(later, earlier);
                true
            } else {
                false
            }
        });
        out
    };
    let out = if out.len() >= lockscope_core::collect::BIG_WORK {
        lockscope_core::collect::off_the_worker(|| sort(out))
    } else {
        sort(out)
    };
    Ok((out, long))
}

/// How many distinct keys at most [`LongKeys`] tells apart (beyond, it counts no more).
const LONG_KEYS_TRACKED: usize = 10_000;

/// Watched keys whose names are longer than [`bounded::KEY_NAME_MAX`]: skipped, never read as
/// locks, counted (by a hash of each name, so a key changed many times counts once) and shown
/// on the source with the start of one.
#[derive(Debug, Default, Clone)]
struct LongKeys {
    seen: HashSet<u64>,
    example: Option<(String, usize)>,
}

impl LongKeys {
    fn note(&mut self, key: &[u8]) {
        use std::hash::{Hash, Hasher};
        if self.seen.len() < LONG_KEYS_TRACKED {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            key.hash(&mut hasher);
            self.seen.insert(hasher.finish());
        }
        if self.example.is_none() {
            let head = &key[..key.len().min(bounded::SHOWN_HEAD)];
            self.example = Some((display_bytes(head), key.len()));
        }
    }

    fn count(&self) -> u64 {
        self.seen.len() as u64
    }

    /// The update that tells the aggregator.
    fn update(&self, member: usize) -> Update {
        Update::LongKeys {
            member,
            skipped: self.count(),
            example: self
                .example
                .as_ref()
                .map(|(head, len)| format!("{head}… ({len} bytes)")),
        }
    }
}

fn channel_key(channel: &[u8]) -> Option<&[u8]> {
    // `__keyspace@<db>__:<key>`
    let rest = channel.strip_prefix(b"__keyspace@")?;
    let colon = rest.windows(3).position(|w| w == b"__:")?;
    Some(&rest[colon + 3..])
}

/// What a member's two connections last heard (epoch ms).
#[derive(Default)]
struct Heards {
    command: lockscope_core::collect::Heard,
    notifications: lockscope_core::collect::Heard,
}

impl Heards {
    /// When the member was last known to be as shown: the older of the two.
    fn last_ms(&self) -> i64 {
        self.command.at_ms().min(self.notifications.at_ms())
    }
}

/// Pings both of a member's connections every quarter of `limit`, each ping due within
/// `limit` of the last thing heard on its connection (an answer, a notification): answers
/// which connection went silent. Keyspace notifications only come when keys change, and
/// commands only when something needs reading, so without this a path that drops packets
/// without a reset leaves the member looking up for as long as the kernel keeps retrying.
async fn heartbeat(
    mut conn: redis::aio::MultiplexedConnection,
    mut sink: redis::aio::PubSubSink,
    heard: (
        lockscope_core::collect::Heard,
        lockscope_core::collect::Heard,
    ),
    limit: Duration,
) -> RedisError {
    let (command, notifications) = heard;
    let every = limit / 4;
    let silent = |connection| RedisError::Silent { connection, limit };
    loop {
        tokio::time::sleep(every).await;
        let ping_command = async {
            let answer = lockscope_core::collect::within_silence(
                &command,
                limit,
                redis::cmd("PING").query_async::<redis::Value>(&mut conn),
            )
            .await;
            match answer {
                None => Err(silent("command")),
                Some(Err(e)) => Err(RedisError::command("PING")(e)),
                Some(Ok(_)) => Ok(()),
            }
        };
        let ping_notifications = async {
            let answer = lockscope_core::collect::within_silence(
                &notifications,
                limit,
                sink.ping::<redis::Value>(),
            )
            .await;
            match answer {
                None => Err(silent("notification")),
                Some(Err(e)) => Err(RedisError::PubSub(e)),
                Some(Ok(_)) => Ok(()),
            }
        };
        if let Err(e) = tokio::try_join!(ping_command, ping_notifications) {
            return e;
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn member_session(
    member: usize,
    url: &str,
    spec: &Arc<RedisSpec>,
    out: &Outbox<Update>,
    pyrl_flags: &PyrlFlags,
    lives: &mut Lives,
    (heard, silent): (&Heards, tokio::sync::oneshot::Sender<RedisError>),
) -> Result<(), RedisError> {
    let limit = spec.watch.silence_limit;
    let client = client_for(url, &spec.watch)?;
    let mut conn = connect(&client, &spec.watch).await?;
    heard.command.now();
    let warning = ensure_notifications(&mut conn, spec.watch.set_notify_config).await?;
    let db = client.get_connection_info().redis_settings().db();
    // Subscribe before the scan so no change between the two is lost.
    let mut pubsub = tokio::time::timeout(limit, client.get_async_pubsub())
        .await
        .map_err(|_| RedisError::Silent {
            connection: "notification",
            limit,
        })?
        .map_err(RedisError::PubSub)?;
    heard.notifications.now();
    for pattern in spec
        .patterns
        .iter()
        .map(String::as_str)
        .chain(COMPANION_PATTERNS)
    {
        let channel = format!("__keyspace@{db}__:{pattern}");
        tokio::time::timeout(limit, pubsub.psubscribe(&channel))
            .await
            .map_err(|_| RedisError::Silent {
                connection: "notification",
                limit,
            })?
            // Redis's NOPERM does not say which channel: the command's name does.
            .map_err(RedisError::command(format!("PSUBSCRIBE {channel}")))?;
    }
    let (sink, stream) = pubsub.split();
    let (mut messages, _stamping) = stamped(stream, heard.notifications.clone());
    // Ends with the session (the guard aborts it); tells `run_member` when a connection has
    // gone silent.
    let _heartbeat = lockscope_core::collect::Tasks::from(vec![tokio::spawn({
        let beat = heartbeat(
            conn.clone(),
            sink,
            (heard.command.clone(), heard.notifications.clone()),
            limit,
        );
        async move {
            let _ = silent.send(beat.await);
        }
    })]);
    let sha = Reader::load(&mut conn).await?;
    acl_preflight(&mut conn, spec).await?;
    let mut reader = Reader {
        conn: conn.clone(),
        sha,
        spec: spec.clone(),
        sharded: true,
        issued: Arc::default(),
    };

    // The session's first full scan runs beside the loop below like every other scan, so the
    // notifications that arrive meanwhile are counted as they come (and do not pile up unread
    // on a big keyspace). Reads of changed keys wait until it is in: the member's first
    // `Keys` is that scan, and the member is up once it is sent (`warning` is taken then).
    let mut warning = Some(warning);
    lives.scan_started();
    let progress = (!lives.synced()).then(|| out.clone());
    let mut scan: Option<ScanTask> =
        Some(start_scan(&conn, &reader, spec, (&heard.command, progress)));
    // python-redis-lock keys on this member: while there are any, the clients blocked in BLPOP
    // (its waiters, which Redis does not attribute to a key) are counted every second.
    let mut pyrl: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut blocked_tick = tokio::time::interval(BLOCKED_POLL);
    blocked_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_blocked: Option<u32> = None;
    let mut reconcile = tokio::time::interval(spec.watch.reconcile_interval);
    reconcile.tick().await;
    // A reconcile scan runs beside the loop (on a big keyspace it takes seconds, and deadline
    // reads must not wait for it). Reads made while it runs are newer than its own and win.
    let mut since_scan: HashMap<Vec<u8>, KeyReport> = HashMap::new();
    // Notifications only mark keys dirty (and count acquisitions and releases in `lives`);
    // every turn takes all that have arrived. One batch of reads is in flight at a time (due
    // deadlines first, then dirty keys oldest first), and notifications keep being taken while
    // it is.
    let mut intake = Intake::new(DIRTY_MAX);
    // What the aggregator was told of the keys skipped for their names' length.
    let mut long_told = 0;
    let mut due: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut reading: Option<PendingRead> = None;
    // What the aggregator was told: the intake overflowed and no scan since has caught up.
    let mut lagging = false;
    // Under a sustained overload the member lags and catches up over and over: logged at most
    // once a minute.
    let mut last_lag_logged: Option<tokio::time::Instant> = None;
    let mut lag_logged = false;
    loop {
        let drained = drain(&mut messages, spec, &mut intake, lives)?;
        for _ in 0..std::mem::take(&mut intake.drops) {
            out.overflowed();
        }
        // Counted as soon as they are known, whatever the reads are doing (an overflowed
        // intake drops reads, never these).
        if lives.has_pending() {
            let update = Update::Changes {
                member,
                changes: lives.take(),
            };
            if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                return Ok(());
            }
        }
        if intake.long_keys.count() != long_told {
            long_told = intake.long_keys.count();
            let update = intake.long_keys.update(member);
            if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                return Ok(());
            }
        }
        if intake.overflowed && !lagging {
            lag_logged = last_lag_logged.is_none_or(|at| at.elapsed() >= LAG_LOG_EVERY);
            if lag_logged {
                last_lag_logged = Some(tokio::time::Instant::now());
                tracing::warn!(source = %spec.name, member = %redact_url(url), dirty_max = DIRTY_MAX, "changes arrive faster than they are read: backlog dropped, catching up with a full scan");
            }
            lagging = true;
            let update = Update::Lagging { member, lagging };
            if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                return Ok(());
            }
        }
        // The backlog is dropped and every notification that had arrived is taken: a full
        // scan catches up (keys changed after its SCAN passed them are noted again from now).
        if intake.overflowed && drained && scan.is_none() {
            since_scan.clear();
            lives.scan_started();
            scan = Some(start_scan(&conn, &reader, spec, (&heard.command, None)));
            intake.resume();
        }
        // A finished scan is merged while no read is in flight: a read issued before the
        // scan's own and answered after the merge would put an older state back.
        let scan_done = scan.as_ref().is_some_and(|task| task.is_finished());
        if reading.is_none() && !scan_done && warning.is_none() {
            let mut keys = std::mem::take(&mut due);
            intake.take(READ_BATCH, &mut keys);
            if !keys.is_empty() {
                reading = Some(Box::pin(read_owned(reader.clone(), keys)));
            }
        }
        let next_deadline = lives.next_deadline();
        let wait = async {
            match next_deadline {
                Some(at) => {
                    let wait = at.saturating_sub(lockscope_core::now_ms()).max(0);
                    tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await
                }
                None => std::future::pending().await,
            }
        };
        let scanning = scan.is_some();
        let scanned = async {
            match scan.as_mut() {
                Some(task) => task.await,
                None => std::future::pending().await,
            }
        };
        let read_idle = reading.is_none();
        let read = async {
            match reading.as_mut() {
                Some(read) => read.await,
                None => std::future::pending().await,
            }
        };
        let reports = tokio::select! {
            // Ticks always (another member's keys may need this one's count); asks only while
            // python-redis-lock keys exist on the source.
            _ = blocked_tick.tick() => {
                if pyrl.is_empty() && !pyrl_flags.any() {
                    continue;
                }
                let blocked = blocked_clients(&mut conn).await?;
                if last_blocked != Some(blocked) {
                    last_blocked = Some(blocked);
                    let update = Update::Blocked { member, clients: blocked };
                    if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                        return Ok(());
                    }
                }
                continue;
            }
            message = messages.next() => {
                let Some(message) = message else {
                    return Err(RedisError::PubSubLost);
                };
                note(spec, message, &mut intake, lives);
                continue;
            }
            (read_by, result) = read => {
                reading = None;
                // The reader may have reloaded the script or learnt the server's pub/sub.
                reader = read_by;
                let reports = result?;
                heard.command.now();
                for r in &reports {
                    tracing::trace!(key = %String::from_utf8_lossy(&r.key), found = r.lock.is_some(), holders = ?r.lock.as_ref().map(|l| l.holders.iter().map(|h| h.id.clone()).collect::<Vec<_>>()), "event read");
                }
                lives.read(&reports);
                reports
            }
            _ = wait => {
                // Reading an expired key makes Redis expire it now, whatever its sampling does.
                due.extend(lives.due(lockscope_core::now_ms()));
                continue;
            }
            _ = reconcile.tick(), if !scanning => {
                since_scan.clear();
                lives.scan_started();
                scan = Some(start_scan(&conn, &reader, spec, (&heard.command, None)));
                // The scan reads every key: whatever backlog was dropped, it catches up.
                intake.resume();
                continue;
            }
            result = scanned, if read_idle => {
                scan = None;
                let (mut reports, long) = result.map_err(RedisError::ScanTask)??;
                heard.command.now();
                // The scan saw every key: its count replaces what notifications noted.
                intake.long_keys = long;
                // (Indexed only when there is something to merge: a first scan of a million
                // keys would copy every key for nothing.)
                let mut at: HashMap<Vec<u8>, usize> = if since_scan.is_empty() {
                    HashMap::new()
                } else {
                    reports.iter().enumerate().map(|(i, r)| (r.key.clone(), i)).collect()
                };
                for (key, newer) in since_scan.drain() {
                    match at.get(&key) {
                        // A read issued after the scan's read of the key saw a later state; one
                        // issued before it is older than the scan's (a change between the two
                        // has its own notification and read, issued later still).
                        Some(&i) if reports[i].read_seq < newer.read_seq => reports[i] = newer,
                        Some(_) => {}
                        None => {
                            at.insert(key, reports.len());
                            reports.push(newer);
                        }
                    }
                }
                drop(at);
                // Every notification that has arrived first: the scan corrects only what they
                // did not tell (after a loss), and finds what was held before the first.
                drain(&mut messages, spec, &mut intake, lives)?;
                let mut merge = || {
                    lives.scan_merged(&reports, now_us());
                    schedule(lives, &reports);
                    track_pyrl(&mut pyrl, &reports, true);
                };
                // Seconds for a million keys: the connections' drivers and the heartbeat
                // queued on this worker move to another meanwhile.
                if reports.len() >= lockscope_core::collect::BIG_WORK {
                    lockscope_core::collect::off_the_worker(merge);
                } else {
                    merge();
                }
                pyrl_flags.set(member, !pyrl.is_empty());
                let update = Update::Keys { member, full: true, reports };
                if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                    return Ok(());
                }
                if let Some(error) = warning.take() {
                    let update = Update::Status { member: Some(member), up: true, error, last_seen_ms: None };
                    if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                        return Ok(());
                    }
                }
                // Started after the last overflow (an overflow leaves the intake overflowed
                // until a scan starts): the model has caught up with the server.
                if lagging && !intake.overflowed {
                    if lag_logged {
                        tracing::info!(source = %spec.name, member = %redact_url(url), "caught up");
                    }
                    lagging = false;
                    let update = Update::Lagging { member, lagging };
                    if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
                        return Ok(());
                    }
                }
                continue;
            }
        };
        if scan.is_some() {
            for report in &reports {
                since_scan.insert(report.key.clone(), report.clone());
            }
        }
        schedule(lives, &reports);
        track_pyrl(&mut pyrl, &reports, false);
        pyrl_flags.set(member, !pyrl.is_empty());
        let update = Update::Keys {
            member,
            full: false,
            reports,
        };
        if !send_draining(out, update, &mut messages, spec, &mut intake, lives).await? {
            return Ok(());
        }
    }
}

/// A batch of reads in flight, with the reader that makes it (given back with the answer).
type PendingRead =
    Pin<Box<dyn Future<Output = (Reader, Result<Vec<KeyReport>, RedisError>)> + Send>>;

async fn read_owned(
    mut reader: Reader,
    keys: BTreeSet<Vec<u8>>,
) -> (Reader, Result<Vec<KeyReport>, RedisError>) {
    let result = reader.read(&keys).await;
    (reader, result)
}

/// Starts a full scan of the member beside the session's loop: every lock key, read (see
/// [`scan_and_read`]); with `progress`, counted as the source's bootstrap.
fn start_scan(
    conn: &redis::aio::MultiplexedConnection,
    reader: &Reader,
    spec: &Arc<RedisSpec>,
    (heard, progress): (&lockscope_core::collect::Heard, Option<Outbox<Update>>),
) -> ScanTask {
    tokio::spawn(scan_and_read(
        conn.clone(),
        reader.clone(),
        spec.clone(),
        (heard.clone(), progress),
    ))
}

/// A full scan running beside the member's loop: every lock key's read, and the keys skipped
/// for their names' length.
type ScanTask = tokio::task::JoinHandle<Result<(Vec<KeyReport>, LongKeys), RedisError>>;

/// Lock keys changed and not read since, each once, in the order they first changed; at most
/// `max`. One more drops them all and marks the intake `overflowed`: a full scan must catch up,
/// and until one starts ([`Intake::resume`]) notifications are ignored (the scan reads every
/// key anyway).
struct Intake {
    max: usize,
    order: VecDeque<Vec<u8>>,
    keys: HashSet<Vec<u8>>,
    overflowed: bool,
    /// Backlogs dropped and not yet counted in the source's stats.
    drops: u64,
    /// Watched keys skipped for their names' length (since the last full scan, which counts
    /// them all again).
    long_keys: LongKeys,
}

impl Intake {
    fn new(max: usize) -> Self {
        Intake {
            max,
            order: VecDeque::new(),
            keys: HashSet::new(),
            overflowed: false,
            drops: 0,
            long_keys: LongKeys::default(),
        }
    }

    fn add(&mut self, key: Vec<u8>) {
        if self.overflowed || self.keys.contains(&key) {
            return;
        }
        if self.keys.len() >= self.max {
            // Dropped, not cleared: the backlog's memory goes back now.
            self.order = VecDeque::new();
            self.keys = HashSet::new();
            self.overflowed = true;
            self.drops += 1;
            return;
        }
        self.keys.insert(key.clone());
        self.order.push_back(key);
    }

    /// A full scan started: it reads every key, so noting changes resumes.
    fn resume(&mut self) {
        self.overflowed = false;
    }

    /// Moves the oldest dirty keys into `batch` until it holds `n` keys (or none is left).
    fn take(&mut self, n: usize, batch: &mut BTreeSet<Vec<u8>>) {
        while batch.len() < n {
            let Some(key) = self.order.pop_front() else {
                break;
            };
            self.keys.remove(&key);
            batch.insert(key);
        }
    }
}

impl Extend<Vec<u8>> for Intake {
    fn extend<I: IntoIterator<Item = Vec<u8>>>(&mut self, keys: I) {
        for key in keys {
            self.add(key);
        }
    }
}

/// Takes the notifications that have arrived (at most [`DRAIN_MAX`]) into `intake`; `true` when
/// none is left waiting.
fn drain<S>(
    messages: &mut S,
    spec: &RedisSpec,
    intake: &mut Intake,
    lives: &mut Lives,
) -> Result<bool, RedisError>
where
    S: futures::Stream<Item = Stamped> + Unpin,
{
    for _ in 0..DRAIN_MAX {
        // Unconstrained: tokio's cooperative budget would make the channel look empty after a
        // hundred or so messages in one turn of the task.
        match tokio::task::unconstrained(messages.next()).now_or_never() {
            Some(Some(message)) => note(spec, message, intake, lives),
            Some(None) => return Err(RedisError::PubSubLost),
            None => return Ok(true),
        }
    }
    Ok(false)
}

/// Sends `update`, taking notifications into `intake` and `lives` while the aggregator's queue
/// is full.
/// The send is always finished (the outbox counts it as sent once it starts).
async fn send_draining<S>(
    out: &Outbox<Update>,
    update: Update,
    messages: &mut S,
    spec: &RedisSpec,
    intake: &mut Intake,
    lives: &mut Lives,
) -> Result<bool, RedisError>
where
    S: futures::Stream<Item = Stamped> + Unpin,
{
    let send = out.send(update);
    tokio::pin!(send);
    let mut lost = false;
    let sent = loop {
        tokio::select! {
            sent = &mut send => break sent,
            message = messages.next(), if !lost => match message {
                Some(message) => note(spec, message, intake, lives),
                None => lost = true,
            },
        }
    };
    if lost && sent {
        return Err(RedisError::PubSubLost);
    }
    Ok(sent)
}

/// A notification stamped with when it arrived (epoch µs).
type Stamped = (i64, redis::Msg);

/// Epoch microseconds.
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The subscription's messages, each stamped when it arrived by a task of its own, so what
/// the member's loop is busy with does not move the stamp (holds are timed by these). The
/// stream ends when the subscription does; the task ends with the returned
/// [`lockscope_core::collect::Tasks`].
fn stamped<S>(
    mut messages: S,
    heard: lockscope_core::collect::Heard,
) -> (
    impl futures::Stream<Item = Stamped> + Unpin,
    lockscope_core::collect::Tasks,
)
where
    S: futures::Stream<Item = redis::Msg> + Unpin + Send + 'static,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Stamped>();
    let task = tokio::spawn(async move {
        while let Some(message) = messages.next().await {
            heard.now();
            if tx.send((now_us(), message)).is_err() {
                return;
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (stream, vec![task].into())
}

/// Takes one stamped notification: the lock key it is about (a companion's lock for
/// companions) is marked dirty, and a lock key's own notification goes to `lives`, which
/// counts acquisitions and releases from it. A key name longer than
/// [`bounded::KEY_NAME_MAX`] is only counted.
fn note(spec: &RedisSpec, (at_us, message): Stamped, intake: &mut Intake, lives: &mut Lives) {
    let Ok(channel) = message.get_channel::<Vec<u8>>() else {
        return;
    };
    tracing::trace!(channel = %String::from_utf8_lossy(&channel[..channel.len().min(bounded::KEY_NAME_MAX)]), "notification");
    let Some(key) = channel_key(&channel) else {
        return;
    };
    let locks = locks_of_companion(key);
    if locks.is_empty() {
        if !spec.wanted(key) {
            return;
        }
        if key.len() > bounded::KEY_NAME_MAX {
            intake.long_keys.note(key);
            return;
        }
        // A companion changes its lock's waiters, never its holders: only the lock key's own
        // notifications are acquisitions and releases.
        if !is_redisson_internal(key) {
            lives.note(key, message.get_payload_bytes(), spec.hint(key), at_us);
        }
        intake.add(key.to_vec());
        return;
    }
    for lock in locks.into_iter().filter(|lock| spec.wanted(lock)) {
        if lock.len() > bounded::KEY_NAME_MAX {
            intake.long_keys.note(&lock);
        } else {
            intake.add(lock);
        }
    }
}

/// How often clients blocked in `BLPOP` are counted while python-redis-lock keys exist.
const BLOCKED_POLL: Duration = Duration::from_secs(1);

/// Keeps `pyrl` the set of python-redis-lock keys among the member's reads (`full`: `reports`
/// are all of them).
fn track_pyrl(pyrl: &mut BTreeSet<Vec<u8>>, reports: &[KeyReport], full: bool) {
    if full {
        pyrl.clear();
    }
    for report in reports {
        match &report.lock {
            Some(lock) if lock.recipe == RedisRecipe::PythonRedisLock => {
                pyrl.insert(report.key.clone());
            }
            _ => {
                pyrl.remove(&report.key);
            }
        }
    }
}

/// Clients blocked in `BLPOP` on this server (`CLIENT LIST`: `cmd=blpop` with flag `b`).
/// Redis does not say on which key, so these are python-redis-lock's waiters only as far as
/// no other application blocks in `BLPOP` on the same server.
async fn blocked_clients(conn: &mut redis::aio::MultiplexedConnection) -> Result<u32, RedisError> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query_async(conn)
        .await
        .map_err(RedisError::command("CLIENT LIST"))?;
    Ok(count_blpop(&list))
}

fn count_blpop(list: &str) -> u32 {
    let blocked = list.lines().filter(|line| {
        let mut cmd = false;
        let mut flag = false;
        for field in line.split(' ') {
            match field.split_once('=') {
                Some(("cmd", c)) => cmd = c.eq_ignore_ascii_case("blpop"),
                Some(("flags", f)) => flag = f.contains('b'),
                _ => {}
            }
        }
        cmd && flag
    });
    u32::try_from(blocked.count()).unwrap_or(u32::MAX)
}

/// Sets each read lock's deadline read: at its TTL's end, or when a redis-semaphore entry
/// lapses if sooner (it goes stale then, and no notification says so). Saturating: a PTTL is clamped (to a
/// century), but the deadline must not wrap whatever it is (a wrapped one would be due at once,
/// over and over).
fn schedule(lives: &mut Lives, reports: &[KeyReport]) {
    for report in reports {
        let at = (report.pttl_ms >= 0 && report.lock.is_some()).then(|| {
            report
                .at_ms
                .saturating_add(report.pttl_ms)
                .saturating_add(1)
        });
        // redis-semaphore: an entry lapses (goes stale) before the set's TTL, with no
        // notification; read the set again then.
        let lapse = report.lock.as_ref().and_then(|lock| {
            lock.holders
                .iter()
                .filter_map(|h| h.entry)
                .filter(|e| !e.stale)
                .filter_map(|e| e.expires_ms)
                .min()
                .map(|e| e.saturating_add(1))
        });
        let at = match (at, lapse) {
            (Some(at), Some(lapse)) => Some(at.min(lapse)),
            (at, lapse) => at.or(lapse),
        };
        lives.set_deadline(&report.key, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyspace_channels_give_binary_keys() {
        assert_eq!(channel_key(b"__keyspace@0__:lock:a"), Some(&b"lock:a"[..]));
        assert_eq!(channel_key(b"__keyspace@12__:x:__:y"), Some(&b"x:__:y"[..]));
        assert_eq!(channel_key(b"other"), None);
    }

    #[test]
    fn blpop_clients_are_counted_from_client_list() {
        let list = "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=8 name= age=9 idle=9 flags=b db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 cmd=blpop user=default\n\
                    id=4 addr=127.0.0.1:6 laddr=127.0.0.1:6379 fd=9 name= age=1 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=26 cmd=client|list user=default\n\
                    id=5 addr=127.0.0.1:7 laddr=127.0.0.1:6379 fd=10 name= age=2 idle=2 flags=b db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 cmd=brpop user=default\n";
        assert_eq!(count_blpop(list), 1);
        assert_eq!(count_blpop(""), 0);
    }

    #[test]
    fn intake_reads_each_dirty_key_once_oldest_first_and_drops_a_backlog_past_its_bound() {
        let mut intake = Intake::new(3);
        intake.extend([b"b".to_vec(), b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        intake.extend([b"a".to_vec()]);
        let mut batch = BTreeSet::from([b"due".to_vec()]);
        intake.take(3, &mut batch);
        assert_eq!(
            batch,
            BTreeSet::from([b"due".to_vec(), b"b".to_vec(), b"a".to_vec()])
        );
        // Read keys may change again; the bound counts keys waiting, not notifications.
        intake.extend([b"a".to_vec(), b"d".to_vec()]);
        assert!(!intake.overflowed);
        intake.extend([b"e".to_vec()]);
        assert!(intake.overflowed, "a fourth waiting key overflows");
        assert_eq!(intake.drops, 1);
        assert!(intake.keys.is_empty() && intake.order.is_empty());
        // Ignored until a scan starts.
        intake.extend([b"f".to_vec()]);
        let mut batch = BTreeSet::new();
        intake.take(10, &mut batch);
        assert!(batch.is_empty());
        intake.resume();
        intake.extend([b"g".to_vec()]);
        intake.take(10, &mut batch);
        assert_eq!(batch, BTreeSet::from([b"g".to_vec()]));
    }

    #[test]
    fn script_answers_parse_into_reads() {
        let value = redis::Value::Array(vec![
            redis::Value::Array(vec![
                redis::Value::BulkString(b"hash".to_vec()),
                redis::Value::Int(2500),
                redis::Value::Array(vec![
                    redis::Value::BulkString(b"u:1".to_vec()),
                    redis::Value::BulkString(b"2".to_vec()),
                ]),
            ]),
            redis::Value::Array(vec![
                redis::Value::BulkString(b"none".to_vec()),
                redis::Value::Int(-2),
                redis::Value::Array(vec![]),
            ]),
            // How the script answers for a missing key now.
            redis::Value::Int(0),
        ]);
        let reads = parse_reads(&value, &mut Vec::new());
        assert_eq!(reads[0].pttl_ms, 2500);
        assert_eq!(
            reads[0].value,
            RedisValue::Hash(vec![(b"u:1".to_vec(), b"2".to_vec())])
        );
        assert_eq!(reads[1], KeyRead::missing());
        assert_eq!(reads[2], KeyRead::missing());
    }

    #[test]
    fn long_values_come_back_as_head_length_and_digest_and_far_ttls_clamped() {
        let digest = "86f7e437faa5a7fce15d1ddcb9eaeaea377667b8";
        let value = redis::Value::Array(vec![redis::Value::Array(vec![
            redis::Value::BulkString(b"string".to_vec()),
            redis::Value::Int(i64::MAX - 1_700_000_000_000),
            redis::Value::Array(vec![redis::Value::Array(vec![
                redis::Value::BulkString(b"holder-3-".to_vec()),
                redis::Value::Int(20_971_520),
                redis::Value::BulkString(digest.as_bytes().to_vec()),
            ])]),
        ])]);
        let mut truncated = Vec::new();
        let reads = parse_reads(&value, &mut truncated);
        assert_eq!(reads[0].pttl_ms, lockscope_model::redis::PTTL_MAX_MS);
        let id = format!("holder-3-…[20971520 bytes, sha1 {digest}]");
        assert_eq!(reads[0].value, RedisValue::String(id.clone().into_bytes()));
        assert_eq!(truncated, vec![(id, format!("20971520:{digest}"))]);
        // A deadline read from it stays in range.
        let mut lives = Lives::default();
        let report = KeyReport {
            key: b"lock:forever".to_vec(),
            lock: decode(
                b"lock:forever",
                &reads[0],
                &Companions::default(),
                KeyHint::None,
                0,
            ),
            watchers: 0,
            at_ms: i64::MAX - 10,
            pttl_ms: i64::MAX,
            read_seq: 0,
            truncated: Vec::new(),
            unrecognised: None,
        };
        schedule(&mut lives, &[report]);
        assert_eq!(lives.next_deadline(), Some(i64::MAX));
    }
}
