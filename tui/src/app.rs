//! What `lockscope top` shows and how keys change it: the connection's state in words, the
//! live view's page as the server sent it (applied event by event, as the dashboard does), the
//! screen (the locks, one lock, the keys), the selection, the filter being typed, the sort, and
//! a pause that counts what arrives. Pure: no terminal and no network, so the screens are
//! functions of this state (`render`) and tested as such.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use lockscope_model::wire::{LockView, SourceView, ViewEvent, ViewLock, ViewRemoved, ViewSource};

/// The server's sorts the `s` key cycles through, as `/api/v1/events` names them, with the
/// words the footer shows.
pub const SORTS: [(&str, &str); 4] = [
    ("attention", "attention"),
    ("longest_wait", "longest wait"),
    ("held_for", "held longest"),
    ("path", "path"),
];

/// The `state=` filters the `f` key cycles through (`None`: all locks).
pub const STATES: [Option<&str>; 5] = [
    None,
    Some("stuck"),
    Some("waiting"),
    Some("held"),
    Some("stale"),
];

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
}

/// What the main loop must do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Open the live view this state now asks for ([`App::query`]).
    Requery,
}

/// One live view as the server keeps it: its page in the server's order, the matching total,
/// the cursor of the next page, and the sources.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub locks: Vec<LockView>,
    pub total: u64,
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
    pub state: usize,
    /// Cursors of the pages before this one (PgUp goes back), and this page's.
    pub cursors: Vec<Option<String>>,
    pub cursor: Option<String>,
    /// Rows the locks screen has room for (the page size asked of the server).
    pub rows: usize,
    /// Colour is allowed (`NO_COLOR` unset, a terminal that has colour).
    pub color: bool,
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
            state: 0,
            cursors: Vec::new(),
            cursor: None,
            rows: 20,
            color,
        }
    }

    /// The query string of the live view this state asks for.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        match &self.screen {
            Screen::Lock(id) => vec![("lock", id.clone())],
            Screen::Locks => {
                let mut q = vec![
                    ("sort", SORTS[self.sort].0.to_string()),
                    ("limit", self.rows.clamp(1, 1000).to_string()),
                ];
                if !self.filter.is_empty() {
                    q.push(("q", self.filter.clone()));
                }
                if let Some(state) = STATES[self.state] {
                    q.push(("state", state.to_string()));
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
            Screen::Locks => None,
        }
    }

    /// The live view (re)opened: nothing of the last one is shown as current.
    pub fn opening(&mut self) {
        self.conn = Conn::Connecting;
        self.page = Page::default();
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
        if self.help {
            if matches!(
                key.code,
                KeyCode::Char('?') | KeyCode::Esc | KeyCode::Char('q')
            ) {
                self.help = false;
            }
            return Action::None;
        }
        match (&self.screen, key.code) {
            (_, KeyCode::Char('?')) => self.help = true,
            (Screen::Lock(_), KeyCode::Esc | KeyCode::Char('q') | KeyCode::Backspace) => {
                self.screen = Screen::Locks;
                self.frozen = None;
                return Action::Requery;
            }
            (Screen::Locks, KeyCode::Char('q')) => return Action::Quit,
            (Screen::Locks, KeyCode::Char('/')) => self.editing = Some(self.filter.clone()),
            (Screen::Locks, KeyCode::Char('s')) => {
                self.sort = (self.sort + 1) % SORTS.len();
                self.first_page();
                return Action::Requery;
            }
            (Screen::Locks, KeyCode::Char('f')) => {
                self.state = (self.state + 1) % STATES.len();
                self.first_page();
                return Action::Requery;
            }
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
        assert_eq!(app.key(press(KeyCode::Char('f'))), Action::Requery);
        assert!(app.query().contains(&("state", "stuck".to_string())));
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
}
