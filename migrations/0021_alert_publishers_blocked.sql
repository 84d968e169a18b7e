-- Alert rules on a broker that blocks publishers: seconds the relay or the replay publisher
-- has been blocked (a memory or disk alarm), from their heartbeats.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('dlq_depth', 'dlq_awaiting', 'dlq_new',
    'outbox_oldest_age', 'outbox_stuck', 'outbox_failed', 'new_failure_group', 'topology_critical',
    'publishers_blocked')) NOT VALID;
ALTER TABLE alert_rules VALIDATE CONSTRAINT alert_rules_kind_check;
