-- The xmin horizon and the bloat it causes: what pgq status, the dashboard and the metrics show.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.

-- name: horizon_holders
-- Every backend, prepared transaction and replication slot holding an xmin, oldest first
-- (view pgqueue.horizon; the reading session itself is left out).
SELECT holder, pid, name, role, state, since, age_seconds, xmin::text AS xmin, xmin_age,
       catalog_only
  FROM pgqueue.horizon

-- name: table_health
-- Dead tuples and sizes of pgqueue's tables, the largest first.
SELECT table_name, live_tuples, dead_tuples, table_bytes, index_bytes, total_bytes,
       last_vacuum, vacuums
  FROM pgqueue.table_health
 ORDER BY total_bytes DESC, table_name
