-- Enqueue one job given as a row of pgqueue.job_input (migration 0018: the body of what was
-- pgqueue.enqueue_job, which now calls it); the single source of truth for single-job enqueue
-- (Python calls it too). With an idempotency key, the job holding the key is returned
-- (created = false): a live one, or a finished one whose key is kept (unique_for). A queue at
-- its max_depth raises SQLSTATE PGQ01 (unless the key matched an existing job). meta (a JSON
-- object) and tags (short non-empty strings) are stored with the job as given (NULL: none); the
-- Python client checks them further (size, duplicates) before calling. The row's id, state and
-- fair_rank are left to pgqueue.insert_jobs, which writes the job; run_at NULL is now() +
-- delay (or now()). SECURITY DEFINER: a producer needs no SELECT on jobs (keys, ranks, room).
--
-- Deduplication modes (migration 0014), each only with a key:
--   unique_among 'live' (default): the key is held from enqueue until the job finishes;
--                'pending': only until a worker first claims the job (lease_token = 0), so a
--                new job may be enqueued while the previous one runs, and a job that comes
--                back for another attempt never holds the key again (it can never collide
--                with a newer job: no retry, release or reap can fail on the key).
--   on_conflict 'keep' (default): the holder is returned unchanged;
--               'replace': a holder not running (of the same task) gets this call's args and
--               run_at (debounce); 'replace_args': its args only (run_at kept). Nothing else
--               of the holder changes (queue, priority, attempts, errors, ...). replaced says
--               whether it was updated. A holder that is running is returned as it is
--               ('live'), or no longer holds the key and a new job is enqueued ('pending').
--   throttle: at most one job per key per period: the key gets the start of the current
--             period (database clock, periods counted from the Unix epoch, whole seconds) as
--             a suffix, and is kept for a period after the job finished, whatever its end.
CREATE OR REPLACE FUNCTION pgqueue.enqueue_input(
    job pgqueue.job_input,
    OUT id bigint,
    OUT created boolean,
    OUT replaced boolean)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    due         timestamptz := coalesce(job.run_at, now() + job.delay, now());
    job_key     text := job.idempotency_key;
    keep_for    interval := job.unique_for;
    keep_states text[] := job.unique_states;
    period      numeric;
    limit_depth integer;
    holder      bigint;
    holder_state text;
    holder_task text;
    -- Look the holder up before inserting with a mode (to replace it; throttled and pending
    -- keys are mostly enqueued again while held). A plain key is inserted first, as before the
    -- modes: most bring a new key, and then the insert alone is cheaper.
    look        boolean := job.on_conflict <> 'keep' OR job.throttle IS NOT NULL
                           OR job.unique_among = 'pending';
    -- Our insert just met the key: go straight to its holder.
    met         boolean := false;
BEGIN
    IF job.meta IS NOT NULL AND jsonb_typeof(job.meta) <> 'object' THEN
        RAISE EXCEPTION 'meta must be a JSON object, got a JSON %',
            jsonb_typeof(job.meta) USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM unnest(job.tags) AS t(tag) WHERE coalesce(t.tag, '') = '') THEN
        RAISE EXCEPTION 'tags must be non-empty strings' USING ERRCODE = '22023';
    END IF;
    IF job.unique_among IS DISTINCT FROM 'live'
       AND job.unique_among IS DISTINCT FROM 'pending' THEN
        RAISE EXCEPTION 'unique_among must be ''live'' or ''pending'', got %',
            coalesce(quote_literal(job.unique_among), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job.on_conflict IS NULL
       OR job.on_conflict NOT IN ('keep', 'replace', 'replace_args') THEN
        RAISE EXCEPTION 'on_conflict must be ''keep'', ''replace'' or ''replace_args'', got %',
            coalesce(quote_literal(job.on_conflict), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job_key IS NULL AND (job.unique_among <> 'live'
                            OR job.on_conflict <> 'keep'
                            OR job.throttle IS NOT NULL) THEN
        RAISE EXCEPTION 'unique_among, on_conflict and throttle need an idempotency_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF job.unique_among = 'pending' THEN
        IF job.unique_for IS NOT NULL OR job.throttle IS NOT NULL THEN
            RAISE EXCEPTION 'unique_among => ''pending'' releases the key when the job starts; '
                            'unique_for and throttle keep it after the job finished'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    IF job.throttle IS NOT NULL THEN
        period := extract(epoch FROM job.throttle);
        IF period < 1 OR period <> trunc(period) OR job.unique_for IS NOT NULL THEN
            RAISE EXCEPTION 'throttle must be a whole number of seconds (at least 1), without '
                            'unique_for, got %', job.throttle
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- The period this transaction's clock is in, as its start in UTC (as readable in a row
        -- as it is stable: every producer computes the same text for the same period).
        job_key := job_key || '@' || to_char(
            to_timestamp(floor(extract(epoch FROM now()) / period) * period) AT TIME ZONE 'UTC',
            'YYYY-MM-DD"T"HH24:MI:SS"Z"');
        keep_for := job.throttle;
        keep_states := ARRAY['succeeded', 'dead', 'cancelled'];
    END IF;
    SELECT qs.max_depth INTO limit_depth FROM pgqueue.queues AS qs WHERE qs.name = job.queue;
    IF job.concurrency_key IS NOT NULL THEN
        PERFORM pgqueue.mark_keyed(ARRAY[job.task]);
    END IF;
    LOOP
        IF job_key IS NOT NULL THEN
            IF NOT met THEN
                SELECT k.job_id INTO id FROM pgqueue.idempotency_keys AS k
                 WHERE k.key = job_key AND k.expires_at > now();
                IF id IS NOT NULL THEN
                    created := false;
                    replaced := false;
                    RETURN;
                END IF;
            END IF;
            -- The job holding the key (what the unique index holds; a 'pending' job that
            -- started shares the key text but no longer holds it). Each statement here takes a
            -- new snapshot, so a concurrent enqueuer's job is seen once it committed.
            IF look THEN
                SELECT j.id, j.state, j.task INTO holder, holder_state, holder_task
                  FROM pgqueue.jobs AS j
                 WHERE j.idempotency_key = job_key
                   AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0);
            END IF;
            IF holder IS NOT NULL THEN
                IF job.unique_among = 'pending' AND job.on_conflict = 'keep'
                   AND holder_state <> 'running' THEN
                    -- The caller relies on that job to run after what it wrote (a refresh
                    -- after this change): it must not start before the caller's transaction
                    -- ends. Locked, the claims skip it until then. A claim that locked it first
                    -- is waited for: the job then runs, no longer holds the key, and the loop
                    -- enqueues a new one. (Only a job that is not running is ever locked here:
                    -- the worker's writes about running jobs never wait for a producer.)
                    PERFORM FROM pgqueue.jobs AS j
                      WHERE j.id = holder AND j.state <> 'running'
                        AND j.idempotency_key = job_key
                        AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0)
                        FOR KEY SHARE;
                    IF NOT FOUND THEN
                        holder := NULL;
                        met := false;
                        CONTINUE;
                    END IF;
                END IF;
                IF job.on_conflict = 'keep' OR holder_state = 'running'
                   OR holder_task <> job.task THEN
                    id := holder;
                    created := false;
                    replaced := false;
                    RETURN;
                END IF;
                -- Debounce. The row lock makes a claim of the holder either wait for this
                -- transaction (it skips locked rows) or come first: then this UPDATE finds it
                -- running and matches nothing, and the loop looks again.
                UPDATE pgqueue.jobs AS j
                   SET args = coalesce(job.args, '{}'::jsonb),
                       run_at = CASE WHEN job.on_conflict = 'replace' THEN due
                                     ELSE j.run_at END,
                       state = CASE WHEN job.on_conflict <> 'replace' THEN j.state
                                    WHEN due > now() THEN 'scheduled' ELSE 'ready' END
                 WHERE j.id = holder AND j.state <> 'running'
                   AND j.idempotency_key = job_key
                   AND (j.key_until_started IS NOT TRUE OR j.lease_token = 0)
                RETURNING j.id INTO id;
                IF id IS NOT NULL THEN
                    created := false;
                    replaced := true;
                    RETURN;
                END IF;
                holder := NULL;
                met := false;
                CONTINUE;  -- the holder started or finished meanwhile
            END IF;
            IF met THEN
                met := false;
                CONTINUE;  -- the holder finished meanwhile (its key may be kept): look again
            END IF;
        END IF;
        IF limit_depth IS NOT NULL AND NOT pgqueue.take_queue_room(job.queue,
                                                                    limit_depth) THEN
            IF job_key IS NOT NULL AND NOT look THEN
                look := true;  -- a job holding the key is returned whether or not there is room
                CONTINUE;
            END IF;
            RAISE EXCEPTION 'queue % is full (max_depth %)',
                quote_literal(job.queue), limit_depth
                USING ERRCODE = 'PGQ01',
                      HINT = 'wait for workers to catch up, or raise the queue''s max_depth';
        END IF;
        -- The row as settled here (the throttle's key and lifetime): insert_jobs writes it,
        -- computing its state and a fair queue's rank.
        job.run_at := due;
        job.idempotency_key := job_key;
        job.unique_for := keep_for;
        job.unique_states := keep_states;
        SELECT i.id INTO id FROM pgqueue.insert_jobs(ARRAY[job]) AS i;
        IF id IS NOT NULL THEN
            created := true;
            replaced := false;
            IF job_key IS NOT NULL THEN
                -- The previous holder may have finished (and kept its key) between the check
                -- above and our insert; this statement's newer snapshot sees it. Take ours back.
                DECLARE
                    kept bigint;
                BEGIN
                    SELECT k.job_id INTO kept FROM pgqueue.idempotency_keys AS k
                     WHERE k.key = job_key AND k.expires_at > now();
                    IF kept IS NOT NULL THEN
                        DELETE FROM pgqueue.jobs AS j WHERE j.id = enqueue_input.id;
                        id := kept;
                        created := false;
                    END IF;
                END;
            END IF;
            RETURN;
        END IF;
        -- A job holds the key (one enqueued concurrently may have committed while our insert
        -- waited for it): look at it.
        look := true;
        met := true;
    END LOOP;
END
$$;
