-- How much room each of pgqueue's tables and B-tree indexes takes against what it would take
-- rebuilt (estimated_bytes): what a held snapshot leaves behind once it has ended. VACUUM
-- makes the dead space reusable but never gives a B-tree's emptied pages back, and a table
-- shrinks only from its end; the maintenance service (pgqueue/worker/maintainer.py) reads this
-- view to decide what to VACUUM (INDEX_CLEANUP ON) and REINDEX CONCURRENTLY.
--
-- The estimate is deliberately simple (no extension needed, readable by every role): rows
-- times the width of a row or index entry (fixed-length columns by their length, the others
-- by pg_stats' avg_width, 32 bytes without statistics, 16 per index expression), packed at
-- the default fill factors. An index holds at most one entry per live row of its table
-- (fewer for a partial one), so its row count is the smaller of its own reltuples (from the
-- last VACUUM) and the table's live rows (kept current by the statistics collector). Not
-- estimated (NULL): indexes other than B-trees.
CREATE OR REPLACE VIEW pgqueue.bloat AS
WITH block AS (
    SELECT pg_catalog.current_setting('block_size')::bigint AS size
), tables AS (
    SELECT c.oid, c.relname, c.relowner,
           greatest(coalesce(s.n_live_tup, 0), 0)::float8 AS live_rows
      FROM pg_catalog.pg_class AS c
      JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
      LEFT JOIN pg_catalog.pg_stat_user_tables AS s ON s.relid = c.oid
     WHERE n.nspname = 'pgqueue' AND c.relkind = 'r'
), widths AS (
    -- Bytes of each column's value, as stored.
    SELECT a.attrelid, a.attnum,
           CASE WHEN a.attlen > 0 THEN a.attlen::float8
                ELSE coalesce(st.avg_width, 32)::float8 END AS width
      FROM pg_catalog.pg_attribute AS a
      JOIN tables AS t ON t.oid = a.attrelid
      LEFT JOIN pg_catalog.pg_stats AS st
        ON st.schemaname = 'pgqueue' AND st.tablename = t.relname AND st.attname = a.attname
     WHERE a.attnum > 0 AND NOT a.attisdropped
), indexes AS (
    SELECT t.oid AS table_oid, i.oid, i.relname, x.indisvalid,
           least(CASE WHEN i.reltuples >= 0 THEN i.reltuples::float8 END, t.live_rows)
               AS entries,
           -- tuple header (8) and data, aligned to 8, plus its line pointer (4)
           8 * ceil((8 + (SELECT coalesce(sum(coalesce(w.width, 16)), 0)
                            FROM unnest(x.indkey::int2[]) AS k(attnum)
                            LEFT JOIN widths AS w
                              ON w.attrelid = t.oid AND w.attnum = k.attnum)) / 8.0) + 4
               AS entry_bytes
      FROM tables AS t
      JOIN pg_catalog.pg_index AS x ON x.indrelid = t.oid
      JOIN pg_catalog.pg_class AS i ON i.oid = x.indexrelid
      JOIN pg_catalog.pg_am AS am ON am.oid = i.relam AND am.amname = 'btree'
)
SELECT 'table'::text                                      AS kind,
       t.relname::text                                    AS table_name,
       t.relname::text                                    AS relation_name,
       pg_catalog.pg_get_userbyid(t.relowner)::text       AS owner,
       pg_catalog.pg_relation_size(t.oid)                 AS bytes,
       -- row header (24) and data, aligned to 8, plus its line pointer (4); full pages
       (ceil(t.live_rows
             * (8 * ceil((24 + (SELECT coalesce(sum(w.width), 0)
                                  FROM widths AS w WHERE w.attrelid = t.oid)) / 8.0) + 4)
             / (b.size - 24)) * b.size)::bigint           AS estimated_bytes,
       true                                               AS valid
  FROM tables AS t, block AS b
UNION ALL
SELECT 'index', t.relname::text, x.relname::text,
       pg_catalog.pg_get_userbyid(t.relowner)::text,
       pg_catalog.pg_relation_size(x.oid),
       -- the metapage, leaves 90 % full (the B-tree fill factor) and ~1 % of inner pages
       ((1 + ceil(1.01 * ceil(x.entries * x.entry_bytes / ((b.size - 40) * 0.9)))) * b.size)::bigint,
       x.indisvalid
  FROM indexes AS x
  JOIN tables AS t ON t.oid = x.table_oid, block AS b;
