-- What holds back the xmin horizon of this database: every backend with a snapshot or a
-- transaction id, every prepared transaction and every replication slot with an xmin, oldest
-- first. While one of them is old, VACUUM cannot remove the dead row versions that finished
-- jobs leave in pgqueue.jobs (and any other table): claims walk over them and the table grows.
--
-- SECURITY DEFINER: pg_stat_activity shows another role's state and xact_start only to that
-- role, a superuser or a member of pg_read_all_stats. Run as the schema's owner, this function
-- shows them to whoever may execute it (workers and admins: see pgq roles), and it shows no
-- query text. When the owner has neither, other roles' backends are listed with their pid,
-- role, application name and xmin but no state or age: the function sees no more than it.
--
-- The reader's own backend is left out (its snapshot is this very query). A backend's age is
-- that of its transaction (xact_start): the age of the oldest snapshot it can hold. Backends,
-- prepared transactions and logical slots of other databases hold back only the shared
-- catalogs, so they are left out; physical slots (hot_standby_feedback) count everywhere.
CREATE OR REPLACE FUNCTION pgqueue.horizon_holders()
RETURNS TABLE (
    holder           text,
    pid              integer,
    name             text,
    role             text,
    state            text,
    since            timestamptz,
    age_seconds      double precision,
    xmin             xid,
    xmin_age         integer,
    catalog_only     boolean
)
LANGUAGE sql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'backend', a.pid, a.application_name, a.usename::text, a.state, a.xact_start,
           extract(epoch FROM now() - a.xact_start)::double precision,
           coalesce(a.backend_xid, a.backend_xmin),
           age(coalesce(a.backend_xid, a.backend_xmin)), false
      FROM pg_stat_activity AS a
     WHERE a.pid <> pg_backend_pid()
       AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
       AND (a.datname = current_database() OR a.datid IS NULL)
    UNION ALL
    SELECT 'prepared transaction', NULL, p.gid, p.owner::text, 'prepared', p.prepared,
           extract(epoch FROM now() - p.prepared)::double precision,
           p.transaction, age(p.transaction), false
      FROM pg_prepared_xacts AS p
     WHERE p.database = current_database()
    UNION ALL
    SELECT 'replication slot', s.active_pid, s.slot_name::text, NULL,
           CASE WHEN s.active THEN 'active' ELSE 'inactive' END, NULL, NULL,
           coalesce(s.xmin, s.catalog_xmin), age(coalesce(s.xmin, s.catalog_xmin)),
           s.xmin IS NULL
      FROM pg_replication_slots AS s
     WHERE (s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL)
       AND (s.database IS NULL OR s.database = current_database())
$$;
