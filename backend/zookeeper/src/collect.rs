//! ZooKeeper collector: one persistent recursive watch per root, a full read at bootstrap and
//! after every reconnect, and the four-letter-word poller for watches and sessions.
//!
//! Invariants:
//! * The tree is never polled: after the bootstrap read, only watch events cause reads (one
//!   `exists` per created/changed node; deletions cost nothing).
//! * The watch is registered *before* the tree is read, so no change between the two is lost.
//! * `zookeeper-client` 0.11 does not re-register persistent watches after a reconnect and events
//!   during the gap can be lost (ZOOKEEPER-4698): every `Disconnected → SyncConnected` re-registers
//!   and resyncs. `Expired` is terminal for a client: a new one is built and the tree re-read.
//! * Failures are reported as [`Update::Status`] and retried with backoff; nothing here panics.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, FuturesUnordered, StreamExt};
use futures::FutureExt;
use lockscope_model::zk::{join, NodeMeta, DATA_MAX};
use tokio::sync::watch;
use zookeeper_client as zkc;

use super::ZkSourceConfig;
use super::{EnsembleReport, NodeChange, ZkError, ZkUpdate as Update};
use lockscope_core::collect::Outbox;

use super::fourlw;

/// Requests in flight while reading a tree (pipelined on the one session).
const READ_CONCURRENCY: usize = 1024;
/// Watch events handled per batch (their `exists` calls run concurrently; the batch is one
/// update).
const EVENT_BATCH: usize = 512;

/// Why a session loop ended.
enum SessionEnd {
    /// The client is unusable (expired, closed, auth failed): build a new one.
    Terminal(ZkError),
    /// The channel to the aggregator is gone: lockscope is shutting down.
    Shutdown,
}

struct Reporter {
    out: Outbox<Update>,
}

impl Reporter {
    async fn send(&self, update: Update) -> bool {
        self.out.send(update).await
    }

    /// Reports the source down with `reason`, last seen at `last_seen_ms` (`None`: now);
    /// false when lockscope is shutting down.
    async fn down(&self, reason: String, last_seen_ms: Option<i64>) -> bool {
        self.send(Update::Status {
            up: false,
            error: Some(reason),
            last_seen_ms,
        })
        .await
    }
}

/// Runs the collector for one source until the aggregator goes away.
/// `dump_wanted` says what the leader's `dump` would tell the next ensemble round (see
/// [`crate::state::ZkSourceState::dump_wanted`]).
pub async fn run(
    config: Arc<ZkSourceConfig>,
    out: Outbox<Update>,
    dump_wanted: watch::Receiver<crate::DumpWanted>,
) {
    let (own_tx, own_rx) = watch::channel(None);
    // Ends with this task, however it ends (an abort at shutdown included).
    let _poller = lockscope_core::collect::Tasks::from(vec![tokio::spawn(run_poller(
        config.clone(),
        out.clone(),
        own_rx,
        dump_wanted,
    ))]);
    let reporter = Reporter { out };
    let mut backoff = lockscope_core::collect::Backoff::new();
    loop {
        backoff.attempt();
        let reason = match connect(&config).await {
            Ok(client) => {
                own_tx.send_replace(Some(client.session_id().0));
                tracing::info!(source = %config.name, session = %lockscope_model::session_hex(client.session_id().0), "connected to ZooKeeper");
                let end = tokio::select! {
                    end = session_loop(&client, &config, &reporter) => Some(end),
                    () = reporter.out.stopping() => None,
                };
                let Some(end) = end else {
                    close(client, &config.name).await;
                    break;
                };
                match end {
                    SessionEnd::Shutdown => break,
                    SessionEnd::Terminal(reason) => {
                        tracing::warn!(source = %config.name, %reason, "ZooKeeper session ended; reconnecting");
                        reason
                    }
                }
            }
            Err(reason) => {
                tracing::warn!(source = %config.name, %reason, "cannot connect to ZooKeeper");
                reason
            }
        };
        reporter.out.reconnected();
        if !reporter.down(reason.to_string(), None).await {
            break;
        }
        // An expired or refused session must not turn into a tight loop.
        tokio::select! {
            () = backoff.wait() => {}
            () = reporter.out.stopping() => break,
        }
    }
}

/// Closes lockscope's session at shutdown: the client sends `closeSession` once its last
/// handle is dropped, and the ensemble drops the session and its watches at once instead of at
/// its expiry. Waits (bounded) until the client says the session is over.
async fn close(client: zkc::Client, source: &str) {
    let mut state = client.state_watcher();
    drop(client);
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        while !state.peek_state().is_terminated() {
            state.changed().await;
        }
    })
    .await;
    match closed {
        Ok(()) => tracing::info!(%source, "ZooKeeper session closed"),
        Err(_) => {
            tracing::warn!(%source, "ZooKeeper session not closed within 3 s; it will expire")
        }
    }
}

/// How long the client waits for anything from its member (a ping's reply, an answer, a
/// watch event) before it drops the connection and tries another: its connection timeout,
/// which it also uses for that (it pings every eighth of it while idle and gives up when
/// nothing came for the whole of it, or for 2/5 of the session timeout if that is shorter).
/// 2 s, or the source's `silence_limit` if that is shorter.
pub(crate) fn silence_bound(config: &ZkSourceConfig) -> Duration {
    config.silence_limit.min(Duration::from_secs(2))
}

pub(crate) async fn connect(config: &ZkSourceConfig) -> Result<zkc::Client, ZkError> {
    // The client retries every member itself; bound the whole attempt so a dead ensemble is
    // reported as down instead of hanging the collector.
    let limit = config.session_timeout.max(Duration::from_secs(3));
    connect_to(config, &config.connect, limit).await
}

/// How long a helper of a full read may take to connect to its member and sync it.
const HELPER_LIMIT: Duration = Duration::from_secs(2);

/// More sessions for a full read, one per member, each yielded once it is connected and synced
/// ([`read_tree_in_parts`]). The `sync` comes after the primary registered its watches, so a
/// helper's member has applied every change those watches began after: whatever a helper reads
/// is then as new as the watch stream or newer, and the watch events that follow the read
/// settle every node. A member that does not connect and sync within [`HELPER_LIMIT`] (down,
/// partitioned, read-only, refusing the credentials) just does not help.
fn helpers(config: &ZkSourceConfig) -> impl stream::Stream<Item = zkc::Client> + '_ {
    let sync_path = config.roots.first().cloned().unwrap_or_else(|| "/".into());
    config
        .members()
        .into_iter()
        .map(move |member| {
            let sync_path = sync_path.clone();
            async move {
                let ready = tokio::time::timeout(HELPER_LIMIT, async {
                    let client = connect_to(config, &member, HELPER_LIMIT).await.ok()?;
                    client.sync(&sync_path).await.ok()?;
                    Some(client)
                })
                .await;
                if !matches!(ready, Ok(Some(_))) {
                    tracing::debug!(source = %config.name, %member, "no helper session for the full read on this member");
                }
                ready.ok().flatten()
            }
        })
        .collect::<FuturesUnordered<_>>()
        .filter_map(std::future::ready)
}

/// Connects to `connect` (the ensemble, or one member) with the source's credentials and TLS,
/// giving up after `limit`.
async fn connect_to(
    config: &ZkSourceConfig,
    connect: &str,
    limit: Duration,
) -> Result<zkc::Client, ZkError> {
    let mut connector = zkc::Client::connector()
        .with_session_timeout(config.session_timeout)
        .with_connection_timeout(silence_bound(config));
    if let Some(credentials) = config.digest_credentials() {
        connector = connector.with_auth("digest", credentials.as_bytes());
    }
    if let (Some(user), Some(password)) = (&config.sasl_user, config.sasl_password()) {
        connector = connector.with_sasl(zkc::SaslOptions::digest_md5(user.clone(), password));
    }
    let tls = config.tls_options().map_err(ZkError::TlsFiles)?;
    let secure = tls.is_some();
    if let Some(tls) = tls {
        connector = connector.with_tls(tls);
    }
    let attempt = async {
        if secure {
            connector.secure_connect(connect).await
        } else {
            connector.connect(connect).await
        }
    };
    let failed = match tokio::time::timeout(limit, attempt).await {
        Ok(Ok(client)) => return Ok(client),
        Ok(Err(zkc::Error::AuthFailed)) => ZkError::Auth {
            connect: connect.to_string(),
            who: match (&config.sasl_user, config.digest_credentials()) {
                (Some(user), _) => format!("SASL DIGEST-MD5 user {user:?} refused"),
                (None, Some(_)) => {
                    "digest credentials refused, or the ensemble requires SASL (sasl_user)".into()
                }
                (None, None) => {
                    "no credentials configured; the ensemble requires them (sasl_user)".into()
                }
            },
            source: zkc::Error::AuthFailed,
        },
        Ok(Err(source)) => ZkError::Connect {
            connect: connect.to_string(),
            source,
        },
        Err(_) => ZkError::ConnectTimeout {
            connect: connect.to_string(),
            limit,
        },
    };
    // The client library only says that no member could be reached; a TLS handshake of our
    // own tells why (an unknown CA, an expired certificate, a client certificate required).
    if let Ok(Some(tls)) = super::tls::connector(config) {
        for member in connect.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            if let Some(error) = super::tls::probe(&tls, member).await {
                return Err(ZkError::TlsHandshake {
                    member: member.to_string(),
                    error,
                });
            }
        }
    }
    Err(failed)
}

type WatchStream = stream::BoxStream<'static, zkc::WatchedEvent>;

async fn register_watches(
    client: &zkc::Client,
    roots: &[String],
) -> Result<WatchStream, zkc::Error> {
    let mut streams = Vec::new();
    for root in roots {
        let watcher = client
            .watch(root, zkc::AddWatchMode::PersistentRecursive)
            .await?;
        streams.push(
            stream::unfold(watcher, |mut w| async move {
                let event = w.changed().await;
                Some((event, w))
            })
            .boxed(),
        );
    }
    Ok(stream::select_all(streams).boxed())
}

async fn session_loop(
    client: &zkc::Client,
    config: &ZkSourceConfig,
    reporter: &Reporter,
) -> SessionEnd {
    let mut states = client.state_watcher();
    loop {
        let mut events = match register_watches(client, &config.roots).await {
            Ok(events) => events,
            Err(e) => return SessionEnd::Terminal(ZkError::Watch(e)),
        };
        // The read goes to the aggregator in parts as it goes (its progress is the source's
        // `bootstrap` figures), the first one empty to say a full read begins.
        if !reporter
            .send(Update::ResyncPart {
                nodes: Vec::new(),
                first: true,
            })
            .await
        {
            return SessionEnd::Shutdown;
        }
        let read = read_tree_in_parts(
            client,
            helpers(config),
            READ_CONCURRENCY,
            &config.roots,
            READ_PART,
            |nodes| {
                let out = reporter.out.clone();
                async move {
                    out.send(Update::ResyncPart {
                        nodes,
                        first: false,
                    })
                    .await
                }
            },
        )
        .await;
        match read {
            Ok(None) => return SessionEnd::Shutdown,
            Ok(Some(unreadable)) => {
                if !unreadable.is_empty() {
                    tracing::warn!(source = %config.name, count = unreadable.len(), first = %unreadable[0], "nodes not readable (ACL)");
                }
                if !reporter
                    .send(Update::Resync {
                        nodes: Vec::new(),
                        unreadable,
                    })
                    .await
                {
                    return SessionEnd::Shutdown;
                }
                if !reporter
                    .send(Update::Status {
                        up: true,
                        error: None,
                        last_seen_ms: None,
                    })
                    .await
                {
                    return SessionEnd::Shutdown;
                }
            }
            Err(e) => {
                if client.state().is_terminated() {
                    return SessionEnd::Terminal(ZkError::ReadTree(e));
                }
                tracing::warn!(source = %config.name, error = %e, "tree read failed; retrying");
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
        }
        // Follow events until the connection drops and comes back (then re-register + resync)
        // or the session ends.
        let mut disconnected = false;
        loop {
            let state = tokio::select! {
                event = events.next() => {
                    let Some(event) = event else {
                        return SessionEnd::Terminal(ZkError::WatchEnded);
                    };
                    if event.event_type == zkc::EventType::Session {
                        event.session_state
                    } else {
                        let mut batch = vec![event];
                        while batch.len() < EVENT_BATCH {
                            match events.next().now_or_never() {
                                Some(Some(more)) if more.event_type != zkc::EventType::Session => batch.push(more),
                                Some(Some(more)) => { batch.push(more); break; }
                                _ => break,
                            }
                        }
                        match apply_events(client, &mut events, batch, reporter).await {
                            Err(()) => return SessionEnd::Shutdown,
                            Ok(Some(state)) => state,
                            Ok(None) => continue,
                        }
                    }
                }
                state = states.changed() => state,
            };
            match state {
                zkc::SessionState::Disconnected => {
                    if !disconnected {
                        tracing::info!(source = %config.name, "disconnected from ZooKeeper; waiting for the client to reconnect");
                        // While disconnected the mirror may be missing changes: not live. The
                        // client gave up after hearing nothing for `silence_bound` (or the
                        // connection broke): it last heard the member no later than that ago.
                        let bound = silence_bound(config);
                        let reason = format!(
                            "disconnected from the ensemble (no answer for {}, or the connection dropped); reconnecting",
                            lockscope_core::collect::seconds(bound)
                        );
                        let last_seen = lockscope_core::now_ms() - bound.as_millis() as i64;
                        if !reporter.down(reason, Some(last_seen)).await {
                            return SessionEnd::Shutdown;
                        }
                    }
                    disconnected = true;
                }
                zkc::SessionState::SyncConnected | zkc::SessionState::ConnectedReadOnly => {
                    if disconnected {
                        tracing::info!(source = %config.name, "reconnected; re-registering watches and resyncing");
                        break;
                    }
                }
                terminal => return SessionEnd::Terminal(ZkError::Session(terminal)),
            }
        }
    }
}

/// What a batch of watch events came to: its node changes, in the order of the events.
struct ReadBatch {
    changes: Vec<NodeChange>,
    /// Paths of creations that were gone when read ([`NodeChange::Gone`]) whose deletion is
    /// not in the batch yet.
    open: HashSet<String>,
}

impl ReadBatch {
    fn push(&mut self, change: NodeChange) {
        match &change {
            NodeChange::Gone { path, .. } => {
                self.open.insert(path.clone());
            }
            NodeChange::Removed { path, .. } => {
                self.open.remove(path);
            }
            NodeChange::Upsert { .. } => {}
        }
        self.changes.push(change);
    }
}

/// Reads a batch of watch events (each created/changed node once, concurrently) into node
/// changes and sends them as one [`Update::Changes`]. A creation whose node is gone when read
/// still counts ([`NodeChange::Gone`]); its deletion is already on its way (ZooKeeper delivers
/// a watch event before the answer to a read that sees its change), so more events are taken
/// until every such deletion is in the batch: the aggregator applies a batch whole, and never
/// shows a node it could not read. Answers `Err(())` when lockscope is shutting down, else the
/// session state a session event in the batch carried.
async fn apply_events(
    client: &zkc::Client,
    events: &mut WatchStream,
    first: Vec<zkc::WatchedEvent>,
    reporter: &Reporter,
) -> Result<Option<zkc::SessionState>, ()> {
    let mut batch = ReadBatch {
        changes: Vec::with_capacity(first.len()),
        open: HashSet::new(),
    };
    let mut session = None;
    let mut round = first;
    loop {
        let at_ms = lockscope_core::now_ms();
        let reads = round.iter().map(|event| read_event(client, event, at_ms));
        for change in futures::future::join_all(reads).await.into_iter().flatten() {
            batch.push(change);
        }
        session = session.or_else(|| {
            round
                .iter()
                .rev()
                .find(|e| e.event_type == zkc::EventType::Session)
                .map(|e| e.session_state)
        });
        if batch.open.is_empty() || session.is_some() {
            break;
        }
        // Every event already delivered, then (if the deletion is still not among them) one
        // more wait, bounded: a connection lost meanwhile ends in a resync anyway.
        round = match tokio::time::timeout(GONE_WAIT, events.next()).await {
            Ok(Some(event)) => {
                let mut round = vec![event];
                while round.len() < EVENT_BATCH {
                    match events.next().now_or_never() {
                        Some(Some(more)) => round.push(more),
                        _ => break,
                    }
                }
                round
            }
            Ok(None) | Err(_) => break,
        };
    }
    if !batch.open.is_empty() {
        // Never left dangling in the mirror: without its deletion it would show as a holder.
        tracing::debug!(
            count = batch.open.len(),
            "created nodes gone before read, deletion not heard: dropped"
        );
        let open = std::mem::take(&mut batch.open);
        batch
            .changes
            .retain(|c| !matches!(c, NodeChange::Gone { path, .. } if open.contains(path)));
    }
    if !batch.changes.is_empty() && !reporter.send(Update::Changes(batch.changes)).await {
        return Err(());
    }
    Ok(session)
}

/// How long a batch waits for the deletion of a node that was gone when read.
const GONE_WAIT: Duration = Duration::from_secs(2);

/// The node change one watch event reports (reading the node's stat for a creation or change).
async fn read_event(
    client: &zkc::Client,
    event: &zkc::WatchedEvent,
    at_ms: i64,
) -> Option<NodeChange> {
    let path = event.path.clone();
    match event.event_type {
        zkc::EventType::NodeCreated | zkc::EventType::NodeDataChanged => {
            match client.check_stat(&path).await {
                Ok(Some(stat)) => Some(NodeChange::Upsert {
                    meta: with_data(client, &path, meta_of(&stat)).await,
                    path,
                }),
                // Created and deleted again before this read: the creation still happened
                // (a hold too brief to read is still a hold). A change of a node that is gone
                // needs nothing: its deletion follows.
                Ok(None) if event.event_type == zkc::EventType::NodeCreated => {
                    Some(NodeChange::Gone { path, at_ms })
                }
                Ok(None) => None,
                // The node's fate is unknown; the next resync settles it.
                Err(e) => {
                    tracing::debug!(%path, error = %e, "stat after event failed");
                    None
                }
            }
        }
        zkc::EventType::NodeDeleted => Some(NodeChange::Removed { path, at_ms }),
        _ => None,
    }
}

fn meta_of(stat: &zkc::Stat) -> NodeMeta {
    NodeMeta {
        ctime_ms: stat.ctime,
        ephemeral_owner: stat.ephemeral_owner,
        czxid: stat.czxid,
        version: stat.version,
        data_len: stat.data_length,
        data: None,
    }
}

/// Adds the node's data when it is short (1 to [`DATA_MAX`] bytes by its stat): one `getData`
/// more. That is every node whose data says who it belongs to (kazoo's identifier, Curator's
/// client address), a kazoo lease record and a kazoo Semaphore's size; nodes without data cost
/// nothing, and longer data (up to ZooKeeper's 1 MB `jute.maxbuffer`) is never read.
async fn with_data(client: &zkc::Client, path: &str, mut meta: NodeMeta) -> NodeMeta {
    if !(1..=DATA_MAX).contains(&meta.data_len) {
        return meta;
    }
    if let Ok((data, stat)) = client.get_data(path).await {
        meta = meta_of(&stat);
        // Data that grew past the bound since the stat is dropped, not kept.
        if !data.is_empty() && data.len() <= DATA_MAX as usize {
            meta.data = Some(data.into());
        }
    }
    meta
}

/// Reads every node below the roots in one piece with `client` alone (tests and tools; the
/// collector streams the read with [`read_tree_in_parts`], helped by more sessions).
pub async fn read_tree(
    client: &zkc::Client,
    roots: &[String],
) -> Result<(Vec<(String, NodeMeta)>, Vec<String>), zkc::Error> {
    let mut nodes = Vec::new();
    let unreadable = read_tree_in_parts(
        client,
        stream::empty(),
        READ_CONCURRENCY,
        roots,
        usize::MAX,
        |part| {
            nodes.extend(part);
            std::future::ready(true)
        },
    )
    .await?
    .unwrap_or_default();
    Ok((nodes, unreadable))
}

/// Nodes per part of a streamed full read: what the collector holds before handing them on.
pub const READ_PART: usize = 4096;

/// Siblings one multi-read asks for at most (each answer is a stat and at most
/// [`DATA_MAX`] bytes as a rule: a few tens of kB).
const MULTI_READ: usize = 64;

/// One session reading for a full read, and how many node reads it has in flight.
struct Reader {
    client: zkc::Client,
    in_flight: usize,
    /// False once a helper failed a request: it gets no more (its unanswered paths are read
    /// by the others).
    live: bool,
    /// A helper's: resolves once its connection is lost, failing its requests in flight at
    /// once instead of when its client gives them up.
    lost: Option<futures::future::Shared<futures::future::BoxFuture<'static, ()>>>,
}

impl Reader {
    fn helper(client: zkc::Client) -> Reader {
        let mut states = client.state_watcher();
        let lost = async move {
            while matches!(
                states.peek_state(),
                zkc::SessionState::SyncConnected | zkc::SessionState::ConnectedReadOnly
            ) {
                states.changed().await;
            }
        }
        .boxed()
        .shared();
        Reader {
            client,
            in_flight: 0,
            live: true,
            lost: Some(lost),
        }
    }
}

/// How a full read asks for one node.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ask {
    /// `getChildren` (the node's stat and children), then `getData` if its data is short.
    Children,
    /// `getData` (the node's stat and data), then `getChildren` if the stat counts children:
    /// one request for a leaf with data instead of two.
    Data,
}

/// Work for one session: a node, or siblings read with `getData` in one multi-read.
enum Job {
    One {
        path: String,
        ask: Ask,
        /// The first child read of a parent with several: its siblings wait for it
        /// ([`ask_after`]).
        probe: bool,
    },
    Batch(Vec<String>),
}

impl Job {
    fn nodes(&self) -> usize {
        match self {
            Job::One { .. } => 1,
            Job::Batch(paths) => paths.len(),
        }
    }
}

/// One node as read: its children and metadata (with its data when short).
type NodeRead = Result<(Vec<String>, NodeMeta), zkc::Error>;

/// Reads one node as `ask` says.
async fn read_node(client: &zkc::Client, path: &str, ask: Ask) -> NodeRead {
    match ask {
        Ask::Children => {
            let (children, stat) = client.get_children(path).await?;
            Ok((children, with_data(client, path, meta_of(&stat)).await))
        }
        Ask::Data => {
            let (data, stat) = client.get_data(path).await?;
            after_data(client, path, data, &stat).await
        }
    }
}

/// A node whose data and stat were read: its children too if the stat counts any.
async fn after_data(client: &zkc::Client, path: &str, data: Vec<u8>, stat: &zkc::Stat) -> NodeRead {
    let mut meta = meta_of(stat);
    if !data.is_empty() && data.len() <= DATA_MAX as usize {
        meta.data = Some(data.into());
    }
    if stat.num_children == 0 {
        return Ok((Vec::new(), meta));
    }
    let (children, now) = client.get_children(path).await?;
    let meta = if now.version == stat.version {
        NodeMeta {
            data: meta.data,
            ..meta_of(&now)
        }
    } else {
        with_data(client, path, meta_of(&now)).await
    };
    Ok((children, meta))
}

/// Reads siblings with one multi-read of `getData` (ZooKeeper ≥ 3.6): one request for all of
/// them, then `getChildren` for any whose stat counts children. `Err` when the multi-read as a
/// whole failed; a node's own error (gone, not readable) is its entry's.
async fn read_batch(client: &zkc::Client, paths: &[String]) -> Result<Vec<NodeRead>, zkc::Error> {
    let mut multi = client.new_multi_reader();
    for path in paths {
        multi.add_get_data(path)?;
    }
    let answers = multi.commit().await?;
    if answers.len() != paths.len() {
        return Err(zkc::Error::UnexpectedError(format!(
            "a multi-read of {} nodes answered {}",
            paths.len(),
            answers.len()
        )));
    }
    let mut reads = Vec::with_capacity(paths.len());
    for (path, answer) in paths.iter().zip(answers) {
        reads.push(match answer {
            zkc::MultiReadResult::Data { data, stat } => {
                after_data(client, path, data, &stat).await
            }
            zkc::MultiReadResult::Error { err } => Err(err),
            _ => Err(zkc::Error::UnexpectedError(
                "a multi-read answered getData with something else".into(),
            )),
        });
    }
    Ok(reads)
}

/// How the siblings of a probe are read, from what the probe was (`None`: gone or not
/// readable). A parent's children are all alike as a rule (a lock's queue nodes, a group's
/// lock nodes), so the first one is read with `getChildren` while its siblings wait, and they
/// are read as it turned out: with `getData` when it was an ephemeral node (which has no
/// children and, written by a lock client, usually has short data), in multi-reads where the
/// ensemble has them, else with `getChildren`. A guess that is wrong costs one request more
/// for that node, never a node: `getData` of a node with children goes on to `getChildren`.
fn ask_after(probe: Option<&NodeMeta>) -> Ask {
    match probe {
        Some(meta) if meta.ephemeral_owner != 0 && meta.data_len <= DATA_MAX => Ask::Data,
        _ => Ask::Children,
    }
}

/// Whether the ensemble answers multi-reads, as the helpers found.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Multi {
    /// Not tried yet: one multi-read at a time, on a helper.
    Unknown,
    Works,
    /// Refused (a server before 3.6): one request per node.
    Refused,
}

/// A full read's state: what is read, what is left, and what waits for a probe.
struct Walk {
    nodes: Vec<(String, NodeMeta)>,
    unreadable: Vec<String>,
    pending: Vec<Job>,
    /// Siblings to read in multi-reads, by helpers only.
    batches: Vec<Vec<String>>,
    /// The siblings of each probe in flight, by parent.
    siblings: std::collections::HashMap<String, Vec<String>>,
    multi: Multi,
    /// A multi-read is out while [`Multi::Unknown`].
    trying_multi: bool,
}

impl Walk {
    /// Queues the siblings of the probe at `path`, read as it turned out ([`ask_after`]).
    fn release(&mut self, path: &str, probe: Option<&NodeMeta>) {
        let ask = ask_after(probe);
        let Some((parent, _)) = path.rsplit_once('/') else {
            return;
        };
        let parent = if parent.is_empty() { "/" } else { parent };
        let siblings = self.siblings.remove(parent).unwrap_or_default();
        if ask == Ask::Data && self.multi != Multi::Refused {
            for chunk in siblings.chunks(MULTI_READ) {
                self.batches.push(chunk.to_vec());
            }
        } else {
            self.pending
                .extend(siblings.into_iter().map(|path| Job::One {
                    path,
                    ask,
                    probe: false,
                }));
        }
    }

    /// Turns every batch back into single reads (no helper left to read them, or multi-reads
    /// refused).
    fn split_batches(&mut self) {
        for batch in std::mem::take(&mut self.batches) {
            self.pending.extend(batch.into_iter().map(|path| Job::One {
                path,
                ask: Ask::Data,
                probe: false,
            }));
        }
    }

    /// Takes one node's read. `Err` is a failure of the session that read it.
    async fn settle(
        &mut self,
        client: &zkc::Client,
        path: String,
        probe: bool,
        read: NodeRead,
    ) -> Result<(), (String, zkc::Error)> {
        // A probe that failed with its session is read again, its siblings still waiting.
        let settled =
            !matches!(&read, Err(e) if !matches!(e, zkc::Error::NoNode | zkc::Error::NoAuth));
        if probe && settled {
            self.release(&path, read.as_ref().ok().map(|(_, meta)| meta));
        }
        match read {
            Ok((children, meta)) => {
                let mut children = children.into_iter().map(|child| join(&path, &child));
                if let Some(first) = children.next() {
                    let rest: Vec<String> = children.collect();
                    let probe = !rest.is_empty();
                    if probe {
                        self.siblings.insert(path.clone(), rest);
                    }
                    self.pending.push(Job::One {
                        path: first,
                        ask: Ask::Children,
                        probe,
                    });
                }
                self.nodes.push((path, meta));
            }
            Err(zkc::Error::NoNode) => {}
            Err(zkc::Error::NoAuth) => {
                if let Ok(Some(stat)) = client.check_stat(&path).await {
                    self.nodes.push((path.clone(), meta_of(&stat)));
                }
                self.unreadable.push(path);
            }
            Err(e) => return Err((path, e)),
        }
        Ok(())
    }
}

/// What came back for one job.
enum Reply {
    One(NodeRead),
    Batch(Result<Vec<NodeRead>, zkc::Error>),
}

/// Reads every node below the roots, pipelined: up to `per_session` node reads in flight on
/// each session, each node's children queued as soon as its answer arrives and sent on the
/// session with the fewest in flight. A node costs one request, or two for a node with both
/// children and short data, and siblings of an ephemeral node are read 64 to a request where
/// the ensemble has multi-reads (`Ask`, `ask_after`); data longer than [`DATA_MAX`] is
/// dropped.
///
/// `primary` is the session whose watches cover the read; `helpers` yields more sessions as
/// they become ready (the collector's `helpers`: one per member, each synced after the
/// watches were registered, so it reads a state no older than theirs). The read starts on the
/// primary at once and spreads over each helper as it arrives; a helper that fails a request
/// is dropped from the read and its unanswered paths go to the others, while a failure of the
/// primary fails the read. Only helpers send multi-reads, the first one alone: a server
/// before 3.6 that refuses one (and may close the connection) costs a helper, never the
/// watching session; the read then goes on one request per node.
///
/// Nodes go to `part` in parts of `part_size` as they are read (parents before their
/// children), so the read holds at most one part and the paths still to visit. Nodes whose
/// children are not readable (ACL) are kept with `exists` metadata and listed in the answer.
/// `None` when `part` answered false (lockscope is stopping).
pub async fn read_tree_in_parts<F: std::future::Future<Output = bool>>(
    primary: &zkc::Client,
    helpers: impl stream::Stream<Item = zkc::Client>,
    per_session: usize,
    roots: &[String],
    part_size: usize,
    mut part: impl FnMut(Vec<(String, NodeMeta)>) -> F,
) -> Result<Option<Vec<String>>, zkc::Error> {
    let mut helpers = std::pin::pin!(helpers);
    let mut helpers_done = false;
    let mut readers = vec![Reader {
        client: primary.clone(),
        in_flight: 0,
        live: true,
        lost: None,
    }];
    let mut walk = Walk {
        nodes: Vec::new(),
        unreadable: Vec::new(),
        pending: roots
            .iter()
            .map(|root| Job::One {
                path: root.clone(),
                ask: Ask::Children,
                probe: false,
            })
            .collect(),
        batches: Vec::new(),
        siblings: std::collections::HashMap::new(),
        multi: Multi::Unknown,
        trying_multi: false,
    };
    let mut in_flight = FuturesUnordered::new();
    loop {
        loop {
            if walk.pending.is_empty() && walk.batches.is_empty() {
                break;
            }
            let helpers_left = !helpers_done || readers.iter().skip(1).any(|r| r.live);
            if !helpers_left && !walk.batches.is_empty() {
                // No helper is left to read them.
                walk.split_batches();
            }
            // The session with the fewest in flight that can take a job: a helper takes a
            // batch first, the primary only single reads.
            let mut open: Vec<usize> = (0..readers.len())
                .filter(|&slot| readers[slot].live && readers[slot].in_flight < per_session)
                .collect();
            open.sort_by_key(|&slot| readers[slot].in_flight);
            let taken = open.into_iter().find_map(|slot| {
                let may_batch = slot > 0
                    && match walk.multi {
                        Multi::Works => true,
                        Multi::Unknown => !walk.trying_multi,
                        Multi::Refused => false,
                    };
                if let Some(batch) = may_batch.then(|| walk.batches.pop()).flatten() {
                    walk.trying_multi |= walk.multi == Multi::Unknown;
                    return Some((slot, Job::Batch(batch)));
                }
                walk.pending.pop().map(|job| (slot, job))
            });
            let Some((slot, job)) = taken else { break };
            let reader = &mut readers[slot];
            reader.in_flight += job.nodes();
            let client = reader.client.clone();
            let lost = reader.lost.clone();
            in_flight.push(async move {
                let read = async {
                    match &job {
                        Job::One { path, ask, .. } => {
                            Reply::One(read_node(&client, path, *ask).await)
                        }
                        Job::Batch(paths) => Reply::Batch(read_batch(&client, paths).await),
                    }
                };
                let reply = match lost {
                    // A helper whose connection is lost fails its jobs in flight at once.
                    Some(lost) => tokio::select! {
                        reply = read => Some(reply),
                        () = lost => None,
                    },
                    None => Some(read.await),
                };
                (slot, job, reply)
            });
        }
        if in_flight.is_empty() {
            if walk.pending.is_empty() && walk.batches.is_empty() {
                break;
            }
            // Only batches are left, and no helper may take one now: wait for a helper, or
            // read them one by one once none can come.
            match (!helpers_done).then(|| helpers.next()) {
                Some(next) => match next.await {
                    Some(client) => readers.push(Reader::helper(client)),
                    None => helpers_done = true,
                },
                None => walk.split_batches(),
            }
            continue;
        }
        let (slot, job, reply) = tokio::select! {
            biased;
            Some(answer) = in_flight.next() => answer,
            helper = helpers.next(), if !helpers_done => {
                match helper {
                    Some(client) => readers.push(Reader::helper(client)),
                    None => helpers_done = true,
                }
                continue;
            }
        };
        readers[slot].in_flight -= job.nodes();
        let client = readers[slot].client.clone();
        // `Some(error)`: the session failed this job (`None`: its connection was lost).
        let failed: Option<Option<zkc::Error>> = match (job, reply) {
            (Job::One { path, ask, probe }, Some(Reply::One(read))) => {
                match walk.settle(&client, path, probe, read).await {
                    Ok(()) => None,
                    Err((path, e)) => {
                        walk.pending.push(Job::One { path, ask, probe });
                        Some(Some(e))
                    }
                }
            }
            (Job::Batch(paths), Some(Reply::Batch(Ok(reads)))) => {
                if walk.multi == Multi::Unknown {
                    tracing::debug!(
                        "the ensemble answers multi-reads: siblings are read 64 to a request"
                    );
                }
                walk.multi = Multi::Works;
                walk.trying_multi = false;
                let mut failed = None;
                for (path, read) in paths.into_iter().zip(reads) {
                    if let Err((path, e)) = walk.settle(&client, path, false, read).await {
                        walk.pending.push(Job::One {
                            path,
                            ask: Ask::Data,
                            probe: false,
                        });
                        failed = Some(Some(e));
                    }
                }
                failed
            }
            (Job::Batch(paths), Some(Reply::Batch(Err(e)))) => {
                if walk.multi == Multi::Unknown {
                    tracing::info!(error = %e, "the ensemble refused a multi-read; reading one node per request");
                    walk.multi = Multi::Refused;
                }
                walk.trying_multi = false;
                walk.batches.push(paths);
                if walk.multi == Multi::Refused {
                    walk.split_batches();
                }
                Some(Some(e))
            }
            (job, _) => {
                // Lost with the connection (or, impossibly, answered in the wrong shape):
                // read again by the others.
                match job {
                    Job::One { .. } => walk.pending.push(job),
                    Job::Batch(paths) => {
                        if walk.multi == Multi::Unknown {
                            walk.trying_multi = false;
                        }
                        walk.batches.push(paths);
                    }
                }
                Some(None)
            }
        };
        match failed {
            None => {}
            Some(Some(e)) if slot == 0 => return Err(e),
            Some(None) if slot == 0 => return Err(zkc::Error::ConnectionLoss),
            Some(error) => {
                if readers[slot].live {
                    match error {
                        Some(e) => {
                            tracing::debug!(error = %e, "a helper session failed a read; the others read on")
                        }
                        None => tracing::debug!(
                            "a helper session lost its connection; the others read on"
                        ),
                    }
                }
                readers[slot].live = false;
            }
        }
        if walk.nodes.len() >= part_size && !part(std::mem::take(&mut walk.nodes)).await {
            return Ok(None);
        }
    }
    if !walk.nodes.is_empty() && !part(walk.nodes).await {
        return Ok(None);
    }
    Ok(Some(walk.unreadable))
}

/// A poll may keep the members busy for at most this share of the time: the interval stretches
/// beyond `poll_interval` when a poll takes long (measured: at 100,000 watches `wchp` takes
/// ~75 ms per member and `dump` ~65 ms on the leader).
const POLL_BUDGET_DIVISOR: u32 = 20;

/// A leader's `dump` up to this size is read whenever releases wait for their cause
/// ([`crate::DumpWanted::Useful`]); a larger one only when a session is connected nowhere. It
/// lists every ephemeral node (~33 bytes each): 1 MiB is about 30,000 nodes.
const SMALL_DUMP: usize = 1 << 20;

/// How long the leader may take to catch up with the member furthest ahead before a round goes
/// out without its `dump` (its word on sessions would predate what another member had applied).
const LEADER_CATCH_UP: Duration = Duration::from_secs(1);

/// Asks every member for watches and sessions every `poll_interval`, or less often when the
/// answers are slow (see [`POLL_BUDGET_DIVISOR`]).
async fn run_poller(
    config: Arc<ZkSourceConfig>,
    out: Outbox<Update>,
    own: watch::Receiver<Option<i64>>,
    dump_wanted: watch::Receiver<crate::DumpWanted>,
) {
    let members = fourlw::Member::all(&config);
    // The size of the last `dump` read (none yet: unknown, so small).
    let mut last_dump = 0usize;
    loop {
        let started = tokio::time::Instant::now();
        let own_session = *own.borrow();
        let dump = match *dump_wanted.borrow() {
            crate::DumpWanted::Needed => true,
            crate::DumpWanted::Useful => last_dump <= SMALL_DUMP,
            crate::DumpWanted::No => false,
        };
        let (report, waited, dump_bytes) = poll_round(
            &members,
            own_session,
            &config.roots,
            config.poll_interval,
            dump,
        )
        .await;
        last_dump = dump_bytes.unwrap_or(last_dump);
        // Waiting for the leader to catch up keeps no member busy.
        let took = started.elapsed().saturating_sub(waited);
        tracing::debug!(
            source = %config.name,
            took_ms = took.as_millis() as u64,
            waited_ms = waited.as_millis() as u64,
            dump_bytes = ?dump_bytes,
            "ensemble round read"
        );
        if !out.send(Update::Ensemble(report)).await {
            return;
        }
        let period = config.poll_interval.max(took * POLL_BUDGET_DIVISOR);
        tokio::time::sleep_until(started + period).await;
    }
}

struct MemberAnswer {
    cons: Vec<fourlw::Connection>,
    wchp: std::collections::BTreeMap<String, std::collections::BTreeSet<i64>>,
    wchs_total: u64,
    watch_count: u64,
    leader: bool,
    dump: Option<std::collections::BTreeMap<i64, Option<i64>>>,
    /// The size of the `dump` read.
    dump_bytes: Option<usize>,
    /// Why a leader's `dump` was left out.
    behind: Option<String>,
    /// Time spent waiting for the leader to catch up.
    waited: Duration,
}

/// Asks one member. `zxid` is where the member stood at the start of the round and `cut` the
/// furthest any member stood then (both from `srvr`): a leader's `dump` is read only once it has
/// applied `cut`, so it lists sessions as they are after every transaction another member had
/// applied, including a close whose removals lockscope already heard from its own member.
async fn ask_member(
    member: &fourlw::Member,
    timeout: Duration,
    zxid: Option<i64>,
    cut: Option<i64>,
    want_dump: bool,
) -> Result<MemberAnswer, fourlw::FourLetterError> {
    let (mntr, cons, wchs, wchp) = tokio::try_join!(
        fourlw::ask(member, "mntr", timeout),
        fourlw::ask(member, "cons", timeout),
        fourlw::ask(member, "wchs", timeout),
        fourlw::ask(member, "wchp", timeout),
    )?;
    let mntr = fourlw::parse_mntr(&mntr);
    let leader = mntr
        .get("zk_server_state")
        .is_some_and(|s| s == "leader" || s == "standalone");
    let (mut dump, mut dump_bytes, mut behind, mut waited) = (None, None, None, Duration::ZERO);
    if leader && want_dump {
        let caught_up;
        (caught_up, waited) = match cut {
            Some(cut) => catch_up(member, zxid, cut, timeout).await,
            // No member answered `srvr` (not allowed): the leader's word as it stands.
            None => (true, Duration::ZERO),
        };
        if caught_up {
            let text = fourlw::ask(member, "dump", timeout).await?;
            dump_bytes = Some(text.len());
            dump = Some(fourlw::parse_dump_sessions(&text));
        } else {
            behind = Some(format!(
                "{member}: leader still behind zxid {:#x} after {LEADER_CATCH_UP:?}; its sessions are left out of this round",
                cut.unwrap_or_default()
            ));
        }
    }
    Ok(MemberAnswer {
        cons: fourlw::parse_cons(&cons),
        wchp: fourlw::parse_wchp(&wchp),
        wchs_total: fourlw::parse_wchs_total(&wchs).unwrap_or(0),
        watch_count: mntr
            .get("zk_watch_count")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        leader,
        dump,
        dump_bytes,
        behind,
        waited,
    })
}

/// Waits until `member` says (`srvr`) it has applied transaction `cut`, asking again every 10 ms
/// for at most [`LEADER_CATCH_UP`]; `zxid` is its last answer. Answers whether it got there and
/// how long that took. A member that does not allow `srvr` is taken as it stands.
async fn catch_up(
    member: &fourlw::Member,
    mut zxid: Option<i64>,
    cut: i64,
    timeout: Duration,
) -> (bool, Duration) {
    let started = tokio::time::Instant::now();
    loop {
        if zxid.is_some_and(|z| z >= cut) {
            return (true, started.elapsed());
        }
        if started.elapsed() >= LEADER_CATCH_UP {
            return (false, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        zxid = match fourlw::ask(member, "srvr", timeout).await {
            Ok(text) => fourlw::parse_srvr_zxid(&text),
            Err(fourlw::FourLetterError::NotAllowed { .. }) => return (true, started.elapsed()),
            Err(_) => None,
        };
    }
}

/// One round of four-letter words over every member, merged.
///
/// The leader's sessions (`live_sessions`) are read after the leader has applied every
/// transaction any member had applied when the round started (see [`ask_member`]); without that
/// they are left out of the round.
pub async fn poll_ensemble(
    members: &[fourlw::Member],
    own_session: Option<i64>,
    roots: &[String],
    interval: Duration,
) -> EnsembleReport {
    poll_round(members, own_session, roots, interval, true)
        .await
        .0
}

/// [`poll_ensemble`], how long it waited for the leader to catch up and the size of the
/// leader's `dump`, which (with the `srvr` cut it waits for) is read only when `want_dump`.
async fn poll_round(
    members: &[fourlw::Member],
    own_session: Option<i64>,
    roots: &[String],
    interval: Duration,
    want_dump: bool,
) -> (EnsembleReport, Duration, Option<usize>) {
    let timeout = interval.clamp(Duration::from_millis(500), Duration::from_secs(5));
    let started_ms = lockscope_core::now_ms();
    // Where every member stands before anything else is asked (the cut the leader's `dump`
    // waits for).
    let zxids = futures::future::join_all(members.iter().map(|m| async move {
        if !want_dump {
            return None;
        }
        let text = fourlw::ask(m, "srvr", timeout).await.ok()?;
        fourlw::parse_srvr_zxid(&text)
    }))
    .await;
    let cut = zxids.iter().flatten().max().copied();
    let answers = futures::future::join_all(
        members
            .iter()
            .zip(&zxids)
            .map(|(m, zxid)| ask_member(m, timeout, *zxid, cut, want_dump)),
    )
    .await;
    let (mut waited, mut dump_bytes) = (Duration::ZERO, None);
    let mut report = EnsembleReport {
        started_ms,
        own_session,
        members: members.len(),
        unnamed_child_watches: vec![0; members.len()],
        ..EnsembleReport::default()
    };
    for (index, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(answer) => {
                report.members_answering += 1;
                let own_here = answer.cons.iter().any(|c| Some(c.session) == own_session);
                for conn in &answer.cons {
                    report
                        .connections
                        .insert(conn.session, (index, conn.timeout_ms));
                    if !conn.client.is_empty() {
                        report.clients.insert(conn.session, conn.client.clone());
                    }
                }
                let observers: u64 = roots
                    .iter()
                    .filter_map(|root| answer.wchp.get(root.as_str()))
                    .map(|sessions| {
                        sessions.iter().filter(|s| Some(**s) != own_session).count() as u64
                    })
                    .sum();
                for (path, sessions) in answer.wchp {
                    report
                        .data_watchers
                        .entry(path)
                        .or_default()
                        .extend(sessions);
                }
                // lockscope's own persistent recursive watches (one per root) count in both
                // `wchs` and, once more, in `zk_watch_count` on the member it is connected to
                // (seen on 3.8.0); they are not anybody's child watch. Nor are those of other
                // lockscope replicas watching the same roots: a watch on a root itself (not a
                // lock under it) is such an observer's, counted once more in the same way.
                let own_watches = if own_here { roots.len() as u64 } else { 0 };
                report.unnamed_child_watches[index] = answer
                    .watch_count
                    .saturating_sub(answer.wchs_total)
                    .saturating_sub(own_watches)
                    .saturating_sub(observers);
                if answer.leader {
                    report.live_sessions = answer.dump;
                    dump_bytes = dump_bytes.or(answer.dump_bytes);
                }
                report.errors.extend(answer.behind);
                waited = waited.max(answer.waited);
            }
            Err(e) => report.errors.push(e.to_string()),
        }
    }
    report.at_ms = lockscope_core::now_ms();
    (report, waited, dump_bytes)
}
