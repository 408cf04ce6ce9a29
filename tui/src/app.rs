//! What `lockscope top` shows and how keys change it: the connection's state in words, the
//! live view's page as the server sent it (applied event by event, as the dashboard does), the
//! screen (the locks, one lock, the keys), the selection, the filter being typed, the sort, and
//! a pause that counts what arrives. Pure: no terminal and no network, so the screens are
//! functions of this state (`render`) and tested as such.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use lockscope_model::wire::{
    BlockersPage, LockEvent, LockFacets, LockView, ReleaseRequest, SourceView, ViewEvent, ViewLock,
    ViewRemoved, ViewSource, WaitForPage,
};

/// The server's sorts the `s` key cycles through, as `/api/v1/events` names them, with the
/// words the footer shows.
pub const SORTS: [(&str, &str); 4] = [
    ("attention", "attention"),
    ("longest_wait", "longest wait"),
    ("held_for", "held longest"),
    ("path", "path"),
];

/// The facets `f` picks from, as the server names them (each a filter of the same name).
pub const FACETS: [&str; 4] = ["state", "source", "backend", "recipe"];

/// How the stream to lockscope is doing, said in words on the first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conn {
    /// Asking; nothing has arrived yet.
    Connecting,
    /// The live view's snapshot arrived and changes follow.
    Live,
    /// The stream failed; asked again after `retry_s` seconds.
    Unreachable {
        error: String,
        retry_s: u64,
        /// When the stream failed (epoch ms): what is still shown is as of then.
        since_ms: i64,
    },
}

/// Which screen is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Screen {
    Locks,
    /// One lock, by id.
    Lock(String),
    /// The sessions' wait-for graph: root blockers, blocked → blocking, cycles.
    WaitFor,
}

/// What the main loop must do after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    None,
    Quit,
    /// Open the live view this state now asks for ([`App::query`]).
    Requery,
    /// Ask lockscope to force-release (lock id, what the operator saw and why).
    Release(String, Box<ReleaseRequest>),
}

/// The force-release confirmation: which holder (of the lock shown) and the reason typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseDialog {
    pub holder: usize,
    pub reason: String,
    /// Sent; waiting for lockscope's answer.
    pub sent: bool,
}

/// lockscope's answer to a force release, in words (as the dashboard says it).
pub fn release_outcome(status: u16, body: &serde_json::Value) -> String {
    match status {
        200 => match body["released"]["action"].as_str() {
            Some(action) => format!("Released: {action}."),
            None => "Released: the holder was removed and its waiters woken the library's way. The old holder is not told.".into(),
        },
        409 => "Not released: that holder no longer holds the lock (it changed hands or went since you looked). Nothing was changed.".into(),
        401 | 403 => format!(
            "Refused: {}",
            body["error"].as_str().unwrap_or("the admin token was not accepted")
        ),
        429 => "Refused: too many force releases just now; wait a minute.".into(),
        _ => format!(
            "Not released ({status}): {}",
            body["error"].as_str().unwrap_or("unexpected answer")
        ),
    }
}

/// One live view as the server keeps it: its page in the server's order, the matching total,
/// the cursor of the next page, and the sources.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub locks: Vec<LockView>,
    pub total: u64,
    /// Counts per facet value, each under every filter but its own.
    pub facets: LockFacets,
    pub next: Option<String>,
    pub sources: Vec<SourceView>,
    pub loaded: bool,
}

impl Page {
    /// Applies one event; answers whether it changed the page's locks.
    fn apply(&mut self, event: ViewEvent) -> bool {
        match event {
            ViewEvent::Snapshot(s) => {
                self.locks = s.locks;
                self.total = s.total;
                self.facets = s.facets;
                self.next = s.next;
                self.sources = s.sources;
                self.loaded = true;
                false
            }
            ViewEvent::Lock(ViewLock { lock }) => {
                match self.locks.iter_mut().find(|l| l.id == lock.id) {
                    Some(slot) => *slot = *lock,
                    None => self.locks.push(*lock),
                }
                true
            }
            ViewEvent::Removed(ViewRemoved { id }) => {
                self.locks.retain(|l| l.id != id);
                true
            }
            ViewEvent::Totals(t) => {
                self.total = t.total;
                self.facets = t.facets;
                self.next = t.next;
                false
            }
            ViewEvent::Source(ViewSource { source }) => {
                match self.sources.iter_mut().find(|s| s.name == source.name) {
                    Some(slot) => *slot = source,
                    None => self.sources.push(source),
                }
                false
            }
        }
    }
}

/// Everything `lockscope top` shows.
#[derive(Debug, Clone)]
pub struct App {
    /// lockscope's address, as given.
    pub url: String,
    pub conn: Conn,
    pub screen: Screen,
    /// The keys are listed over the screen.
    pub help: bool,
    /// The live view of the current screen.
    pub page: Page,
    /// While paused: the page as it was when paused (shown), and the changes since.
    pub frozen: Option<Page>,
    pub changes_since_pause: u64,
    /// Snapshots after the first (a reconnect or a slow reader's fresh start): said once.
    pub resyncs: u64,
    /// The selected row of the locks screen.
    pub selected: usize,
    /// The text filter (`q=`) and, while `/` is being typed, the text so far.
    pub filter: String,
    pub editing: Option<String>,
    pub sort: usize,
    /// The facet filters chosen (`state=stuck`, `source=zk` …), at most one per facet.
    pub facets: Vec<(&'static str, String)>,
    /// The facet picker, while open: the row under the cursor.
    pub picker: Option<usize>,
    /// Cursors of the pages before this one (PgUp goes back), and this page's.
    pub cursors: Vec<Option<String>>,
    pub cursor: Option<String>,
    /// Rows the locks screen has room for (the page size asked of the server).
    pub rows: usize,
    /// Colour is allowed (`NO_COLOR` unset, a terminal that has colour).
    pub color: bool,
    /// An admin token was given (`LOCKSCOPE_ADMIN_TOKEN`): `R` may force-release.
    pub admin: bool,
    /// The force-release confirmation, while open.
    pub dialog: Option<ReleaseDialog>,
    /// The last thing to tell (a release's outcome, why a key did nothing).
    pub notice: Option<String>,
    /// The wait-for graph and the root blockers as last read (every 2 s).
    pub graph: Option<(WaitForPage, BlockersPage)>,
    /// The lock screen's recent events (`GET /api/v1/locks/{id}`), newest last.
    pub events: Vec<LockEvent>,
}

impl App {
    pub fn new(url: &str, color: bool) -> App {
        App {
            url: url.to_string(),
            conn: Conn::Connecting,
            screen: Screen::Locks,
            help: false,
            page: Page::default(),
            frozen: None,
            changes_since_pause: 0,
            resyncs: 0,
            selected: 0,
            filter: String::new(),
            editing: None,
            sort: 0,
            facets: Vec::new(),
            picker: None,
            cursors: Vec::new(),
            cursor: None,
            rows: 20,
            color,
            admin: false,
            dialog: None,
            notice: None,
            graph: None,
            events: Vec::new(),
        }
    }

    /// The root blocker holding up most that `source`'s `session` is part of: how many it
    /// holds up in all.
    pub fn root_blocker(&self, source: &str, session: &str) -> Option<u64> {
        let (_, blockers) = self.graph.as_ref()?;
        blockers
            .blockers
            .iter()
            .filter(|b| {
                b.sessions
                    .iter()
                    .any(|s| s.source == source && s.session == session)
            })
            .map(|b| b.total)
            .max()
    }

    /// The picker's rows: "every lock" (clears the filters), then each facet's values with
    /// their counts, a chosen value marked.
    pub fn picker_rows(&self) -> Vec<(Option<(&'static str, String)>, String)> {
        let mut rows = vec![(None, "every lock (clear the facet filters)".to_string())];
        let facets = &self.shown().facets;
        for facet in FACETS {
            let counts = match facet {
                "state" => &facets.state,
                "source" => &facets.source,
                "backend" => &facets.backend,
                _ => &facets.recipe,
            };
            for (value, n) in counts {
                let chosen = self.facets.iter().any(|(f, v)| *f == facet && v == value);
                rows.push((
                    Some((facet, value.clone())),
                    format!("{} {facet} = {value} ({n})", if chosen { "●" } else { " " }),
                ));
            }
        }
        rows
    }

    fn picker_key(&mut self, at: usize, key: KeyEvent) -> Action {
        let rows = self.picker_rows();
        match key.code {
            KeyCode::Esc | KeyCode::Char('f') | KeyCode::Char('q') => self.picker = None,
            KeyCode::Down | KeyCode::Char('j') => {
                self.picker = Some((at + 1).min(rows.len().saturating_sub(1)))
            }
            KeyCode::Up | KeyCode::Char('k') => self.picker = Some(at.saturating_sub(1)),
            KeyCode::Enter => {
                self.picker = None;
                match rows.into_iter().nth(at).and_then(|(row, _)| row) {
                    None => self.facets.clear(),
                    Some((facet, value)) => {
                        let again = self.facets.iter().any(|(f, v)| *f == facet && *v == value);
                        self.facets.retain(|(f, _)| *f != facet);
                        if !again {
                            self.facets.push((facet, value));
                        }
                    }
                }
                self.first_page();
                return Action::Requery;
            }
            _ => {}
        }
        Action::None
    }

    /// lockscope answered the force release.
    pub fn released(&mut self, outcome: String) {
        self.dialog = None;
        self.notice = Some(outcome);
    }

    fn dialog_key(&mut self, key: KeyEvent) -> Action {
        let Some(dialog) = &mut self.dialog else {
            return Action::None;
        };
        if dialog.sent {
            return Action::None;
        }
        match key.code {
            KeyCode::Esc => {
                self.dialog = None;
                self.notice = Some("Force release cancelled: nothing was sent.".into());
            }
            KeyCode::Tab => {
                let n = self.lock().map_or(0, |l| l.holders.len()).max(1);
                if let Some(d) = &mut self.dialog {
                    d.holder = (d.holder + 1) % n;
                }
            }
            KeyCode::Backspace => {
                dialog.reason.pop();
            }
            KeyCode::Char(c) => dialog.reason.push(c),
            KeyCode::Enter => {
                if dialog.reason.trim().is_empty() {
                    self.notice = Some("A reason is required: it goes to the audit log.".into());
                    return Action::None;
                }
                let (holder, reason) = (dialog.holder, dialog.reason.clone());
                let Some((id, h)) = self
                    .lock()
                    .and_then(|l| Some((l.id.clone(), l.holders.get(holder)?.clone())))
                else {
                    self.dialog = None;
                    self.notice = Some("Not sent: that holder is no longer shown.".into());
                    return Action::None;
                };
                if let Some(d) = &mut self.dialog {
                    d.sent = true;
                }
                return Action::Release(
                    id,
                    Box::new(ReleaseRequest {
                        holder: h.node,
                        session: Some(h.session),
                        reentrancy: h.reentrancy,
                        version: h.version,
                        reason,
                    }),
                );
            }
            _ => {}
        }
        Action::None
    }

    /// The query string of the live view this state asks for.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        match &self.screen {
            Screen::Lock(id) => vec![("lock", id.clone())],
            Screen::Locks | Screen::WaitFor => {
                let mut q = vec![
                    ("sort", SORTS[self.sort].0.to_string()),
                    ("limit", self.rows.clamp(1, 1000).to_string()),
                ];
                if !self.filter.is_empty() {
                    q.push(("q", self.filter.clone()));
                }
                for (facet, value) in &self.facets {
                    q.push((facet, value.clone()));
                }
                if let Some(cursor) = &self.cursor {
                    q.push(("cursor", cursor.clone()));
                }
                q
            }
        }
    }

    /// The page shown: the frozen one while paused.
    pub fn shown(&self) -> &Page {
        self.frozen.as_ref().unwrap_or(&self.page)
    }

    /// The lock of the lock screen, as its live view last sent it.
    pub fn lock(&self) -> Option<&LockView> {
        match &self.screen {
            Screen::Lock(id) => self.shown().locks.iter().find(|l| &l.id == id),
            Screen::Locks | Screen::WaitFor => None,
        }
    }

    /// The live view (re)opened: nothing of the last one is shown as current.
    pub fn opening(&mut self) {
        self.conn = Conn::Connecting;
        self.page = Page::default();
        self.events.clear();
    }

    /// An event of the current view arrived.
    pub fn apply(&mut self, event: ViewEvent) {
        if matches!(event, ViewEvent::Snapshot(_)) {
            if self.page.loaded {
                self.resyncs += 1;
            }
            self.conn = Conn::Live;
        }
        if self.page.apply(event) && self.frozen.is_some() {
            self.changes_since_pause += 1;
        }
        let n = self.shown().locks.len();
        if self.selected >= n {
            self.selected = n.saturating_sub(1);
        }
    }

    /// The stream failed at `now_ms`: said at once, and what is still shown is marked as of
    /// the first failure (nothing shown as live).
    pub fn failed(&mut self, error: String, retry_s: u64, now_ms: i64) {
        let since_ms = match self.conn {
            Conn::Unreachable { since_ms, .. } => since_ms,
            _ => now_ms,
        };
        self.conn = Conn::Unreachable {
            error,
            retry_s,
            since_ms,
        };
    }

    /// A key was pressed.
    pub fn key(&mut self, key: KeyEvent) -> Action {
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        if let Some(text) = &mut self.editing {
            match key.code {
                KeyCode::Enter => {
                    self.filter = std::mem::take(text);
                    self.editing = None;
                    self.first_page();
                    return Action::Requery;
                }
                KeyCode::Esc => self.editing = None,
                KeyCode::Backspace => {
                    text.pop();
                }
                KeyCode::Char(c) => text.push(c),
                _ => {}
            }
            return Action::None;
        }
        if self.dialog.is_some() {
            return self.dialog_key(key);
        }
        if let Some(at) = self.picker {
            return self.picker_key(at, key);
        }
        if self.help {
            if matches!(
                key.code,
                KeyCode::Char('?') | KeyCode::Esc | KeyCode::Char('q')
            ) {
                self.help = false;
            }
            return Action::None;
        }
        self.notice = None;
        match (&self.screen, key.code) {
            (_, KeyCode::Char('?')) => self.help = true,
            (Screen::Lock(_), KeyCode::Char('R')) => {
                let holders = self.lock().map_or(0, |l| l.holders.len());
                self.notice = if !self.admin {
                    Some("Force release needs an admin token in LOCKSCOPE_ADMIN_TOKEN.".into())
                } else if holders == 0 {
                    Some("Nobody holds this lock: there is nothing to release.".into())
                } else {
                    self.dialog = Some(ReleaseDialog {
                        holder: 0,
                        reason: String::new(),
                        sent: false,
                    });
                    None
                };
            }
            (Screen::Lock(_), KeyCode::Esc | KeyCode::Char('q') | KeyCode::Backspace) => {
                self.screen = Screen::Locks;
                self.frozen = None;
                return Action::Requery;
            }
            (Screen::WaitFor, KeyCode::Esc | KeyCode::Char('q') | KeyCode::Char('w')) => {
                self.screen = Screen::Locks;
            }
            (Screen::Locks, KeyCode::Char('w')) => self.screen = Screen::WaitFor,
            (Screen::Locks, KeyCode::Char('q')) => return Action::Quit,
            (Screen::Locks, KeyCode::Char('/')) => self.editing = Some(self.filter.clone()),
            (Screen::Locks, KeyCode::Char('s')) => {
                self.sort = (self.sort + 1) % SORTS.len();
                self.first_page();
                return Action::Requery;
            }
            (Screen::Locks, KeyCode::Char('f')) => self.picker = Some(0),
            (Screen::Locks, KeyCode::Char('p')) => self.toggle_pause(),
            (Screen::Locks, KeyCode::Down | KeyCode::Char('j')) => {
                let n = self.shown().locks.len();
                if self.selected + 1 < n {
                    self.selected += 1;
                }
            }
            (Screen::Locks, KeyCode::Up | KeyCode::Char('k')) => {
                self.selected = self.selected.saturating_sub(1);
            }
            (Screen::Locks, KeyCode::PageDown) => {
                if let Some(next) = self.shown().next.clone() {
                    self.cursors.push(self.cursor.take());
                    self.cursor = Some(next);
                    self.selected = 0;
                    self.frozen = None;
                    return Action::Requery;
                }
            }
            (Screen::Locks, KeyCode::PageUp) => {
                if let Some(before) = self.cursors.pop() {
                    self.cursor = before;
                    self.selected = 0;
                    self.frozen = None;
                    return Action::Requery;
                }
            }
            (Screen::Locks, KeyCode::Enter) => {
                if let Some(lock) = self.shown().locks.get(self.selected) {
                    self.screen = Screen::Lock(lock.id.clone());
                    self.frozen = None;
                    return Action::Requery;
                }
            }
            _ => {}
        }
        Action::None
    }

    fn first_page(&mut self) {
        self.cursors.clear();
        self.cursor = None;
        self.selected = 0;
        self.frozen = None;
    }

    fn toggle_pause(&mut self) {
        if self.frozen.take().is_none() {
            self.frozen = Some(self.page.clone());
            self.changes_since_pause = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossterm::event::KeyEventKind;

    fn press(code: KeyCode) -> KeyEvent {
        KeyEvent {
            code,
            modifiers: KeyModifiers::NONE,
            kind: KeyEventKind::Press,
            state: crossterm::event::KeyEventState::NONE,
        }
    }

    #[test]
    fn keys_filter_sort_open_and_quit() {
        let mut app = App::new("http://127.0.0.1:1", true);
        for event in ViewEvent::examples() {
            app.apply(event);
        }
        assert_eq!(app.conn, Conn::Live);
        assert_eq!(app.key(press(KeyCode::Char('/'))), Action::None);
        for c in "orders".chars() {
            app.key(press(KeyCode::Char(c)));
        }
        assert_eq!(app.key(press(KeyCode::Enter)), Action::Requery);
        assert!(app.query().contains(&("q", "orders".to_string())));
        assert_eq!(app.key(press(KeyCode::Char('s'))), Action::Requery);
        assert!(app.query().contains(&("sort", "longest_wait".to_string())));
        // f opens the picker of the view's facets; Enter on a value filters by it.
        assert_eq!(app.key(press(KeyCode::Char('f'))), Action::None);
        let held = app
            .picker_rows()
            .iter()
            .position(|(row, _)| {
                row.as_ref()
                    .is_some_and(|(f, v)| *f == "state" && v == "held")
            })
            .expect("the state facet's values");
        for _ in 0..held {
            app.key(press(KeyCode::Down));
        }
        assert_eq!(app.key(press(KeyCode::Enter)), Action::Requery);
        assert!(app.query().contains(&("state", "held".to_string())));
        // Pause counts what arrives and keeps the page still.
        app.key(press(KeyCode::Char('p')));
        let shown = app.shown().locks.len();
        for event in ViewEvent::examples() {
            if matches!(event, ViewEvent::Removed(_) | ViewEvent::Lock(_)) {
                app.apply(event);
            }
        }
        assert_eq!(app.shown().locks.len(), shown);
        assert_eq!(app.changes_since_pause, 2);
        app.key(press(KeyCode::Char('p')));
        assert!(app.frozen.is_none());
        // `q` on the list quits; on a lock it goes back.
        app.page.locks = vec![LockView {
            id: "s~a".into(),
            ..LockView::default()
        }];
        assert_eq!(app.key(press(KeyCode::Enter)), Action::Requery);
        assert_eq!(app.query(), vec![("lock", "s~a".to_string())]);
        assert_eq!(app.key(press(KeyCode::Char('q'))), Action::Requery);
        assert_eq!(app.screen, Screen::Locks);
        assert_eq!(app.key(press(KeyCode::Char('q'))), Action::Quit);
    }

    #[test]
    fn force_release_is_confirmed_with_a_reason_and_sends_what_was_seen() {
        let mut app = App::new("http://127.0.0.1:1", true);
        let holder = lockscope_model::wire::HolderView {
            node: "/locks/a/lock-0000000001".into(),
            session: "0x1a".into(),
            version: Some("4294967338".into()),
            ..Default::default()
        };
        app.page.loaded = true;
        app.page.locks = vec![LockView {
            id: "zk~/locks/a".into(),
            holders: vec![holder],
            ..LockView::default()
        }];
        app.screen = Screen::Lock("zk~/locks/a".into());
        // Without an admin token: said why, nothing opens.
        app.key(press(KeyCode::Char('R')));
        assert!(app.dialog.is_none());
        assert!(app
            .notice
            .as_deref()
            .is_some_and(|n| n.contains("LOCKSCOPE_ADMIN_TOKEN")));
        app.admin = true;
        app.key(press(KeyCode::Char('R')));
        assert!(app.dialog.is_some());
        // No reason, no release.
        assert_eq!(app.key(press(KeyCode::Enter)), Action::None);
        for c in "host dead".chars() {
            app.key(press(KeyCode::Char(c)));
        }
        let Action::Release(id, request) = app.key(press(KeyCode::Enter)) else {
            panic!("no release sent");
        };
        assert_eq!(id, "zk~/locks/a");
        assert_eq!(request.holder, "/locks/a/lock-0000000001");
        assert_eq!(request.session.as_deref(), Some("0x1a"));
        assert_eq!(request.version.as_deref(), Some("4294967338"));
        assert_eq!(request.reason, "host dead");
        app.released(release_outcome(409, &serde_json::json!({})));
        assert!(app.dialog.is_none());
        assert!(app
            .notice
            .as_deref()
            .is_some_and(|n| n.starts_with("Not released")));
    }
}
