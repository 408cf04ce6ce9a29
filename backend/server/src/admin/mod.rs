//! Force release: the only code in lockscope that changes anything in ZooKeeper or Redis (and,
//! through `backends/etcd/release.rs`, etcd).
//!
//! A release names the holder the operator saw and deletes exactly that holder, atomically
//! checked on the server: ZooKeeper `delete(node, version)` after checking the node's
//! `ephemeralOwner` is the observed session; Redis one Lua script that compares the token, hash
//! field (and re-entry count) or host, deletes, and publishes the library's unlock message so
//! waiters wake now. A Redlock release runs on every master. The HTTP layer ([`crate::http::admin`])
//! authenticates, rate-limits and writes the audit record for every attempt; this module only
//! decides and executes.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use lockscope_model::redis::parse_display_bytes;
use lockscope_model::session_hex;
use lockscope_model::wire::{LockView, ReleaseRequest};
use serde_json::{json, Value};
use tokio::sync::Mutex;
use zookeeper_client as zkc;

use crate::config::{Config, RedisWatchConfig, ZkSourceConfig};

/// What a release attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Deleted; `detail` says what.
    Released(Value),
    /// The named holder no longer holds (or never did); nothing was changed.
    HolderChanged(Value),
    /// This layout cannot be released safely.
    Unsupported(String),
    /// The server could not be reached or answered an error; nothing known to be changed.
    Failed(String),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Released(_) => "released",
            Outcome::HolderChanged(_) => "holder_changed",
            Outcome::Unsupported(_) => "unsupported",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// A named bearer token.
#[derive(Clone)]
struct Token {
    name: String,
    secret: String,
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No bearer token.
    Unauthorized,
    /// A token that is not allowed here.
    Forbidden,
}

/// Token bucket over all callers.
struct RateLimiter {
    capacity: f64,
    tokens: f64,
    per_second: f64,
    last: Instant,
}

impl RateLimiter {
    fn new(per_minute: u32) -> Self {
        let capacity = f64::from(per_minute.max(1));
        RateLimiter {
            capacity,
            tokens: capacity,
            per_second: capacity / 60.0,
            last: Instant::now(),
        }
    }

    fn allow(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct Admin {
    pub enabled: bool,
    tokens: Vec<Token>,
    read_tokens: Vec<Token>,
    zk: BTreeMap<String, ZkSourceConfig>,
    redis: BTreeMap<String, RedisWatchConfig>,
    etcd: BTreeMap<String, crate::backends::etcd::EtcdSourceConfig>,
    /// Redis sources that are Clusters (sharded pub/sub is woken there too).
    redis_clusters: std::collections::BTreeSet<String>,
    limiter: Mutex<RateLimiter>,
    /// One admin session per ZooKeeper source, opened on first use and replaced after errors.
    zk_clients: Mutex<HashMap<String, zkc::Client>>,
    by_outcome: Mutex<BTreeMap<String, u64>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("enabled", &self.enabled)
            .field(
                "tokens",
                &self.tokens.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("read_tokens", &self.read_tokens.len())
            .finish_non_exhaustive()
    }
}

fn tokens(list: &[crate::config::TokenConfig]) -> Vec<Token> {
    list.iter()
        .filter_map(|t| {
            t.secret().map(|secret| Token {
                name: t.name.clone(),
                secret,
            })
        })
        .collect()
}

/// Compares without stopping at the first difference (no timing hint about the secret).
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}

/// The token of an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl Admin {
    pub fn new(config: &Config) -> Admin {
        Admin {
            enabled: config.admin.enabled,
            tokens: tokens(&config.admin.tokens),
            read_tokens: tokens(&config.admin.read_tokens),
            zk: config
                .zookeeper
                .iter()
                .map(|z| (z.name.clone(), z.clone()))
                .collect(),
            redis: config
                .redis
                .iter()
                .map(|r| (r.name.clone(), r.watch.clone()))
                .chain(
                    config
                        .redlock
                        .iter()
                        .map(|r| (r.name.clone(), r.watch.clone())),
                )
                .collect(),
            etcd: config
                .etcd
                .iter()
                .map(|e| (e.name.clone(), e.clone()))
                .collect(),
            redis_clusters: config
                .redis
                .iter()
                .filter(|r| r.cluster)
                .map(|r| r.name.clone())
                .collect(),
            limiter: Mutex::new(RateLimiter::new(config.admin.max_releases_per_minute)),
            zk_clients: Mutex::new(HashMap::new()),
            by_outcome: Mutex::new(BTreeMap::new()),
        }
    }

    /// The admin token's name for an `Authorization` header.
    pub fn authorize(&self, header: Option<&str>) -> Result<String, Denied> {
        let token = bearer(header).ok_or(Denied::Unauthorized)?;
        self.tokens
            .iter()
            .find(|t| same_secret(&t.secret, token))
            .map(|t| t.name.clone())
            .ok_or(Denied::Forbidden)
    }

    /// Whether reads need a token, and if so whether `token` is a read or admin token.
    pub fn authorize_read(&self, token: Option<&str>) -> Result<(), Denied> {
        if self.read_tokens.is_empty() {
            return Ok(());
        }
        let token = token.ok_or(Denied::Unauthorized)?;
        self.read_tokens
            .iter()
            .chain(&self.tokens)
            .any(|t| same_secret(&t.secret, token))
            .then_some(())
            .ok_or(Denied::Forbidden)
    }

    pub fn reads_need_token(&self) -> bool {
        !self.read_tokens.is_empty()
    }

    pub async fn allow_rate(&self) -> bool {
        self.limiter.lock().await.allow()
    }

    /// Counts an attempt's outcome for `/metrics`.
    pub async fn count(&self, outcome: &str) {
        *self
            .by_outcome
            .lock()
            .await
            .entry(outcome.to_string())
            .or_default() += 1;
    }

    /// `lockscope_force_releases_total{outcome}` in exposition format.
    pub async fn render_metrics(&self) -> String {
        let mut out = String::from(
            "# HELP lockscope_force_releases_total Force-release attempts by outcome (every attempt is audited).\n\
             # TYPE lockscope_force_releases_total counter\n",
        );
        let counts = self.by_outcome.lock().await;
        for outcome in [
            "released",
            "holder_changed",
            "not_found",
            "unauthorized",
            "forbidden",
            "invalid",
            "rate_limited",
            "unsupported",
            "failed",
            "disabled",
        ] {
            let n = counts.get(outcome).copied().unwrap_or(0);
            out.push_str(&format!(
                "lockscope_force_releases_total{{outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        out
    }

    /// Releases `request.holder` of `lock` (as lockscope sees it now) if that holder still holds.
    /// `members` are the Redis source's member URLs (unused for ZooKeeper).
    pub async fn release(
        &self,
        lock: &LockView,
        request: &ReleaseRequest,
        members: &[String],
    ) -> Outcome {
        let Some(holder) = lock.holders.iter().find(|h| h.node == request.holder) else {
            return Outcome::HolderChanged(json!({
                "message": "that holder does not hold this lock now",
                "current_holders": lock.holders.iter().map(|h| &h.node).collect::<Vec<_>>(),
            }));
        };
        if request
            .session
            .as_ref()
            .is_some_and(|s| *s != holder.session)
        {
            return Outcome::HolderChanged(json!({
                "message": "the holder belongs to another session now",
                "current_session": holder.session,
            }));
        }
        match lock.backend {
            lockscope_model::wire::Backend::Zookeeper => {
                self.release_zk(&lock.source, &holder.node, &holder.session)
                    .await
            }
            lockscope_model::wire::Backend::Redis => {
                self.release_redis(lock, &holder.node, request.reentrancy, members)
                    .await
            }
            lockscope_model::wire::Backend::Etcd => match self.etcd.get(&lock.source) {
                Some(config) => {
                    crate::backends::etcd::release::release(
                        config,
                        &holder.node,
                        request.version.as_deref(),
                    )
                    .await
                }
                None => Outcome::Failed(format!("no etcd source {:?}", lock.source)),
            },
        }
    }

    async fn zk_client(&self, source: &str) -> Result<zkc::Client, String> {
        let mut clients = self.zk_clients.lock().await;
        if let Some(client) = clients.get(source) {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        let config = self
            .zk
            .get(source)
            .ok_or_else(|| format!("no ZooKeeper source {source:?}"))?;
        let client = crate::collect::zk::connect(config).await?;
        clients.insert(source.to_string(), client.clone());
        Ok(client)
    }

    async fn release_zk(&self, source: &str, node: &str, session: &str) -> Outcome {
        let client = match self.zk_client(source).await {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(e),
        };
        let stat = match client.check_stat(node).await {
            Ok(Some(stat)) => stat,
            Ok(None) => {
                return Outcome::HolderChanged(
                    json!({"message": "the holder's node is gone", "node": node}),
                )
            }
            Err(e) => {
                self.zk_clients.lock().await.remove(source);
                return Outcome::Failed(format!("exists {node}: {e}"));
            }
        };
        let owner = session_hex(stat.ephemeral_owner);
        if owner != session {
            return Outcome::HolderChanged(json!({
                "message": "the node is owned by another session now",
                "node": node,
                "owner": owner,
            }));
        }
        match client.delete(node, Some(stat.version)).await {
            Ok(()) => Outcome::Released(json!({
                "node": node,
                "session": owner,
                "version": stat.version,
            })),
            Err(zkc::Error::NoNode) | Err(zkc::Error::BadVersion) => {
                Outcome::HolderChanged(json!({
                    "message": "the node changed or went between the check and the delete",
                    "node": node,
                }))
            }
            Err(zkc::Error::NoAuth) => Outcome::Failed(format!(
                "not allowed to delete {node}: configure digest credentials for this source"
            )),
            Err(e) => {
                self.zk_clients.lock().await.remove(source);
                Outcome::Failed(format!("delete {node}: {e}"))
            }
        }
    }

    async fn release_redis(
        &self,
        lock: &LockView,
        holder: &str,
        count: Option<u64>,
        members: &[String],
    ) -> Outcome {
        use lockscope_model::redis as layout;
        let key = parse_display_bytes(&lock.path);
        let Some(watch) = self.redis.get(&lock.source) else {
            return Outcome::Failed(format!("no Redis source {:?}", lock.source));
        };
        let cluster = self.redis_clusters.contains(&lock.source);
        let [queue, timeouts, ..] = layout::companion_keys(&key);
        // Mode, the companion keys the script touches, the channel it wakes and the message.
        // Redisson's unlock messages (LockPubSub): 0 wakes one waiter, 1 (a write unlock) wakes
        // every waiting thread.
        let (mode, second, third, channel, message) = match lock.recipe.as_str() {
            "token_lock" | "setnx_no_ttl" | "redlock" | "shedlock" => {
                ("string", key.clone(), key.clone(), Vec::new(), "")
            }
            "python_redis_lock" => match layout::signal_list_key(&key) {
                Some(signal) => ("pyrl", signal, key.clone(), Vec::new(), ""),
                None => ("string", key.clone(), key.clone(), Vec::new(), ""),
            },
            // Every Redisson lock hash is released as a fair lock could be: the script cleans the
            // fair queue of expired entries and wakes its new head, so a fair lock seen with an
            // empty queue (or a queue that filled since) wakes its waiters too.
            "redisson_lock"
            | "redisson_fenced_lock"
            | "redisson_fair_lock"
            | "redisson_redlock" => ("hash", queue, timeouts, layout::unlock_channel(&key), "0"),
            "redisson_rw_lock" => {
                let writing = lock
                    .holders
                    .iter()
                    .any(|h| h.mode == Some(lockscope_model::wire::LockMode::Write));
                let message = if writing { "1" } else { "0" };
                (
                    "rw",
                    key.clone(),
                    key.clone(),
                    layout::rwlock_channel(&key),
                    message,
                )
            }
            other => {
                return Outcome::Unsupported(format!(
                    "force release of {other} locks is not supported: only token, Redlock, SETNX, \
                     python-redis-lock, ShedLock and Redisson lock / fair lock / fenced lock / \
                     read-write lock / RedLock can be compared and deleted safely (a semaphore's \
                     or latch's count has no holder to compare)"
                ))
            }
        };
        // Redisson ≥ 3.22 on a Cluster waits with SSUBSCRIBE (a separate namespace): wake both
        // kinds of subscriber there. A script may only SPUBLISH within its key's slot.
        let sharded = cluster && !channel.is_empty() && {
            let slot = layout::hash_slot(&key);
            layout::hash_slot(&channel) == slot && layout::hash_slot(&second) == slot
        };
        // What to compare on each member: the named holder, except for Redisson's RedLock,
        // whose masters hold different fields (one Redisson instance each) for one thread: there
        // each master's own field as the operator saw it, and only masters it was seen on.
        let expected: Vec<Option<Vec<u8>>> = if lock.recipe == "redisson_redlock" {
            let seen = lock.redlock.as_ref().map(|r| &r.masters);
            (0..members.len())
                .map(|i| {
                    let field = seen?.get(i)?.holder.as_ref()?;
                    (layout::redisson_redlock_holder(field) == holder)
                        .then(|| parse_display_bytes(field))
                })
                .collect()
        } else {
            vec![Some(parse_display_bytes(holder)); members.len()]
        };
        let count = count.map(|c| c.to_string()).unwrap_or_default();
        let now = crate::now_ms().to_string();
        let mut released = Vec::new();
        let mut refused = Vec::new();
        let mut failed = Vec::new();
        // python-redis-lock's signal list is in another Cluster slot than its lock key; the
        // same goes for Redisson companions of a name whose brace is no hash tag. The
        // compare-and-delete then runs on the key alone, and the signal is pushed after it.
        let mut signal_after = None;
        for (member, holder_bytes) in members.iter().zip(&expected) {
            let Some(holder_bytes) = holder_bytes else {
                continue;
            };
            let run = |mode: &'static str, second: &[u8], third: &[u8]| {
                let mut invocation = RELEASE_SCRIPT.key(&key);
                invocation
                    .key(second)
                    .key(third)
                    .arg(mode)
                    .arg(holder_bytes)
                    .arg(&count)
                    .arg(&channel)
                    .arg(message)
                    .arg(&now)
                    .arg(if sharded { "1" } else { "0" });
                async move {
                    let client = crate::collect::redis::client_for(member, watch)?;
                    let mut conn = crate::collect::redis::connect(&client).await?;
                    invocation
                        .invoke_async::<(i64, String, Vec<u8>)>(&mut conn)
                        .await
                        .map_err(|e| e.to_string())
                }
            };
            let mut result = run(mode, &second, &third).await;
            if let Err(e) = &result {
                if says(e, "CROSSSLOT") {
                    let alone = if mode == "pyrl" { "string" } else { mode };
                    result = run(alone, &key, &key).await;
                    if mode == "pyrl" && matches!(result, Ok((1, _, _))) {
                        signal_after = Some(second.clone());
                    }
                }
            }
            let shown = crate::config::redact_url(member);
            match result {
                Ok((1, _, value)) => released.push(json!({
                    "member": shown,
                    "deleted": layout::display_bytes(&value),
                })),
                Ok((_, what, value)) if what == "mismatch" => refused.push(json!({
                    "member": shown,
                    "current": layout::display_bytes(&value),
                })),
                Ok(_) => {}
                // A Cluster master that does not own the key's slot says MOVED: not here.
                Err(e) if says(&e, "MOVED") => {}
                Err(e) => failed.push(format!("{shown}: {e}")),
            }
        }
        if !released.is_empty() {
            let mut answer = json!({
                "key": lock.path,
                "holder": holder,
                "members": released,
                "refused_on": refused,
                "failed_on": failed,
            });
            if !channel.is_empty() {
                answer["woke"] = json!({
                    "channel": layout::display_bytes(&channel),
                    "message": message,
                    "sharded": sharded,
                });
            }
            if let Some(signal) = signal_after {
                answer["signal"] = signal_waiters(members, watch, &signal).await.into();
            }
            return Outcome::Released(answer);
        }
        if !refused.is_empty() || failed.is_empty() {
            return Outcome::HolderChanged(json!({
                "message": "the key no longer holds that holder",
                "key": lock.path,
                "members": refused,
            }));
        }
        Outcome::Failed(failed.join("; "))
    }
}

/// Whether a Redis error is the server's `code` error (`MOVED`, `CROSSSLOT`): redis-rs shows
/// some codes as their kind's name (`Moved`, `CrossSlot`), so case is ignored.
fn says(error: &str, code: &str) -> bool {
    error.to_ascii_uppercase().contains(code)
}

/// Wakes python-redis-lock waiters (blocked in `BLPOP` on the signal list) the way its unlock
/// does: a fresh one-element list that expires in a second. Runs on every member; the ones that
/// do not own the list's slot answer MOVED. Says where it was pushed, or why not.
async fn signal_waiters(
    members: &[String],
    watch: &crate::config::RedisWatchConfig,
    signal: &[u8],
) -> String {
    let mut errors = Vec::new();
    for member in members {
        let shown = crate::config::redact_url(member);
        let pushed = async {
            let client = crate::collect::redis::client_for(member, watch)?;
            let mut conn = crate::collect::redis::connect(&client).await?;
            redis::pipe()
                .atomic()
                .del(signal)
                .ignore()
                .lpush(signal, 1)
                .ignore()
                .pexpire(signal, 1000)
                .ignore()
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        match pushed {
            Ok(()) => return format!("signal list pushed on {shown} (another slot than the key)"),
            Err(e) if says(&e, "MOVED") => {}
            Err(e) => errors.push(format!("{shown}: {e}")),
        }
    }
    format!("the signal list could not be pushed: {}", errors.join("; "))
}

/// Compare-and-delete in one script. KEYS[1] the lock key; KEYS[2], KEYS[3] its companions
/// (python-redis-lock signal list; Redisson fair queue and timeout zset; else the lock key again).
/// ARGV: mode, holder, expected re-entry count ('' for any), Redisson channel, unlock message,
/// now (epoch ms), '1' to SPUBLISH as well as PUBLISH. Returns {1, 'deleted', what} or
/// {0, 'absent'|'mismatch', what is there}.
///
/// Modes: `string` compares the whole value (token, SETNX, Redlock, ShedLock); `pyrl` also
/// wakes python-redis-lock's `BLPOP` waiters as its unlock does (a fresh one-element signal list
/// expiring in a second); `hash` is a Redisson lock whose only holder must be the named field
/// with the named count: it deletes, publishes the unlock message, then does what every Redisson
/// FairLock script does (drop head entries of the queue whose timeout passed, wake the new head on
/// `<channel>:<head>`); `rw` is a Redisson read-write lock held by the named field alone (a
/// writer's own read re-entries aside).
static RELEASE_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        r#"
local mode, holder, count, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local message, now, sharded = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1'
local function wake(ch)
  redis.call('PUBLISH', ch, message)
  if sharded then redis.call('SPUBLISH', ch, message) end
end
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return {0, 'absent', ''} end
if mode == 'string' or mode == 'pyrl' then
  if t ~= 'string' then return {0, 'mismatch', 'a ' .. t} end
  local v = redis.call('GET', KEYS[1])
  if v ~= holder then return {0, 'mismatch', v} end
  redis.call('DEL', KEYS[1])
  if mode == 'pyrl' then
    redis.call('DEL', KEYS[2])
    redis.call('LPUSH', KEYS[2], 1)
    redis.call('PEXPIRE', KEYS[2], 1000)
  end
  return {1, 'deleted', v}
end
if t ~= 'hash' then return {0, 'mismatch', 'a ' .. t} end
local c = redis.call('HGET', KEYS[1], holder)
local fields = redis.call('HKEYS', KEYS[1])
if not c then return {0, 'mismatch', table.concat(fields, ',')} end
if count ~= '' and tonumber(c) ~= tonumber(count) then return {0, 'mismatch', holder .. ' x' .. c} end
if mode == 'rw' then
  local own = string.gsub(holder, ':write$', '')
  for _, f in ipairs(fields) do
    if f ~= 'mode' and f ~= holder and f ~= own then
      return {0, 'mismatch', table.concat(fields, ',')}
    end
  end
  redis.call('DEL', KEYS[1])
  wake(channel)
  return {1, 'deleted', holder .. ' x' .. c}
end
if #fields ~= 1 then return {0, 'mismatch', table.concat(fields, ',')} end
redis.call('DEL', KEYS[1])
wake(channel)
if redis.call('TYPE', KEYS[2])['ok'] == 'list' then
  while true do
    local head = redis.call('LINDEX', KEYS[2], 0)
    if not head then break end
    local timeout = tonumber(redis.call('ZSCORE', KEYS[3], head))
    if timeout == nil or timeout > now then break end
    redis.call('ZREM', KEYS[3], head)
    redis.call('LPOP', KEYS[2])
  end
  local head = redis.call('LINDEX', KEYS[2], 0)
  if head then wake(channel .. ':' .. head) end
end
return {1, 'deleted', holder .. ' x' .. c}
"#,
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_and_secrets() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
        assert!(same_secret("0123456789abcdef", "0123456789abcdef"));
        assert!(!same_secret("0123456789abcdef", "0123456789abcdeF"));
        assert!(!same_secret("short", "shorter"));
    }

    #[test]
    fn rate_limiter_refuses_a_burst_beyond_capacity() {
        let mut limiter = RateLimiter::new(3);
        assert!(limiter.allow() && limiter.allow() && limiter.allow());
        assert!(!limiter.allow());
    }
}
