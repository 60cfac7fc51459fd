-- Backpressure for single-job enqueue: may one more job go into this bounded queue?
-- Counting costs up to max_depth index entries, so a connection that found room keeps a small
-- allowance (a tenth of the room, for at most a second, in a session setting) and counts
-- again when it is spent: max_depth is a soft bound that concurrent producers may overshoot
-- by at most a tenth of the room each, never a runaway.
CREATE OR REPLACE FUNCTION pgqueue.take_queue_room(queue_name text, max_depth integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'pgqueue.room_' || md5(queue_name);
    cached  text := current_setting(setting, true);
    now_s   double precision := extract(epoch FROM clock_timestamp());
    since   double precision;
    allowed integer;
    waiting integer;
BEGIN
    IF coalesce(cached, '') <> '' THEN
        since := split_part(cached, ':', 1)::double precision;
        allowed := split_part(cached, ':', 2)::integer;
        IF since > now_s - 1 AND allowed > 0 THEN
            PERFORM set_config(setting, since || ':' || (allowed - 1), false);
            RETURN true;
        END IF;
    END IF;
    waiting := pgqueue.queue_depth_up_to(queue_name, max_depth);
    IF waiting >= max_depth THEN
        PERFORM set_config(setting, '', false);
        RETURN false;
    END IF;
    PERFORM set_config(setting, now_s || ':' || ((max_depth - waiting) / 10 - 1), false);
    RETURN true;
END
$$;
