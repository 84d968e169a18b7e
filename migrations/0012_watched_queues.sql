-- The dead-letter queues Revenant ingests, chosen live: every running ingester reads this set
-- every few seconds and starts or stops its consumers to match, so `revenant dlq add`, the
-- console's "Start ingesting" and `ingest.auto` take effect without a restart. `ingest.queues`
-- seeds it: a queue is inserted once, and a queue an operator stopped stays stopped (watching
-- = false) even though the file still lists it.
CREATE TABLE watched_queues (
    queue       text PRIMARY KEY CHECK (octet_length(queue) BETWEEN 1 AND 255),
    watching    boolean NOT NULL DEFAULT true,
    -- Who put it here first or changed it last: the file, the console, the CLI, or ingest.auto.
    origin      text NOT NULL CHECK (origin IN ('config', 'console', 'cli', 'auto')),
    changed_by  text,
    changed_at  timestamptz NOT NULL DEFAULT now()
);
