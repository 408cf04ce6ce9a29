//! The live view `lockscope top` reads: `GET /api/v1/events` with the screen's query, exactly
//! as the dashboard opens it (so it costs the server what one more dashboard costs), read as
//! Server-Sent Events and handed over as [`ViewEvent`]s; a failure is reported at once and the
//! view is asked again after a backoff (1 s doubling to 8 s).

use std::time::Duration;

use futures::StreamExt;
use lockscope_model::wire::{BlockersPage, LockDetail, LockEvent, ViewEvent, WaitForPage};
use tokio::sync::mpsc;

/// How `lockscope top` proves it may read (as `lockscope locks` does).
#[derive(Debug, Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(String),
    Basic {
        user: String,
        password: String,
    },
}

impl Auth {
    /// `request` with these credentials.
    pub fn apply(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self {
            Auth::None => request,
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Basic { user, password } => request.basic_auth(user, Some(password)),
        }
    }
}

/// What the stream tells the screen, tagged with the query's generation so that a late word
/// from a view already left is ignored.
#[derive(Debug)]
pub enum Message {
    Event(u64, ViewEvent),
    Failed(u64, String, u64),
    /// A force release's outcome, in words.
    Released(String),
    /// The wait-for graph's first page and the root blockers, as read now.
    Graph(Box<(WaitForPage, BlockersPage)>),
    /// A lock's recent events (for the lock screen of that generation).
    Events(u64, Vec<LockEvent>),
}

/// Reads lock `id`'s recent events once (`GET /api/v1/locks/{id}`); a failed read sends
/// nothing (the live view says whether lockscope can be reached).
pub async fn lock_events(
    client: reqwest::Client,
    base: String,
    id: String,
    auth: Auth,
    generation: u64,
    tx: mpsc::Sender<Message>,
) {
    let url = format!("{}/api/v1/locks/{id}", base.trim_end_matches('/'));
    let request = client.get(url).timeout(Duration::from_secs(10));
    let request = auth.apply(request);
    let Ok(answer) = request.send().await else {
        return;
    };
    if let Ok(detail) = answer.json::<LockDetail>().await {
        let _ = tx.send(Message::Events(generation, detail.events)).await;
    }
}

/// Reads the wait-for graph's first page and the root blockers every two seconds (what the
/// dashboard's sessions page and its root-blocker card read), until the receiver goes away; a
/// failed read is skipped (the live view says whether lockscope can be reached).
pub async fn poll_graph(
    client: reqwest::Client,
    base: String,
    auth: Auth,
    tx: mpsc::Sender<Message>,
) {
    let base = base.trim_end_matches('/').to_string();
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tick.tick().await;
        let get = |path: &str| {
            let request = client
                .get(format!("{base}{path}"))
                .timeout(Duration::from_secs(10));
            auth.apply(request)
        };
        let waitfor = async {
            get("/api/v1/waitfor?limit=100")
                .send()
                .await
                .ok()?
                .json::<WaitForPage>()
                .await
                .ok()
        };
        let blockers = async {
            get("/api/v1/blockers?limit=100")
                .send()
                .await
                .ok()?
                .json::<BlockersPage>()
                .await
                .ok()
        };
        if let (Some(w), Some(b)) = tokio::join!(waitfor, blockers) {
            if tx.send(Message::Graph(Box::new((w, b)))).await.is_err() {
                return;
            }
        }
    }
}

/// Splits SSE text into events: `event:` names the next dispatch, `data:` lines accumulate, a
/// blank line dispatches; comments (`:`) are keep-alives.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    name: String,
    data: String,
}

impl SseParser {
    /// Feeds bytes; answers the complete events `(name, data)` they finish.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<(String, String)> {
        self.buffer.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() || !self.name.is_empty() {
                    let name = std::mem::take(&mut self.name);
                    let data = std::mem::take(&mut self.data);
                    out.push((
                        if name.is_empty() {
                            "message".into()
                        } else {
                            name
                        },
                        data,
                    ));
                }
            } else if let Some(name) = line.strip_prefix("event:") {
                self.name = name.trim_start().to_string();
            } else if let Some(data) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(data.strip_prefix(' ').unwrap_or(data));
            }
        }
        out
    }
}

/// Reads the live view `query` of `base` until the receiver goes away, asking again after
/// each failure.
pub async fn follow(
    client: reqwest::Client,
    base: String,
    query: Vec<(&'static str, String)>,
    auth: Auth,
    generation: u64,
    tx: mpsc::Sender<Message>,
) {
    let url = format!("{}/api/v1/events", base.trim_end_matches('/'));
    let mut backoff = 1;
    loop {
        let error = match read(&client, &url, &query, &auth, generation, &tx).await {
            Ok(()) => "the stream ended".to_string(),
            Err(e) => e,
        };
        if tx
            .send(Message::Failed(generation, error, backoff))
            .await
            .is_err()
        {
            return;
        }
        tokio::time::sleep(Duration::from_secs(backoff)).await;
        backoff = (backoff * 2).min(8);
    }
}

async fn read(
    client: &reqwest::Client,
    url: &str,
    query: &[(&'static str, String)],
    auth: &Auth,
    generation: u64,
    tx: &mpsc::Sender<Message>,
) -> Result<(), String> {
    let request = client.get(url).query(query);
    let request = auth.apply(request);
    let answer = request.send().await.map_err(|e| e.to_string())?;
    let status = answer.status();
    if !status.is_success() {
        let body = answer.text().await.unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or(body);
        return Err(format!("{}: {message}", status.as_u16()));
    }
    let mut parser = SseParser::default();
    let mut body = answer.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        for (name, data) in parser.feed(&chunk) {
            let event = ViewEvent::parse(&name, &data)?;
            if tx.send(Message::Event(generation, event)).await.is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_cut_at_blank_lines_whatever_the_chunks() {
        let mut text = String::from(": keep-alive\n\n");
        for event in ViewEvent::examples() {
            text.push_str(&format!(
                "event: {}\ndata: {}\n\n",
                event.name(),
                event.data().expect("json")
            ));
        }
        let mut parser = SseParser::default();
        let mut got = Vec::new();
        for chunk in text.as_bytes().chunks(7) {
            got.extend(parser.feed(chunk));
        }
        let parsed: Vec<ViewEvent> = got
            .iter()
            .map(|(n, d)| ViewEvent::parse(n, d).expect("parses"))
            .collect();
        assert_eq!(parsed, ViewEvent::examples());
    }
}
