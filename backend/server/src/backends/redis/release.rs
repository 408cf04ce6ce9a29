//! Force release of a Redis lock: one Lua script compares the token, hash field (and re-entry
//! count) or value with what the operator saw, deletes, and wakes waiters the library's own way
//! (Redisson's unlock message, python-redis-lock's signal list). A Redlock release runs on every
//! master; on a Cluster only the key's master answers (the others say MOVED).

use std::collections::{BTreeMap, BTreeSet};

use lockscope_model::redis::parse_display_bytes;
use lockscope_model::wire::LockView;
use serde_json::json;

use super::{RedisError, RedisWatchConfig};
use crate::admin::Outcome;
use crate::config::Config;

/// Releases Redis lock keys of every `[[redis]]` and `[[redlock]]` source.
pub struct RedisReleaser {
    watch: BTreeMap<String, RedisWatchConfig>,
    /// Sources that are Clusters (sharded pub/sub is woken there too).
    clusters: BTreeSet<String>,
}

impl RedisReleaser {
    pub fn new(config: &Config) -> Self {
        RedisReleaser {
            watch: config
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
            clusters: config
                .redis
                .iter()
                .filter(|r| r.cluster)
                .map(|r| r.name.clone())
                .collect(),
        }
    }

    /// Releases `holder` of `lock` on `members` (the source's member URLs).
    pub async fn release(
        &self,
        lock: &LockView,
        holder: &str,
        count: Option<u64>,
        members: &[String],
    ) -> Outcome {
        use lockscope_model::redis as layout;
        let key = parse_display_bytes(&lock.path);
        let Some(watch) = self.watch.get(&lock.source) else {
            return Outcome::Failed(format!("no Redis source {:?}", lock.source));
        };
        let cluster = self.clusters.contains(&lock.source);
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
                    let client = super::collect::client_for(member, watch)?;
                    let mut conn = super::collect::connect(&client).await?;
                    invocation
                        .invoke_async::<(i64, String, Vec<u8>)>(&mut conn)
                        .await
                        .map_err(|source| RedisError::Script {
                            script: "release",
                            source,
                        })
                }
            };
            let mut result = run(mode, &second, &third).await;
            if let Err(e) = &result {
                if e.says("CROSSSLOT") {
                    let alone = if mode == "pyrl" { "string" } else { mode };
                    result = run(alone, &key, &key).await;
                    if mode == "pyrl" && matches!(result, Ok((1, _, _))) {
                        signal_after = Some(second.clone());
                    }
                }
            }
            let shown = super::config::redact_url(member);
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
                Err(e) if e.says("MOVED") => {}
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

/// Wakes python-redis-lock waiters (blocked in `BLPOP` on the signal list) the way its unlock
/// does: a fresh one-element list that expires in a second. Runs on every member; the ones that
/// do not own the list's slot answer MOVED. Says where it was pushed, or why not.
async fn signal_waiters(members: &[String], watch: &RedisWatchConfig, signal: &[u8]) -> String {
    let mut errors = Vec::new();
    for member in members {
        let shown = super::config::redact_url(member);
        let pushed = async {
            let client = super::collect::client_for(member, watch)?;
            let mut conn = super::collect::connect(&client).await?;
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
                .map_err(RedisError::command("MULTI DEL/LPUSH/PEXPIRE"))
        }
        .await;
        match pushed {
            Ok(()) => return format!("signal list pushed on {shown} (another slot than the key)"),
            Err(e) if e.says("MOVED") => {}
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
