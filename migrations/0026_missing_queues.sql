-- Queues the broker says do not exist (a passive declare answered 404), as the depth sampler
-- last found them: a DLQ someone deleted while Revenant still watches it or holds its dead
-- letters. A queue that answers again leaves the table. The Dead letters cards read it to say
-- "no longer exists" instead of offering to start ingesting a queue that is not there.
CREATE TABLE missing_queues (
    queue       text PRIMARY KEY CHECK (octet_length(queue) BETWEEN 1 AND 255),
    since       timestamptz NOT NULL DEFAULT now(),
    checked_at  timestamptz NOT NULL DEFAULT now()
);
