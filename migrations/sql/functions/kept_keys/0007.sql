-- Bulk enqueue with kept keys (unique_for): which of these keys a finished job still holds,
-- and that job's id. SECURITY DEFINER: a producer cannot read pgqueue.idempotency_keys.
CREATE OR REPLACE FUNCTION pgqueue.kept_keys(keys text[])
RETURNS TABLE (key text, job_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT k.key, k.job_id FROM pgqueue.idempotency_keys AS k
     WHERE k.key = ANY(keys) AND k.expires_at > now()
$$;
