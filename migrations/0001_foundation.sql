-- Revenant's own tables live in the `revenant` schema (created by `revenant migrate`
-- before this runs, and put first on every connection's search_path).

CREATE TABLE users (
    id            bigserial PRIMARY KEY,
    username      text NOT NULL CONSTRAINT users_username_key UNIQUE
                  CHECK (username ~ '^[A-Za-z0-9_.@-]{1,64}$'),
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    disabled      boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Only a hash of the session token is stored: a leaked table does not leak sessions.
CREATE TABLE sessions (
    token_hash  bytea PRIMARY KEY,
    user_id     bigint NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    source_ip   text
);
CREATE INDEX sessions_expires ON sessions (expires_at);

CREATE TABLE login_failures (
    id        bigserial PRIMARY KEY,
    username  text NOT NULL,
    source_ip text NOT NULL,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX login_failures_lookup ON login_failures (username, at DESC);
CREATE INDEX login_failures_ip ON login_failures (source_ip, at DESC);

-- Append-only: the console has no code path that updates or deletes a row here.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text NOT NULL,
    actor_role  text NOT NULL,
    source_ip   text,
    action      text NOT NULL,
    target      text,
    filter      jsonb,
    item_count  bigint NOT NULL DEFAULT 0,
    outcome     text NOT NULL,
    detail      jsonb
);
CREATE INDEX audit_log_at ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_action ON audit_log (action, at DESC, id DESC);
CREATE INDEX audit_log_actor ON audit_log (actor, at DESC, id DESC);

-- One row per running role instance; the Overview shows how fresh each is.
CREATE TABLE heartbeats (
    role        text NOT NULL,
    instance    uuid NOT NULL,
    host        text NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    last_seen   timestamptz NOT NULL DEFAULT now(),
    detail      jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (role, instance)
);
