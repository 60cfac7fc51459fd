-- Bulk enqueue with idempotency keys: which jobs hold these keys. Only the keys asked for (the
-- caller knows them already), only their ids. (Migration 0014: the holders, as the unique
-- index sees them; a unique_among => 'pending' job that started keeps the key's text but no
-- longer holds it.)
CREATE OR REPLACE FUNCTION pgqueue.job_ids_by_key(keys text[])
RETURNS TABLE (idempotency_key text, id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT j.idempotency_key, j.id FROM pgqueue.jobs AS j
     WHERE j.idempotency_key = ANY(keys)
       AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0)
$$;
