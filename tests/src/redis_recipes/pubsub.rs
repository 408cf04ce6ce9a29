//! Waiters subscribed with `SUBSCRIBE` or `SSUBSCRIBE`, and the subscriber counts. (See the parent module for what these clients follow.)

use super::*;

/// Plain or sharded pub/sub: two separate namespaces in Redis 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PubSubKind {
    /// `SUBSCRIBE` / `PUBLISH`, counted by `PUBSUB NUMSUB`. In a Cluster, a `PUBLISH` on any
    /// node reaches subscribers on every node.
    Plain,
    /// `SSUBSCRIBE` / `SPUBLISH`, counted by `PUBSUB SHARDNUMSUB`. In a Cluster the channel
    /// belongs to a slot like a key: subscribe on the master that owns it.
    Sharded,
}

impl PubSubKind {
    fn subscribe_command(self) -> &'static str {
        match self {
            PubSubKind::Plain => "SUBSCRIBE",
            PubSubKind::Sharded => "SSUBSCRIBE",
        }
    }

    fn confirmation(self) -> &'static [u8] {
        match self {
            PubSubKind::Plain => b"subscribe",
            PubSubKind::Sharded => b"ssubscribe",
        }
    }

    fn message(self) -> &'static [u8] {
        match self {
            PubSubKind::Plain => b"message",
            PubSubKind::Sharded => b"smessage",
        }
    }

    /// The publish command that reaches subscribers of this kind.
    pub fn publish_command(self) -> PublishCommand {
        match self {
            PubSubKind::Plain => PublishCommand::Publish,
            PubSubKind::Sharded => PublishCommand::SPublish,
        }
    }
}

/// `PUBSUB NUMSUB channel` / `PUBSUB SHARDNUMSUB channel` on the server behind `conn` (both are
/// node-local).
pub async fn pubsub_subscribers(
    conn: &mut MultiplexedConnection,
    kind: PubSubKind,
    channel: &str,
) -> Result<i64> {
    let sub = match kind {
        PubSubKind::Plain => "NUMSUB",
        PubSubKind::Sharded => "SHARDNUMSUB",
    };
    let (_, n): (Vec<u8>, i64) = redis::cmd("PUBSUB")
        .arg(sub)
        .arg(channel)
        .query_async(conn)
        .await
        .with_context(|| format!("PUBSUB {sub} {channel}"))?;
    Ok(n)
}

/// One RESP2 reply, as much of it as a subscriber needs.
#[derive(Debug)]
pub(super) enum Reply {
    Bulk(Option<Vec<u8>>),
    Int(i64),
    Error(String),
    Array(Vec<Reply>),
}

type ReplyReader = tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>;

async fn read_line(rd: &mut ReplyReader) -> Result<String> {
    use tokio::io::AsyncBufReadExt;
    let mut line = String::new();
    let n = rd.read_line(&mut line).await?;
    anyhow::ensure!(n > 0, "connection closed");
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

pub(super) fn read_reply(
    rd: &mut ReplyReader,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply>> + Send + '_>> {
    Box::pin(async move {
        use tokio::io::AsyncReadExt;
        let line = read_line(rd).await?;
        let (tag, rest) = line.split_at(line.len().min(1));
        Ok(match tag {
            "+" => Reply::Bulk(Some(rest.as_bytes().to_vec())),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(rest.parse()?),
            "$" => {
                let len: i64 = rest.parse()?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut buf = vec![0u8; len as usize + 2];
                    rd.read_exact(&mut buf).await?;
                    buf.truncate(len as usize);
                    Reply::Bulk(Some(buf))
                }
            }
            "*" => {
                let len: i64 = rest.parse()?;
                let mut items = Vec::new();
                for _ in 0..len.max(0) {
                    items.push(read_reply(rd).await?);
                }
                Reply::Array(items)
            }
            _ => anyhow::bail!("unexpected RESP line {line:?}"),
        })
    })
}

/// `kind` word, channel and payload of a pub/sub push.
pub(super) fn push_parts(reply: &Reply) -> Option<(&[u8], &[u8], &Reply)> {
    let Reply::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Reply::Bulk(Some(kind)), Reply::Bulk(Some(channel)), last] => {
            Some((kind.as_slice(), channel.as_slice(), last))
        }
        _ => None,
    }
}

/// `host:port` of a `redis://[user:password@]host:port[/db]` URL (credentials are not used:
/// test servers have none).
pub(super) fn host_port(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("redis://")
        .with_context(|| format!("not a redis:// URL: {url}"))?;
    let rest = rest.rsplit('@').next().unwrap_or(rest);
    let hp = rest.split('/').next().unwrap_or(rest);
    anyhow::ensure!(hp.contains(':'), "no port in {url}");
    Ok(hp.to_string())
}

/// A pub/sub connection subscribed to one channel (counted by `PUBSUB NUMSUB` or `PUBSUB
/// SHARDNUMSUB`) until dropped, like the one connection a Redisson client subscribes a waiting
/// lock with. Messages published on it are kept and can be read with
/// [`SubscriberHandle::next_message`].
pub struct SubscriberHandle {
    channel: String,
    kind: PubSubKind,
    messages: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    task: tokio::task::JoinHandle<()>,
}

impl SubscriberHandle {
    /// The subscribed channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Plain or sharded.
    pub fn kind(&self) -> PubSubKind {
        self.kind
    }

    /// The next message's payload, waiting up to `timeout`; `None` on timeout or when the
    /// connection closed.
    pub async fn next_message(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        tokio::time::timeout(timeout, self.messages.recv())
            .await
            .ok()
            .flatten()
    }
}

impl Drop for SubscriberHandle {
    fn drop(&mut self) {
        // The task owns the connection: aborting it closes the socket and the server forgets
        // the subscription.
        self.task.abort();
    }
}

/// Subscribes a new connection to `channel` with `SUBSCRIBE` or `SSUBSCRIBE` (the way a waiting
/// Redisson client does: `SSUBSCRIBE` when its scripts `SPUBLISH`); returns once the server
/// confirmed the subscription. On a Cluster, a sharded subscription must be made on the master
/// owning the channel's slot (any other answers `MOVED`, an error here).
pub async fn subscribe_waiter(
    url: &str,
    channel: &str,
    kind: PubSubKind,
) -> Result<SubscriberHandle> {
    use tokio::io::AsyncWriteExt;
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
    let command = kind.subscribe_command();
    let mut request = format!(
        "*2\r\n${}\r\n{command}\r\n${}\r\n",
        command.len(),
        channel.len()
    )
    .into_bytes();
    request.extend_from_slice(channel.as_bytes());
    request.extend_from_slice(b"\r\n");
    wr.write_all(&request)
        .await
        .with_context(|| format!("{command} {channel}"))?;
    let reply = tokio::time::timeout(Duration::from_secs(5), read_reply(&mut rd))
        .await
        .map_err(|_| anyhow::anyhow!("{command} {channel}: no confirmation within 5 s"))?
        .with_context(|| format!("{command} {channel}"))?;
    if let Reply::Error(e) = &reply {
        anyhow::bail!("{command} {channel} on {url}: {e}");
    }
    match push_parts(&reply) {
        Some((k, c, Reply::Int(n)))
            if k == kind.confirmation() && c == channel.as_bytes() && *n >= 1 => {}
        _ => anyhow::bail!("{command} {channel} on {url} answered {reply:?}"),
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let want = channel.as_bytes().to_vec();
    let task = tokio::spawn(async move {
        // Keep the write half alive: dropping it would shut the socket's sending side.
        let _wr = wr;
        while let Ok(reply) = read_reply(&mut rd).await {
            if let Some((k, c, Reply::Bulk(Some(payload)))) = push_parts(&reply) {
                if k == kind.message() && c == want.as_slice() {
                    // Nobody reading is fine: stay subscribed anyway.
                    let _ = tx.send(payload.clone());
                }
            }
        }
    });
    Ok(SubscriberHandle {
        channel: channel.to_string(),
        kind,
        messages: rx,
        task,
    })
}

/// Subscribes a new connection to `channel` (e.g. [`rlock_channel`]) with plain `SUBSCRIBE`,
/// the way a waiting Redisson client does on a standalone server; returns once the server
/// confirmed the subscription.
pub async fn subscribe_unlock_channel(url: &str, channel: &str) -> Result<SubscriberHandle> {
    subscribe_waiter(url, channel, PubSubKind::Plain).await
}
