-- A token bucket's content at time `at` (full when never used).
CREATE OR REPLACE FUNCTION pgqueue.bucket_tokens(tokens double precision, tokens_at timestamptz,
                                      rate double precision, burst double precision,
                                      at timestamptz)
RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN tokens IS NULL OR tokens_at IS NULL THEN coalesce(burst, rate)
                ELSE least(coalesce(burst, rate),
                           tokens + rate * greatest(0, extract(epoch FROM at - tokens_at)))
           END
$$;
