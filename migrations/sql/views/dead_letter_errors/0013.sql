-- Dead letters with their final error spelled out (class, message, traceback), and the job's
-- metadata and tags.
CREATE OR REPLACE VIEW pgqueue.dead_letter_errors AS
SELECT d.id, d.queue, d.task, d.attempts, d.max_attempts, d.reason,
       d.errors -> -1 ->> 'error'     AS error_class,
       d.last_error,
       d.errors -> -1 ->> 'traceback' AS traceback,
       d.worker_id, d.created_at, d.dead_at, d.meta, d.tags
  FROM pgqueue.dead_letters AS d;
