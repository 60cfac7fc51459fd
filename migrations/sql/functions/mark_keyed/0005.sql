-- Mark a task as having keyed jobs (the claim then checks its keys). Writes only once per task.
CREATE OR REPLACE FUNCTION pgqueue.mark_keyed(task_names text[])
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO pgqueue.task_limits (task, keyed)
    SELECT DISTINCT t, true FROM unnest(task_names) AS t
     WHERE NOT EXISTS (SELECT 1 FROM pgqueue.task_limits AS l WHERE l.task = t)
    ON CONFLICT (task) DO NOTHING;
    UPDATE pgqueue.task_limits AS l SET keyed = true, updated_at = now()
     WHERE l.task = ANY(task_names) AND NOT l.keyed;
$$;
