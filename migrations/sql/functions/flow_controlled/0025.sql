-- Does flow control apply to a claim from these queues for these tasks? Kept for callers that
-- ask for a scalar (workers of earlier versions call it from their claim); the rules live in
-- pgqueue.flow_controls, which queries list in FROM so that the planner inlines it.
CREATE OR REPLACE FUNCTION pgqueue.flow_controlled(queues text[], tasks text[])
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT f.applies FROM pgqueue.flow_controls(queues, tasks) AS f
$$;
