-- Approval requests and who decided what, when: a row per request, decisions in place,
-- every decision also a run event.
CREATE TABLE IF NOT EXISTS approvals (
    approval_id     text PRIMARY KEY,
    run_id          text NOT NULL,
    subject         text NOT NULL,
    revision        text NOT NULL,
    content_hash    text NOT NULL,
    destination     text NOT NULL,
    scope           text NOT NULL,
    effect_key      text NOT NULL,
    approver_roles  text[] NOT NULL DEFAULT '{}',
    preview         text NOT NULL DEFAULT '',
    status          text NOT NULL CHECK (status IN
                      ('pending', 'approved', 'rejected', 'expired', 'superseded', 'revoked')),
    requested_at    timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    decided_by      text,
    decided_at      timestamptz,
    reason          text
);
CREATE INDEX IF NOT EXISTS approvals_run_idx ON approvals (run_id);
CREATE INDEX IF NOT EXISTS approvals_pending_idx ON approvals (status) WHERE status = 'pending';
