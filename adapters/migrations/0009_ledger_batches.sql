-- Claims (and settles) that arrive together share one statement and one commit: each
-- item is decided by the per-effect function of 0008, in the order given, so a batch means
-- exactly what the same calls made one after another would, and every item is durable
-- before any caller in the batch sees its answer. Under concurrent dispatches the worker's
-- CPU went to one round trip and one commit per call (adapters/ledger.py, _Batcher).
-- Each returned row carries the item's position (ord, from 1) before the function's columns.

CREATE OR REPLACE FUNCTION groundwork_claim_effects(p_items jsonb)
RETURNS TABLE (
    ord bigint, claim text, previous_status text,
    effect_key text, run_id text, tool_name text, target text, effect_class text,
    request_hash text, status text, attempt integer, fence bigint, external_ref text,
    last_error text, created_at timestamptz, updated_at timestamptz, receipt jsonb
) LANGUAGE plpgsql AS $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT i.value AS v, i.ordinality AS n
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i
        ORDER BY i.ordinality
    LOOP
        RETURN QUERY SELECT item.n, c.* FROM groundwork_claim_effect(
            item.v->>'effect_key', item.v->>'run_id', item.v->>'tool_name', item.v->>'target',
            item.v->>'effect_class', item.v->>'request_hash', item.v->'request',
            (item.v->>'activity_attempt')::integer) AS c;
    END LOOP;
END;
$$;

CREATE OR REPLACE FUNCTION groundwork_settle_effects(p_items jsonb)
RETURNS TABLE (
    ord bigint, stale boolean,
    effect_key text, run_id text, tool_name text, target text, effect_class text,
    request_hash text, status text, attempt integer, fence bigint, external_ref text,
    last_error text, created_at timestamptz, updated_at timestamptz, receipt jsonb
) LANGUAGE plpgsql AS $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT i.value AS v, i.ordinality AS n
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i
        ORDER BY i.ordinality
    LOOP
        RETURN QUERY SELECT item.n, s.* FROM groundwork_settle_effect(
            item.v->>'effect_key', (item.v->>'fence')::bigint, item.v->>'status',
            item.v->>'run_id', (item.v->>'activity_attempt')::integer,
            item.v->>'external_ref', NULLIF(item.v->'receipt', 'null'::jsonb),
            item.v->>'error', item.v->>'domain_event') AS s;
    END LOOP;
END;
$$;
