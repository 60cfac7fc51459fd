-- Breakers as operators read them: 'open' past its cooldown shows as 'half_open' (the next
-- claim of that task runs the probe).
CREATE OR REPLACE VIEW pgqueue.circuit_breaker_status AS
SELECT b.task,
       CASE WHEN b.state = 'open' AND b.open_until <= now() THEN 'half_open' ELSE b.state END
           AS state,
       b.failures, b.successes,
       CASE WHEN b.failures + b.successes > 0
            THEN b.failures::double precision / (b.failures + b.successes) END AS failure_rate,
       b.failure_threshold, b.min_calls, b.window_length, b.cooldown, b.window_start,
       b.opened_at, b.open_until, b.probe_job_id, b.trips
  FROM pgqueue.circuit_breakers AS b;
