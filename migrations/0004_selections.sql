-- Bulk actions on "everything matching the filter": the set is resolved and frozen when the
-- operator asks, shown with its size, and only that frozen set is acted on at confirmation.
CREATE TABLE selections (
    id          uuid PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('outbox', 'dead_letters')),
    source      text NOT NULL,
    action      text NOT NULL,
    reason      text,
    filter      jsonb NOT NULL,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    item_count  bigint NOT NULL DEFAULT 0,
    executed_at timestamptz,
    executed_count bigint
);

CREATE TABLE selection_items (
    selection_id uuid NOT NULL REFERENCES selections (id) ON DELETE CASCADE,
    item         text NOT NULL,
    PRIMARY KEY (selection_id, item)
);
