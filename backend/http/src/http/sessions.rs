//! Session queries answered by the server (`GET /api/v1/sessions`): what a query may say, how it
//! is checked (a bad parameter is a 400 naming it, as for every paged endpoint:
//! [`super::paging`]), and how one page of the sessions is cut.
//!
//! * Filters: `source`, `kind` (`zookeeper_session`, `etcd_lease`, `database_connection`), `q`
//!   (a substring, ASCII case ignored, of the session's id or, for a database connection, of its
//!   user, application or client address), `state=holding|waiting|idle` (holds a lock / waits on
//!   one / neither; a session may be holding and waiting).
//! * Order: `sort=session|expires|holds|waits|source`, `order=asc|desc` (default: session
//!   ascending; `expires` soonest first, a session without an expiry counting as never; `holds`
//!   and `waits`, the number of locks, most first). Ties go by source, then session, ascending,
//!   so no two sessions tie and a cursor is exact.
//! * Pages: `limit` (default 100, at most 1,000) and `cursor`, the `next` of the page before,
//!   bound to the query's filters, sort and order.
//!
//! The answer ([`SessionPage`]) has `total` (the sessions matching) and `facets` counting
//! sessions per source and per kind, each under every filter but its own. A page costs one pass
//! over the sessions with at most `limit + 1` kept aside.
//!
//! This module owns the session query only; the sessions come from the aggregator
//! (`Command::Sessions`), and it never asks for them itself.

use lockscope_model::wire::{SessionFacets, SessionKind, SessionPage, SessionView};

use super::paging::{count, fingerprint, BadParameter, Keyset, Order, Params, SortKey, Window};

/// What a session is doing, as `state=` filters it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, utoipa::ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum SessionState {
    /// It holds at least one lock.
    Holding,
    /// It waits on at least one lock.
    Waiting,
    /// It neither holds nor waits.
    Idle,
}

impl SessionState {
    const CHOICES: [(&'static str, SessionState); 3] = [
        ("holding", SessionState::Holding),
        ("waiting", SessionState::Waiting),
        ("idle", SessionState::Idle),
    ];

    fn of(self, session: &SessionView) -> bool {
        match self {
            SessionState::Holding => !session.holds.is_empty(),
            SessionState::Waiting => !session.waits.is_empty(),
            SessionState::Idle => session.holds.is_empty() && session.waits.is_empty(),
        }
    }
}

/// What a page of sessions is ordered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(as = SessionSort, rename_all = "snake_case")]
pub enum Sort {
    Session,
    Expires,
    Holds,
    Waits,
    Source,
}

impl Sort {
    const CHOICES: [(&'static str, Sort); 5] = [
        ("session", Sort::Session),
        ("expires", Sort::Expires),
        ("holds", Sort::Holds),
        ("waits", Sort::Waits),
        ("source", Sort::Source),
    ];

    /// The order a sort takes without `order=`: the most first for counts.
    fn default_order(self) -> Order {
        match self {
            Sort::Holds | Sort::Waits => Order::Desc,
            Sort::Session | Sort::Expires | Sort::Source => Order::Asc,
        }
    }
}

/// A session's key under `sort`, ascending in what the sort names.
fn sort_key(sort: Sort, session: &SessionView) -> SortKey {
    match sort {
        Sort::Session => SortKey::Text(session.session.clone()),
        Sort::Source => SortKey::Text(session.source.clone()),
        // No expiry: it never expires, after every one that does.
        Sort::Expires => SortKey::Number(session.expires_at_ms.unwrap_or(i64::MAX)),
        Sort::Holds => SortKey::Number(session.holds.len() as i64),
        Sort::Waits => SortKey::Number(session.waits.len() as i64),
    }
}

/// A session's tie-break: source, then session id (unique together).
type Tie = (String, String);

/// The parameters a session query may carry.
const PARAMETERS: &[&str] = &[
    "source", "kind", "q", "state", "sort", "order", "limit", "cursor",
];

/// A checked `GET /api/v1/sessions` query.
#[derive(Debug, Clone)]
pub struct SessionQuery {
    pub source: Option<String>,
    pub kind: Option<SessionKind>,
    /// Lowercased (ASCII): matched ignoring ASCII case.
    pub q: Option<String>,
    pub state: Option<SessionState>,
    pub sort: Sort,
    pub limit: usize,
    keyset: Keyset<SortKey, Tie>,
}

impl SessionQuery {
    /// Checks the query string's pairs as of `now` (epoch ms); the first problem found is the
    /// answer.
    pub fn parse(pairs: &[(String, String)], now: i64) -> Result<SessionQuery, BadParameter> {
        let params = Params::new(pairs, PARAMETERS)?;
        let sort = params
            .choice("sort", &Sort::CHOICES)?
            .unwrap_or(Sort::Session);
        let mut query = SessionQuery {
            source: params.text("source")?,
            kind: params.choice("kind", &SessionKind::ALL.map(|k| (k.as_str(), k)))?,
            q: params.text("q")?.map(|q| q.to_ascii_lowercase()),
            state: params.choice("state", &SessionState::CHOICES)?,
            sort,
            limit: params.limit()?,
            keyset: Keyset {
                order: params.order(sort.default_order())?,
                after: None,
            },
        };
        query.keyset.after = params.cursor(query.fingerprint(), now)?;
        Ok(query)
    }

    /// What a cursor is bound to: the endpoint, the filters, the sort and the order.
    fn fingerprint(&self) -> u64 {
        fingerprint((
            "sessions",
            &self.source,
            self.kind.map(SessionKind::as_str),
            &self.q,
            self.state,
            self.sort as u8,
            self.keyset.order as u8,
        ))
    }

    /// The filters `session` fails: [`SOURCE`], [`KIND`] and [`OTHER`] (`q`, `state`) bits.
    fn failures(&self, session: &SessionView) -> u8 {
        let fails = |failed: bool, bit: u8| if failed { bit } else { 0 };
        fails(
            self.source.as_ref().is_some_and(|s| *s != session.source),
            SOURCE,
        ) | fails(self.kind.is_some_and(|k| k != session.kind), KIND)
            | fails(
                self.state.is_some_and(|s| !s.of(session))
                    || self.q.as_deref().is_some_and(|q| !matches_q(q, session)),
                OTHER,
            )
    }
}

const SOURCE: u8 = 1;
const KIND: u8 = 2;
const OTHER: u8 = 4;

/// Whether `q` (lowercase) is in the session's id or, for a database connection, its user,
/// application or client address, ignoring ASCII case.
fn matches_q(q: &str, session: &SessionView) -> bool {
    super::paging::contains_ignoring_ascii_case(&session.session, q)
        || session.connection.as_ref().is_some_and(|c| {
            [Some(&c.user), c.application.as_ref(), c.client.as_ref()]
                .into_iter()
                .flatten()
                .any(|text| super::paging::contains_ignoring_ascii_case(text, q))
        })
}

/// Answers `query` over `sessions`: one pass, at most `limit + 1` sessions kept aside; the
/// cursor of the next page is handed out at `now`.
pub fn page(
    query: &SessionQuery,
    sessions: impl IntoIterator<Item = SessionView>,
    now: i64,
) -> SessionPage {
    let mut facets = SessionFacets::default();
    let mut total = 0u64;
    let mut window = Window::new(query.limit, &query.keyset);
    for session in sessions {
        let failed = query.failures(&session);
        if failed & !SOURCE == 0 {
            count(&mut facets.source, &session.source);
        }
        if failed & !KIND == 0 {
            count(&mut facets.kind, session.kind.as_str());
        }
        if failed != 0 {
            continue;
        }
        total += 1;
        let place = (
            sort_key(query.sort, &session),
            (session.source.clone(), session.session.clone()),
        );
        window.offer(place, session);
    }
    let (sessions, next) = window.finish(query.fingerprint(), now);
    SessionPage {
        sessions,
        total,
        next,
        facets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::paging::pairs;
    use crate::http::paging::CURSOR_TTL_MS;
    use lockscope_model::wire::ConnectionView;

    fn session(source: &str, id: &str, holds: usize, waits: usize) -> SessionView {
        SessionView {
            source: source.into(),
            session: id.into(),
            kind: SessionKind::ZookeeperSession,
            timeout_ms: None,
            connected: true,
            server: None,
            expires_at_ms: None,
            holds: (0..holds).map(|i| format!("{source}~h{i}")).collect(),
            waits: (0..waits).map(|i| format!("{source}~w{i}")).collect(),
            connection: None,
            process: None,
        }
    }

    fn ids(page: &SessionPage) -> Vec<&str> {
        page.sessions.iter().map(|s| s.session.as_str()).collect()
    }

    #[test]
    fn bad_parameters_are_named() {
        for (q, name) in [
            ("sort=size", "sort"),
            ("sort=", "sort"),
            ("state=busy", "state"),
            ("state=held", "state"),
            ("kind=session", "kind"),
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=ten", "limit"),
            ("order=up", "order"),
            ("cursor=%%%", "cursor"),
            ("cursor=e30", "cursor"),
            ("colour=red", "colour"),
            ("format=ndjson", "format"),
            ("q=a&q=b", "q"),
        ] {
            let e = SessionQuery::parse(&pairs(q), 0).expect_err(q);
            assert_eq!(e.parameter, name, "{q}: {}", e.message);
        }
        let query = SessionQuery::parse(
            &pairs("access_token=x&limit=1000&kind=etcd_lease&state=idle&sort=expires"),
            0,
        )
        .expect("query");
        assert_eq!(query.kind, Some(SessionKind::EtcdLease));
        assert_eq!(query.keyset.order, Order::Asc);
        let query = SessionQuery::parse(&pairs("sort=holds"), 0).expect("query");
        assert_eq!(query.keyset.order, Order::Desc);
    }

    #[test]
    fn pages_by_cursor_never_repeat_or_skip_what_stayed() {
        let mut sessions: Vec<SessionView> = (0..25)
            .map(|i| session("zk", &format!("0x{i:02}"), 1, 0))
            .collect();
        let query = SessionQuery::parse(&pairs("limit=10"), 1_000).expect("query");
        let first = page(&query, sessions.clone(), 1_000);
        assert_eq!((first.total, first.sessions.len()), (25, 10));
        // Between pages: an earlier session goes, new ones come before and after the cursor.
        sessions.retain(|s| s.session != "0x03");
        sessions.push(session("zk", "0x05a", 1, 0));
        sessions.push(session("zk", "0x15a", 1, 0));
        let cursor = first.next.clone().expect("next");
        let second = SessionQuery::parse(&pairs(&format!("limit=10&cursor={cursor}")), 2_000)
            .expect("second query");
        let second = page(&second, sessions.clone(), 2_000);
        assert_eq!(ids(&second)[0], "0x10");
        assert!(ids(&second).contains(&"0x15a"));
        // Another query's cursor, a lock query's, and an old one.
        for (q, at) in [
            (format!("limit=10&sort=source&cursor={cursor}"), 2_000),
            (format!("cursor={cursor}"), 1_000 + CURSOR_TTL_MS + 1),
        ] {
            let e = SessionQuery::parse(&pairs(&q), at).expect_err(&q);
            assert_eq!(e.parameter, "cursor");
        }
        let locks =
            crate::http::query::LockQuery::parse(&pairs(&format!("cursor={cursor}")), 2_000);
        assert_eq!(locks.expect_err("a session cursor").parameter, "cursor");
    }

    #[test]
    fn filters_sorts_and_facets() {
        let mut pg = session("pg", "41", 0, 0);
        pg.kind = SessionKind::DatabaseConnection;
        pg.connection = Some(ConnectionView {
            user: "Billing".into(),
            application: Some("nightly-Report".into()),
            client: Some("10.1.2.3:5000".into()),
            ..ConnectionView::default()
        });
        let mut expiring = session("zk", "0xaB", 2, 1);
        expiring.expires_at_ms = Some(5_000);
        let mut sooner = session("zk", "0x02", 0, 2);
        sooner.expires_at_ms = Some(4_000);
        let sessions = vec![session("zk", "0x01", 1, 0), expiring, sooner, pg];
        let run = |q: &str| {
            let query = SessionQuery::parse(&pairs(q), 0).expect(q);
            page(&query, sessions.clone(), 0)
        };
        assert_eq!(ids(&run("")), ["0x01", "0x02", "0xaB", "41"]);
        // Without an expiry: last, in (source, session) order.
        assert_eq!(ids(&run("sort=expires")), ["0x02", "0xaB", "41", "0x01"]);
        assert_eq!(ids(&run("sort=holds")), ["0xaB", "0x01", "41", "0x02"]);
        assert_eq!(
            ids(&run("sort=waits&order=asc")),
            ["41", "0x01", "0xaB", "0x02"]
        );
        assert_eq!(
            ids(&run("sort=source&order=desc")),
            ["0x01", "0x02", "0xaB", "41"]
        );
        assert_eq!(ids(&run("q=XA")), ["0xaB"]);
        for q in ["billing", "REPORT", "10.1.2", "4"] {
            assert_eq!(ids(&run(&format!("q={q}"))), ["41"], "{q}");
        }
        assert_eq!(ids(&run("state=idle")), ["41"]);
        assert_eq!(ids(&run("state=waiting")), ["0x02", "0xaB"]);
        let holding = run("state=holding&kind=zookeeper_session");
        assert_eq!(ids(&holding), ["0x01", "0xaB"]);
        assert_eq!(holding.total, 2);
        // Each facet counts under the other filters: the kind facet ignores kind=.
        assert_eq!(holding.facets.source.get("zk"), Some(&2));
        assert_eq!(holding.facets.source.get("pg"), None);
        let pg = run("source=pg");
        assert_eq!(pg.facets.source.get("zk"), Some(&3));
        assert_eq!(pg.facets.kind.get("database_connection"), Some(&1));
        assert_eq!(pg.facets.kind.get("zookeeper_session"), None);
        let json = serde_json::to_value(&pg).expect("json");
        assert_eq!(json["next"], serde_json::Value::Null);
        assert_eq!(json["facets"]["source"]["zk"], 3);
    }
}
