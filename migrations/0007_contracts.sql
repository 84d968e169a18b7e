-- Queue reliability contracts set from the console: one level per queue name pattern (a glob
-- where `*` matches any run of characters) in a vhost. Contracts from revenant.toml are not
-- stored here; they are passed in at start-up and a row here with the same pattern wins.
CREATE TABLE queue_contracts (
    id          bigserial PRIMARY KEY,
    vhost       text NOT NULL,
    pattern     text NOT NULL CHECK (length(pattern) BETWEEN 1 AND 255),
    level       text NOT NULL CHECK (level IN ('critical', 'standard', 'disposable')),
    note        text,
    created_by  text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT queue_contracts_vhost_pattern_key UNIQUE (vhost, pattern)
);
