-- Jobs finished per minute and queue over the last hour (throughput charts).
CREATE OR REPLACE VIEW pgqueue.throughput AS
SELECT minute, queue,
       sum(succeeded)::bigint AS succeeded,
       sum(retried)::bigint   AS retried,
       sum(dead)::bigint      AS dead,
       sum(cancelled)::bigint AS cancelled
  FROM pgqueue.job_counts
 WHERE minute >= date_trunc('minute', now()) - interval '59 minutes'
 GROUP BY minute, queue;
