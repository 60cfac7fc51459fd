-- The maintenance service: VACUUM (INDEX_CLEANUP ON) and REINDEX INDEX CONCURRENTLY of the
-- tables and indexes a held snapshot bloated (pgqueue/worker/maintainer.py). Every statement
-- runs on the service's own autocommit connection: VACUUM and REINDEX CONCURRENTLY cannot run
-- inside a transaction block. Loaded by pgqueue/db/queries.py; each statement starts with a
-- "-- name: <name>" line. {table} and {index} are identifiers read from the catalog (the view
-- pgqueue.bloat), composed with psycopg.sql.Identifier.

-- name: maintenance_lock
-- One maintainer per database at a time (a session lock, held for the pass): the others skip.
SELECT pg_catalog.pg_try_advisory_lock(1885827444, 1)

-- name: maintenance_unlock
SELECT pg_catalog.pg_advisory_unlock(1885827444, 1)

-- name: maintenance_timeouts
-- How long a statement of the pass may wait for a lock (it then gives up: it never queues in
-- front of claims) and run.
SELECT pg_catalog.set_config('lock_timeout', %(lock_timeout)s, false),
       pg_catalog.set_config('statement_timeout', %(statement_timeout)s, false)

-- name: maintenance_bloat
-- Each table and B-tree index with its size, its estimated size rebuilt, and whether this
-- session may VACUUM and REINDEX it: the table's owner, a member of its role or a superuser
-- may, and from PostgreSQL 17 a role granted MAINTAIN on the table. (Run without parameters:
-- the % below reaches format() as is.)
SELECT kind, table_name, relation_name, bytes, estimated_bytes, valid,
       pg_catalog.pg_has_role(owner, 'USAGE')
       OR CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 170000
               THEN pg_catalog.has_table_privilege(
                        pg_catalog.format('pgqueue.%I', table_name), 'MAINTAIN')
               ELSE false END AS ours
  FROM pgqueue.bloat
 ORDER BY table_name, kind DESC, relation_name

-- name: maintenance_leftovers
-- Invalid indexes left by a REINDEX CONCURRENTLY that failed (a lock timeout, a cancel): the
-- new copy (<name>_ccnew) or the old one (<name>_ccold), to drop. Updates keep writing to them
-- until then.
SELECT i.relname::text
  FROM pg_catalog.pg_index AS x
  JOIN pg_catalog.pg_class AS i ON i.oid = x.indexrelid
  JOIN pg_catalog.pg_namespace AS n ON n.oid = i.relnamespace
 WHERE n.nspname = 'pgqueue' AND NOT x.indisvalid
   AND i.relname ~ '_cc(new|old)[0-9]*$'

-- name: maintenance_vacuum
VACUUM (INDEX_CLEANUP ON) pgqueue.{table}

-- name: maintenance_reindex
REINDEX INDEX CONCURRENTLY pgqueue.{index}

-- name: maintenance_drop_index
DROP INDEX CONCURRENTLY IF EXISTS pgqueue.{index}

-- name: maintenance_sizes
-- A table's or an index's size after a step (the log line and the report say what it won).
SELECT pg_catalog.pg_relation_size(c.oid)
  FROM pg_catalog.pg_class AS c
  JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
 WHERE n.nspname = 'pgqueue' AND c.relname = %(name)s
