-- The xmin horizon and the bloat it causes: what pgq status, the dashboard and the metrics show.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.

-- name: horizon_holders
-- Every backend, prepared transaction and replication slot holding an xmin, oldest first
-- (view pgqueue.horizon; the reading session itself is left out).
SELECT holder, pid, name, role, state, since, age_seconds, xmin::text AS xmin, xmin_age,
       catalog_only
  FROM pgqueue.horizon

-- name: table_health
-- Dead tuples and sizes of pgqueue's tables, the largest first, with what the table and its
-- B-tree indexes would take rebuilt (view pgqueue.bloat's estimates).
SELECT h.table_name, h.live_tuples, h.dead_tuples, h.table_bytes, h.index_bytes, h.total_bytes,
       h.last_vacuum, h.vacuums, b.estimated_table_bytes, b.estimated_index_bytes
  FROM pgqueue.table_health AS h
  LEFT JOIN (SELECT table_name,
                    sum(estimated_bytes) FILTER (WHERE kind = 'table')::bigint
                        AS estimated_table_bytes,
                    sum(estimated_bytes) FILTER (WHERE kind = 'index')::bigint
                        AS estimated_index_bytes
               FROM pgqueue.bloat
              GROUP BY table_name) AS b USING (table_name)
 ORDER BY h.total_bytes DESC, h.table_name
