-- Dead-letter inflow per minute, per DLQ and per failure group: the Overview's and the group
-- page's charts ("worse or better?"). Kept by a statement trigger on insert, one upsert per
-- (minute, queue, group) a batch touches, so a chart reads at most 60 rows per series however
-- fast a DLQ fills. Rows older than a day are pruned with the queue samples.
CREATE TABLE dead_letter_inflow (
    minute    timestamptz NOT NULL,
    queue     text NOT NULL,
    -- 0: a dead letter without a group.
    group_id  bigint NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (minute, queue, group_id)
);
CREATE INDEX dead_letter_inflow_group ON dead_letter_inflow (group_id, minute);

INSERT INTO dead_letter_inflow (minute, queue, group_id, n)
SELECT date_trunc('minute', ingested_at), queue, coalesce(group_id, 0), count(*)
FROM dead_letters WHERE ingested_at > now() - interval '1 day'
GROUP BY 1, 2, 3;

-- Rows stored with an older ingested_at (a bench's or a restore's) are not inflow.
CREATE FUNCTION dead_letters_inflow_inserted() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO dead_letter_inflow AS f (minute, queue, group_id, n)
    SELECT date_trunc('minute', ingested_at), queue, coalesce(group_id, 0), count(*)
    FROM new_rows WHERE ingested_at > now() - interval '1 day'
    GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (minute, queue, group_id) DO UPDATE SET n = f.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER dead_letters_inflow_insert AFTER INSERT ON dead_letters
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letters_inflow_inserted();
