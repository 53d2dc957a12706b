//! Exactly one job per (schedule, fire time) whatever the passes and the clock do, and a fire log that outlives jobs.

use jq_pg_test::{claim, complete};
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;

use super::{counters, epoch, hour_ahead, jobs_of, runs, setup, tick};

/// Session A ticks minute M, session B ticks M + 5 s (clock skew, a second
/// scheduler): one fire-log row and one job. Then the schedule's timer is moved back behind M
/// (a clock step: jq.alter_schedule recomputes it from now(), which is before M) and B ticks
/// M + 5 s again: the fire log alone keeps M from being enqueued twice.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_unique: the second pass after the clock step enqueued
/// a second job for M.
#[test]
fn two_passes_for_the_same_minute_enqueue_one_job_even_after_a_clock_step() {
    let (db, mut a) = setup("cron_q25");
    let mut b = db.connect();
    a.batch_execute("SELECT jq.schedule('m', '* * * * *', 'cq')").unwrap();
    // Two hours ahead: at hh:59 the minute after now is the next hour itself, and the clock
    // step below must land strictly before M.
    let m = hour_ahead(&mut a, 2);
    assert_eq!(tick(&mut a, m), 1);
    assert_eq!(tick(&mut b, m + 5), 0);
    assert_eq!(runs(&mut a, "m").iter().filter(|r| r.0 == m).count(), 1);
    assert_eq!(jobs_of(&mut a, "m"), 1);

    // The clock step: the timer goes back to the minute after the real now, before M.
    a.batch_execute("SELECT jq.alter_schedule('m', cron => '*/1 * * * *')").unwrap();
    let (_, _, next) = counters(&mut a, "m");
    assert!(next.unwrap() < m);
    assert_eq!(tick(&mut b, m + 5), 0, "the fire time M was enqueued again");
    assert_eq!(runs(&mut a, "m").iter().filter(|r| r.0 == m).count(), 1);
    assert_eq!(jobs_of(&mut a, "m"), 1);
    // Later minutes still fire.
    assert_eq!(tick(&mut a, m + 60), 1);
    assert_eq!(jobs_of(&mut a, "m"), 2);
}

/// A forward clock step that is then corrected (a VM resumed with a wrong clock, a bad RTC
/// before NTP; here `jq.cron_tick(M + 1 year)` then `jq.cron_tick(M)`) does not silence a
/// schedule for the length of the step: the pass at M sees that next_run_at was computed from a
/// later instant and recomputes it from M, so the schedule fires at M + 1 minute. The fire time
/// the step enqueued is still fenced by the fire log when the real clock reaches it.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_clock_guard: after the pass at M + 30 s, next_run_at
/// was still M + 1 year + 60 s ("next_run_at is still a year ahead").
#[test]
fn a_corrected_forward_clock_step_does_not_silence_a_schedule() {
    let (_db, mut c) = setup("cron_clock_back");
    c.batch_execute("SELECT jq.schedule('cb', '* * * * *', 'cq')").unwrap();
    let m = hour_ahead(&mut c, 1);
    // Daily, twelve hours away from M's hour: a fixed hour made the test fail when run in the
    // hour before it (M itself was then a fire time of the daily schedule too).
    let m_hour: i64 = c
        .query_one("SELECT extract(hour FROM to_timestamp($1::bigint) AT TIME ZONE 'UTC')::bigint", &[&m])
        .unwrap()
        .get(0);
    let daily_hour = (m_hour + 12) % 24;
    c.batch_execute(&format!("SELECT jq.schedule('cb_daily', '0 {daily_hour} * * *', 'cq', misfire => 'skip')")).unwrap();
    let year = epoch(&mut c, &format!("to_timestamp({m}) + interval '1 year'"));
    assert_eq!(tick(&mut c, m), 1, "the minute M fires");
    // The step: one job for the latest minute (fire_once), the rest of the year counted.
    assert_eq!(tick(&mut c, year), 1);
    let (fired0, skipped0, next) = counters(&mut c, "cb");
    assert_eq!(next, Some(year + 60));
    let daily_next = counters(&mut c, "cb_daily").2.unwrap();
    assert!(daily_next > year);
    // The clock is back, 30 s after M.
    assert_eq!(tick(&mut c, m + 30), 0);
    assert_eq!(counters(&mut c, "cb"), (fired0, skipped0, Some(m + 60)), "next_run_at is still a year ahead");
    let daily_back = counters(&mut c, "cb_daily").2.unwrap();
    assert!(daily_back > m && daily_back <= m + 86400, "the daily schedule is still a year ahead");
    assert_eq!(tick(&mut c, m + 60), 1, "the schedule stayed silent after the clock went back");
    assert_eq!(tick(&mut c, m + 120), 1);
    assert_eq!(jobs_of(&mut c, "cb"), 4);
    // A pass at the instant of the step again: its minute (the latest due) is not enqueued again.
    assert_eq!(tick(&mut c, year), 0, "the fire time enqueued by the step was enqueued again");
    assert_eq!(runs(&mut c, "cb").iter().filter(|r| r.0 == year).count(), 1);
    assert_eq!(tick(&mut c, year + 60), 1);
}

/// Many sessions tick the same instants at once (several schedulers, a stale leader): every
/// (schedule, fire time) is enqueued exactly once.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_fence (no row lock on due schedules and no primary key
/// on the fire log): up to 8 fire-log rows and jobs per fire time. Either fence alone is enough:
/// the test passes with JQ_TEST_BREAK=cron_no_unique and with JQ_TEST_BREAK=cron_no_row_lock.
#[test]
fn concurrent_passes_at_the_same_instant_enqueue_each_fire_time_once() {
    const SESSIONS: usize = 8;
    const MINUTES: i64 = 15;
    let (db, mut c) = setup("cron_conc");
    for name in ["s1", "s2", "s3"] {
        c.execute("SELECT jq.schedule($1, '* * * * *', 'cq')", &[&name]).unwrap();
    }
    let m = hour_ahead(&mut c, 1);
    let barrier = Arc::new(Barrier::new(SESSIONS));
    let handles: Vec<_> = (0..SESSIONS)
        .map(|_| {
            let mut s = db.connect();
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut n = 0;
                for k in 0..MINUTES {
                    barrier.wait();
                    n += tick(&mut s, m + 60 * k + (k % 3));
                }
                n
            })
        })
        .collect();
    let enqueued: i32 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    for name in ["s1", "s2", "s3"] {
        let r = runs(&mut c, name);
        let mut per_time: HashMap<i64, usize> = HashMap::new();
        for (t, _, _) in r.iter().filter(|r| r.0 >= m) {
            *per_time.entry(*t).or_default() += 1;
        }
        assert_eq!(per_time.len() as i64, MINUTES, "{name}: {r:?}");
        assert!(per_time.values().all(|&n| n == 1), "{name}: fire times logged twice: {per_time:?}");
        let dup_jobs: i64 = c
            .query_one(
                "SELECT count(*) - count(DISTINCT r.fire_time) FROM jq.cron_runs r
                 JOIN jq.jobs j ON j.id = r.job_id WHERE r.schedule = $1",
                &[&name],
            )
            .unwrap()
            .get(0);
        assert_eq!(dup_jobs, 0);
    }
    // The first pass also fired each schedule's latest time before M (its first due time).
    let jobs: i64 = c.query_one("SELECT count(*) FROM jq.jobs", &[]).unwrap().get(0);
    assert_eq!(jobs, 3 * MINUTES, "jobs enqueued: {jobs}");
    assert_eq!(i64::from(enqueued), jobs);
}

/// good_job #731: the fire log, not the job row, is what dedupes. The job of M completes and is
/// pruned at once (completed-job retention 0); a pass at the same instant after a clock step
/// still enqueues nothing, because the fire-log row of M is kept for its own retention.
///
/// Seen failing with JQ_TEST_BREAK=cron_no_unique: the pass after pruning enqueued M again.
#[test]
fn the_fire_log_survives_job_pruning() {
    let (_db, mut c) = setup("cron_prune");
    // history_retention too: completed jobs are kept at least min(history_retention, 5 minutes).
    c.batch_execute(
        "SELECT jq.alter_queue('cq', retention => '0', history_retention => '0');
         SELECT jq.schedule('p', '* * * * *', 'cq')",
    )
    .unwrap();
    let m = hour_ahead(&mut c, 1);
    assert_eq!(tick(&mut c, m), 1);
    let job = claim(&mut c, "cq", "w", 1, None).pop().expect("the job of M");
    assert!(complete(&mut c, &job));
    // Two minutes on: with retention 0 the history ring moves on every minute (the first pass),
    // and the table holding the job is truncated whole (the next; sql/history.sql).
    c.query_one("SELECT jq._prune(clock_timestamp() + interval '2 minutes')", &[]).unwrap();
    let pruned: i32 = c.query_one("SELECT jq._prune(clock_timestamp() + interval '2 minutes')", &[]).unwrap().get(0);
    assert!(pruned >= 1);
    assert_eq!(jobs_of(&mut c, "p"), 0, "the completed job is pruned");
    c.batch_execute("SELECT jq.alter_schedule('p', cron => '*/1 * * * *')").unwrap();
    assert_eq!(tick(&mut c, m), 0, "M enqueued again after its job was pruned");
    assert_eq!(jobs_of(&mut c, "p"), 0);
    assert_eq!(runs(&mut c, "p").iter().filter(|r| r.0 == m).count(), 1);
    // The fire log is pruned by its own retention, in bounded batches.
    let pruned: i32 = c
        .query_one(
            "SELECT jq._cron_prune(to_timestamp($1::bigint) + jq.cron_log_retention() + interval '1 second')",
            &[&m],
        )
        .unwrap()
        .get(0);
    assert!(pruned >= 1);
    let left: i64 = c
        .query_one("SELECT count(*) FROM jq.cron_runs WHERE fire_time <= to_timestamp($1::bigint)", &[&m])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}
