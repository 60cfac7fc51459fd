-- Bulk enqueue with idempotency keys: which live jobs hold these keys. Only the keys asked for
-- (the caller knows them already), only their ids.
CREATE OR REPLACE FUNCTION pgqueue.job_ids_by_key(keys text[])
RETURNS TABLE (idempotency_key text, id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT j.idempotency_key, j.id FROM pgqueue.jobs AS j WHERE j.idempotency_key = ANY(keys)
$$;
