-- Claims and settles that arrive together share one statement and one commit, whichever
-- kind each is. 0009 batched each kind apart, so under concurrent dispatches up to four
-- statements ran at once with 1.4 items each on average; one queue for both kinds carries
-- 2.4 per statement at 8 concurrent dispatches, and the CPU per effect fell by a fifth to
-- a quarter in the dispatching process and in Postgres alike (bench/RESULTS.md,
-- 2026-12-07, 10:58).
-- Each item is still decided by the per-effect function of 0008, in the order given, so a
-- batch means what the same calls made one after another would, and every item is durable
-- before any caller sees its answer.
-- Each returned row: the item's position (ord, from 1); for a claim its `claim` and
-- `previous_status` (stale NULL), for a settle its `stale` (claim, previous_status NULL);
-- then the effect columns in the order adapters/ledger.py's _RETURNED names them.

CREATE OR REPLACE FUNCTION groundwork_ledger_batch(p_items jsonb)
RETURNS TABLE (
    ord bigint, claim text, previous_status text, stale boolean,
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
        CASE item.v->>'op'
        WHEN 'claim' THEN
            RETURN QUERY SELECT item.n, c.claim, c.previous_status, NULL::boolean,
                c.effect_key, c.run_id, c.tool_name, c.target, c.effect_class,
                c.request_hash, c.status, c.attempt, c.fence, c.external_ref,
                c.last_error, c.created_at, c.updated_at, c.receipt
            FROM groundwork_claim_effect(
                item.v->>'effect_key', item.v->>'run_id', item.v->>'tool_name',
                item.v->>'target', item.v->>'effect_class', item.v->>'request_hash',
                item.v->'request', (item.v->>'activity_attempt')::integer) AS c;
        WHEN 'settle' THEN
            RETURN QUERY SELECT item.n, NULL::text, NULL::text, s.stale,
                s.effect_key, s.run_id, s.tool_name, s.target, s.effect_class,
                s.request_hash, s.status, s.attempt, s.fence, s.external_ref,
                s.last_error, s.created_at, s.updated_at, s.receipt
            FROM groundwork_settle_effect(
                item.v->>'effect_key', (item.v->>'fence')::bigint, item.v->>'status',
                item.v->>'run_id', (item.v->>'activity_attempt')::integer,
                item.v->>'external_ref', NULLIF(item.v->'receipt', 'null'::jsonb),
                item.v->>'error', item.v->>'domain_event') AS s;
        ELSE
            RAISE EXCEPTION 'ledger batch item % has no op claim or settle', item.n
                USING ERRCODE = 'invalid_parameter_value';
        END CASE;
    END LOOP;
END;
$$;

-- Superseded by groundwork_ledger_batch; nothing calls them any more.
DROP FUNCTION IF EXISTS groundwork_claim_effects(jsonb);
DROP FUNCTION IF EXISTS groundwork_settle_effects(jsonb);
