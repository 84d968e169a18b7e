//! `revenant bench dead-letter-list`: the Dead letters pages' queries on a big store.
//!
//! Policy: every timed query is the one the page's server function runs — the list and its
//! capped count ([`store::list`], [`store::count`]) for each filter the page offers, the
//! failure groups ([`store::groups`]), a message's detail, edits and story
//! ([`store::get`], [`edit::current`], [`lineage::story`]) — on data from [`fill`], vacuumed
//! and analysed as autovacuum would leave it. Each runs once to warm up, then `runs` times
//! (5 when the warm-up took over a second); the target is a page p99 of at most 100 ms at
//! 1 M and at 10 M rows. `--keep` leaves the loaded database for later runs
//! (`--database NAME`), which are then read-only and leave it in place.

pub(super) mod fill;

use engine::settings::ExposeSecret;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use sqlx::PgPool;

use super::{Scratch, interruptible, ms, percentile};
use engine::{
    dead_letter::store::{self, Cursor, GroupFilter, ListFilter, Status},
    replay::{edit, lineage},
    settings::Settings,
};

/// The console's page size and group list length (app/src/pages/dead_letters/api_server.rs).
const PAGE: i64 = 50;
const GROUPS_SHOWN: i64 = 200;
const COUNT_CAP: i64 = 10_000;
const TARGET: Duration = Duration::from_millis(100);
const SLOW: Duration = Duration::from_secs(1);

enum Probe {
    /// What `dl_list` does: a page, then the capped count of the same filter.
    Page {
        filter: ListFilter,
        after: Option<Cursor>,
    },
    Groups(GroupFilter),
    /// `dl_detail` and `dl_edits` of one message.
    Detail(i64),
    Story(i64),
    /// The queue cards' awaiting counts (app/src/pages/dead_letters/api_server.rs, as is).
    QueueCards,
}

pub async fn run(
    settings: &Settings,
    rows: i64,
    runs: usize,
    keep: bool,
    database: Option<String>,
) -> anyhow::Result<()> {
    anyhow::ensure!(rows >= 10_000 && runs >= 1, "use at least 10 000 rows and 1 run");
    if let Some(name) = database {
        let opts = engine::db::options(settings.database_url.expose_secret())?.database(&name);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await
            .with_context(|| format!("cannot connect to {name}"))?;
        let rows: i64 = sqlx::query_scalar!(r#"SELECT max(id) AS "max!" FROM dead_letters"#).fetch_one(&pool).await?;
        println!("dead-letter-list bench: reusing {name} ({rows} rows)");
        return interruptible(probes(&pool, rows, runs)).await;
    }
    let db = Scratch::create(settings.database_url.expose_secret()).await?;
    let res = interruptible(async {
        load(&db.pool, rows, runs).await?;
        probes(&db.pool, rows, runs).await
    })
    .await;
    if keep && res.is_ok() {
        println!("kept {}: rerun with --database {0}, then DROP DATABASE \"{0}\"", db.name);
        db.pool.close().await;
    } else {
        db.drop_db().await;
    }
    res
}

async fn load(pool: &PgPool, rows: i64, runs: usize) -> anyhow::Result<()> {
    let (loaded, indexed) = fill::fill(pool, rows).await?;
    let started = Instant::now();
    let vacuums = [
        ("dead_letters", sqlx::query!("VACUUM (ANALYZE) dead_letters")),
        ("replay_items", sqlx::query!("VACUUM (ANALYZE) replay_items")),
        ("replay_plans", sqlx::query!("VACUUM (ANALYZE) replay_plans")),
        ("failure_groups", sqlx::query!("VACUUM (ANALYZE) failure_groups")),
    ];
    for (t, vacuum) in vacuums {
        vacuum.execute(pool).await.with_context(|| format!("VACUUM ANALYZE {t} failed"))?;
    }
    let size: String =
        sqlx::query_scalar!(r#"SELECT pg_size_pretty(pg_total_relation_size('dead_letters')) AS "size!""#)
            .fetch_one(pool)
            .await?;
    println!(
        "dead-letter-list bench: {rows} rows ({size} with indexes) inserted in {loaded:.1} s, indexes and keys \
         built in {indexed:.1} s, vacuumed and analysed in {:.1} s; page size {PAGE}, {runs} timed runs per query",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn probes(pool: &PgPool, rows: i64, runs: usize) -> anyhow::Result<()> {
    let awaiting = ListFilter { status: Some(Status::Awaiting), ..ListFilter::default() };
    let with = |f: ListFilter| ListFilter { status: Some(Status::Awaiting), ..f };
    let queue = |q: &str| with(ListFilter { queue: Some(format!("{q}.dlq")), ..ListFilter::default() });
    let all = ListFilter::default();
    let (deep, pages) = follow(pool, &awaiting, 200).await?;
    let (deep_all, pages_all) = follow(pool, &all, 200).await?;
    let (deep_q, pages_q) = follow(pool, &queue(fill::QUEUES[0]), 200).await?;
    let small_group = fill::GROUPS; // the CertificateExpired group, ~0.1 %
    let message_id: String =
        sqlx::query_scalar!(r#"SELECT message_id AS "message_id!" FROM dead_letters WHERE id = $1"#, rows / 2)
            .fetch_one(pool)
            .await
            .context("no message in the middle of the store")?;
    let now = Utc::now();
    // The newest leaf of a four-long replay chain (i / 50 % 4 = 3).
    let leaf = (rows / 200) * 200 - 50;
    let page = |filter: ListFilter| Probe::Page { filter, after: None };
    let text = |s: &str| with(ListFilter { error_text: Some(s.into()), ..ListFilter::default() });
    let body = |s: &str| with(ListFilter { body_contains: Some(s.as_bytes().to_vec()), ..ListFilter::default() });
    let list: Vec<(String, Probe)> = vec![
        ("awaiting (the default), page 1".into(), page(awaiting.clone())),
        (format!("awaiting, page {pages} (cursor followed)"), Probe::Page { filter: awaiting.clone(), after: deep }),
        ("all statuses, page 1".into(), page(all.clone())),
        (format!("all statuses, page {pages_all}"), Probe::Page { filter: all, after: deep_all }),
        ("queue = orders.dlq (biggest)".into(), page(queue(fill::QUEUES[0]))),
        (format!("queue = orders.dlq, page {pages_q}"), Probe::Page { filter: queue(fill::QUEUES[0]), after: deep_q }),
        ("queue = search-index.dlq (smallest)".into(), page(queue(fill::QUEUES[5]))),
        ("reason = expired".into(), page(with(ListFilter { reason: Some("expired".into()), ..ListFilter::default() }))),
        (
            "reason = delivery_limit".into(),
            page(with(ListFilter { reason: Some("delivery_limit".into()), ..ListFilter::default() })),
        ),
        ("status = archived".into(), page(ListFilter { status: Some(Status::Archived), ..ListFilter::default() })),
        (
            "status = replaying (0.3 %)".into(),
            page(ListFilter { status: Some(Status::Replaying), ..ListFilter::default() }),
        ),
        ("group = 1 (biggest), all statuses".into(), page(ListFilter { group_id: Some(1), ..ListFilter::default() })),
        (
            format!("group = {small_group} (0.1 %), all statuses"),
            page(ListFilter { group_id: Some(small_group), ..ListFilter::default() }),
        ),
        ("error ~ 'timeout' (common)".into(), page(text("timeout"))),
        ("error ~ 'certificate' (0.1 %)".into(), page(text("certificate"))),
        ("error ~ 'no such text'".into(), page(text("no such text"))),
        ("body ∋ '\"currency\":\"CHF\"' (a third)".into(), page(body("\"currency\":\"CHF\""))),
        ("body ∋ '\"cust-4242\"' (0.001 %)".into(), page(body("\"customer_id\":\"cust-4242\""))),
        (
            "message id = one message".into(),
            page(ListFilter { message_id: Some(message_id), status: None, ..ListFilter::default() }),
        ),
        (
            "newer than 60 min".into(),
            page(with(ListFilter { newer_than: Some(now - chrono::Duration::minutes(60)), ..ListFilter::default() })),
        ),
        (
            "older than 7 days".into(),
            page(with(ListFilter { older_than: Some(now - chrono::Duration::days(7)), ..ListFilter::default() })),
        ),
        (
            "queue + reason + error ~ 'timeout' + newer than 7 days".into(),
            page(ListFilter {
                reason: Some("rejected".into()),
                error_text: Some("timeout".into()),
                newer_than: Some(now - chrono::Duration::days(7)),
                ..queue(fill::QUEUES[0])
            }),
        ),
        ("failure groups".into(), Probe::Groups(GroupFilter::default())),
        (
            "failure groups, only awaiting".into(),
            Probe::Groups(GroupFilter { only_awaiting: true, ..GroupFilter::default() }),
        ),
        (
            "failure groups, queue = orders, only awaiting".into(),
            Probe::Groups(GroupFilter {
                original_queue: Some(fill::QUEUES[0].into()),
                only_awaiting: true,
                ..GroupFilter::default()
            }),
        ),
        ("detail + edits of one message".into(), Probe::Detail(rows / 2 + 1)),
        ("story, no replay".into(), Probe::Story(rows / 2 + 1)),
        (format!("story, four-link chain (#{leaf})"), Probe::Story(leaf)),
        ("queue cards (awaiting per queue, kept counts)".into(), Probe::QueueCards),
    ];

    println!();
    println!("| query | rows | runs | list p50 | list p99 | count p50 | count p99 | page p50 | page p99 | ≤ 100 ms |");
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|:-:|");
    let mut missed = Vec::new();
    for (name, probe) in &list {
        let t = time(pool, probe, runs).await.with_context(|| format!("query `{name}` failed"))?;
        let p99 = percentile(&t.total, 99.0);
        let ok = p99 <= TARGET;
        if !ok {
            missed.push(name.clone());
        }
        let cell = |s: &[Duration], p| if s.is_empty() { "–".to_string() } else { ms(percentile(s, p)) };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            t.rows,
            t.total.len(),
            cell(&t.list, 50.0),
            cell(&t.list, 99.0),
            cell(&t.count, 50.0),
            cell(&t.count, 99.0),
            cell(&t.total, 50.0),
            ms(p99),
            if ok { "yes" } else { "**no**" }
        );
    }
    println!();
    if missed.is_empty() {
        println!("every page met p99 ≤ 100 ms at {rows} rows");
    } else {
        println!("missed p99 ≤ 100 ms at {rows} rows: {}", missed.join("; "));
    }
    Ok(())
}

/// Follows `pages - 1` next-page cursors; returns the cursor of the last page reached.
async fn follow(pool: &PgPool, f: &ListFilter, pages: usize) -> anyhow::Result<(Option<Cursor>, usize)> {
    let mut after = None;
    let mut page = 1;
    while page < pages {
        match store::list(pool, f, after, PAGE).await?.next {
            Some(n) => after = Some(n),
            None => break,
        }
        page += 1;
    }
    Ok((after, page))
}

/// Sorted samples: the list part, the count part (pages only) and the whole.
struct Timings {
    list: Vec<Duration>,
    count: Vec<Duration>,
    total: Vec<Duration>,
    /// Rows the page showed (or groups, events, queues); `n+` when the count was capped.
    rows: String,
}

async fn once(pool: &PgPool, probe: &Probe) -> anyhow::Result<(Duration, Option<Duration>, String)> {
    let t = Instant::now();
    Ok(match probe {
        Probe::Page { filter, after } => {
            let page = store::list(pool, filter, *after, PAGE).await?;
            let listed = t.elapsed();
            let (n, capped) = store::count(pool, filter, COUNT_CAP).await?;
            let shown = format!("{} of {n}{}", page.items.len(), if capped { "+" } else { "" });
            (listed, Some(t.elapsed() - listed), shown)
        }
        Probe::Groups(f) => {
            let n = store::groups(pool, f, GROUPS_SHOWN).await?.len();
            (t.elapsed(), None, format!("{n} groups"))
        }
        Probe::Detail(id) => {
            let d = store::get(pool, *id).await?;
            edit::current(pool, *id).await?;
            edit::latest_edit(pool, *id).await?;
            (t.elapsed(), None, format!("{} B body", d.body.len()))
        }
        Probe::Story(id) => {
            let n = lineage::story(pool, *id).await?.len();
            (t.elapsed(), None, format!("{n} events"))
        }
        Probe::QueueCards => {
            let awaiting = engine::dead_letter::awaiting::by_queue(pool).await?;
            (t.elapsed(), None, format!("{} queues", awaiting.len()))
        }
    })
}

async fn time(pool: &PgPool, probe: &Probe, runs: usize) -> anyhow::Result<Timings> {
    let warm = Instant::now();
    let (_, _, rows) = once(pool, probe).await?;
    let runs = if warm.elapsed() > SLOW { runs.min(5) } else { runs };
    let mut t = Timings { list: Vec::new(), count: Vec::new(), total: Vec::new(), rows };
    for _ in 0..runs {
        let started = Instant::now();
        let (list, count, _) = once(pool, probe).await?;
        let total = started.elapsed();
        // Only pages have two parts; for the rest the whole is the only figure.
        if let Some(c) = count {
            t.list.push(list);
            t.count.push(c);
        }
        t.total.push(total);
    }
    t.list.sort();
    t.count.sort();
    t.total.sort();
    Ok(t)
}
