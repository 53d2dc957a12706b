-- Cron schedules: the pure functions on known-hard vectors (steps, ranges, zones, DST), the
-- schedule API, and its errors with their SQLSTATEs. Instants print in UTC.
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
-- The session zone must not matter: print in UTC, but evaluate under Asia/Tokyo.
SET TimeZone = 'Asia/Tokyo';
CREATE FUNCTION pg_temp.z(t timestamptz) RETURNS text LANGUAGE sql AS
$$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"') $$;
CREATE FUNCTION pg_temp.fires(cron text, after timestamptz, n integer, tz text DEFAULT 'UTC')
RETURNS text LANGUAGE sql AS
$$ SELECT string_agg(pg_temp.z(f), ', ' ORDER BY f)
   FROM jq.cron_fires(cron, after, after + interval '10 years', tz, n) f $$;

-- C01 leap day (5 fields, and 6 with seconds first).
SELECT pg_temp.fires('0 0 29 2 *', '2016-03-10 00:00Z', 2);
SELECT pg_temp.fires('0 0 0 29 2 *', '2016-03-10 00:00Z', 1);
-- C02 L, C03 29-L, C04 L in February.
SELECT pg_temp.fires('0 0 L * *', '2015-09-04 00:00Z', 4);
SELECT pg_temp.fires('0 0 29-L * *', '2015-09-04 00:00Z', 2);
SELECT pg_temp.fires('0 0 L * *', '2016-02-05 00:00Z', 1), pg_temp.fires('0 0 L * *', '2017-02-01 00:00Z', 1);
-- C05 spring forward, fixed time: 03:00 EDT = 07:00Z, once, the day not skipped.
SELECT pg_temp.fires('30 2 * * *', '2024-03-09 12:00Z', 3, 'America/New_York');
-- C06 fall back, fixed time: the first 01:30 only. C07 interval: both 01:30s.
SELECT pg_temp.fires('30 1 * * *', '2016-11-06 00:59:59-04', 2, 'America/New_York');
SELECT pg_temp.fires('30 * * * *', '2016-11-06 00:59:59-04', 3, 'America/New_York');
-- C08 aliases.
SELECT pg_temp.fires('@daily', '2016-12-29 14:29:36Z', 3);
SELECT pg_temp.fires('@hourly', '2017-02-25 22:29:36Z', 3);
SELECT pg_temp.fires('@weekly', '2016-12-23 14:29:36Z', 3);
SELECT pg_temp.fires(a, '2016-12-29 14:29:36Z', 1) FROM unnest(ARRAY['@yearly', '@annually', '@monthly', '@midnight']) a;
-- C09 seconds come first: croniter's `* * * * * */15` is `*/15 * * * * *` here.
SELECT pg_temp.fires('*/15 * * * * *', '2012-04-06 13:26:36Z', 3);
SELECT pg_temp.fires('0 * * * * *', '2017-01-14 12:58:59Z', 1);
-- C10 steps restart each hour.
SELECT pg_temp.fires('*/15 * * * *', '2024-01-01 10:50Z', 3);
SELECT pg_temp.fires('*/24 * * * *', '2024-01-01 10:50Z', 4);
-- C11 day of month OR day of week (Vixie); + asks for AND.
SELECT pg_temp.fires('5 18 13 * 5', '2016-01-01 00:00Z', 2);
SELECT pg_temp.fires('5 18 13 * +5', '2016-01-01 00:00Z', 1);
-- Names, ranges, lists, steps; 7 = Sunday.
SELECT pg_temp.fires('0 9 * JAN-mar Mon-FRI', '2024-03-29 10:00Z', 2);
SELECT pg_temp.fires('10-20/5,45 3 * * 7', '2024-01-01 00:00Z', 4);
-- a: 07:54 US/Central (a backward link) is 13:54Z in January, 12:54Z in July.
SELECT pg_temp.z(jq.cron_next('54 7 * * *', '2025-01-15 00:00Z', 'US/Central')) AS january,
       pg_temp.z(jq.cron_next('54 7 * * *', '2025-07-15 00:00Z', 'US/Central')) AS july;
-- b, c, d on 2024-11-03 in America/New_York.
SELECT pg_temp.fires('30 2 * * *', '2024-11-02 12:00Z', 2, 'America/New_York') AS b;
SELECT pg_temp.fires('30 * * * *', '2024-11-03 04:00Z', 4, 'America/New_York') AS c;
SELECT pg_temp.fires('30 1 * * *', '2024-11-03 04:00Z', 2, 'America/New_York') AS d;
-- Zone names are matched ignoring case, as PostgreSQL does.
SELECT pg_temp.z(jq.cron_next('0 12 * * *', '2024-06-01 00:00Z', 'europe/paris'));
-- Strictly after; a sub-second instant; NULL in, NULL out.
SELECT pg_temp.z(jq.cron_next('* * * * *', '2024-01-01 10:00:00Z')),
       pg_temp.z(jq.cron_next('* * * * *', '2024-01-01 09:59:59.5Z')),
       jq.cron_next(NULL, now()) IS NULL AS null_in;
-- The supported range: no fire time in year 5000 or later, as an instant in UTC or as a wall
-- time in the zone (NULL); an instant before 0001-01-02 00:00:00+00 is refused (22008).
SELECT pg_temp.z(jq.cron_next('* * * * *', '4999-12-31 23:58:30Z')) AS last,
       jq.cron_next('* * * * *', '4999-12-31 23:59:59Z') IS NULL AS none_after_4999,
       pg_temp.z(jq.cron_next('* * * * *', '4999-12-31 22:58:00Z', 'Europe/Paris')) AS last_paris,
       jq.cron_next('* * * * *', '4999-12-31 22:59:00Z', 'Europe/Paris') IS NULL AS none_wall_5000,
       jq.cron_next('* * * * *', '200000-01-01 00:00Z') IS NULL AS none_far;
SELECT pg_temp.z(jq.cron_next('* * * * *', '0001-01-02 00:00:00Z')) AS first;
SELECT jq.cron_next('* * * * *', '4713-01-01 00:00:00Z BC');
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * * *', '0001-01-01 23:59:59Z', 'America/New_York');
SELECT count(*) FROM jq.cron_fires('* * * * *', '0001-01-01 12:00Z', '0001-01-03 00:00Z');
SELECT jq.cron_tick('0001-01-01 00:00:00Z');

-- Invalid expressions and zones: 22023, the message naming the problem.
SELECT jq.cron_next('', now());
SELECT jq.cron_next('* * * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * * * * *', now());
SELECT jq.cron_next('60 * * * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* 24 * * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * 32 * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * 13 *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * * 8', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('*/0 * * * *', now());
SELECT jq.cron_next('0 0 30 2 *', now());
\echo :LAST_ERROR_MESSAGE
-- A malformed field is named as written: a lone + (AND with no days), an empty list element,
-- an L-L range (rewritten internally, reported as typed).
SELECT jq.cron_next('0 0 * * +', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('1,,2 * * * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('0 0 L-L * *', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('@reboot', now());
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * * *', now(), 'Mars/Olympus');
\echo :LAST_ERROR_MESSAGE
SELECT jq.cron_next('* * * * *', now(), '');
SELECT jq.cron_next('* * * * *', 'infinity');
SELECT jq.cron_fires('* * * * *', now(), now(), 'UTC', -1);

-- The schedule API.
SELECT name FROM jq.create_queue('cron_q');
SELECT count(*) AS jobs0 FROM jq.jobs \gset
SELECT name, cron, timezone, queue, payload, kind, priority, max_attempts, misfire, overlap,
       enabled, next_run_at = jq.cron_next('*/5 * * * *', now()) AS next_ok,
       fired_count, skipped_count
FROM jq.schedule('five', '*/5 * * * *', 'cron_q', '{"report": "x"}');
-- Called again (an application start): updated in place, the timer kept while cron and zone
-- are the same; a new expression recomputes it from now.
SELECT next_run_at AS next0 FROM jq.schedules WHERE name = 'five' \gset
SELECT priority, next_run_at = :'next0' AS timer_kept
FROM jq.schedule('five', '*/5 * * * *', 'cron_q', '{"report": "x"}', priority => 3);
SELECT cron, next_run_at = jq.cron_next('0 3 * * *', now(), 'Europe/Paris') AS recomputed
FROM jq.schedule('five', '0 3 * * *', 'cron_q', timezone => 'Europe/Paris');
SELECT count(*) AS schedules FROM jq.schedules;
-- alter_schedule: NULL = unchanged.
SELECT cron, timezone, priority, kind, enabled, misfire, overlap
FROM jq.alter_schedule('five', kind => 'report', enabled => false, misfire => 'skip', overlap => 'skip_if_running');
SELECT cron, timezone, priority, kind, enabled FROM jq.alter_schedule('five', enabled => true);

-- Errors, and nothing written.
SELECT jq.schedule('bad', 'nope', 'cron_q');
SELECT jq.schedule('bad', '* * * * *', 'cron_q', timezone => 'Mars/Olympus');
SELECT jq.schedule('bad', '* * * * *', 'no_such_queue');
SELECT jq.schedule('bad', '* * * * *', 'bad queue');
SELECT jq.schedule('bad name', '* * * * *', 'cron_q');
SELECT jq.schedule(NULL, '* * * * *', 'cron_q');
SELECT jq.schedule('bad', NULL, 'cron_q');
SELECT jq.schedule('bad', '* * * * *', 'cron_q', misfire => 'sometimes');
SELECT jq.schedule('bad', '* * * * *', 'cron_q', overlap => 'never');
SELECT jq.schedule('bad', '* * * * *', 'cron_q', max_attempts => 0);
SELECT jq.schedule('bad', '* * * * *', 'cron_q', kind => '');
SELECT jq.schedule('bad', '* * * * *', 'cron_q', payload => NULL);
SELECT jq.alter_schedule('five', cron => '61 * * * *');
SELECT jq.alter_schedule('five', timezone => 'Nowhere/Land');
SELECT jq.alter_schedule('five', queue => 'no_such_queue');
SELECT jq.alter_schedule('no_such_schedule', priority => 1);
SELECT jq.unschedule('no_such_schedule');
SELECT jq.unschedule('no_such_schedule', if_exists => true);
SELECT count(*) AS schedules, (SELECT count(*) FROM jq.jobs) - :jobs0 AS new_jobs,
       (SELECT cron FROM jq.schedules WHERE name = 'five') AS cron
FROM jq.schedules;
SELECT jq.cron_tick('infinity');

-- A queue with schedules is not dropped without force; force deletes the schedules.
SELECT jq.drop_queue('cron_q');
SELECT jq.drop_queue('cron_q', force => true);
SELECT count(*) AS schedules_left FROM jq.schedules;
SELECT jq.unschedule('five', if_exists => true);
RESET TimeZone;
