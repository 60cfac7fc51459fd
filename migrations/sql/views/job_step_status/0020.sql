-- Each job's steps (ctx.step, and the sleeps and waits of durable jobs), in the order they ran:
-- for operators and `pgq jobs show`. Steps stay while their job is in jobs, job_history or
-- dead_letters, and are pruned with it (pgqueue.retention).
CREATE OR REPLACE VIEW pgqueue.job_step_status AS
SELECT s.job_id, s.seq, s.name, s.kind, s.state, s.attempts, s.started_at, s.finished_at,
       s.finished_at - s.started_at AS duration,
       s.size                       AS result_size,
       s.error ->> 'error'          AS error,
       s.error ->> 'message'        AS message,
       s.wake_at, s.event
  FROM pgqueue.job_steps AS s;
