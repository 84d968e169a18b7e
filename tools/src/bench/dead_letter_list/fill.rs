//! Fills a scratch store with dead letters shaped like a busy system's after six weeks.
//!
//! Policy: set-based SQL only (`generate_series`, deterministic hashes of the row number, so
//! two runs of one size hold the same data). The schema's own secondary indexes and foreign
//! keys are dropped before the load and rebuilt from their catalog definitions afterwards
//! (building an index once is several times cheaper than maintaining it per row); the bench
//! checks that every one of them is back before it times anything.

use std::time::Instant;

use anyhow::Context;
use sqlx::{PgPool, Postgres, Transaction};

/// Rows per INSERT statement, so a 10 M run reports progress and no statement is huge.
const CHUNK: i64 = 1_000_000;
/// Failure groups; a row's group is `floor(GROUPS * u³)`, so group 1 holds ~15 % of all
/// rows and the last ones ~0.1 % each.
pub const GROUPS: i64 = 300;
/// Replay plans the replayed rows are spread over.
const PLANS: i64 = 100;
/// The six DLQs; a group's queue is `QUEUES[g % 6]`, so the skew of groups skews queues.
pub const QUEUES: [&str; 6] = ["orders", "payments", "shipping", "notifications", "inventory", "search-index"];
/// A chain link every 50th row: row i (i % 50 = 0, (i / 50) % 4 ≠ 0) died again after a
/// replay of row i - LINK, giving chains of up to four dead letters.
pub const LINK: i64 = 1_050;

/// Loads `rows` dead letters; returns how long the load and the index rebuild took.
pub async fn fill(pool: &PgPool, rows: i64) -> anyhow::Result<(f64, f64)> {
    let started = Instant::now();
    let mut tx = pool.begin().await?;
    let (drops, creates) = schema_statements(&mut tx).await?;
    for s in &drops {
        // Runtime-checked: statements read from the catalog.
        sqlx::query(sqlx::AssertSqlSafe(s.clone())).execute(&mut *tx).await.with_context(|| format!("`{s}`"))?;
    }
    tx.commit().await?;
    groups(pool).await?;
    let mut from = 1;
    while from <= rows {
        let to = (from + CHUNK - 1).min(rows);
        letters(pool, from, to, rows).await.with_context(|| format!("cannot insert rows {from}..={to}"))?;
        if rows > CHUNK {
            println!("  inserted {to} of {rows} ({:.0} s)", started.elapsed().as_secs_f64());
        }
        from = to + 1;
    }
    sqlx::query!("SELECT setval('dead_letters_id_seq', $1)", rows).fetch_one(pool).await?;
    replays(pool, rows).await?;
    group_counts(pool).await?;
    let loaded = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let mut conn = pool.acquire().await?;
    // One build at a time with room to sort in memory: faster than several small-memory
    // builds competing for two cores.
    sqlx::query!("SET maintenance_work_mem = '1GB'").execute(&mut *conn).await?;
    for s in &creates {
        let t = Instant::now();
        // Runtime-checked: statements read from the catalog.
        sqlx::query(sqlx::AssertSqlSafe(s.clone())).execute(&mut *conn).await.with_context(|| format!("`{s}`"))?;
        println!("  {:.0} s  {s}", t.elapsed().as_secs_f64());
    }
    sqlx::query!("RESET maintenance_work_mem").execute(&mut *conn).await?;
    drop(conn);
    let mut tx = pool.begin().await?;
    let (back, _) = schema_statements(&mut tx).await?;
    tx.rollback().await?;
    anyhow::ensure!(back.len() == drops.len(), "rebuilt {} of {} indexes and constraints", back.len(), drops.len());
    Ok((loaded, started.elapsed().as_secs_f64()))
}

/// `(drops, creates)` for the secondary indexes, unique and foreign-key constraints of
/// `dead_letters` and `replay_items`, in the order that works: constraints are dropped first
/// and added last.
async fn schema_statements(tx: &mut Transaction<'_, Postgres>) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let cons: Vec<(String, String)> = sqlx::query!(
        r#"SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname) AS "drop!",
                format('ALTER TABLE %s ADD CONSTRAINT %I %s', conrelid::regclass, conname, pg_get_constraintdef(oid))
                    AS "create!"
         FROM pg_constraint WHERE conrelid = ANY(ARRAY['dead_letters'::regclass, 'replay_items'::regclass])
          AND contype IN ('u', 'f') ORDER BY contype DESC, conname"#
    )
    .fetch_all(&mut **tx)
    .await
    .context("cannot read the constraints")?
    .into_iter()
    .map(|r| (r.drop, r.create))
    .collect();
    let idx: Vec<(String, String)> = sqlx::query!(
        r#"SELECT format('DROP INDEX %s', i.indexrelid::regclass) AS "drop!", pg_get_indexdef(i.indexrelid) AS "create!"
         FROM pg_index i
         WHERE i.indrelid = ANY(ARRAY['dead_letters'::regclass, 'replay_items'::regclass]) AND NOT i.indisprimary
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid)
         ORDER BY i.indexrelid"#
    )
    .fetch_all(&mut **tx)
    .await
    .context("cannot read the indexes")?
    .into_iter()
    .map(|r| (r.drop, r.create))
    .collect();
    let drops = cons.iter().chain(&idx).map(|(d, _)| d.clone()).collect();
    // Unique constraints build their own index, so they go with the indexes, before the keys.
    let creates = idx.iter().map(|(_, c)| c.clone()).chain(cons.iter().rev().map(|(_, c)| c.clone())).collect();
    Ok((drops, creates))
}

/// The failure groups: queue, reason and error per group, fixed by the group number.
async fn groups(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query!(
        r#"INSERT INTO failure_groups (id, fingerprint, original_queue, reason, error_type, error_sample)
           SELECT g + 1, 'bench-' || g, ($1::text[])[1 + g % 6], r,
                  CASE WHEN r <> 'rejected' THEN NULL
                       WHEN g = $2 THEN 'CertificateExpired'
                       ELSE (ARRAY['TimeoutError','ValidationError','NotFound','ConnectionRefused','SerializationError'])[1 + g % 5] END,
                  CASE WHEN r <> 'rejected' THEN NULL
                       WHEN g = $2 THEN 'TLS certificate of partner-gateway expired'
                       ELSE (ARRAY['upstream timeout after 30000 ms calling billing-api',
                                   'field `amount` must be positive',
                                   'customer not found in crm',
                                   'connection refused by inventory-db:5432',
                                   'cannot decode payload: expected value at line 1'])[1 + g % 5] END
           FROM (SELECT g, CASE WHEN g % 20 = 7 THEN 'expired' WHEN g % 20 = 13 THEN 'maxlen'
                                WHEN g % 20 = 17 THEN 'delivery_limit' ELSE 'rejected' END AS r
                   FROM generate_series(0, $2) g) s"#,
        &QUEUES.map(String::from)[..],
        (GROUPS - 1) as i32,
    )
    .execute(pool)
    .await
    .context("cannot insert the failure groups")?;
    sqlx::query!("SELECT setval('failure_groups_id_seq', $1)", GROUPS).fetch_one(pool).await?;
    Ok(())
}

/// Rows `from..=to` of `rows`; ids follow `ingested_at` over six weeks, as ingest makes them.
async fn letters(pool: &PgPool, from: i64, to: i64, rows: i64) -> anyhow::Result<()> {
    sqlx::query!(
        r#"INSERT INTO dead_letters (id, queue, natural_key, message_id, correlation_id, content_type, amqp_timestamp,
               app_id, msg_type, delivery_mode, headers, body, body_size, exchange, routing_key, reason, original_queue,
               original_exchange, original_routing_keys, death_count, first_death_at, error_type, error_message,
               fingerprint, group_id, status, archived_reason, replay_of, ingested_at)
           SELECT i, g.original_queue || '.dlq', encode(sha256(int8send(i)), 'hex'), md5(i::text)::uuid::text,
                  'corr-' || (i / 3), 'application/json', ts - interval '2 s', g.original_queue || '-service',
                  g.original_queue || '.event', 2,
                  format('{"x-death":{"t":"array","v":[{"t":"table","v":{"count":{"t":"i64","v":%s},"reason":{"t":"longstr","v":"%s"},"queue":{"t":"longstr","v":"%s"},"exchange":{"t":"longstr","v":"events"},"routing-keys":{"t":"array","v":[{"t":"longstr","v":"%s"}]},"time":{"t":"timestamp","v":%s}}}]},"x-first-death-reason":{"t":"longstr","v":"%s"},"x-first-death-queue":{"t":"longstr","v":"%s"}}',
                         dc, g.reason, g.original_queue, g.original_queue, extract(epoch FROM ts)::bigint, g.reason, g.original_queue)::jsonb,
                  body, length(body), 'dlx', g.original_queue, g.reason, g.original_queue, 'events', ARRAY[g.original_queue],
                  dc, ts - interval '1 s', g.error_type,
                  CASE WHEN g.error_sample IS NOT NULL THEN g.error_sample || ' (order ' || (i % 100000) || ')' END,
                  g.fingerprint, g.id,
                  CASE WHEN parent THEN 'replayed' WHEN s < 150 THEN 'archived' WHEN s < 230 THEN 'replayed'
                       WHEN s < 233 THEN 'replaying' ELSE 'awaiting' END,
                  CASE WHEN NOT parent AND s < 150 THEN 'known bad data, fixed upstream' END,
                  CASE WHEN child THEN i - $4::bigint END,
                  ts
             FROM (SELECT i, ts, dc, s, g, body,
                          i % 50 = 0 AND (i / 50) % 4 <> 3 AND i + $4::bigint <= $3::bigint AS parent,
                          i % 50 = 0 AND (i / 50) % 4 <> 0 AND i > $4::bigint AS child
                     FROM (SELECT i, now() - ($3::bigint - i) * (interval '42 days' / $3::bigint) AS ts,
                                  1 + abs(hashint8extended(i, 1)) % 3 AS dc,
                                  abs(hashint8extended(i, 2)) % 1000 AS s,
                                  1 + floor($5::bigint * power((abs(hashint8extended(i, 3)) % 1000000) / 1000000.0, 3))::bigint AS g,
                                  convert_to(format('{"order_id":%s,"customer_id":"cust-%s","currency":"%s","items":[{"sku":"SKU-%s","qty":%s,"price_cents":%s},{"sku":"SKU-%s","qty":1,"price_cents":%s}],"shipping":{"method":"%s","address":"%s Example Street, Springfield"},"note":"%s"}',
                                                    i, i % 100003, (ARRAY['EUR','USD','CHF'])[1 + i % 3], i % 5000, 1 + i % 4, (i * 37) % 100000,
                                                    (i * 7) % 5000, (i * 13) % 100000, (ARRAY['standard','express','pickup'])[1 + i % 3], i % 999,
                                                    repeat('x', (i % 120)::int)), 'UTF8') AS body
                             FROM generate_series($1::bigint, $2::bigint) AS i) r) h
             JOIN failure_groups g ON g.id = h.g"#,
        from,
        to,
        rows,
        LINK,
        GROUPS,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Replay plans and an item for every replayed or replaying row (sent or pending).
async fn replays(pool: &PgPool, rows: i64) -> anyhow::Result<()> {
    sqlx::query!(
        r#"INSERT INTO replay_plans (id, created_by, created_at, source, target_mode, status, total, finished_at)
           SELECT p, 'oncall-' || (p % 7), now() - (interval '42 days' * p / $1::bigint), '{"ids":[]}'::jsonb,
                  'original', 'done', 0, now()
           FROM generate_series(1, $1::bigint) p"#,
        PLANS,
    )
    .execute(pool)
    .await
    .context("cannot insert the replay plans")?;
    sqlx::query!("SELECT setval('replay_plans_id_seq', $1)", PLANS).fetch_one(pool).await?;
    sqlx::query!(
        r#"INSERT INTO replay_items (plan_id, dead_letter_id, seq, exchange, routing_key, status, sent_at, settled_at)
           SELECT 1 + id % $1, id, id, 'events', routing_key,
                  CASE WHEN status = 'replayed' THEN 'sent' ELSE 'pending' END,
                  CASE WHEN status = 'replayed' THEN ingested_at + interval '1 minute' END,
                  CASE WHEN status = 'replayed' THEN ingested_at + interval '1 minute' END
           FROM dead_letters WHERE status IN ('replayed', 'replaying') AND id <= $2"#,
        PLANS,
        rows,
    )
    .execute(pool)
    .await
    .context("cannot insert the replay items")?;
    Ok(())
}

/// Each group's count, first and last seen, as ingest would have left them.
async fn group_counts(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::query!(
        "UPDATE failure_groups g SET count = s.n, first_seen = s.f, last_seen = s.l
         FROM (SELECT group_id, count(*) AS n, min(ingested_at) AS f, max(ingested_at) AS l
               FROM dead_letters GROUP BY group_id) s
         WHERE g.id = s.group_id",
    )
    .execute(pool)
    .await
    .context("cannot count the groups")?;
    Ok(())
}
