//! Spring Integration's `RedisLockRegistry` and its unlock listener. (See the parent module for what these clients follow.)

use super::*;

//
// Source read (facts only; every script below is written here, not copied):
// spring-projects/spring-integration main @ f369e899dd3007756e4da49273e201b85afa5cc7
// (7.2.0-SNAPSHOT), `spring-integration-redis/src/main/java/org/springframework/integration/
// redis/util/RedisLockRegistry.java`: `DEFAULT_EXPIRE_AFTER` L126, `DEFAULT_IDLE` L130, the
// client id L150, `supportsCasCadOperations` L195, the unlock channel L229 and the listener's
// pattern topic L233-245, the CAS/CAD fallback test L424-429, the obtain script L433-443, the
// renew script L445-451, `constructLockKey` L477-479, the renewal every `expireAfter / 3`
// L596-606, `renew` L681-712, the PUB_SUB_LOCK unlock script and its call L788-816, its wait
// loop L818-858, the message listener L886-910, the SPIN_LOCK wait L930-950 and its unlock
// L915-927 and L952-980. The two lock types (`setRedisLockType`) leave the same key; they
// differ in how they wait and unlock.

/// `DEFAULT_EXPIRE_AFTER` (L126): a lock's PX unless the registry or the call says otherwise.
pub const SPRING_DEFAULT_EXPIRE_AFTER_MS: u64 = 60_000;
/// `DEFAULT_IDLE` (L130): a SPIN_LOCK waiter's sleep between two obtain attempts.
pub const SPRING_DEFAULT_IDLE: Duration = Duration::from_millis(100);

/// The obtain script (both lock types, L433): the key is taken when absent (`SET … PX`) and
/// re-taken by its own client id (PEXPIRE: re-entry across the registry's threads is local,
/// nothing else is written). KEYS = [key]; ARGV = [client id, expireAfter ms]. Lua `true`
/// reaches the client as 1, `false` as nil.
static SPRING_OBTAIN: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "local held = redis.call('GET', KEYS[1])
if not held then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return true
end
if held == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return true
end
return false",
    )
});

/// The renew fallback script (L445): PEXPIRE only while the key holds this client id.
/// KEYS = [key]; ARGV = [client id, ttl ms].
static SPRING_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return true",
    )
});

/// SPIN_LOCK's unlock fallback script (L917): UNLINK only while the key holds this client id.
/// KEYS = [key]; ARGV = [client id].
static SPRING_SPIN_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
redis.call('UNLINK', KEYS[1])
return true",
    )
});

/// PUB_SUB_LOCK's unlock script (L788, always a script): UNLINK while the key holds this client
/// id and, when that removed it, PUBLISH the key itself on the unlock channel. KEYS = [key];
/// ARGV = [client id, `<registryKey>-channel:<key>`].
static SPRING_PUB_SUB_UNLOCK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
if redis.call('UNLINK', KEYS[1]) ~= 1 then return false end
redis.call('PUBLISH', ARGV[2], KEYS[1])
return true",
    )
});

/// Whether a Redis error is the one the registry takes for "this server has no CAS/CAD"
/// (`isCasCadNotSupportedError`, L424: the message contains `ERR syntax error` or `ERR unknown
/// command`); it then uses the scripts from there on.
fn cas_cad_unsupported(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    // redis-rs splits the code from the detail (`syntax error`, `unknown command 'DELEX' …`).
    text.contains("syntax error") || text.contains("unknown command")
}

/// One `RedisLockRegistry` instance: its `registryKey`, the client id it was born with
/// (`UUID.randomUUID()`, one per registry, shared by all its threads and locks: the only thing
/// on the server that says who holds) and its default expiry. Whether the server has Redis
/// 8.4's CAS/CAD commands is learnt at the first renew or SPIN_LOCK unlock, as the registry
/// does. A lock key is `<registryKey>:<lockKey>` ([`Self::key`]).
#[derive(Debug)]
pub struct SpringLockRegistry {
    pub registry_key: String,
    pub client_id: String,
    pub expire_after_ms: u64,
    cas_cad: std::sync::atomic::AtomicBool,
}

/// How a PUB_SUB_LOCK `tryLock` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpringAcquire {
    /// The first obtain took it.
    Immediately,
    /// Taken after an unlock message for this key completed the wait.
    AfterMessage,
    /// Taken after a wait ran out without a message (the registry's fallback for keys that
    /// expire instead of being unlocked).
    AfterTimeout,
    /// The wait time passed without it.
    NotAcquired,
}

impl SpringLockRegistry {
    /// `new RedisLockRegistry(connectionFactory, registryKey)`: a fresh client id, 60 s expiry.
    pub fn new(registry_key: &str) -> SpringLockRegistry {
        Self::with_expire_after(registry_key, SPRING_DEFAULT_EXPIRE_AFTER_MS)
    }

    /// `new RedisLockRegistry(connectionFactory, registryKey, expireAfter)`.
    pub fn with_expire_after(registry_key: &str, expire_after_ms: u64) -> SpringLockRegistry {
        SpringLockRegistry {
            registry_key: registry_key.to_string(),
            client_id: random_uuid(),
            expire_after_ms,
            cas_cad: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// `constructLockKey(path)`: `<registryKey>:<lockKey>`, no escaping.
    pub fn key(&self, lock_key: &str) -> String {
        format!("{}:{lock_key}", self.registry_key)
    }

    /// The channel a PUB_SUB_LOCK unlock of `lock_key` publishes its full key on:
    /// `<registryKey>-channel:<registryKey>:<lockKey>` (L812; before 7.0.0 / 6.5.3 / 6.4.8 it
    /// was `<registryKey>-channel` alone).
    pub fn unlock_channel(&self, lock_key: &str) -> String {
        format!("{}-channel:{}", self.registry_key, self.key(lock_key))
    }

    /// The pattern its message listener container subscribes (`PatternTopic`, L239).
    pub fn unlock_pattern(&self) -> String {
        format!("{}-channel:*", self.registry_key)
    }

    /// `obtainLock(expireAfter)` (L608): the obtain script; `true` when this registry holds the
    /// key now (taken, or re-taken with a fresh expiry).
    pub async fn obtain(
        &self,
        conn: &mut MultiplexedConnection,
        lock_key: &str,
        expire_after_ms: u64,
    ) -> Result<bool> {
        let key = self.key(lock_key);
        let r: Option<i64> = eval(
            conn,
            &SPRING_OBTAIN,
            &[&key],
            &[&self.client_id, &expire_after_ms.to_string()],
        )
        .await
        .with_context(|| format!("Spring obtain {key}"))?;
        Ok(r == Some(1))
    }

    /// `renew(expireAfter)` (L681): Redis 8.4's `SET key id IFEQ id PX|EX ttl` while the
    /// server takes it; once it answers `syntax error` / `unknown command`, the renew script
    /// from then on. `false` when the key no longer holds this client id (the registry then
    /// stops renewing and `renewLock` throws "Could not renew mutex at …").
    pub async fn renew(
        &self,
        conn: &mut MultiplexedConnection,
        lock_key: &str,
        ttl_ms: u64,
    ) -> Result<bool> {
        use std::sync::atomic::Ordering;
        let key = self.key(lock_key);
        if self.cas_cad.load(Ordering::Relaxed) {
            // Spring Data Redis sends the expiry in seconds when it is whole seconds.
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key)
                .arg(&self.client_id)
                .arg("IFEQ")
                .arg(&self.client_id);
            if ttl_ms.is_multiple_of(1000) {
                cmd.arg("EX").arg(ttl_ms / 1000);
            } else {
                cmd.arg("PX").arg(ttl_ms);
            }
            match cmd.query_async::<Option<String>>(conn).await {
                Ok(set) => return Ok(set.is_some()),
                Err(e) if cas_cad_unsupported(&e) => self.cas_cad.store(false, Ordering::Relaxed),
                Err(e) => return Err(e).with_context(|| format!("Spring renew {key} (CAS)")),
            }
        }
        let r: Option<i64> = eval(
            conn,
            &SPRING_RENEW,
            &[&key],
            &[&self.client_id, &ttl_ms.to_string()],
        )
        .await
        .with_context(|| format!("Spring renew {key}"))?;
        Ok(r == Some(1))
    }

    /// Whether this registry found the server without CAS/CAD (and uses the scripts).
    pub fn uses_scripts(&self) -> bool {
        !self.cas_cad.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// SPIN_LOCK `unlock` (`removeLockKeyInnerUnlink`, L952): Redis 8.4's `DELEX key IFEQ id`
    /// while the server takes it, else the UNLINK script. `false` when the key no longer held
    /// this client id: the registry then throws `ConcurrentModificationException` ("Lock was
    /// released in the store due to expiration …").
    pub async fn unlock_spin(
        &self,
        conn: &mut MultiplexedConnection,
        lock_key: &str,
    ) -> Result<bool> {
        use std::sync::atomic::Ordering;
        let key = self.key(lock_key);
        if self.cas_cad.load(Ordering::Relaxed) {
            let r = redis::cmd("DELEX")
                .arg(&key)
                .arg("IFEQ")
                .arg(&self.client_id)
                .query_async::<i64>(conn)
                .await;
            match r {
                Ok(n) => return Ok(n == 1),
                Err(e) if cas_cad_unsupported(&e) => self.cas_cad.store(false, Ordering::Relaxed),
                Err(e) => return Err(e).with_context(|| format!("Spring unlock {key} (CAD)")),
            }
        }
        let r: Option<i64> = eval(conn, &SPRING_SPIN_UNLOCK, &[&key], &[&self.client_id])
            .await
            .with_context(|| format!("Spring unlock {key}"))?;
        Ok(r == Some(1))
    }

    /// PUB_SUB_LOCK `unlock` (L811): the unlink-and-publish script on
    /// [`Self::unlock_channel`]. `false` as for [`Self::unlock_spin`].
    pub async fn unlock_pub_sub(
        &self,
        conn: &mut MultiplexedConnection,
        lock_key: &str,
    ) -> Result<bool> {
        let key = self.key(lock_key);
        let channel = self.unlock_channel(lock_key);
        let r: Option<i64> = eval(
            conn,
            &SPRING_PUB_SUB_UNLOCK,
            &[&key],
            &[&self.client_id, &channel],
        )
        .await
        .with_context(|| format!("Spring unlock {key}"))?;
        Ok(r == Some(1))
    }

    /// SPIN_LOCK `tryLock(wait)` (`tryRedisLockInner`, L930): obtain until it succeeds or
    /// `wait` has passed, sleeping `idle` (the registry's `idleBetweenTries`) between attempts.
    /// These sleeps are the library's own polling, not a test waiting for something.
    pub async fn try_lock_spin(
        &self,
        conn: &mut MultiplexedConnection,
        lock_key: &str,
        wait: Duration,
        idle: Duration,
    ) -> Result<bool> {
        let until = std::time::Instant::now() + wait;
        loop {
            if self.obtain(conn, lock_key, self.expire_after_ms).await? {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            tokio::time::sleep(idle).await;
        }
    }

    /// PUB_SUB_LOCK `tryLock(wait)` (`subscribeLock`, L818): obtain; then, with the registry's
    /// message listener running, while the wait time lasts: register a future for the full
    /// key, obtain once more (a release between the two would otherwise be missed), wait for
    /// the future up to the whole `wait` again (the registry's `waitTime` is the `tryLock`
    /// time, not what is left of it), obtain, and drop the future. Says which of these took it.
    pub async fn try_lock_pub_sub(
        &self,
        conn: &mut MultiplexedConnection,
        listener: &SpringUnlockListener,
        lock_key: &str,
        wait: Duration,
    ) -> Result<SpringAcquire> {
        let until = std::time::Instant::now() + wait;
        if self.obtain(conn, lock_key, self.expire_after_ms).await? {
            return Ok(SpringAcquire::Immediately);
        }
        let key = self.key(lock_key);
        while std::time::Instant::now() <= until {
            let mut future = listener.subscribe_lock(&key);
            let attempt = async {
                if self.obtain(conn, lock_key, self.expire_after_ms).await? {
                    return Ok(Some(SpringAcquire::Immediately));
                }
                let woken = tokio::time::timeout(wait, future.wait_for(|done| *done))
                    .await
                    .is_ok_and(|r| r.is_ok());
                let how = if woken {
                    SpringAcquire::AfterMessage
                } else {
                    SpringAcquire::AfterTimeout
                };
                Ok::<_, anyhow::Error>(
                    self.obtain(conn, lock_key, self.expire_after_ms)
                        .await?
                        .then_some(how),
                )
            }
            .await;
            listener.unsubscribe_lock(&key);
            if let Some(how) = attempt? {
                return Ok(how);
            }
        }
        Ok(SpringAcquire::NotAcquired)
    }
}

/// A registry's `RedisMessageListenerContainer` with its `RedisUnLockNotifyMessageListener`
/// (L233-245, L886-910): one connection `PSUBSCRIBE`d to `<registryKey>-channel:*`, shared by
/// every lock of the registry. A message's body is taken as a full lock key (the channel only
/// has to match the pattern) and completes the future registered for that key, if any. Nothing
/// of this is on the server but the pattern subscription itself (`PUBSUB NUMPAT`, `psub=1` in
/// `CLIENT LIST`): Redis lists no patterns and no waiters. Dropping it closes the connection.
pub struct SpringUnlockListener {
    pattern: String,
    futures: std::sync::Arc<
        std::sync::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<bool>>>,
    >,
    /// Message bodies received, in order (what woke, for a test to show).
    received: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    task: tokio::task::JoinHandle<()>,
}

impl SpringUnlockListener {
    /// Starts the listener of `registry` on the server at `url` (any Cluster node: a plain
    /// `PUBLISH` reaches every node's subscribers); returns once the server confirmed the
    /// pattern subscription.
    pub async fn start(url: &str, registry: &SpringLockRegistry) -> Result<SpringUnlockListener> {
        use tokio::io::AsyncWriteExt;
        let pattern = registry.unlock_pattern();
        let addr = host_port(url)?;
        let stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        .map_err(|_| anyhow::anyhow!("pub/sub connect to {url} timed out"))?
        .with_context(|| format!("pub/sub connect to {url}"))?;
        let (rd, mut wr) = stream.into_split();
        let mut rd = tokio::io::BufReader::new(rd);
        let mut request = format!("*2\r\n$10\r\nPSUBSCRIBE\r\n${}\r\n", pattern.len()).into_bytes();
        request.extend_from_slice(pattern.as_bytes());
        request.extend_from_slice(b"\r\n");
        wr.write_all(&request)
            .await
            .with_context(|| format!("PSUBSCRIBE {pattern}"))?;
        let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut rd))
            .await
            .map_err(|_| anyhow::anyhow!("PSUBSCRIBE {pattern}: no confirmation within 5 s"))?
            .with_context(|| format!("PSUBSCRIBE {pattern}"))?;
        match push_parts(&reply) {
            Some((b"psubscribe", p, Reply::Int(n))) if p == pattern.as_bytes() && *n >= 1 => {}
            _ => anyhow::bail!("PSUBSCRIBE {pattern} on {url} answered {reply:?}"),
        }
        let futures: std::sync::Arc<
            std::sync::Mutex<std::collections::HashMap<String, tokio::sync::watch::Sender<bool>>>,
        > = Default::default();
        let received: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>> = Default::default();
        let (notify, log) = (futures.clone(), received.clone());
        let task = tokio::spawn(async move {
            // Keep the write half alive: dropping it would shut the socket's sending side.
            let _wr = wr;
            while let Ok(reply) = read_reply(&mut rd).await {
                // `pmessage`, pattern, channel, body.
                let Reply::Array(items) = &reply else {
                    continue;
                };
                let [Reply::Bulk(Some(kind)), _, _, Reply::Bulk(Some(body))] = items.as_slice()
                else {
                    continue;
                };
                if kind != b"pmessage" {
                    continue;
                }
                log.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(body.clone());
                // `unlockNotify`: complete the future of the key the body names, if any.
                let key = String::from_utf8_lossy(body).into_owned();
                if let Some(future) = notify.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
                    future.send_replace(true);
                }
            }
        });
        Ok(SpringUnlockListener {
            pattern,
            futures,
            received,
            task,
        })
    }

    /// The subscribed pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// `subscribeLock(lockKey)`: the future of `key` (`computeIfAbsent`).
    fn subscribe_lock(&self, key: &str) -> tokio::sync::watch::Receiver<bool> {
        let mut futures = self.futures.lock().unwrap_or_else(|p| p.into_inner());
        futures
            .entry(key.to_string())
            .or_insert_with(|| tokio::sync::watch::channel(false).0)
            .subscribe()
    }

    /// `unSubscribeLock(lockKey)`.
    fn unsubscribe_lock(&self, key: &str) {
        self.futures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }

    /// Whether a waiter of this registry has a future registered for `key` (it waits, or is
    /// about to).
    pub fn waiting_on(&self, key: &str) -> bool {
        self.futures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(key)
    }

    /// The message bodies received so far.
    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for SpringUnlockListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}
