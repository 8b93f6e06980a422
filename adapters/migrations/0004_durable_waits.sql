-- Durable waits without lost wake-ups: both sides insert first, then scan the other side;
-- a delivery is unique per (subscription, input), so whichever side sees the pair first
-- delivers it and the other finds it done.
CREATE TABLE IF NOT EXISTS inputs (
    input_id   bigserial PRIMARY KEY,
    tenant     text NOT NULL DEFAULT 'default',
    type       text NOT NULL,
    subject    text NOT NULL,
    source     text NOT NULL DEFAULT 'cli',
    data       jsonb NOT NULL DEFAULT '{}'::jsonb,
    logged_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inputs_match_idx ON inputs (type, subject, input_id);

CREATE TABLE IF NOT EXISTS subscriptions (
    subscription_id  text PRIMARY KEY,
    run_id           text NOT NULL,
    type             text NOT NULL,
    subject          text NOT NULL,
    resume_policy    text NOT NULL CHECK (resume_policy IN ('first_match', 'all')),
    after_cursor     bigint NOT NULL DEFAULT 0,
    since            timestamptz,
    expires_at       timestamptz NOT NULL,
    status           text NOT NULL DEFAULT 'active'
                       CHECK (status IN ('active', 'satisfied', 'expired', 'cancelled')),
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS subscriptions_match_idx ON subscriptions (type, subject) WHERE status = 'active';

CREATE TABLE IF NOT EXISTS deliveries (
    subscription_id  text NOT NULL REFERENCES subscriptions (subscription_id),
    input_id         bigint NOT NULL REFERENCES inputs (input_id),
    run_id           text NOT NULL,
    delivered_at     timestamptz NOT NULL DEFAULT now(),
    signaled_at      timestamptz,
    PRIMARY KEY (subscription_id, input_id)
);
CREATE INDEX IF NOT EXISTS deliveries_unsignaled_idx ON deliveries (delivered_at) WHERE signaled_at IS NULL;
