-- Replay to the queue a message died in (through the default exchange, so no sibling queue
-- bound to the same routing key gets a copy), and which framework's failure headers a dead
-- letter carries (Spring, MassTransit, NServiceBus, Celery, x-original-*).
ALTER TABLE replay_plans DROP CONSTRAINT replay_plans_target_mode_check;
ALTER TABLE replay_plans ADD CONSTRAINT replay_plans_target_mode_check
    CHECK (target_mode IN ('origin', 'original', 'exchange', 'queue'));

ALTER TABLE dead_letters ADD COLUMN convention text;
