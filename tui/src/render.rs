//! The screens of `lockscope top`, drawn from [`App`] and the time: the locks (the overview's
//! page, attention first), one lock (its queue in order), and the keys. Every mark is a word
//! ("STUCK", "stale", "herd", "source down"), so nothing depends on colour; colour only adds to
//! the words, and only when [`App::color`] allows it. From 80×24 up: columns narrow or drop as
//! the width shrinks, the path keeps what is left.

use lockscope_model::time::duration_text;
use lockscope_model::wire::{LockMode, LockView, SourceView, StuckLevel};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Table, Wrap};
use ratatui::Frame;

use crate::app::{App, Conn, Screen, SORTS};

/// Draws the whole screen at `now_ms`.
pub fn draw(frame: &mut Frame, app: &App, now_ms: i64) {
    let [status, sources, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(status_line(app)), status);
    frame.render_widget(Paragraph::new(sources_line(app, now_ms)), sources);
    match &app.screen {
        Screen::Locks => locks(frame, app, body, now_ms),
        Screen::Lock(id) => lock(frame, app, id, body, now_ms),
        Screen::WaitFor => waitfor(frame, app, body, now_ms),
    }
    frame.render_widget(Paragraph::new(footer_line(app)), footer);
    if app.help {
        help(frame, app);
    }
    if app.dialog.is_some() {
        release_dialog(frame, app);
    }
    if let Some(at) = app.picker {
        picker(frame, app, at);
    }
}

/// The facet picker: every value of the view's facets with its count.
fn picker(frame: &mut Frame, app: &App, at: usize) {
    let area = frame.area();
    let width = area.width.min(60);
    let height = area.height.saturating_sub(4).min(20);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + 2,
        width,
        height,
    };
    let rows = app.picker_rows();
    // Keep the cursor's row in sight.
    let visible = usize::from(height.saturating_sub(2)).max(1);
    let skip = at.saturating_sub(visible - 1);
    let lines: Vec<Line> = rows
        .iter()
        .enumerate()
        .skip(skip)
        .take(visible)
        .map(|(i, (_, text))| {
            let line = Line::from(text.clone());
            if i == at {
                line.style(Style::default().add_modifier(Modifier::REVERSED))
            } else {
                line
            }
        })
        .collect();
    frame.render_widget(Clear, popup);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" only locks with (Enter picks, again clears; Esc) ");
    frame.render_widget(Paragraph::new(lines).block(block), popup);
}

/// The force-release confirmation: exactly which holder, what follows, the reason typed.
fn release_dialog(frame: &mut Frame, app: &App) {
    let (Some(dialog), Some(l)) = (&app.dialog, app.lock()) else {
        return;
    };
    let Some(h) = l.holders.get(dialog.holder) else {
        return;
    };
    let area = frame.area();
    let width = area.width.min(76);
    let height = area.height.min(13);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let mut lines = vec![
        Line::from(format!("Release exactly this holder of {}:", l.path)),
        Line::from(Span::styled(
            format!("  {}", who(&h.identity, &h.node)),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::from(format!("  node {}", h.node)),
        Line::from(format!("  session {}", h.session)),
        Line::from("Only if it still holds as shown; the attempt is audited. The old holder"),
        Line::from("is not told; the next waiter is woken the library's way."),
        Line::from(""),
        Line::from(format!("Reason: {}▏", dialog.reason)),
    ];
    lines.push(Line::from(if dialog.sent {
        "Sent; waiting for lockscope's answer…".to_string()
    } else if l.holders.len() > 1 {
        format!(
            "Enter releases · Tab: next holder ({} of {}) · Esc cancels",
            dialog.holder + 1,
            l.holders.len()
        )
    } else {
        "Enter releases · Esc cancels".to_string()
    }));
    frame.render_widget(Clear, popup);
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(" force release ");
    if app.color {
        block = block.border_style(Style::default().fg(Color::Red));
    }
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        popup,
    );
}

fn style(app: &App, color: Color) -> Style {
    if app.color {
        Style::default().fg(color)
    } else {
        Style::default()
    }
}

fn status_line(app: &App) -> Line<'static> {
    let state = match &app.conn {
        Conn::Connecting => Span::styled("connecting…", style(app, Color::Yellow)),
        Conn::Live => Span::styled("live", style(app, Color::Green)),
        Conn::Unreachable { retry_s, .. } => Span::styled(
            format!("lockscope unreachable — retrying in {retry_s} s"),
            style(app, Color::Red).add_modifier(Modifier::BOLD),
        ),
    };
    let mut spans = vec![
        Span::styled(
            "lockscope top",
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {} · ", app.url)),
        state,
    ];
    let page = app.shown();
    if app.conn == Conn::Live && app.screen == Screen::Locks {
        spans.push(Span::raw(format!(" · {} locks", page.total)));
    }
    if app.resyncs > 0 {
        spans.push(Span::raw(format!(" · stream resynced ×{}", app.resyncs)));
    }
    if app.frozen.is_some() {
        spans.push(Span::styled(
            format!(
                " · PAUSED: {} changes since (p resumes)",
                app.changes_since_pause
            ),
            style(app, Color::Yellow).add_modifier(Modifier::BOLD),
        ));
    }
    Line::from(spans)
}

fn source_word(s: &SourceView, now_ms: i64) -> String {
    if s.up && s.synced {
        format!("{} live", s.name)
    } else if let Some(seen) = s.last_seen_ms {
        format!(
            "{} DOWN, last seen {} ago",
            s.name,
            duration_text(now_ms - seen)
        )
    } else if s.up {
        format!("{} reading", s.name)
    } else {
        format!("{} down", s.name)
    }
}

fn sources_line(app: &App, now_ms: i64) -> Line<'static> {
    let page = app.shown();
    if let Conn::Unreachable {
        since_ms, error, ..
    } = &app.conn
    {
        // Nothing unseen is shown as live: the sources are unknown, the table is old.
        let text = if page.loaded {
            format!(
                "sources: unknown · table as of {} ago, not live · {error}",
                duration_text(now_ms - since_ms)
            )
        } else {
            format!("sources: unknown · {error}")
        };
        return Line::from(Span::styled(
            text,
            style(app, Color::Red).add_modifier(Modifier::BOLD),
        ));
    }
    if !page.loaded {
        return Line::from("sources: —");
    }
    let mut spans = vec![Span::raw("sources: ")];
    for (i, s) in page.sources.iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(" · "));
        }
        let healthy = s.up && s.synced;
        let color = if healthy { Color::Green } else { Color::Red };
        let mut st = style(app, color);
        if !healthy {
            st = st.add_modifier(Modifier::BOLD);
        }
        spans.push(Span::styled(source_word(s, now_ms), st));
        if s.error.is_some() && healthy {
            spans.push(Span::raw(" (error)"));
        }
    }
    Line::from(spans)
}

fn footer_line(app: &App) -> Line<'static> {
    if let Some(notice) = &app.notice {
        return Line::from(Span::styled(
            notice.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    if let Some(text) = &app.editing {
        return Line::from(format!("filter: {text}▏  (Enter applies, Esc cancels)"));
    }
    match app.screen {
        Screen::Locks => Line::from(format!(
            "q quit  / filter{}  Enter open  s sort ({})  f facets{}  w waits  p pause  ? keys",
            if app.filter.is_empty() {
                String::new()
            } else {
                format!(" ({})", app.filter)
            },
            SORTS[app.sort].1,
            if app.facets.is_empty() {
                String::new()
            } else {
                let chosen: Vec<String> =
                    app.facets.iter().map(|(f, v)| format!("{f}={v}")).collect();
                format!(" ({})", chosen.join(","))
            },
        )),
        Screen::Lock(_) => Line::from("Esc/q back  R force release  ? keys"),
        Screen::WaitFor => Line::from("Esc/q/w back  ? keys"),
    }
}

/// The earliest of `instants`, as a duration up to now.
fn longest(now_ms: i64, instants: impl Iterator<Item = i64>) -> Option<i64> {
    instants.min().map(|since| now_ms - since)
}

/// What a lock's row says in words besides its columns.
fn marks(app: &App, l: &LockView, now_ms: i64) -> String {
    let mut out = Vec::new();
    if let Some(stuck) = &l.stuck {
        let level = match stuck.level {
            StuckLevel::Critical => "STUCK!",
            StuckLevel::Warning => "STUCK",
        };
        let kind = match stuck.kind {
            lockscope_model::wire::StuckKind::Wait => "wait",
            lockscope_model::wire::StuckKind::Hold => "hold",
        };
        out.push(format!("{level} {kind}>{}", duration_text(stuck.limit_ms)));
    }
    if let Some(seen) = l.source_last_seen_ms {
        out.push(format!(
            "source down, as of {} ago",
            duration_text(now_ms - seen)
        ));
    }
    if !l.stale.is_empty() {
        out.push("stale".into());
    }
    if l.herd {
        out.push("herd".into());
    }
    // The lock's flags in words (that polling waiters cannot be seen is said on its screen).
    out.extend(
        l.flags
            .iter()
            .filter(|f| *f != "waiters_not_visible")
            .map(|f| f.replace('_', " ")),
    );
    if let Some(total) = l
        .holders
        .iter()
        .filter_map(|h| app.root_blocker(&l.source, &h.session))
        .max()
    {
        out.push(format!("ROOT BLOCKER ({total})"));
    }
    out.join(", ")
}

/// The sessions' waits: root blockers by impact, blocked → blocking pairs (longest first),
/// and every cycle, each in words.
fn waitfor(frame: &mut Frame, app: &App, area: Rect, now_ms: i64) {
    let Some((page, blockers)) = &app.graph else {
        frame.render_widget(Paragraph::new("Reading the wait-for graph…"), area);
        return;
    };
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::from(Span::styled(
        format!("ROOT BLOCKERS ({})", blockers.total),
        bold,
    ))];
    if blockers.blockers.is_empty() {
        lines.push(Line::from("  none: nobody holds anyone up"));
    }
    for b in blockers.blockers.iter().take(5) {
        let who = b
            .process
            .as_ref()
            .map(|p| p.name.clone())
            .unwrap_or_else(|| {
                b.sessions
                    .iter()
                    .map(|s| format!("{} {}", s.source, s.session))
                    .collect::<Vec<_>>()
                    .join(" + ")
            });
        lines.push(Line::from(Span::styled(
            format!(
                "  {who} holds up {} ({} directly), waits summed {}",
                b.total,
                b.direct,
                duration_text(b.waited_ms)
            ),
            style(app, Color::Red),
        )));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!("BLOCKED → BLOCKING ({}), longest wait first", page.total),
        bold,
    )));
    // A session by the process its source names, where it names one.
    let name = |source: &str, session: &str| {
        page.sessions
            .iter()
            .find(|s| s.source == source && s.session == session)
            .and_then(|s| s.process.as_ref())
            .map_or_else(
                || session.to_string(),
                |p| format!("{} ({session})", p.name),
            )
    };
    for e in &page.edges {
        let waited = e
            .waiting_since_ms
            .map(|s| format!(" for {}", duration_text(now_ms - s)))
            .unwrap_or_default();
        let lock = lockscope_model::id::parse_lock_id(&e.lock).map_or(e.lock.clone(), |(_, p)| p);
        let cycle = if e.in_cycle { "  IN A CYCLE" } else { "" };
        lines.push(Line::from(format!(
            "  {} {} → {} on {lock}{waited}{cycle}",
            e.source,
            name(&e.source, &e.waiter),
            name(&e.source, &e.holder)
        )));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!("CYCLES ({}): possible deadlocks", page.cycles_total),
        bold,
    )));
    for c in &page.cycles {
        let hops: Vec<String> = c
            .waits
            .iter()
            .map(|w| format!("{} waits on {}", w.waiter, w.holder))
            .collect();
        lines.push(Line::from(Span::styled(
            format!("  DEADLOCK {}: {}", c.sources.join("+"), hops.join(", ")),
            style(app, Color::Red).add_modifier(Modifier::BOLD),
        )));
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
}

fn who(identity: &Option<String>, node: &str) -> String {
    identity
        .clone()
        .unwrap_or_else(|| node.rsplit('/').next().unwrap_or(node).to_string())
}

fn ttl(l: &LockView, now_ms: i64) -> String {
    match (l.expires_at_ms, l.ttl_ms) {
        (Some(at), _) => duration_text(at - now_ms),
        (None, Some(ttl)) => duration_text(ttl),
        (None, None) => "—".into(),
    }
}

fn locks(frame: &mut Frame, app: &App, area: Rect, now_ms: i64) {
    let page = app.shown();
    if !page.loaded {
        let text = match &app.conn {
            Conn::Unreachable { .. } => "No data: lockscope cannot be reached.",
            _ => "Waiting for lockscope's first answer…",
        };
        frame.render_widget(Paragraph::new(text), area);
        return;
    }
    if page.locks.is_empty() {
        frame.render_widget(Paragraph::new("No lock matches."), area);
        return;
    }
    let wide = area.width >= 120;
    let mut header = vec!["PATH", "SOURCE"];
    if wide {
        header.push("RECIPE");
    }
    header.extend(["HOLDER", "HELD", "WAIT", "LONGEST", "TTL", "MARKS"]);
    let mut widths = vec![Constraint::Fill(3), Constraint::Length(7)];
    if wide {
        widths.push(Constraint::Length(16));
    }
    widths.extend([
        Constraint::Fill(2),
        Constraint::Length(9),
        Constraint::Length(4),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Fill(3),
    ]);
    // The path's column as the table will lay it out: a long path keeps its ends.
    let path_width = Layout::horizontal(widths.clone())
        .spacing(1)
        .split(area)
        .first()
        .map_or(20, |r| usize::from(r.width));
    let rows = page.locks.iter().enumerate().map(|(i, l)| {
        let holder = l
            .holders
            .first()
            .map(|h| {
                let more = l.holders.len() - 1;
                let name = who(&h.identity, &h.node);
                if more > 0 {
                    format!("{name} +{more}")
                } else {
                    name
                }
            })
            .unwrap_or_else(|| "free".into());
        let held = longest(now_ms, l.holders.iter().map(|h| h.since_ms))
            .map(duration_text)
            .unwrap_or_default();
        let waited = longest(now_ms, l.waiters.iter().map(|w| w.since_ms))
            .map(duration_text)
            .unwrap_or_default();
        let mut cells = vec![
            Cell::from(middle_ellipsis(&l.path, path_width)),
            Cell::from(l.source.clone()),
        ];
        if wide {
            cells.push(Cell::from(l.recipe.clone()));
        }
        cells.extend([
            Cell::from(holder),
            Cell::from(held),
            Cell::from(l.waiters.len().to_string()),
            Cell::from(waited),
            Cell::from(ttl(l, now_ms)),
            Cell::from(marks(app, l, now_ms)),
        ]);
        let mut row_style = match l.stuck.as_ref().map(|s| s.level) {
            Some(StuckLevel::Critical) => style(app, Color::Red),
            Some(StuckLevel::Warning) => style(app, Color::Yellow),
            None => Style::default(),
        };
        if i == app.selected {
            row_style = row_style.add_modifier(Modifier::REVERSED);
        }
        Row::new(cells).style(row_style)
    });
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
        .column_spacing(1);
    frame.render_widget(table, area);
}

/// `text` in at most `max` characters: its start and its end around an ellipsis (a lock's
/// leaf is its most telling part).
fn middle_ellipsis(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max || max < 5 {
        return text.to_string();
    }
    let tail = (max - 1) / 2 + (max - 1) % 2;
    let head = max - 1 - tail;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

fn mode_word(mode: Option<LockMode>) -> &'static str {
    match mode {
        Some(LockMode::Read) => "read",
        Some(LockMode::Write) => "write",
        None => "",
    }
}

fn lock(frame: &mut Frame, app: &App, id: &str, area: Rect, now_ms: i64) {
    let Some(l) = app.lock() else {
        let text = if app.shown().loaded {
            format!("{id}: gone (no holder or waiter any more, or the lock left lockscope's view)")
        } else {
            format!("{id}: waiting for lockscope…")
        };
        frame.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
        return;
    };
    let mut lines = vec![
        Line::from(Span::styled(
            l.path.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::from(format!(
            "{} · {} · TTL {}{}{}",
            l.source,
            l.recipe,
            ttl(l, now_ms),
            l.fencing_token
                .map(|t| format!(" · fencing token {t}"))
                .unwrap_or_default(),
            if l.flags.is_empty() {
                String::new()
            } else {
                format!(" · {}", l.flags.join(", "))
            }
        )),
    ];
    let marks = marks(app, l, now_ms);
    if !marks.is_empty() {
        lines.push(Line::from(Span::styled(
            marks,
            style(app, Color::Red).add_modifier(Modifier::BOLD),
        )));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!("HOLDERS ({})", l.holders.len()),
        Style::default().add_modifier(Modifier::BOLD),
    )));
    if l.holders.is_empty() {
        lines.push(Line::from("  nobody holds it"));
    }
    for h in &l.holders {
        let mut parts = vec![
            who(&h.identity, &h.node),
            format!("session {}", h.session),
            format!("held {}", duration_text(now_ms - h.since_ms)),
        ];
        if !mode_word(h.mode).is_empty() {
            parts.push(mode_word(h.mode).into());
        }
        if let Some(n) = h.reentrancy.filter(|n| *n > 1) {
            parts.push(format!("re-entered ×{n}"));
        }
        if let Some(at) = h.lease.as_ref().and_then(|l| l.expires_at_ms) {
            parts.push(format!("lease ends in {}", duration_text(at - now_ms)));
        }
        lines.push(Line::from(format!("  {}", parts.join(" · "))));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!("WAITERS ({}), in queue order", l.waiters.len()),
        Style::default().add_modifier(Modifier::BOLD),
    )));
    if l.waiters.is_empty() {
        let visible = !l.flags.iter().any(|f| f == "waiters_not_visible");
        lines.push(Line::from(if visible {
            "  nobody waits"
        } else {
            "  waiters poll from their clients: the server cannot show them"
        }));
    }
    for (i, w) in l.waiters.iter().enumerate() {
        let mut parts = vec![
            format!("{}. {}", i + 1, who(&w.identity, &w.node)),
            format!("session {}", w.session),
            format!("waiting {}", duration_text(now_ms - w.since_ms)),
        ];
        if !mode_word(w.mode).is_empty() {
            parts.push(mode_word(w.mode).into());
        }
        if let Some(watches) = &w.watches {
            parts.push(format!(
                "watches {}",
                watches.rsplit('/').next().unwrap_or(watches)
            ));
        }
        lines.push(Line::from(format!("  {}", parts.join(" · "))));
    }
    if l.herd {
        lines.push(Line::from(format!(
            "  herd: {} sessions watch the holder; a release wakes them all",
            l.watchers + l.child_watchers
        )));
    }
    if !app.events.is_empty() {
        lines.push(Line::from(""));
        lines.push(Line::from(Span::styled(
            "RECENT EVENTS, newest first",
            Style::default().add_modifier(Modifier::BOLD),
        )));
        for e in app.events.iter().rev().take(8) {
            let cause = e
                .cause
                .map(|c| format!(" ({})", c.as_str()))
                .unwrap_or_default();
            let took = e
                .duration_ms
                .map(|d| format!(" after {}", duration_text(d)))
                .unwrap_or_default();
            lines.push(Line::from(format!(
                "  {} ago · {}{cause}{took} · {} · session {}",
                duration_text(now_ms - e.at_ms),
                e.kind.as_str(),
                e.node.rsplit('/').next().unwrap_or(&e.node),
                e.session
            )));
        }
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
}

/// The keys, over the screen.
fn help(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let width = area.width.min(64);
    let height = area.height.min(16);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let keys = [
        ("↑ ↓ / j k", "select a lock"),
        ("Enter", "open the selected lock: its queue in order"),
        ("Esc / q", "back from a lock; q on the list quits"),
        ("/", "filter by path or session (Enter applies)"),
        ("s", "cycle the sort"),
        ("f", "facets: state, source, backend, recipe"),
        ("PgDn / PgUp", "next / previous page (the server's cursors)"),
        ("p", "pause: the table stays still, counting changes"),
        (
            "R",
            "force-release a holder of the lock shown (admin token)",
        ),
        ("w", "sessions: root blockers, blocked → blocking, cycles"),
        ("?", "this list"),
    ];
    let lines: Vec<Line> = keys
        .iter()
        .map(|(k, what)| Line::from(format!(" {k:<12} {what}")))
        .collect();
    frame.render_widget(Clear, popup);
    let mut block = Block::default().borders(Borders::ALL).title(" keys ");
    if app.color {
        block = block.border_style(Style::default().fg(Color::Cyan));
    }
    frame.render_widget(Paragraph::new(lines).block(block), popup);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::App;
    use lockscope_model::wire::{
        Backend, HolderView, StuckKind, StuckView, ViewEvent, ViewSnapshot, WaiterView,
    };
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    const NOW: i64 = 1_800_000_000_000;

    fn sample() -> App {
        let mut app = App::new("http://127.0.0.1:8080", false);
        let holder = |node: &str, identity: Option<&str>, ago: i64| HolderView {
            node: node.into(),
            session: "0x1a2b".into(),
            since_ms: NOW - ago,
            identity: identity.map(str::to_string),
            ..HolderView::default()
        };
        let waiter = |node: &str, ago: i64| WaiterView {
            node: node.into(),
            session: "0x3c4d".into(),
            since_ms: NOW - ago,
            watches: Some("/locks/orders/lock-0000000001".into()),
            ..WaiterView::default()
        };
        let orders = LockView {
            id: "zk~/locks/orders".into(),
            source: "zk".into(),
            backend: Backend::Zookeeper,
            path: "/locks/orders".into(),
            recipe: "curator_mutex".into(),
            holders: vec![holder(
                "/locks/orders/lock-0000000001",
                Some("billing-7"),
                754_000,
            )],
            waiters: vec![
                waiter("/locks/orders/lock-0000000002", 108_000),
                waiter("/locks/orders/lock-0000000003", 12_000),
            ],
            stuck: Some(Box::new(StuckView {
                level: StuckLevel::Warning,
                kind: StuckKind::Wait,
                node: "/locks/orders/lock-0000000002".into(),
                since_ms: NOW - 108_000,
                for_ms: 108_000,
                limit_ms: 30_000,
            })),
            ..LockView::default()
        };
        let report = LockView {
            id: "cache~report:daily".into(),
            source: "cache".into(),
            backend: Backend::Redis,
            path: "report:daily".into(),
            recipe: "token_zset".into(),
            holders: vec![
                HolderView {
                    mode: Some(LockMode::Read),
                    ..holder("UTyB5Nx6M=", None, 4_000)
                },
                HolderView {
                    mode: Some(LockMode::Read),
                    ..holder("II9af5Y3ak=", None, 3_000)
                },
            ],
            expires_at_ms: Some(NOW + 57_000),
            flags: vec!["waiters_not_visible".into()],
            ..LockView::default()
        };
        let mut down = SourceView::connecting("db", Backend::Postgres);
        down.last_seen_ms = Some(NOW - 14_000);
        let mut zk = SourceView::connecting("zk", Backend::Zookeeper);
        zk.up = true;
        zk.synced = true;
        zk.error = None;
        let mut cache = zk.clone();
        cache.name = "cache".into();
        app.apply(ViewEvent::Snapshot(ViewSnapshot {
            sources: vec![zk, cache, down],
            locks: vec![orders, report],
            total: 2,
            facets: Default::default(),
            next: None,
        }));
        app
    }

    fn screen(app: &App, width: u16, height: u16) -> String {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|f| draw(f, app, NOW)).expect("draw");
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| {
                (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect::<String>()
                    .trim_end()
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_locks_screen_at_80x24_and_160x48() {
        let app = sample();
        insta::assert_snapshot!("locks_80x24", screen(&app, 80, 24));
        insta::assert_snapshot!("locks_160x48", screen(&app, 160, 48));
    }

    #[test]
    fn a_lock_screen_at_80x24_and_160x48() {
        let mut app = sample();
        app.screen = Screen::Lock("zk~/locks/orders".into());
        app.events = serde_json::from_value(serde_json::json!([
            {"at_ms": NOW - 760_000, "kind": "released", "node": "/locks/orders/lock-0000000000",
             "session": "0x0f0f", "cause": "session_expired", "duration_ms": 300_000},
            {"at_ms": NOW - 754_000, "kind": "acquired", "node": "/locks/orders/lock-0000000001",
             "session": "0x1a2b", "duration_ms": 6_000}
        ]))
        .expect("events");
        insta::assert_snapshot!("lock_80x24", screen(&app, 80, 24));
        insta::assert_snapshot!("lock_160x48", screen(&app, 160, 48));
    }

    #[test]
    fn the_wait_for_screen_and_root_blocker_marks() {
        let mut app = sample();
        let page = serde_json::json!({
            "edges": [
                {"source": "zk", "waiter": "0x3c4d", "holder": "0x1a2b",
                 "lock": "zk~/locks/orders", "waiting_since_ms": NOW - 108_000, "in_cycle": false},
                {"source": "db", "waiter": "4242", "holder": "4243",
                 "lock": "db~/advisory/app/7", "waiting_since_ms": NOW - 9_000, "in_cycle": true},
                {"source": "db", "waiter": "4243", "holder": "4242",
                 "lock": "db~/advisory/app/8", "waiting_since_ms": NOW - 8_000, "in_cycle": true}
            ],
            "sessions": [], "total": 3, "next": null, "cycles_total": 1, "joins": [],
            "cycles": [{"source": "db", "sessions": ["4242", "4243"], "sources": ["db"],
                        "members": [], "counted": true,
                        "waits": [
                            {"waiter": "4242", "lock": "db~/advisory/app/7", "holder": "4243", "source": "db"},
                            {"waiter": "4243", "lock": "db~/advisory/app/8", "holder": "4242", "source": "db"}
                        ]}]
        });
        let blockers = serde_json::json!({
            "blockers": [{"sessions": [{"source": "zk", "session": "0x1a2b"}],
                          "process": {"name": "billing-7", "from": "identifier", "exact": true},
                          "direct": 2, "total": 2, "waited_ms": 120_000,
                          "locks": ["zk~/locks/orders"]}],
            "total": 1
        });
        app.graph = Some((
            serde_json::from_value(page).expect("page"),
            serde_json::from_value(blockers).expect("blockers"),
        ));
        let list = screen(&app, 160, 48);
        assert!(list.contains("ROOT BLOCKER (2)"), "{list}");
        app.screen = Screen::WaitFor;
        insta::assert_snapshot!("waitfor_80x24", screen(&app, 80, 24));
        insta::assert_snapshot!("waitfor_160x48", screen(&app, 160, 48));
    }

    #[test]
    fn the_force_release_confirmation_names_the_holder() {
        let mut app = sample();
        app.screen = Screen::Lock("zk~/locks/orders".into());
        app.dialog = Some(crate::app::ReleaseDialog {
            holder: 0,
            reason: "host dead, INC-7".into(),
            sent: false,
        });
        insta::assert_snapshot!("release_80x24", screen(&app, 80, 24));
    }

    #[test]
    fn the_keys_and_honest_states() {
        let mut app = sample();
        app.help = true;
        insta::assert_snapshot!("help_80x24", screen(&app, 80, 24));
        app.help = false;
        app.page.facets.state = [("held".to_string(), 2), ("stuck".to_string(), 1)].into();
        app.page.facets.source = [("cache".to_string(), 1), ("zk".to_string(), 1)].into();
        app.facets = vec![("source", "zk".to_string())];
        app.picker = Some(2);
        insta::assert_snapshot!("facets_80x24", screen(&app, 80, 24));
        let mut app = App::new("http://127.0.0.1:8080", false);
        app.failed("connection refused".into(), 2, NOW);
        let text = screen(&app, 80, 24);
        assert!(
            text.contains("lockscope unreachable — retrying in 2 s"),
            "{text}"
        );
        assert!(
            text.contains("No data: lockscope cannot be reached."),
            "{text}"
        );
        assert!(!text.contains(" 0 locks"), "no zero without data: {text}");
        // A page already shown stays, said to be old.
        let mut app = sample();
        app.failed("connection refused".into(), 1, NOW - 12_000);
        let text = screen(&app, 80, 24);
        assert!(text.contains("as of 12 s ago, not live"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
        assert!(!text.contains("zk live"), "{text}");
    }
}
