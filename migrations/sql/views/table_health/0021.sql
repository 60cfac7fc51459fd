-- Dead row versions and sizes of pgqueue's tables, from the statistics collector: how far
-- VACUUM is behind (dead_tuples rising while a snapshot is held: see pgqueue.horizon) and how
-- much room the tables and their indexes take. Readable by every role (the statistics views
-- and size functions need no privilege on the tables).
CREATE OR REPLACE VIEW pgqueue.table_health AS
SELECT c.relname::text                       AS table_name,
       coalesce(s.n_live_tup, 0)             AS live_tuples,
       coalesce(s.n_dead_tup, 0)             AS dead_tuples,
       pg_relation_size(c.oid)               AS table_bytes,
       pg_indexes_size(c.oid)                AS index_bytes,
       pg_total_relation_size(c.oid)         AS total_bytes,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
       coalesce(s.vacuum_count, 0) + coalesce(s.autovacuum_count, 0) AS vacuums
  FROM pg_class AS c
  JOIN pg_namespace AS n ON n.oid = c.relnamespace
  LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
 WHERE n.nspname = 'pgqueue' AND c.relkind IN ('r', 'p');
