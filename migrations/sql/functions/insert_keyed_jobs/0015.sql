-- Bulk enqueue of jobs with idempotency keys (ON CONFLICT needs SELECT on the key column, which
-- would let a producer list every key). Returns the ids it inserted; the others' keys are held.
-- Tags arrive as one JSON array per job (unnest would flatten an array of arrays).
-- (Migration 0014: the conflict target names the unique index's new predicate. Jobs with a
-- deduplication mode go through pgqueue.enqueue_job one by one instead.)
-- Jobs of fair queues get their ranks (pgqueue.fair_ranks).
CREATE OR REPLACE FUNCTION pgqueue.insert_keyed_jobs(
    ids bigint[], queues text[], tasks text[], args text[], priorities smallint[],
    run_ats timestamptz[], states text[], max_attempts integer[], keys text[],
    concurrency_keys text[], unique_fors interval[], unique_states text[], metas jsonb[],
    tag_lists jsonb[])
RETURNS TABLE (id bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    -- unique_states arrive as comma-separated text (unnest would flatten an array of arrays).
    INSERT INTO pgqueue.jobs AS j (id, queue, task, args, priority, run_at, state,
                                   max_attempts, idempotency_key, concurrency_key, unique_for,
                                   unique_states, meta, tags, fair_rank)
    SELECT u.id, u.queue, u.task, u.args::jsonb, u.priority, u.run_at, u.state,
           u.max_attempts, u.key, u.ckey, u.ufor, string_to_array(u.ustates, ','),
           u.meta, CASE WHEN u.tags IS NOT NULL
                        THEN ARRAY(SELECT jsonb_array_elements_text(u.tags)) END,
           u.rank
      FROM unnest(ids, queues, tasks, args, priorities, run_ats, states, max_attempts, keys,
                  concurrency_keys, unique_fors, unique_states, metas, tag_lists,
                  pgqueue.fair_ranks(queues, priorities, concurrency_keys))
           AS u(id, queue, task, args, priority, run_at, state, max_attempts, key, ckey, ufor,
                ustates, meta, tags, rank)
    ON CONFLICT (idempotency_key)
       WHERE idempotency_key IS NOT NULL AND (key_until_started IS NOT TRUE OR lease_token = 0)
       DO NOTHING
    RETURNING j.id
$$;
