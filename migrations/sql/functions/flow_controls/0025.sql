-- Does flow control apply to a claim from these queues for these tasks (weights, limits, keyed
-- jobs, a fair queue, a breaker not closed)? One row, ``applies``. A set-returning SQL function
-- so that the planner inlines it where a query lists it in FROM (``claim_jobs``, ``next_due``):
-- its three checks become one-time checks of the claim's plan. A scalar SQL function whose body
-- holds sub-selects is never inlined: flow_controlled was called through the function manager on
-- every claim (0.05 ms of a 0.25 ms one-job claim, measured).
CREATE OR REPLACE FUNCTION pgqueue.flow_controls(queues text[], tasks text[])
RETURNS TABLE (applies boolean)
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pgqueue.queues AS qs
                    WHERE qs.name = ANY(queues)
                      AND (qs.weight IS NOT NULL OR qs.concurrency_limit IS NOT NULL
                           OR qs.rate_limit IS NOT NULL OR qs.fair))
        OR EXISTS (SELECT 1 FROM pgqueue.task_limits AS tl
                    WHERE tl.task = ANY(tasks)
                      AND (tl.concurrency_limit IS NOT NULL OR tl.rate_limit IS NOT NULL
                           OR tl.keyed))
        OR EXISTS (SELECT 1 FROM pgqueue.circuit_breakers AS b
                    WHERE b.task = ANY(tasks) AND b.state <> 'closed')
$$;
