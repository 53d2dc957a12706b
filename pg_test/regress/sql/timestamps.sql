-- Timestamp limits, and negative or zero delays:
-- a run_at at the far end of the timestamp range is accepted and simply waits, without getting
-- in the way of the promotion of other jobs; a past run_at keeps its place in the queue (it is
-- claimed before jobs that became due later); interval arguments that overflow the timestamp
-- range fail cleanly; and no accepted queue setting may stop maintenance or turn a failure into
-- an immediate retry. Maintenance runs with explicit instants; only this file's queues are
-- looked at, since jq._promote / jq._prune work on every queue.
-- (Quiet: the NOTICE for an existing extension depends on which files ran before.)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS jq;
RESET client_min_messages;
\set VERBOSITY sqlstate
SELECT name FROM jq.create_queue('ts_far');

-- The last day Postgres can represent (pg_regress runs in PST8PDT, so this is 08:00 UTC).
SELECT jq.enqueue('ts_far', '{"n": "far"}', run_at => '294276-12-31') AS far_id \gset
SELECT state, run_at = '294276-12-31'::timestamptz AS exact FROM jq.jobs WHERE id = :far_id;
SELECT jq.enqueue('ts_far', '{"n": "in_1_min"}', delay => interval '1 minute') > 0 AS enqueued;
SELECT jq.enqueue('ts_far', '{"n": "in_2_min"}', delay => interval '2 minutes') > 0 AS enqueued;
SELECT jq.enqueue('ts_far', '{"n": "in_1_year"}', run_at => now() + interval '1 year') > 0 AS enqueued;
-- Promotion goes by run_at: at +90 s one job is due, at +1 hour two, at +2 years three; the
-- far-future job stays scheduled throughout.
SELECT jq._promote(now() + interval '90 seconds') >= 1 AS promoted;
SELECT payload ->> 'n' AS job, state FROM jq.jobs WHERE queue = 'ts_far' ORDER BY run_at;
SELECT jq._promote(now() + interval '1 hour') >= 1 AS promoted;
SELECT jq._promote(now() + interval '2 years') >= 1 AS promoted;
SELECT payload ->> 'n' AS job, state FROM jq.jobs WHERE queue = 'ts_far' ORDER BY run_at;
SELECT depth, claimable, scheduled FROM jq.queue_stats WHERE queue = 'ts_far';
-- The claimable ones come out in run_at order; the far-future one does not.
SELECT c.payload ->> 'n' AS job FROM jq.claim('ts_far', 'w', 10) c;
SELECT state FROM jq.jobs WHERE id = :far_id;
-- Cancelling it works like for any scheduled job.
SELECT jq.cancel(:far_id) AS cancelled;
SELECT jq.drop_queue('ts_far', force => true);

-- A past run_at keeps its place: ready at once, and claimed before jobs enqueued earlier with
-- a later due time; equal priority first, then run_at, then id. Priority still comes first.
SELECT name FROM jq.create_queue('ts_past');
-- (Each enqueue is its own statement, so the "now" jobs are due in this order.)
SELECT jq.enqueue('ts_past', '{"n": "now_1"}') > 0 AS enqueued;
SELECT jq.enqueue('ts_past', '{"n": "hour_ago"}', run_at => now() - interval '1 hour') > 0 AS enqueued;
SELECT jq.enqueue('ts_past', '{"n": "year_2000"}', run_at => '2000-01-01') > 0 AS enqueued;
SELECT jq.enqueue('ts_past', '{"n": "now_2"}') > 0 AS enqueued;
SELECT jq.enqueue('ts_past', '{"n": "urgent_now"}', priority => 1) > 0 AS enqueued;
-- A negative delay means now, not "in the past": it sorts with the jobs enqueued now.
SELECT jq.enqueue('ts_past', '{"n": "neg_delay"}', delay => interval '-1 day') > 0 AS enqueued;
SELECT jq.enqueue('ts_past', '{"n": "old_bc"}', run_at => '4000-01-01 BC') > 0 AS enqueued;
SELECT state, count(*) FROM jq.jobs WHERE queue = 'ts_past' GROUP BY state;
SELECT c.payload ->> 'n' AS job, c.run_at < now() - interval '1 minute' AS past_run_at
FROM jq.claim('ts_past', 'w', 10) c;
-- The same through enqueue_many's specs.
SELECT count(*) AS enqueued FROM jq.enqueue_many('ts_past',
    '[{"payload": {"n": "many_now"}}, {"payload": {"n": "many_past"}, "run_at": "2001-01-01"},
      {"payload": {"n": "many_delay"}, "delay": 0}]', specs => true);
SELECT c.payload ->> 'n' AS job FROM jq.claim('ts_past', 'w', 10) c;
SELECT jq.drop_queue('ts_past', force => true);

-- Explicit intervals that leave the timestamp range raise 22008 and change nothing.
SELECT name FROM jq.create_queue('ts_overflow');
SELECT jq.enqueue('ts_overflow', '{"n": 1}') AS ov_id \gset
SELECT count(*) FROM jq.claim('ts_overflow', 'w', lease => interval '300000 years');
SELECT state FROM jq.jobs WHERE id = :ov_id;
SELECT c.lease_token AS ov_token FROM jq.claim('ts_overflow', 'w') c \gset
SELECT jq.heartbeat(:ov_id, :'ov_token', interval '300000 years');
SELECT jq.fail(:ov_id, :'ov_token', 'boom', retry_in => interval '300000 years');
SELECT state, attempt FROM jq.jobs WHERE id = :ov_id;
SELECT jq.complete(:ov_id, :'ov_token') AS completed;
SELECT jq.drop_queue('ts_overflow', force => true);

-- Queue settings at the edge of the range. A setting is either rejected when it is given
-- (22023, raised by create_queue) or works; it must never be accepted and then make
-- maintenance of every queue fail, or make a failed job run again at once. The checks are
-- written so that either outcome passes.
SELECT name FROM jq.create_queue('ts_neighbour');
SELECT jq.enqueue('ts_neighbour', '{"n": 1}', delay => interval '1 minute') AS nb_id \gset
-- A retention of 10,000 years: now() - retention is before 4713 BC.
DO $$
BEGIN
    PERFORM jq.create_queue('ts_long_retention', retention => interval '10000 years',
                            dead_retention => interval '10000 years',
                            history_retention => interval '10000 years');
EXCEPTION WHEN invalid_parameter_value THEN
    NULL;
END $$;
-- Pruning and the whole maintenance pass still run...
SELECT jq._prune(now()) >= 0 AS prune_runs;
SELECT (jq.tick()).promoted >= 0 AS tick_runs;
-- ...and promotion of the other queue goes on.
SELECT jq._promote(now() + interval '2 minutes') >= 1 AS promoted;
SELECT state FROM jq.jobs WHERE id = :nb_id;
SELECT count(jq.drop_queue(name, force => true)) <= 1 AS cleaned_up FROM jq.queues WHERE name = 'ts_long_retention';

-- A backoff of 300,000 years: more microseconds than an interval holds. The worker's jq.fail
-- must record the failure: it must neither raise (the job would stay running until its lease
-- expires, the reaper would refund the attempt, and only max_lease_expiries ends it) nor bring the job back
-- ready at once (an overflow wrapping to a negative delay). The job is scheduled far ahead,
-- or the queue was refused.
CREATE FUNCTION pg_temp.huge_backoff_outcome() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_state jq.job_state;
BEGIN
    BEGIN
        PERFORM jq.create_queue('ts_huge_backoff', backoff => 'fixed', jitter => 'none',
                                backoff_base => interval '300000 years',
                                backoff_max => interval '300000 years');
    EXCEPTION WHEN invalid_parameter_value THEN
        RETURN 'rejected';
    END;
    PERFORM jq.enqueue('ts_huge_backoff', '{}');
    SELECT jq.fail(c.id, c.lease_token, 'boom') INTO v_state FROM jq.claim('ts_huge_backoff', 'w') c;
    PERFORM jq.drop_queue('ts_huge_backoff', force => true);
    RETURN v_state::text;
EXCEPTION WHEN datetime_field_overflow THEN
    RETURN 'fail raised: ' || SQLERRM;  -- the failure could not be recorded
END $$;
SELECT pg_temp.huge_backoff_outcome() IN ('rejected', 'scheduled') AS no_immediate_retry;
-- A lease of 300,000 years: claims must not all fail with 22008 (the queue unusable).
CREATE FUNCTION pg_temp.huge_lease_outcome() RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_claimed bigint;
BEGIN
    PERFORM jq.create_queue('ts_huge_lease');
    BEGIN
        PERFORM jq.alter_queue('ts_huge_lease', lease => interval '300000 years');
    EXCEPTION WHEN invalid_parameter_value THEN
        PERFORM jq.drop_queue('ts_huge_lease', force => true);
        RETURN 'rejected';
    END;
    PERFORM jq.enqueue('ts_huge_lease', '{}');
    SELECT count(*) INTO v_claimed FROM jq.claim('ts_huge_lease', 'w');
    PERFORM jq.drop_queue('ts_huge_lease', force => true);
    RETURN 'claimed ' || v_claimed;
EXCEPTION WHEN datetime_field_overflow THEN
    RETURN 'claim failed: ' || SQLERRM;
END $$;
SELECT pg_temp.huge_lease_outcome() IN ('rejected', 'claimed 1') AS claims_work;
SELECT jq.drop_queue(name, force => true) FROM jq.queues WHERE name IN ('ts_huge_lease', 'ts_huge_backoff');
SELECT jq.drop_queue('ts_neighbour', force => true);
