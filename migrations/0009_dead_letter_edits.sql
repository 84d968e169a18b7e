-- Edits of a dead letter before it is replayed (docs: engine/src/replay/edit.rs).
-- The dead letter itself is never changed: each edit is a whole new version (body and the
-- typed header table, same encoding as dead_letters.headers), and a replay sends the latest.

CREATE TABLE dead_letter_edits (
    id              bigserial PRIMARY KEY,
    dead_letter_id  bigint NOT NULL REFERENCES dead_letters (id),
    body            bytea NOT NULL,
    -- NULL: the edited message has no header table.
    headers         jsonb,
    edited_by       text NOT NULL,
    edited_at       timestamptz NOT NULL DEFAULT now(),
    note            text
);
-- "The latest edit of a message" (and the purge's deletes by dead letter).
CREATE INDEX dead_letter_edits_latest ON dead_letter_edits (dead_letter_id, id DESC);
