-- Alert rules, their evaluated state, the history of state transitions, and webhook
-- deliveries (engine/src/alerts.rs). Every rule is an "above" rule: it fires when the value
-- reaches a threshold and resolves when it falls to its recovery threshold (hysteresis).

CREATE TABLE alert_rules (
    id                bigserial PRIMARY KEY,
    name              text NOT NULL CONSTRAINT alert_rules_name_key UNIQUE
                      CHECK (length(name) BETWEEN 1 AND 100),
    kind              text NOT NULL CHECK (kind IN ('dlq_depth', 'dlq_awaiting', 'dlq_new',
                      'outbox_oldest_age', 'outbox_stuck', 'outbox_failed', 'new_failure_group')),
    -- A queue name (dlq_*) or an outbox source name (outbox_*); NULL for new_failure_group.
    target            text,
    warn_threshold    double precision NOT NULL CHECK (warn_threshold >= 0),
    crit_threshold    double precision NOT NULL CHECK (crit_threshold >= warn_threshold),
    recover_threshold double precision NOT NULL CHECK (recover_threshold < warn_threshold),
    for_secs          integer NOT NULL DEFAULT 0 CHECK (for_secs BETWEEN 0 AND 86400),
    -- The look-back of rate rules (dlq_new, new_failure_group), in minutes.
    window_mins       integer CHECK (window_mins BETWEEN 1 AND 10080),
    -- May carry a token (Slack): never logged whole, never written to the audit log.
    webhook_url       text,
    webhook_format    text NOT NULL DEFAULT 'json' CHECK (webhook_format IN ('json', 'slack')),
    enabled           boolean NOT NULL DEFAULT true,
    silenced_until    timestamptz,
    silence_reason    text,
    created_by        text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    -- Evaluators claim due rules with FOR UPDATE SKIP LOCKED and push this one tick ahead,
    -- so several evaluator instances evaluate each rule once per tick between them.
    next_eval_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_rules_due ON alert_rules (next_eval_at, id) WHERE enabled;

CREATE TABLE alert_state (
    rule_id       bigint PRIMARY KEY REFERENCES alert_rules (id) ON DELETE CASCADE,
    state         text NOT NULL DEFAULT 'ok' CHECK (state IN ('ok', 'pending', 'firing', 'resolved')),
    severity      text CHECK (severity IN ('warning', 'critical')),
    value         double precision,
    -- When the current state began.
    since         timestamptz NOT NULL DEFAULT now(),
    -- When the value first breached, while pending (the "for" clock).
    pending_since timestamptz,
    last_eval_at  timestamptz,
    -- Evaluations so far: lets a test (and an operator) see one evaluation per tick.
    evals         bigint NOT NULL DEFAULT 0,
    -- Console path of the page that shows the cause, e.g. /dead-letters?queue=orders.dlq.
    link          text
);
CREATE INDEX alert_state_state ON alert_state (state);

CREATE TABLE alert_events (
    id          bigserial PRIMARY KEY,
    rule_id     bigint NOT NULL REFERENCES alert_rules (id) ON DELETE CASCADE,
    at          timestamptz NOT NULL DEFAULT now(),
    from_state  text NOT NULL,
    to_state    text NOT NULL,
    severity    text,
    value       double precision NOT NULL,
    -- The threshold that was crossed (critical or warning on firing, recovery on resolved).
    threshold   double precision NOT NULL,
    message     text NOT NULL,
    link        text
);
CREATE INDEX alert_events_rule ON alert_events (rule_id, at DESC, id DESC);

-- One row per delivery attempt. A row with `at` NULL is an attempt still to make, due at
-- `next_attempt_at`; a failed attempt inserts the next one, so every attempt stays on record.
CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    event_id        bigint NOT NULL REFERENCES alert_events (id) ON DELETE CASCADE,
    attempt         integer NOT NULL CHECK (attempt >= 1),
    at              timestamptz,
    status_code     integer,
    error           text,
    delivered       boolean NOT NULL DEFAULT false,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT webhook_deliveries_attempt_key UNIQUE (event_id, attempt)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, id) WHERE at IS NULL;
