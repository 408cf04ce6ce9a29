//! ZooKeeper four-letter words: the client (plain TCP, or TLS with the source's files on a
//! `secureClientPort`) and the parsers of their answers.
//!
//! `wchp` (data/exists watches by path), `wchs` (watch totals), `mntr` (server state, total watch
//! count), `cons` (connections with session id and timeout), `srvr` (the last transaction the
//! member applied) and `dump` (on the leader: every live session) are asked of every ensemble
//! member, because each member only knows its own clients.
//! The parsers are pure and forgiving: unknown lines are skipped, never fatal.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Answers larger than this are cut (a huge `wchp` must not take the process down).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FourLetterError {
    #[error("{member}: {word} timed out")]
    Timeout { member: String, word: String },
    #[error("{member}: {word}: {source}")]
    Io {
        member: String,
        word: String,
        source: std::io::Error,
    },
    #[error("{member}: {word} is not allowed (add it to 4lw.commands.whitelist)")]
    NotAllowed { member: String, word: String },
}

/// One ensemble member as four-letter words reach it: its `host:port` and, for a source with
/// TLS, the connector made from the source's files.
#[derive(Clone)]
pub struct Member {
    pub addr: String,
    pub tls: Option<tokio_rustls::TlsConnector>,
}

impl Member {
    /// Every member of `config`'s ensemble; over TLS when the source has a `tls_ca_file` (its
    /// files were checked at start-up: one that went bad since leaves the words on plain TCP,
    /// which such a member refuses, reported as the round's error).
    pub fn all(config: &super::ZkSourceConfig) -> Vec<Member> {
        let tls = super::tls::connector(config).ok().flatten();
        config
            .members()
            .into_iter()
            .map(|addr| Member {
                addr,
                tls: tls.clone(),
            })
            .collect()
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.addr)
    }
}

/// Sends one four-letter word to `member` and reads the answer to EOF.
pub async fn ask(
    member: &Member,
    word: &str,
    timeout: Duration,
) -> Result<String, FourLetterError> {
    let io = |source| FourLetterError::Io {
        member: member.to_string(),
        word: word.to_string(),
        source,
    };
    let work = async {
        let stream = TcpStream::connect(&member.addr).await.map_err(io)?;
        let mut buf = Vec::new();
        match &member.tls {
            None => exchange(stream, word, &mut buf).await.map_err(io)?,
            Some(tls) => {
                let stream = super::tls::handshake(tls, &member.addr, stream)
                    .await
                    .map_err(io)?;
                exchange(stream, word, &mut buf).await.map_err(io)?
            }
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    };
    let text =
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| FourLetterError::Timeout {
                member: member.to_string(),
                word: word.to_string(),
            })??;
    if text.contains("is not executed because it is not in the whitelist") {
        return Err(FourLetterError::NotAllowed {
            member: member.to_string(),
            word: word.to_string(),
        });
    }
    Ok(text)
}

/// Writes `word` and reads the answer to EOF (at most [`MAX_ANSWER`] bytes).
async fn exchange(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    word: &str,
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    stream.write_all(word.as_bytes()).await?;
    (&mut stream)
        .take(MAX_ANSWER as u64)
        .read_to_end(buf)
        .await?;
    Ok(())
}

/// One client connection from `cons`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub session: i64,
    pub timeout_ms: Option<u64>,
    /// Client address as the server sees it.
    pub client: String,
}

/// Parses `cons`: ` /127.0.0.1:41234[1](queued=0,…,sid=0x100…,…,to=6000,…)`.
pub fn parse_cons(text: &str) -> Vec<Connection> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(open) = line.find('(') else { continue };
        let client = line[..open]
            .trim_start_matches('/')
            .split('[')
            .next()
            .unwrap_or_default()
            .to_string();
        let fields = line[open + 1..].trim_end_matches(')');
        let mut session = None;
        let mut timeout_ms = None;
        for field in fields.split(',') {
            if let Some(v) = field.strip_prefix("sid=") {
                session = lockscope_model::parse_session_hex(v);
            } else if let Some(v) = field.strip_prefix("to=") {
                timeout_ms = v.parse().ok();
            }
        }
        if let Some(session) = session {
            out.push(Connection {
                session,
                timeout_ms,
                client,
            });
        }
    }
    out
}

/// Parses `wchp`: a path line, then one tab-indented session per line.
pub fn parse_wchp(text: &str) -> BTreeMap<String, BTreeSet<i64>> {
    let mut out: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with('/') {
            current = Some(line.trim_end().to_string());
        } else if let (Some(path), Some(session)) =
            (&current, lockscope_model::parse_session_hex(line))
        {
            if line.trim().starts_with("0x") {
                out.entry(path.clone()).or_default().insert(session);
            }
        }
    }
    out
}

/// Parses `wchs`: the `Total watches:N` line (data and exists watches only).
pub fn parse_wchs_total(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Total watches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Parses `mntr` into key → value.
pub fn parse_mntr(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('\t')?;
            Some((key.trim().to_string(), value.trim().to_string()))
        })
        .collect()
}

/// Parses `dump` into the sessions its session tracker lists, with the expiry deadline (epoch ms)
/// of the bucket the leader keeps each in (`None` when the line has none).
///
/// Only the tracker part counts: the leader drops a session from its tracker when it starts
/// applying the session's close (or when it expires it), before any of the session's nodes go,
/// while the later "ephemeral nodes" part still lists a closing session until its nodes are gone.
pub fn parse_dump_sessions(text: &str) -> BTreeMap<i64, Option<i64>> {
    let mut out = BTreeMap::new();
    let mut bucket: Option<i64> = None;
    for line in text.lines() {
        if line.starts_with("ephemeral nodes dump") || line.starts_with("Connections dump") {
            break;
        }
        if let Some((_, date)) = line.split_once(" expire at ") {
            bucket = parse_java_date(date.trim_end_matches(':'));
            continue;
        }
        // `\t0x…` under a bucket (leader, standalone) or `0x…\t10000ms` (a learner's list).
        let token = line.split_whitespace().next().unwrap_or_default();
        if token.starts_with("0x") {
            if let Some(session) = lockscope_model::parse_session_hex(token.trim_end_matches(':')) {
                let entry = out.entry(session).or_insert(None);
                if entry.is_none() {
                    *entry = bucket;
                }
            }
        }
    }
    out
}

/// Parses `srvr`: the last transaction the member applied (`Zxid: 0x…`).
pub fn parse_srvr_zxid(text: &str) -> Option<i64> {
    text.lines()
        .find_map(|line| line.trim().strip_prefix("Zxid:"))
        .and_then(|v| lockscope_model::parse_session_hex(v.trim()))
}

/// Parses `java.util.Date::toString` output in UTC (`Sun Nov 22 12:51:38 UTC 2026`), which is
/// what ZooKeeper prints in `dump`. Other time zones are not guessed at: `None`.
fn parse_java_date(text: &str) -> Option<i64> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_, month, day, time, zone, year] = parts.as_slice() else {
        return None;
    };
    if *zone != "UTC" && *zone != "GMT" {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m == month)? as i64 + 1;
    let day: i64 = day.parse().ok()?;
    let year: i64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|v| v.parse::<i64>());
    let (h, m, sec) = (hms.next()?.ok()?, hms.next()?.ok()?, hms.next()?.ok()?);
    // Days from the civil date (Howard Hinnant's algorithm). A server can print anything: a
    // date whose numbers overflow is no date (checked arithmetic, found by fuzzing).
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y.div_euclid(400);
    let yoe = y.checked_sub(era.checked_mul(400)?)?;
    let mp = (month + 9) % 12;
    let doy = ((153 * mp + 2) / 5).checked_add(day)?.checked_sub(1)?;
    let doe = (yoe * 365 + yoe / 4 - yoe / 100).checked_add(doy)?;
    let days = era
        .checked_mul(146_097)?
        .checked_add(doe)?
        .checked_sub(719_468)?;
    days.checked_mul(24)?
        .checked_add(h)?
        .checked_mul(60)?
        .checked_add(m)?
        .checked_mul(60_000)?
        .checked_add(sec.checked_mul(1000)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_that_overflow_are_no_dates() {
        assert_eq!(
            parse_java_date("Sun Nov 22 12:51:38 UTC 300000000000000"),
            None
        );
        assert_eq!(
            parse_java_date("Sun Nov 9223372036854775807 12:51:38 UTC 2026"),
            None
        );
        assert!(parse_java_date("Sun Nov 22 12:51:38 UTC 2026").is_some());
    }

    #[test]
    fn parses_cons() {
        let text = " /127.0.0.1:45678[1](queued=0,recved=10,sent=10,sid=0x1000a1b2c3d0000,lop=PING,est=1700000000000,to=6000,lcxid=0x5,lzxid=0x100000010,lresp=1700000001000,llat=0,minlat=0,avglat=0,maxlat=1)\n /127.0.0.1:45679[0](queued=0,recved=1,sent=0)\n\n";
        let conns = parse_cons(text);
        assert_eq!(conns.len(), 1);
        assert_eq!(conns[0].session, 0x1000a1b2c3d0000);
        assert_eq!(conns[0].timeout_ms, Some(6000));
        assert_eq!(conns[0].client, "127.0.0.1:45678");
    }

    #[test]
    fn parses_wchp_wchs_mntr_dump() {
        let wchp = "/locks/a/lock-0000000001\n\t0x100000000000001\n\t0x100000000000002\n/locks/b\n\t0x100000000000003\n";
        let by_path = parse_wchp(wchp);
        assert_eq!(by_path["/locks/a/lock-0000000001"].len(), 2);
        assert_eq!(by_path["/locks/b"].len(), 1);
        assert_eq!(
            parse_wchs_total("1 connections watching 2 paths\nTotal watches:3\n"),
            Some(3)
        );
        let mntr = parse_mntr("zk_version\t3.8.0\nzk_server_state\tleader\nzk_watch_count\t7\n");
        assert_eq!(mntr["zk_watch_count"], "7");
        // A closing session (0x…3) is out of the tracker but its nodes are still listed.
        let dump = "SessionTracker dump:\nSession Sets (2)/(2):\n0 expire at Sun Nov 22 12:51:37 UTC 2026:\n1 expire at Sun Nov 22 12:51:38 UTC 2026:\n\t0x100000000000001\n1 expire at Sun Nov 22 12:51:40 UTC 2026:\n\t0x100000000000002\nephemeral nodes dump:\nSessions with Ephemerals (2):\n0x100000000000002:\n\t/locks/x\n0x100000000000003:\n\t/locks/y\nConnections dump:\nConnections Sets (1)/(1):\n2 expire at Sun Nov 22 12:51:43 UTC 2026:\n\tip: /127.0.0.1:52984 sessionId: 0x100000000000001\n";
        let sessions = parse_dump_sessions(dump);
        assert_eq!(sessions[&0x100000000000001], Some(1_795_351_898_000));
        assert_eq!(sessions[&0x100000000000002], Some(1_795_351_900_000));
        assert_eq!(sessions.len(), 2, "{sessions:?}");
        // A learner's tracker (seen on 3.8.0 followers) lists sessions with their timeouts.
        let learner = "SessionTracker dump:\nGlobal Sessions(1):\n0x1000010e92b0004\t10000ms\nephemeral nodes dump:\n";
        assert_eq!(
            parse_dump_sessions(learner).into_iter().collect::<Vec<_>>(),
            vec![(0x1000010e92b0004, None)]
        );
        // Seen on 3.8.0.
        let srvr = "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nLatency min/avg/max: 0/0.0/0\nReceived: 2\nSent: 2\nConnections: 1\nOutstanding: 0\nZxid: 0x100002714\nMode: follower\nNode count: 5";
        assert_eq!(parse_srvr_zxid(srvr), Some(0x1_0000_2714));
        assert_eq!(parse_srvr_zxid("Zxid: 0x0\n"), Some(0));
        assert_eq!(
            parse_srvr_zxid("This ZooKeeper instance is not currently serving requests"),
            None
        );
        assert_eq!(parse_java_date("Thu Jan 01 00:00:01 UTC 1970"), Some(1000));
        assert_eq!(parse_java_date("Thu Jan 01 00:00:01 CET 1970"), None);
    }

    #[test]
    fn garbage_is_skipped() {
        assert!(parse_cons("(((\n)sid=zz").is_empty());
        assert!(parse_wchp("\t0x1\nnot a path\n").is_empty());
        assert_eq!(parse_wchs_total("nothing"), None);
    }
}
