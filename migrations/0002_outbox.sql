-- Revenant's own outbox schema, for services that adopt it (docs/OUTBOX.md).
CREATE TABLE outbox (
    id               bigserial PRIMARY KEY,
    event_id         uuid NOT NULL DEFAULT gen_random_uuid() CONSTRAINT outbox_event_id_key UNIQUE,
    event_type       text NOT NULL,
    exchange         text NOT NULL DEFAULT '',
    routing_key      text NOT NULL,
    payload          bytea NOT NULL,
    content_type     text NOT NULL DEFAULT 'application/json',
    headers          jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now(),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'published', 'failed', 'archived')),
    published_at     timestamptz,
    -- Publish attempts so far, the successful one included.
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    last_error       text,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    -- The relay instance that claimed the row, until when; an expired lease is claimable again.
    lease_owner      uuid,
    lease_expires_at timestamptz,
    archived_reason  text
);

-- The relay's claim query walks this partial index only: published rows cost nothing.
CREATE INDEX outbox_due ON outbox (next_attempt_at, id) WHERE status = 'pending';
-- The console's lists: a status, newest or oldest first, keyset on (created_at, id).
CREATE INDEX outbox_status_created ON outbox (status, created_at, id);
CREATE INDEX outbox_type ON outbox (event_type, created_at, id);

-- Wake relays at once instead of waiting for their poll interval.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('revenant_outbox', '');
    RETURN NULL;
END $$;

-- Per statement, and PostgreSQL folds identical notifications of one transaction into one,
-- so a bulk insert wakes each relay once, at commit.
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

-- A row put back to pending (the console's "retry") wakes relays too. Only that transition:
-- the relay's own marks must not wake it again.
CREATE TRIGGER outbox_notify_retry AFTER UPDATE OF status ON outbox
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status <> 'pending')
    EXECUTE FUNCTION outbox_notify();
