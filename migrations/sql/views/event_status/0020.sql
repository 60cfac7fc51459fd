-- Events emitted (pgqueue.emit_event) and still kept, with the jobs parked waiting for each name
-- (waiting: jobs whose wait has not been completed by an emit yet, so 0 once it was emitted).
CREATE OR REPLACE VIEW pgqueue.event_status AS
SELECT e.name, true AS emitted, e.payload, e.emitted_at, e.keep_until, 0::bigint AS waiting
  FROM pgqueue.events AS e
UNION ALL
SELECT s.event, false, NULL::jsonb, NULL::timestamptz, NULL::timestamptz, count(*)
  FROM pgqueue.job_steps AS s
 WHERE s.state = 'waiting' AND s.event IS NOT NULL
   AND NOT EXISTS (SELECT 1 FROM pgqueue.events AS e WHERE e.name = s.event)
 GROUP BY s.event;
