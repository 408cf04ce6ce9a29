//! A lock as the table stores it: one compact, immutable record per lock ([`StoredLock`]), from
//! which its [`LockView`] is rendered when a reader asks (a list, a detail, the stream's first
//! snapshot, a release's compare) instead of keeping every view built.
//!
//! The record is the view's fields in `postcard`'s varint encoding, less what the table already
//! knows: the lock's id is the snapshot's key, and the source and path are read back from the
//! id ([`lockscope_model::id::parse_lock_id`]) whenever they agree with it (always, for the
//! sources lockscope builds); a participant's session is left out when it is the participant's
//! own id (a Redis token, an etcd key, a database connection). Fields most locks leave unset
//! are grouped (`HolderMore`, `WaiterMore`, `LockMore`: one byte when none is set), and
//! participants' starts and the expiry are stored from `changed_ms` (one byte when equal). A
//! redis-py token lock takes ~70 bytes here instead of ~750 as a view with its strings.
//!
//! Encoding is exhaustive: [`StoredLock::encode`] destructures every field of the view, so a
//! field added to the wire types does not compile until it is stored too.

use std::borrow::Cow;

use lockscope_model::wire::{
    Backend, HolderView, LeaseView, LockMode, LockView, RedlockView, StaleView, WaiterView,
};
use serde::{Deserialize, Serialize};

/// One lock as the table keeps it (see the module docs). Cloning shares the bytes; the pointer
/// is thin (8 B), the length kept in the block beside the reference count.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredLock(triomphe::ThinArc<(), u8>);

impl std::fmt::Debug for StoredLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoredLock({} B)", self.len())
    }
}

/// A name the id gives back, or the lock's own.
#[derive(Serialize, Deserialize)]
enum Name<'a> {
    /// As parsed from the id.
    FromId,
    /// As parsed from the id, without its leading `/` (Redis keys: the id is made of `/<key>`).
    FromIdUnslashed,
    #[serde(borrow)]
    Own(Cow<'a, str>),
}

#[derive(Serialize, Deserialize, PartialEq)]
struct Lease<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    granted_s: Option<i64>,
    expires_at_ms: Option<i64>,
}

/// A holder: what every holder has, and the rest only when any of it is set (one byte when
/// none is, as for a token). Its start is stored from the lock's `changed_ms` (one byte when
/// equal).
#[derive(Serialize, Deserialize)]
struct Holder<'a> {
    #[serde(borrow)]
    node: Text<'a>,
    /// `None`: the node is its own session.
    #[serde(borrow)]
    session: Option<Text<'a>>,
    since: i64,
    #[serde(borrow)]
    more: Option<HolderMore<'a>>,
}

#[derive(Serialize, Deserialize, Default, PartialEq)]
struct HolderMore<'a> {
    held_ms: i64,
    mode: Option<LockMode>,
    watchers: u32,
    reentrancy: Option<u64>,
    #[serde(borrow)]
    lease: Option<Lease<'a>>,
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    identity: Option<Cow<'a, str>>,
    #[serde(borrow)]
    statement: Option<(Cow<'a, str>, Cow<'a, str>)>,
}

#[derive(Serialize, Deserialize)]
struct Waiter<'a> {
    #[serde(borrow)]
    node: Text<'a>,
    #[serde(borrow)]
    session: Option<Text<'a>>,
    /// From the lock's `changed_ms`.
    since: i64,
    position: u32,
    #[serde(borrow)]
    more: Option<WaiterMore<'a>>,
}

#[derive(Serialize, Deserialize, Default, PartialEq)]
struct WaiterMore<'a> {
    waited_ms: i64,
    mode: Option<LockMode>,
    #[serde(borrow)]
    watches: Option<Cow<'a, str>>,
    deadline_ms: Option<i64>,
    #[serde(borrow)]
    lease: Option<Lease<'a>>,
    #[serde(borrow)]
    identity: Option<Cow<'a, str>>,
    #[serde(borrow)]
    statement: Option<(Cow<'a, str>, Cow<'a, str>)>,
}

/// A lock: what most locks set, and the rest as one group that costs a byte when none of it
/// is set. Expiry is stored from `changed_ms`.
#[derive(Serialize, Deserialize)]
struct Lock<'a> {
    backend: Backend,
    #[serde(borrow)]
    source: Name<'a>,
    #[serde(borrow)]
    path: Name<'a>,
    #[serde(borrow)]
    recipe: Cow<'a, str>,
    #[serde(borrow)]
    holders: Vec<Holder<'a>>,
    #[serde(borrow)]
    waiters: Vec<Waiter<'a>>,
    changed_ms: i64,
    /// From `changed_ms`.
    expires: Option<i64>,
    ttl_ms: Option<i64>,
    lease_ms: Option<i64>,
    acquisitions: u64,
    releases: u64,
    #[serde(borrow)]
    more: Option<LockMore<'a>>,
}

#[derive(Serialize, Deserialize, Default, PartialEq)]
struct LockMore<'a> {
    watchers: u32,
    child_watchers: u32,
    herd: bool,
    max_leases: Option<u32>,
    oldest_wait_ms: i64,
    #[serde(borrow)]
    flags: Vec<Cow<'a, str>>,
    permits_available: Option<i64>,
    permits_total: Option<u32>,
    fencing_token: Option<i64>,
    deadline_ms: Option<i64>,
    /// The Redlock view as JSON (Redlock sources only; its optional fields are left out of
    /// JSON, which a positional encoding cannot do).
    #[serde(borrow)]
    redlock: Option<Cow<'a, str>>,
    usual_hold_ms: Option<i64>,
    #[serde(borrow)]
    stale: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    #[serde(borrow)]
    recipe_guess: Option<Cow<'a, str>>,
    unattributed_waiters: Option<u32>,
}

/// A participant's id or session as stored: packed when it has the shape most token
/// libraries give it, else as it is. A lowercase UUID (`str(uuid4())`, Java's and .NET's
/// `toString()`; Redisson's `<uuid>:<thread id>` as the UUID and the rest) keeps its 16 bytes;
/// lowercase hex of even length (redis-py's `uuid1().hex`, python-redis-lock's and Node's random
/// hex) its bytes. A UUID token record is 20 B smaller, which is 16 B of a million-lock table.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
enum Text<'a> {
    #[serde(borrow)]
    Plain(Cow<'a, str>),
    Uuid([u8; 16], #[serde(borrow)] Cow<'a, str>),
    Hex(Vec<u8>),
}

/// Whether `text` has no uppercase letter: a token is packed only when unpacking gives it back
/// as it was (the decoders below accept both cases, and write lowercase).
fn lowercase(text: &[u8]) -> bool {
    !text.iter().any(u8::is_ascii_uppercase)
}

impl<'a> Text<'a> {
    fn of(text: &'a str) -> Text<'a> {
        let bytes = text.as_bytes();
        if let Some(head) = bytes.get(..36).filter(|head| lowercase(head)) {
            // 36 bytes parse only as the hyphenated form, which is ASCII: the rest starts on a
            // character.
            if let Ok(uuid) = uuid::Uuid::try_parse_ascii(head) {
                return Text::Uuid(uuid.into_bytes(), Cow::Borrowed(&text[36..]));
            }
        }
        if bytes.len() >= 16 && lowercase(bytes) {
            if let Ok(hex) = hex::decode(bytes) {
                return Text::Hex(hex);
            }
        }
        Text::Plain(Cow::Borrowed(text))
    }

    fn into_string(self) -> String {
        match self {
            Text::Plain(text) => text.into_owned(),
            Text::Uuid(uuid, rest) => {
                let mut head = [0; uuid::fmt::Hyphenated::LENGTH];
                let head = uuid::Uuid::from_bytes(uuid)
                    .hyphenated()
                    .encode_lower(&mut head);
                format!("{head}{rest}")
            }
            Text::Hex(bytes) => hex::encode(bytes),
        }
    }

    fn is_packed(&self) -> bool {
        !matches!(self, Text::Plain(_))
    }
}

/// `more` when anything in it is set.
fn unless_default<T: Default + PartialEq>(more: T) -> Option<T> {
    (more != T::default()).then_some(more)
}

fn own_session<'a>(node: &str, session: &'a str) -> Option<Text<'a>> {
    (session != node).then(|| Text::of(session))
}

fn lease_of(lease: &Option<Box<LeaseView>>) -> Option<Lease<'_>> {
    lease.as_deref().map(|l| Lease {
        id: Cow::Borrowed(&l.id),
        granted_s: l.granted_s,
        expires_at_ms: l.expires_at_ms,
    })
}

fn lease_view(lease: Option<Lease<'_>>) -> Option<Box<LeaseView>> {
    lease.map(|l| {
        Box::new(LeaseView {
            id: l.id.into_owned(),
            granted_s: l.granted_s,
            expires_at_ms: l.expires_at_ms,
        })
    })
}

/// A participant's statement as stored: (kind, text).
fn statement_of(
    statement: &Option<Box<lockscope_model::wire::StatementView>>,
) -> Option<(Cow<'_, str>, Cow<'_, str>)> {
    statement.as_ref().map(|s| {
        (
            Cow::Borrowed(s.kind.as_str()),
            Cow::Borrowed(s.text.as_str()),
        )
    })
}

fn statement_view(
    statement: Option<(Cow<'_, str>, Cow<'_, str>)>,
) -> Option<Box<lockscope_model::wire::StatementView>> {
    statement.map(|(kind, text)| {
        Box::new(lockscope_model::wire::StatementView {
            kind: kind.into_owned(),
            text: text.into_owned(),
        })
    })
}

impl StoredLock {
    /// The record of `view` (whose `id` is the key it is stored under).
    pub fn encode(view: &LockView) -> StoredLock {
        let LockView {
            id,
            source,
            backend,
            path,
            recipe,
            holders,
            waiters,
            watchers,
            child_watchers,
            herd,
            max_leases,
            oldest_wait_ms,
            acquisitions,
            releases,
            changed_ms,
            expires_at_ms,
            ttl_ms,
            flags,
            permits_available,
            permits_total,
            fencing_token,
            deadline_ms,
            redlock,
            usual_hold_ms,
            lease_ms,
            stale,
            // Judged as each answer is written (`rules::tick_and_judge`), never stored.
            stuck: _,
            recipe_guess,
            unattributed_waiters,
            // Marked as each answer is served (`Snapshot::lock`), never stored.
            source_last_seen_ms: _,
        } = view;
        let parsed = lockscope_model::id::parse_lock_id(id);
        let source_name = match &parsed {
            Some((s, _)) if s == source => Name::FromId,
            _ => Name::Own(Cow::Borrowed(source)),
        };
        let path_name = match &parsed {
            Some((_, p)) if p == path => Name::FromId,
            Some((_, p)) if p.strip_prefix('/') == Some(path.as_str()) => Name::FromIdUnslashed,
            _ => Name::Own(Cow::Borrowed(path)),
        };
        let lock = Lock {
            backend: *backend,
            source: source_name,
            path: path_name,
            recipe: Cow::Borrowed(recipe),
            holders: holders
                .iter()
                .map(|h| {
                    let HolderView {
                        node,
                        session,
                        since_ms,
                        held_ms,
                        mode,
                        watchers,
                        reentrancy,
                        lease,
                        version,
                        identity,
                        statement,
                    } = h;
                    Holder {
                        node: Text::of(node),
                        session: own_session(node, session),
                        since: since_ms.wrapping_sub(*changed_ms),
                        more: unless_default(HolderMore {
                            held_ms: *held_ms,
                            mode: *mode,
                            watchers: *watchers,
                            reentrancy: *reentrancy,
                            lease: lease_of(lease),
                            version: version.as_deref().map(Cow::Borrowed),
                            identity: identity.as_deref().map(Cow::Borrowed),
                            statement: statement_of(statement),
                        }),
                    }
                })
                .collect(),
            waiters: waiters
                .iter()
                .map(|w| {
                    let WaiterView {
                        node,
                        session,
                        since_ms,
                        waited_ms,
                        position,
                        mode,
                        watches,
                        deadline_ms,
                        lease,
                        identity,
                        statement,
                    } = w;
                    Waiter {
                        node: Text::of(node),
                        session: own_session(node, session),
                        since: since_ms.wrapping_sub(*changed_ms),
                        position: *position,
                        more: unless_default(WaiterMore {
                            waited_ms: *waited_ms,
                            mode: *mode,
                            watches: watches.as_deref().map(Cow::Borrowed),
                            deadline_ms: *deadline_ms,
                            lease: lease_of(lease),
                            identity: identity.as_deref().map(Cow::Borrowed),
                            statement: statement_of(statement),
                        }),
                    }
                })
                .collect(),
            changed_ms: *changed_ms,
            expires: expires_at_ms.map(|at| at.wrapping_sub(*changed_ms)),
            ttl_ms: *ttl_ms,
            lease_ms: *lease_ms,
            acquisitions: *acquisitions,
            releases: *releases,
            more: unless_default(LockMore {
                watchers: *watchers,
                child_watchers: *child_watchers,
                herd: *herd,
                max_leases: *max_leases,
                oldest_wait_ms: *oldest_wait_ms,
                flags: flags.iter().map(|f| Cow::Borrowed(f.as_str())).collect(),
                permits_available: *permits_available,
                permits_total: *permits_total,
                fencing_token: *fencing_token,
                deadline_ms: *deadline_ms,
                redlock: redlock
                    .as_deref()
                    .and_then(|r| serde_json::to_string(r).ok())
                    .map(Cow::Owned),
                usual_hold_ms: *usual_hold_ms,
                stale: stale
                    .iter()
                    .map(|s| {
                        (
                            Cow::Borrowed(s.rule.as_str()),
                            Cow::Borrowed(s.explanation.as_str()),
                        )
                    })
                    .collect(),
                recipe_guess: recipe_guess.as_deref().map(Cow::Borrowed),
                unattributed_waiters: *unattributed_waiters,
            }),
        };
        match postcard::to_allocvec(&lock) {
            Ok(bytes) => StoredLock(triomphe::ThinArc::from_header_and_slice((), &bytes)),
            // Serialising into a growing buffer has no failure but running out of memory.
            Err(e) => unreachable!("a lock record cannot be encoded: {e}"),
        }
    }

    /// The record's size in bytes.
    pub fn len(&self) -> usize {
        self.0.slice.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.slice.is_empty()
    }

    /// Whether `needle` (ASCII case ignored) may be in a participant's node or session: false
    /// only when it is in none. Cheaper than rendering: the record's bytes hold every text of
    /// the view as it is but the source and path (which the id gives) and the packed ids and
    /// sessions ([`Text`]), which are unpacked only when the needle could start in one (with
    /// a hex digit or `-`).
    pub fn may_mention(&self, needle: &str) -> bool {
        if contains_ignoring_ascii_case(&self.0.slice, needle.as_bytes()) {
            return true;
        }
        // A needle not in the bytes can only be in a packed text if it starts in its digits.
        if !needle
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            return false;
        }
        let Ok(lock) = postcard::from_bytes::<Lock<'_>>(&self.0.slice) else {
            return true;
        };
        let packed = lock
            .holders
            .into_iter()
            .flat_map(|h| [Some(h.node), h.session])
            .chain(
                lock.waiters
                    .into_iter()
                    .flat_map(|w| [Some(w.node), w.session]),
            )
            .flatten()
            .filter(Text::is_packed);
        for text in packed {
            if contains_ignoring_ascii_case(text.into_string().as_bytes(), needle.as_bytes()) {
                return true;
            }
        }
        false
    }

    /// The view of the lock stored under `id`.
    pub fn render(&self, id: &str) -> LockView {
        let lock: Lock<'_> = match postcard::from_bytes(&self.0.slice) {
            Ok(lock) => lock,
            // Only `encode` makes records, from a view.
            Err(e) => unreachable!("a lock record does not decode: {e}"),
        };
        let parsed = || lockscope_model::id::parse_lock_id(id).unwrap_or_default();
        let named = |name: Name<'_>, from_id: fn((String, String)) -> String| match name {
            Name::FromId => from_id(parsed()),
            Name::FromIdUnslashed => {
                let whole = from_id(parsed());
                whole.strip_prefix('/').unwrap_or(&whole).to_string()
            }
            Name::Own(own) => own.into_owned(),
        };
        let source = named(lock.source, |(s, _)| s);
        let path = named(lock.path, |(_, p)| p);
        let session = |node: &str, session: Option<Text<'_>>| {
            session.map_or_else(|| node.to_string(), Text::into_string)
        };
        let changed_ms = lock.changed_ms;
        let more = lock.more.unwrap_or_default();
        LockView {
            id: id.to_string(),
            source,
            backend: lock.backend,
            path,
            recipe: lock.recipe.into_owned(),
            holders: lock
                .holders
                .into_iter()
                .map(|h| {
                    let more = h.more.unwrap_or_default();
                    let node = h.node.into_string();
                    HolderView {
                        session: session(&node, h.session),
                        node,
                        since_ms: h.since.wrapping_add(changed_ms),
                        held_ms: more.held_ms,
                        mode: more.mode,
                        watchers: more.watchers,
                        reentrancy: more.reentrancy,
                        lease: lease_view(more.lease),
                        version: more.version.map(Cow::into_owned),
                        identity: more.identity.map(Cow::into_owned),
                        statement: statement_view(more.statement),
                    }
                })
                .collect(),
            waiters: lock
                .waiters
                .into_iter()
                .map(|w| {
                    let more = w.more.unwrap_or_default();
                    let node = w.node.into_string();
                    WaiterView {
                        session: session(&node, w.session),
                        node,
                        since_ms: w.since.wrapping_add(changed_ms),
                        waited_ms: more.waited_ms,
                        position: w.position,
                        mode: more.mode,
                        watches: more.watches.map(Cow::into_owned),
                        deadline_ms: more.deadline_ms,
                        lease: lease_view(more.lease),
                        identity: more.identity.map(Cow::into_owned),
                        statement: statement_view(more.statement),
                    }
                })
                .collect(),
            watchers: more.watchers,
            child_watchers: more.child_watchers,
            herd: more.herd,
            max_leases: more.max_leases,
            oldest_wait_ms: more.oldest_wait_ms,
            acquisitions: lock.acquisitions,
            releases: lock.releases,
            changed_ms,
            expires_at_ms: lock.expires.map(|at| at.wrapping_add(changed_ms)),
            ttl_ms: lock.ttl_ms,
            flags: more.flags.into_iter().map(Cow::into_owned).collect(),
            permits_available: more.permits_available,
            permits_total: more.permits_total,
            fencing_token: more.fencing_token,
            deadline_ms: more.deadline_ms,
            redlock: more
                .redlock
                .and_then(|json| serde_json::from_str::<RedlockView>(&json).ok())
                .map(Box::new),
            usual_hold_ms: more.usual_hold_ms,
            lease_ms: lock.lease_ms,
            stuck: None,
            stale: more
                .stale
                .into_iter()
                .map(|(rule, explanation)| StaleView {
                    rule: rule.into_owned(),
                    explanation: explanation.into_owned(),
                })
                .collect(),
            recipe_guess: more.recipe_guess.map(Cow::into_owned),
            unattributed_waiters: more.unattributed_waiters,
            source_last_seen_ms: None,
        }
    }
}

/// Whether `needle` is in `text`, ASCII case ignored.
pub fn contains_ignoring_ascii_case(text: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || text
            .windows(needle.len())
            .any(|window| window.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockscope_model::wire::RedlockMasterView;

    fn lease() -> Option<Box<LeaseView>> {
        Some(Box::new(LeaseView {
            id: "694d7a1f3b2c4d01".into(),
            granted_s: Some(10),
            expires_at_ms: Some(1_700_000_010_000),
        }))
    }

    /// A view with every field set, none to its default.
    fn everything(id: &str, source: &str, path: &str) -> LockView {
        LockView {
            id: id.into(),
            source: source.into(),
            backend: Backend::Etcd,
            path: path.into(),
            recipe: "etcd-lock".into(),
            holders: vec![HolderView {
                node: "/locks/a/694d7a1f3b2c4d01".into(),
                session: "0x694d7a1f3b2c4d01".into(),
                since_ms: 1_700_000_000_000,
                held_ms: 12,
                mode: Some(LockMode::Write),
                watchers: 3,
                reentrancy: Some(2),
                lease: lease(),
                identity: None,
                version: Some("12/14".into()),
                statement: Some(Box::new(lockscope_model::wire::StatementView {
                    kind: "ddl".into(),
                    text: "ALTER TABLE t ADD w int".into(),
                })),
            }],
            waiters: vec![
                WaiterView {
                    node: "w1".into(),
                    session: "w1".into(),
                    since_ms: 1_700_000_000_001,
                    waited_ms: 5,
                    position: 1,
                    mode: Some(LockMode::Read),
                    watches: Some("/locks/a/694d7a1f3b2c4d01".into()),
                    deadline_ms: Some(1_700_000_009_000),
                    lease: lease(),
                    identity: None,
                    statement: None,
                },
                WaiterView {
                    node: "w2\u{0}ü".into(),
                    session: "other".into(),
                    since_ms: -1,
                    waited_ms: 0,
                    position: 2,
                    mode: None,
                    watches: None,
                    deadline_ms: None,
                    lease: None,
                    identity: None,
                    statement: None,
                },
            ],
            watchers: 4,
            child_watchers: 2,
            herd: true,
            max_leases: Some(3),
            oldest_wait_ms: 77,
            acquisitions: u64::MAX,
            releases: 9,
            changed_ms: 1_700_000_000_002,
            expires_at_ms: Some(i64::MAX),
            ttl_ms: Some(i64::MIN),
            flags: vec!["no_expiry".into(), "leftover_queue".into()],
            permits_available: Some(-1),
            permits_total: Some(5),
            fencing_token: Some(42),
            deadline_ms: Some(1_700_000_100_000),
            redlock: Some(Box::new(RedlockView {
                masters: vec![RedlockMasterView {
                    master: "redis://127.0.0.1:1".into(),
                    holder: Some("t".into()),
                    ttl_ms: None,
                    up: true,
                }],
                majority_holder: None,
                split: true,
                minority_holders: vec!["t".into()],
            })),
            usual_hold_ms: Some(150),
            lease_ms: Some(30_000),
            // Judged as each answer is written, never stored: none here.
            stuck: None,
            stale: vec![StaleView {
                rule: "held_too_long".into(),
                explanation: "held for 2 h".into(),
            }],
            recipe_guess: Some("a 32-hex-digit value".into()),
            unattributed_waiters: Some(7),
            // Marked as each answer is served, never stored: none here.
            source_last_seen_ms: None,
        }
    }

    #[test]
    fn every_field_comes_back_as_stored() {
        let id = lockscope_model::id::lock_id("etcd-1", "/locks/a");
        // Source and path as the id has them, the path without its slash (Redis), and names
        // the id does not give (kept as they are).
        for (source, path) in [
            ("etcd-1", "/locks/a"),
            ("etcd-1", "locks/a"),
            ("other", "/elsewhere ü"),
        ] {
            let view = everything(&id, source, path);
            assert_eq!(StoredLock::encode(&view).render(&id), view);
        }
        let bare = LockView {
            id: "not an id".into(),
            ..LockView::default()
        };
        assert_eq!(StoredLock::encode(&bare).render("not an id"), bare);
    }

    /// Tokens of every shape come back as they were, those of the shapes packed smaller, and
    /// a search finds them in the packed ones too.
    #[test]
    fn participants_come_back_packed_or_not() {
        let uuid = "8c1e6f0a-9d4b-4e2f-8a7c-3b1d5e9f0a2b";
        let texts = [
            (uuid.to_string(), true),
            (format!("{uuid}:1"), true),
            (format!("{uuid}:ü"), true),
            (uuid.to_uppercase(), false),
            (uuid.replace('-', ""), true),
            ("8c1e6f0a9d4b4e2f8a7c3b1d5e9f0a2".into(), false),
            ("8c1e6f0a9d4b4e2f".into(), true),
            ("8c1e6f0a9d4b4e2".into(), false),
            ("8c1e6f0a-9d4b-4e2f-8a7c-3b1d5e9f0a2g".into(), false),
            ("8c1e6f0a-9d4b-4e2f-8a7c+3b1d5e9f0a2b".into(), false),
            ("ü8c1e6f0a-9d4b-4e2f-8a7c-3b1d5e9f0a2".into(), false),
            ("/locks/a/_c_3b1d5e9f-lock-0000000001".into(), false),
            (String::new(), false),
        ];
        let id = lockscope_model::id::lock_id("redis", "/lock:a");
        for (text, packed) in &texts {
            assert_eq!(Text::of(text).is_packed(), *packed, "{text}");
            for session in [text.clone(), "other".into(), uuid.into()] {
                let participant = |node: &str| HolderView {
                    node: node.into(),
                    session: session.clone(),
                    since_ms: 5,
                    ..HolderView::default()
                };
                let view = LockView {
                    id: id.clone(),
                    source: "redis".into(),
                    path: "lock:a".into(),
                    holders: vec![participant(text)],
                    waiters: vec![WaiterView {
                        node: text.clone(),
                        session: session.clone(),
                        position: 1,
                        ..WaiterView::default()
                    }],
                    ..LockView::default()
                };
                let stored = StoredLock::encode(&view);
                assert_eq!(stored.render(&id), view);
                for needle in [text.as_str(), &session, &text[text.len().min(3)..]] {
                    assert!(stored.may_mention(needle), "{needle} in {text}");
                    assert!(stored.may_mention(&needle.to_ascii_uppercase()), "{needle}");
                }
                if session != "other" {
                    assert!(!stored.may_mention("other"));
                }
            }
        }
        assert!(!StoredLock::encode(&LockView::default()).may_mention("0a2b"));
    }

    #[test]
    fn a_token_lock_is_small() {
        let id = lockscope_model::id::lock_id("redis", "/lock:job:000123");
        let token = "8c1e6f0a9d4b4e2f8a7c3b1d5e9f0a2b";
        let view = LockView {
            id: id.clone(),
            source: "redis".into(),
            backend: Backend::Redis,
            path: "lock:job:000123".into(),
            recipe: "redis-py".into(),
            holders: vec![HolderView {
                node: token.into(),
                session: token.into(),
                since_ms: 1_700_000_000_000,
                held_ms: 0,
                mode: None,
                watchers: 0,
                reentrancy: None,
                lease: None,
                identity: None,
                version: None,
                statement: None,
            }],
            changed_ms: 1_700_000_000_000,
            expires_at_ms: Some(1_700_000_060_000),
            lease_ms: Some(60_000),
            ..LockView::default()
        };
        let stored = StoredLock::encode(&view);
        // 53 B, the token packed (68 B as text; with the `Arc`'s counts a 80-byte block).
        assert!(stored.len() <= 56, "{} B", stored.len());
        assert_eq!(stored.render(&id), view);
    }
}
