-- Alert rules on the Topology page's verdicts: failing checks on critical queues (and node
-- alarms) can page like any other threshold.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('dlq_depth', 'dlq_awaiting', 'dlq_new',
    'outbox_oldest_age', 'outbox_stuck', 'outbox_failed', 'new_failure_group', 'topology_critical'));
