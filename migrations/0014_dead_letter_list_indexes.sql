-- Lists at 10 M dead letters (docs/BENCHMARKS.md, "Lists"): the console's common filters
-- combined with status get their own keyset indexes, and error text is matched through a
-- trigram index instead of a scan of every row.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- "Awaiting in queue Q", "expired and awaiting", "group G in queue Q": newest first.
CREATE INDEX dead_letters_queue_status ON dead_letters (queue, status, ingested_at, id);
CREATE INDEX dead_letters_reason_status ON dead_letters (reason, status, ingested_at, id);
CREATE INDEX dead_letters_group_queue ON dead_letters (group_id, queue, ingested_at, id);

-- `error ~ text` is ILIKE '%text%' over both columns; a text that matches nothing is then an
-- index probe, not a 10 M-row scan.
CREATE INDEX dead_letters_error_message_trgm ON dead_letters USING gin (error_message gin_trgm_ops);
CREATE INDEX dead_letters_error_type_trgm ON dead_letters USING gin (error_type gin_trgm_ops);
