//! What every paged query of the read API shares (`GET /api/v1/locks`, `/api/v1/sessions`,
//! `/api/v1/waitfor`): reading the query string strictly ([`Params`]: a parameter given twice,
//! unknown, too long or out of range is a [`BadParameter`] naming it), the page size, the
//! order, keyset cursors ([`Keyset`]) and the bounded heap a page is cut with ([`Window`]).
//!
//! An item's place in a page is `(key, tie)`: its sort key, then something unique that breaks
//! ties and always ascends, so no two items tie and a cursor (the place of a page's last item)
//! says exactly where the next page starts. A cursor is base64url JSON `{q, t, k, id}`: the
//! query's fingerprint, when it was handed out, the key and the tie. It is bound to its query
//! (a cursor of another query, or of another endpoint, is refused) and lives
//! [`CURSOR_TTL_MS`].
//!
//! This module knows nothing of what is paged: each endpoint's module ([`super::query`],
//! [`super::sessions`], [`super::waitfor`]) owns its filters, sort keys and answer.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Items per page unless `limit` says otherwise.
pub const LIMIT_DEFAULT: usize = 100;
/// The most items one page holds.
pub const LIMIT_MAX: usize = 1_000;
/// How long a cursor is taken (ms).
pub const CURSOR_TTL_MS: i64 = 15 * 60 * 1000;
/// The longest text parameter taken (bytes).
const TEXT_MAX: usize = 1024;

/// Parameters a query may carry besides its own (the read token, for clients that cannot set
/// headers).
pub const PASSED_THROUGH: &[&str] = &["access_token"];

/// A query parameter that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadParameter {
    pub parameter: String,
    pub message: String,
}

/// A [`BadParameter`] for `parameter`.
pub fn bad(parameter: &str, message: impl Into<String>) -> BadParameter {
    BadParameter {
        parameter: parameter.to_string(),
        message: message.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, utoipa::ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum Order {
    Asc,
    Desc,
}

/// A sort key: a number or a text, compared as such.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SortKey {
    Number(i64),
    Text(String),
}

/// A query string's pairs, each name at most once and every name known.
#[derive(Debug)]
pub struct Params<'a> {
    values: BTreeMap<&'a str, &'a str>,
}

impl<'a> Params<'a> {
    /// Takes `pairs` whose names are among `known` (or [`PASSED_THROUGH`]); the first name
    /// given twice or unknown is the error.
    pub fn new(pairs: &'a [(String, String)], known: &[&str]) -> Result<Params<'a>, BadParameter> {
        let mut values = BTreeMap::new();
        for (k, v) in pairs {
            if values.insert(k.as_str(), v.as_str()).is_some() {
                return Err(bad(k, format!("{k} is given more than once")));
            }
        }
        if let Some(name) = values
            .keys()
            .find(|name| !known.contains(name) && !PASSED_THROUGH.contains(name))
        {
            return Err(bad(name, format!("unknown parameter {name:?}")));
        }
        Ok(Params { values })
    }

    /// A parameter's value exactly as given (empty included); absent is none.
    pub fn raw(&self, name: &str) -> Option<&'a str> {
        self.values.get(name).copied()
    }

    /// A parameter's value as given; an empty one is none.
    fn given(&self, name: &str) -> Option<&'a str> {
        self.values.get(name).copied().filter(|v| !v.is_empty())
    }

    /// A text parameter (at most 1 KiB); empty is none.
    pub fn text(&self, name: &str) -> Result<Option<String>, BadParameter> {
        match self.given(name) {
            Some(v) if v.len() > TEXT_MAX => {
                Err(bad(name, format!("{name} is longer than {TEXT_MAX} bytes")))
            }
            v => Ok(v.map(str::to_string)),
        }
    }

    /// A parameter that takes one of `choices` (by name); absent is none, anything else (an
    /// empty value too) is refused with the list.
    pub fn choice<T: Copy>(
        &self,
        name: &str,
        choices: &[(&str, T)],
    ) -> Result<Option<T>, BadParameter> {
        let Some(value) = self.values.get(name) else {
            return Ok(None);
        };
        choices
            .iter()
            .find(|(n, _)| n == value)
            .map(|&(_, t)| Some(t))
            .ok_or_else(|| {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                bad(
                    name,
                    format!("unknown {name} {value:?}: one of {}", names.join(", ")),
                )
            })
    }

    /// `limit`: from 1 to [`LIMIT_MAX`], [`LIMIT_DEFAULT`] when absent.
    pub fn limit(&self) -> Result<usize, BadParameter> {
        let Some(value) = self.values.get("limit") else {
            return Ok(LIMIT_DEFAULT);
        };
        value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LIMIT_MAX).contains(n))
            .ok_or_else(|| {
                bad(
                    "limit",
                    format!("limit is a whole number from 1 to {LIMIT_MAX}, not {value:?}"),
                )
            })
    }

    /// `order`: `asc` or `desc`, `default` when absent or empty.
    pub fn order(&self, default: Order) -> Result<Order, BadParameter> {
        match self.given("order") {
            None => Ok(default),
            Some("asc") => Ok(Order::Asc),
            Some("desc") => Ok(Order::Desc),
            Some(other) => Err(bad("order", format!("order is asc or desc, not {other:?}"))),
        }
    }

    /// `cursor`: where the page starts, as of `now` (epoch ms), if the query (`fingerprint`)
    /// is the one the cursor was handed out for and it has not expired.
    pub fn cursor<K: DeserializeOwned, T: DeserializeOwned>(
        &self,
        fingerprint: u64,
        now: i64,
    ) -> Result<Option<(K, T)>, BadParameter> {
        let Some(text) = self.given("cursor") else {
            return Ok(None);
        };
        let cursor: Cursor<K, T> = Cursor::decode(text).ok_or_else(|| {
            bad(
                "cursor",
                "malformed cursor: pass the `next` of a page as it came",
            )
        })?;
        if cursor.q != fingerprint {
            return Err(bad(
                "cursor",
                "the cursor belongs to another query: keep the filters, sort and order of the page it came with",
            ));
        }
        if now.saturating_sub(cursor.t) > CURSOR_TTL_MS || cursor.t > now + 60_000 {
            return Err(bad(
                "cursor",
                "expired cursor: start again from the first page",
            ));
        }
        Ok(Some((cursor.k, cursor.id)))
    }
}

/// A query's fingerprint, what its cursors are bound to. SipHash with fixed keys: the same
/// query gives the same value in every process (a replica behind a load balancer takes a
/// cursor another handed out).
pub fn fingerprint(what: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    what.hash(&mut h);
    h.finish()
}

/// Where a page starts: after this key and tie.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor<K, T> {
    /// The query's fingerprint.
    q: u64,
    /// When it was handed out (epoch ms).
    t: i64,
    k: K,
    id: T,
}

impl<K: Serialize, T: Serialize> Cursor<K, T> {
    fn encode(&self) -> String {
        use base64::Engine;
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }
}

impl<K: DeserializeOwned, T: DeserializeOwned> Cursor<K, T> {
    fn decode(text: &str) -> Option<Self> {
        use base64::Engine;
        if text.len() > 4096 {
            return None;
        }
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        serde_json::from_slice(&json).ok()
    }
}

/// A query's order over places `(key, tie)` and where its page starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyset<K, T> {
    /// The key's direction; ties always ascend.
    pub order: Order,
    /// The place of the last item of the page before (from the cursor).
    pub after: Option<(K, T)>,
}

impl<K: Ord, T: Ord> Keyset<K, T> {
    /// Whether `a` comes before `b`.
    pub fn cmp(&self, a: &(K, T), b: &(K, T)) -> Ordering {
        cmp(self.order, a, b)
    }

    /// Whether `place` comes after the cursor (every place does without one).
    pub fn is_after_cursor(&self, place: &(K, T)) -> bool {
        self.after
            .as_ref()
            .is_none_or(|after| self.cmp(place, after) == Ordering::Greater)
    }
}

fn cmp<K: Ord, T: Ord>(order: Order, a: &(K, T), b: &(K, T)) -> Ordering {
    let by_key = match order {
        Order::Asc => a.0.cmp(&b.0),
        Order::Desc => b.0.cmp(&a.0),
    };
    by_key.then_with(|| a.1.cmp(&b.1))
}

/// The first `limit` items after the cursor, in order, out of items offered one at a time:
/// at most `limit + 1` kept aside (the one more says whether there is a next page), never a
/// sorted copy of everything.
pub struct Window<'k, K, T, I> {
    limit: usize,
    keyset: &'k Keyset<K, T>,
    kept: BinaryHeap<Kept<K, T, I>>,
}

/// An item kept for the page, ordered so the heap's top is the one to drop first.
struct Kept<K, T, I> {
    place: (K, T),
    order: Order,
    item: I,
}

impl<K: Ord, T: Ord, I> PartialEq for Kept<K, T, I> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<K: Ord, T: Ord, I> Eq for Kept<K, T, I> {}
impl<K: Ord, T: Ord, I> PartialOrd for Kept<K, T, I> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<K: Ord, T: Ord, I> Ord for Kept<K, T, I> {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp(self.order, &self.place, &other.place)
    }
}

impl<'k, K, T, I> Window<'k, K, T, I>
where
    K: Ord + Clone + Serialize,
    T: Ord + Clone + Serialize,
{
    pub fn new(limit: usize, keyset: &'k Keyset<K, T>) -> Self {
        Window {
            limit,
            keyset,
            kept: BinaryHeap::with_capacity(limit + 1),
        }
    }

    /// Whether an item at `place` would be kept (after the cursor, and among the first so far):
    /// for callers that would rather not build an item only to see it dropped.
    pub fn wants(&self, place: &(K, T)) -> bool {
        self.keyset.is_after_cursor(place)
            && (self.kept.len() <= self.limit
                || self
                    .kept
                    .peek()
                    .is_some_and(|last| self.keyset.cmp(place, &last.place) == Ordering::Less))
    }

    /// Offers an item at `place`; kept if [`Window::wants`] it.
    pub fn offer(&mut self, place: (K, T), item: I) {
        if !self.wants(&place) {
            return;
        }
        if self.kept.len() > self.limit {
            self.kept.pop();
        }
        self.kept.push(Kept {
            place,
            order: self.keyset.order,
            item,
        });
    }

    /// The page in order, and the cursor of the next one (none on the last), bound to
    /// `fingerprint` and handed out at `now`.
    pub fn finish(self, fingerprint: u64, now: i64) -> (Vec<I>, Option<String>) {
        let mut kept = self.kept.into_sorted_vec();
        let more = kept.len() > self.limit;
        kept.truncate(self.limit);
        let next = more.then(|| kept.last()).flatten().map(|last| {
            Cursor {
                q: fingerprint,
                t: now,
                k: last.place.0.clone(),
                id: last.place.1.clone(),
            }
            .encode()
        });
        (kept.into_iter().map(|k| k.item).collect(), next)
    }
}

/// Adds one to `key`'s count, copying the key only the first time it is seen (a page's pass
/// counts every item).
/// The cursor of a page whose last item is at `(key, tie)`, for a query with `fingerprint`,
/// handed out at `now` (what [`Window::finish`] writes).
pub fn cursor_text<K: Serialize, T: Serialize>(
    fingerprint: u64,
    now: i64,
    key: K,
    tie: T,
) -> String {
    Cursor {
        q: fingerprint,
        t: now,
        k: key,
        id: tie,
    }
    .encode()
}

pub fn count(counts: &mut BTreeMap<String, u64>, key: &str) {
    match counts.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            counts.insert(key.to_string(), 1);
        }
    }
}

/// A query string's pairs, read leniently (a stray `%` stays as it is) so that every problem
/// is the API's JSON 400 rather than the framework's.
pub fn pairs(query: &str) -> Vec<(String, String)> {
    form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// Whether `needle` is in `text`, ignoring ASCII case (the `q=` of every paged query).
pub fn contains_ignoring_ascii_case(text: &str, needle: &str) -> bool {
    bytes_contain_ignoring_ascii_case(text.as_bytes(), needle.as_bytes())
}

/// [`contains_ignoring_ascii_case`] over bytes (a path decoded from an id).
pub use lockscope_core::aggregate::stored::contains_ignoring_ascii_case as bytes_contain_ignoring_ascii_case;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_name_what_is_wrong() {
        let known = ["q", "limit", "order", "cursor", "sort"];
        let p = pairs("q=a&q=b");
        assert_eq!(Params::new(&p, &known).expect_err("twice").parameter, "q");
        let p = pairs("colour=red&access_token=t");
        assert_eq!(
            Params::new(&p, &known).expect_err("unknown").parameter,
            "colour"
        );
        let p = pairs("access_token=t");
        let params = Params::new(&p, &known).expect("token passes through");
        assert_eq!(params.limit(), Ok(LIMIT_DEFAULT));
        assert_eq!(params.order(Order::Desc), Ok(Order::Desc));
        assert_eq!(params.text("q"), Ok(None));
        assert_eq!(params.cursor::<i64, String>(0, 0), Ok(None));
        let long = format!("q={}", "x".repeat(1025));
        let p = pairs(&long);
        let params = Params::new(&p, &known).expect("params");
        assert_eq!(params.text("q").expect_err("long").parameter, "q");
        for (q, name) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=", "limit"),
            ("order=up", "order"),
            ("sort=", "sort"),
            ("sort=size", "sort"),
            ("cursor=%%%", "cursor"),
        ] {
            let p = pairs(q);
            let params = Params::new(&p, &known).expect("params");
            let e = params
                .limit()
                .and(params.order(Order::Asc).map(|_| 0))
                .and(params.choice("sort", &[("a", 1)]).map(|_| 0))
                .and(params.cursor::<i64, String>(0, 0).map(|_| 0))
                .expect_err(q);
            assert_eq!(e.parameter, name, "{q}: {}", e.message);
        }
    }

    #[test]
    fn a_window_keeps_the_first_after_the_cursor() {
        let keyset = Keyset {
            order: Order::Desc,
            after: None,
        };
        let mut window = Window::new(3, &keyset);
        for (k, id) in [(1, "a"), (5, "b"), (3, "c"), (5, "a"), (2, "d"), (4, "e")] {
            window.offer((k, id.to_string()), id);
        }
        let (items, next) = window.finish(7, 1_000);
        assert_eq!(items, ["a", "b", "e"]);
        let next = next.expect("a next page");
        let p = pairs(&format!("cursor={next}"));
        let params = Params::new(&p, &["cursor"]).expect("params");
        assert_eq!(
            params
                .cursor::<i64, String>(8, 1_000)
                .expect_err("foreign")
                .parameter,
            "cursor"
        );
        assert_eq!(
            params
                .cursor::<i64, String>(7, 1_000 + CURSOR_TTL_MS + 1)
                .expect_err("expired")
                .parameter,
            "cursor"
        );
        let after = params.cursor::<i64, String>(7, 2_000).expect("cursor");
        assert_eq!(after, Some((4, "e".to_string())));
        let keyset = Keyset {
            order: Order::Desc,
            after,
        };
        let mut window = Window::new(3, &keyset);
        for (k, id) in [(1, "a"), (5, "b"), (3, "c"), (5, "a"), (2, "d"), (4, "e")] {
            window.offer((k, id.to_string()), id);
        }
        assert_eq!(window.finish(7, 2_000), (vec!["c", "d", "a"], None));
    }
}
