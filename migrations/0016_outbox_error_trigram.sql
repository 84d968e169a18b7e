-- The outbox lists filter on `error ~ text` (ILIKE over last_error); at 10 M rows a
-- text that matches nothing scanned every row of the bucket. `revenant outbox install` applies
-- this file too (the same schema as Revenant's own); a mapped outbox (docs/OUTBOX.md) is the
-- application's table, and Revenant adds no index to it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX outbox_last_error_trgm ON outbox USING gin (last_error gin_trgm_ops) WHERE last_error IS NOT NULL;
