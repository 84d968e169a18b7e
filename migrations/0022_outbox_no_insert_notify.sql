-- Nothing of Revenant's on the service's commit path: PostgreSQL takes one cluster-wide lock
-- for every committing transaction that has sent a NOTIFY and holds it past the commit's WAL
-- flush, which serialised the commits of every service writing the outbox (0.56x its commit
-- rate at 16 writers, `revenant bench writer`). Relays find new rows by adaptive polling.
-- The console's "retry" (an operator's UPDATE, not the service's insert) still notifies.
DROP TRIGGER IF EXISTS outbox_notify ON outbox;
