-- The SQL API's happy path, one call at a time.
CREATE EXTENSION jq;
SELECT name, max_attempts, lease, backoff, jitter FROM jq.create_queue('emails', max_attempts => 3);
SELECT jq.enqueue('emails', '{"to":"a@example.com"}') AS first_id \gset
SELECT jq.enqueue('emails', '{"to":"b@example.com"}', priority => 10) AS urgent_id \gset
SELECT claimable, scheduled, running, depth FROM jq.queue_stats;
-- Higher priority first.
SELECT id = :urgent_id AS urgent_first, attempt, kind FROM jq.claim('emails', 'w1');
