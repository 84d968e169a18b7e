-- Replay plans and their frozen items (docs: engine/src/replay.rs).
-- A plan's items are written, and their dead letters moved awaiting → replaying, in the one
-- transaction that creates the plan; a publisher then sends each item with confirms and marks
-- it after its own confirm, so a crash re-sends (at-least-once) and never loses.

CREATE TABLE replay_plans (
    id                     bigserial PRIMARY KEY,
    created_by             text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    -- What the operator picked (ids, a failure group, a filter), as they picked it.
    source                 jsonb NOT NULL,
    target_mode            text NOT NULL CHECK (target_mode IN ('original', 'exchange', 'queue')),
    target_exchange        text,
    target_routing_key     text,
    -- NULL: as fast as confirms come back.
    rate_per_sec           real CHECK (rate_per_sec IS NULL OR rate_per_sec > 0),
    start_at               timestamptz NOT NULL DEFAULT now(),
    -- One message in flight at a time, in first-failure order.
    ordered                boolean NOT NULL DEFAULT false,
    status                 text NOT NULL DEFAULT 'scheduled'
                           CHECK (status IN ('scheduled', 'running', 'paused', 'cancelled', 'done')),
    -- Pause on its own when more than this share of the messages sent within the window died again.
    auto_pause_share       real CHECK (auto_pause_share IS NULL OR (auto_pause_share > 0 AND auto_pause_share <= 1)),
    auto_pause_window_secs integer NOT NULL DEFAULT 300 CHECK (auto_pause_window_secs > 0),
    paused_reason          text,
    total                  bigint NOT NULL DEFAULT 0,
    sent                   bigint NOT NULL DEFAULT 0,
    failed                 bigint NOT NULL DEFAULT 0,
    cancelled              bigint NOT NULL DEFAULT 0,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    finished_at            timestamptz,
    -- Which publisher instance runs the plan, until when: two instances never send one plan at once.
    lease_owner            uuid,
    lease_expires_at       timestamptz
);
CREATE INDEX replay_plans_due ON replay_plans (start_at, id) WHERE status IN ('scheduled', 'running');
CREATE INDEX replay_plans_created ON replay_plans (id DESC);

CREATE TABLE replay_items (
    plan_id         bigint NOT NULL REFERENCES replay_plans (id),
    dead_letter_id  bigint NOT NULL REFERENCES dead_letters (id),
    -- First-failure order within the plan.
    seq             bigint NOT NULL,
    exchange        text NOT NULL,
    routing_key     text NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed', 'cancelled')),
    error           text,
    sent_at         timestamptz,
    -- When it left `pending`, whatever the outcome.
    settled_at      timestamptz,
    PRIMARY KEY (plan_id, dead_letter_id)
);
-- The publisher's "next pending items of a plan in seq order".
CREATE INDEX replay_items_pending ON replay_items (plan_id, seq) WHERE status = 'pending';
-- Lineage and "replayed before?": the items that sent a dead letter.
CREATE INDEX replay_items_dead_letter ON replay_items (dead_letter_id);
-- Lineage and auto-pause: the dead letters a replay produced.
CREATE INDEX dead_letters_replay_of ON dead_letters (replay_of) WHERE replay_of IS NOT NULL;
