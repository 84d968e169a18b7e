-- Dead letters read from RabbitMQ DLQs (docs: engine/src/dead_letter.rs).
-- Every AMQP property keeps its own column and the header table keeps each value's AMQP type
-- (engine/src/dead_letter/headers.rs), so a replay can publish the very same message again.

CREATE TABLE failure_groups (
    id              bigserial PRIMARY KEY,
    fingerprint     text NOT NULL CONSTRAINT failure_groups_fingerprint_key UNIQUE,
    original_queue  text,
    reason          text NOT NULL,
    error_type      text,
    error_sample    text,
    first_seen      timestamptz NOT NULL DEFAULT now(),
    last_seen       timestamptz NOT NULL DEFAULT now(),
    count           bigint NOT NULL DEFAULT 0
);
CREATE INDEX failure_groups_last_seen ON failure_groups (last_seen DESC, id DESC);

CREATE TABLE dead_letters (
    id                    bigserial PRIMARY KEY,
    queue                 text NOT NULL,
    -- sha256 over queue, properties, canonical headers and body: a redelivery after a crash
    -- (stored, not yet acked) lands on the same row instead of a second one.
    natural_key           text NOT NULL CONSTRAINT dead_letters_natural_key_key UNIQUE,
    message_id            text,
    correlation_id        text,
    content_type          text,
    content_encoding      text,
    amqp_timestamp        timestamptz,
    app_id                text,
    msg_type              text,
    user_id               text,
    cluster_id            text,
    delivery_mode         smallint,
    priority              smallint,
    expiration            text,
    reply_to              text,
    headers               jsonb,
    body                  bytea NOT NULL,
    body_size             integer NOT NULL,
    exchange              text NOT NULL,
    routing_key           text NOT NULL,
    reason                text NOT NULL
                          CHECK (reason IN ('rejected', 'expired', 'maxlen', 'delivery_limit', 'unknown', 'none')),
    original_queue        text,
    original_exchange     text,
    original_routing_keys text[] NOT NULL DEFAULT '{}',
    death_count           bigint NOT NULL DEFAULT 0,
    first_death_at        timestamptz,
    error_type            text,
    error_message         text,
    fingerprint           text NOT NULL,
    group_id              bigint REFERENCES failure_groups (id),
    status                text NOT NULL DEFAULT 'awaiting'
                          CHECK (status IN ('awaiting', 'replaying', 'replayed', 'archived')),
    archived_reason       text,
    replay_of             bigint REFERENCES dead_letters (id),
    ingested_at           timestamptz NOT NULL DEFAULT now()
);

-- Keyset lists, newest first, by the filters the console offers.
CREATE INDEX dead_letters_ingested ON dead_letters (ingested_at, id);
CREATE INDEX dead_letters_queue ON dead_letters (queue, ingested_at, id);
CREATE INDEX dead_letters_group ON dead_letters (group_id, ingested_at, id);
CREATE INDEX dead_letters_status ON dead_letters (status, ingested_at, id);
CREATE INDEX dead_letters_message_id ON dead_letters (message_id) WHERE message_id IS NOT NULL;

CREATE TABLE queue_samples (
    queue      text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    ready      bigint NOT NULL,
    -- NULL when the management API is off: AMQP alone does not report unacked messages.
    unacked    bigint,
    consumers  bigint NOT NULL
);
CREATE INDEX queue_samples_queue_at ON queue_samples (queue, at DESC);
-- The 7-day prune walks this one.
CREATE INDEX queue_samples_at ON queue_samples (at);
