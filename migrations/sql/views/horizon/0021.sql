-- What holds back the xmin horizon (pgqueue.horizon_holders), oldest first: the row an
-- operator looks for when pgqueue.jobs keeps dead rows VACUUM cannot remove.
CREATE OR REPLACE VIEW pgqueue.horizon AS
SELECT h.holder, h.pid, h.name, h.role, h.state, h.since, h.age_seconds, h.xmin, h.xmin_age,
       h.catalog_only
  FROM pgqueue.horizon_holders() AS h
 ORDER BY h.xmin_age DESC NULLS LAST, h.age_seconds DESC NULLS LAST;
