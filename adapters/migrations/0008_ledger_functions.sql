-- Claim and settle as one statement each. The decision (conflict, already settled, claimed;
-- settled or stale fence) stays inside the transaction that takes the row lock, and each
-- call is one round trip in autocommit instead of four: the dispatch path was bound by the
-- worker's CPU spent on round trips, not by Postgres.
-- The rules are those of adapters/ledger.py, which documents them; tests/integration/
-- test_ledger.py holds them to it. Both functions return the same effect columns, in the
-- order adapters/ledger.py's _RETURNED names them.

CREATE OR REPLACE FUNCTION groundwork_claim_effect(
    p_effect_key text, p_run_id text, p_tool_name text, p_target text, p_effect_class text,
    p_request_hash text, p_request jsonb, p_activity_attempt integer
) RETURNS TABLE (
    claim text, previous_status text,
    effect_key text, run_id text, tool_name text, target text, effect_class text,
    request_hash text, status text, attempt integer, fence bigint, external_ref text,
    last_error text, created_at timestamptz, updated_at timestamptz, receipt jsonb
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r effects%ROWTYPE;
    v_claim text;
    v_previous text;
BEGIN
    -- A new key is claimed by its insert: one row version, committed as `dispatching`.
    INSERT INTO effects AS e (effect_key, run_id, tool_name, target, effect_class,
                              request_hash, request, status, attempt, fence)
    VALUES (p_effect_key, p_run_id, p_tool_name, p_target, p_effect_class,
            p_request_hash, p_request, 'dispatching', 1, 1)
    ON CONFLICT (effect_key) DO NOTHING
    RETURNING e.* INTO r;
    IF FOUND THEN
        v_claim := 'claimed';
        v_previous := 'prepared';
        INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                     outcome, detail)
        VALUES (r.effect_key, 1, 1, p_activity_attempt, 'claim', 'dispatching',
                '{"previous": "prepared"}'::jsonb);
    ELSE
        -- The key exists: lock its row and decide from what it holds.
        SELECT * INTO r FROM effects AS e WHERE e.effect_key = p_effect_key FOR UPDATE;
        IF NOT FOUND THEN  -- effects rows are never deleted; this would be a broken ledger
            RAISE EXCEPTION 'effect % vanished during claim', p_effect_key
                USING ERRCODE = 'no_data_found';
        END IF;
        v_previous := r.status;
        IF r.request_hash <> p_request_hash THEN
            v_claim := 'conflict';
            INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                         outcome, detail)
            VALUES (r.effect_key, r.attempt, r.fence, p_activity_attempt, 'claim', 'conflict',
                    jsonb_build_object('request_hash', p_request_hash));
        ELSIF r.status IN ('succeeded', 'conflict', 'requires_human') THEN
            v_claim := 'settled';
            INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                         outcome, detail)
            VALUES (r.effect_key, r.attempt, r.fence, p_activity_attempt, 'claim',
                    'already_' || r.status, '{}'::jsonb);
        ELSE
            v_claim := 'claimed';
            UPDATE effects AS e SET status = 'dispatching', attempt = e.attempt + 1,
                                    fence = e.fence + 1, updated_at = now()
            WHERE e.effect_key = p_effect_key
            RETURNING e.* INTO r;
            INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                         outcome, detail)
            VALUES (r.effect_key, r.attempt, r.fence, p_activity_attempt, 'claim',
                    'dispatching', jsonb_build_object('previous', v_previous));
        END IF;
    END IF;
    RETURN QUERY SELECT v_claim, v_previous, r.effect_key, r.run_id, r.tool_name, r.target,
        r.effect_class, r.request_hash, r.status, r.attempt, r.fence, r.external_ref,
        r.last_error, r.created_at, r.updated_at, r.receipt;
END;
$$;

CREATE OR REPLACE FUNCTION groundwork_settle_effect(
    p_effect_key text, p_fence bigint, p_status text, p_run_id text, p_activity_attempt integer,
    p_external_ref text, p_receipt jsonb, p_error text, p_domain_event text
) RETURNS TABLE (
    stale boolean,
    effect_key text, run_id text, tool_name text, target text, effect_class text,
    request_hash text, status text, attempt integer, fence bigint, external_ref text,
    last_error text, created_at timestamptz, updated_at timestamptz, receipt jsonb
) LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    r effects%ROWTYPE;
    v_stale boolean;
BEGIN
    -- Only the attempt holding the current fence may write the outcome.
    UPDATE effects AS e SET status = p_status,
        external_ref = COALESCE(p_external_ref, e.external_ref),
        receipt = COALESCE(p_receipt, e.receipt), last_error = p_error, updated_at = now()
    WHERE e.effect_key = p_effect_key AND e.fence = p_fence AND e.status = 'dispatching'
    RETURNING e.* INTO r;
    IF NOT FOUND THEN
        SELECT * INTO r FROM effects AS e WHERE e.effect_key = p_effect_key;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'effect % not found at settle', p_effect_key
                USING ERRCODE = 'no_data_found';
        END IF;
        v_stale := true;
        INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                     outcome, detail)
        VALUES (p_effect_key, r.attempt, p_fence, p_activity_attempt, 'settle',
                'stale_fence_rejected',
                jsonb_build_object('wanted', p_status, 'current_fence', r.fence));
    ELSE
        v_stale := false;
        INSERT INTO effect_attempts (effect_key, attempt, fence, activity_attempt, phase,
                                     outcome, detail)
        VALUES (p_effect_key, r.attempt, p_fence, p_activity_attempt, 'settle', p_status,
                jsonb_build_object('external_ref', p_external_ref, 'error', p_error));
        IF p_status = 'succeeded' AND COALESCE(p_domain_event, '') <> '' THEN
            -- The domain event commits with the outcome, once whatever retries settle it.
            INSERT INTO run_events AS ev (run_id, type, effect_key, data)
            VALUES (p_run_id, p_domain_event, p_effect_key,
                    jsonb_build_object('external_ref', p_external_ref, 'tool', r.tool_name,
                                       'target', r.target, 'request_hash', r.request_hash))
            ON CONFLICT (effect_key, type) WHERE effect_key IS NOT NULL DO NOTHING;
        END IF;
    END IF;
    RETURN QUERY SELECT v_stale, r.effect_key, r.run_id, r.tool_name, r.target,
        r.effect_class, r.request_hash, r.status, r.attempt, r.fence, r.external_ref,
        r.last_error, r.created_at, r.updated_at, r.receipt;
END;
$$;
