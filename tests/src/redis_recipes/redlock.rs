//! Redlock over independent masters with `SET NX` tokens. (See the parent module for what these clients follow.)

use super::*;

/// Redlock (redis.io's algorithm, as redlock-py, node-redlock and redsync do it; Redisson's
/// `RedissonRedLock` is different, see [`RedissonRedLock`]) over independent masters: the same
/// `SET key token NX PX ttl` on every master, held when a majority (`n/2 + 1`) got it and time is left of the validity (`ttl - elapsed - drift`, drift =
/// `ttl/100 + 2` ms).
pub struct Redlock {
    pub conns: Vec<MultiplexedConnection>,
}

impl Redlock {
    /// One connection per master URL.
    pub async fn connect(urls: &[String]) -> Result<Redlock> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            conns.push(crate::support::redis::connect(url).await?);
        }
        Ok(Redlock { conns })
    }

    /// `n/2 + 1`
    pub fn quorum(&self) -> usize {
        self.conns.len() / 2 + 1
    }

    /// One Redlock attempt: `true` when a majority was reached within the validity time;
    /// otherwise the key is released (compare-and-delete) on every master and `false` returned.
    pub async fn lock(&self, key: &str, token: &str, ttl_ms: u64) -> Result<bool> {
        let started = std::time::Instant::now();
        let all: Vec<usize> = (0..self.conns.len()).collect();
        let got = self.set_on(&all, key, token, ttl_ms).await;
        let elapsed = started.elapsed().as_millis() as u64;
        let drift = ttl_ms / 100 + 2;
        let valid = ttl_ms > elapsed + drift;
        if got >= self.quorum() && valid {
            return Ok(true);
        }
        self.unlock(key, token).await?;
        Ok(false)
    }

    /// Compare-and-delete on every master; how many deleted it.
    pub async fn unlock(&self, key: &str, token: &str) -> Result<usize> {
        let releases = self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { token_lock_release(&mut c, key, token).await }
        });
        let results = futures::future::join_all(releases).await;
        let mut deleted = 0;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        // A dead master is expected in Redlock tests; fail only when none answered.
        match first_error {
            Some(e) if deleted == 0 => Err(e),
            _ => Ok(deleted),
        }
    }

    /// `SET key token NX PX ttl_ms` on the masters in `indices` only (no majority check, no
    /// rollback): builds minority/split states for tests. Returns how many were set.
    pub async fn lock_on(
        &self,
        indices: &[usize],
        key: &str,
        token: &str,
        ttl_ms: u64,
    ) -> Result<usize> {
        if let Some(bad) = indices.iter().find(|i| **i >= self.conns.len()) {
            anyhow::bail!("no master {bad} (have {})", self.conns.len());
        }
        Ok(self.set_on(indices, key, token, ttl_ms).await)
    }

    /// SET NX PX on `indices` concurrently, each with a short timeout (a dead master counts as a
    /// failure, as in Redlock); how many succeeded.
    async fn set_on(&self, indices: &[usize], key: &str, token: &str, ttl_ms: u64) -> usize {
        let per_node = Duration::from_millis((ttl_ms / 10).clamp(50, 1000));
        let sets = indices.iter().map(|&i| {
            let mut c = self.conns[i].clone();
            async move {
                tokio::time::timeout(per_node, token_lock_acquire(&mut c, key, token, ttl_ms))
                    .await
                    .ok()
                    .and_then(|r| r.ok())
                    .unwrap_or(false)
            }
        });
        futures::future::join_all(sets)
            .await
            .into_iter()
            .filter(|ok| *ok)
            .count()
    }
}
