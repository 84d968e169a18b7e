-- Per-key ordered replay (engine/src/replay/sender.rs): a plan may keep first-failure order
-- within each original routing key or each value of a header (an aggregate id), keys in
-- parallel. A failure holds back that key's later messages; the other keys go on.

-- NULL: no per-key order (the whole-plan `ordered` flag is separate and excludes this).
ALTER TABLE replay_plans ADD COLUMN order_by text
    CHECK (order_by IS NULL OR ((order_by = 'routing_key' OR order_by LIKE 'header:_%') AND NOT ordered));

-- The key each item is ordered by, frozen with the item; NULL: no key (sent without order).
ALTER TABLE replay_items ADD COLUMN order_key text;
