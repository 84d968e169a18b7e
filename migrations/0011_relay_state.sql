-- Retry state of the rows of mapped outbox tables that Revenant relays (`relay = true`), keyed
-- by source name and row id. Such tables have no attempts, error, failed or archived columns
-- of their own; Revenant keeps them here. The same file creates the table in a source's own
-- database (a mapped table in another database keeps its state beside it), so it is written
-- to run more than once.
CREATE SCHEMA IF NOT EXISTS revenant;

CREATE TABLE IF NOT EXISTS revenant.relay_state (
    source          text NOT NULL,
    row_id          bigint NOT NULL,
    -- pending: retried after next_attempt_at; failed: max attempts reached or a bad row;
    -- archived: an operator set it aside; published: sent after earlier failures.
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'failed', 'archived', 'published')),
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error      text,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    archived_reason text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, row_id)
);

-- The console's Failed and Archived buckets and the claim's "held back" test.
CREATE INDEX IF NOT EXISTS relay_state_status ON revenant.relay_state (source, status, row_id);
