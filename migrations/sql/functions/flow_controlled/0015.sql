-- Does flow control apply to a claim from these queues for these tasks? The claim_jobs query
-- asks on every claim: a SQL function (not plpgsql) so the planner inlines it into the claim
-- as three cheap one-time checks, instead of a function call per claim. A fair queue is claimed
-- in its fair order, by pgqueue.claim.
CREATE OR REPLACE FUNCTION pgqueue.flow_controlled(queues text[], tasks text[])
RETURNS boolean
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
