-- bench/dashboard: about 1,000,000 jobs in mixed states over four queues, made through jq's own
-- functions (enqueue_many, claim, complete_many, fail), committed in batches.
SELECT jq.create_queue(q, max_attempts => 1) FROM unnest(ARRAY['bench.a', 'bench.b', 'bench.c', 'bench.d']) q;

-- Completed (300,000), dead (60,000) and running (2,000) jobs: claimed in batches of 1,000.
CREATE PROCEDURE pg_temp.finish(q text, batches int, how text) LANGUAGE plpgsql AS $$
DECLARE
    ids  bigint[];
    toks uuid[];
BEGIN
    FOR i IN 1..batches LOOP
        SELECT array_agg(c.id), array_agg(c.lease_token) INTO ids, toks
        FROM jq.claim(q, 'bench-' || i, 1000, lease => '1 day') c;
        EXIT WHEN ids IS NULL;
        IF how = 'complete' THEN
            PERFORM jq.complete_many(ids, toks);
        ELSIF how = 'fail' THEN
            PERFORM jq.fail(u.id, u.t, 'bench: deliberate failure ' || (u.id % 7)) FROM unnest(ids, toks) AS u(id, t);
        END IF;
        COMMIT;
    END LOOP;
END $$;

DO $$
DECLARE
    q text;
BEGIN
    FOREACH q IN ARRAY ARRAY['bench.a', 'bench.b', 'bench.c'] LOOP
        FOR i IN 1..5 LOOP
            PERFORM jq.enqueue_many(q, (SELECT jsonb_agg(jsonb_build_object('n', g, 'to', 'user' || g || '@example.com'))
                                         FROM generate_series(1, 20000) g));
            COMMIT;
        END LOOP;
    END LOOP;
END $$;
CALL pg_temp.finish('bench.a', 100, 'complete');
CALL pg_temp.finish('bench.b', 100, 'complete');
CALL pg_temp.finish('bench.c', 100, 'complete');

DO $$
BEGIN
    FOR i IN 1..3 LOOP
        PERFORM jq.enqueue_many('bench.d', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, 20000) g));
        COMMIT;
    END LOOP;
END $$;
CALL pg_temp.finish('bench.d', 60, 'fail');

-- Ready (600,000, three priorities) and scheduled (38,000) jobs, and 2,000 running.
DO $$
DECLARE
    q text;
BEGIN
    FOREACH q IN ARRAY ARRAY['bench.a', 'bench.b', 'bench.c'] LOOP
        FOR i IN 1..10 LOOP
            PERFORM jq.enqueue_many(q, (SELECT jsonb_agg(jsonb_build_object('payload', jsonb_build_object('n', g),
                                                                             'priority', g % 3))
                                         FROM generate_series(1, 20000) g), specs => true);
            COMMIT;
        END LOOP;
    END LOOP;
    FOR i IN 1..2 LOOP
        PERFORM jq.enqueue_many('bench.d', (SELECT jsonb_agg(jsonb_build_object('n', g)) FROM generate_series(1, 19000) g),
                                run_at => now() + interval '1 hour');
        COMMIT;
    END LOOP;
END $$;
CALL pg_temp.finish('bench.c', 2, 'keep');
-- Flow control on one queue (shown on the overview), set after loading so the claims above are not rate limited.
SELECT jq.alter_queue('bench.b', rate_limit => 1000, rate_period => '1 second', burst => 100) IS NOT NULL;
VACUUM ANALYZE jq.jobs;
SELECT queue, state, count(*) FROM jq.jobs GROUP BY 1, 2 ORDER BY 1, 2;
