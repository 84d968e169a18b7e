-- The commit-stream relay (capture = "logical", docs/OUTBOX.md): an event the stream has passed
-- without publishing it (refused by the broker, unconfirmed, or behind such an event of its
-- key) keeps the end position of its commit here. Its key is held while any row of it with a
-- position is pending or failed; the relay sends those rows one at a time per key, in
-- (stream_lsn, id) order, which is commit order. Idempotent: `revenant outbox install`
-- applies it to an outbox installed earlier.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS stream_lsn bigint;
CREATE INDEX IF NOT EXISTS outbox_stream_held ON outbox (stream_lsn, id)
    WHERE stream_lsn IS NOT NULL AND status IN ('pending', 'failed');
