-- Seconds until the next token is due in the buckets the candidates of a flow-controlled claim
-- wait for (pgqueue.claim, when limits held work back), counted after this claim spent its
-- tokens (pgqueue.claim_blocked's snapshot read saw only buckets already empty): the least of
-- that and p_hint. p_at: the claim's clock.
CREATE OR REPLACE FUNCTION pgqueue.claim_wait_hint(
    p_cands pgqueue.claim_candidate[],
    p_at    timestamptz,
    p_hint  double precision)
RETURNS double precision
LANGUAGE plpgsql AS $$
DECLARE
    v_hint double precision := p_hint;
BEGIN
    SELECT least(v_hint,
                 min((1 - pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit,
                                                qs.rate_burst, p_at)) / qs.rate_limit))
      INTO v_hint
      FROM pgqueue.queues AS qs
     WHERE qs.name IN (SELECT c.queue FROM unnest(p_cands) AS c)
       AND qs.rate_limit IS NOT NULL
       AND pgqueue.bucket_tokens(qs.tokens, qs.tokens_at, qs.rate_limit, qs.rate_burst,
                                 p_at) < 1;
    SELECT least(v_hint,
                 min((1 - pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit,
                                                tl.rate_burst, p_at)) / tl.rate_limit))
      INTO v_hint
      FROM pgqueue.task_limits AS tl
     WHERE tl.task IN (SELECT c.task FROM unnest(p_cands) AS c)
       AND tl.rate_limit IS NOT NULL
       AND pgqueue.bucket_tokens(tl.tokens, tl.tokens_at, tl.rate_limit, tl.rate_burst,
                                 p_at) < 1;
    SELECT least(v_hint,
                 min((1 - pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                                tl.key_rate_burst, p_at))
                     / tl.key_rate_limit))
      INTO v_hint
      FROM pgqueue.key_buckets AS b
      JOIN pgqueue.task_limits AS tl ON tl.task = b.task
     WHERE (b.task, b.key) IN (SELECT c.task, c.concurrency_key FROM unnest(p_cands) AS c
                                WHERE c.concurrency_key IS NOT NULL)
       AND tl.key_rate_limit IS NOT NULL
       AND pgqueue.bucket_tokens(b.tokens, b.tokens_at, tl.key_rate_limit,
                                 tl.key_rate_burst, p_at) < 1;
    RETURN v_hint;
END
$$;
