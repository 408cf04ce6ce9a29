//! Force release of a Redis lock: one Lua script compares the token, hash field (and re-entry
//! count) or value with what the operator saw, deletes, and wakes waiters the library's own way
//! (Redisson's unlock message, python-redis-lock's signal list, Spring `RedisLockRegistry`'s
//! unlock channels). A Redlock release runs on every master at once; on a Cluster only the
//! key's master answers (the others say MOVED).
//!
//! What is compared, beyond the holder's id:
//! * a holder that shows a `version` must be named with it: a Redisson RedLock holder
//!   (`*:<threadId>`, shared by every JVM's thread of that number) by the digest of the
//!   per-master fields the operator saw, recomputed from lockscope's view before anything is
//!   sent; a holder too long to copy (see [`super::bounded`]) by its length and digest, which
//!   the script recomputes over bounded reads;
//! * on every member the script compares that member's own field or value again, atomically.
//!
//! Every connection a release opens gives up after [`RELEASE_CONNECT_TIMEOUT`], every script
//! call after [`RELEASE_COMMAND_TIMEOUT`]; members are asked concurrently, so a slow master holds
//! up only its own answer. The outcome: `Released` when a member deleted (a Redlock: when a
//! majority did, or when no member failed to answer), `HolderChanged` when a member answered
//! that the holder is not there, `Failed` when members answered only errors (or a script timed
//! out: it may have run), `Unavailable` when no member could be reached at all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lockscope_model::redis::parse_display_bytes;
use lockscope_model::wire::{HolderView, LockView};
use serde_json::json;

use super::bounded;
use super::{RedisError, RedisWatchConfig};
use lockscope_core::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

/// Releases Redis lock keys of every `[[redis]]` and `[[redlock]]` source.
pub struct RedisReleaser {
    watch: BTreeMap<String, RedisWatchConfig>,
    /// Sources that are Clusters (sharded pub/sub is woken there too).
    clusters: BTreeSet<String>,
    /// Sources that are Redlock sets (a majority of deletes releases).
    redlocks: BTreeSet<String>,
    /// Spring Integration `RedisLockRegistry` keys, per source.
    spring: BTreeMap<String, Vec<String>>,
}

/// What one member answered to a release.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    /// Deleted; what was there.
    Deleted(String),
    /// The holder is not there (another holder, or no key); what is there, bounded.
    Refused(Option<String>),
    /// A Cluster master that does not own the key's slot (MOVED).
    NotHere,
    /// Never reached: no connection could be made (or no client built).
    Unreachable(String),
    /// Reached, and it answered an error, or no answer came in time (the script may have run).
    Error(String),
}

/// What to compare on one member, and how.
struct Compare<'a> {
    mode: &'static str,
    second: &'a [u8],
    third: &'a [u8],
    holder: &'a [u8],
    count: &'a str,
    channel: &'a [u8],
    message: &'a str,
    now: &'a str,
    sharded: bool,
    /// A truncated holder: its length and digest ('' for a whole compare).
    digest: (&'a str, &'a str),
    /// Spring `RedisLockRegistry`: the unlock channels to publish the key on.
    spring_channels: &'a [Vec<u8>],
}

/// What a member's release leaves to do or to tell besides its answer.
#[derive(Debug, Default)]
struct After {
    /// python-redis-lock's signal list, in another Cluster slot than its key: to push now.
    signal: Option<Vec<u8>>,
    /// Spring `RedisLockRegistry`: how many subscribers of that member each unlock channel's
    /// `PUBLISH` reached (in the order of [`Compare::spring_channels`]).
    receivers: Option<Vec<i64>>,
}

impl RedisReleaser {
    /// The releaser of the Redis sources `specs` (`[[redis]]` and `[[redlock]]`).
    pub fn new(specs: &[super::collect::RedisSpec]) -> Self {
        RedisReleaser {
            watch: specs
                .iter()
                .map(|s| (s.name.clone(), s.watch.clone()))
                .collect(),
            clusters: specs
                .iter()
                .filter(|s| s.cluster)
                .map(|s| s.name.clone())
                .collect(),
            redlocks: specs
                .iter()
                .filter(|s| s.redlock)
                .map(|s| s.name.clone())
                .collect(),
            spring: specs
                .iter()
                .map(|s| (s.name.clone(), s.spring_lock_registries.clone()))
                .collect(),
        }
    }

    /// Releases `holder` (as lockscope shows it now) of `lock` on `members` (the source's
    /// member URLs); `count` and `version` as the operator saw them.
    pub async fn release(
        &self,
        lock: &LockView,
        holder: &HolderView,
        count: Option<u64>,
        version: Option<&str>,
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
            // Spring's RedisLockRegistry: the client id compared, the key UNLINKed, then the
            // key published on its registry's unlock channels (see `SPRING_RELEASE_SCRIPT`).
            "spring_redis_lock" => ("spring", key.clone(), key.clone(), Vec::new(), ""),
            // redis-semaphore: ZREM of exactly the holder's member(s), each still scored as seen.
            "redis_semaphore" | "redis_multi_semaphore" => {
                ("zset", key.clone(), key.clone(), Vec::new(), "")
            }
            // A token set (Symfony Lock's RedisStore): ZREM of the holder's token, still scored
            // as seen, and of the write marker, then the key expires at the latest score left,
            // as the library's own delete script does.
            "token_zset" => ("tokens", key.clone(), key.clone(), Vec::new(), ""),
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
                     python-redis-lock, ShedLock, redis-semaphore, token sets (Symfony Lock), \
                     Spring RedisLockRegistry and \
                     Redisson lock / fair lock / fenced lock / read-write lock / RedLock can be \
                     compared and deleted safely (a semaphore's or latch's count has no holder \
                     to compare)"
                ))
            }
        };
        // Spring: every configured registry the key is under has its waiters on its own
        // channels (two registries whose keys overlap share the Redis key); each gets the key,
        // on the per-key channel of 7.0.0 / 6.5.3 / 6.4.8 and later and on the single channel
        // of older releases.
        let mut spring_channels: Vec<Vec<u8>> = Vec::new();
        if mode == "spring" {
            let registries = self.spring.get(&lock.source).map(Vec::as_slice);
            for registry in layout::spring_registries_of(&key, registries.unwrap_or_default()) {
                for channel in layout::spring_unlock_channels(registry, &key) {
                    if !spring_channels.contains(&channel) {
                        spring_channels.push(channel);
                    }
                }
            }
            if spring_channels.is_empty() {
                return Outcome::Unsupported(format!(
                    "{} is under no `spring_lock_registries` entry of source {:?}: its unlock \
                     channels are unknown",
                    lock.path, lock.source
                ));
            }
        }
        // redis-semaphore: the version names the score seen (and a MultiSemaphore's permits);
        // the script removes the member(s) only while each is still scored so.
        let mut zset_count = None;
        let mut zset_score = String::new();
        if mode == "tokens" {
            let Some(seen) = version.and_then(|v| v.parse::<i64>().ok()) else {
                return Outcome::Unsupported(format!(
                    "a token set's holder is removed only while its token is scored as you saw \
                     it: send its version as shown ({}), its expiry score",
                    holder.version.as_deref().unwrap_or("none")
                ));
            };
            zset_score = seen.to_string();
            zset_count = Some(String::from_utf8_lossy(layout::WRITE_MARKER).into_owned());
        }
        if mode == "zset" {
            let Some(seen) = version else {
                return Outcome::Unsupported(format!(
                    "a redis-semaphore holder is removed only while its entry is the one you saw: \
                     send its version as shown ({}) — its score, `x` its permits for a \
                     MultiSemaphore",
                    holder.version.as_deref().unwrap_or("none")
                ));
            };
            let Some((score, permits)) = parse_semaphore_version(seen) else {
                return Outcome::Unsupported(format!(
                    "version {seen:?} is no redis-semaphore version (`<score>` or \
                     `<score>x<permits>`, as the holder shows it)"
                ));
            };
            zset_score = score.to_string();
            zset_count = Some(permits.map(|p| p.to_string()).unwrap_or_default());
        }
        let message = if mode == "zset" || mode == "tokens" {
            zset_score.as_str()
        } else {
            message
        };
        // What to compare on each member: the named holder, except for Redisson's RedLock,
        // whose masters hold different fields (one Redisson instance each) for one thread: there
        // each master's own field as lockscope sees it, and only masters it is seen on.
        let expected: Vec<Option<Vec<u8>>> = if lock.recipe == "redisson_redlock" {
            let seen = lock.redlock.as_ref().map(|r| &r.masters);
            let fields: Vec<Option<&str>> = (0..members.len())
                .map(|i| {
                    let field = seen?.get(i)?.holder.as_deref()?;
                    (layout::redisson_redlock_holder(field) == holder.node).then_some(field)
                })
                .collect();
            // `*:<threadId>` names every JVM's thread of that number: only the version says
            // which fields the operator saw. Compared before anything is sent.
            let Some(version) = version else {
                return Outcome::Unsupported(format!(
                    "a Redisson RedLock holder ({}) names a thread, and other JVMs' threads \
                     share its number: send the holder's version as shown ({}) so that only \
                     the fields you saw are deleted",
                    holder.node,
                    redlock_version_shown(&fields)
                ));
            };
            let current = bounded::redlock_version(&fields);
            if version != current {
                return Outcome::HolderChanged(json!({
                    "message": "the fields of that thread on the masters are not the ones you saw (another JVM's thread of the same number, or a new acquisition)",
                    "key": lock.path,
                    "seen_version": version,
                    "current_version": current,
                }));
            }
            fields.iter().map(|f| f.map(parse_display_bytes)).collect()
        } else {
            // A holder that shows a version is named with it (a truncated value or field: its
            // id is only a head and a digest, and a short value could spell the same text).
            match (version, holder.version.as_deref()) {
                (None, Some(current)) => {
                    return Outcome::Unsupported(format!(
                        "this holder shows a version ({current}): send it back as `version` \
                         (its value is too long to copy; the version is its length and digest)"
                    ))
                }
                (Some(seen), current) if Some(seen) != current => {
                    return Outcome::HolderChanged(json!({
                        "message": "the holder's version is not the one you saw",
                        "key": lock.path,
                        "seen_version": seen,
                        "current_version": current,
                    }))
                }
                _ => {}
            }
            vec![Some(parse_display_bytes(&holder.node)); members.len()]
        };
        let digest = holder
            .version
            .as_deref()
            .filter(|_| mode != "zset" && mode != "tokens")
            .and_then(bounded::parse_truncated_version)
            .map(|(len, digest)| (len.to_string(), digest.to_string()));
        let (digest_len, digest) = digest.unwrap_or_default();
        // Redisson ≥ 3.22 on a Cluster waits with SSUBSCRIBE (a separate namespace): wake both
        // kinds of subscriber there. A script may only SPUBLISH within its key's slot.
        let sharded = cluster && !channel.is_empty() && {
            let slot = layout::hash_slot(&key);
            layout::hash_slot(&channel) == slot && layout::hash_slot(&second) == slot
        };
        let count = zset_count.unwrap_or_else(|| count.map(|c| c.to_string()).unwrap_or_default());
        let now = lockscope_core::now_ms().to_string();
        if members.is_empty() {
            return Outcome::Unavailable(format!(
                "no member of Redis source {:?} is known yet: nothing was asked",
                lock.source
            ));
        }
        // Each member is asked at once: a slow or paused master holds up only its own answer.
        let key = &key;
        let asks = members
            .iter()
            .zip(&expected)
            .filter_map(|(member, holder_bytes)| {
                let holder_bytes = holder_bytes.as_deref()?;
                let compare = Compare {
                    mode,
                    second: &second,
                    third: &third,
                    holder: holder_bytes,
                    count: &count,
                    channel: &channel,
                    message,
                    now: &now,
                    sharded,
                    digest: (&digest_len, &digest),
                    spring_channels: &spring_channels,
                };
                Some(async move {
                    let (answer, after) = release_on(member, watch, key, compare).await;
                    (super::config::redact_url(member), answer, after)
                })
            });
        let answers = futures::future::join_all(asks).await;
        if answers.is_empty() {
            return Outcome::HolderChanged(json!({
                "message": "that holder is on no master lockscope sees",
                "key": lock.path,
            }));
        }
        // python-redis-lock's signal list is in another Cluster slot than its lock key: pushed
        // right after the delete (see `release_on`).
        let signal_after = answers.iter().find_map(|(_, _, a)| a.signal.clone());
        // Spring: the channels published on, by the member that deleted the key.
        let published = answers
            .iter()
            .find_map(|(m, _, a)| a.receivers.clone().map(|r| (m.clone(), r)));
        let quorum = self
            .redlocks
            .contains(&lock.source)
            .then_some(members.len() / 2 + 1);
        let answers: Vec<(String, Answer)> = answers.into_iter().map(|(m, a, _)| (m, a)).collect();
        let mut outcome = verdict(&lock.path, &holder.node, quorum, &answers);
        if let Outcome::Released(detail) = &mut outcome {
            if !channel.is_empty() {
                detail["woke"] = json!({
                    "channel": layout::display_bytes(&channel),
                    "message": message,
                    "sharded": sharded,
                });
            }
            if let Some(signal) = signal_after {
                detail["signal"] = signal_waiters(members, watch, &signal).await.into();
            }
            if let Some((member, receivers)) = published {
                detail["woke"] =
                    spring_woke(&lock.path, &spring_channels, &receivers, &member, cluster);
            }
        }
        outcome
    }
}

/// What a Spring release's answer says it published: each channel with the subscribers its
/// `PUBLISH` reached. `PUBLISH` counts the subscribers of the server it runs on: on a Cluster it
/// reaches every node's (the cluster bus carries it), but counts only the key's master's.
fn spring_woke(
    key: &str,
    channels: &[Vec<u8>],
    receivers: &[i64],
    member: &str,
    cluster: bool,
) -> serde_json::Value {
    use lockscope_model::redis::display_bytes;
    let published: Vec<serde_json::Value> = channels
        .iter()
        .zip(receivers)
        .map(|(channel, n)| json!({"channel": display_bytes(channel), "receivers": n}))
        .collect();
    let mut woke = json!({
        "message": key,
        "published": published,
        "counted_on": member,
    });
    if cluster {
        woke["note"] = json!(
            "PUBLISH reaches subscribers on every node of the Cluster; `receivers` counts those \
             connected to the key's master only"
        );
    }
    woke
}

/// A redis-semaphore holder's version (`state::semaphore_version`): the score seen and, for a
/// MultiSemaphore, its permits (1 to [`lockscope_model::redis::ZSET_READ_MAX`]).
fn parse_semaphore_version(version: &str) -> Option<(i64, Option<u32>)> {
    let (score, permits) = match version.split_once('x') {
        Some((score, permits)) => (score, Some(permits.parse::<u32>().ok()?)),
        None => (version, None),
    };
    let max = lockscope_model::redis::ZSET_READ_MAX as u32;
    if permits.is_some_and(|p| p == 0 || p > max) {
        return None;
    }
    Some((score.parse().ok()?, permits))
}

/// The version a Redisson RedLock holder shows, for a refusal's text.
fn redlock_version_shown(fields: &[Option<&str>]) -> String {
    bounded::redlock_version(fields)
}

/// Runs the compare-and-delete on one member, each step under its timeout. Answers what the
/// member said and [`After`]: when python-redis-lock's signal list lives in another Cluster
/// slot, the list to push now that the key is deleted; for Spring, what each publish reached.
async fn release_on(
    member: &str,
    watch: &RedisWatchConfig,
    key: &[u8],
    compare: Compare<'_>,
) -> (Answer, After) {
    let none = After::default;
    let client = match super::collect::client_for(member, watch) {
        Ok(client) => client,
        Err(e) => return (Answer::Unreachable(e.to_string()), none()),
    };
    let connect = super::collect::connect_with(
        &client,
        RELEASE_CONNECT_TIMEOUT,
        // The script's own bound below is the one that answers "timed out".
        RELEASE_COMMAND_TIMEOUT + Duration::from_secs(1),
    );
    let mut conn = match tokio::time::timeout(RELEASE_CONNECT_TIMEOUT, connect).await {
        Ok(Ok(conn)) => conn,
        // Refused credentials: a server answered.
        Ok(Err(e @ RedisError::Auth(_))) => return (Answer::Error(e.to_string()), none()),
        Ok(Err(e)) => return (Answer::Unreachable(e.to_string()), none()),
        Err(_) => {
            let e = RedisError::Timeout {
                what: "connect",
                after: RELEASE_CONNECT_TIMEOUT,
            };
            return (Answer::Unreachable(e.to_string()), none());
        }
    };
    if compare.mode == "spring" {
        let result =
            run_spring_script(&mut conn, key, compare.holder, compare.spring_channels).await;
        let receivers = match &result {
            Ok((1, .., receivers)) => Some(receivers.clone()),
            _ => None,
        };
        let answer = answer_of(result.map(|(code, what, text, len, _)| (code, what, text, len)));
        return (
            answer,
            After {
                signal: None,
                receivers,
            },
        );
    }
    let mut result = run_script(
        &mut conn,
        key,
        &compare,
        compare.mode,
        compare.second,
        compare.third,
    )
    .await;
    let mut signal = None;
    // python-redis-lock's signal list is in another Cluster slot than its lock key; the same
    // goes for Redisson companions of a name whose brace is no hash tag. The compare-and-delete
    // then runs on the key alone, and the signal is pushed after it.
    if result.as_ref().is_err_and(|e| e.says("CROSSSLOT")) {
        let alone = if compare.mode == "pyrl" {
            "string"
        } else {
            compare.mode
        };
        result = run_script(&mut conn, key, &compare, alone, key, key).await;
        if compare.mode == "pyrl" && matches!(result, Ok((1, ..))) {
            signal = Some(compare.second.to_vec());
        }
    }
    (
        answer_of(result),
        After {
            signal,
            receivers: None,
        },
    )
}

/// A member's answer from a release script's `{code, what, text, length}`.
fn answer_of(result: Result<(i64, String, Vec<u8>, i64), RedisError>) -> Answer {
    match result {
        Ok((1, _, text, len)) => Answer::Deleted(bounded::answer_text(&text, len)),
        Ok((_, what, text, len)) if what == "mismatch" => {
            Answer::Refused(Some(bounded::answer_text(&text, len)))
        }
        Ok(_) => Answer::Refused(None),
        // A Cluster master that does not own the key's slot says MOVED: not here.
        Err(e) if e.says("MOVED") => Answer::NotHere,
        Err(e) => Answer::Error(e.to_string()),
    }
}

/// One call of [`SPRING_RELEASE_SCRIPT`] under [`RELEASE_COMMAND_TIMEOUT`]: the answer and, once
/// deleted, the subscribers each channel's `PUBLISH` reached.
async fn run_spring_script(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    holder: &[u8],
    channels: &[Vec<u8>],
) -> Result<(i64, String, Vec<u8>, i64, Vec<i64>), RedisError> {
    let mut invocation = SPRING_RELEASE_SCRIPT.key(key);
    invocation.arg(holder);
    for channel in channels {
        invocation.arg(channel.as_slice());
    }
    let call = invocation.invoke_async::<(i64, String, Vec<u8>, i64, Vec<i64>)>(conn);
    match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, call).await {
        Ok(result) => result.map_err(|source| RedisError::Script {
            script: "spring release",
            source,
        }),
        Err(_) => Err(RedisError::Timeout {
            what: "spring release script",
            after: RELEASE_COMMAND_TIMEOUT,
        }),
    }
}

/// One call of [`RELEASE_SCRIPT`] under [`RELEASE_COMMAND_TIMEOUT`] (`EVALSHA`, and `SCRIPT
/// LOAD` + `EVALSHA` again on a server that does not have it yet).
async fn run_script(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    c: &Compare<'_>,
    mode: &str,
    second: &[u8],
    third: &[u8],
) -> Result<(i64, String, Vec<u8>, i64), RedisError> {
    let mut invocation = RELEASE_SCRIPT.key(key);
    invocation
        .key(second)
        .key(third)
        .arg(mode)
        .arg(c.holder)
        .arg(c.count)
        .arg(c.channel)
        .arg(c.message)
        .arg(c.now)
        .arg(if c.sharded { "1" } else { "0" })
        .arg(c.digest.0)
        .arg(c.digest.1);
    let call = invocation.invoke_async::<(i64, String, Vec<u8>, i64)>(conn);
    match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, call).await {
        Ok(result) => result.map_err(|source| RedisError::Script {
            script: "release",
            source,
        }),
        Err(_) => Err(RedisError::Timeout {
            what: "release script",
            after: RELEASE_COMMAND_TIMEOUT,
        }),
    }
}

/// The outcome of a release from each asked member's answer. `quorum`: a Redlock set's majority.
fn verdict(
    key: &str,
    holder: &str,
    quorum: Option<usize>,
    answers: &[(String, Answer)],
) -> Outcome {
    let mut deleted = Vec::new();
    let mut refused = Vec::new();
    let mut failed = Vec::new();
    let mut unreachable = Vec::new();
    let mut moved = 0;
    for (member, answer) in answers {
        match answer {
            Answer::Deleted(what) => deleted.push(json!({"member": member, "deleted": what})),
            Answer::Refused(current) => {
                refused.push(json!({"member": member, "current": current}));
            }
            Answer::NotHere => moved += 1,
            Answer::Unreachable(e) => unreachable.push(format!("{member}: {e}")),
            Answer::Error(e) => failed.push(format!("{member}: {e}")),
        }
    }
    let not_answered: Vec<String> = failed.iter().chain(&unreachable).cloned().collect();
    if !deleted.is_empty() {
        let short_of_quorum = quorum.is_some_and(|q| deleted.len() < q);
        if short_of_quorum && !not_answered.is_empty() {
            // Masters that did not answer may still hold it: a majority may hold on.
            return Outcome::Failed(format!(
                "deleted on {} master(s) only ({}), short of a majority; not released on: {}",
                deleted.len(),
                deleted
                    .iter()
                    .filter_map(|d| d["member"].as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                not_answered.join("; ")
            ));
        }
        return Outcome::Released(json!({
            "key": key,
            "holder": holder,
            "members": deleted,
            "refused_on": refused,
            "failed_on": not_answered,
        }));
    }
    if !refused.is_empty() {
        return Outcome::HolderChanged(json!({
            "message": "the key no longer holds that holder",
            "key": key,
            "members": refused,
            "failed_on": not_answered,
        }));
    }
    if !failed.is_empty() {
        return Outcome::Failed(not_answered.join("; "));
    }
    if !unreachable.is_empty() {
        return Outcome::Unavailable(format!(
            "no member could be reached, nothing was changed: {}",
            unreachable.join("; ")
        ));
    }
    Outcome::Unavailable(format!(
        "every member asked ({moved}) answered MOVED: the key's master is not one lockscope knows yet"
    ))
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
            let connect = super::collect::connect_with(
                &client,
                RELEASE_CONNECT_TIMEOUT,
                RELEASE_COMMAND_TIMEOUT,
            );
            let mut conn = tokio::time::timeout(RELEASE_CONNECT_TIMEOUT, connect)
                .await
                .map_err(|_| RedisError::Timeout {
                    what: "connect",
                    after: RELEASE_CONNECT_TIMEOUT,
                })??;
            let mut pipe = redis::pipe();
            let push = pipe
                .atomic()
                .del(signal)
                .ignore()
                .lpush(signal, 1)
                .ignore()
                .pexpire(signal, 1000)
                .ignore()
                .query_async::<()>(&mut conn);
            tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, push)
                .await
                .map_err(|_| RedisError::Timeout {
                    what: "MULTI DEL/LPUSH/PEXPIRE",
                    after: RELEASE_COMMAND_TIMEOUT,
                })?
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
/// now (epoch ms), '1' to SPUBLISH as well as PUBLISH, and for a truncated holder its length and
/// digest (else ''). Returns {1, 'deleted', what, length} or {0, 'absent'|'mismatch', what is
/// there, length}: `what` at most [`bounded::ANSWER_SHOWN`] bytes of it (a refusal never carries
/// a whole 512 MB value), `length` its full length.
///
/// Modes: `string` compares the whole value (token, SETNX, Redlock, ShedLock) — its length
/// first, so a long value is never read to be refused — or, for a truncated holder, its length
/// and digest over bounded reads; `pyrl` also wakes python-redis-lock's `BLPOP` waiters as its
/// unlock does (a fresh one-element signal list expiring in a second); `hash` is a Redisson lock
/// whose only holder must be the named field (a truncated one found by length and digest) with
/// the named count: it deletes, publishes the unlock message, then does what every Redisson
/// FairLock script does (drop head entries of the queue whose timeout passed, wake the new head
/// on `<channel>:<head>`); `rw` is a Redisson read-write lock held by the named field alone (a
/// writer's own read re-entries aside).
static RELEASE_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(&format!(
        "{}{}",
        *bounded::DIGEST_LUA,
        r#"
local ANSWER = __ANSWER__
local mode, holder, count, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local message, now, sharded = ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1'
local dlen, digest = tonumber(ARGV[8]), ARGV[9] or ''
-- Redis does not name a command a script may not run: ask first (Redis >= 7) and name it.
local function need(...)
  if redis.acl_check_cmd and not redis.acl_check_cmd(...) then
    local args = {...}
    error({err = 'NOPERM the ACL user may not run ' .. args[1] .. ' on ' .. args[2] .. ' (force release needs it; see README\'s ACL)'})
  end
end
need('TYPE', KEYS[1])
if mode ~= 'zset' and mode ~= 'tokens' then need('DEL', KEYS[1]) end
if mode == 'zset' then
  need('ZSCORE', KEYS[1], 'm') need('ZREM', KEYS[1], 'm')
elseif mode == 'tokens' then
  need('ZSCORE', KEYS[1], 'm') need('ZREM', KEYS[1], 'm')
  need('ZREVRANGE', KEYS[1], '0', '0', 'WITHSCORES') need('PEXPIREAT', KEYS[1], '1')
elseif mode == 'string' or mode == 'pyrl' then
  need('STRLEN', KEYS[1]) need('GETRANGE', KEYS[1], '0', '1') need('GET', KEYS[1])
  if mode == 'pyrl' then
    need('DEL', KEYS[2]) need('LPUSH', KEYS[2], '1') need('PEXPIRE', KEYS[2], '1000')
  end
else
  need('HKEYS', KEYS[1]) need('HGET', KEYS[1], 'f') need('PUBLISH', channel, message)
  if sharded then need('SPUBLISH', channel, message) end
  if mode == 'hash' then
    need('TYPE', KEYS[2]) need('LINDEX', KEYS[2], '0') need('LPOP', KEYS[2])
    need('ZSCORE', KEYS[3], 'm') need('ZREM', KEYS[3], 'm')
  end
end
local function wake(ch)
  redis.call('PUBLISH', ch, message)
  if sharded then redis.call('SPUBLISH', ch, message) end
end
local function clip(s)
  return string.sub(s, 1, ANSWER)
end
local function fields_text(fields)
  local shown = {}
  for i, f in ipairs(fields) do
    if i > 8 then shown[#shown + 1] = '…' break end
    shown[#shown + 1] = clip(f)
  end
  return clip(table.concat(shown, ','))
end
local function answer(code, what, text)
  return {code, what, clip(text), #text}
end
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return {0, 'absent', '', 0} end
if mode == 'zset' then
  -- redis-semaphore: `message` is the score seen, `count` a MultiSemaphore's permits. Every
  -- member must still be scored so (a refresh re-scores it; a re-acquire is another id), and a
  -- MultiSemaphore must hold exactly those permits; then all of them go in one ZREM, as the
  -- library's own release does.
  if t ~= 'zset' then return answer(0, 'mismatch', 'a ' .. t) end
  local members = {}
  if count == '' then
    members[1] = holder
  else
    for i = 0, tonumber(count) - 1 do members[#members + 1] = holder .. '_' .. i end
    if redis.call('ZSCORE', KEYS[1], holder .. '_' .. count) then
      return answer(0, 'mismatch', holder .. ' holds more than ' .. count .. ' permits')
    end
  end
  local seen = tonumber(message)
  for _, m in ipairs(members) do
    local score = redis.call('ZSCORE', KEYS[1], m)
    if not score then return answer(0, 'mismatch', m .. ' is not in the set') end
    if tonumber(score) ~= seen then
      return answer(0, 'mismatch', m .. ' scored ' .. score .. ' (refreshed or re-acquired since)')
    end
  end
  redis.call('ZREM', KEYS[1], unpack(members))
  return answer(1, 'deleted', holder .. ' scored ' .. message)
end
if mode == 'tokens' then
  -- A token set: `message` is the token's score seen (whole ms), `count` the write marker. The
  -- token must still be scored so (a refresh re-scores it); it and the marker go, and the key expires at
  -- the latest score left, as Symfony Lock's own delete script does.
  if t ~= 'zset' then return answer(0, 'mismatch', 'a ' .. t) end
  local score = redis.call('ZSCORE', KEYS[1], holder)
  if not score then return answer(0, 'mismatch', holder .. ' is not in the set') end
  if math.floor(tonumber(score)) ~= tonumber(message) then
    return answer(0, 'mismatch', holder .. ' scored ' .. score .. ' (refreshed since)')
  end
  redis.call('ZREM', KEYS[1], holder, count)
  local latest = redis.call('ZREVRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
  if latest then redis.call('PEXPIREAT', KEYS[1], latest) end
  return answer(1, 'deleted', holder .. ' scored ' .. message)
end
if mode == 'string' or mode == 'pyrl' then
  if t ~= 'string' then return answer(0, 'mismatch', 'a ' .. t) end
  local n = redis.call('STRLEN', KEYS[1])
  local head = redis.call('GETRANGE', KEYS[1], 0, ANSWER - 1)
  if digest ~= '' then
    if n ~= dlen or string_digest(KEYS[1], n) ~= digest then return {0, 'mismatch', head, n} end
  else
    if n ~= #holder or redis.call('GET', KEYS[1]) ~= holder then return {0, 'mismatch', head, n} end
  end
  redis.call('DEL', KEYS[1])
  if mode == 'pyrl' then
    redis.call('DEL', KEYS[2])
    redis.call('LPUSH', KEYS[2], 1)
    redis.call('PEXPIRE', KEYS[2], 1000)
  end
  return {1, 'deleted', head, n}
end
if t ~= 'hash' then return answer(0, 'mismatch', 'a ' .. t) end
local fields = redis.call('HKEYS', KEYS[1])
if digest ~= '' then
  holder = nil
  for _, f in ipairs(fields) do
    if #f == dlen and text_digest(f) == digest then holder = f break end
  end
  if not holder then return answer(0, 'mismatch', fields_text(fields)) end
end
local c = redis.call('HGET', KEYS[1], holder)
if not c then return answer(0, 'mismatch', fields_text(fields)) end
local held = clip(holder) .. ' x' .. clip(c)
if count ~= '' and tonumber(c) ~= tonumber(count) then return answer(0, 'mismatch', held) end
if mode == 'rw' then
  local own = string.gsub(holder, ':write$', '')
  for _, f in ipairs(fields) do
    if f ~= 'mode' and f ~= holder and f ~= own then
      return answer(0, 'mismatch', fields_text(fields))
    end
  end
  redis.call('DEL', KEYS[1])
  wake(channel)
  return answer(1, 'deleted', held)
end
if #fields ~= 1 then return answer(0, 'mismatch', fields_text(fields)) end
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
return answer(1, 'deleted', held)
"#
        .replace("__ANSWER__", &bounded::ANSWER_SHOWN.to_string())
    ))
});

/// Spring Integration `RedisLockRegistry` (7.2.0-SNAPSHOT @ f369e899, `RedisLockRegistry.java`):
/// compare-and-delete as its own unlock scripts do (`GET` equal to the client id, then `UNLINK`,
/// L788 and L917), then what its PUB_SUB_LOCK unlock does for its waiters, on every channel
/// given: `PUBLISH <channel> <key>`. Publishing is harmless to SPIN_LOCK registries (they have
/// no subscriber and retry within `idleBetweenTries`, 100 ms by default); the server cannot tell
/// the two types apart. KEYS[1] the lock key; ARGV[1] the client id seen, ARGV[2..] the
/// channels. The value's length is compared first, so a long value is never read to be
/// refused. Returns `{1, 'deleted', value, length, {receivers per channel}}` or `{0,
/// 'absent'|'mismatch', what is there (bounded), length, {}}`.
static SPRING_RELEASE_SCRIPT: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        &r#"
local ANSWER = __ANSWER__
local holder = ARGV[1]
local function need(...)
  if redis.acl_check_cmd and not redis.acl_check_cmd(...) then
    local args = {...}
    error({err = 'NOPERM the ACL user may not run ' .. args[1] .. ' on ' .. args[2] .. ' (force release needs it; see README\'s ACL)'})
  end
end
need('TYPE', KEYS[1]) need('STRLEN', KEYS[1]) need('GETRANGE', KEYS[1], '0', '1')
need('GET', KEYS[1]) need('UNLINK', KEYS[1])
for i = 2, #ARGV do need('PUBLISH', ARGV[i], KEYS[1]) end
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then return {0, 'absent', '', 0, {}} end
if t ~= 'string' then
  local what = 'a ' .. t
  return {0, 'mismatch', what, #what, {}}
end
local n = redis.call('STRLEN', KEYS[1])
local head = redis.call('GETRANGE', KEYS[1], 0, ANSWER - 1)
if n ~= #holder or redis.call('GET', KEYS[1]) ~= holder then return {0, 'mismatch', head, n, {}} end
redis.call('UNLINK', KEYS[1])
local receivers = {}
for i = 2, #ARGV do receivers[#receivers + 1] = redis.call('PUBLISH', ARGV[i], KEYS[1]) end
return {1, 'deleted', head, n, receivers}
"#
        .replace("__ANSWER__", &bounded::ANSWER_SHOWN.to_string()),
    )
});

impl lockscope_core::release::Releaser for RedisReleaser {
    fn release<'a>(
        &'a self,
        lock: &'a LockView,
        holder: &'a HolderView,
        request: &'a lockscope_model::wire::ReleaseRequest,
        members: &'a [String],
    ) -> futures::future::BoxFuture<'a, Outcome> {
        Box::pin(RedisReleaser::release(
            self,
            lock,
            holder,
            request.reentrancy,
            request.version.as_deref(),
            members,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_semaphore_versions_name_score_and_permits() {
        assert_eq!(
            parse_semaphore_version("1795000000000"),
            Some((1_795_000_000_000, None))
        );
        assert_eq!(
            parse_semaphore_version("1795000000000x3"),
            Some((1_795_000_000_000, Some(3)))
        );
        assert_eq!(parse_semaphore_version("1795000000000x0"), None);
        assert_eq!(parse_semaphore_version("12:abc"), None);
        assert_eq!(parse_semaphore_version(""), None);
    }

    fn deleted(m: &str) -> (String, Answer) {
        (m.into(), Answer::Deleted("tok".into()))
    }

    #[test]
    fn verdicts_tell_unreachable_from_failed_from_changed() {
        let verdict = |quorum, answers: &[(String, Answer)]| verdict("k", "tok", quorum, answers);
        let unreachable = |m: &str| {
            (
                m.to_string(),
                Answer::Unreachable("connect: refused".into()),
            )
        };
        let error = |m: &str| {
            (
                m.to_string(),
                Answer::Error("release script: timed out".into()),
            )
        };
        let refused = |m: &str| (m.to_string(), Answer::Refused(Some("other".into())));
        let moved = |m: &str| (m.to_string(), Answer::NotHere);
        assert!(matches!(
            verdict(None, &[unreachable("a")]),
            Outcome::Unavailable(_)
        ));
        assert!(matches!(
            verdict(None, &[moved("a"), moved("b")]),
            Outcome::Unavailable(_)
        ));
        assert!(matches!(
            verdict(None, &[moved("a"), unreachable("b")]),
            Outcome::Unavailable(_)
        ));
        assert!(matches!(verdict(None, &[error("a")]), Outcome::Failed(_)));
        assert!(matches!(
            verdict(None, &[error("a"), unreachable("b")]),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            verdict(None, &[refused("a"), error("b")]),
            Outcome::HolderChanged(_)
        ));
        assert!(matches!(
            verdict(None, &[deleted("a"), moved("b")]),
            Outcome::Released(_)
        ));
        // A Redlock: a majority deleted is released, with what failed where.
        let Outcome::Released(detail) = verdict(Some(2), &[deleted("a"), deleted("b"), error("c")])
        else {
            panic!("a majority deleted is released");
        };
        assert_eq!(detail["failed_on"][0], "c: release script: timed out");
        // Short of a majority while masters did not answer: they may still hold it.
        assert!(matches!(
            verdict(Some(2), &[deleted("a"), error("b"), unreachable("c")]),
            Outcome::Failed(_)
        ));
        // Short of a majority where the rest answered that the holder is not there: gone.
        assert!(matches!(
            verdict(Some(2), &[deleted("a"), refused("b"), refused("c")]),
            Outcome::Released(_)
        ));
    }
}
