-- Jobs waiting in a queue, counted no further than `up_to` (so a bounded queue's check costs at
-- most max_depth index entries, whatever the backlog).
CREATE OR REPLACE FUNCTION pgqueue.queue_depth_up_to(queue_name text, up_to integer)
RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer FROM (
        SELECT 1 FROM pgqueue.jobs AS j
         WHERE j.queue = queue_name AND j.state IN ('ready', 'scheduled')
         LIMIT up_to) AS waiting
$$;
