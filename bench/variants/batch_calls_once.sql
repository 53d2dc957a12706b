-- Not measured yet (session 22): BATCH=100 CONNS="1 4" bench/ab_variant.sh "$(cat bench/variants/batch_calls_once.sql)"
-- Variant: the batch claim calls jq._wake_on_abort once per statement (an InitPlan) instead of
-- once per claimed job, and jq.complete_many calls jq._wake_slot once per distinct queue instead
-- of once per completed job. Same effects: both only note the queue for the end of the
-- transaction. jq._hint_advance stays per job (its rollback and turn logic reads every key).
-- Rewrites the installed definitions (as pg_test's sabotage does), so it follows sql/work.sql.
DO $variant$
DECLARE
    d text;
BEGIN
    d := pg_get_functiondef('jq._claim_batch(text,text,integer,interval,boolean,bigint,boolean)'::regprocedure);
    IF (length(d) - length(replace(d, 'WHERE jq._wake_on_abort(c.queue) AND', ''))) / 36 <> 2 THEN  -- 36: the pattern's length
        RAISE EXCEPTION 'jq._claim_batch changed: expected two per-row jq._wake_on_abort calls';
    END IF;
    EXECUTE replace(d, 'WHERE jq._wake_on_abort(c.queue) AND', 'WHERE (SELECT jq._wake_on_abort(_claim_batch.queue)) AND');
    d := pg_get_functiondef('jq.complete_many(bigint[],uuid[],jsonb[])'::regprocedure);
    IF strpos(d, 'SELECT d.id FROM done d WHERE jq._wake_slot(d.queue) AND') = 0 THEN
        RAISE EXCEPTION 'jq.complete_many changed: expected its per-row jq._wake_slot call';
    END IF;
    EXECUTE replace(d, 'SELECT d.id FROM done d WHERE jq._wake_slot(d.queue) AND',
                    'SELECT d.id FROM done d WHERE (SELECT pg_catalog.bool_and(jq._wake_slot(w.queue)) '
                    'FROM (SELECT DISTINCT d2.queue FROM done d2) w) AND');
END
$variant$;
