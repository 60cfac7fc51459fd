-- Bulk enqueue with kept keys: take back the jobs just inserted whose key a different,
-- finished job holds (it finished and kept its key between the check and the insert), and
-- say which job holds each key.
CREATE OR REPLACE FUNCTION pgqueue.drop_raced_keyed_jobs(ids bigint[])
RETURNS TABLE (id bigint, idempotency_key text, holder bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM pgqueue.jobs AS j
     USING pgqueue.idempotency_keys AS k
     WHERE j.id = ANY(ids) AND k.key = j.idempotency_key AND k.expires_at > now()
       AND k.job_id <> j.id
    RETURNING j.id, j.idempotency_key, k.job_id
$$;
