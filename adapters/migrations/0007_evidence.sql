-- Research evidence: one immutable bundle per (research, repo, source revision), the sets
-- drafts were written from, and the drafts themselves. Evidence is never edited: a new
-- finding is a new bundle, a new bundle a new set, a new set a new draft revision.
CREATE TABLE IF NOT EXISTS evidence (
    research_id         text NOT NULL,
    repo_id             text NOT NULL,
    source_revision     text NOT NULL,
    artifact_hash       text NOT NULL,
    produced_by         text NOT NULL,
    findings            jsonb NOT NULL,
    rejected_citations  integer NOT NULL DEFAULT 0,
    sealed_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (research_id, repo_id, source_revision)
);

CREATE TABLE IF NOT EXISTS evidence_sets (
    research_id    text NOT NULL,
    version        integer NOT NULL,
    manifest_hash  text NOT NULL,
    bundles        jsonb NOT NULL,
    missing        text[] NOT NULL DEFAULT '{}',
    closed_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (research_id, version)
);

CREATE TABLE IF NOT EXISTS drafts (
    research_id             text NOT NULL,
    article_id              text NOT NULL,
    revision                integer NOT NULL,
    evidence_set_version    integer NOT NULL,
    evidence_manifest_hash  text NOT NULL,
    path                    text NOT NULL,
    content                 text NOT NULL,
    content_hash            text NOT NULL,
    editor_run_id           text NOT NULL,
    created_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (research_id, revision)
);

DROP TRIGGER IF EXISTS evidence_immutable ON evidence;
CREATE TRIGGER evidence_immutable BEFORE UPDATE OR DELETE ON evidence
    FOR EACH ROW EXECUTE FUNCTION groundwork_append_only();
DROP TRIGGER IF EXISTS evidence_sets_immutable ON evidence_sets;
CREATE TRIGGER evidence_sets_immutable BEFORE UPDATE OR DELETE ON evidence_sets
    FOR EACH ROW EXECUTE FUNCTION groundwork_append_only();
DROP TRIGGER IF EXISTS drafts_immutable ON drafts;
CREATE TRIGGER drafts_immutable BEFORE UPDATE OR DELETE ON drafts
    FOR EACH ROW EXECUTE FUNCTION groundwork_append_only();

-- Workflow-side facts (EvidenceSetClosed, DraftCreated, ...) are appended once per key,
-- whatever activity retries write them.
ALTER TABLE run_events ADD COLUMN IF NOT EXISTS dedupe_key text;
CREATE UNIQUE INDEX IF NOT EXISTS run_events_dedupe_once ON run_events (dedupe_key)
    WHERE dedupe_key IS NOT NULL;
