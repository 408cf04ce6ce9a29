//! `lockscope top`: the live lock view in a terminal, for an engineer with only SSH. It reads
//! the live views the dashboard opens (`/api/v1/events` with a query; [`stream`]), keeps what
//! they say in a pure model that keys change ([`app`]), and draws it with ratatui over crossterm
//! ([`render`]): the locks attention first, one lock's queue, the keys; honest states
//! ("connecting", "lockscope unreachable — retrying", a source down, a stream resynced). The
//! terminal is restored on every way out (`q`, Ctrl-C, an error, a panic).

pub mod app;
pub mod render;
pub mod stream;

use std::time::Duration;

use crossterm::event::{Event, EventStream, KeyEventKind};
use futures::StreamExt;
use tokio::sync::mpsc;

pub use stream::Auth;

/// How `lockscope top` was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// lockscope's address, `http://` or `https://`.
    pub url: String,
    pub auth: Auth,
    /// The HTTP client (its CA roots, as `lockscope locks` builds it).
    pub client: reqwest::Client,
    /// The admin token for force releases (`LOCKSCOPE_ADMIN_TOKEN`), if any.
    pub admin_token: Option<String>,
}

/// Whether colour may be used: not with `NO_COLOR` set (to anything), nor on a terminal that
/// has none (`TERM=dumb` or unset).
pub fn color_allowed() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let term = std::env::var("TERM").unwrap_or_default();
    !no_color && !term.is_empty() && term != "dumb"
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Runs the full-screen view until `q` (or Ctrl-C); the terminal is left as it was.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let mut terminal = ratatui::init();
    let outcome = run_in(&mut terminal, options).await;
    ratatui::restore();
    outcome
}

async fn run_in(terminal: &mut ratatui::DefaultTerminal, options: Options) -> anyhow::Result<()> {
    let mut app = app::App::new(&options.url, color_allowed());
    app.admin = options.admin_token.is_some();
    app.rows = usize::from(terminal.size()?.height.saturating_sub(5)).max(1);
    let (tx, mut rx) = mpsc::channel(1024);
    let mut generation = 0u64;
    let open = |app: &app::App, generation: u64| {
        tokio::spawn(stream::follow(
            options.client.clone(),
            options.url.clone(),
            app.query(),
            options.auth.clone(),
            generation,
            tx.clone(),
        ))
    };
    // Reads a lock's recent events once, for the lock screen of `generation`.
    let read_events = |id: &str, generation: u64| {
        tokio::spawn(stream::lock_events(
            options.client.clone(),
            options.url.clone(),
            id.to_string(),
            options.auth.clone(),
            generation,
            tx.clone(),
        ))
    };
    let mut follower = open(&app, generation);
    let graph = tokio::spawn(stream::poll_graph(
        options.client.clone(),
        options.url.clone(),
        options.auth.clone(),
        tx.clone(),
    ));
    let mut keys = EventStream::new();
    let mut events_read = std::time::Instant::now();
    let mut events_due = false;
    // The clock runs on screen (held and waited times) even when nothing changes.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        terminal.draw(|f| render::draw(f, &app, now_ms()))?;
        let action = tokio::select! {
            _ = tick.tick() => app::Action::None,
            message = rx.recv() => {
                match message {
                    Some(stream::Message::Event(g, event)) if g == generation => {
                        // A change of the lock shown: its events are read again (at most
                        // once a second).
                        let changed = matches!(event, lockscope_model::wire::ViewEvent::Lock(_));
                        app.apply(event);
                        if changed && matches!(app.screen, app::Screen::Lock(_)) {
                            events_due = true;
                        }
                    }
                    Some(stream::Message::Events(g, events)) if g == generation => {
                        app.events = events
                    }
                    Some(stream::Message::Failed(g, error, retry)) if g == generation => {
                        app.failed(error, retry, now_ms())
                    }
                    Some(stream::Message::Released(outcome)) => app.released(outcome),
                    Some(stream::Message::Graph(graph)) => app.graph = Some(*graph),
                    _ => {}
                }
                app::Action::None
            }
            key = keys.next() => match key {
                Some(Ok(Event::Key(key))) if key.kind == KeyEventKind::Press => app.key(key),
                Some(Ok(Event::Resize(_, height))) => {
                    let rows = usize::from(height.saturating_sub(5)).max(1);
                    if rows != app.rows && app.screen == app::Screen::Locks {
                        app.rows = rows;
                        app::Action::Requery
                    } else {
                        app::Action::None
                    }
                }
                Some(Ok(_)) => app::Action::None,
                Some(Err(e)) => return Err(e.into()),
                None => app::Action::Quit,
            },
        };
        // A change of the lock shown: its events are read again, at most once a second (a
        // change inside the second is read at the next tick).
        if let app::Screen::Lock(id) = &app.screen {
            if events_due && events_read.elapsed() >= Duration::from_secs(1) {
                events_due = false;
                events_read = std::time::Instant::now();
                read_events(id, generation);
            }
        }
        match action {
            app::Action::None => {}
            app::Action::Quit => {
                follower.abort();
                graph.abort();
                return Ok(());
            }
            app::Action::Release(id, request) => {
                let (client, tx) = (options.client.clone(), tx.clone());
                let url = format!(
                    "{}/api/v1/locks/{id}/release",
                    options.url.trim_end_matches('/')
                );
                let token = options.admin_token.clone().unwrap_or_default();
                tokio::spawn(async move {
                    let answer = client
                        .post(&url)
                        .bearer_auth(token)
                        .json(&request)
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await;
                    let outcome = match answer {
                        Ok(answer) => {
                            let status = answer.status().as_u16();
                            let body = answer.json().await.unwrap_or_default();
                            app::release_outcome(status, &body)
                        }
                        Err(e) => format!("Not released: lockscope did not answer ({e})."),
                    };
                    let _ = tx.send(stream::Message::Released(outcome)).await;
                });
            }
            app::Action::Requery => {
                follower.abort();
                generation += 1;
                app.opening();
                follower = open(&app, generation);
                if let app::Screen::Lock(id) = &app.screen {
                    events_read = std::time::Instant::now();
                    read_events(id, generation);
                }
            }
        }
    }
}
