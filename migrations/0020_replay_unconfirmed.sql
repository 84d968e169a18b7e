-- A replayed message with no confirm in time (or whose channel went away) may have been
-- delivered: its item is `unconfirmed`, neither sent nor failed. Its dead letter stays out of
-- triage, and the item is sent again, under the same message id, on the plan's next pass.
ALTER TABLE replay_items DROP CONSTRAINT replay_items_status_check;
ALTER TABLE replay_items ADD CONSTRAINT replay_items_status_check
    CHECK (status IN ('pending', 'sent', 'failed', 'cancelled', 'unconfirmed')) NOT VALID;
ALTER TABLE replay_items VALIDATE CONSTRAINT replay_items_status_check;
-- The sender's "unconfirmed items of this plan" and the plan page's count of them.
CREATE INDEX replay_items_unconfirmed ON replay_items (plan_id, seq) WHERE status = 'unconfirmed';
