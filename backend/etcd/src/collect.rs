//! The etcd collector: one gRPC client per source. Bootstrap with a range of every prefix at one
//! revision R, read in pages of [`PAGE_KEYS`] keys all at R, then one watch per prefix from R+1
//! with previous values (never polling keys); messages up to [`MAX_MESSAGE`] are decoded (a
//! watch response carries a whole revision's events, however large); values are kept bounded
//! ([`Clipped`]);
//! after a reconnect the watches resume from the last revision seen, and a compacted revision
//! means a full read again. The TTL left of the leases that keys are bound to is read every
//! `lease_poll_interval`, and at once for a new lease (a new participant shows its TTL) and for
//! the lease of a deleted key that may have run out about then (gone, it tells a lease expiry
//! from a release); any other deletion goes on without a round trip (`may_have_expired`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, EventType, GetOptions, Identity, KeyValue, KvClient,
    TlsOptions, WatchOptions, WatchStream,
};
use lockscope_model::clip::Clipped;
use lockscope_model::etcd::EtcdKv;

use super::config::EtcdSourceConfig;
use super::state::EXPIRY_SLACK_MS;
use super::{EtcdError, EtcdEvent, EtcdUpdate, LeaseTtl};
use lockscope_core::collect::{Backoff, Heard, Outbox};

/// Leases asked per round at most (each is one small request).
const LEASES_PER_ROUND: usize = 2_000;

/// Runs the collector of one etcd source until the aggregator goes away.
pub async fn run(config: Arc<EtcdSourceConfig>, out: Outbox<EtcdUpdate>) {
    let mut backoff = Backoff::new();
    // The last revision the aggregator has: a new connection resumes after it.
    let mut resume: Option<i64> = None;
    // Key → lease of every key lockscope knows, kept across connections: after a compaction
    // the leases of keys that went meanwhile are asked too (see `resync`).
    let mut leases: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    // The endpoint to try first: the one after the last that failed.
    let mut next = 0;
    loop {
        backoff.attempt();
        let heard = Heard::new();
        let session = session(&config, &out, &mut resume, &mut leases, &mut next, &heard);
        let reason = match session.await {
            Ok(()) => return,
            Err(reason) => reason,
        };
        tracing::warn!(source = %config.name, %reason, "etcd source down; retrying");
        out.reconnected();
        let n = config.endpoints.len().max(1);
        let endpoint = config
            .endpoints
            .get((next + n - 1) % n)
            .cloned()
            .unwrap_or_default();
        if !out
            .send(EtcdUpdate::Status {
                up: false,
                error: Some(silence_said(
                    &reason.to_string(),
                    &endpoint,
                    config.silence_limit,
                )),
                // The gRPC keepalive checks the connection within the silence limit, and what
                // it hears is not shown: the source was as shown at least until then.
                last_seen_ms: Some(heard.last_seen_ms(Some(config.silence_limit))),
            })
            .await
        {
            return;
        }
        backoff.wait().await;
    }
}

/// A failure's text, led by what it means when it is silence: gRPC gives up a connection whose
/// keepalive pings go unanswered (`KeepAliveTimedOut`) or a request that gets no answer in
/// time, and says so only deep in its error.
fn silence_said(text: &str, endpoint: &str, limit: Duration) -> String {
    if text.contains("KeepAliveTimedOut") || text.contains("Timeout expired") {
        format!(
            "no answer from {endpoint} for {}: {text}",
            lockscope_core::collect::seconds(limit)
        )
    } else {
        text.to_string()
    }
}

/// Connects to the first endpoint that answers, trying them in turn from `start` (a client over
/// several endpoints keeps sending a share of requests to a dead one, so each client talks to
/// one member and a failure moves to the next).
pub(crate) async fn connect_any(
    config: &EtcdSourceConfig,
    start: usize,
    limits: Limits,
) -> Result<(Client, usize), EtcdError> {
    let n = config.endpoints.len().max(1);
    let mut errors = Vec::new();
    for i in 0..n {
        let at = (start + i) % n;
        let one = EtcdSourceConfig {
            endpoints: config.endpoints.get(at).cloned().into_iter().collect(),
            ..config.clone()
        };
        match connect(&one, limits).await {
            Ok(mut client) => {
                // Connecting dials nothing: ask for something to know the member answers.
                let probe = client.get(
                    config.prefixes.first().map_or("/", String::as_str),
                    Some(GetOptions::new().with_count_only()),
                );
                match tokio::time::timeout(limits.connect, probe).await {
                    Ok(Ok(_)) => return Ok((client, at)),
                    Ok(Err(source)) if super::error::permission_denied(&source) => {
                        let prefix = config.prefixes.first().map_or("/", String::as_str);
                        errors.push(EtcdError::PermissionDenied {
                            what: format!("{}: read {prefix}", one.endpoints.join("")),
                            needs: super::error::read_grant(prefix),
                        })
                    }
                    Ok(Err(source)) => errors.push(EtcdError::Probe {
                        endpoint: one.endpoints.join(""),
                        hint: super::error::tls_hint(config, &source),
                        source,
                    }),
                    Err(_) => errors.push(EtcdError::ProbeTimeout {
                        endpoint: one.endpoints.join(""),
                    }),
                }
            }
            Err(e) => errors.push(e),
        }
    }
    Err(EtcdError::Endpoints(errors))
}

/// How long connecting and each request may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Dialling a member, authenticating and its first answer.
    pub connect: Duration,
    /// Each request after that.
    pub request: Duration,
}

impl Limits {
    /// The collector's: no longer than the source's silence limit.
    pub fn collect(config: &EtcdSourceConfig) -> Limits {
        let limit = Backoff::CONNECT_TIMEOUT.min(config.silence_limit);
        Limits {
            connect: limit,
            request: limit,
        }
    }
}

/// Connects with the source's endpoints, credentials and TLS settings.
pub(crate) async fn connect(
    config: &EtcdSourceConfig,
    limits: Limits,
) -> Result<Client, EtcdError> {
    // HTTP/2 pings every half of the silence limit, answered within the other half, also
    // while no request is open (an idle watch stream sends nothing for as long as no key
    // changes): a silent path ends the connection, and the watch with it, within the limit.
    // TCP keepalive on top, for a peer whose kernel is gone.
    let half = (config.silence_limit / 2).max(Duration::from_millis(500));
    let mut options = ConnectOptions::new()
        .with_connect_timeout(limits.connect)
        .with_timeout(limits.request)
        .with_keep_alive(half, half)
        .with_keep_alive_while_idle(true)
        .with_tcp_keepalive(lockscope_core::collect::keepalive_times(config.silence_limit).0);
    if let (Some(user), Some(password)) = (&config.user, config.password()) {
        // etcd's simple auth tokens expire after `--auth-token-ttl` (300 s) unused: the client
        // authenticates again instead of a request failing with "invalid auth token" (which
        // would cost a reconnect). etcd 3.4.23 checks no token on LeaseTimeToLive, the one
        // request a steady collector makes, so this is for later etcd versions (not tested).
        options = options
            .with_user(user.clone(), password)
            .with_auto_token_refresh(true);
    }
    let tls = config.tls_ca_file.is_some() || config.tls_cert_file.is_some();
    if tls {
        let mut settings = TlsOptions::new();
        if let Some(ca) = &config.tls_ca_file {
            let pem = std::fs::read(ca).map_err(|source| EtcdError::TlsFile {
                path: ca.clone(),
                source,
            })?;
            settings = settings.ca_certificate(Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&config.tls_cert_file, &config.tls_key_file) {
            let cert = std::fs::read(cert).map_err(|source| EtcdError::TlsFile {
                path: cert.clone(),
                source,
            })?;
            let key = std::fs::read(key).map_err(|source| EtcdError::TlsFile {
                path: key.clone(),
                source,
            })?;
            settings = settings.identity(Identity::from_pem(cert, key));
        }
        options = options.with_tls(settings);
    }
    let endpoints: Vec<String> = config
        .endpoints
        .iter()
        .map(|e| {
            if e.contains("://") {
                e.clone()
            } else if tls {
                format!("https://{e}")
            } else {
                format!("http://{e}")
            }
        })
        .collect();
    let connecting = Client::connect(&endpoints, Some(options));
    match tokio::time::timeout(limits.connect * 2, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(source)) => Err(EtcdError::Connect {
            endpoints: endpoints.join(","),
            hint: super::error::tls_hint(config, &source),
            source,
        }),
        Err(_) => Err(EtcdError::ConnectTimeout {
            endpoints: endpoints.join(","),
        }),
    }
}

/// A key as lockscope keeps it: its value bounded to [`Clipped`]'s few kB (a client may write
/// up to etcd's request limit, 1.5 MiB by default, into a lock's value, and the mirror, every
/// view and every event would carry it).
fn kv_of(kv: &KeyValue) -> EtcdKv {
    EtcdKv {
        key: kv.key().to_vec(),
        value: Clipped::of_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: kv.lease(),
    }
}

/// Keys a range page asks for at most. Pages keep each answer (and the memory it takes before
/// values are cut) to a bounded number of keys: one unpaginated range of a prefix holding
/// megabytes was one message over gRPC's default 4 MiB decode limit, and the source never
/// synced.
const PAGE_KEYS: i64 = 256;

/// The largest gRPC message the collector decodes: what etcd's own Go client accepts
/// (`MaxCallRecvMsgSize` = `math.MaxInt32`). etcd sends a watch response of any size up to that
/// (the server's send limit is the same): all events of one revision (a `del --prefix` or a
/// lease expiry deletes many keys at once, each event with its previous value) or, for a
/// watcher catching up, of up to 1,000 revisions. Telling etcd to split responses
/// (`fragment`) would bound them, but etcd-client 0.21 does not show which response is a
/// fragment, so a split revision could not be applied whole.
pub(crate) const MAX_MESSAGE: usize = i32::MAX as usize;

/// The end of the range of keys starting with `prefix` (etcd's `range_end` for a prefix; the
/// empty prefix, all keys, ends at `\0`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Every key under `prefix` at `revision` (`0`: the newest; then the answer's revision is
/// returned and used for every later page), page by page.
async fn range_paged(
    kv: &mut KvClient,
    prefix: &str,
    revision: i64,
    keys_only: bool,
) -> Result<(i64, Vec<KeyValue>), EtcdError> {
    let end = prefix_end(prefix.as_bytes());
    let mut start = prefix.as_bytes().to_vec();
    let mut revision = revision;
    let mut out = Vec::new();
    loop {
        let mut options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE_KEYS);
        if revision > 0 {
            // Every page at the first page's revision: one consistent read.
            options = options.with_revision(revision);
        }
        if keys_only {
            options = options.with_keys_only();
        }
        let mut response = kv
            .get(start.clone(), Some(options))
            .await
            .map_err(|source| {
                if super::error::permission_denied(&source) {
                    EtcdError::PermissionDenied {
                        what: format!("range {prefix}"),
                        needs: super::error::read_grant(prefix),
                    }
                } else {
                    EtcdError::Range {
                        prefix: prefix.to_string(),
                        source,
                    }
                }
            })?;
        if revision == 0 {
            revision = response.header().map_or(0, |h| h.revision());
        }
        let more = response.more();
        let kvs = response.take_kvs();
        match kvs.last() {
            Some(last) if more => {
                // The next page starts right after the last key (keys are ordered bytes).
                start = last.key().to_vec();
                start.push(0);
            }
            _ => {
                out.extend(kvs);
                return Ok((revision, out));
            }
        }
        out.extend(kvs);
    }
}

/// Every key under the prefixes, read at one revision; answers it and the keys.
async fn full_read(
    client: &Client,
    config: &EtcdSourceConfig,
) -> Result<(i64, Vec<EtcdKv>), EtcdError> {
    let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
    let mut revision = 0;
    let mut kvs = Vec::new();
    for prefix in &config.prefixes {
        let (at, page) = range_paged(&mut kv, prefix, revision, false).await?;
        revision = at;
        kvs.extend(page.iter().map(kv_of));
    }
    Ok((revision, kvs))
}

/// One watch per prefix on one stream, from `from`, with previous values.
async fn watch_from(
    client: &Client,
    config: &EtcdSourceConfig,
    from: i64,
) -> Result<WatchStream, EtcdError> {
    let mut client = client.watch_client().max_decoding_message_size(MAX_MESSAGE);
    let options = || {
        WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(from)
    };
    let mut prefixes = config.prefixes.iter();
    let first = prefixes.next().ok_or(EtcdError::NoPrefixes)?;
    let watch_error = |prefix: &String, source: etcd_client::Error| {
        if super::error::permission_denied(&source) {
            EtcdError::PermissionDenied {
                what: format!("watch {prefix}"),
                needs: super::error::read_grant(prefix),
            }
        } else {
            EtcdError::Watch {
                prefix: prefix.clone(),
                source,
            }
        }
    };
    let mut stream = client
        .watch(first.as_bytes(), Some(options()))
        .await
        .map_err(|source| watch_error(first, source))?;
    for prefix in prefixes {
        stream
            .watch(prefix.as_bytes(), Some(options()))
            .await
            .map_err(|source| watch_error(prefix, source))?;
    }
    Ok(stream)
}

/// TTLs of `leases` as etcd has them now (`None`: the lease is gone).
async fn lease_ttls(
    client: &mut Client,
    leases: impl Iterator<Item = i64>,
) -> Result<Vec<(i64, Option<LeaseTtl>)>, EtcdError> {
    let mut out = Vec::new();
    for lease in leases.take(LEASES_PER_ROUND) {
        let response = client
            .lease_time_to_live(lease, None)
            .await
            .map_err(|source| {
                if super::error::permission_denied(&source) {
                    // etcd from 3.4.26 / 3.5.9 lets a user read a lease's TTL only if it may
                    // read every key attached to the lease (3.4.23 asks for no permission).
                    EtcdError::PermissionDenied {
                        what: format!("lease TTL {lease:x}"),
                        needs: "the source's etcd user needs read on every key attached to the lease (lock holders' leases may carry keys outside the watched prefixes)".into(),
                    }
                } else {
                    EtcdError::LeaseTtl { lease, source }
                }
            })?;
        let ttl = (response.ttl() >= 0).then(|| LeaseTtl {
            granted_s: response.granted_ttl(),
            left_s: response.ttl(),
        });
        out.push((lease, ttl));
    }
    Ok(out)
}

/// One connection: read (or resume), watch, and read lease TTLs until something fails.
/// `Ok(())` only when the aggregator is gone.
async fn session(
    config: &EtcdSourceConfig,
    out: &Outbox<EtcdUpdate>,
    resume: &mut Option<i64>,
    leases: &mut BTreeMap<Vec<u8>, i64>,
    next: &mut usize,
    heard: &Heard,
) -> Result<(), EtcdError> {
    let (mut client, at) = connect_any(config, *next, Limits::collect(config)).await?;
    heard.now();
    // If this member fails, the next connection starts with the one after it.
    *next = at + 1;
    // Leases whose TTL was read, each with the earliest instant it can run out (epoch ms).
    let mut known: HashMap<i64, i64> = HashMap::new();
    let mut revision = match *resume {
        Some(revision) => {
            // The watch resumes after what the aggregator has; which leases keys are bound to
            // (whose TTLs to read) comes from a keys-only range of the prefixes.
            let mut kv = client.kv_client().max_decoding_message_size(MAX_MESSAGE);
            for prefix in &config.prefixes {
                let (_, keys) = range_paged(&mut kv, prefix, 0, true).await?;
                leases.extend(keys.iter().map(|kv| (kv.key().to_vec(), kv.lease())));
            }
            revision
        }
        None => {
            let Some(revision) = resync(&mut client, config, out, leases).await? else {
                return Ok(());
            };
            *resume = Some(revision);
            revision
        }
    };
    let mut ticker = tokio::time::interval(config.lease_poll_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'watching: loop {
        let mut stream = watch_from(&client, config, revision + 1).await?;
        if !out
            .send(EtcdUpdate::Status {
                up: true,
                error: None,
                last_seen_ms: None,
            })
            .await
        {
            return Ok(());
        }
        loop {
            tokio::select! {
                message = stream.message() => {
                    heard.now();
                    let response = match message {
                        Ok(Some(response)) => response,
                        Ok(None) => return Err(EtcdError::WatchEnded),
                        Err(e) => return Err(EtcdError::WatchStream(e)),
                    };
                    if response.compact_revision() > 0 {
                        // What happened between our revision and the compaction is lost:
                        // read everything again and watch from there.
                        tracing::info!(source = %config.name, compacted = response.compact_revision(), from = revision, "etcd watch revision compacted; full read");
                        let Some(fresh) = resync(&mut client, config, out, leases).await? else {
                            return Ok(());
                        };
                        revision = fresh;
                        *resume = Some(revision);
                        continue 'watching;
                    }
                    if response.canceled() {
                        // etcd 3.4 refuses a watch the user may not read by cancelling it.
                        if response.cancel_reason().contains("permission denied") {
                            let prefixes = config.prefixes.join(" ");
                            return Err(EtcdError::PermissionDenied {
                                what: format!("watch {prefixes}"),
                                needs: super::error::read_grant(&prefixes),
                            });
                        }
                        return Err(EtcdError::WatchCanceled(response.cancel_reason().to_string()));
                    }
                    if response.events().is_empty() {
                        continue;
                    }
                    let heard_at = lockscope_core::now_ms();
                    let mut events = Vec::with_capacity(response.events().len());
                    // Leases of deleted keys (alive or not tells the cause) and leases not seen
                    // before (a new participant shows its TTL at once).
                    let mut ask = BTreeSet::new();
                    for event in response.events() {
                        let Some(kv) = event.kv() else { continue };
                        revision = revision.max(kv.mod_revision());
                        match event.event_type() {
                            EventType::Put => {
                                let kv = kv_of(kv);
                                if kv.lease != 0 && !known.contains_key(&kv.lease) {
                                    ask.insert(kv.lease);
                                }
                                leases.insert(kv.key.clone(), kv.lease);
                                events.push(EtcdEvent::Put(kv));
                            }
                            EventType::Delete => {
                                let prev = event.prev_kv().map(kv_of);
                                let lease = prev
                                    .as_ref()
                                    .map(|p| p.lease)
                                    .or_else(|| leases.get(kv.key()).copied())
                                    .unwrap_or(0);
                                leases.remove(kv.key());
                                if lease != 0 && may_have_expired(known.get(&lease), heard_at) {
                                    ask.insert(lease);
                                }
                                events.push(EtcdEvent::Delete {
                                    key: kv.key().to_vec(),
                                    prev,
                                    lease,
                                    revision: kv.mod_revision(),
                                });
                            }
                        }
                    }
                    // Whether the deleted keys' leases still live: deleted under a live lease
                    // is a release; with the lease, an expiry (or a revoke).
                    let ttls = lease_ttls(&mut client, ask.into_iter()).await?;
                    // Read after `heard_at`: an expiry counted from it is, if anything, early.
                    learn(&mut known, &ttls, heard_at);
                    if !out
                        .send(EtcdUpdate::Events {
                            revision,
                            events,
                            leases: ttls,
                            at_ms: lockscope_core::now_ms(),
                        })
                        .await
                    {
                        return Ok(());
                    }
                    *resume = Some(revision);
                }
                _ = ticker.tick() => {
                    let wanted: BTreeSet<i64> =
                        leases.values().copied().filter(|l| *l != 0).collect();
                    if wanted.is_empty() {
                        continue;
                    }
                    let at_ms = lockscope_core::now_ms();
                    let ttls = lease_ttls(&mut client, wanted.into_iter()).await?;
                    heard.now();
                    known.clear();
                    learn(&mut known, &ttls, at_ms);
                    if !out.send(EtcdUpdate::Leases { at_ms, leases: ttls }).await {
                        return Ok(());
                    }
                }
            }
        }
    }
}

/// Whether a key deleted at `heard_at` (epoch ms) may have gone with its lease, the lease's
/// earliest expiry as last read being `earliest` (`None`: never read): only then does its TTL,
/// read at once, tell `lease_expired` from `released` (the state's rule, [`EXPIRY_SLACK_MS`]).
/// A lease that cannot run out before well after the deletion was revoked or is alive, and
/// either way the key was released: the deletion goes to the aggregator without a round trip.
fn may_have_expired(earliest: Option<&i64>, heard_at: i64) -> bool {
    earliest.is_none_or(|&earliest| earliest <= heard_at + EXPIRY_SLACK_MS + LEASE_MARGIN_MS)
}

/// Added to the slack for what [`may_have_expired`] cannot know: the aggregator applies a
/// deletion a little after it was heard.
const LEASE_MARGIN_MS: i64 = 1_000;

/// Keeps the earliest expiry of each lease read at `at_ms` alive, and forgets those gone. etcd
/// rounds what is left to whole seconds, so a second less is assumed.
fn learn(known: &mut HashMap<i64, i64>, ttls: &[(i64, Option<LeaseTtl>)], at_ms: i64) {
    for (lease, ttl) in ttls {
        match ttl {
            Some(ttl) => {
                known.insert(*lease, at_ms + (ttl.left_s - 1).max(0) * 1000);
            }
            None => {
                known.remove(lease);
            }
        }
    }
}

/// A full read sent as a snapshot, with the TTLs of its leases; `None` when the aggregator is
/// gone.
async fn resync(
    client: &mut Client,
    config: &EtcdSourceConfig,
    out: &Outbox<EtcdUpdate>,
    leases: &mut BTreeMap<Vec<u8>, i64>,
) -> Result<Option<i64>, EtcdError> {
    let (revision, kvs) = full_read(&*client, config).await?;
    // The leases of keys that went while lockscope could not see (a compaction lost their
    // events) are asked too: a lease gone tells `lease_expired` from `released`.
    let before: BTreeSet<i64> = leases.values().copied().collect();
    *leases = kvs.iter().map(|kv| (kv.key.clone(), kv.lease)).collect();
    let wanted: BTreeSet<i64> = leases
        .values()
        .copied()
        .chain(before)
        .filter(|l| *l != 0)
        .collect();
    let at_ms = lockscope_core::now_ms();
    let ttls = lease_ttls(client, wanted.into_iter()).await?;
    let sent = out
        .send(EtcdUpdate::Snapshot {
            revision,
            kvs,
            leases: ttls,
            at_ms,
        })
        .await;
    Ok(sent.then_some(revision))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_asks_for_its_lease_only_when_the_lease_may_have_run_out_about_then() {
        let mut known = HashMap::new();
        let read_at = 1_000_000;
        learn(
            &mut known,
            &[
                (
                    1,
                    Some(LeaseTtl {
                        granted_s: 60,
                        left_s: 60,
                    }),
                ),
                (
                    2,
                    Some(LeaseTtl {
                        granted_s: 5,
                        left_s: 2,
                    }),
                ),
                (3, None),
            ],
            read_at,
        );
        // Never read: asked.
        assert!(may_have_expired(known.get(&9), read_at));
        // 59 s at least to go: deleted now, it was released (alive or revoked); not asked.
        assert!(!may_have_expired(known.get(&1), read_at + 1_000));
        // Deleted about when it was due: asked.
        assert!(may_have_expired(known.get(&1), read_at + 57_000));
        // Little left, as the whole-second rounding may hide: asked.
        assert!(may_have_expired(known.get(&2), read_at));
        // Gone when read: forgotten, so asked again.
        assert!(may_have_expired(known.get(&3), read_at));
        learn(&mut known, &[(1, None)], read_at + 2_000);
        assert!(may_have_expired(known.get(&1), read_at + 2_000));
    }
}
