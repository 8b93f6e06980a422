-- The input plane: every accepted input is an envelope row (durable before 202), deduped per
-- (tenant, source, source_event_id); activation runs from an outbox after the commit.
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS public_id text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'event';
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS source_event_id text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS target text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS occurred_at timestamptz;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS correlation_id text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS causation_id text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS data_content_type text NOT NULL DEFAULT 'application/json';
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS principal text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS trust text NOT NULL DEFAULT 'trusted';
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS body_hash text;
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS disposition text NOT NULL DEFAULT 'pending';
ALTER TABLE inputs ADD COLUMN IF NOT EXISTS activation_refs jsonb NOT NULL DEFAULT '[]'::jsonb;
CREATE UNIQUE INDEX IF NOT EXISTS inputs_public_id_idx ON inputs (public_id) WHERE public_id IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS inputs_dedupe_idx ON inputs (tenant, source, source_event_id)
    WHERE source_event_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS activation_outbox (
    input_id     bigint PRIMARY KEY REFERENCES inputs (input_id),
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'done', 'failed')),
    attempts     integer NOT NULL DEFAULT 0,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS activation_outbox_pending_idx ON activation_outbox (created_at) WHERE status = 'pending';
