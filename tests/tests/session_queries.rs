//! `GET /api/v1/sessions` and `GET /api/v1/waitfor` as server-side queries, on a real ZooKeeper
//! whose sessions are opened and closed by real clients while the pages are read: paging by
//! cursor never repeats a session of an earlier page and never skips one that stayed; filters,
//! states, sorts, totals and facets; every bad parameter gets the API's JSON 400 naming it;
//! the wait-for graph comes as pages of edges, longest wait first, each page with the sessions
//! it names and the graph's cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::{StreamExt, TryStreamExt};
use lockscope_model::id::lock_id;
use lockscope_model::session_hex;
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe, Ticket};
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
/// Sessions that each hold a lock through the whole test.
const STAYING: usize = 250;
/// Sessions closed one per page while the pages are read.
const LEAVING: usize = 12;

/// Opens `n` sessions, each holding the plain lock `<root>/<prefix><i>`, 25 at a time.
async fn holders(
    connect: &str,
    root: &str,
    prefix: &str,
    n: usize,
) -> Result<Vec<(SeedClient, Ticket)>> {
    futures::stream::iter(0..n)
        .map(|i| async move {
            let client = SeedClient::connect(connect, Duration::from_secs(10)).await?;
            let path = format!("{root}/{prefix}{i:03}");
            let ticket = recipes::lock(&client, &path, &SeedRecipe::PlainEphemeral).await?;
            anyhow::Ok((client, ticket))
        })
        .buffered(25)
        .try_collect()
        .await
}

fn id_of(client: &SeedClient) -> String {
    session_hex(client.session_id())
}

/// Waits until lockscope shows exactly the sessions `want` (every page read); answers how many.
async fn shows_exactly(ls: &Lockscope, want: &BTreeSet<String>) -> Result<usize> {
    let mut last = BTreeSet::new();
    eventually(WAIT, "exactly the clients' sessions shown", async || {
        last = ls
            .sessions()
            .await?
            .into_iter()
            .map(|s| s.session)
            .collect();
        Ok((last == *want).then_some(want.len()))
    })
    .await
    .with_context(|| {
        let extra: Vec<&String> = last.difference(want).collect();
        let missing: Vec<&String> = want.difference(&last).collect();
        format!("shown but not a client's: {extra:?}; not shown: {missing:?}")
    })
}

/// The session ids of a page and its `next`.
fn ids_and_next(body: &Value) -> Result<(Vec<String>, Option<String>)> {
    let sessions = body["sessions"].as_array().context("sessions")?;
    let ids = sessions
        .iter()
        .map(|s| s["session"].as_str().map(str::to_string).context("session"))
        .collect::<Result<Vec<_>>>()?;
    Ok((ids, body["next"].as_str().map(str::to_string)))
}

/// Every bad query gets a 400 with the API's error body naming `parameter`.
async fn refused(ls: &Lockscope, endpoint: &str, cases: &[(String, &str)]) -> Result<()> {
    for (query, parameter) in cases {
        let (status, body) = ls.get_json(&format!("{endpoint}?{query}")).await?;
        ensure!(status == 400, "{endpoint}?{query}: {status} {body}");
        ensure!(
            body["parameter"] == *parameter,
            "{endpoint}?{query}: {body}"
        );
        ensure!(
            body["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{endpoint}?{query}: {body}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_page_filter_and_refuse_bad_parameters() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let connect = zk.connect_string();
    let root = unique_root("sessions");
    let ls = Lockscope::watching("zk", &connect, &[&root]).await?;
    let staying = holders(&connect, &root, "s", STAYING).await?;
    let mut leaving = holders(&connect, &root, "l", LEAVING).await?;
    // One session that holds three locks, one waiting behind it, one doing nothing.
    let fair = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let busy = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let mut busy_holds = Vec::new();
    for name in ["queue", "b1", "b2"] {
        busy_holds.push(recipes::lock(&busy, &format!("{root}/{name}"), &fair).await?);
    }
    let waiter = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let _waits = waiter.enqueue(&format!("{root}/queue"), &fair).await?;
    let idle = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let ours = |came: &[(SeedClient, Ticket)], leaving: &[(SeedClient, Ticket)]| {
        let mut ids: BTreeSet<String> = staying
            .iter()
            .chain(leaving)
            .chain(came)
            .map(|(client, _)| id_of(client))
            .collect();
        ids.extend([&busy, &waiter, &idle].map(id_of));
        ids
    };
    let all = shows_exactly(&ls, &ours(&[], &leaving)).await?;
    eventually(WAIT, "the waiter shown waiting", async || {
        let (_, waiting) = ls.get_json("/api/v1/sessions?state=waiting").await?;
        Ok((waiting["total"] == 1).then_some(()))
    })
    .await?;

    // No parameters: the first page of 100, and a cursor for the rest.
    let (status, body) = ls.get_json("/api/v1/sessions").await?;
    ensure!(status == 200, "{body}");
    let (ids, next) = ids_and_next(&body)?;
    ensure!(ids.len() == 100 && next.is_some(), "{} {next:?}", ids.len());
    ensure!(
        body["total"].as_u64() == Some(all as u64),
        "{}",
        body["total"]
    );

    // Page through 40 at a time, highest session id first, while sessions come (before the
    // cursor: ZooKeeper's ids grow) and go (some on pages already read, some not).
    let mut seen: Vec<String> = Vec::new();
    let mut path = "/api/v1/sessions?limit=40&sort=session&order=desc".to_string();
    let mut came = Vec::new();
    loop {
        let (status, body) = ls.get_json(&path).await?;
        ensure!(status == 200, "{path}: {status} {body}");
        let (ids, next) = ids_and_next(&body)?;
        seen.extend(ids);
        let new = holders(&connect, &root, &format!("c{}-", came.len()), 1).await?;
        let new_id = id_of(&new[0].0);
        came.extend(new);
        let gone_id = leaving.pop().map(|(client, _)| id_of(&client));
        // The next page is read once lockscope shows both changes.
        eventually(WAIT, "a session came and one went", async || {
            let shown = async |id: &str| {
                let (_, body) = ls.get_json(&format!("/api/v1/sessions?q={id}")).await?;
                anyhow::Ok(body["total"] == 1)
            };
            let gone = match &gone_id {
                Some(id) => !shown(id).await?,
                None => true,
            };
            Ok((gone && shown(&new_id).await?).then_some(()))
        })
        .await?;
        match next {
            Some(cursor) => {
                path = format!("/api/v1/sessions?limit=40&sort=session&order=desc&cursor={cursor}")
            }
            None => break,
        }
    }
    let unique: BTreeSet<&String> = seen.iter().collect();
    ensure!(
        unique.len() == seen.len(),
        "a session came twice: {} of {}",
        unique.len(),
        seen.len()
    );
    // (Sorted by session id as text.)
    let descending: Vec<&String> = unique.iter().rev().copied().collect();
    ensure!(
        seen.iter().collect::<Vec<_>>() == descending,
        "pages out of order"
    );
    for (client, _) in &staying {
        let want = id_of(client);
        ensure!(unique.contains(&want), "{want} stayed and was skipped");
    }
    for client in [&busy, &waiter, &idle] {
        ensure!(unique.contains(&id_of(client)), "{} skipped", id_of(client));
    }

    // Filters, states, sorts, totals and facets (the churn above is over: wait until lockscope
    // shows the sessions left).
    let all = shows_exactly(&ls, &ours(&came, &leaving)).await?;
    let one = id_of(&staying[7].0);
    let (_, body) = ls
        .get_json(&format!("/api/v1/sessions?q={}", one.to_uppercase()))
        .await?;
    ensure!(ids_and_next(&body)?.0 == [one.clone()], "{body}");
    for (query, want) in [
        ("state=idle", id_of(&idle)),
        ("state=waiting", id_of(&waiter)),
        ("sort=holds&limit=1", id_of(&busy)),
        ("sort=waits&limit=1", id_of(&waiter)),
    ] {
        let (status, body) = ls.get_json(&format!("/api/v1/sessions?{query}")).await?;
        ensure!(status == 200, "{query}: {body}");
        let (ids, _) = ids_and_next(&body)?;
        ensure!(ids.first() == Some(&want), "{query}: {ids:?}, want {want}");
        if !query.contains("limit") {
            ensure!(body["total"] == 1, "{query}: {body}");
        }
    }
    let (_, body) = ls
        .get_json("/api/v1/sessions?state=holding&limit=5")
        .await?;
    ensure!(
        body["total"].as_u64() == Some(all as u64 - 2),
        "every session but the idle one and the waiter holds: {}",
        body["total"]
    );
    ensure!(
        body["facets"]["source"]["zk"].as_u64() == Some(all as u64 - 2),
        "{}",
        body["facets"]
    );
    // Connected sessions have no expiry: sorted by expiry they tie, and ties go by session.
    let (_, by_expiry) = ls.get_json("/api/v1/sessions?sort=expires&limit=5").await?;
    let (_, by_session) = ls.get_json("/api/v1/sessions?limit=5").await?;
    ensure!(
        ids_and_next(&by_expiry)?.0 == ids_and_next(&by_session)?.0,
        "{by_expiry} {by_session}"
    );
    // The kind facet counts past its own filter.
    let (_, leases) = ls.get_json("/api/v1/sessions?kind=etcd_lease").await?;
    ensure!(leases["total"] == 0, "{leases}");
    ensure!(
        leases["facets"]["kind"]["zookeeper_session"].as_u64() == Some(all as u64),
        "{}",
        leases["facets"]
    );
    ensure!(
        leases["facets"]["source"] == serde_json::json!({}),
        "{leases}"
    );
    let (status, _) = ls
        .get_json("/api/v1/sessions?access_token=t&kind=zookeeper_session")
        .await?;
    ensure!(status == 200, "access_token passes through");

    // Bad parameters.
    let (_, first) = ls.get_json("/api/v1/sessions?limit=2").await?;
    let cursor = first["next"].as_str().context("next")?.to_string();
    let (_, locks) = ls.get_json("/api/v1/locks?limit=2").await?;
    let lock_cursor = locks["next"].as_str().context("locks next")?.to_string();
    let mut cases: Vec<(String, &str)> = [
        ("sort=size", "sort"),
        ("sort=", "sort"),
        ("state=held", "state"),
        ("kind=lease", "kind"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("order=sideways", "order"),
        ("cursor=not-a-cursor", "cursor"),
        ("colour=red", "colour"),
        ("q=a&q=b", "q"),
    ]
    .into_iter()
    .map(|(q, p)| (q.to_string(), p))
    .collect();
    cases.push((format!("sort=holds&cursor={cursor}"), "cursor"));
    cases.push((format!("cursor={lock_cursor}"), "cursor"));
    cases.push((format!("q={}", "x".repeat(1025)), "q"));
    refused(&ls, "/api/v1/sessions", &cases).await?;
    drop((staying, came, busy_holds));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_for_graph_pages_longest_wait_first() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let connect = zk.connect_string();
    let root = unique_root("waitfor");
    let ls = Lockscope::watching("zk", &connect, &[&root]).await?;
    let fair = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let open = async || SeedClient::connect(&connect, Duration::from_secs(10)).await;
    // A and B wait on each other's lock (a cycle); five sessions queue behind C's lock.
    let (a, b, c) = (open().await?, open().await?, open().await?);
    let (l1, l2, l3) = (
        format!("{root}/accounts"),
        format!("{root}/ledger"),
        format!("{root}/reports"),
    );
    let mut tickets = vec![
        recipes::lock(&a, &l1, &fair).await?,
        recipes::lock(&b, &l2, &fair).await?,
        recipes::lock(&c, &l3, &fair).await?,
    ];
    tickets.push(a.enqueue(&l2, &fair).await?);
    tickets.push(b.enqueue(&l1, &fair).await?);
    let mut queued = Vec::new();
    for _ in 0..5 {
        let d = open().await?;
        tickets.push(d.enqueue(&l3, &fair).await?);
        queued.push(d);
    }
    let id = |c: &SeedClient| session_hex(c.session_id());
    let edges = 7;
    eventually(WAIT, "every wait shown, with its start", async || {
        let (_, body) = ls.get_json("/api/v1/waitfor?limit=1000").await?;
        let starts_known = body["edges"]
            .as_array()
            .is_some_and(|e| e.iter().all(|e| e["waiting_since_ms"].is_i64()));
        Ok((body["total"] == edges && body["cycles_total"] == 1 && starts_known).then_some(()))
    })
    .await?;

    // Three at a time.
    let mut pages: Vec<Value> = Vec::new();
    let mut path = "/api/v1/waitfor?limit=3".to_string();
    loop {
        let (status, body) = ls.get_json(&path).await?;
        ensure!(status == 200, "{path}: {status} {body}");
        let next = body["next"].as_str().map(str::to_string);
        pages.push(body);
        match next {
            Some(cursor) => path = format!("/api/v1/waitfor?limit=3&cursor={cursor}"),
            None => break,
        }
    }
    ensure!(pages.len() == 3, "{} pages: {pages:?}", pages.len());
    let mut all: Vec<Value> = Vec::new();
    for page in &pages {
        ensure!(page["total"] == edges, "{page}");
        let page_edges = page["edges"].as_array().context("edges")?;
        // The page's sessions are exactly those its edges name.
        let named: BTreeSet<&str> = page_edges
            .iter()
            .flat_map(|e| [e["waiter"].as_str(), e["holder"].as_str()])
            .flatten()
            .collect();
        let listed: BTreeSet<&str> = page["sessions"]
            .as_array()
            .context("sessions")?
            .iter()
            .filter_map(|s| s["session"].as_str())
            .collect();
        ensure!(named == listed, "{named:?} against {listed:?}");
        // The cycle is on every page.
        let cycle = &page["cycles"][0];
        let mut pair = [id(&a), id(&b)];
        pair.sort();
        ensure!(
            page["cycles_total"] == 1
                && cycle["source"] == "zk"
                && cycle["sessions"] == serde_json::json!(pair),
            "{page}"
        );
        ensure!(
            cycle["waits"].as_array().map(Vec::len) == Some(2),
            "{cycle}"
        );
        all.extend(page_edges.iter().cloned());
    }
    ensure!(all.len() == edges, "{all:?}");
    // Longest wait first, ties by source, waiter, holder, lock; no edge twice.
    let places: Vec<(i64, String, String, String)> = all
        .iter()
        .map(|e| {
            (
                e["waiting_since_ms"].as_i64().unwrap_or(i64::MAX),
                e["waiter"].as_str().unwrap_or_default().to_string(),
                e["holder"].as_str().unwrap_or_default().to_string(),
                e["lock"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let mut sorted = places.clone();
    sorted.sort();
    sorted.dedup();
    ensure!(places == sorted, "{places:?}");
    // Each edge as the locks show it: the waiter's node's start, in_cycle for A and B only.
    let mut starts: BTreeMap<(String, String), i64> = BTreeMap::new();
    for path in [&l1, &l2, &l3] {
        let lock = ls.lock("zk", path).await?.context("lock shown")?;
        for w in lock.waiters {
            starts.insert((lock.id.clone(), w.session), w.since_ms);
        }
    }
    let cycle = [id(&a), id(&b)];
    for e in &all {
        let (waiter, lock) = (
            e["waiter"].as_str().context("waiter")?,
            e["lock"].as_str().context("lock")?,
        );
        ensure!(
            e["waiting_since_ms"].as_i64()
                == starts.get(&(lock.to_string(), waiter.to_string())).copied(),
            "{e}"
        );
        ensure!(e["in_cycle"] == cycle.contains(&waiter.to_string()), "{e}");
        ensure!(e["source"] == "zk", "{e}");
        if lock == lock_id("zk", &l3) {
            ensure!(e["holder"] == id(&c), "{e}");
        }
    }
    let queued_ids: BTreeSet<String> = queued.iter().map(id).collect();
    let behind_c: BTreeSet<String> = all
        .iter()
        .filter(|e| e["holder"] == id(&c))
        .filter_map(|e| e["waiter"].as_str().map(str::to_string))
        .collect();
    ensure!(behind_c == queued_ids, "{behind_c:?}");

    // Another source has no edges; /api/v1/deadlocks still answers every cycle.
    let (_, none) = ls.get_json("/api/v1/waitfor?source=elsewhere").await?;
    ensure!(
        none["total"] == 0 && none["edges"] == serde_json::json!([]) && none["cycles_total"] == 0,
        "{none}"
    );
    let (_, deadlocks) = ls.get_json("/api/v1/deadlocks").await?;
    ensure!(
        deadlocks["cycles"].as_array().map(Vec::len) == Some(1),
        "{deadlocks}"
    );

    // Bad parameters.
    let (_, first) = ls.get_json("/api/v1/waitfor?limit=1").await?;
    let cursor = first["next"].as_str().context("next")?.to_string();
    let mut cases: Vec<(String, &str)> = [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("cursor=not-a-cursor", "cursor"),
        ("sort=since", "sort"),
        ("order=desc", "order"),
        ("source=a&source=b", "source"),
    ]
    .into_iter()
    .map(|(q, p)| (q.to_string(), p))
    .collect();
    cases.push((format!("source=elsewhere&cursor={cursor}"), "cursor"));
    refused(&ls, "/api/v1/waitfor", &cases).await?;
    drop(tickets);
    Ok(())
}
