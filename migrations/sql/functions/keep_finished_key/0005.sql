-- A job that keeps its key leaves pgqueue.jobs by a statement that also wrote where it went
-- (dead_letters, job_history, or nowhere: succeeded). AFTER ROW triggers run at the end of that
-- statement, so they see its other effects. Jobs without unique_for never fire this.
CREATE OR REPLACE FUNCTION pgqueue.keep_finished_key() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    final_state text;
BEGIN
    -- Succeeded jobs are deleted while running (ack); a waiting job deleted without a trace
    -- (an enqueue taking back its duplicate, an operator's DELETE) keeps nothing.
    final_state := CASE
        WHEN EXISTS (SELECT 1 FROM pgqueue.dead_letters AS d WHERE d.id = OLD.id) THEN 'dead'
        WHEN EXISTS (SELECT 1 FROM pgqueue.job_history AS h
                      WHERE h.id = OLD.id AND h.state = 'cancelled') THEN 'cancelled'
        WHEN OLD.state = 'running' THEN 'succeeded' END;
    IF final_state = ANY(coalesce(OLD.unique_states, ARRAY['succeeded'])) THEN
        INSERT INTO pgqueue.idempotency_keys AS k
            (key, job_id, queue, task, state, expires_at)
        VALUES (OLD.idempotency_key, OLD.id, OLD.queue, OLD.task, final_state,
                now() + OLD.unique_for)
        ON CONFLICT (key) DO UPDATE
           SET job_id = excluded.job_id, queue = excluded.queue, task = excluded.task,
               state = excluded.state, finished_at = excluded.finished_at,
               expires_at = excluded.expires_at;
    END IF;
    RETURN NULL;
END
$$;
