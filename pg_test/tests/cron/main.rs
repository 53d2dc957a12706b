//! Cron schedules against a real cluster with many connections: exactly one job per (schedule,
//! fire time) whatever the passes do, a fire log that outlives the jobs, restarts
//! that neither reset nor lose the timer, misfire and overlap policies, broken rows that
//! never stop the others, time zones and DST, and a differential test of jq.cron_next
//! against croniter.
//!
//! Time is never waited for: every pass is `jq.cron_tick(at)` with an explicit instant, in the
//! future of the real clock (a schedule's first next_run_at is computed from now()).
//!
//! Each test names the broken variant it was seen failing against (`JQ_TEST_BREAK=<name>
//! cargo test -p jq-pg-test --test cron <test>`); the variants are installed in the test's own
//! database by [`apply_breaks`].

mod calendar;
mod firing;
mod policies;
mod restarts;

use jq_pg_test::{broken, sabotage, Client, TestDb};

const CRON_TICK: &str = "jq.cron_tick(timestamp with time zone)";
const CRON_FIRE: &str = "jq._cron_fire(jq.schedules,timestamp with time zone)";
const SCHEDULE: &str = "jq.schedule(text,text,text,jsonb,text,text,integer,integer,text,text,bigint)";

/// The deliberately broken variants, installed only when the run asks for one.
fn apply_breaks(c: &mut Client) {
    if broken("cron_no_unique") || broken("cron_no_fence") {
        // The fire log loses its (schedule, fire_time) primary key: ON CONFLICT DO NOTHING then
        // inserts every time.
        c.batch_execute("ALTER TABLE jq.cron_runs DROP CONSTRAINT cron_runs_pkey").unwrap();
    }
    if broken("cron_no_row_lock") || broken("cron_no_fence") {
        // The due schedules are read without row locks (cron_no_fence: and no primary key).
        sabotage(c, CRON_TICK, "\n                 FOR UPDATE SKIP LOCKED))", "))", 1);
    }
    if broken("cron_upsert_resets_timer") {
        // jq.schedule recomputes next_run_at from now() on every call (a timer reset by every upsert).
        sabotage(c, SCHEDULE, "THEN excluded.next_run_at ELSE t.next_run_at END", "THEN excluded.next_run_at ELSE excluded.next_run_at END", 1);
    }
    if broken("cron_step_from_stored") {
        // The next fire time is stepped from the stored next_run_at instead of from the pass.
        sabotage(c, CRON_FIRE, "v_next := jq.cron_next(s.cron, _cron_fire.at, s.timezone);", "v_next := jq.cron_next(s.cron, s.next_run_at, s.timezone);", 1);
    }
    if broken("cron_no_overlap_check") {
        sabotage(c, CRON_FIRE, "IF s.overlap = 'skip_if_running' AND", "IF false AND", 1);
    }
    if broken("cron_no_subtransaction") {
        // A failing schedule's error is no longer caught: it escapes jq.cron_tick.
        sabotage(c, CRON_TICK, "EXCEPTION WHEN OTHERS THEN\n            -- A broken row", "EXCEPTION WHEN division_by_zero THEN\n            -- A broken row", 1);
    }
    if broken("cron_no_clock_guard") {
        // jq.cron_tick no longer takes the rows whose next_run_at was computed from a later
        // instant than the pass (the clock went back).
        sabotage(c, CRON_TICK, "WHERE g.enabled AND g.next_run_from > cron_tick.at", "WHERE false", 1);
    }
    if broken("cron_zone_ignored") {
        // Schedules are evaluated in UTC whatever their zone (as pg_cron before 1.5 did).
        sabotage(c, CRON_FIRE, "s.timezone", "'UTC'", 3);
    }
}

/// A test database with the breaks applied and queue `cq` created.
fn setup(tag: &str) -> (TestDb, Client) {
    let db = TestDb::new(tag);
    let mut c = db.connect();
    apply_breaks(&mut c);
    c.batch_execute("SELECT jq.create_queue('cq')").unwrap();
    (db, c)
}

/// Seconds since the Unix epoch of a SQL timestamptz expression.
fn epoch(c: &mut Client, expr: &str) -> i64 {
    c.query_one(&format!("SELECT extract(epoch FROM ({expr}))::bigint"), &[]).unwrap().get(0)
}

/// `jq.cron_tick(at)` with `at` in epoch seconds; returns the jobs enqueued.
fn tick(c: &mut Client, at: i64) -> i32 {
    c.query_one("SELECT jq.cron_tick(to_timestamp($1::bigint))", &[&at]).expect("jq.cron_tick").get(0)
}

/// Fire-log rows of a schedule as (fire time in epoch seconds, outcome, job id).
fn runs(c: &mut Client, schedule: &str) -> Vec<(i64, String, Option<i64>)> {
    c.query(
        "SELECT extract(epoch FROM fire_time)::bigint, outcome, job_id FROM jq.cron_runs
         WHERE schedule = $1 ORDER BY fire_time, outcome",
        &[&schedule],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Jobs of a schedule (its kind is the schedule name).
fn jobs_of(c: &mut Client, schedule: &str) -> i64 {
    c.query_one("SELECT count(*) FROM jq.jobs WHERE kind = $1", &[&schedule]).unwrap().get(0)
}

/// (fired_count, skipped_count, next_run_at in epoch seconds) of a schedule.
fn counters(c: &mut Client, schedule: &str) -> (i64, i64, Option<i64>) {
    let r = c
        .query_one(
            "SELECT fired_count, skipped_count, extract(epoch FROM next_run_at)::bigint
             FROM jq.schedules WHERE name = $1",
            &[&schedule],
        )
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The start of the hour `hours` after the current one, in epoch seconds.
fn hour_ahead(c: &mut Client, hours: i32) -> i64 {
    epoch(c, &format!("date_trunc('hour', now()) + interval '{hours} hours'"))
}
