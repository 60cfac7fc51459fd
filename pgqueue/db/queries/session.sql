-- Sessions: transactions, LISTEN/NOTIFY, the schema's revision, the clock.
-- Loaded by pgqueue/db/queries.py; each statement starts with a "-- name: <name>" line.
-- Parameters are psycopg placeholders, always bound.

-- name: open_transaction
-- Starts the caller's transaction on an idle non-autocommit connection (psycopg sends BEGIN before
-- a connection's first statement), so that what pgqueue runs next is a savepoint inside it rather
-- than a transaction of its own (see pgqueue/db/connections.py).
SELECT 1

-- name: schema_version
SELECT version_num FROM pgqueue.pgqueue_alembic_version

-- name: schema_installed
SELECT to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL

-- name: schema_version_readable
-- The start-up check: NULL where pgqueue's version table does not exist, else whether this role
-- may read it (a producer role granted before the check existed may not).
SELECT CASE WHEN to_regclass('pgqueue.pgqueue_alembic_version') IS NOT NULL
            THEN has_table_privilege('pgqueue.pgqueue_alembic_version', 'SELECT')
       END

-- name: schema_managed_by
-- How the application migrates, for the command a schema mismatch suggests (failure path only).
SELECT CASE WHEN to_regclass('django_migrations') IS NOT NULL THEN 'django'
            WHEN to_regclass('alembic_version') IS NOT NULL THEN 'alembic'
       END

-- name: listen_jobs
LISTEN pgqueue_jobs

-- name: listen_cancel
LISTEN pgqueue_cancel

-- name: listen_probe
-- At start-up the listener checks that notifications reach it (they do not through a
-- transaction-pooling PgBouncer): it listens here and has another connection notify it.
LISTEN pgqueue_probe

-- name: unlisten_probe
UNLISTEN pgqueue_probe

-- name: notify_probe
SELECT pg_notify('pgqueue_probe', %(token)s)

-- name: ping
SELECT 1

-- name: begin
-- An idle worker's claim is a transaction of its own, so that its COMMIT can be sent after its
-- rows came back (see WorkerDB.before_commit).
BEGIN

-- name: commit
COMMIT

-- name: rollback
ROLLBACK

-- name: generic_plans
-- For the rest of this transaction, prepared statements run their generic plan. The claim's
-- custom plan is no better, but PostgreSQL keeps choosing it (the generic one's estimate, made
-- without the limit and the queue arrays, looks dearer) and plans the claim again on every
-- call: 0.4-0.7 ms of planning an idle worker's claim then waits for.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: db_now
SELECT now()
