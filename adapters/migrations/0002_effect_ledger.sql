-- The effect ledger: one row per effect (business identity = effect key), an append-only
-- log of every attempt, and the run's append-only domain events.
CREATE TABLE IF NOT EXISTS effects (
    effect_key    text PRIMARY KEY,
    run_id        text NOT NULL,
    tool_name     text NOT NULL,
    target        text NOT NULL,
    effect_class  text NOT NULL,
    request_hash  text NOT NULL,
    request       jsonb NOT NULL,
    status        text NOT NULL CHECK (status IN
                    ('prepared', 'dispatching', 'succeeded', 'failed', 'unknown', 'conflict', 'requires_human')),
    attempt       integer NOT NULL DEFAULT 0,
    fence         bigint NOT NULL DEFAULT 0,
    external_ref  text,
    receipt       jsonb,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS effects_run_idx ON effects (run_id);
CREATE INDEX IF NOT EXISTS effects_status_idx ON effects (status);

CREATE TABLE IF NOT EXISTS effect_attempts (
    id                bigserial PRIMARY KEY,
    effect_key        text NOT NULL REFERENCES effects (effect_key),
    attempt           integer NOT NULL,
    fence             bigint NOT NULL,
    activity_attempt  integer,
    phase             text NOT NULL,
    outcome           text,
    detail            jsonb NOT NULL DEFAULT '{}'::jsonb,
    at                timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS effect_attempts_key_idx ON effect_attempts (effect_key, id);

CREATE TABLE IF NOT EXISTS run_events (
    cursor      bigserial PRIMARY KEY,
    run_id      text NOT NULL,
    type        text NOT NULL,
    effect_key  text,
    data        jsonb NOT NULL DEFAULT '{}'::jsonb,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS run_events_run_idx ON run_events (run_id, cursor);
-- A domain event about an effect is appended once, whatever retries settle it.
CREATE UNIQUE INDEX IF NOT EXISTS run_events_effect_once ON run_events (effect_key, type)
    WHERE effect_key IS NOT NULL;

-- Append-only means append-only: history is evidence.
CREATE OR REPLACE FUNCTION groundwork_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION '% is append-only', TG_TABLE_NAME;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS effect_attempts_append_only ON effect_attempts;
CREATE TRIGGER effect_attempts_append_only BEFORE UPDATE OR DELETE ON effect_attempts
    FOR EACH ROW EXECUTE FUNCTION groundwork_append_only();
DROP TRIGGER IF EXISTS run_events_append_only ON run_events;
CREATE TRIGGER run_events_append_only BEFORE UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION groundwork_append_only();
