-- Queue names are plain values in shared tables, so lengths around Postgres'
-- 63-byte identifier limit work end to end, names that share a long prefix never collide, and
-- dropping a queue that still has jobs is refused (55006) unless forced; a forced drop deletes
-- them, and the late jq.complete of a worker that held one is a harmless false.
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate

-- 47, 48, 58, 63, 64 and 128 characters: create, enqueue, claim; each claim gets its own job.
SELECT length(q.name) AS len
FROM unnest(ARRAY[47, 48, 58, 63, 64, 128]) n, jq.create_queue(repeat('a', n)) q ORDER BY 1;
SELECT count(*) AS enqueued FROM (
    SELECT jq.enqueue(repeat('a', n), jsonb_build_object('len', n))
    FROM unnest(ARRAY[47, 48, 58, 63, 64, 128]) n) e;
SELECT n AS len, c.queue = repeat('a', n) AS right_queue, (c.payload ->> 'len')::int = n AS right_job
FROM unnest(ARRAY[47, 48, 58, 63, 64, 128]) n, jq.claim(repeat('a', n), 'w') c ORDER BY n;
-- Nothing left, nothing leaked into a neighbour.
SELECT n AS len, count(c.id) AS left_over
FROM unnest(ARRAY[47, 48, 58, 63, 64, 128]) n LEFT JOIN LATERAL jq.claim(repeat('a', n), 'w') c ON true
GROUP BY n ORDER BY n;
SELECT length(queue) AS len, running FROM jq.queue_stats WHERE queue ~ '^a+$' ORDER BY 1;
SELECT count(*) AS completed FROM (
    SELECT jq.complete(j.id, j.lease_token) FROM jq.jobs j WHERE j.queue ~ '^a+$') c;
-- Only completed jobs left: a plain drop is allowed.
SELECT jq.drop_queue(repeat('a', n)) FROM unnest(ARRAY[47, 48, 58, 63, 64, 128]) n;

-- Two 70-character names equal in their first 64 characters are two queues.
SELECT repeat('b', 64) || '_one__' AS name_one, repeat('b', 64) || '_two__' AS name_two \gset
SELECT length(:'name_one') AS len, left(:'name_one', 64) = left(:'name_two', 64) AS same_prefix;
SELECT name = :'name_one' AS is_one FROM jq.create_queue(:'name_one');
SELECT name = :'name_two' AS is_two FROM jq.create_queue(:'name_two');
SELECT jq.enqueue(:'name_one', '{"which": "one"}') > 0 AS enqueued_one,
       jq.enqueue(:'name_two', '{"which": "two"}') > 0 AS enqueued_two;
SELECT c.payload ->> 'which' AS got FROM jq.claim(:'name_two', 'w', 10) c;
SELECT c.payload ->> 'which' AS got FROM jq.claim(:'name_one', 'w', 10) c;
SELECT right(queue, 6) AS suffix, running, claimable FROM jq.queue_stats
WHERE queue IN (:'name_one', :'name_two') ORDER BY queue;
-- Names that differ only in case are different queues too.
SELECT name FROM jq.create_queue('Names-Case');
SELECT jq.enqueue('names-case');
SELECT jq.drop_queue('Names-Case');

-- Dropping a queue with unfinished jobs: refused with 55006 for a ready, a scheduled and a
-- running job alike, and nothing is deleted.
SELECT name FROM jq.create_queue('names_drop');
SELECT jq.enqueue('names_drop', '{"n": "running"}') AS running_id \gset
SELECT c.lease_token AS token FROM jq.claim('names_drop', 'w') c \gset
SELECT jq.drop_queue('names_drop');
SELECT jq.enqueue('names_drop', '{"n": "scheduled"}', delay => interval '1 hour') > 0 AS scheduled;
SELECT jq.drop_queue('names_drop');
SELECT jq.enqueue('names_drop', '{"n": "ready"}') > 0 AS ready;
SELECT jq.drop_queue('names_drop', force => false);
SELECT state, count(*) FROM jq.jobs WHERE queue = 'names_drop' GROUP BY state ORDER BY state;
-- Forced: the queue, its jobs and its history are gone; the late complete is false.
SELECT jq.drop_queue('names_drop', force => true);
SELECT jq.complete(:running_id, :'token') AS late_complete;
SELECT jq.heartbeat(:running_id, :'token') AS late_heartbeat;
SELECT (SELECT count(*) FROM jq.queues WHERE name = 'names_drop') AS queues,
       (SELECT count(*) FROM jq.jobs WHERE queue = 'names_drop') AS jobs,
       (SELECT count(*) FROM jq.executions WHERE queue = 'names_drop') AS executions;
-- The name is free again.
SELECT jq.enqueue('names_drop');
SELECT name FROM jq.create_queue('names_drop');
SELECT jq.drop_queue('names_drop');

SELECT jq.drop_queue(:'name_one', force => true), jq.drop_queue(:'name_two', force => true);
