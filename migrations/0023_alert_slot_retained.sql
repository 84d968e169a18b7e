-- Alert rules on the write-ahead log a logical replication slot of an outbox source's
-- database holds back (MiB): a slot nobody reads keeps WAL until the disk is full.
ALTER TABLE alert_rules DROP CONSTRAINT alert_rules_kind_check;
ALTER TABLE alert_rules ADD CONSTRAINT alert_rules_kind_check CHECK (kind IN ('dlq_depth', 'dlq_awaiting', 'dlq_new',
    'outbox_oldest_age', 'outbox_stuck', 'outbox_failed', 'new_failure_group', 'topology_critical',
    'publishers_blocked', 'slot_retained_mb')) NOT VALID;
ALTER TABLE alert_rules VALIDATE CONSTRAINT alert_rules_kind_check;
