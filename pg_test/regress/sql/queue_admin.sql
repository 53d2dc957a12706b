-- Queue administration: create_queue defaults and if_not_exists, duplicates (42710), partial
-- alter_queue, removing the concurrency cap with max_concurrency => 0, pause / resume, and
-- dropping an unknown queue (42704).
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
\x on
-- Every default, as documented in the COMMENT of jq.create_queue.
SELECT name, paused, max_concurrency, max_attempts, lease, backoff, backoff_base, backoff_max,
       jitter, retention, dead_retention, history_retention, max_lease_expiries,
       created_at <= now() AS created_now
FROM jq.create_queue('admin_q');
\x off
-- A second create: 42710; with if_not_exists the existing row comes back unchanged (the
-- options given are not applied).
SELECT jq.create_queue('admin_q');
SELECT name, max_attempts, lease FROM jq.create_queue('admin_q', max_attempts => 7,
    lease => interval '1 minute', if_not_exists => true);
SELECT max_attempts, lease FROM jq.queues WHERE name = 'admin_q';
-- if_not_exists on a new name creates it with the given options.
SELECT name, max_attempts, paused FROM jq.create_queue('admin_q2', max_attempts => 2,
    paused => true, if_not_exists => true);

-- alter_queue changes only what is given.
SELECT max_attempts, lease, backoff, backoff_base, jitter, max_concurrency, paused
FROM jq.alter_queue('admin_q', max_attempts => 5);
SELECT max_attempts, lease, backoff, backoff_base, jitter, max_concurrency, paused
FROM jq.alter_queue('admin_q', lease => interval '30 seconds', backoff => 'linear',
                    backoff_base => interval '2 seconds', jitter => 'none');
SELECT retention, dead_retention, history_retention, max_lease_expiries
FROM jq.alter_queue('admin_q', retention => interval '2 hours', dead_retention => interval '3 days',
                    history_retention => interval '4 days', max_lease_expiries => 0);
-- With nothing to change it returns the row as it is.
SELECT max_attempts, lease, backoff, retention FROM jq.alter_queue('admin_q');
-- A new max_attempts applies to jobs enqueued afterwards.
SELECT jq.enqueue('admin_q', '{"n": "before"}') AS before_id \gset
SELECT max_attempts FROM jq.alter_queue('admin_q', max_attempts => 9);
SELECT jq.enqueue('admin_q', '{"n": "after"}') AS after_id \gset
SELECT payload ->> 'n' AS job, max_attempts FROM jq.jobs WHERE id IN (:before_id, :after_id) ORDER BY id;
-- A new lease applies to the next claim.
SELECT lease_expires_at - clock_timestamp() <= interval '30 seconds' AS short_lease
FROM jq.claim('admin_q', 'w');

-- The concurrency cap: with max_concurrency 2 and one job running, a claim of 5 gets 1 more;
-- max_concurrency => 0 removes the cap.
SELECT count(*) AS enqueued FROM jq.enqueue_many('admin_q', '[1, 2, 3, 4, 5]');
SELECT max_concurrency FROM jq.alter_queue('admin_q', max_concurrency => 2);
SELECT count(*) AS claimed FROM jq.claim('admin_q', 'w', 5);
SELECT count(*) AS claimed FROM jq.claim('admin_q', 'w', 5);
SELECT max_concurrency IS NULL AS uncapped FROM jq.alter_queue('admin_q', max_concurrency => 0);
SELECT count(*) AS claimed FROM jq.claim('admin_q', 'w', 5);
SELECT running FROM jq.queue_stats WHERE queue = 'admin_q';
-- Leaving max_concurrency out keeps the current value (here: none).
SELECT max_concurrency IS NULL AS still_uncapped FROM jq.alter_queue('admin_q', max_attempts => 9);

-- Pause: claims return nothing (also through the multi-queue claim), enqueue goes on, running
-- jobs can still finish; resume brings the queue back. Both are idempotent.
SELECT jq.pause('admin_q'), jq.pause('admin_q');
SELECT paused FROM jq.queue_stats WHERE queue = 'admin_q';
SELECT jq.enqueue('admin_q', '{"n": "while_paused"}') > 0 AS enqueued;
SELECT count(*) AS claimed FROM jq.claim('admin_q', 'w', 10);
SELECT count(*) AS claimed FROM jq.claim(ARRAY['admin_q'], 'w', 10);
SELECT claimable FROM jq.queue_stats WHERE queue = 'admin_q';
SELECT count(*) FILTER (WHERE done) AS completed FROM (
    SELECT jq.complete(j.id, j.lease_token) AS done
    FROM jq.jobs j WHERE j.queue = 'admin_q' AND j.state = 'running') c;
-- Pausing through alter_queue is the same flag; admin_q2 was created paused.
SELECT jq.enqueue('admin_q2', '{"n": "q2"}') > 0 AS enqueued;
SELECT count(*) AS claimed FROM jq.claim(ARRAY['admin_q2', 'admin_q'], 'w', 10);
SELECT jq.resume('admin_q'), jq.resume('admin_q');
SELECT paused FROM jq.queue_stats WHERE queue = 'admin_q';
-- The multi-queue claim skips the still-paused admin_q2 and takes admin_q's job.
SELECT c.queue, c.payload ->> 'n' AS job FROM jq.claim(ARRAY['admin_q2', 'admin_q'], 'w', 10) c;
SELECT paused FROM jq.alter_queue('admin_q2', paused => false);
SELECT c.queue, c.payload ->> 'n' AS job FROM jq.claim(ARRAY['admin_q2', 'admin_q'], 'w', 10) c;
SELECT paused FROM jq.alter_queue('admin_q2', paused => true);
SELECT paused FROM jq.queues WHERE name = 'admin_q2';

-- Drop: unknown and malformed names; a dropped queue is unknown afterwards.
SELECT jq.drop_queue('admin_no_such_queue');
SELECT jq.drop_queue('admin no such queue');
SELECT jq.drop_queue('admin_q', force => true);
SELECT jq.drop_queue('admin_q');
SELECT jq.pause('admin_q');
SELECT jq.alter_queue('admin_q', max_attempts => 1);
SELECT jq.drop_queue('admin_q2', force => true);
SELECT count(*) FROM jq.queues WHERE name IN ('admin_q', 'admin_q2');
