-- The commit-stream relay of a mapped table (capture = "logical" on a service's own outbox
-- table, docs/OUTBOX.md): an event the stream has passed without publishing it keeps the end
-- position of its commit in the relay's state, as `outbox.stream_lsn` does for Revenant's
-- schema (0025). Its key is held while any row of it with a position is pending or failed.
-- Idempotent: the relay applies it to a relay_state made earlier beside a service's table.
ALTER TABLE revenant.relay_state ADD COLUMN IF NOT EXISTS stream_lsn bigint;
CREATE INDEX IF NOT EXISTS relay_state_stream_held ON revenant.relay_state (source, stream_lsn, row_id)
    WHERE stream_lsn IS NOT NULL AND status IN ('pending', 'failed');
