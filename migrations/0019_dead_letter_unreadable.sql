-- What of a message the ingester could not read (design invariant 10, issue 33). The AMQP
-- parser reads a header table nested too deep, too large or malformed as a one-entry table
-- keeping its bytes, and names that are not UTF-8 lossily; the ingester stores such a message
-- like any other and writes here, in one line, what it could not read. The DLQ cards count
-- them per queue (the partial index keeps that a count of the few, not of the queue).
ALTER TABLE dead_letters ADD COLUMN unreadable text;
CREATE INDEX dead_letters_unreadable_idx ON dead_letters (queue, id DESC) WHERE unreadable IS NOT NULL;

-- Rows stored before the bound: headers nested so deep that the console cannot read them back
-- (serde_json stops at 128 levels; the message page answered 500 and downloads broke off).
-- Their typed JSON is kept whole, as text, inside a header of the same shape the parser now
-- writes, so the row reads, its page says why, and nothing is lost. Also a function, so the
-- same repair can run again (it is idempotent: a repaired row is shallow).
CREATE FUNCTION dead_letters_repair_deep_headers() RETURNS bigint
LANGUAGE sql SET search_path FROM CURRENT AS $$
    WITH repaired AS (
        UPDATE dead_letters
        SET unreadable = concat_ws('; ', unreadable,
                'the header table is nested deeper than the console reads (stored before Revenant bounded it); '
                || 'its stored form is kept as text in header `x-unreadable-amqp-field`'),
            headers = jsonb_build_object('x-unreadable-amqp-field', jsonb_build_object('t', 'table', 'v',
                jsonb_build_object(
                    'reason', jsonb_build_object('t', 'longstr', 'v', 'field table nested too deep'),
                    'json', jsonb_build_object('t', 'longstr', 'v', headers::text))))
        WHERE headers IS NOT NULL AND jsonb_path_exists(headers, 'strict $.**{100}')
        RETURNING 1
    )
    SELECT count(*) FROM repaired
$$;

SELECT dead_letters_repair_deep_headers();
