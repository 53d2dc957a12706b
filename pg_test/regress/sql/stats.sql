-- jq.queue_stats through a scripted life of a queue: depth = claimable + scheduled at every
-- step, and running / dead / completed follow claims, completions, failures, lease expiries and
-- pruning. Maintenance runs with explicit instants (now() + ...), never by editing rows; only
-- this file's queue is looked at, since jq._promote / _reap / _prune work on every queue.
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
-- Two attempts, retries 1 minute later (no jitter), dead after the second lease expiry,
-- completed kept 1 day and dead jobs 7 days.
SELECT name FROM jq.create_queue('stats_q', max_attempts => 2, backoff => 'fixed',
    backoff_base => interval '1 minute', jitter => 'none', max_lease_expiries => 1,
    retention => interval '1 day', dead_retention => interval '7 days');
\set stats 'SELECT depth, claimable, scheduled, running, dead, completed, depth = claimable + scheduled AS consistent, oldest_claimable_age IS NOT NULL AS has_age, paused FROM jq.queue_stats WHERE queue = ''stats_q'';'
:stats
CREATE TEMP TABLE held (name text PRIMARY KEY, id bigint, lease_token uuid);
CREATE FUNCTION pg_temp.take(n integer) RETURNS SETOF text LANGUAGE sql AS $$
    INSERT INTO held AS h SELECT c.payload ->> 'n', c.id, c.lease_token FROM jq.claim('stats_q', 'w', n) c
    ON CONFLICT (name) DO UPDATE SET id = excluded.id, lease_token = excluded.lease_token
    RETURNING h.name
$$;

-- Three jobs ready now (a has the highest priority, then b), two due in 10 minutes.
SELECT count(*) AS enqueued FROM jq.enqueue_many('stats_q',
    '[{"payload": {"n": "a"}, "priority": 2}, {"payload": {"n": "b"}, "priority": 1},
      {"payload": {"n": "c"}},
      {"payload": {"n": "d"}, "delay": "10 minutes"}, {"payload": {"n": "e"}, "delay": "10 minutes"}]',
    specs => true);
:stats
-- Claim a and b.
SELECT pg_temp.take(2) AS claimed ORDER BY 1;
:stats
-- a completes; b fails its first attempt and is scheduled for a retry in 1 minute.
SELECT jq.complete(id, lease_token) AS completed FROM held WHERE name = 'a';
SELECT jq.fail(id, lease_token, 'first failure') AS b_state FROM held WHERE name = 'b';
:stats
-- 15 minutes later d, e and b's retry are due: all claimable.
SELECT jq._promote(now() + interval '15 minutes') >= 3 AS promoted;
:stats
-- Take them all (b first: priority); b fails its last attempt and goes dead.
SELECT pg_temp.take(10) AS claimed ORDER BY 1;
:stats
SELECT jq.fail(id, lease_token, 'second failure') AS b_state FROM held WHERE name = 'b';
:stats
-- The workers of c, d and e vanish: an hour later their leases are reaped, refunded, ready.
SELECT jq._reap(now() + interval '1 hour') >= 3 AS reaped;
:stats
SELECT state, attempt, lease_expiries FROM jq.jobs j JOIN held h USING (id)
WHERE h.name IN ('c', 'd', 'e') ORDER BY h.name;
-- Claimed and lost again: the second expiry exceeds max_lease_expiries (1), so they go dead.
SELECT pg_temp.take(10) AS claimed ORDER BY 1;
SELECT jq._reap(now() + interval '2 hours') >= 3 AS reaped;
:stats
-- One more job, cancelled while ready: a cancelled job is in no column of the view.
SELECT jq.enqueue('stats_q', '{"n": "f"}') AS f_id \gset
:stats
SELECT jq.cancel(:f_id) AS cancelled;
:stats
-- Pruning: two days on, the completed job (retention 1 day) is gone, the dead ones (7 days)
-- stay; eight days on they are gone too. Finished jobs go a whole history table at a time, and
-- never from a ring's current table: the first pass moves the rings on, the next truncates.
SELECT jq._prune(now() + interval '2 days') >= 0 AS rings_moved_on;
SELECT jq._prune(now() + interval '2 days') >= 1 AS pruned;
:stats
SELECT jq._prune(now() + interval '8 days') >= 4 AS pruned;
:stats
SELECT state, count(*) FROM jq.jobs WHERE queue = 'stats_q' GROUP BY state ORDER BY state;
-- Pausing shows in the view; the counts do not change.
SELECT jq.pause('stats_q');
:stats
SELECT jq.drop_queue('stats_q', force => true);
SELECT count(*) FROM jq.queue_stats WHERE queue = 'stats_q';
