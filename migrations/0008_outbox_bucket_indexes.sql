-- Small partial indexes for the console's Stuck and Failed buckets (docs/BENCHMARKS.md).
-- `outbox_status_created` finds these rows, but the stuck test reads `attempts` and the error
-- filter reads `last_error`, so every candidate row was a heap visit: at 1 M rows (4 % pending,
-- 2 % failed, scattered) "count stuck" read ~5 500 heap pages (55 ms) and "count failed with an
-- error filter" ~14 600 (115 ms), ten times more at 10 M. With the columns in the index both
-- are index-only scans (1.7 ms and 7.5 ms). Only pending and failed rows are indexed, so the
-- indexes stay a few MB and a published row costs nothing.
-- Built without CONCURRENTLY (a migration runs in a transaction): on a 10 M-row outbox this
-- holds back outbox inserts for a few seconds while the table is scanned.
CREATE INDEX outbox_pending_created ON outbox (created_at, id) INCLUDE (attempts) WHERE status = 'pending';
CREATE INDEX outbox_failed_created ON outbox (created_at, id) INCLUDE (last_error) WHERE status = 'failed';
