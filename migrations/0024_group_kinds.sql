-- One failure group never holds two kinds of message (engine/src/dead_letter/kind.rs): the group
-- key extends the failure fingerprint with the AMQP `type` and, when no error is known, the
-- body's shape. Rows stored before are re-keyed here: each old group's largest new key keeps
-- the group (its id, history, replay plans and alerts), every other kind in it becomes a group
-- of its own with the same first-seen time, and counts, awaiting counts and the per-minute
-- inflow follow the rows that moved. The SQL below gives the same labels and keys as the Rust
-- (engine/tests/it/group_kinds.rs compares them).

ALTER TABLE dead_letters ADD COLUMN body_shape text;
ALTER TABLE failure_groups ADD COLUMN msg_type text, ADD COLUMN body_shape text;

-- kind::body_shape in SQL.
CREATE FUNCTION revenant_body_shape(body bytea, content_encoding text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t text;
    j jsonb;
    n integer;
BEGIN
    IF body IS NULL OR octet_length(body) = 0 THEN
        RETURN 'empty';
    END IF;
    IF lower(btrim(coalesce(content_encoding, ''), E' \t\n\r\f\v'))
           IN ('gzip', 'x-gzip', 'deflate', 'br', 'zstd', 'compress', 'bzip2', 'xz')
       OR substr(body, 1, 2) = '\x1f8b'::bytea
       OR substr(body, 1, 4) = '\x28b52ffd'::bytea
       OR (substr(body, 1, 3) = 'BZh'::bytea AND get_byte(body, 3) BETWEEN 48 AND 57 AND octet_length(body) > 3)
       OR substr(body, 1, 6) = '\xfd377a585a00'::bytea
       OR (octet_length(body) >= 2 AND get_byte(body, 0) = 120 AND get_byte(body, 1) IN (1, 156, 218)) THEN
        RETURN 'compressed';
    END IF;
    BEGIN
        t := convert_from(body, 'UTF8');
    EXCEPTION WHEN OTHERS THEN
        RETURN 'binary';
    END;
    IF t ~ '[\x01-\x08\x0e-\x1f\x7f\u0080-\u0084\u0086-\u009f]' THEN
        RETURN 'binary';
    END IF;
    IF t !~ '^\s*[\{\[]' THEN
        RETURN 'text';
    END IF;
    IF octet_length(body) > 1048576 THEN
        RETURN 'json';
    END IF;
    BEGIN
        j := t::jsonb;
    EXCEPTION WHEN OTHERS THEN
        RETURN 'text';
    END;
    IF jsonb_typeof(j) = 'array' THEN
        RETURN '[…]';
    ELSIF jsonb_typeof(j) <> 'object' THEN
        RETURN 'text';
    END IF;
    SELECT count(*) INTO n FROM jsonb_object_keys(j);
    RETURN '{' || coalesce((SELECT string_agg(k, ', ' ORDER BY k COLLATE "C")
                            FROM (SELECT k FROM jsonb_object_keys(j) k ORDER BY k COLLATE "C" LIMIT 24) s), '')
        || CASE WHEN n > 24 THEN ', …' ELSE '' END || '}';
END $$;

-- kind::fingerprint in SQL: the base unchanged when there is neither a type nor a shape.
CREATE FUNCTION revenant_kind_fingerprint(base text, msg_type text, shape text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN msg_type IS NULL AND shape IS NULL THEN base ELSE encode(sha256(
        '\x6b696e6401'::bytea || convert_to(base, 'UTF8')
        || CASE WHEN msg_type IS NULL THEN '\x00'::bytea
                ELSE '\x01'::bytea || int8send(octet_length(msg_type)::bigint) || convert_to(msg_type, 'UTF8') END
        || CASE WHEN shape IS NULL THEN '\x00'::bytea
                ELSE '\x01'::bytea || int8send(octet_length(shape)::bigint) || convert_to(shape, 'UTF8') END
    ), 'hex') END
$$;

-- Re-keys the rows whose key changes (kept as a function so the test can run it on rows stored
-- the old way). Returns the number of rows that moved to another group.
CREATE FUNCTION revenant_rekey_groups() RETURNS bigint LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    moved bigint;
BEGIN
    DROP TABLE IF EXISTS pg_temp.rekey, pg_temp.heir, pg_temp.moves;
    -- Rows stored the old way have no body shape yet.
    CREATE TEMP TABLE rekey ON COMMIT DROP AS
    SELECT id, old_group, ingested_at, queue, msg_type, body_shape, shape,
           revenant_kind_fingerprint(fingerprint, msg_type, shape) AS new_fp
    FROM (SELECT d.id, d.group_id AS old_group, d.ingested_at, d.queue, d.msg_type, d.fingerprint, s.body_shape,
                 CASE WHEN d.error_type IS NULL AND d.error_message IS NULL THEN s.body_shape END AS shape
          FROM dead_letters d
          CROSS JOIN LATERAL (SELECT revenant_body_shape(d.body, d.content_encoding) AS body_shape) s
          WHERE d.body_shape IS NULL) r;

    -- Per old group, its largest new key (ties: the smallest key) takes the group over.
    CREATE TEMP TABLE heir ON COMMIT DROP AS
    SELECT DISTINCT ON (old_group) old_group, new_fp, msg_type, shape
    FROM (SELECT old_group, new_fp, msg_type, shape, count(*) AS n FROM rekey WHERE old_group IS NOT NULL
          GROUP BY 1, 2, 3, 4) c
    ORDER BY old_group, n DESC, new_fp;

    -- The other kinds: a group each, with the old group's description and first-seen time.
    INSERT INTO failure_groups (fingerprint, original_queue, reason, error_type, error_sample, msg_type, body_shape,
                                first_seen, last_seen, count)
    SELECT k.new_fp, g.original_queue, g.reason, g.error_type, g.error_sample, k.msg_type, k.shape,
           g.first_seen, k.last_seen, 0
    FROM (SELECT old_group, new_fp, min(msg_type) AS msg_type, min(shape) AS shape, max(ingested_at) AS last_seen
          FROM rekey r
          WHERE old_group IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM heir h WHERE h.old_group = r.old_group AND h.new_fp = r.new_fp)
          GROUP BY old_group, new_fp) k
    JOIN failure_groups g ON g.id = k.old_group
    ORDER BY k.new_fp
    ON CONFLICT ON CONSTRAINT failure_groups_fingerprint_key DO NOTHING;

    UPDATE failure_groups g SET fingerprint = h.new_fp, msg_type = h.msg_type, body_shape = h.shape
    FROM heir h WHERE g.id = h.old_group;

    CREATE TEMP TABLE moves ON COMMIT DROP AS
    SELECT r.id, r.old_group, g.id AS new_group, r.ingested_at, r.queue
    FROM rekey r JOIN failure_groups g ON g.fingerprint = r.new_fp
    WHERE r.old_group IS NOT NULL AND g.id <> r.old_group;

    -- One update of the rows (the awaiting trigger moves the awaiting counts of those that
    -- change group).
    UPDATE dead_letters d SET body_shape = r.body_shape, fingerprint = r.new_fp,
                              group_id = coalesce(m.new_group, d.group_id)
    FROM rekey r LEFT JOIN moves m ON m.id = r.id
    WHERE d.id = r.id;

    -- Counts follow the rows that moved.
    UPDATE failure_groups g SET count = greatest(g.count - m.n, 0)
    FROM (SELECT old_group, count(*) AS n FROM moves GROUP BY 1) m WHERE g.id = m.old_group;
    UPDATE failure_groups g SET count = g.count + m.n
    FROM (SELECT new_group, count(*) AS n FROM moves GROUP BY 1) m WHERE g.id = m.new_group;

    -- And so does the per-minute inflow.
    UPDATE dead_letter_inflow f SET n = greatest(f.n - m.n, 0)
    FROM (SELECT date_trunc('minute', ingested_at) AS minute, queue, old_group, count(*) AS n
          FROM moves GROUP BY 1, 2, 3) m
    WHERE f.minute = m.minute AND f.queue = m.queue AND f.group_id = m.old_group;
    INSERT INTO dead_letter_inflow AS f (minute, queue, group_id, n)
    SELECT date_trunc('minute', ingested_at), queue, new_group, count(*) FROM moves GROUP BY 1, 2, 3
    ON CONFLICT (minute, queue, group_id) DO UPDATE SET n = f.n + EXCLUDED.n;

    SELECT count(*) INTO moved FROM moves;
    RETURN moved;
END $$;

SELECT revenant_rekey_groups();
